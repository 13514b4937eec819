"""A saved load run, summarised again: `wattbench inspect REQUESTS.jsonl` (docs/LOADGEN.md).

`run_load(out=PATH)` (and so `wattbench load --out PATH`) appends one record a request to PATH and, when a load
point ends, one line to PATH's points file beside it (`points_path`: `r.jsonl` -> `r.points.jsonl`) with what the
point's summary needs besides its records: its spec, its window, send end and drain, the instants its window
callbacks ran, its SLO, and which bytes of PATH hold its records. `summaries(PATH)` rebuilds every point's summary
from the two through the very function that made the live one (result.point_result), so `wattbench inspect PATH --json`
prints what `wattbench load --json` printed, and a run saved by an older wattbench gains the figures added since
(the step decomposition). Records of a point with no points line (a run interrupted before its point ended, or
a file from before points files) are summarised with their window inferred from their sends, and say so.

Header values of the spec are not kept (they may be credentials), nor a URL's user:password.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POINTS_VERSION = 1


class ReplayError(ValueError):
    """A per-request file or its points file cannot be read; the message names the file, the line and why."""


def points_path(requests: str | os.PathLike) -> Path:
    """The points file beside a per-request file: `r.jsonl` -> `r.points.jsonl` (`r` -> `r.points.jsonl`)."""
    p = Path(requests)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(stem + ".points.jsonl")


def search_path(requests: str | os.PathLike) -> Path:
    """The search document beside a per-request file of `wattbench load --search --out r.jsonl`: `r.search.json`."""
    p = Path(requests)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(stem + ".search.json")


def noted(sink: Any, result: Any) -> Any:
    """Append the point line of `result` to the points file of the sink's per-request file (if it wrote to one), and
    return `result`."""
    if getattr(sink, "path", None) is None or "replay" not in result.extra:
        return result
    from wattbench_agent.safety import mask_map, redact_url

    facts = result.extra["replay"]
    spec = result.spec.to_dict()
    spec["headers"] = dict.fromkeys(spec.get("headers") or {}, "***")
    spec["url"] = redact_url(spec["url"])
    spec["extra_body"] = mask_map(spec.get("extra_body") or {})  # `--extra-body '{"api_key": ...}'`: sent, not kept
    line = {
        "points_version": POINTS_VERSION,
        "load_point_id": facts["load_point_id"],
        "bytes": list(sink.span),
        "records": len(sink.records),
        "spec": spec,
        "duration_s": facts["duration_s"],
        "slo": facts["slo"],
        "res": facts["res"],
        # the live watcher's verdict: it rests on probing the server then, which a saved file cannot repeat
        "server_gone": result.summary.get("server_gone"),
    }
    side = points_path(sink.path)
    try:
        with open(side, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:  # the measurement stands: only its re-analysis loses its window
        import sys

        print(
            f"wattbench load: could not write {side} ({exc.strerror or exc}); `wattbench inspect` will infer this "
            "point's window from its sends",
            file=sys.stderr,
        )
    return result


@dataclass
class SavedPoint:
    """One load point of a saved run: its points line (None when it has none) and its records, in file order."""

    load_point_id: str
    facts: dict[str, Any] | None
    records: list[dict] = field(default_factory=list)


# A per-request file is read line by line, its records kept (a point's summary needs them all): a regular file of at
# most MAX_FILE_BYTES (an hour at 300 req/s of 256-token streams is about 3 GB), each line at most MAX_LINE_BYTES.
MAX_FILE_BYTES = 4 << 30
MAX_LINE_BYTES = 16 << 20


def _json_lines(path: Path, what: str):
    """(byte offset, line number, object) of every non-blank line; ReplayError naming file:line otherwise. A FIFO or a
    device is refused without waiting on it or reading it, and the file and its lines are bounded."""
    from wattbench_agent.bundle import BundleError, open_regular

    try:
        f = open_regular(path, what, MAX_FILE_BYTES)
    except BundleError as exc:
        raise ReplayError(str(exc)) from None
    with f:
        offset = number = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise ReplayError(f"{path}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB; expected {what}")
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except RecursionError:
                raise ReplayError(
                    f"{path}:{number}: JSON nested deeper than this reader goes (Python's recursion limit); expected "
                    f"{what}"
                ) from None
            except ValueError as exc:
                raise ReplayError(f"{path}:{number}: not JSON ({exc}); expected {what}") from None
            if not isinstance(obj, dict):
                raise ReplayError(f"{path}:{number}: a JSON {type(obj).__name__}; expected {what}")
            yield start, number, obj


def read(requests: str | os.PathLike) -> list[SavedPoint]:
    """The load points of a per-request file, in the order they ran: each point line's records (by their bytes),
    then records that no point line covers, grouped by load point id."""
    path = Path(requests)
    facts = []
    side = points_path(path)
    if side.exists():
        for _, number, obj in _json_lines(side, "a points line of `wattbench load --out`"):
            version = obj.get("points_version")
            if not isinstance(version, int) or version > POINTS_VERSION:
                raise ReplayError(
                    f"{side}:{number}: points_version {version!r}; this wattbench reads up to {POINTS_VERSION} "
                    "(upgrade wattbench)"
                )
            missing = {"load_point_id", "bytes", "spec", "duration_s", "res"} - set(obj)
            if missing:
                raise ReplayError(f"{side}:{number}: no {', '.join(sorted(missing))}; expected a points line")
            facts.append(obj)
    points = [SavedPoint(f["load_point_id"], f) for f in facts]
    loose: dict[str, SavedPoint] = {}
    for offset, number, rec in _json_lines(path, "one request record a line (`wattbench load --out`)"):
        if "request_id" not in rec or "load_point_id" not in rec:
            raise ReplayError(f"{path}:{number}: no request_id or load_point_id; expected a request record")
        owner = next((p for p in points if p.facts["bytes"][0] <= offset < p.facts["bytes"][1]), None)
        if owner is None:
            lp = str(rec["load_point_id"])
            owner = loose.setdefault(lp, SavedPoint(lp, None))
        owner.records.append(rec)
    return points + list(loose.values())


def summary(point: SavedPoint) -> dict[str, Any]:
    """A saved point's summary: with its points line, exactly as the live run made it (result.point_result over the
    records in the order they completed); without, metrics.summarize over a window from the first to the last send
    inside it (`inspect_note` says so)."""
    from . import metrics
    from .client import endpoint_url
    from .result import FailFast, point_result
    from .spec import LoadSpec

    if point.facts is None:
        sends = [r["sent_ns"] for r in point.records if r.get("in_window") and r.get("sent_ns") is not None]
        sends = sends or [r["sent_ns"] for r in point.records if r.get("sent_ns") is not None] or [0]
        s = metrics.summarize(point.records, min(sends), max(sends))
        s["load_point_id"] = point.load_point_id
        s["inspect_note"] = (
            "no points line for these records (the run was interrupted, or saved before points files): the window "
            "is taken from the first to the last send inside it, and the load shape is not known"
        )
        return s
    f = point.facts
    spec = LoadSpec.from_dict(f["spec"])
    fail_fast = FailFast(spec.fail_fast, endpoint_url(spec.url, spec.api))
    for rec in point.records:  # as the live sink saw them
        fail_fast.see(rec)
    saved = _Saved(point.records, fail_fast, _SavedVerdict(f.get("server_gone")))
    return point_result(spec, saved, f["load_point_id"], f["duration_s"], f["res"], f.get("slo")).summary


@dataclass
class _SavedVerdict:
    """The live run's server-gone verdict as its points line kept it (None: the server answered throughout)."""

    verdict: dict | None

    def info(self) -> dict | None:
        return self.verdict


@dataclass
class _Saved:
    """What result.point_result reads of a live sink: the records, the fail-fast watcher that saw them and the
    server-gone verdict."""

    records: list[dict]
    fail_fast: Any
    gone: _SavedVerdict


def summaries(requests: str | os.PathLike) -> list[dict[str, Any]]:
    """Every load point's summary of a per-request file (see `summary`)."""
    return [summary(p) for p in read(requests)]


def bundle_summaries(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every load run of a result bundle (a folder, or an archive of one as results/ keeps them): the summary the
    agent stored with it, its step decomposition made again from its requests (so a bundle from before `steps`
    gains it; `inspect_note` says that the rest is as stored). Version-2 bundles' token times come from their chunk
    files."""
    import numpy as np

    from wattbench_agent.bundle import CHUNK_FILES, BundleError, read_manifest, read_rows, unpacked

    from . import shapes, steps

    with unpacked(path) as folder:
        read_manifest(folder)
        runs = [obj for _, _, obj in _json_lines(folder / "load_runs.jsonl", "a load_runs row")]
        events = {}
        for column, (name, code, _) in CHUNK_FILES.items():
            f = folder / name
            events[column] = np.fromfile(f, dtype="<i8" if code == "q" else "<i4") if f.exists() else None
        by_point: dict[tuple, list[dict]] = {}
        requests = next((p for p in (folder / "requests.csv", folder / "requests.jsonl") if p.exists()), None)
        for number, rec in read_rows(requests) if requests else ():  # every request: first tokens mark prefills
            if rec.get("events_at") is not None:  # version 3
                rec["chunks"] = [rec.pop("events_at"), rec.pop("events_n")]
            if "chunks" in rec:
                if events["chunk_ns"] is None or events["chunk_tokens"] is None:
                    raise BundleError(f"{requests}:{number}: names chunk files that are not beside it")
                at, n = rec.pop("chunks")
                rec["chunk_ns"] = events["chunk_ns"][at : at + n].tolist()
                rec["chunk_tokens"] = events["chunk_tokens"][at : at + n].tolist()
            by_point.setdefault((rec.get("deployment_id"), rec.get("load_point_id")), []).append(rec)
    out = []
    for lr in runs:
        s = dict(lr.get("summary") or {})
        s.setdefault("load_point_id", lr.get("load_point_id"))
        s["deployment_id"] = lr.get("deployment_id")
        closed = lr.get("shape") in shapes.names() and shapes.get(lr["shape"]).closed_loop
        every = by_point.get((lr.get("deployment_id"), lr.get("load_point_id")), [])
        s["steps"] = steps.decompose(
            [r for r in every if r.get("error_kind") is None and r.get("in_window")],
            closed_loop=closed,
            concurrency=lr.get("concurrency"),
            all_records=every,
        )
        s["inspect_note"] = "from a result bundle: the summary as stored, its steps made again from its requests"
        out.append(s)
    return out
