"""surge: the Poisson (or gamma, when burstiness != 1) renewal process run against a piecewise-constant intensity:
`rate`, then `rate * surge_factor` during [surge_start_s, surge_start_s + surge_duration_s), then `rate` again
(time rescaling: unit-rate arrivals mapped through the inverse cumulative intensity)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import Shape, finish, positive, register, renewal_unit

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np


@register
class Surge(Shape):
    name = "surge"
    bursty = True
    fields = ("rate", "burstiness", "surge_factor", "surge_start_s", "surge_duration_s", "concurrency")
    order = 3
    summary = "open loop at `rate`, times `surge_factor` from surge_start_s for surge_duration_s"

    def check(self, p: Mapping[str, Any]) -> str | None:
        return None if positive(p, "rate") else f"shape {self.name!r} needs rate > 0 (requests/s)"

    def label(self, p: Mapping[str, Any]) -> str:
        return f"{self.name}-r{p['rate']:g}x{p.get('surge_factor') or 1.0:g}"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        import numpy as np

        rate = float(p["rate"])
        start, length = float(p.get("surge_start_s") or 0.0), float(p.get("surge_duration_s") or 0.0)
        rng = np.random.default_rng(seed)
        a = min(max(start, 0.0), horizon_s)
        b = min(max(start + length, a), horizon_s)
        hi = rate * float(p.get("surge_factor") or 1.0)
        lam_a = rate * a
        lam_b = lam_a + hi * (b - a)
        lam_end = lam_b + rate * (horizon_s - b)
        n = p.get("max_requests")
        unit = renewal_unit(float(p.get("burstiness") or 1.0), rng, lam_end, None if n is None else max(int(n) - 1, 0))
        unit = np.concatenate([[0.0], unit])
        offs = np.where(
            unit < lam_a, unit / rate, np.where(unit < lam_b, a + (unit - lam_a) / hi, b + (unit - lam_b) / rate)
        )
        return finish(offs, p, horizon_s)
