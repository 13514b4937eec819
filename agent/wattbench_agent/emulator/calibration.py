"""The emulator's calibration on real hardware, as package data: calibration.json beside this module.

The control plane's twin calibration (`python -m wattbench.twin`, wattbench/twin/) writes it from every committed
real-hardware bundle not on the held-out list (results/twin/held_out.txt): the vllm-like profile's fitted kernel
factors, the power coefficients, per-GPU factors, the measured spread of the two parameters that move from window to
window and machine to machine (the decode step and the host's launch time of a prefill-carrying step: `spread`), the
prediction intervals sized from the twin's cross-validated errors (`intervals`), the phase states committed closed
loops ran in (`phase_states`), the cross-validated errors (`held_out`: by protocol), the bundles it was fitted on and
what the list kept out. The emulator reads it at import; without the file (a checkout that never ran the
calibration) the values written in the code stand. Every prediction records which calibration made it (identity()).
Agent side: stdlib only.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("calibration.json")


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The whole calibration ({} when there is none)."""
    try:
        return json.loads(PATH.read_text())
    except (OSError, ValueError):
        return {}


def kernel_factors(profile: str) -> dict[str, Any]:
    """The fitted kernel factors of a profile (KernelFactors field -> value)."""
    return dict((load().get("profiles") or {}).get(profile) or {})


def power() -> dict[str, float]:
    """The fitted power coefficients (PowerFactors field -> value)."""
    return dict(load().get("power") or {})


def gpu(gpu_id: str) -> dict[str, float]:
    """Fitted per-GPU factors (GPUSpec field -> value) over the datasheet's specs.json entry."""
    return dict((load().get("gpus") or {}).get(gpu_id) or {})


def spread(profile: str) -> dict[str, dict[str, float]]:
    """The measured spread of a profile's window-to-window parameters: name -> {"p05", "p50", "p95", ...}."""
    return dict((load().get("spread") or {}).get(profile) or {})


def held_out() -> dict[str, Any]:
    """The twin's errors on real points its calibration never saw (by workload and by board)."""
    return dict(load().get("held_out") or {})


def intervals(profile: str) -> dict[str, Any]:
    """A profile's prediction intervals: {"level", "basis", "figures": {figure: {"log_lo", "log_hi", "n", ...}}}: a
    predicted value v lies in [v exp(log_lo), v exp(log_hi)] at the stated level ({} where none was sized)."""
    return dict((load().get("intervals") or {}).get(profile) or {})


def phase_states(profile: str) -> dict[str, Any]:
    """How often committed real closed loops of equal lengths ran with prefills sharing steps, by prompt class and
    stream count (wattbench/twin/states.py)."""
    return dict((load().get("phase_states") or {}).get(profile) or {})


def sha256_of(obj: Any) -> str:
    """The sha256 of a JSON value written canonically (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def identity() -> dict[str, Any]:
    """Which calibration a prediction came from: the file and its sha256, the content hash of what was fitted (its
    values and the bundles it was fitted on, calibrate.content_sha256), the bundles with their sha256 and the sha256
    of that set, and what the held-out list kept out. {"file": ..., "sha256": None} without a calibration."""
    try:
        raw = PATH.read_bytes()
    except OSError:
        return {"file": PATH.name, "sha256": None}
    data = load()
    fitted = data.get("fitted_on") or {}
    return {
        "file": "agent/wattbench_agent/emulator/" + PATH.name,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "content_sha256": data.get("content_sha256"),
        "fitted_on_sha256": sha256_of(fitted) if fitted else None,
        "fitted_on": sorted(fitted),
        "excluded": data.get("excluded"),
    }
