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

Health: GET /health (200 when the engine is up). Metrics: GET /metrics, Prometheus text (vllm:* names; METRICS
below lists what wattbench reads, by release). Version: GET /version, else the log. Startup phases are read from the
server log by startup_phases() (STARTUP_PHASES below says which line each comes from).

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

# Startup phases, from the lines vLLM logs while it starts (checked against 0.10.1.1's wording, which the fake
# engine prints, and against the real 0.25.0 log in tests/engines/data/vllm-serve-0.25.0.log):
#   weights_load_s        "Model loading took 14.96 GiB and 4.102294 seconds" (0.25; 0.10: "... 14.9595 GiB and
#                         2.1 seconds"; some releases "... GiB memory and ..."): the whole model load of a worker -
#                         building the model on the GPU, reading the checkpoint and processing the weights after
#                         loading, which is where `--quantization fp8` quantizes a 16-bit checkpoint online. This
#                         is the weights load: the GPU holds the servable weights only at its end.
#   weights_read_s        "Loading weights took 2.32 seconds": reading the checkpoint files into the model, a part
#                         of weights_load_s (on the H200, 15 GiB: 2.2-2.9 s of 4.1-5.4 s; fp8's online
#                         quantization adds ~0.4 s to the rest, results/h200-vllm/).
#   compile_s             "torch.compile took 3.91 s in total" (0.25; 0.10: "torch.compile takes ... in total"):
#                         Dynamo tracing plus Inductor compilation, or loading both from vLLM's compile cache
#                         (3.9 s from the cache; 21-27 s bf16 and 39-47 s fp8 when compiled, on the H200).
#   cuda_graph_capture_s  "Graph capturing finished in 4 secs, took 0.59 GiB" (whole seconds, as logged).
#   engine_init_s         "init engine (profile, create kv cache, warmup model) took 25.38 s (compilation: 3.91 s)"
#                         (0.10: "... took 25.38 seconds"): everything after the weights load until the engine
#                         core is ready; includes compile_s and cuda_graph_capture_s.
# deployments.startup_s (process start to a healthy /health) contains all of them, plus interpreter start-up and
# imports (about a minute on the H200 node) and the API server's start.
STARTUP_PHASES = (
    ("weights_load_s", re.compile(r"Model loading took [\d.]+ ?GiB(?: memory)? and ([\d.]+) s")),
    ("weights_read_s", re.compile(r"Loading weights took ([\d.]+) s")),
    ("compile_s", re.compile(r"torch\.compile (?:took|takes) ([\d.]+) s in total")),
    ("cuda_graph_capture_s", re.compile(r"Graph capturing finished in ([\d.]+) s")),
    ("engine_init_s", re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")),
)

# What wattbench reads from vLLM's /metrics, by what it measures: the vLLM 0.25.0 name first, then the name the same
# series had in 0.10.1.1 where it differs. Readers take the first name a page has (sql/views.sql v_client_vs_server
# does so for the latency histograms). History: vLLM 0.10 serves vllm:gpu_cache_usage_perc (deprecated, next to
# vllm:kv_cache_usage_perc) and vllm:time_per_output_token_seconds, a per-token inter-token latency histogram; 0.11
# renamed that one vllm:inter_token_latency_seconds and added the per-request
# vllm:request_time_per_output_token_seconds; later releases removed both old names, and 0.25.0 serves only the new
# ones (tests/engines/data/vllm-metrics-0.25.0.txt). Labels on 0.25.0: model_name and engine (the engine core's index).
METRICS: dict[str, tuple[str, ...]] = {
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
    "requests_finished": ("vllm:request_success_total",),
    "ttft": ("vllm:time_to_first_token_seconds",),  # histogram
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),  # histogram, per token
    "tpot": ("vllm:request_time_per_output_token_seconds",),  # histogram, per request (0.11+)
    "e2e": ("vllm:e2e_request_latency_seconds",),  # histogram
    # TTFT's parts as the engine core stamps them, per request at its finish: queued -> scheduled, scheduled -> first
    # token (sql/views.sql v_engine_ttft_split)
    "queue": ("vllm:request_queue_time_seconds",),  # histogram
    "prefill": ("vllm:request_prefill_time_seconds",),  # histogram
}


def metric_name(names_on_page: set[str] | frozenset[str], what: str) -> str | None:
    """The name under which a page serves `what` (a METRICS key): the newest name present, else an older one, else
    None. `names_on_page` holds sample names, so a histogram counts as present by its _count sample."""
    for name in METRICS[what]:
        if name in names_on_page or f"{name}_count" in names_on_page:
            return name
    return None


class VllmAdapter(CheckpointEngineAdapter):
    phases = STARTUP_PHASES
    option_table = OPTIONS
    precisions = PRECISIONS
    name = "vllm"
    image = "vllm/vllm-openai:v0.10.1.1"
    follows_version = FOLLOWS
    # 0.25.0: run end to end on an H200 (results/h200-vllm/); its log and /metrics page are the contract tests' data
    # (tests/engines/data/vllm-serve-0.25.0.log, vllm-metrics-0.25.0.txt; tests/engines/test_vllm_contract.py).
    checked_versions = ("0.10.1.1", "0.25.0")
    version_path = "/version"  # {"version": "0.25.0"}
    version_patterns = (
        re.compile(r"Initializing a V1 LLM engine \(v([0-9][\w.+-]*)\)"),  # the engine core, 0.10 and 0.25
        re.compile(r"[\u2580-\u259f]\s+version ([0-9][\w.+-]*)\s*$", re.MULTILINE),  # 0.25's start banner
        re.compile(r"vLLM API server version ([0-9][\w.+-]*)"),  # the API server's first line up to 0.10
    )
    start_failure_hints = (
        # vLLM 0.25's top-k/top-p sampler imports FlashInfer when it is built, unless told not to (seen on the H200
        # node, whose vLLM was installed without flashinfer).
        (
            re.compile(r"No module named '?flashinfer"),
            "vLLM's top-k/top-p sampler needs flashinfer unless VLLM_USE_FLASHINFER_SAMPLER=0 is in the engine's "
            "environment (plan: engines[].env); install flashinfer or set it",
        ),
    )
    health_path = "/health"
    metrics_path = "/metrics"
    source = "measured"

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        opts = self.serve_options(cfg, artifact_path)
        return [
            "vllm",
            "serve",
            artifact_path or cfg.model,
            "--host",
            host,
            "--port",
            str(port),
            "--tensor-parallel-size",
            str(cfg.tp),
            *to_flags(opts, OPTIONS),
        ]

    def _resolved_extra(self, cfg: EngineConfig, opts: dict[str, Any]) -> dict[str, Any]:
        return {**opts, "command": self.serve_command(cfg, "HOST", 0)[:3] + to_flags(opts, OPTIONS)}
