"""Other tools' results (and `wattbench load`'s own) as wattbench runs (`wattbench import FILE...`).

One module per tool turns its result file into an `ImportedRun` (tool-neutral: load points with the tool's own
statistics, and per-request rows when the file has them); `store_run` writes that into the warehouse as a run
with source 'imported:<tool>' (runs, deployments, load_runs, requests), in one transaction, replacing an earlier
import of the same file (the run id is derived from the file's content). Imported load points appear in
v_load_points (sql/views.sql): from their request rows when the file had them, else from the tool's statistics
kept in load_runs.summary in the load generator's layout.

Registry: IMPORTERS, in detection order; each module has TOOL, `detect(path, data) -> bool` and
`read(path, data) -> ImportedRun`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wattbench.importers.imported import ImportedRun, ImportFileError, read_json
from wattbench_agent.safety import redact_url

SUMMARY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def _importers():
    from wattbench.importers import aiperf, guidellm, vllm_bench, wattbench_load

    return (vllm_bench, aiperf, guidellm, wattbench_load)


IMPORTER_NAMES = ("vllm", "aiperf", "guidellm", "wattbench")


def read_file(path: str | Path, tool: str | None = None) -> ImportedRun:
    """The ImportedRun of one result file (or AIPerf artifact folder); `tool` forces the format."""
    p = Path(path)
    if not p.exists():
        raise ImportFileError(f"{p}: no such file")
    mods = _importers()
    if tool:
        by_name = {m.TOOL: m for m in mods}
        if tool not in by_name:
            raise ImportFileError(f"unknown tool {tool!r}; expected one of {', '.join(by_name)}")
        mods = (by_name[tool],)
    data = None if p.is_dir() else read_json(p)
    for mod in mods:
        if mod.detect(p, data):
            return mod.read(p, data)
    if tool:
        raise ImportFileError(f"{p}: not a {tool} result file ({mods[0].EXPECTED})")
    raise ImportFileError(
        f"{p}: not a result file wattbench can import; expected one of: " + "; ".join(m.EXPECTED for m in _importers())
    )


def run_id_of(run: ImportedRun) -> str:
    return f"imported-{run.tool}-{run.sha256[:12]}"


def store_run(
    con,
    run: ImportedRun,
    *,
    run_id: str | None = None,
    engine: str | None = None,
    config_name: str | None = None,
    precision: str | None = None,
    tp: int | None = None,
    gpu_name: str | None = None,
) -> dict[str, Any]:
    """Write one ImportedRun into the warehouse in one transaction (replacing the same run id's rows)."""
    rid = run_id or run_id_of(run)
    source = f"imported:{run.tool}"
    dep_id = config_name or f"{run.tool}-import"
    cfg_name = (
        config_name
        or {
            "vllm": "vllm-bench-serve",
            "aiperf": "aiperf",
            "guidellm": "guidellm",
            "wattbench": "wattbench-load",
        }[run.tool]
    )
    try:
        from wattbench_agent import __version__ as wb_version
    except ImportError:  # pragma: no cover
        wb_version = None
    slo = run.slo or {}
    run_row = {
        "run_id": rid,
        "source": source,
        "plan_name": f"imported {run.tool} result {run.path.name}",
        "plan_path": str(run.path),
        "plan_sha256": run.sha256,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "status": "complete",
        "host": None,
        "wattbench_version": wb_version,
        "slo_ttft_ms": slo.get("ttft_ms"),
        "slo_tpot_ms": slo.get("tpot_ms"),
        "slo_e2e_ms": slo.get("e2e_ms"),
        **{k: run.prices.get(k) for k in ("gpu_price_per_hour", "energy_price_per_kwh", "pue") if k in run.prices},
    }
    tel = run.telemetry
    dep_row = {
        "run_id": rid,
        "source": source,
        "deployment_id": dep_id,
        "model": run.model,
        "engine": engine or "external",
        "config_name": cfg_name,
        "precision": precision,
        "tp": tp,
        "gpu_name": gpu_name or tel.get("gpu_name"),
        "n_gpus": tp or tel.get("n_gpus"),
        "gpu_uuids": tel.get("gpu_uuids"),
        "target": "external",
        "url": redact_url(run.url),
        "status": "healthy",
        "telemetry_source": tel.get("telemetry_source") or "none",
        "idle_power_w_before": tel.get("idle_power_w_before"),
        "config": {
            "imported_from": run.tool,
            "tool_version": run.tool_version,
            "file": str(run.path),
            "sha256": run.sha256,
            "notes": run.notes,
            **run.config,
        },
    }
    ids = {"run_id": rid, "source": source, "deployment_id": dep_id}
    lr_rows, req_rows = _point_rows(run, ids, tel.get("idle_power_w_before"))
    search_rows = [
        {"run_id": rid, "source": source, "deployment_id": dep_id, **s, "search_id": f"{dep_id}:{s['workload']}"}
        for s in run.searches
    ]
    check_rows(con, run, lr_rows, req_rows)
    con.execute("BEGIN TRANSACTION")
    try:
        _refuse_a_measured_run(con, rid, run)
        for table in ("requests", "load_runs", "searches", "deployments", "runs"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [rid])
        _insert(con, "runs", [run_row])
        _insert(con, "deployments", [dep_row])
        _insert(con, "load_runs", [{**r, "search_id": _search_id(r, dep_id)} for r in lr_rows])
        _insert(con, "searches", search_rows)
        if req_rows:
            _insert_json(con, "requests", req_rows)
        from wattbench.warehouse import fill_shape_traits, refresh_point_stats

        fill_shape_traits(con, rid)  # the shapes' traits, as for a bundle
        refresh_point_stats(con, rid)  # the kept per-load-point figures, as for a bundle
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return {
        "run_id": rid,
        "source": source,
        "load_points": len(lr_rows),
        "requests": len(req_rows),
        "deployment_id": dep_id,
    }


def _point_rows(run: ImportedRun, ids: dict[str, Any], idle_power_w: float | None) -> tuple[list[dict], list[dict]]:
    """The load_runs and requests rows of an ImportedRun's points (`ids`: run_id, source, deployment_id)."""
    dep_id = ids["deployment_id"]
    lr_rows, req_rows = [], []
    for pt in run.points:
        lp = f"{dep_id}:{pt.workload}:{pt.point_label}" + (f"#{pt.repeat}" if pt.repeat > 1 else "")
        summary: dict[str, Any] = {m: pt.stats.get(m) for m in SUMMARY_METRICS if pt.stats.get(m)}
        summary.update(
            sent=pt.sent,
            completed=pt.completed,
            failed=pt.failed,
            window_s=pt.window_s,
            goodput=pt.goodput,
            imported={"tool": run.tool, "tool_version": run.tool_version, "file": str(run.path), "figures": pt.figures},
        )
        ok = bool(pt.completed)
        lr_rows.append(
            {
                **ids,
                "load_point_id": lp,
                "point_label": pt.point_label,
                "repeat": pt.repeat,
                "workload": pt.workload,
                "shape": pt.shape,
                "api": pt.api,
                "concurrency": pt.concurrency,
                "rate": pt.rate,
                "burstiness": pt.burstiness,
                "input_tokens": pt.input_tokens,
                "output_tokens": pt.output_tokens,
                "warmup_s": pt.warmup_s,
                "duration_s": pt.window_s,
                "window_start_ns": pt.window_start_ns,
                "window_end_ns": pt.window_end_ns,
                "window_s": pt.window_s,
                "achieved_rate": pt.sent / pt.window_s if pt.sent is not None and pt.window_s else None,
                "achieved_concurrency": pt.achieved_concurrency,
                "sent": pt.sent,
                "completed": pt.completed,
                "failed": pt.failed,
                "output_tokens_in_window": pt.output_tokens_total,
                "energy_j": pt.energy_j,
                "energy_trace_j": pt.energy_trace_j,
                "idle_power_w": idle_power_w,
                "status": "ok" if ok else "failed",
                "error_kind": None if ok else "no_success",
                "error_text": None if ok else f"no successful request in {run.path.name}",
                "summary": summary,
                **pt.load_runs,
            }
        )
        for r in pt.requests:
            req_rows.append({**ids, "load_point_id": lp, "token_count_source": "imported", **r})
    return lr_rows, req_rows


def _search_id(row: dict, dep_id: str) -> str | None:
    """A probe's search id, as the warehouse names it: <deployment>:<workload> (the file's own id is dropped)."""
    return f"{dep_id}:{row['workload']}" if row.get("search_id") else None


def _refuse_a_measured_run(con, run_id: str, run: ImportedRun) -> None:
    """An import replaces only an import: a run id whose rows came from anything else (a measured, emulated or
    predicted run, with its GPU samples, /metrics and token files that an import has none of) is refused, naming
    how to pick another id (WarehouseError; nothing changed)."""
    from wattbench.queries import WarehouseError

    row = con.execute(
        "SELECT source, status FROM runs WHERE run_id = ? AND NOT coalesce(source LIKE 'imported:%', false)", [run_id]
    ).fetchone()
    if row is None:  # a run row may be missing where its rows are not (written by other SQL): their sources say
        row = con.execute(
            "SELECT source, NULL FROM (SELECT source FROM deployments WHERE run_id = ? UNION ALL SELECT source FROM "
            "load_runs WHERE run_id = ?) WHERE NOT coalesce(source LIKE 'imported:%', false) LIMIT 1",
            [run_id, run_id],
        ).fetchone()
    if row is not None:
        source, status = row
        raise WarehouseError(
            f"{run.path}: run {run_id} is already in the warehouse as a {source} run"
            + (f" (status {status})" if status else "")
            + "; an import never replaces it. Nothing was imported; give another --run-id, or none (the file's "
            f"content names it: {run_id_of(run)})"
        )


def check_rows(con, run: ImportedRun, lr_rows: list[dict], req_rows: list[dict]) -> None:
    """The rules a bundle's rows meet at ingest (wattbench/ingest_checks.row_problem: typed, finite, in range, token
    times that never go backwards), on every row an import would write, and the tool's own statistics finite and >= 0:
    ImportFileError naming the file, the load point (and request), the field and the value; nothing is imported."""
    import math

    from wattbench.ingest_checks import row_problem
    from wattbench.warehouse import table_columns

    types = {t: table_columns(con, t) for t in ("load_runs", "requests")}
    for pt, row in zip(run.points, lr_rows):
        problem = row_problem("load_runs", row, None, types["load_runs"])
        for metric, block in pt.stats.items():
            for key, value in (block or {}).items():
                if problem is None and value is not None:
                    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    if not ok or value < 0:
                        problem = f"{metric}.{key} = {value!r}; expected a finite number >= 0, or null"
        if problem is None and pt.goodput is not None:
            g = pt.goodput
            if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
                problem = f"goodput = {g!r}; expected a finite number of requests/s >= 0, or null"
        if problem:
            raise ImportFileError(f"{run.path}: load point {pt.point_label}: {problem}; nothing was imported")
    for row in req_rows:
        problem = row_problem("requests", row, None, types["requests"])
        if problem:
            label = row["load_point_id"].rsplit(":", 1)[-1]
            raise ImportFileError(
                f"{run.path}: load point {label}, request {row.get('request_id')}: {problem}; nothing was imported"
            )


def _insert(con, table: str, rows: list[dict]) -> None:
    from wattbench.warehouse import table_columns

    cols = table_columns(con, table)
    for row in rows:
        unknown = set(row) - set(cols)
        if unknown:
            raise ImportFileError(f"table {table}: unknown column(s) {', '.join(sorted(unknown))}")
        names = list(row)
        values = [json.dumps(row[c]) if cols[c] == "JSON" and row[c] is not None else row[c] for c in names]
        con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})", values)


def _insert_json(con, table: str, rows: list[dict]) -> None:
    """Many rows through a temporary JSON-lines file read with the table's own column types (as bundle ingest)."""
    import os
    import tempfile

    from wattbench.warehouse import table_columns

    cols = table_columns(con, table)
    fd, tmp = tempfile.mkstemp(prefix="wattbench-import-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
        literal = "{" + ", ".join(f"'{c}': '{t}'" for c, t in cols.items()) + "}"
        con.execute(
            f"INSERT INTO {table} BY NAME SELECT * FROM read_json(?, format='newline_delimited', columns={literal})",
            [tmp],
        )
    finally:
        os.unlink(tmp)
