"""poisson: open loop, exponential gaps with mean 1/rate; the first request goes out at offset 0 (as vllm bench)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import Shape, finish, positive, register, renewal_unit

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np


def renewal_offsets(p: Mapping[str, Any], horizon_s: float, seed: int, k: float) -> np.ndarray:
    """Offsets of a renewal process at p['rate'] requests/s with gamma(k) gaps (k = 1: Poisson)."""
    import numpy as np

    rate = float(p["rate"])
    rng = np.random.default_rng(seed)
    n = p.get("max_requests")
    unit = renewal_unit(k, rng, rate * horizon_s, None if n is None else max(int(n) - 1, 0))
    return finish(np.concatenate([[0.0], unit / rate]), p, horizon_s)


@register
class Poisson(Shape):
    name = "poisson"
    fields = ("rate", "concurrency")
    order = 1
    summary = "open loop at `rate` requests/s, exponential gaps (concurrency: optional cap on requests in flight)"

    def check(self, p: Mapping[str, Any]) -> str | None:
        return None if positive(p, "rate") else f"shape {self.name!r} needs rate > 0 (requests/s)"

    def label(self, p: Mapping[str, Any]) -> str:
        return f"{self.name}-r{p['rate']:g}"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        return renewal_offsets(p, horizon_s, seed, 1.0)
