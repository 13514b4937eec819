"""ramp: vllm bench serve's ramp-up (`--ramp-up-strategy linear|exponential --ramp-up-start-rps S --ramp-up-end-rps
E`): the rate moves from S to E requests/s, gaps gamma(burstiness) at the rate of the moment (1 = Poisson).

With `max_requests` (vLLM's --num-prompts) it is vLLM's ramp exactly (vllm/benchmarks/serve.py,
`_get_current_request_rate`): request i's rate is S + (E - S) i / (N - 1) (linear) or S (E / S)^(i / (N - 1))
(exponential), its gap drawn at that rate, and the schedule is not rescaled. Over a duration instead (no request
count to ramp by), the rate moves with time over the sending span, warm-up included: the same renewal process run
through that intensity (time rescaling, as surge does). The first request goes out at offset 0, as every
wattbench shape's (vLLM's first waits one gap)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import Param, Shape, finish, register, renewal_unit
from .gamma import BURSTINESS

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np

MAX_RATE = 100_000.0  # loadgen/spec.py's, not imported: spec.py imports this package
STRATEGIES = ("linear", "exponential")


def _rps(name: str, help: str) -> Param:
    return Param(name, float, minimum=0, exclusive_minimum=True, maximum=MAX_RATE, help=help, shape_from_flags=True)


@register
class Ramp(Shape):
    name = "ramp"
    fields = ("concurrency",)
    params = (
        BURSTINESS,
        Param(
            "ramp_up_strategy",
            str,
            default="linear",
            help="ramp the request rate from --ramp-up-start-rps to --ramp-up-end-rps: linear or exponential "
            "(vllm bench serve's; by request over --num-prompts, else over the duration)",
            shape_from_flags=True,
            metavar="{linear,exponential}",
        ),
        _rps("ramp_up_start_rps", "the ramp's first rate, requests/s"),
        _rps("ramp_up_end_rps", "the ramp's last rate, requests/s"),
    )
    order = 5
    summary = "open loop, the rate ramped from ramp_up_start_rps to ramp_up_end_rps (linear or exponential)"

    def check(self, p: Mapping[str, Any]) -> str | None:
        strategy = self.param(p, "ramp_up_strategy")
        if strategy not in STRATEGIES:
            return f"ramp_up_strategy must be linear or exponential, got {strategy!r:.40}"
        start, end = p.get("ramp_up_start_rps"), p.get("ramp_up_end_rps")
        if start is None or end is None:
            return "shape 'ramp' needs ramp_up_start_rps and ramp_up_end_rps (--ramp-up-start-rps, --ramp-up-end-rps)"
        if start > end:
            return f"ramp_up_start_rps ({start:g}) must be <= ramp_up_end_rps ({end:g}), as vLLM's"
        return None

    def label(self, p: Mapping[str, Any]) -> str:
        strategy = "lin" if self.param(p, "ramp_up_strategy") == "linear" else "exp"
        return f"ramp-{strategy}-r{p['ramp_up_start_rps']:g}-{p['ramp_up_end_rps']:g}"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        import numpy as np

        k = float(self.param(p, "burstiness"))
        s, e = float(p["ramp_up_start_rps"]), float(p["ramp_up_end_rps"])
        linear = self.param(p, "ramp_up_strategy") == "linear"
        rng = np.random.default_rng(seed)
        n = p.get("max_requests")
        if n is not None:  # vLLM's: the rate by request index
            frac = np.arange(1, int(n)) / max(int(n) - 1, 1)
            rates = s + (e - s) * frac if linear else s * (e / s) ** frac
            gaps = rng.gamma(shape=k, scale=1.0 / (rates * k)) if len(rates) else np.zeros(0)
            return finish(np.concatenate([[0.0], np.cumsum(gaps)]), p, horizon_s)
        if not math.isfinite(horizon_s):
            raise ValueError("an endless ramp: give a duration or max_requests")
        big = _cumulative(horizon_s, s, e, linear, horizon_s)
        unit = np.concatenate([[0.0], renewal_unit(k, rng, big)])
        return finish(_inverse(unit, s, e, linear, horizon_s), p, horizon_s)


def _cumulative(t: float, s: float, e: float, linear: bool, span: float) -> float:
    """Expected arrivals by t: the integral of the rate from 0 to t."""
    if linear:
        return s * t + (e - s) * t * t / (2 * span)
    r = e / s
    return s * t if r == 1 else s * span * (r ** (t / span) - 1) / math.log(r)


def _inverse(u, s: float, e: float, linear: bool, span: float):
    """The times at which `u` arrivals are expected (the inverse of `_cumulative`)."""
    import numpy as np

    if linear:
        if e == s:
            return u / s
        a = (e - s) / span
        return (-s + np.sqrt(s * s + 2 * a * u)) / a
    r = e / s
    if r == 1:
        return u / s
    return span * np.log1p(u * math.log(r) / (s * span)) / math.log(r)
