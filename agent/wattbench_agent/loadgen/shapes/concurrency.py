"""concurrency: closed loop. `concurrency` streams each send their next request as soon as the last one ends;
with ramp_s, stream k of N starts at k * ramp_s / N (desynchronises the streams' prefill waves)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import Shape, positive, register


@register
class Concurrency(Shape):
    name = "concurrency"
    closed_loop = True
    fields = ("concurrency",)
    order = 0
    summary = "fixed number of streams, each sending its next request when the last one ends"

    def check(self, p: Mapping[str, Any]) -> str | None:
        if not positive(p, "concurrency") or p["concurrency"] < 1:
            return "shape 'concurrency' needs concurrency >= 1"
        return None

    def label(self, p: Mapping[str, Any]) -> str:
        return f"c{p['concurrency']}"

    def twin_arrivals(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> list[float]:
        """The streams' first requests; each completion sends the next one (the simulator's closed loop)."""
        n = max(1, int(p.get("concurrency") or 1))
        ramp = max(0.0, float(p.get("ramp_s") or 0.0))
        return [ramp * k / n for k in range(n)]
