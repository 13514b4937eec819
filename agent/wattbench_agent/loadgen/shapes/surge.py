"""surge: the Poisson (or gamma, when burstiness != 1) renewal process run against a piecewise-constant intensity:
`rate`, then `rate * surge_factor` during [surge_start_s, surge_start_s + surge_duration_s), then `rate` again
(time rescaling: unit-rate arrivals mapped through the inverse cumulative intensity)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import Param, Shape, finish, positive, register, renewal_unit
from .gamma import BURSTINESS

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np


MAX_WINDOW_S = 86400.0  # loadgen/spec.py's (one load point's window), not imported: spec.py imports this package


@register
class Surge(Shape):
    name = "surge"
    bursty = True
    fields = ("rate", "concurrency")
    params = (
        BURSTINESS,
        Param(
            "surge_factor",
            float,
            default=1.0,
            minimum=0,
            exclusive_minimum=True,
            maximum=1000,
            help="with --rate: multiply the rate by this ...",
            shape_from_flags=True,
        ),
        Param(
            "surge_start_s",
            float,
            default=0.0,
            minimum=0,
            maximum=MAX_WINDOW_S,
            help="... from this many seconds after start ...",
            shape_from_flags=True,
            cli="--surge-start",
            metavar="SURGE_START",
        ),
        # >= 0 as LoadSpec and `--surge-duration` took it (every LoadSpec's dict carried 0.0); a plan took > 0
        Param(
            "surge_duration_s",
            float,
            default=0.0,
            minimum=0,
            maximum=MAX_WINDOW_S,
            help="... for this many seconds",
            shape_from_flags=True,
            cli="--surge-duration",
            metavar="SURGE_DURATION",
        ),
    )
    order = 3
    summary = "open loop at `rate`, times `surge_factor` from surge_start_s for surge_duration_s"

    def check(self, p: Mapping[str, Any]) -> str | None:
        return None if positive(p, "rate") else f"shape {self.name!r} needs rate > 0 (requests/s)"

    def label(self, p: Mapping[str, Any]) -> str:
        return f"{self.name}-r{p['rate']:g}x{self.param(p, 'surge_factor'):g}"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        import numpy as np

        rate = float(p["rate"])
        start, length = float(self.param(p, "surge_start_s")), float(self.param(p, "surge_duration_s"))
        rng = np.random.default_rng(seed)
        a = min(max(start, 0.0), horizon_s)
        b = min(max(start + length, a), horizon_s)
        hi = rate * float(self.param(p, "surge_factor"))
        lam_a = rate * a
        lam_b = lam_a + hi * (b - a)
        lam_end = lam_b + rate * (horizon_s - b)
        n = p.get("max_requests")
        unit = renewal_unit(float(self.param(p, "burstiness")), rng, lam_end, None if n is None else max(int(n) - 1, 0))
        unit = np.concatenate([[0.0], unit])
        offs = np.where(
            unit < lam_a, unit / rate, np.where(unit < lam_b, a + (unit - lam_a) / hi, b + (unit - lam_b) / rate)
        )
        return finish(offs, p, horizon_s)
