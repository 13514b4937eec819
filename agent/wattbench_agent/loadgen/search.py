"""SLO capacity search: the highest load (request rate, open loop, or concurrency, closed loop) at which a server
meets an SLO, found with as few measured windows as the tolerance allows (docs/LOADGEN.md, "SLO capacity search";
the definitions in docs/MEASUREMENT.md, "SLO capacity").

The SLO is per-request bounds on TTFT, TPOT and E2E (vllm bench serve's --goodput: ttft, tpot, e2el in ms) and an
attainment: the share of the requests sent in a probe's window that must succeed and meet every bound (0.99: p99 of
each figure within its bound, jointly). A probe is one load run like any other (its window, its energy, its rows);
it meets the SLO when its attainment reaches the target.

1. Bracket: from `start`, multiply the load by `growth` until a probe misses (or `max_load` met: "at least"), or
   divide it until one meets (or `min_load` missed: "no load meets it").
2. Bisect between the highest load that met and the lowest that missed, at their geometric mean (a relative
   tolerance in load is a fixed step in log-load), until they are within `tolerance` of each other (concurrency:
   neighbours). Attainment is flat near 1 below the knee and falls steeply past it, so interpolating it (vLLM's
   serve_sla fits a PCHIP through its margins) steps on a plateau whose slope is noise; bisection needs a number of
   probes known in advance, which is what the probe and time bounds need.
3. Repeat: the load found and its neighbour one tolerance step below (a load that met within that step, where the
   search measured one) are measured until each has `repeats` windows (the search's own windows count),
   interleaved, so that the capacity and every figure at it carry an interval.
   A load meets the SLO when every one of its windows did (`load_meets`: one window that missed, or ended
   oversaturated, and the load missed). The capacity is the highest load that met; its 95% interval holds both the
   search's step and the repeats' spread: it reaches up to the lowest load above that missed (whole streams: one
   fewer), the capacity being known only to lie below it, and from where the lower end of attainment's interval
   crosses the target to where its upper end does (at every load measured, the mean attainment of its windows -+ t x
   their sample stdev / sqrt(windows), one window: its own, joined linearly in log-load), within the loads measured
   (a crossing below the lowest is not claimed).

An open-loop probe whose queue grows without bound ends early (its verdict: oversaturated, a miss), as guidellm's
over-saturation detection does (src/guidellm/scheduler/constraints/saturation.py): the requests in flight (sent by
the schedule, not yet answered) and the TTFTs both have a positive regression slope against time whose 95% margin
of error is under the slope, after a quarter of the window, and half the TTFTs seen miss the SLO's TTFT bound (E2E
where it has none): the achieved answer rate is behind the offered rate and the wait grows through the window.

Agent side: stdlib + numpy (through the load generator). `run_search(base, search, measure)`: `measure(spec, probe,
on_record, stop_event)` runs one probe and returns an object with `summary`, `status`, `error_kind`, `error_text`
(a LoadResult does); the bench agent passes one that also reads the GPUs' energy and writes the bundle's rows.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wattbench_agent.intervals import t975 as _t975

from .energy import SCALES, at_capacity, capacity_line
from .metrics import SLO_KEYS, request_end_ns
from .spec import MAX_CONCURRENCY, LoadSpec, LoadSpecError

OVER = ("rate", "concurrency")
UNITS = {"rate": "req/s", "concurrency": "streams"}
# Defaults of the bounds when the caller gives none: open loop from 1 req/s within [0.1, 1000]; closed loop from 1
# stream within [1, 1024]
DEFAULTS = {"rate": (1.0, 0.1, 1000.0), "concurrency": (1, 1, 1024)}
# What each bound's miss says about the server (the plain-language answer's "what limits it")
LIMITS = {
    "ttft_ms": "queueing: requests wait before their first token (TTFT)",
    "tpot_ms": "decode: each output token takes longer as the batch grows (TPOT)",
    "e2e_ms": "end to end: whole requests take longer than the bound (E2E)",
    "no_error": "errors: requests failed",
}
NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "no_error": "errors"}
SERVER_ERRORS = ("connect_error", "disconnected")
# Which loads count as met (load_meets), as the answer and its JSON say it
MET_RULE = "every window at the load met the attainment"


class SearchError(ValueError):
    """A search that cannot run as given; the message names the setting and what was expected."""


@dataclass
class SearchSpec:
    """How to search. `slo`: {ttft_ms, tpot_ms, e2e_ms} (at least one); loads in req/s (rate) or streams."""

    over: str = "rate"  # rate (open loop: the base spec's poisson or gamma arrivals) | concurrency (closed loop)
    slo: dict = field(default_factory=dict)
    attainment: float = 0.99  # share of the window's requests that must succeed and meet every bound
    start: float | None = None  # first probe's load (default DEFAULTS)
    min_load: float | None = None  # the search goes no lower ...
    max_load: float | None = None  # ... and no higher
    growth: float = 2.0  # bracket step
    tolerance: float = 0.1  # stop bisecting when the loads that met and missed are within this of each other
    repeats: int = 3  # windows at the load found and at its neighbour below
    max_probes: int = 24  # every probe counts, repeats too
    max_time_s: float = 3600.0  # wall time of the whole search, drains and pauses included
    early_stop: bool = True  # end an open-loop probe whose queue grows without bound

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise SearchError(f"unknown search setting(s) {', '.join(unknown)}; expected some of {', '.join(known)}")
        return cls(**d).validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def bounds(self) -> tuple[float, float, float]:
        """(start, min_load, max_load), defaults filled in."""
        start, lo, hi = DEFAULTS[self.over]
        lo = self.min_load if self.min_load is not None else min(lo, self.start or lo)
        hi = self.max_load if self.max_load is not None else max(hi, self.start or hi)
        start = self.start if self.start is not None else min(max(start, lo), hi)
        return float(start), float(lo), float(hi)

    def validate(self) -> SearchSpec:
        if self.over not in OVER:
            raise SearchError(f"search over must be 'rate' or 'concurrency', got {self.over!r}")
        slo = {k: v for k, v in (self.slo or {}).items() if v is not None}
        bad = sorted(set(slo) - set(SLO_KEYS))
        if bad:
            raise SearchError(f"unknown SLO bound(s) {', '.join(bad)}; expected ttft_ms, tpot_ms, e2e_ms")
        if not slo:
            raise SearchError(
                "a capacity search needs an SLO: at least one bound of ttft_ms, tpot_ms, e2e_ms (wattbench load: "
                "--goodput ttft:MS tpot:MS e2el:MS; a plan: its slo section)"
            )
        for k, v in slo.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise SearchError(f"SLO bound {k} must be a positive number of milliseconds, got {v!r}")
        self.slo = slo
        checks = (
            ("attainment", self.attainment, 0.0, 1.0),
            ("growth", self.growth, 1.0, 1000.0),
            ("tolerance", self.tolerance, 0.0, 10.0),
        )
        for name, value, lo, hi in checks:
            if not isinstance(value, (int, float)) or not (lo < value <= hi):
                raise SearchError(f"search {name} must be in ({lo:g}, {hi:g}], got {value!r}")
        if self.growth == 1.0:
            raise SearchError("search growth must be > 1")
        if not isinstance(self.repeats, int) or not 1 <= self.repeats <= 100:
            raise SearchError(f"search repeats must be an integer in [1, 100], got {self.repeats!r}")
        if not isinstance(self.max_probes, int) or self.max_probes < 1:
            raise SearchError(f"search max_probes must be an integer >= 1, got {self.max_probes!r}")
        if not isinstance(self.max_time_s, (int, float)) or not math.isfinite(self.max_time_s) or self.max_time_s <= 0:
            raise SearchError(f"search max_time_s must be > 0 seconds, got {self.max_time_s!r}")
        for name in ("start", "min_load", "max_load"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0):
                raise SearchError(f"search {name} must be a positive number, got {value!r}")
        start, lo, hi = self.bounds()
        if self.over == "concurrency" and (lo < 1 or hi > MAX_CONCURRENCY):
            raise SearchError(f"a concurrency search stays within [1, {MAX_CONCURRENCY}] streams, got [{lo:g}, {hi:g}]")
        if not lo <= start <= hi:
            raise SearchError(f"search start {start:g} is outside [min_load {lo:g}, max_load {hi:g}]")
        return self

    def percentile_key(self) -> str:
        """The summary percentile that goes with the attainment (0.99 -> p99), the nearest at or above it."""
        for key, level in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
            if self.attainment <= level + 1e-12:
                return key
        return "p999"

    def slo_text(self) -> str:
        p = self.percentile_key()
        bounds = ", ".join(f"{NAMES[k]} {p} <= {_ms(v)}" for k, v in self.slo.items())
        return f"{bounds} ({100 * self.attainment:g}% of requests meeting every bound)"


@dataclass
class Probe:
    """One probe of a search: what was asked and what was measured."""

    index: int  # 1-based order in the search
    phase: str  # bracket | bisect | repeat
    load: float
    repeat: int  # the n-th window at this load
    verdict: str = ""  # meets | misses | oversaturated
    attainment: float | None = None
    met: dict = field(default_factory=dict)  # share meeting each bound alone, and "no_error"
    summary: dict = field(default_factory=dict)
    status: str = "ok"
    error_kind: str | None = None
    error_text: str | None = None
    stopped_early: dict | None = None  # the over-saturation detector's reading when it ended the probe
    window_s: float = 0.0
    time_s: float = 0.0  # wall time of the probe, drain included
    load_point_id: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "meets"

    def brief(self, search: SearchSpec) -> dict[str, Any]:
        """The probe as the search's JSON shows it."""
        p = search.percentile_key()
        s = self.summary
        return {
            "probe": self.index,
            "phase": self.phase,
            "load": self.load,
            "repeat": self.repeat,
            "verdict": self.verdict,
            "attainment": self.attainment,
            "met": self.met,
            f"ttft_{p}_ms": (s.get("ttft_ms") or {}).get(p),
            f"tpot_{p}_ms": (s.get("tpot_ms") or {}).get(p),
            f"e2e_{p}_ms": (s.get("e2e_ms") or {}).get(p),
            "output_tok_s": s.get("output_token_throughput"),
            "request_throughput": s.get("request_throughput"),
            "achieved_rate": s.get("achieved_rate"),
            "achieved_concurrency": s.get("achieved_concurrency"),
            "failed": s.get("failed"),
            "errors": s.get("errors"),
            "window_s": self.window_s,
            "stopped_early": self.stopped_early,
            "load_point_id": self.load_point_id,
        }


@dataclass
class SearchResult:
    search: SearchSpec
    probes: list[Probe]
    status: str  # found | at_least | none | server_failed | refused
    value: float | None = None  # the capacity: the highest load every window of which met the SLO (load_meets)
    lo: float | None = None  # its 95% interval: the repeats' spread and the search's step (up to missed_load)
    hi: float | None = None
    missed_load: float | None = None  # the lowest load above the capacity that missed
    binding: str | None = None  # ttft_ms | tpot_ms | e2e_ms | no_error: the bound most missed just above capacity
    binding_share: float | None = None  # the share meeting it there
    binding_load: float | None = None
    stopped_by: str | None = None  # max_probes | max_time: the search ended on a bound, not the tolerance
    note: str | None = None
    time_s: float = 0.0
    shape: str = "poisson"

    @property
    def unit(self) -> str:
        return UNITS[self.search.over]

    @property
    def window_s(self) -> float:
        return sum(p.window_s for p in self.probes)

    @property
    def failed(self) -> bool:
        """The search could not finish: the server stopped answering, or refused every request."""
        return self.status in ("server_failed", "refused")

    def at_probes(self, load: float | None) -> list[Probe]:
        return [p for p in self.probes if load is not None and p.load == load]

    def at_capacity(self) -> dict[str, Any]:
        """The energy and cost figures at the capacity over its windows, each with its 95% interval
        (energy.at_capacity); {} without a capacity or without telemetry and prices."""
        return at_capacity([p.summary for p in self.at_probes(self.value)]) if self.value is not None else {}

    def figures_line(self) -> str | None:
        """The figures at the capacity in words (None without a capacity)."""
        return capacity_line(self.at_capacity()) if self.value is not None else None

    def capacity(self) -> dict[str, Any]:
        figures = self.at_capacity()
        return {
            "value": self.value,
            "lo": self.lo,
            "hi": self.hi,
            "unit": self.unit,
            "over": self.search.over,
            "shape": self.shape,
            "bound": self.status,
            "binding": self.binding,
            "binding_share": self.binding_share,
            "binding_load": self.binding_load,
            "missed_load": self.missed_load,
            "met_rule": MET_RULE,
            "probes": len(self.probes),
            "window_s": round(self.window_s, 3),
            "time_s": round(self.time_s, 3),
            "repeats_at_capacity": len(self.at_probes(self.value)),
            "stopped_by": self.stopped_by,
            # at the capacity, over its windows: {estimate, lo, hi, n, method, unit} each (energy.at_capacity)
            **{k: figures.get(k) for k in SCALES},
            "energy_source": figures.get("source"),  # measured | emulated; None: no telemetry
            "telemetry": figures.get("telemetry"),
            "n_gpus": figures.get("n_gpus"),
            "figures_note": figures.get("note"),
        }

    def to_dict(self, detailed: bool = False) -> dict[str, Any]:
        out = {
            "capacity": self.capacity(),
            "slo": dict(self.search.slo),
            "attainment": self.search.attainment,
            "answer": answer(self),
            "at_capacity": self.figures_line(),
            "search": self.search.to_dict(),
            "probes": [p.brief(self.search) for p in self.probes],
        }
        if self.note:
            out["note"] = self.note
        if detailed:
            out["probe_summaries"] = [p.summary for p in self.probes]
        return out


class _Stop(Exception):
    def __init__(self, status: str, why: str):
        super().__init__(why)
        self.status, self.why = status, why


# ---------------------------------------------------------------------------------------------------------------
# Over-saturation (open loop)
# ---------------------------------------------------------------------------------------------------------------
class _Slope:
    """Least-squares slope of y against x from running sums, and whether it is positive beyond its 95% margin."""

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sy = self.sxx = self.sxy = self.syy = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y
        self.syy += y * y

    def slope(self) -> tuple[float | None, float | None]:
        """(slope, margin of error / slope); None where it cannot be told."""
        if self.n < 3:
            return None, None
        cxx = self.sxx - self.sx * self.sx / self.n
        cxy = self.sxy - self.sx * self.sy / self.n
        cyy = self.syy - self.sy * self.sy / self.n
        if cxx <= 1e-12:
            return None, None
        b = cxy / cxx
        rss = max(cyy - cxy * cxy / cxx, 0.0)
        se = math.sqrt(rss / (self.n - 2) / cxx)
        if b <= 0:
            return b, None
        return b, _t975(self.n - 2) * se / b


class Oversaturation:
    """Watches an open-loop probe's records (`see`, its on_record) and sets `stop` when its queue grows without
    bound (the module's docstring says when). In flight at a completion = requests the schedule had sent by then
    less those answered; every request of an open-loop point is scheduled at t0 + its offset (runner.open_loop)."""

    MOE = 1.0  # the slope's 95% margin of error must be under the slope itself (its interval excludes 0)
    MIN_POINTS = 20
    MIN_WINDOW_SHARE = 0.25

    def __init__(self, spec: LoadSpec, duration_s: float, slo: dict, stop: threading.Event):
        import numpy as np

        self.np = np
        self.offsets = spec.load_shape.offsets(spec.point(), spec.warmup_s + duration_s, spec.seed)
        self.check_after_s = spec.warmup_s + max(1.0, self.MIN_WINDOW_SHARE * duration_s)
        self.key, self.bound = next(((k, slo[k]) for k in ("ttft_ms", "e2e_ms") if slo.get(k)), (None, None))
        self.stop = stop
        self.t0: int | None = None
        self.answered = 0
        self.queue, self.wait = _Slope(), _Slope()
        self.seen = self.violations = 0
        self.fired: dict | None = None

    def see(self, rec: dict) -> None:
        if self.fired is not None:
            return
        try:
            index = int(rec["request_id"])
            if self.t0 is None:
                self.t0 = int(rec["scheduled_ns"] - self.offsets[index] * 1e9)
        except (KeyError, TypeError, ValueError, IndexError):
            return
        end = request_end_ns(rec)
        if end is None:
            return
        self.answered += 1
        t = (end - self.t0) / 1e9
        sent = int(self.np.searchsorted(self.offsets, t, side="right"))
        self.queue.add(t, sent - self.answered)
        if rec.get("error_kind") is None and rec.get("ttft_ms") is not None and rec.get("first_token_ns"):
            self.wait.add((rec["first_token_ns"] - self.t0) / 1e9, rec["ttft_ms"])
            self.seen += 1
            if self.key is not None and (rec.get(self.key) or 0) > self.bound:
                self.violations += 1
        if t < self.check_after_s or self.answered < self.MIN_POINTS or self.wait.n < self.MIN_POINTS:
            return
        if self.key is not None and 2 * self.violations < self.seen:
            return
        qb, qm = self.queue.slope()
        wb, wm = self.wait.slope()
        if qm is not None and wm is not None and qm < self.MOE and wm < self.MOE:
            self.fired = {
                "at_s": round(t, 3),
                "in_flight_slope_per_s": round(qb, 3),
                "ttft_slope_ms_per_s": round(wb, 3),
                "ttft_over_bound_share": round(self.violations / self.seen, 4) if self.seen else None,
                "in_flight": sent - self.answered,
                "answered": self.answered,
                "sent": sent,
            }
            self.stop.set()


# ---------------------------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------------------------
def _round_load(over: str, x: float) -> float:
    """Loads as probes take them: whole streams; a rate to 3 significant digits (its label stays short and stable)."""
    if over == "concurrency":
        return float(max(1, round(x)))
    if x <= 0:
        return x
    digits = 2 - math.floor(math.log10(x))
    return float(round(x, digits))


def probe_spec(base: LoadSpec, over: str, load: float, repeat: int = 1) -> LoadSpec:
    """The base spec at one load: a concurrency search's probes are closed loops of `load` streams; a rate search's
    are the base's open-loop shape (poisson or gamma) at `load` req/s. Every repeat has its own seed (prompts and
    arrivals), as repeats of a plan's points do."""
    label = f"c{int(load)}" if over == "concurrency" else f"r{load:g}"
    change: dict[str, Any] = {"seed": zlib.crc32(f"{base.seed}:{label}:{repeat}".encode()) & 0x7FFFFFFF}
    if over == "concurrency":
        change.update(shape="concurrency", concurrency=int(load), rate=None)
    else:
        shape = base.shape if base.shape in ("poisson", "gamma") else "poisson"
        change.update(shape=shape, rate=float(load), concurrency=base.concurrency if base.shape == shape else None)
    return base.replace(**change, load_point_id=None)


def run_search(
    base: LoadSpec,
    search: SearchSpec,
    measure: Callable[..., Any],
    *,
    server_ok: Callable[[], bool] | None = None,
    log: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
    on_probe: Callable[[Probe], None] | None = None,
) -> SearchResult:
    """Find the capacity of the server `base` points at under `search`'s SLO (the module's docstring says how).
    `measure(spec, probe, on_record=..., stop_event=...)` runs one probe; `server_ok()` says whether the server still
    answers (asked after a probe with connection errors or no success); `log` gets one line per probe, `on_probe`
    each probe once judged."""
    search.validate()
    start, lo_bound, hi_bound = search.bounds()
    over = search.over
    if over == "rate" and base.shape not in ("poisson", "gamma"):
        base = base.replace(shape="poisson", rate=start)
    shape = "concurrency" if over == "concurrency" else base.shape
    probes: list[Probe] = []
    began = clock()
    result = SearchResult(search=search, probes=probes, status="found", shape=shape)
    duration = base.duration_s

    def spent() -> float:
        return clock() - began

    def per_probe() -> float:
        return max((p.time_s for p in probes), default=base.warmup_s + duration)

    def budget(extra: int) -> bool:
        """Room for `extra` more probes within the probe and time bounds."""
        return len(probes) + extra <= search.max_probes and spent() + extra * per_probe() <= search.max_time_s

    def run(load: float, phase: str) -> Probe:
        if len(probes) >= search.max_probes:
            raise _Stop("max_probes", f"the probe bound ({search.max_probes}) was reached")
        if probes and spent() + per_probe() > search.max_time_s:
            raise _Stop("max_time", f"the time bound ({search.max_time_s:g} s) would be passed")
        repeat = 1 + sum(1 for p in probes if p.load == load)
        probe = measure_probe(base, search, measure, load, phase, len(probes) + 1, repeat, clock)
        probes.append(probe)
        if on_probe is not None:
            on_probe(probe)
        log(probe_line(probe, search))
        if probe.status != "ok" or any(k in SERVER_ERRORS for k in (probe.summary.get("errors") or {})):
            if server_ok is not None and not server_ok():
                raise _Stop("server_failed", f"the server stopped answering during probe {probe.index}")
            ff = probe.summary.get("fail_fast")
            if ff:
                raise _Stop("refused", ff.get("message") or "every request failed the same way")
        return probe

    low = high = None  # the highest load that met, the lowest that missed
    try:
        x = _round_load(over, min(max(start, lo_bound), hi_bound))
        first = run(x, "bracket")
        if first.passed:
            low = x
            while high is None:
                if x >= hi_bound:
                    result.status = "at_least"
                    break
                x = _round_load(over, min(x * search.growth, hi_bound))
                if run(x, "bracket").passed:
                    low = x
                else:
                    high = x
        else:
            high = x
            while low is None:
                if x <= lo_bound:
                    result.status = "none"
                    break
                x = _round_load(over, max(x / search.growth, lo_bound))
                if x >= high:
                    result.status = "none"
                    break
                if run(x, "bracket").passed:
                    low = x
                else:
                    high = x
        if low is not None and high is not None:
            confirm = 2 * search.repeats - 1
            while high / low > 1 + search.tolerance:
                mid = _round_load(over, math.sqrt(low * high))
                if mid <= low or mid >= high:
                    break  # neighbours (whole streams) or within rounding
                if not budget(1 + confirm):
                    result.stopped_by = "max_probes" if len(probes) + 1 + confirm > search.max_probes else "max_time"
                    break
                if run(mid, "bisect").passed:
                    low = mid
                else:
                    high = mid
        if low is not None:
            below = _neighbour_below(over, low, search.tolerance, lo_bound, [p.load for p in probes if p.passed])
            loads = [v for v in (below, low) if v is not None]
            for _ in range(search.repeats):
                for v in loads:
                    if sum(1 for p in probes if p.load == v) < search.repeats:
                        run(v, "repeat")
    except _Stop as stop:
        if stop.status in ("server_failed", "refused"):
            result.status = stop.status
            result.note = stop.why
        else:
            result.stopped_by = stop.status
            result.note = f"stopped early: {stop.why}"
    result.time_s = spent()
    _decide(result, lo_bound, hi_bound)
    return result


def search_row(result: SearchResult, base: LoadSpec, workload: str) -> dict[str, Any]:
    """The search's answer as a row of `searches` (sql/schema.sql), less run_id, source, deployment_id and search_id:
    what the bench agent writes to its bundle and `wattbench import` of a search's result file writes."""
    from . import shapes

    search, cap = result.search, result.capacity()
    at = probe_spec(base, search.over, result.value).point() if result.value else None
    return {
        "workload": workload,
        "over": search.over,
        "unit": result.unit,
        "shape": result.shape,
        # the search's arrivals are the base's shape, or poisson (its burstiness NULL, as a closed loop's)
        "burstiness": base.param("burstiness") if result.shape == base.shape else None,
        "slo_ttft_ms": search.slo.get("ttft_ms"),
        "slo_tpot_ms": search.slo.get("tpot_ms"),
        "slo_e2e_ms": search.slo.get("e2e_ms"),
        "attainment": search.attainment,
        "status": result.status,
        "capacity": cap["value"],
        "capacity_lo": cap["lo"],
        "capacity_hi": cap["hi"],
        "at_point_label": shapes.label(at) if at else None,
        "repeats_at_capacity": cap["repeats_at_capacity"],
        "binding": result.binding,
        "binding_share": result.binding_share,
        "binding_load": result.binding_load,
        "probes": cap["probes"],
        "window_s": cap["window_s"],
        "time_s": cap["time_s"],
        "stopped_by": result.stopped_by,
        "tolerance": search.tolerance,
        "answer": answer(result),
        "note": result.note,
        "search": search.to_dict(),
        "probe_verdicts": [
            {
                "load_point_id": p.load_point_id,
                "verdict": p.verdict,
                "attainment": p.attainment,
                "stopped_early": p.stopped_early,
            }
            for p in result.probes
        ],
    }


def measure_probe(
    base: LoadSpec,
    search: SearchSpec,
    measure: Callable[..., Any],
    load: float,
    phase: str,
    index: int,
    repeat: int,
    clock: Callable[[], float] = time.monotonic,
) -> Probe:
    """One probe at `load`, measured (with the over-saturation watcher on an open loop) and judged against the SLO."""
    probe = Probe(index=index, phase=phase, load=load, repeat=repeat)
    spec = probe_spec(base, search.over, load, repeat)
    stop = threading.Event()
    watcher = None
    if search.early_stop and not spec.load_shape.closed_loop:
        watcher = Oversaturation(spec, base.duration_s, search.slo, stop)
    t = clock()
    out = measure(spec, probe, on_record=watcher.see if watcher else None, stop_event=stop)
    probe.time_s = clock() - t
    s = dict(getattr(out, "summary", None) or {})
    probe.summary = s
    probe.status = getattr(out, "status", "ok") or "ok"
    probe.error_kind = getattr(out, "error_kind", None)
    probe.error_text = getattr(out, "error_text", None)
    probe.load_point_id = s.get("load_point_id") or getattr(out, "load_point_id", None)
    probe.window_s = float(s.get("window_s") or 0.0)
    probe.attainment = s.get("slo_attainment")
    probe.met = dict(s.get("slo_met") or {})
    if watcher is not None and watcher.fired is not None:
        probe.stopped_early = watcher.fired
        probe.verdict = "oversaturated"
    elif probe.attainment is not None and probe.attainment >= search.attainment:
        probe.verdict = "meets"
    else:
        probe.verdict = "misses"
    return probe


def decide(result: SearchResult) -> SearchResult:
    """The capacity, its interval and binding bound of a set of probes however they were chosen (a fixed grid's too:
    benchmarks/slo_search.py), by the same rules as the search's."""
    _, lo_bound, hi_bound = result.search.bounds()
    _decide(result, lo_bound, hi_bound)
    return result


def _neighbour_below(
    over: str, x: float, tolerance: float, lo_bound: float, met: list[float] | None = None
) -> float | None:
    """The load one tolerance step below x (concurrency: at least one stream fewer), or None below the bounds; a load
    that already met the SLO within that step below x is taken instead (its window counts)."""
    near = [y for y in (met or []) if x / (1 + tolerance) * (1 - 1e-9) <= y < x]
    if near:
        return max(near)
    if over == "concurrency":
        y = float(max(1, min(x - 1, round(x / (1 + tolerance)))))
        return y if y < x and y >= lo_bound else None
    y = _round_load(over, x / (1 + tolerance))
    return y if y < x and y >= lo_bound * (1 - 1e-9) else None


def load_meets(probes: list[Probe]) -> bool:
    """Whether a load meets the SLO: it was measured and every one of its windows met the attainment (none missed,
    none ended oversaturated). Its windows' requests pooled are not enough: three windows at 1.0, 1.0 and 0.987
    pool to 0.996, yet one window in three missed a 0.99 target."""
    return bool(probes) and all(p.verdict == "meets" for p in probes)


def _pooled(probes: list[Probe]) -> float | None:
    """Attainment over several windows at one load: the requests they sent, pooled."""
    good = total = 0.0
    for p in probes:
        n = p.summary.get("sent_in_window")
        if n is None or p.attainment is None:
            continue
        good += p.attainment * n
        total += n
    return good / total if total else None


def _pooled_met(probes: list[Probe]) -> dict[str, float]:
    out: dict[str, float] = {}
    weight: dict[str, float] = {}
    for p in probes:
        n = p.summary.get("sent_in_window") or 0
        for k, v in p.met.items():
            out[k] = out.get(k, 0.0) + v * n
            weight[k] = weight.get(k, 0.0) + n
    return {k: out[k] / weight[k] for k in out if weight[k]}


def _decide(result: SearchResult, lo_bound: float, hi_bound: float) -> None:
    """The capacity, its interval and the binding bound from the probes (the module's docstring says how)."""
    search, probes = result.search, result.probes
    if result.status in ("server_failed", "refused") or not probes:
        if result.status == "found":
            result.status = "none"
        return
    target = search.attainment
    loads = sorted({p.load for p in probes})

    def meets(load: float) -> bool:
        return load_meets([p for p in probes if p.load == load])

    passing = [x for x in loads if meets(x)]
    if not passing:
        result.status = "none"
        lowest = loads[0]
        _bind(result, lowest)
        return
    # the capacity: the highest load that met in every window (a repeated load with one window missing does not)
    value = max(passing)
    result.value = value
    windows = len(result.at_probes(value))
    if windows < search.repeats and result.stopped_by is None and result.status == "found":
        result.note = (
            f"the capacity rests on {windows} window(s): the loads repeated above it missed the SLO in at least one "
            "of their windows"
        )
    fail_above = min((y for y in loads if y > value and not meets(y)), default=None)
    if fail_above is None:
        if result.status == "found":
            result.status = "at_least"
        result.lo, result.hi = value, None
        if result.stopped_by is None and value < hi_bound * (1 - 1e-9) and search.over == "rate":
            result.note = result.note or "the search ended below its max_load without a load that missed"
        _bind(result, None)
        return
    result.status = "found"
    result.missed_load = fail_above
    # the repeats' spread: where attainment's interval crosses the target at its lower and its upper end ...
    lo = _first_crossing(_attainment_curve(probes, loads, "lo"), target)
    hi = _first_crossing(_attainment_curve(probes, loads, "hi"), target)
    # ... and the search's step: the capacity is only known to lie below the lowest load that missed
    step = fail_above - 1 if search.over == "concurrency" else fail_above
    lo, hi = min(lo, value), max(hi, step, value)
    if search.over == "concurrency":  # whole streams: the interval's ends are counts that can be run
        lo, hi = float(max(1, math.floor(lo + 1e-9))), float(max(value, step, math.floor(hi + 1e-9)))
    result.lo, result.hi = lo, hi
    _bind(result, fail_above)


def _attainment_curve(probes: list[Probe], loads: list[float], end: str) -> list[tuple[float, float]]:
    """(load, attainment) at every load measured, in load order: the mean over its windows' attainments (a window
    that ended oversaturated counts 0) shifted to the `end` ("lo" or "hi") of its 95% t interval over the windows
    (one window: its own attainment)."""
    out = []
    for x in loads:
        values = [0.0 if p.verdict == "oversaturated" else p.attainment for p in probes if p.load == x]
        values = [v for v in values if v is not None]
        if not values:
            continue
        m = sum(values) / len(values)
        if len(values) > 1:
            sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
            half = _t975(len(values) - 1) * sd / math.sqrt(len(values))
            m = m - half if end == "lo" else m + half
        out.append((x, m))
    return out


def _first_crossing(pts: list[tuple[float, float]], target: float) -> float:
    """The lowest load where the piecewise-linear (in log-load) attainment through pts falls below target; the
    first point's load when it is already below (the interval reaches no lower than the loads measured), the last
    one's when it never falls."""
    if pts[0][1] < target:
        return pts[0][0]
    for (x0, a0), (x1, a1) in zip(pts, pts[1:]):
        if a1 < target <= a0:
            if a0 == a1:
                return x1
            f = (a0 - target) / (a0 - a1)
            return math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))
    return pts[-1][0]


def _bind(result: SearchResult, load: float | None) -> None:
    """The bound most missed at `load` (the lowest load that missed above capacity, or the lowest probe), over the
    windows there that missed (a load misses when one of its windows does)."""
    at = [p for p in result.probes if load is not None and p.load == load]
    if not at:
        return
    met = _pooled_met([p for p in at if p.verdict != "meets"] or at)
    if not met:
        return
    key = min(met, key=lambda k: (met[k], list(LIMITS).index(k)))
    if met[key] >= result.search.attainment and not any(p.verdict == "oversaturated" for p in at):
        return
    result.binding, result.binding_share, result.binding_load = key, met[key], load


# ---------------------------------------------------------------------------------------------------------------
# Words
# ---------------------------------------------------------------------------------------------------------------
def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.3g} s" if v >= 10000 else f"{v:.4g} ms"


def fmt_load(over: str, x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:g} streams" if over == "concurrency" else f"{x:.3g} req/s"


def probe_line(p: Probe, search: SearchSpec) -> str:
    """One line per probe as the search goes."""
    k = search.percentile_key()
    s = p.summary
    parts = [
        f"probe {p.index:>2} {p.phase:<7} {fmt_load(search.over, p.load):>14}"
        + (f" #{p.repeat}" if p.repeat > 1 else "   "),
        f"attainment {_pct(p.attainment):>6}",
        " ".join(f"{NAMES[m]} {k} {_ms((s.get(m) or {}).get(k))}" for m in search.slo),
        f"{_num(s.get('output_token_throughput'))} tok/s"
        + (f" {e['output_tokens_per_j']:.3g} tok/J" if (e := s.get("energy") or {}).get("output_tokens_per_j") else ""),
    ]
    errors = s.get("failed_in_window") or 0
    if errors:
        parts.append(f"{errors} failed")
    verdict = p.verdict.upper() if p.verdict != "meets" else "meets"
    if p.stopped_early:
        verdict += f" (queue growing: stopped at {p.stopped_early['at_s']:.1f} s)"
    parts.append(f"-> {verdict}  [window {p.window_s:.1f} s]")
    return "  ".join(parts)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _at(result: SearchResult, load: float | None) -> str:
    """What the probes at one load measured, in words."""
    search = result.search
    at = result.at_probes(load)
    if not at:
        return ""
    k = search.percentile_key()
    pooled = _pooled(at)
    met = _pooled_met(at)
    last = at[-1].summary
    figures = ", ".join(
        f"{NAMES[m]} {k} {_ms((last.get(m) or {}).get(k))} ({_pct(met.get(m))} within {_ms(search.slo[m])})"
        for m in search.slo
    )
    err = met.get("no_error")
    errors = f", {_pct(1 - err)} failed" if err is not None and err < 1 else ""
    early = " (its queue grew without bound: stopped early)" if any(p.stopped_early for p in at) else ""
    missed = sum(1 for p in at if p.verdict != "meets")
    windows = f", {missed} of its {len(at)} windows missed" if len(at) > 1 and missed else ""
    return f"{_pct(pooled)} of requests met the SLO{windows}; {figures}{errors}{early}"


def answer(result: SearchResult) -> str:
    """The search's one plain-language answer."""
    search = result.search
    over = search.over
    how = "open-loop " + result.shape + " arrivals" if over == "rate" else "closed-loop streams"
    cost = f"{len(result.probes)} probes, {result.window_s:.0f} s of windows"
    if result.status in ("server_failed", "refused"):
        last = result.probes[-1] if result.probes else None
        return (
            f"search ended: {result.note}"
            + (f" (at {fmt_load(over, last.load)}: {last.error_kind or 'errors'})" if last else "")
            + f"; {cost} kept"
        )
    if result.status == "none":
        lowest = min((p.load for p in result.probes), default=None)
        stopped = f"; {result.note} before reaching min_load" if result.stopped_by else ""
        return (
            f"no load meets the SLO ({search.slo_text()}); at the lowest probe, {fmt_load(over, lowest)}: "
            f"{_at(result, lowest)}" + _limit(result) + f"{stopped}. {cost}."
        )
    interval = ""
    if result.status == "found" and result.lo is not None and result.hi is not None:
        interval = (
            f" [{_g(result.lo)}, {_g(result.hi)}] (95% interval: the repeats' spread and the search's step, "
            f"{fmt_load(over, result.missed_load)} missed)"
        )
    if result.status == "at_least":
        head = f"at least {fmt_load(over, result.value)} ({how}) meets the SLO ({search.slo_text()})"
        tail = (
            "; no load up to the search's bound missed it"
            if result.stopped_by is None
            else f"; the search stopped before finding a load that missed it ({result.note})"
        )
        return f"{head}{tail}: at {fmt_load(over, result.value)} {_at(result, result.value)}. {cost}."
    n = len(result.at_probes(result.value))
    text = f"capacity {fmt_load(over, result.value)}{interval} ({how}) meeting {search.slo_text()}, " + (
        "met in its one window" if n == 1 else f"met in every one of its {n} windows"
    )
    if result.binding:
        text += (
            f"; binding: {NAMES[result.binding]} at {fmt_load(over, result.binding_load)} "
            f"({_at(result, result.binding_load)})" + _limit(result)
        )
    if result.stopped_by:
        text += f"; {result.note}: the interval is wider than the tolerance"
    return text + f". {cost}."


def _limit(result: SearchResult) -> str:
    if not result.binding:
        return ""
    return f"; what limits it: {LIMITS[result.binding]}"


def _g(x: float) -> str:
    return f"{x:.3g}"


def check_base(spec: LoadSpec, over: str) -> None:
    """A base spec a search can vary: LoadSpecError naming what does not fit."""
    if over == "rate" and spec.shape not in ("poisson", "gamma"):
        raise LoadSpecError(f"a rate search sends poisson or gamma arrivals, not shape {spec.shape!r}")
    if spec.max_requests is not None:
        raise LoadSpecError("a search's probes are windows of duration_s: give no max_requests (--num-prompts)")
