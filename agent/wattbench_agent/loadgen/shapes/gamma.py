"""gamma: open loop, gaps ~ Gamma(shape=k, scale=1/(rate*k)) with k = burstiness (vllm bench's convention): k = 1
is Poisson, k < 1 burstier, k > 1 smoother; the gaps' coefficient of variation is 1/sqrt(k)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import Param, Shape, positive, register
from .poisson import renewal_offsets

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np


# gamma's shape k, vllm bench serve's --burstiness (surge draws its gaps with it too: one Param, shared)
BURSTINESS = Param(
    "burstiness",
    float,
    default=1.0,
    minimum=0,
    exclusive_minimum=True,
    maximum=1000,
    help="gamma shape k: 1 = Poisson, <1 burstier",
    shape_from_flags=True,
)


@register
class Gamma(Shape):
    name = "gamma"
    bursty = True
    fields = ("rate", "concurrency")
    params = (BURSTINESS,)
    order = 2
    summary = "open loop at `rate` requests/s, gamma gaps of shape `burstiness` (1 = Poisson, < 1 burstier)"

    def check(self, p: Mapping[str, Any]) -> str | None:
        return None if positive(p, "rate") else f"shape {self.name!r} needs rate > 0 (requests/s)"

    def label(self, p: Mapping[str, Any]) -> str:
        return f"{self.name}-r{p['rate']:g}-b{self.param(p, 'burstiness'):g}"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        return renewal_offsets(p, horizon_s, seed, float(self.param(p, "burstiness")))
