"""vLLM: `vllm serve MODEL ...` (the OpenAI-compatible server). No build step: startup is measured instead.

Follows vLLM 0.10.1.1 (engine arguments and `vllm serve` as documented for that release; docs/ENGINES.md cites them):

    vllm serve meta-llama/Llama-3.1-70B-Instruct --host H --port P --tensor-parallel-size 8 \
        --dtype auto --quantization fp8 --max-model-len 4096 --max-num-seqs 256 \
        --gpu-memory-utilization 0.9 --block-size 16 --enable-prefix-caching --enable-chunked-prefill

Precision -> flags. vLLM's --dtype takes auto|half|float16|bfloat16|float|float32 only: the seed article's
`vllm serve --dtype fp8` is rejected by vLLM. FP8 is a quantization method (`--quantization fp8`: weights quantised
to FP8 on load from a 16-bit checkpoint, or an FP8 checkpoint used as is) and, separately, an FP8 KV cache
(`--kv-cache-dtype fp8`, the `kv_cache_dtype` option). int4-awq serves an AWQ-quantised checkpoint with
`--quantization awq` (vLLM cannot AWQ-quantise on load; `quantization: awq_marlin` picks the faster kernel).

    fp16 -> --dtype float16      bf16 -> --dtype bfloat16
    fp8  -> --dtype auto --quantization fp8      int4-awq -> --dtype float16 --quantization awq

Health: GET /health (200 when the engine is up). Metrics: GET /metrics, Prometheus text (vllm:* names).
Startup phases (weights load, CUDA-graph capture, engine init) are read from the server log by startup_phases().

Agent-side code: stdlib only.
"""

from __future__ import annotations

import re
from typing import Any

from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.checkpoint import CheckpointEngineAdapter
from wattbench_agent.engines.options import Flag, to_flags

FOLLOWS = "0.10.1.1"

OPTIONS: dict[str, Flag] = {
    "dtype": Flag("--dtype", str, help="override the dtype derived from precision"),
    "quantization": Flag("--quantization", str, help="override the method derived from precision (awq_marlin, ...)"),
    "kv_cache_dtype": Flag("--kv-cache-dtype", str, help="auto | fp8 | fp8_e4m3 | fp8_e5m2"),
    "max_model_len": Flag("--max-model-len", int),
    "max_num_seqs": Flag("--max-num-seqs", int),
    "max_num_batched_tokens": Flag("--max-num-batched-tokens", int),
    "gpu_memory_utilization": Flag("--gpu-memory-utilization", float),
    # vLLM >= 0.11: KV cache size in bytes, no memory profiling (engines sharing a GPU then size deterministically)
    "kv_cache_memory_bytes": Flag("--kv-cache-memory-bytes", int),
    "block_size": Flag("--block-size", int),
    "enable_prefix_caching": Flag("--enable-prefix-caching", bool, negatable=True),
    "enable_chunked_prefill": Flag("--enable-chunked-prefill", bool, negatable=True),
    "enforce_eager": Flag("--enforce-eager", bool),
    "swap_space": Flag("--swap-space", float),
    "seed": Flag("--seed", int),
    "served_model_name": Flag("--served-model-name", str),
    "tokenizer": Flag("--tokenizer", str),
    "trust_remote_code": Flag("--trust-remote-code", bool),
    "download_dir": Flag("--download-dir", str),
}

PRECISIONS = {  # precision -> (--dtype, --quantization)
    "fp16": ("float16", None),
    "bf16": ("bfloat16", None),
    "fp8": ("auto", "fp8"),
    "int4-awq": ("float16", "awq"),
}

_PHASES = (
    ("weights_load_s", re.compile(r"Model loading took [\d.]+ ?GiB and ([\d.]+) s(?:ec(?:ond)?s?)?")),
    ("weights_load_s", re.compile(r"Loading weights took ([\d.]+) s")),
    ("cuda_graph_capture_s", re.compile(r"Graph capturing finished in ([\d.]+) s")),
    ("engine_init_s", re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")),
)


class VllmAdapter(CheckpointEngineAdapter):
    phases = _PHASES
    option_table = OPTIONS
    precisions = PRECISIONS
    name = "vllm"
    follows_version = FOLLOWS
    # 0.25.0: run end to end on an H200 (results/h200-vllm/); its log lines and /metrics page are in the contract
    # tests (tests/engines/data/vllm-0.25.0.*).
    checked_versions = ("0.10.1.1", "0.25.0")
    version_path = "/version"
    version_patterns = (
        re.compile(r"Initializing a V1 LLM engine \(v([0-9][\w.+-]*)\)"),
        re.compile(r"vLLM API server version ([0-9][\w.+-]*)"),
    )
    health_path = "/health"
    metrics_path = "/metrics"
    source = "measured"

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        opts = self.serve_options(cfg, artifact_path)
        return ["vllm", "serve", artifact_path or cfg.model, "--host", host, "--port", str(port),
                "--tensor-parallel-size", str(cfg.tp), *to_flags(opts, OPTIONS)]

    def _resolved_extra(self, cfg: EngineConfig, opts: dict[str, Any]) -> dict[str, Any]:
        return {**opts, "command": self.serve_command(cfg, "HOST", 0)[:3] + to_flags(opts, OPTIONS)}
