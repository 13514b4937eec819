"""Specs as data: models, GPUs and precisions (loaded from specs.json, which cites its sources)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

_SPECS_PATH = Path(__file__).with_name("specs.json")


class SpecError(ValueError):
    """An unknown model, GPU or precision name."""


@dataclass(frozen=True)
class ModelSpec:
    id: str
    hf_id: str
    aliases: tuple[str, ...]
    params: float
    active_params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int
    experts_per_token: int
    max_position: int
    tied_embeddings: bool
    source: str

    # ---- shapes derived from the config (what the performance model uses) ----
    @property
    def attn_params_per_layer(self) -> int:
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        return q + kv + o

    @property
    def expert_params_per_layer(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up, down (SwiGLU)

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params_derived(self) -> float:
        per_layer = self.attn_params_per_layer + self.experts * self.expert_params_per_layer
        head = 0 if self.tied_embeddings else self.embed_params
        return self.layers * per_layer + self.embed_params + head

    def names(self) -> tuple[str, ...]:
        return (self.id, self.hf_id, *self.aliases)


@dataclass(frozen=True)
class GPUSpec:
    id: str
    name: str
    hbm_mib: float
    hbm_bw: float
    flops: dict[str, float | None]
    tdp_w: float
    idle_w: float
    nvlink_bw: float
    compute_capability: str
    sm_clock_max_mhz: float
    sm_clock_idle_mhz: float
    mem_clock_mhz: float
    source: str
    mem_power_scale: float = 1.0  # memory-system power at full bandwidth, relative to the power model's k_mem x TDP
    mem_eff_scale: float = 1.0  # share of HBM bandwidth the engines reach, relative to the profile's mem_eff (H100)
    # every GPU step takes 1 / speed_scale as long (the same work, so the same energy: power falls with it). 1 for
    # every GPU: the decode step is the same on every measured H200 within +-3%, so no board factor (docs/EMULATOR.md)
    speed_scale: float = 1.0
    clock_up_w: float = 0.0  # power of holding the clocks at their maximum while busy, over idle_w (0 where idle_w
    #                          was measured with the clocks already up)

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_mib * 1024 * 1024

    def peak_flops(self, compute: str) -> float:
        """Dense tensor throughput for a compute type; fp8 falls back to bf16 where there are no fp8 cores."""
        v = self.flops.get(compute)
        return float(v) if v else float(self.flops["bf16"])

    @property
    def has_fp8(self) -> bool:
        return bool(self.flops.get("fp8"))


@dataclass(frozen=True)
class PrecisionSpec:
    id: str
    weight_bytes: float
    kv_bytes: float
    act_bytes: float
    compute: str
    gemm_eff_scale: float
    source: str


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    return json.loads(_SPECS_PATH.read_text())


def _pick(table: str, name: str, kind: str) -> tuple[str, dict[str, Any]]:
    raw = _raw()[table]
    key = (name or "").strip().lower()
    if key in raw:
        return key, raw[key]
    if table == "models":  # also accept Hub names and aliases
        for mid, m in raw.items():
            if key in {a.lower() for a in (m["hf_id"], *m.get("aliases", []))}:
                return mid, m
    known = ", ".join(sorted(raw))
    more = (
        " (or a Hugging Face config.json: a local model folder holding one, or the file)" if table == "models" else ""
    )
    raise SpecError(f"unknown {kind} {name!r}; known {kind}s: {known}{more}")


def config_path(name: str | Path) -> Path | None:
    """The Hugging Face config.json that `name` points to (a local model folder holding one, or the file itself);
    None when `name` is not such a path."""
    try:
        path = Path(str(name)).expanduser()
        if path.is_dir() and (path / "config.json").is_file():
            return path / "config.json"
        if path.is_file() and path.suffix == ".json":
            return path
    except OSError:
        return None
    return None


def _cfg_int(cfg: dict[str, Any], where: Path, *keys: str, default: int | None = None) -> int:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecError(f"{where}: {k} is {v!r}; expected a non-negative integer")
            return v
    if default is None:
        raise SpecError(f"{where}: no {' / '.join(keys)}; a Hugging Face config.json of a decoder model has it")
    return default


def spec_from_config(path: str | Path) -> ModelSpec:
    """A model described by its Hugging Face config.json (Llama, Qwen2, Mistral, Mixtral-style decoders: SwiGLU MLP,
    grouped-query attention, optional experts). Parameters are COMPUTED from the shapes (the source says so)."""
    where = Path(path)
    try:
        cfg = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise SpecError(f"{where}: not a readable config.json ({exc})") from None
    if not isinstance(cfg, dict):
        raise SpecError(f"{where}: expected a JSON object (a Hugging Face config.json)")
    cfg = {**cfg, **(cfg.get("text_config") or {})}  # multimodal configs keep the decoder under text_config
    hidden = _cfg_int(cfg, where, "hidden_size", "d_model", "n_embd")
    heads = _cfg_int(cfg, where, "num_attention_heads", "n_head")
    if not hidden or not heads:
        raise SpecError(f"{where}: hidden_size and num_attention_heads must be positive")
    experts = _cfg_int(cfg, where, "num_local_experts", "num_experts", "n_routed_experts", default=1) or 1
    name = where.parent.name if where.name == "config.json" else where.stem
    ms = ModelSpec(
        id=f"config:{name}",
        hf_id=str(cfg.get("_name_or_path") or name),
        aliases=(),
        params=0.0,
        active_params=0.0,
        layers=_cfg_int(cfg, where, "num_hidden_layers", "n_layer"),
        hidden=hidden,
        heads=heads,
        kv_heads=_cfg_int(cfg, where, "num_key_value_heads", default=heads),
        head_dim=_cfg_int(cfg, where, "head_dim", default=hidden // heads),
        intermediate=_cfg_int(
            cfg,
            where,
            "moe_intermediate_size" if experts > 1 and "moe_intermediate_size" in cfg else "intermediate_size",
        ),
        vocab=_cfg_int(cfg, where, "vocab_size"),
        experts=experts,
        experts_per_token=_cfg_int(cfg, where, "num_experts_per_tok", default=1) if experts > 1 else 1,
        max_position=_cfg_int(cfg, where, "max_position_embeddings", default=4096),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        source=f"computed from {where} (Hugging Face config.json): parameters computed from the shapes, not published",
    )
    total = ms.total_params_derived
    per_layer_active = ms.attn_params_per_layer + ms.experts_per_token * ms.expert_params_per_layer
    active = ms.layers * per_layer_active + ms.embed_params * (1 if ms.tied_embeddings else 2)
    return dataclasses.replace(ms, params=float(total), active_params=float(active))


def model_spec(name: str) -> ModelSpec:
    """A model of specs.json by id, Hub name or alias; or one described by a config.json (a local model folder
    holding one, or the path of the file)."""
    cfg = config_path(name) if name and ("/" in str(name) or str(name).endswith(".json")) else None
    if cfg is not None:
        return spec_from_config(cfg)
    mid, m = _pick("models", name, "model")
    return ModelSpec(
        id=mid,
        hf_id=m["hf_id"],
        aliases=tuple(m.get("aliases", [])),
        params=float(m["params"]),
        active_params=float(m["active_params"]),
        layers=m["layers"],
        hidden=m["hidden"],
        heads=m["heads"],
        kv_heads=m["kv_heads"],
        head_dim=m["head_dim"],
        intermediate=m["intermediate"],
        vocab=m["vocab"],
        experts=m["experts"],
        experts_per_token=m["experts_per_token"],
        max_position=m["max_position"],
        tied_embeddings=m["tied_embeddings"],
        source=m["source"],
    )


def gpu_spec(name: str) -> GPUSpec:
    """A GPU of specs.json (datasheet facts and measured idle power), with the factors the real-hardware calibration
    fitted for it (calibration.json: mem_eff_scale, mem_power_scale, speed_scale) over it."""
    from wattbench_agent.emulator import calibration

    gid, g = _pick("gpus", name, "GPU")
    g = {**g, **calibration.gpu(gid)}
    return GPUSpec(
        id=gid,
        name=g["name"],
        hbm_mib=float(g["hbm_mib"]),
        hbm_bw=float(g["hbm_bw"]),
        flops=dict(g["flops"]),
        tdp_w=float(g["tdp_w"]),
        idle_w=float(g["idle_w"]),
        nvlink_bw=float(g["nvlink_bw"]),
        compute_capability=g["compute_capability"],
        sm_clock_max_mhz=float(g["sm_clock_max_mhz"]),
        sm_clock_idle_mhz=float(g["sm_clock_idle_mhz"]),
        mem_clock_mhz=float(g["mem_clock_mhz"]),
        source=g["source"],
        mem_power_scale=float(g.get("mem_power_scale", 1.0)),
        mem_eff_scale=float(g.get("mem_eff_scale", 1.0)),
        speed_scale=float(g.get("speed_scale", 1.0)),
        clock_up_w=float(g.get("clock_up_w", 0.0)),
    )


def precision_spec(name: str) -> PrecisionSpec:
    pid, p = _pick("precisions", name, "precision")
    return PrecisionSpec(
        id=pid,
        weight_bytes=float(p["weight_bytes"]),
        kv_bytes=float(p["kv_bytes"]),
        act_bytes=float(p["act_bytes"]),
        compute=p["compute"],
        gemm_eff_scale=float(p["gemm_eff_scale"]),
        source=p["source"],
    )


def known(table: str) -> list[str]:
    return sorted(_raw()[table])
