"""Report queries and tables as plain rows, without pandas, matplotlib or Dagster: what `wattbench sql` and
`wattbench report` print, so that they answer at once (benchmarks/cli_startup.py), and what wattbench/report/render.py
wraps in DataFrames for the report assets. One home for: the $parameters of a report query, the head-to-head
pivot, and the engine-contrast lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

CAPACITY_PARAMS = (
    "steady_qps",
    "peak_qps",
    "burst_hours_per_day",
    "input_tokens",
    "output_tokens",
    "elastic_gpu_hour_usd",
)
NOT_MEASURED = "NULL (not measured)"


def capacity_params(profile: Any) -> dict[str, Any] | None:
    """The $parameters of sql/capacity_plan.sql and sql/hybrid_plan.sql from a plan's `capacity` section
    (wattbench.plan.CapacityProfile, or a dict of its fields); None when there is none."""
    if profile is None:
        return None
    data = profile.model_dump() if hasattr(profile, "model_dump") else dict(profile)
    return {k: data.get(k) for k in CAPACITY_PARAMS}


def run_capacity_profile(con, run_id: str) -> dict[str, Any] | None:
    """The capacity section of the plan a run recorded (runs.plan_path), if the file is still there and has one."""
    row = con.execute("SELECT plan_path FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if not row or not row[0] or not Path(row[0]).exists():
        return None
    from wattbench.plan import PlanError, load_plan

    try:
        plan, _ = load_plan(row[0])
    except PlanError:
        return None
    return capacity_params(plan.capacity)


def query_params(con, text: str, run_id: str | None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The $parameters a report query in sql/ uses: $run_id, the capacity profile from the run's plan, and
    `overrides` (NAME=VALUE from the command line, values parsed as numbers where they are numbers).
    Raises ValueError naming the parameters still missing."""
    wanted = set(re.findall(r"\$([A-Za-z_]\w*)", text))
    params: dict[str, Any] = {}
    if "run_id" in wanted and run_id is not None:
        params["run_id"] = run_id
    if wanted & set(CAPACITY_PARAMS) and run_id is not None:
        params.update(run_capacity_profile(con, run_id) or {})
    for key, value in (overrides or {}).items():
        params[key] = _number(value)
    optional = {"input_tokens", "output_tokens", "elastic_gpu_hour_usd"}
    for key in wanted & optional:
        params.setdefault(key, None)
    missing = sorted(k for k in wanted if k not in params or (params[k] is None and k not in optional))
    if missing:
        hint = " (or add a `capacity:` section to the plan)" if set(missing) & set(CAPACITY_PARAMS) else ""
        raise ValueError("query needs " + ", ".join(f"${m}" for m in missing) + "; pass --param NAME=VALUE" + hint)
    return {k: v for k, v in params.items() if k in wanted}


def _number(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if value.lower() in ("null", "none", ""):
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def short_point(load_point_id: Any) -> str:
    """'trtllm-like:steady:c32' -> 'steady:c32' (the engine is the column already); 'steady:c32' stays."""
    parts = str(load_point_id).split(":")
    return ":".join(parts[-2:])


def head_to_head_rows(records: Iterable[dict[str, Any]], origins: bool = True) -> tuple[list[str], list[list[str]]]:
    """sql/head_to_head.sql's long rows pivoted: one row per figure (with its unit, in the query's order), one
    column per engine (sorted). With `origins`, each measured cell names the load point it came from ('4295.5 @
    steady:c32'; the run is the table's); a NULL cell says why it is NULL. Returns (engines, rows) where each row
    is [figure, cell per engine]; ([], []) for no rows."""
    cells: dict[str, dict[str, str]] = {}
    order: dict[str, Any] = {}
    engines: set[str] = set()
    for r in records:
        figure = f"{r['figure']} ({r['unit']})" if r.get("unit") else str(r["figure"])
        order.setdefault(figure, r.get("ord"))
        value = r.get("value")
        if _missing(value):
            note = r.get("note")
            cell = f"NULL ({note})" if isinstance(note, str) and note else NOT_MEASURED
        else:
            lp = r.get("load_point_id")
            cell = f"{value} @ {short_point(lp)}" if origins and isinstance(lp, str) and lp else str(value)
        engines.add(r["engine"])
        cells.setdefault(figure, {})[r["engine"]] = cell
    columns = sorted(engines)
    figures = sorted(order, key=lambda f: (order[f] is None, order[f] if order[f] is not None else 0))
    return columns, [[f, *(cells[f].get(e, NOT_MEASURED) for e in columns)] for f in figures]


def records(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, row)) for row in rows]


def head_to_head_text(con, run_id: str) -> str:
    """The head-to-head table of a run as `wattbench run` and `wattbench report` print it."""
    from tabulate import tabulate

    from wattbench.connection import query_rows

    engines, rows = head_to_head_rows(records(*query_rows(con, "head_to_head", {"run_id": run_id})))
    if not rows:
        return "(no head-to-head rows for this run)"
    table = tabulate(rows, headers=["figure", *engines], tablefmt="github", missingval="NULL")
    return table + "".join(f"\n{line}" for line in scope_lines(con, run_id))


def scope_lines(con, run_id: str) -> list[str]:
    """What the run's intervals describe, one line per engine and scope (sql/interval_scopes.sql)."""
    from wattbench.connection import query_rows

    cols, rows = query_rows(con, "interval_scopes", {"run_id": run_id})
    at = cols.index("scope")
    return [f"Intervals, {r[at]}" for r in rows]


# The figures `wattbench report` compares engines on (sql/engine_contrasts.sql has every figure).
CONTRAST_FIGURES = (
    "output_tok_s",
    "output_tokens_per_j",
    "output_tokens_per_j_above_idle",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "e2e_p50_ms",
)


def contrasts_text(con, run_id: str) -> str:
    """Engine pairs at each shared point: the ratio with its interval and the finding, one line per figure."""
    from tabulate import tabulate

    from wattbench.connection import query_rows

    def ratio(r) -> str:
        if _missing(r["ratio"]):
            return "NULL"
        if not _missing(r["ratio_lo"]):
            return f"x{r['ratio']:.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]"
        return f"x{r['ratio']:.3f} (no interval)"  # the finding says why: it was not tested

    rows = [
        [
            f"{r['workload']}:{r['point_label']}",
            f"{r['engine']} / {r['other']}",
            f"{r['figure']} ({r['unit']})",
            ratio(r),
            r["finding"],
        ]
        for r in records(*query_rows(con, "engine_contrasts", {"run_id": run_id}))
        if r["metric"] in CONTRAST_FIGURES
    ]
    if not rows:
        return ""
    table = tabulate(rows, headers=["point", "engines", "figure", "ratio", "finding"], tablefmt="github")
    return (
        table + "\nRatios: 95% intervals of the mean ratio over server starts; findings at a 5% false discovery rate "
        "(Benjamini-Hochberg) over the run's comparisons."
    )


def _ci(v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    """A figure with its 95% interval ('2.31 [2.2, 2.4]'); 'NULL' unmeasured; no interval: the bare value."""
    if _missing(v):
        return "NULL"
    if _missing(lo) or _missing(hi):
        return f"{v:.{digits}g} (no interval)"
    return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def slo_capacity_text(con, run_id: str) -> str:
    """Each capacity search of a run, one row each (sql/slo_capacity.sql): the engine and workload, the capacity with
    its interval, the bound that binds and where, and tok/J and $ per 1M output tokens at it with their intervals."""
    from tabulate import tabulate

    from wattbench.connection import query_rows

    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "no_error": "errors"}
    rows = []
    for r in records(*query_rows(con, "slo_capacity", {"run_id": run_id})):
        if _missing(r["capacity"]):
            cap = f"none ({r['note']})" if r.get("note") else "none"
        else:
            hi = "" if _missing(r["capacity_hi"]) else f", {r['capacity_hi']:.4g}"
            lo = r["capacity_lo"] if not _missing(r["capacity_lo"]) else r["capacity"]
            cap = f"{r['capacity']:.4g} [{lo:.4g}{hi or ', -'}] {r['unit']}" + (" (at least)" if not hi else "")
        bind = (
            f"{names.get(r['binding'], r['binding'])} at {r['binding_load']:.4g} ({100 * r['binding_share']:.1f}% met)"
            if isinstance(r.get("binding"), str) and not _missing(r["binding_load"])
            else "-"
        )
        tpj = _ci(r["output_tokens_per_j"], r["output_tokens_per_j_lo"], r["output_tokens_per_j_hi"])
        usd = _ci(r["usd_per_1m_output_tokens"], r["usd_per_1m_output_tokens_lo"], r["usd_per_1m_output_tokens_hi"])
        start = r.get("server_start")
        rows.append([r["engine"], r["workload"], "-" if _missing(start) else str(start), cap, bind, tpj, usd])
    if not rows:
        return ""
    headers = [
        "engine",
        "workload",
        "server start",
        "capacity [95% interval]",
        "binding bound",
        "tok/J at it",
        "$ per 1M out at it",
    ]
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


_CHECKS = """
SELECT severity, table_name, expectation, column_name, element_count, unexpected_count, sample::VARCHAR AS sample
FROM validation_results WHERE run_id = $run_id AND NOT success
ORDER BY CASE severity WHEN 'error' THEN 0 ELSE 1 END, table_name, expectation
"""


def checks_lines(con, run_id: str) -> list[str]:
    """Every validation rule that failed or warned on a run (validation_results), one line each: severity, table,
    rule, how many rows and a sample of their values. [] when every rule passed (or none ran)."""
    import json

    from wattbench.connection import query_rows

    lines = []
    for r in records(*query_rows(con, _CHECKS, {"run_id": run_id})):
        try:
            sample = json.loads(r["sample"]) if r["sample"] else []
        except ValueError:
            sample = [r["sample"]]
        shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in (sample or [])[:3])
        rows = (
            f"{r['unexpected_count']} of {r['element_count']} rows"
            if r["unexpected_count"] is not None and r["element_count"] is not None
            else "failed"
        )
        what = f"{r['column_name']} e.g. {shown}" if r["column_name"] and shown else (r["column_name"] or "")
        lines.append(
            f"{str(r['severity']).upper():<5} {r['table_name']:<14} {r['expectation']}: {rows}"
            + (f" ({what})" if what else "")
        )
    return lines
