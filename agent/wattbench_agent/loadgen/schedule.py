"""Precomputed arrival schedules (offsets in seconds from t0) for the open-loop shapes, and trace files.

- poisson: exponential gaps, mean 1/rate.
- gamma: gaps ~ Gamma(shape=k, scale=1/(rate*k)), k = burstiness (the vllm bench convention): k = 1 is Poisson,
  k < 1 burstier, k > 1 smoother; the gaps' coefficient of variation is 1/sqrt(k).
- surge: the same renewal process (Poisson, or gamma when burstiness != 1) run against a piecewise-constant
  intensity: `rate`, then `rate * surge_factor` during [surge_start_s, surge_start_s + surge_duration_s), then
  `rate` again (time rescaling: unit-rate arrivals mapped through the inverse cumulative intensity).
- trace: the user's own timestamps (first arrival at offset 0), times `trace_time_scale`.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class TraceError(ValueError):
    """A trace file could not be read; the message names the file and line."""


def _renewal_unit(n_hint: int, k: float, rng: np.random.Generator, horizon: float) -> np.ndarray:
    """Arrival times of a unit-rate renewal process (gamma gaps, mean 1) up to `horizon`."""
    out: list[np.ndarray] = []
    t = 0.0
    n = max(int(n_hint), 16)
    while True:
        gaps = rng.gamma(shape=k, scale=1.0 / k, size=n) if k != 1.0 else rng.exponential(1.0, size=n)
        times = t + np.cumsum(gaps)
        out.append(times)
        t = float(times[-1])
        if t >= horizon:
            break
    allt = np.concatenate(out)
    return allt[allt < horizon]


def arrival_offsets(shape: str, *, rate: float, horizon_s: float, burstiness: float = 1.0, seed: int = 0,
                    surge_factor: float = 1.0, surge_start_s: float = 0.0, surge_duration_s: float = 0.0,
                    max_requests: int | None = None) -> np.ndarray:
    """Send offsets (s, ascending, in [0, horizon_s)) for shape poisson | gamma | surge.

    The first request goes out at offset 0 (as vllm bench does), the rest after the drawn gaps.
    """
    rng = np.random.default_rng(seed)
    k = 1.0 if shape == "poisson" else float(burstiness)
    if shape in ("poisson", "gamma"):
        unit = _renewal_unit(int(rate * horizon_s * 1.2) + 16, k, rng, rate * horizon_s)
        offs = np.concatenate([[0.0], unit / rate])
    elif shape == "surge":
        a = min(max(surge_start_s, 0.0), horizon_s)
        b = min(max(surge_start_s + surge_duration_s, a), horizon_s)
        hi = rate * surge_factor
        lam_a = rate * a
        lam_b = lam_a + hi * (b - a)
        lam_end = lam_b + rate * (horizon_s - b)
        unit = _renewal_unit(int(lam_end * 1.2) + 16, k, rng, lam_end)
        unit = np.concatenate([[0.0], unit])
        offs = np.where(unit < lam_a, unit / rate,
                        np.where(unit < lam_b, a + (unit - lam_a) / hi, b + (unit - lam_b) / rate))
    else:
        raise ValueError(f"no precomputed schedule for shape {shape!r}")
    offs = offs[offs < horizon_s] if horizon_s > 0 else offs[:1]
    if max_requests is not None:
        offs = offs[:max_requests]
    return offs


# ---------------------------------------------------------------------------------------------- traces
@dataclass
class TraceRow:
    t_s: float
    input_tokens: int | None
    output_tokens: int | None
    prompt: str | None


_TS_KEYS = ("timestamp", "ts", "time", "arrival_time", "arrival_s", "t")
_TS_MS_KEYS = ("timestamp_ms", "ts_ms", "time_ms", "arrival_ms")
_IN_KEYS = ("input_tokens", "input_length", "prompt_tokens", "input_len", "context_tokens", "isl")
_OUT_KEYS = ("output_tokens", "output_length", "completion_tokens", "output_len", "generated_tokens", "osl", "max_tokens")
_PROMPT_KEYS = ("prompt", "text", "input")


def _pick(row: dict, keys: tuple[str, ...]):
    for k in keys:
        if k in row and row[k] not in (None, ""):
            return row[k]
    return None


def _parse_row(row: dict, where: str) -> TraceRow:
    if not isinstance(row, dict):
        raise TraceError(f"{where}: expected an object, got {type(row).__name__}")
    ts = _pick(row, _TS_KEYS)
    scale = 1.0
    if ts is None:
        ts = _pick(row, _TS_MS_KEYS)
        scale = 1e-3
    if ts is None:
        raise TraceError(f"{where}: no timestamp (one of {', '.join(_TS_KEYS + _TS_MS_KEYS)})")
    try:
        t = float(ts) * scale
    except (TypeError, ValueError):
        raise TraceError(f"{where}: timestamp {ts!r} is not a number (seconds)") from None
    if not np.isfinite(t):
        raise TraceError(f"{where}: timestamp {ts!r} is not finite")
    prompt = _pick(row, _PROMPT_KEYS)
    vals = []
    for keys, name in ((_IN_KEYS, "input_tokens"), (_OUT_KEYS, "output_tokens")):
        v = _pick(row, keys)
        if v is None:
            vals.append(None)
            continue
        try:
            fv = float(v)
            iv = int(fv)
            if iv != fv or iv < (1 if name == "output_tokens" else 1):
                raise ValueError
        except (TypeError, ValueError):
            raise TraceError(f"{where}: {name} {v!r} is not a positive integer") from None
        vals.append(iv)
    if vals[0] is None and prompt is None:
        raise TraceError(f"{where}: needs a prompt or input_tokens")
    if prompt is not None and not isinstance(prompt, str):
        raise TraceError(f"{where}: prompt must be a string")
    return TraceRow(t, vals[0], vals[1], prompt)


def load_trace(path: str | Path) -> list[TraceRow]:
    """Read a JSONL or CSV trace (by extension; .csv/.tsv is CSV, anything else JSONL). Rows sorted by time,
    timestamps shifted so the first is 0. Errors name the file and line."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such trace file")
    rows: list[TraceRow] = []
    if p.suffix.lower() in (".csv", ".tsv"):
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="\t" if p.suffix.lower() == ".tsv" else ",")
            if not reader.fieldnames:
                raise TraceError(f"{p}:1: empty CSV (want a header: timestamp,input_tokens,output_tokens or prompt)")
            reader.fieldnames = [h.strip().lower() for h in reader.fieldnames]
            for row in reader:
                where = f"{p}:{reader.line_num}"
                if None in row:
                    raise TraceError(f"{where}: more fields than the header has")
                rows.append(_parse_row({k: (v.strip() if isinstance(v, str) else v) for k, v in row.items()}, where))
    else:
        with p.open(encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"{p}:{i}: not valid JSON ({exc.msg})") from None
                rows.append(_parse_row(obj, f"{p}:{i}"))
    if not rows:
        raise TraceError(f"{p}: the trace has no rows")
    rows.sort(key=lambda r: r.t_s)
    t0 = rows[0].t_s
    for r in rows:
        r.t_s -= t0
    return rows
