"""trace: the user's own send times (JSONL or CSV: timestamp, prompt | input_tokens, output_tokens), first arrival
at offset 0, times `trace_time_scale`; duration_s 0 replays the whole trace. The twin replays `arrivals` when given
(e.g. a measured run's send times), else the trace file's."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import Param, Shape, finish, register

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np


@register
class Trace(Shape):
    name = "trace"
    fields = ("concurrency",)
    params = (
        Param(
            "trace_path",
            str,
            help="replay a JSONL/CSV trace (timestamp, prompt or input_tokens, output_tokens)",
            cli="--trace",
            metavar="TRACE",
            shape_from_flags=True,
            exclusive=True,
        ),
        Param(
            "trace_time_scale",
            float,
            default=1.0,
            minimum=0,
            exclusive_minimum=True,
            maximum=1e6,
            help="trace timestamps are multiplied by this (0.5 = replay twice as fast)",
            shape_from_flags=True,
        ),
    )
    ends_by_itself = True
    order = 4
    summary = "replay a file's timestamps (and lengths or prompts), scaled by trace_time_scale"

    def check(self, p: Mapping[str, Any]) -> str | None:
        if p.get("trace_path") or p.get("arrivals") is not None:  # arrivals: the twin replaying given send times
            return None
        return "shape 'trace' needs trace_path"

    def label(self, p: Mapping[str, Any]) -> str:
        return f"trace-{Path(p['trace_path']).stem}" if p.get("trace_path") else "trace"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        import numpy as np

        scale = float(self.param(p, "trace_time_scale"))
        offs = np.asarray([r.t_s * scale for r in load_trace(p["trace_path"], _labels(p))], dtype=float)
        return finish(offs, p, horizon_s)

    def request_rows(self, p: Mapping[str, Any]) -> list:
        return load_trace(p["trace_path"], _labels(p))

    def workload_name(self, p: Mapping[str, Any]) -> str:
        return f"trace:{Path(p.get('trace_path') or '').name}"

    def twin_arrivals(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> list[float]:
        if p.get("arrivals") is not None:
            return sorted(float(a) for a in p["arrivals"] if a < horizon_s)
        return super().twin_arrivals(p, horizon_s, seed)


def _labels(p: Mapping[str, Any]) -> dict[str, str] | None:
    """vLLM's timed_trace names its columns (--timed-trace-label-*): the dataset's options say which, when the
    point's dataset is that trace."""
    if p.get("dataset_name") != "timed_trace":
        return None
    opts = p.get("dataset_options") or {}
    keys = ("timestamp", "input_length", "output_length", "hash_ids")
    return {k: opts[f"timed_trace_label_{k}"] for k in keys if opts.get(f"timed_trace_label_{k}")}


class TraceError(ValueError):
    """A trace file could not be read; the message names the file and line."""


@dataclass
class TraceRow:
    t_s: float
    input_tokens: int | None
    output_tokens: int | None
    prompt: str | None
    hash_ids: tuple = ()  # vLLM's timed_trace: ids of prompt blocks shared by every row naming them


_TS_KEYS = ("timestamp", "ts", "time", "arrival_time", "arrival_s", "t")
_TS_MS_KEYS = ("timestamp_ms", "ts_ms", "time_ms", "arrival_ms")
_IN_KEYS = ("input_tokens", "input_length", "prompt_tokens", "input_len", "context_tokens", "isl")
_OUT_KEYS = (
    "output_tokens",
    "output_length",
    "completion_tokens",
    "output_len",
    "generated_tokens",
    "osl",
    "max_tokens",
)
_PROMPT_KEYS = ("prompt", "text", "input")


def _pick(row: dict, keys: tuple[str, ...]):
    for k in keys:
        if k in row and row[k] not in (None, ""):
            return row[k]
    return None


def _parse_row(row: dict, where: str, labels: dict[str, str] | None = None) -> TraceRow:
    import numpy as np

    if not isinstance(row, dict):
        raise TraceError(f"{where}: expected an object, got {type(row).__name__}")
    labels = labels or {}
    ts = _pick(row, (labels["timestamp"],) if "timestamp" in labels else _TS_KEYS)
    scale = 1.0
    if ts is None and "timestamp" in labels:
        raise TraceError(f"{where}: no timestamp {labels['timestamp']!r} (--timed-trace-label-timestamp)")
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
    for keys, name, label in (
        (_IN_KEYS, "input_tokens", "input_length"),
        (_OUT_KEYS, "output_tokens", "output_length"),
    ):
        v = _pick(row, (labels[label], *keys) if label in labels else keys)
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
    hashes = row.get(labels.get("hash_ids", "hash_ids")) or ()
    if not isinstance(hashes, (list, tuple)) or not all(isinstance(h, (int, str)) for h in hashes):
        raise TraceError(f"{where}: hash_ids must be a list of ids")
    return TraceRow(t, vals[0], vals[1], prompt, tuple(hashes))


def load_trace(path: str | Path, labels: dict[str, str] | None = None) -> list[TraceRow]:
    """Read a JSONL or CSV trace (by extension; .csv/.tsv is CSV, anything else JSONL). Rows sorted by time,
    timestamps shifted so the first is 0. Errors name the file and line. `labels` names the columns of
    timestamp, input_length, output_length and hash_ids where they are not the usual names (vLLM's timed_trace)."""
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
                rows.append(
                    _parse_row({k: (v.strip() if isinstance(v, str) else v) for k, v in row.items()}, where, labels)
                )
    else:
        with p.open(encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"{p}:{i}: not valid JSON ({exc.msg})") from None
                rows.append(_parse_row(obj, f"{p}:{i}", labels))
    if not rows:
        raise TraceError(f"{p}: the trace has no rows")
    rows.sort(key=lambda r: r.t_s)
    t0 = rows[0].t_s
    for r in rows:
        r.t_s -= t0
    return rows
