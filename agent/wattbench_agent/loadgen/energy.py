"""Energy and cost with `wattbench load` and `wattbench load --search` on their own (docs/LOADGEN.md, "Energy and
cost"): a GPU telemetry source (the agent's own samplers, telemetry/: this host's NVML on the GPUs named, an NVIDIA
dcgm-exporter's /metrics, or the emulator's modelled telemetry), each window's energy read from the energy counter at
the window's edges as the bench agent reads it (Sampler.begin_window / end_window, called by the load generator's
window callbacks), and prices. What a window's reading gives, with the load's own figures, is defined as the warehouse
defines it (sql/views.sql v_load_points_core) and, over a search's windows at its capacity, as v_point_figures does
(`over_windows`): tests/loadgen/test_energy.py checks both against the warehouse on the same windows.

    with Meter("nvml", url, gpus=["0", "1"], prices=Prices(gpu_hour_usd=2.5)) as meter:
        start, end = meter.callbacks("c32")       # run_load(..., on_window_start=start, on_window_end=end)
    summary["energy"] = figures(summary, reading)   # result.point_result does this with the reading end() returned

Agent side: stdlib (and the samplers' own packages).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

KINDS = {"nvml": "nvml", "dcgm": "dcgm", "emulator": "emulated", "emulated": "emulated", "none": "none"}
# the figures a window's reading gives, and how their mean over windows gets its interval (sql/views.sql
# v_metric_catalog's scale: 'log' a positive quantity, 'reciprocal' a cost per token)
SCALES = {
    "output_tok_s": "log",
    "goodput_requests_s": "log",
    "output_tokens_per_j": "log",
    "output_tokens_per_j_above_idle": "log",
    "j_per_request": "log",
    "j_per_request_above_idle": "log",
    "j_per_output_token": "log",
    "mean_power_w": "log",
    "usd_per_1m_output_tokens": "reciprocal",
    "energy_usd_per_1m_output_tokens": "reciprocal",
}
UNITS = {
    "output_tok_s": "tok/s",
    "goodput_requests_s": "req/s",
    "output_tokens_per_j": "tok/J",
    "output_tokens_per_j_above_idle": "tok/J",
    "j_per_request": "J",
    "j_per_request_above_idle": "J",
    "j_per_output_token": "J",
    "mean_power_w": "W",
    "usd_per_1m_output_tokens": "$",
    "energy_usd_per_1m_output_tokens": "$",
}


class EnergyError(ValueError):
    """Telemetry or prices that cannot be used as given; one line naming the flag and what was expected."""


def parse_telemetry(text: str) -> tuple[str, str | None]:
    """--telemetry's value: (sampler kind, dcgm-exporter URL or None). nvml | dcgm=URL (dcgm alone:
    $WATTBENCH_DCGM_URL) | emulator | none."""
    kind, sep, url = str(text).strip().partition("=")
    kind = kind.strip().lower()
    if kind not in KINDS or (sep and kind != "dcgm"):
        raise EnergyError(
            f"--telemetry {text!r}: expected nvml (this host's NVML, on --gpus), dcgm=URL (a dcgm-exporter's "
            "/metrics), emulator (the emulator's own power figures) or none"
        )
    if kind == "dcgm" and not (url.strip() or os.environ.get("WATTBENCH_DCGM_URL")):
        raise EnergyError("--telemetry dcgm needs the exporter's URL: dcgm=http://HOST:9400/metrics")
    return KINDS[kind], url.strip() or None


@dataclass
class Prices:
    """$ per GPU-hour, $ per kWh and the data centre's PUE (the energy line's overhead; 1: the GPUs' energy alone)."""

    gpu_hour_usd: float | None = None
    energy_kwh_usd: float | None = None
    pue: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_prices(path: str) -> Prices:
    """A wattbench plan's `prices:` section (gpu_hour_usd, energy_kwh_usd, pue)."""
    try:
        import yaml

        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as exc:
        raise EnergyError(f"--prices-from {path}: cannot read it ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - a YAML error, said in one line
        raise EnergyError(f"--prices-from {path}: not YAML ({str(exc).splitlines()[0]})") from None
    prices = doc.get("prices") if isinstance(doc, dict) else None
    if not isinstance(prices, dict):
        raise EnergyError(f"--prices-from {path}: no prices: section; expected a wattbench plan")
    out = {}
    for key in ("gpu_hour_usd", "energy_kwh_usd", "pue"):
        v = prices.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise EnergyError(f"--prices-from {path}: prices.{key} = {v!r}; expected a positive number")
        out[key] = float(v)
    return Prices(**out)


def base_url(url: str) -> str:
    """scheme://host:port of a load URL (the emulator serves its telemetry beside its API)."""
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}"


class Meter:
    """One telemetry source for a whole `wattbench load` (every point of a sweep, every probe of a search), opened
    with `with`; `callbacks(name)` gives a window's edge callbacks, the end one returning the window's reading."""

    def __init__(
        self,
        kind: str,
        url: str,
        gpus: list[str] | None = None,
        prices: Prices | None = None,
        hz: float = 10.0,
        idle_s: float = 0.0,
        dcgm_url: str | None = None,
        log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    ):
        self.kind, self.url, self.gpus = kind, url, list(gpus or [])
        self.prices = prices or Prices()
        self.hz, self.idle_s, self.dcgm_url, self.log = hz, idle_s, dcgm_url, log
        self.sampler: Any = None
        self.facts: dict[str, Any] = {"telemetry": kind, "n_gpus": len(self.gpus) or None}
        self.idle_power_w: float | None = None
        self._n = 0

    def _uuids(self) -> list[str] | None:
        """The GPUs to read, by UUID: NVML indices are resolved through NVML (gpus.py), UUIDs taken as they are."""
        if not self.gpus:
            return None
        if self.kind != "nvml" or all(g.startswith(("GPU-", "MIG-")) for g in self.gpus):
            return self.gpus
        from wattbench_agent.gpus import GpuAssignmentError, NodeGpus

        node = NodeGpus.probe()
        if node is None:
            raise EnergyError("--telemetry nvml: NVML is not available on this host (no GPU, or no driver)")
        try:
            return [g.uuid for g in node.resolve(self.gpus, tp=len(self.gpus))]
        except GpuAssignmentError as exc:
            raise EnergyError(f"--gpus {','.join(self.gpus)}: {exc}") from None

    def __enter__(self) -> Meter:
        if self.kind == "none":
            return self
        from wattbench_agent.telemetry import TelemetryUnavailable, idle_baseline, open_sampler

        try:
            self.sampler = open_sampler(
                self.kind,
                gpu_uuids=self._uuids(),
                url=base_url(self.url),
                hz=self.hz,
                strict=True,  # energy was asked for: a source that cannot give it is an error, not NULLs
                dcgm_url=self.dcgm_url,
            )
        except TelemetryUnavailable as exc:
            flag = "emulator" if self.kind == "emulated" else self.kind
            raise EnergyError(f"--telemetry {flag}: {(str(exc).strip().splitlines() or [''])[0]}") from None
        info = self.sampler.info()
        self.facts = {
            "telemetry": self.kind,
            "source": "emulated" if self.kind == "emulated" else "measured",
            "gpu_uuids": info["gpu_uuids"],
            "gpu_name": info["gpu_name"],
            "n_gpus": info["n_gpus"] or len(info["gpu_uuids"]) or None,
        }
        self.log(
            f"wattbench load: energy from {self.kind} telemetry on {self.facts['n_gpus']} GPU(s)"
            + (f" ({self.facts['gpu_name']})" if self.facts["gpu_name"] else "")
        )
        if self.idle_s > 0:
            self.idle_power_w = idle_baseline(self.sampler, self.idle_s, "idle")["total_w"]
            self.log(f"wattbench load: idle power {_num(self.idle_power_w, 'W')} over {self.idle_s:g} s")
        return self

    def __exit__(self, *exc) -> None:
        if self.sampler is not None:
            self.sampler.close()

    def callbacks(self, name: str) -> tuple[Callable[[], None] | None, Callable[[], dict]]:
        """(on_window_start, on_window_end) for one load point: the energy counter read at each edge."""
        self._n += 1
        window = f"{name}@{self._n}"
        if self.sampler is None:
            return None, lambda: self.reading(None)

        def start() -> None:
            self.sampler.begin_window(window)

        def end() -> dict:
            return self.reading(self.sampler.end_window(window))

        return start, end

    def reading(self, w: dict | None) -> dict[str, Any]:
        """A window's reading as a load point keeps it (JSON): its energy and where it came from, and the prices."""
        return {
            **self.facts,
            "energy_j": (w or {}).get("total_j"),
            "energy_trace_j": (w or {}).get("trace_j"),
            "counter_reset": (w or {}).get("counter_reset"),
            "idle_power_w": self.idle_power_w,
            "prices": self.prices.to_dict(),
        }


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def figures(summary: dict, reading: dict) -> dict[str, Any]:
    """A window's energy and cost figures from its reading and the load's summary, as sql/views.sql
    v_load_points_core defines them: tokens per joule = output tokens in the window / the window's energy; J per
    request = the energy / the requests that ended in the window; mean power = energy / window; $ per 1M output tokens
    = $/GPU-hour x GPUs / (output tok/s x 3600) x 1e6; energy $ = kWh per 1M output tokens x $/kWh x PUE; *_above_idle
    subtract the idle power (--idle) over the window. NULL (None) where a part is missing, and `note` says which."""
    e, w = reading.get("energy_j"), summary.get("window_s")
    tok, done = summary.get("output_tokens_in_window"), summary.get("finished_in_window")
    idle, n = reading.get("idle_power_w"), reading.get("n_gpus")
    prices = reading.get("prices") or {}
    tok_s = _div(tok, w)
    above = e - idle * w if e is not None and idle is not None and w else None
    gpu_usd, kwh, pue = prices.get("gpu_hour_usd"), prices.get("energy_kwh_usd"), prices.get("pue") or 1.0
    out = {k: reading.get(k) for k in ("telemetry", "source", "gpu_name", "n_gpus", "idle_power_w")}
    out.update(
        energy_j=e,
        energy_trace_j=reading.get("energy_trace_j"),
        output_tok_s=tok_s,
        goodput_requests_s=summary.get("goodput"),
        mean_power_w=_div(e, w),
        output_tokens_per_j=_div(tok, e),
        output_tokens_per_j_above_idle=_div(tok, above),
        j_per_request=_div(e, done),
        j_per_request_above_idle=_div(above, done),
        j_per_output_token=_div(e, tok),
        usd_per_1m_output_tokens=_div(gpu_usd * n * 1e6, tok_s * 3600) if gpu_usd and n and tok_s else None,
        energy_usd_per_1m_output_tokens=e / tok * 1e6 / 3.6e6 * kwh * pue if e is not None and tok and kwh else None,
        prices=prices,
    )
    notes = []
    if e is None:
        notes.append(
            "no energy: telemetry none (--telemetry nvml|dcgm=URL|emulator)"
            if reading.get("telemetry") in (None, "none")
            else "no energy: the counter gave no reading for this window (unavailable, or it went backwards)"
        )
    if e is not None and not done:
        notes.append("no request ended in the window: no energy per request")
    if gpu_usd and not n:
        notes.append("no GPU count (--gpus): no $ per GPU-hour figure")
    if not gpu_usd:
        notes.append("no $ per GPU-hour (--gpu-hour-usd, --prices-from PLAN): no cost figure")
    if e is not None and not kwh:
        notes.append("no $ per kWh (--energy-kwh-usd): no energy cost")
    out["note"] = "; ".join(notes) or None
    return out


def over_windows(values: list[float | None], scale: str) -> dict[str, Any]:
    """The mean of a figure over windows (repeats) with its 95% interval, as sql/views.sql v_point_figures_live makes
    it for one server start with no between-start prior (wattbench_agent/intervals.py, scope one_start): 'log' a t
    interval on the log scale; 'reciprocal' (a cost per token) the price over the mean of its denominator, the interval
    mapped through 1/x; none from one window, and `method` says why."""
    from wattbench_agent.intervals import interval

    xs = [v for v in values if v is not None]
    if not xs:
        return {"estimate": None, "lo": None, "hi": None, "n": 0, "method": "not measured"}
    ys = [1 / v if scale == "reciprocal" and v else v for v in xs]
    k = len(ys)
    iv = interval([ys])
    m = iv.estimate
    estimate = 1 / m if scale == "reciprocal" and m else m
    if k < 2:
        return {"estimate": estimate, "lo": None, "hi": None, "n": k, "method": "one window: no interval"}
    if iv.lo is None:
        return {"estimate": estimate, "lo": None, "hi": None, "n": k, "method": "no interval: the mean is not positive"}
    lo, hi = (1 / iv.hi, 1 / iv.lo) if scale == "reciprocal" else (iv.lo, iv.hi)
    how = "price over the mean of its denominator; " if scale == "reciprocal" else ""
    return {
        "estimate": estimate,
        "lo": lo,
        "hi": hi,
        "n": k,
        # one server, measured as it is: the interval of the mean of its windows (sql/views.sql's scope one_start)
        "scope": iv.scope,
        "method": f"within one server start: {how}t interval on the log scale over {k} (says nothing of another start)",
    }


def at_capacity(summaries: list[dict]) -> dict[str, Any]:
    """The figures at a search's capacity over its windows there: {figure: {estimate, lo, hi, n, method, unit}},
    the source of the energy (measured | emulated) and its telemetry, or {} when no window has an energy block."""
    blocks = [s.get("energy") for s in summaries if isinstance(s.get("energy"), dict)]
    if not blocks:
        return {}
    out: dict[str, Any] = {k: blocks[0].get(k) for k in ("telemetry", "source", "gpu_name", "n_gpus")}
    for name, scale in SCALES.items():
        out[name] = {**over_windows([b.get(name) for b in blocks], scale), "unit": UNITS[name]}
    notes = sorted({b["note"] for b in blocks if b.get("note")})
    out["note"] = "; ".join(notes) or None
    return out


def _num(v: float | None, unit: str = "") -> str:
    if v is None:
        return "NULL"
    text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return f"{text} {unit}".strip()


def _fig(f: dict | None) -> str:
    if not f or f.get("estimate") is None:
        return "NULL"
    if f.get("lo") is None:
        return f"{_num(f['estimate'])} ({f.get('method')})"
    return f"{_num(f['estimate'])} [{_num(f['lo'])}, {_num(f['hi'])}]"


def capacity_line(fig: dict) -> str:
    """The figures at a search's capacity in one line, each with its 95% interval."""
    if not fig:
        return (
            "at the capacity: no energy or cost figures (--telemetry nvml|dcgm=URL|emulator, --gpu-hour-usd, "
            "--energy-kwh-usd)"
        )
    parts = [
        f"{_fig(fig.get('output_tok_s'))} tok/s",
        f"{_fig(fig.get('output_tokens_per_j'))} tok/J",
        f"{_fig(fig.get('j_per_request'))} J per request",
        f"$ {_fig(fig.get('usd_per_1m_output_tokens'))} per 1M output tokens (GPU-hours)",
        f"energy $ {_fig(fig.get('energy_usd_per_1m_output_tokens'))} per 1M output tokens",
    ]
    head = (
        "at the capacity (95% intervals over its windows, within this one server start; energy "
        f"{fig.get('source') or 'not measured'}"
    )
    head += f", {fig.get('telemetry')} telemetry" if fig.get("telemetry") not in (None, "none") else ""
    head += f" on {fig['n_gpus']} GPU(s)" if fig.get("n_gpus") else ""
    return head + "): " + ", ".join(parts) + (f"; {fig['note']}" if fig.get("note") else "")
