"""The emulator as a digital twin of a planned engine: which profile and knobs stand for a real engine entry.

    profile, config, note = twin_engine("vllm", "fp8", {"max_num_seqs": 256}, model="meta-llama/Llama-3.1-8B")

vLLM maps to the vllm-like profile with the behaviour of the vLLM measured on the H200 (0.25.0: asynchronous
scheduling on by default; precision fp8 on a 16-bit checkpoint is vLLM's online quantisation, KV cache 16-bit),
TensorRT-LLM to trtllm-like (never measured here: its factors are assumptions, docs/EMULATOR.md), an emulator entry
to itself. Other engines have no twin.
"""

from __future__ import annotations

from typing import Any

# plan option (the real engine's) -> emulator knob of the profile; values pass through
_VLLM_KNOBS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "block_size",
    "enable_prefix_caching",
    "kv_cache_memory_bytes",
    "async_scheduling",
)
_TRT_KNOBS = (
    "max_batch_size",
    "max_input_len",
    "max_seq_len",
    "max_num_tokens",
    "kv_cache_free_gpu_mem_fraction",
    "tokens_per_block",
    "enable_chunked_context",
    "scheduler_policy",
)


class NoTwin(ValueError):
    """The engine kind has no emulator profile."""


def twin_engine(
    engine: str,
    precision: str,
    options: dict[str, Any] | None = None,
    profile: str | None = None,
    model: str = "",
    checkpoint: str | None = None,
) -> tuple[str, dict[str, Any], str]:
    """(profile, emulator config, what the mapping assumed) for one engine entry of a plan; `checkpoint` is the
    engine's own copy of the model (pre-quantized when its name says fp8)."""
    options = dict(options or {})
    if engine == "emulator":
        if not profile:
            raise NoTwin("an emulator engine needs a profile")
        return profile, options, "emulator entry: its own profile and knobs"
    if engine == "vllm":
        cfg = {k: options[k] for k in _VLLM_KNOBS if k in options}
        cfg.setdefault(
            "async_scheduling", True
        )  # vLLM 0.25.0's default (its log: 'Asynchronous scheduling is enabled')
        note = "vllm-like as the vLLM 0.25.0 measured on the H200 (async scheduling"
        if precision == "fp8":
            kvd = str(options.get("kv_cache_dtype") or "auto").lower()
            # a pre-quantized checkpoint says so in its name (RedHatAI/...-FP8, nvidia/...-FP8) or needs its own method
            prequantised = "fp8" in (checkpoint or model).lower() or options.get("quantization") not in (None, "fp8")
            cfg["quantization"] = "checkpoint" if prequantised else "online"
            cfg["kv_cache_dtype"] = "fp8" if kvd.startswith("fp8") else "bf16"  # vLLM's auto: the model's dtype
            note += (
                ", fp8 checkpoint" if prequantised else ", online fp8: weights quantised at load"
            ) + f", KV cache {'fp8' if kvd.startswith('fp8') else '16-bit'}"
        return "vllm-like", cfg, note + ")"
    if engine == "trtllm":
        cfg = {k: options[k] for k in _TRT_KNOBS if k in options}
        return "trtllm-like", cfg, "trtllm-like: factors assumed, never measured against TensorRT-LLM"
    raise NoTwin(f"no emulator profile stands for engine {engine!r} (twins: vllm, trtllm, emulator)")
