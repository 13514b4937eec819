"""SGLang: `python3 -m sglang.launch_server --model-path MODEL ...`. No build step: startup is measured instead.

Follows SGLang 0.5 (the server arguments page, `python3 -m sglang.launch_server --help`, and the production metrics
page; docs/ENGINES.md cites them):

    python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --host H --port P --tp-size 8 \
        --dtype auto --quantization fp8 --context-length 4096 --max-running-requests 256 \
        --mem-fraction-static 0.88 --enable-metrics

Precision -> flags as for vLLM: --dtype takes auto|half|float16|bfloat16|float|float32; fp8 is
`--quantization fp8` (and an FP8 KV cache is `--kv-cache-dtype fp8_e4m3`, option kv_cache_dtype); int4-awq serves an
AWQ checkpoint with `--quantization awq`. --enable-metrics is always passed, so /metrics serves Prometheus text
(sglang:* names). Health: GET /health answers once the server is up; GET /health_generate runs a one-token
generation, which Kubernetes uses as the readiness probe (readiness_path).

The interpreter is `python3` from the PATH (the engine image's), or the `python` option / $WATTBENCH_SGLANG_PYTHON.

Agent-side code: stdlib only.
"""

from __future__ import annotations

import os
import re
from typing import Any

from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.checkpoint import CheckpointEngineAdapter
from wattbench_agent.engines.options import Flag, to_flags

FOLLOWS = "0.5"

OPTIONS: dict[str, Flag] = {
    "dtype": Flag("--dtype", str),
    "quantization": Flag("--quantization", str),
    "kv_cache_dtype": Flag("--kv-cache-dtype", str, help="auto | fp8_e5m2 | fp8_e4m3"),
    "context_length": Flag("--context-length", int),
    "max_running_requests": Flag("--max-running-requests", int),
    "max_total_tokens": Flag("--max-total-tokens", int),
    "mem_fraction_static": Flag("--mem-fraction-static", float),
    "chunked_prefill_size": Flag("--chunked-prefill-size", int),
    "max_prefill_tokens": Flag("--max-prefill-tokens", int),
    "schedule_policy": Flag("--schedule-policy", str),
    "disable_radix_cache": Flag("--disable-radix-cache", bool),
    "disable_cuda_graph": Flag("--disable-cuda-graph", bool),
    "cuda_graph_max_bs": Flag("--cuda-graph-max-bs", int),
    "served_model_name": Flag("--served-model-name", str),
    "tokenizer_path": Flag("--tokenizer-path", str),
    "trust_remote_code": Flag("--trust-remote-code", bool),
    "random_seed": Flag("--random-seed", int),
    "python": Flag(None, str, help="interpreter that has sglang installed (default python3)"),
}
# The names the vLLM-style plans use, mapped onto SGLang's own flags.
ALIASES = {
    "max_model_len": "context_length",
    "max_num_seqs": "max_running_requests",
    "gpu_memory_utilization": "mem_fraction_static",
}

PRECISIONS = {
    "fp16": ("float16", None),
    "bf16": ("bfloat16", None),
    "fp8": ("auto", "fp8"),
    "int4-awq": ("float16", "awq"),
}

_PHASES = (
    ("weights_load_s", re.compile(r"Load weight end\..*?elapsed[=:]\s*([\d.]+)")),
    ("cuda_graph_capture_s", re.compile(r"Capture cuda graph end\. Time elapsed:\s*([\d.]+)")),
)


class SglangAdapter(CheckpointEngineAdapter):
    phases = _PHASES
    option_table = OPTIONS
    precisions = PRECISIONS
    aliases = ALIASES
    name = "sglang"
    image = "lmsysorg/sglang:latest"
    follows_version = FOLLOWS
    checked_versions = ("0.5.0",)  # by contract tests only: no SGLang has run under wattbench yet
    version_path = "/get_server_info"  # SGLang's server info carries its "version"
    health_path = "/health"
    readiness_path = "/health_generate"
    metrics_path = "/metrics"
    source = "measured"

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        opts = self.serve_options(cfg, artifact_path)
        python = opts.pop("python", None) or os.environ.get("WATTBENCH_SGLANG_PYTHON") or "python3"
        return [
            python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            artifact_path or cfg.model,
            "--host",
            host,
            "--port",
            str(port),
            "--tp-size",
            str(cfg.tp),
            *to_flags(opts, OPTIONS),
            "--enable-metrics",
        ]

    def _resolved_extra(self, cfg: EngineConfig, opts: dict[str, Any]) -> dict[str, Any]:
        opts.pop("python", None)
        return {**opts, "enable_metrics": True}
