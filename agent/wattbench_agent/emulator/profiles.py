"""Engine profiles: their knobs (as `--config KEY=VALUE`), their kernel factors, and the HBM fit check."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from wattbench_agent.emulator import calibration
from wattbench_agent.emulator.perf import Deployment, KernelFactors
from wattbench_agent.emulator.specs import gpu_spec, model_spec, precision_spec

EMULATOR_VERSION = "0.3.0"
PROFILES = ("trtllm-like", "vllm-like")
# The engine release each profile speaks for (its /version's "emulates"): the vllm-like /metrics page uses exactly
# vLLM 0.25.0's names, labels and HELP texts for what it emulates; trtllm-like takes trtllm-build 0.18.2's knobs
# (the trtllm adapter's release) and serves the same vLLM-named page, since TensorRT-LLM 0.18 has no Prometheus page.
EMULATES = {"vllm-like": "vllm 0.25.0", "trtllm-like": "tensorrt-llm 0.18.2"}

# ---- kernel factors (docs/EMULATOR.md, "Factors"). vllm-like: the values below, with those the real-hardware
# calibration fitted on every committed H200 vLLM 0.25.0 bundle over them (calibration.json, written by
# `python -m wattbench.twin --fit`; host times per step and sequence from the earlier ML.ENERGY-only fit).
# trtllm-like: ASSUMPTIONS, never measured against TensorRT-LLM; most are set relative to vllm-like's fitted value
# (TRT_RELATIVE), each one's source is in benchmarks/emulator_calibration.py (TRT_ASSUMPTIONS), and every seed claim
# is checked against each +-20%.
_INTAKE_S, _FINISH_S, _INTAKE_LATENCY_S = 0.005, 0.0013, 0.015  # API server, fitted on the H200 vLLM runs
# vLLM V1: torch.compile + CUDA graphs, FlashAttention (bf16 math), CUTLASS scaled-mm fp8 GEMMs, Python scheduler
# (serial with the GPU unless async_scheduling, the vLLM 0.25 default), custom all-reduce
_VLLM = KernelFactors(
    gemm_eff=0.707,
    attn_eff=0.899,
    fp8_attention=False,
    mem_eff=0.752,
    layer_overhead_s=2.5e-6,
    allreduce_latency_s=2.5e-6,
    nvlink_eff=0.90,
    step_overhead_s=0.15e-3,
    seq_overhead_s=3.0e-6,
    frontend_event_s=30e-6,
    host_overlap=0.0,
    fp8_gemm_scale=0.724,
    fp8_act_quant_layer_s=4e-05,
    fp8_act_quant_bytes=7.44,
    intake_s=_INTAKE_S,
    finish_s=_FINISH_S,
    intake_latency_s=_INTAKE_LATENCY_S,
    # vLLM 0.25's CUDA graphs (FULL_AND_PIECEWISE, largest capture 512 tokens: its log): a prefill-carrying step of
    # more tokens runs outside them, launched by the host layer by layer (eager_layer_s: fitted, its spread measured);
    # a smaller mixed step replays piecewise graphs around its attention: a share of the launches, ASSUMED (no
    # measured step carried a prefill of 512 tokens or fewer)
    eager_layer_s=0.0,
    graph_max_tokens=512,
    piecewise_share=0.3,
)
_VLLM = replace(_VLLM, **calibration.kernel_factors("vllm-like"))
# TensorRT-LLM: fused kernels, fp8 context FMHA, C++ runtime with CUDA graphs whose scheduler overlaps the GPU
# (host_overlap), custom all-reduce. Assumed ratios to vLLM's fitted factors: GEMMs ~10% better (fused epilogues,
# tuned tactics), attention ~20% better (fp8 FMHA), the same weight-streaming bandwidth (same kernel class).
TRT_RELATIVE = {"gemm_eff": 1.10, "attn_eff": 1.20, "mem_eff": 1.0}
FACTORS: dict[str, KernelFactors] = {
    "trtllm-like": KernelFactors(
        gemm_eff=min(0.95, _VLLM.gemm_eff * TRT_RELATIVE["gemm_eff"]),
        attn_eff=min(0.95, _VLLM.attn_eff * TRT_RELATIVE["attn_eff"]),
        fp8_attention=True,
        mem_eff=_VLLM.mem_eff * TRT_RELATIVE["mem_eff"],
        layer_overhead_s=1.5e-6,
        allreduce_latency_s=2.5e-6,
        nvlink_eff=0.90,
        step_overhead_s=0.20e-3,
        seq_overhead_s=1.0e-6,
        frontend_event_s=20e-6,
        host_overlap=1.0,
        fp8_gemm_scale=0.95,
        intake_s=_VLLM.intake_s,
        finish_s=_VLLM.finish_s,
        intake_latency_s=_VLLM.intake_latency_s,
        # TensorRT engines are launched from C++ (no Python between kernels): the host's launch time of a context
        # step taken as hidden behind the GPU, ASSUMED (vLLM-like's is measured)
        eager_layer_s=0.0,
    ),
    "vllm-like": _VLLM,
}

# ---- knobs: name -> (default, help). None = derived from the model / deployment ----
KNOBS: dict[str, dict[str, tuple[Any, str]]] = {
    "trtllm-like": {
        "max_batch_size": (128, "compiled: most sequences in flight (trtllm-build --max_batch_size)"),
        "max_input_len": (2048, "compiled: longest prompt (trtllm-build --max_input_len)"),
        "max_seq_len": (4096, "compiled: prompt + output; longer requests are truncated silently"),
        "max_num_tokens": (8192, "compiled: most tokens per iteration (trtllm-build --max_num_tokens)"),
        "kv_cache_free_gpu_mem_fraction": (0.9, "share of free HBM given to the KV cache"),
        "kv_cache_dtype": ("auto", "auto (the precision's: fp8 KV with fp8) | fp8 | bf16 | fp16"),
        "tokens_per_block": (32, "paged KV block size in tokens"),
        "enable_chunked_context": (False, "split long prompts over iterations"),
        "scheduler_policy": ("guaranteed_no_evict", "guaranteed_no_evict | max_utilization"),
        "stream_interval": (1, "least tokens per SSE event"),
        "power_limit_w": (None, "per-GPU power limit (default: TDP)"),
        "served_model_name": (None, "extra model name accepted by the API"),
    },
    "vllm-like": {
        "max_num_seqs": (256, "most sequences in a batch (--max-num-seqs)"),
        "max_num_batched_tokens": (8192, "token budget per step, chunked prefill (--max-num-batched-tokens)"),
        "max_model_len": (None, "context length (--max-model-len; default: the model's)"),
        "gpu_memory_utilization": (0.9, "share of HBM the engine may use (--gpu-memory-utilization)"),
        "kv_cache_memory_bytes": (
            None,
            "KV cache size per GPU in bytes, instead of what gpu_memory_utilization leaves (--kv-cache-memory-bytes)",
        ),
        "block_size": (16, "paged KV block size in tokens (--block-size)"),
        "enable_prefix_caching": (True, "reuse KV blocks of shared prompt prefixes (--enable-prefix-caching)"),
        "eager_layer_s": (
            None,
            "host time per layer to launch a prefill-carrying step of more than 512 tokens outside CUDA graphs: the "
            "host's speed (default: the calibration's median over measured H200 hosts; their spread is in "
            "calibration.json)",
        ),
        "async_scheduling": (
            False,
            "schedule step n+1 while step n runs (--async-scheduling; on by default in the "
            "vLLM 0.25.0 measured on the H200, off in 0.11)",
        ),
        "quantization": (
            "checkpoint",
            "fp8 only: checkpoint (pre-quantised fp8 weights, static activation scales) | "
            "online (--quantization fp8 on a 16-bit checkpoint: weights quantised at load, "
            "dynamic activation scales, KV cache 16-bit unless kv_cache_dtype=fp8)",
        ),
        "kv_cache_dtype": (
            "auto",
            "auto (fp8 KV with an fp8 checkpoint, 16-bit with online fp8 and 16-bit "
            "precisions) | fp8 | bf16 | fp16 (--kv-cache-dtype)",
        ),
        "stream_interval": (1, "least tokens per SSE event"),
        "power_limit_w": (None, "per-GPU power limit (default: TDP)"),
        "served_model_name": (None, "extra model name accepted by the API"),
    },
}


# every integer knob (batch sizes, token budgets, lengths, block sizes, intervals) counts something: 1 to int32's top
MAX_INT_KNOB = 2**31 - 1


class ConfigError(ValueError):
    """A bad profile, knob or value."""


class EngineStartupError(RuntimeError):
    """The deployment does not fit: raised before the server listens. `kind` is the engine's error class."""

    def __init__(self, kind: str, text: str):
        super().__init__(f"{kind}: {text}")
        self.kind = kind
        self.text = text


def parse_value(raw: str) -> Any:
    s = raw.strip()
    low = s.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def parse_config_items(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--config expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip().replace("-", "_")] = parse_value(v)
    return out


@dataclass
class EngineSetup:
    """A resolved, checked deployment: everything the scheduler and server need."""

    profile: str
    dep: Deployment
    options: dict[str, Any]
    kv_blocks: int  # per GPU (= per deployment: TP shards each block)
    block_size: int
    hbm_used_bytes: float  # per GPU
    max_model_len: int
    server_start: int = 1  # which start of the engine this is (with_server_start)

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    def summary(self) -> dict[str, Any]:
        d = self.dep
        return {
            "profile": self.profile,
            "model": d.model.id,
            "gpu": d.gpu.id,
            "gpu_name": d.gpu.name,
            "tp": d.tp,
            "precision": d.precision.id,
            "options": self.options,
            "kv_blocks": self.kv_blocks,
            "block_size": self.block_size,
            "kv_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len,
            "weights_gib_per_gpu": round(d.weight_bytes_per_gpu / 2**30, 2),
            "hbm_used_mib_per_gpu": round(self.hbm_used_bytes / 2**20, 1),
            "kv_bytes_per_token": d.kv_bytes_per_token,
            "kv_bytes_per_element": d.kv_bytes_elem,
            "online_fp8": d.online_fp8,
            "power_limit_w": d.power_limit_w,
            "emulator_version": EMULATOR_VERSION,
            "source": "emulated",
        }


def resolve_options(profile: str, options: dict[str, Any] | None) -> dict[str, Any]:
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; known profiles: {', '.join(PROFILES)}")
    knobs = KNOBS[profile]
    out = {k: v[0] for k, v in knobs.items()}
    for k, v in (options or {}).items():
        key = str(k).replace("-", "_")
        if key not in knobs:
            raise ConfigError(
                f"unknown config key {k!r} for profile {profile}; accepted keys: {', '.join(sorted(knobs))}"
            )
        default = knobs[key][0]
        if isinstance(v, str) and not isinstance(default, str):
            v = parse_value(v)
        if isinstance(default, bool) and not isinstance(v, bool):
            raise ConfigError(f"config key {key!r} expects true/false, got {v!r}")
        counts = isinstance(default, int) and not isinstance(default, bool)
        if isinstance(v, float) and not math.isfinite(v):  # 1e400 is inf: int() of it was an OverflowError
            expected = f"an integer from 1 to {MAX_INT_KNOB:,}" if counts else "a finite number"
            raise ConfigError(f"config key {key!r} = {v!r}; expected {expected}")
        if isinstance(default, (int, float)) and not isinstance(default, bool) and v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"config key {key!r} expects a number, got {v!r}")
            if counts:
                if float(v) != int(v) or not 1 <= v <= MAX_INT_KNOB:
                    raise ConfigError(f"config key {key!r} = {v!r}; expected an integer from 1 to {MAX_INT_KNOB:,}")
                v = int(v)
        out[key] = v
    return out


def setup(
    profile: str, model: str, gpu: str, tp: int, precision: str, options: dict[str, Any] | None = None
) -> EngineSetup:
    """Resolve and check a deployment. Raises SpecError/ConfigError (bad input) or EngineStartupError (no fit)."""
    opts = resolve_options(profile, options)
    m, g, p = model_spec(model), gpu_spec(gpu), precision_spec(precision)
    if not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"--tp must be a positive integer, got {tp!r}")
    if m.heads % tp:
        raise ConfigError(f"--tp {tp} does not divide the {m.heads} attention heads of {m.id}")
    for k in (
        "max_batch_size",
        "max_num_tokens",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "tokens_per_block",
        "max_input_len",
        "max_seq_len",
        "stream_interval",
    ):
        if k in opts and opts[k] is not None and opts[k] < 1:
            raise ConfigError(f"config key {k!r} must be >= 1, got {opts[k]!r}")
    quant = str(opts.get("quantization") or "checkpoint")
    if quant not in ("checkpoint", "online"):
        raise ConfigError(f"config key 'quantization' expects checkpoint or online, got {quant!r}")
    if quant == "online" and p.id != "fp8":
        raise ConfigError(
            f"quantization=online quantises a 16-bit checkpoint to fp8 at load: it needs precision fp8, got {p.id}"
        )
    kvd = str(opts.get("kv_cache_dtype") or "auto").lower()
    if kvd == "auto":
        kv_elem = 2.0 if quant == "online" else p.kv_bytes
    elif kvd == "fp8":
        kv_elem = 1.0
    elif kvd in ("bf16", "fp16"):
        kv_elem = 2.0
    else:
        raise ConfigError(f"config key 'kv_cache_dtype' expects auto, fp8, bf16 or fp16, got {kvd!r}")
    kf = FACTORS[profile]
    if opts.get("async_scheduling"):
        kf = replace(kf, host_overlap=1.0)
    if opts.get("eager_layer_s") is not None:
        v = opts["eager_layer_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ConfigError(f"config key 'eager_layer_s' expects seconds per layer, >= 0 and < 1, got {v!r}")
        kf = replace(kf, eager_layer_s=float(v))
    dep = Deployment(
        model=m,
        gpu=g,
        precision=p,
        tp=tp,
        kf=kf,
        power_limit_w=float(opts["power_limit_w"]) if opts.get("power_limit_w") else None,
        online_fp8=quant == "online",
        kv_bytes_elem=kv_elem,
    )
    hbm = g.hbm_bytes
    w = dep.weight_bytes_per_gpu
    kvt = dep.kv_bytes_per_token_gpu
    gib = 2**30
    if profile == "trtllm-like":
        if p.id == "fp8" and not g.has_fp8:
            raise EngineStartupError(
                "RuntimeError",
                f"[TensorRT-LLM][ERROR] FP8 is not supported on {g.name} (compute capability "
                f"{g.compute_capability}); FP8 GEMM and FP8 KV cache need SM89 or newer",
            )
        bs = int(opts["tokens_per_block"])
        max_seq = int(opts["max_seq_len"])
        if opts["max_input_len"] > max_seq:
            raise ConfigError(f"max_input_len ({opts['max_input_len']}) must be <= max_seq_len ({max_seq})")
        if opts["max_seq_len"] > m.max_position:
            raise ConfigError(f"max_seq_len {max_seq} exceeds {m.id}'s max_position_embeddings {m.max_position}")
        act = dep.activation_reserve_bytes(int(opts["max_num_tokens"]))
        free = hbm - w - act
        if free <= 0:
            raise EngineStartupError(
                "RuntimeError",
                f"[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of memory "
                f"(engine weights {w / gib:.1f} GiB + activations {act / gib:.1f} GiB per GPU on a "
                f"{hbm / gib:.1f} GiB {g.name}; use more GPUs (tp) or a smaller precision)",
            )
        kv_bytes = free * float(opts["kv_cache_free_gpu_mem_fraction"])
        blocks = int(kv_bytes // (bs * kvt))
        need = math.ceil(max_seq / bs)
        if blocks < need:
            raise EngineStartupError(
                "RuntimeError",
                f"[TensorRT-LLM][ERROR] Assertion failed: the KV cache pool ({blocks} blocks of "
                f"{bs} tokens) cannot hold one sequence of max_seq_len {max_seq} ({need} blocks); "
                f"weights use {w / gib:.1f} GiB of {hbm / gib:.1f} GiB per GPU",
            )
        used = w + act + blocks * bs * kvt
        return EngineSetup(profile, dep, opts, blocks, bs, used, max_seq)
    # vllm-like
    bs = int(opts["block_size"])
    mml = int(opts["max_model_len"] or m.max_position)
    if mml > m.max_position:
        raise ConfigError(
            f"max_model_len {mml} exceeds {m.id}'s max_position_embeddings {m.max_position} "
            f"(vLLM: 'User-specified max_model_len ({mml}) is greater than the derived "
            f"max_model_len')"
        )
    util = float(opts["gpu_memory_utilization"])
    if not 0 < util <= 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    budget = hbm * util
    if w > budget:
        raise EngineStartupError(
            "torch.OutOfMemoryError",
            f"CUDA out of memory. Tried to allocate {w / gib:.2f} GiB. GPU 0 has a "
            f"total capacity of {hbm / gib:.2f} GiB of which {max(0.0, hbm - budget) / gib:.2f} GiB is reserved "
            f"by gpu_memory_utilization={util}; model weights need {w / gib:.2f} GiB per GPU at tp={tp}, "
            f"{p.id}. Use more GPUs (--tensor-parallel-size) or a smaller dtype",
        )
    act = dep.activation_reserve_bytes(int(opts["max_num_batched_tokens"]))
    kv_bytes = budget - w - act
    if opts.get("kv_cache_memory_bytes"):
        kv_bytes = float(opts["kv_cache_memory_bytes"])
        budget = w + act + kv_bytes
    if kv_bytes <= 0:
        raise EngineStartupError(
            "ValueError",
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            f"when initializing the engine. (weights {w / gib:.2f} GiB + activations {act / gib:.2f} GiB "
            f"per GPU > {budget / gib:.2f} GiB)",
        )
    blocks = int(kv_bytes // (bs * kvt))
    if blocks * bs < mml:
        raise EngineStartupError(
            "ValueError",
            f"The model's max seq len ({mml}) is larger than the maximum number of tokens that can "
            f"be stored in KV cache ({blocks * bs}). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.",
        )
    return EngineSetup(profile, dep, opts, blocks, bs, budget, mml)


# A real engine's speed moves by a few percent from one server start to the next (CUDA-graph capture, memory layout,
# clocks after warm-up): the committed H200 runs' means differ by 6-8% (CV; boards and hosts included, docs/
# MEASUREMENT.md "Server starts"). The emulator draws each later start's speed from a log-normal of this spread (one
# machine: no board or host effect), seeded by the start and the seed, so that a plan's starts differ as a real
# engine's do and the intervals over starts have something to hold; the first start keeps the calibrated speed.
START_SPEED_SD = 0.03  # sd of ln(speed) between starts


def start_speed(start: int, seed: int = 0) -> float:
    """The speed factor of server start `start` (1-based): 1 for the first, exp(START_SPEED_SD x z) for later ones,
    z a standard normal drawn from (seed, start)."""
    if start <= 1:
        return 1.0
    import random

    return math.exp(START_SPEED_SD * random.Random(f"server-start:{seed}:{start}").gauss(0.0, 1.0))


def with_server_start(st: EngineSetup, start: int, seed: int = 0) -> EngineSetup:
    """The deployment as server start `start` runs it: every GPU step start_speed(start, seed) times as fast."""
    factor = start_speed(start, seed)
    if factor == 1.0:
        return replace(st, server_start=start)
    gpu = replace(st.dep.gpu, speed_scale=st.dep.gpu.speed_scale * factor)
    return replace(st, dep=replace(st.dep, gpu=gpu), server_start=start)
