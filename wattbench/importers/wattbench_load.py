"""`wattbench load`'s own results (docs/LOADGEN.md): what it prints with `--json` (one load point's summary, a sweep's
`{"sweep": [...]}`, or a capacity search's document), a search's `--save-result` file (the same document), and the
per-request file of `--out` (with its points file beside it, `r.points.jsonl`, and for a search its document,
`r.search.json`). Each becomes a run with source `imported:wattbench`:

- the `--out` file: every request as a `requests` row and every load point as its live run summarised it (the
  points file's window, result.point_result), so every figure is recomputed by the warehouse from the requests;
- a summary or a search document: each point's (each probe's) own statistics, as other tools' files without
  per-request rows (load_runs.summary);
- either way, with `--telemetry`: each window's energy (load_runs.energy_j), the telemetry that read it
  (deployments.telemetry_source nvml | dcgm | emulated, its GPUs and their idle power with `--idle`) and the prices
  (runs' gpu_price_per_hour, energy_price_per_kwh, pue): tok/J, J per request and $ per 1M output tokens follow in
  v_load_points as for a bundle;
- a search: its probes as load runs of the search (search_id, probe, probe_phase, probe_verdict; repeats of one
  load are repeats of one point) and its answer as a row of `searches`, so `slo_capacity` gives the capacity with
  the figures at it over its windows, with intervals (sql/views.sql v_slo_capacity_live).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from wattbench.importers.imported import (
    ImportedPoint,
    ImportedRun,
    ImportFileError,
    energy_facts,
    file_sha256,
    read_json,
)

TOOL = "wattbench"
EXPECTED = (
    "wattbench load: its --json output (a summary, a sweep or a search), a search's --save-result file, or its --out "
    "per-request file"
)
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
# load_runs columns a summary carries under the same meaning
_SUMMARY_COLUMNS = ("achieved_rate", "achieved_concurrency", "drain_s", "warmup_s", "duration_s")
# and those of the live run's load_runs row (LoadResult.load_run_row) that a --out file gives back
_ROW_COLUMNS = (
    "send_lateness_p50_ms",
    "send_lateness_p99_ms",
    "step_gaps",
    "decode_step_ms",
    "stalled_gap_fraction",
    "stall_ms_mean",
    "expected_stalled_fraction",
    "phase_state",
)


def _is_summary(d: Any) -> bool:
    return isinstance(d, dict) and {"load_point_id", "window_s", "ttft_ms", "output_tokens_in_window"} <= set(d)


def _is_search(d: Any) -> bool:
    return isinstance(d, dict) and {"capacity", "probes", "search"} <= set(d)


def _is_record(d: Any) -> bool:
    return isinstance(d, dict) and {"request_id", "load_point_id", "sent_ns"} <= set(d)


def detect(path: Path, data: Any) -> bool:
    if path.name.endswith(".points.jsonl"):
        return True
    if isinstance(data, list):
        return bool(data) and _is_record(data[0])
    return (
        _is_search(data)
        or _is_summary(data)
        or _is_record(data)
        or (isinstance(data, dict) and isinstance(data.get("sweep"), list) and all(map(_is_summary, data["sweep"])))
    )


def _label(s: dict) -> str:
    """A summary's point label, as the load shape names its point (a search's at_point_label names it so too)."""
    from wattbench_agent.loadgen import shapes

    shape = s.get("shape") or "concurrency"
    return shapes.label(
        {
            "shape": shape,
            "concurrency": s.get("requested_concurrency"),
            "rate": s.get("requested_rate"),
            "burstiness": s.get("burstiness"),
        }
    )


def _energy(point: ImportedPoint, e: dict | None) -> None:
    if isinstance(e, dict):
        point.energy_j, point.energy_trace_j = e.get("energy_j"), e.get("energy_trace_j")


def _point(s: dict, path: Path, label: str | None = None) -> ImportedPoint:
    """A load point from its summary: the load generator's statistics over its window (no request rows)."""
    if not isinstance(s.get("window_s"), (int, float)) or not s["window_s"] > 0:
        lp, w = s.get("load_point_id"), s.get("window_s")
        raise ImportFileError(f"{path}: load point {lp}: window_s {w!r}; expected seconds > 0")
    point = ImportedPoint(
        point_label=label or _label(s),
        workload=str(s.get("workload") or "wattbench-load"),
        shape=str(s.get("shape") or "concurrency"),
        window_s=float(s["window_s"]),
        # the requests of the window: those sent in it, and those that ended in it (request throughput's)
        sent=s.get("sent_in_window"),
        completed=s.get("finished_in_window"),
        failed=s.get("failed_in_window"),
        output_tokens_total=s.get("output_tokens_in_window"),
        api=s.get("api"),
        concurrency=s.get("requested_concurrency"),
        rate=s.get("requested_rate"),
        burstiness=s.get("burstiness") if s.get("shape") == "gamma" else None,
        warmup_s=s.get("warmup_s"),
        achieved_concurrency=s.get("achieved_concurrency"),
        stats={m: {k: v for k, v in s[m].items() if k != "count"} for m in METRICS if isinstance(s.get(m), dict)},
        goodput=s.get("goodput"),
        figures={k: s.get(k) for k in ("request_throughput", "output_token_throughput", "goodput", "energy")},
    )
    point.load_runs = {k: s.get(k) for k in _SUMMARY_COLUMNS if s.get(k) is not None}
    point.load_runs["summary"] = {**s, "imported": {"tool": TOOL, "file": str(path)}}
    _energy(point, s.get("energy"))
    return point


def _numbered(points: list[ImportedPoint]) -> None:
    """Points of one label are repeats of one point (a search's repeated loads): 1, 2, ... in file order."""
    seen: dict[tuple[str, str], int] = {}
    for p in points:
        key = (p.workload, p.point_label)
        seen[key] = seen.get(key, 0) + 1
        p.repeat = seen[key]


def _probe_columns(points: list[ImportedPoint], ids: list[str | None], doc: dict) -> None:
    """Mark the points that are a search's probes with the search, their order, phase and verdict."""
    by_id = {b.get("load_point_id"): b for b in doc.get("probes") or []}
    for p, lp in zip(points, ids):
        b = by_id.get(lp)
        if b is not None:
            p.load_runs.update(
                search_id="search", probe=b.get("probe"), probe_phase=b.get("phase"), probe_verdict=b.get("verdict")
            )


def _search_rows(doc: dict | None, path: Path) -> list[dict]:
    if not doc:
        return []
    row = doc.get("searches_row")
    if not isinstance(row, dict) or not row.get("workload"):
        raise ImportFileError(
            f"{path}: a search without its searches_row (saved by an older wattbench): its probes would import "
            "without its answer; run the search again"
        )
    return [{k: v for k, v in row.items() if k not in ("run_id", "source", "deployment_id", "search_id")}]


def _records_run(path: Path) -> tuple[list[ImportedPoint], list[str | None], list[Path]]:
    """The points of a `--out` file, each as its live run summarised it, with its requests."""
    from wattbench_agent.loadgen import replay, shapes
    from wattbench_agent.loadgen.client import endpoint_url
    from wattbench_agent.loadgen.result import FailFast, point_result
    from wattbench_agent.loadgen.spec import LoadSpec

    try:
        saved = replay.read(path)
    except replay.ReplayError as exc:
        raise ImportFileError(str(exc)) from None
    points, ids = [], []
    for sp in saved:
        if sp.facts is None:
            raise ImportFileError(
                f"{path}: load point {sp.load_point_id} has no line in {replay.points_path(path).name} (a run "
                "interrupted before the point ended): its window is not known; nothing was imported"
            )
        spec = LoadSpec.from_dict(sp.facts["spec"])
        fail_fast = FailFast(spec.fail_fast, endpoint_url(spec.url, spec.api))
        for rec in sp.records:
            fail_fast.see(rec)
        live = point_result(
            spec,
            replay._Saved(sp.records, fail_fast, replay._SavedVerdict(sp.facts.get("server_gone"))),
            sp.facts["load_point_id"],
            sp.facts["duration_s"],
            sp.facts["res"],
            sp.facts.get("slo"),
        )
        row = live.load_run_row()
        point = _point(live.summary, path, label=shapes.label(spec.point()))
        # with its requests, the point is the live run's row: every request sent, completed and failed, its window
        point.sent, point.completed, point.failed = row["sent"], row["completed"], row["failed"]
        point.window_start_ns, point.window_end_ns = live.window_start_ns, live.window_end_ns
        point.input_tokens, point.output_tokens = row["input_tokens"], row["output_tokens"]
        point.load_runs.update({k: row[k] for k in _ROW_COLUMNS if row.get(k) is not None})
        point.requests = [{k: v for k, v in r.items() if k != "load_point_id"} for r in sp.records]
        points.append(point)
        ids.append(sp.facts["load_point_id"])
    files = [path] + [p for p in (replay.points_path(path), replay.search_path(path)) if p.exists()]
    return points, ids, files


def read(path: Path, data: Any) -> ImportedRun:
    if path.name.endswith(".points.jsonl"):  # the points file: import the per-request file it belongs to
        path = path.with_name(path.name[: -len(".points.jsonl")] + ".jsonl")
        data = read_json(path)
    doc, files = None, [path]
    if _is_search(data):
        doc = data
        summaries = doc.get("probe_summaries")
        if not isinstance(summaries, list) or len(summaries) != len(doc.get("probes") or []):
            raise ImportFileError(f"{path}: a search without probe_summaries; expected --json or --save-result's")
        points = [_point(s, path) for s in summaries]
        ids = [s.get("load_point_id") for s in summaries]
        first = summaries[0] if summaries else {}
    elif _is_summary(data) or isinstance(data, dict) and "sweep" in data:
        summaries = data.get("sweep", [data])
        points, ids, first = [_point(s, path) for s in summaries], [None] * len(summaries), summaries[0]
    else:
        from wattbench_agent.loadgen.replay import search_path

        points, ids, files = _records_run(path)
        if search_path(path).exists():
            doc = read_json(search_path(path))
        first = points[0].load_runs["summary"] if points else {}
    if not points:
        raise ImportFileError(f"{path}: no load point in it; expected {EXPECTED}")
    if doc:
        _probe_columns(points, ids, doc)
    _numbered(points)
    blocks = [p.load_runs["summary"].get("energy") for p in points]
    telemetry, prices = energy_facts(next((b for b in blocks if isinstance(b, dict)), None))
    header = (doc or {}).get("wattbench") or {}
    try:
        started = _dt.datetime.strptime(str(header.get("date")), "%Y%m%d-%H%M%S")
    except ValueError:
        started = None
    from wattbench_agent import __version__

    slo = (doc or {}).get("slo") or first.get("slo") or {}
    notes = [] if any(p.requests for p in points) else ["no per-request rows: every figure is the load generator's own"]
    if not telemetry:
        notes.append("no energy: measured without --telemetry")
    return ImportedRun(
        tool=TOOL,
        tool_version=__version__,
        path=path,
        sha256=file_sha256(files),
        model=str(header.get("model") or first.get("model") or "unknown"),
        url=header.get("url") or first.get("url"),
        points=points,
        started_at=started,
        config={"answer": (doc or {}).get("answer"), "at_capacity": (doc or {}).get("at_capacity")},
        slo={k: float(v) for k, v in slo.items() if k in ("ttft_ms", "tpot_ms", "e2e_ms") and v is not None},
        notes=notes,
        telemetry=telemetry,
        prices=prices,
        searches=_search_rows(doc, path),
    )
