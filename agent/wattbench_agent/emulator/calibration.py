"""The emulator's calibration on real hardware, as package data: calibration.json beside this module.

The control plane's twin calibration (`python -m wattbench.twin --fit`, wattbench/twin/) writes it from every committed
real-hardware bundle: the vllm-like profile's fitted kernel factors, the power coefficients, per-GPU factors, the
measured spread of the two parameters that move from window to window and machine to machine (the decode step and the
host's launch time of a prefill-carrying step: `spread`), and the twin's held-out errors (`held_out`). The emulator
reads it at import; without the file (a checkout that never ran the calibration) the values written in the code stand.
Agent side: stdlib only.
"""

from __future__ import annotations

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
