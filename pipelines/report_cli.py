"""`wattbench report`: print a run's reports from the warehouse (the same sql/ queries the report assets use).

wattbench report                         head-to-head table of the latest run
wattbench report --capacity              SLO capacity searches, capacity plan + hybrid topology (profile from the
                                         run's plan, or flags)
wattbench report --regressions           this run against the previous run of each load point
wattbench report --compare RUN_A RUN_B   two runs side by side: B against A, deltas and flags
wattbench report --buy [RUN ...]         what to buy: one traffic profile sized on runs of different GPU kinds
wattbench report --<report>              any report of the registry with a `cli` name (wattbench/report/specs.py)
"""

from __future__ import annotations

import argparse
import sys

from pipelines.commands import FORMATS, _fail, _print_table, _query_error, latest_run_id
from wattbench import settings
from wattbench.report.rows import contrasts_text, head_to_head_text
from wattbench.report.specs import REPORTS, ReportSpec
from wattbench_agent.argtypes import finite_float

_FLAG_ORDER = {"REGRESSION": 0, "improvement": 1, "within noise": 2, "not comparable": 3, "no baseline": 4}


def resolve_run(con, ref: str | None) -> str:
    """A full run id from an id or a unique prefix of one (default: the latest run). ValueError if none/ambiguous."""
    if ref is None:
        run_id = latest_run_id(con, say=True)
        if run_id is None:
            raise ValueError("no runs in the warehouse yet; run `make run` first")
        return run_id
    rows = [
        r[0]
        for r in con.execute(
            "SELECT run_id FROM runs WHERE run_id = ? OR starts_with(run_id, ?) ORDER BY run_id", [ref, ref]
        ).fetchall()
    ]
    if ref in rows:
        return ref
    if not rows:
        raise ValueError(
            f'no run {ref!r} in the warehouse; list them with: wattbench sql "SELECT run_id, plan_name, '
            'started_at FROM runs ORDER BY started_at"'
        )
    if len(rows) > 1:
        raise ValueError(f"run prefix {ref!r} is ambiguous: {', '.join(rows[:5])}")
    return rows[0]


def _fmt(value) -> str:
    import pandas as pd

    if value is None or (not isinstance(value, (list, tuple, dict)) and pd.isna(value)):
        return "NULL"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def compare_text(con, run_a: str, run_b: str, only_flagged: bool = False) -> tuple[str, dict[str, int]]:
    """The side-by-side comparison of two runs (sql/compare_runs.sql): B against A, one row per load point and
    metric, with the change, the noise band and the flag. Returns the text and the count of each flag."""
    from tabulate import tabulate

    from wattbench.connection import run_sql

    df = run_sql(con, "compare_runs", {"run_a": run_a, "run_b": run_b})
    counts = df["flag"].value_counts().to_dict() if not df.empty else {}
    info = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT run_id, plan_name, started_at, source FROM runs WHERE run_id IN (?, ?)", [run_a, run_b]
        ).fetchall()
    }
    head = []
    for tag, rid in (("A", run_a), ("B", run_b)):
        plan_name, started, source = info.get(rid, (None, None, None))
        head.append(f"{tag} = run {rid} ({plan_name or '?'}, started {started or '?'}, {source or '?'})")
    if df.empty:
        return "\n".join(head + ["(run B has no load points)"]), counts
    if only_flagged:
        df = df[df["flag"].isin(["REGRESSION", "improvement"])]
    rows = []
    last = None
    for _, r in df.iterrows():
        point = f"{r['engine']} {r['workload']}:{r['point_label']}"
        rows.append(
            [
                point if point != last else "",
                r["metric"],
                "↑" if r["better"] == "higher" else "↓",
                _fmt(r["run_a"]),
                _fmt(r["run_b"]),
                "" if r["change_pct"] != r["change_pct"] else f"{r['change_pct']:+.1f}%",
                f"±{r['band_pct']:.1f}%",
                r["flag"] if r["flag"] != "within noise" else "·",
            ]
        )
        last = point
    table = tabulate(
        rows,
        headers=["load point", "metric", "better", "A", "B", "change", "band", "flag"],
        tablefmt="github",
        disable_numparse=True,
    )
    summary = (
        f"{counts.get('REGRESSION', 0)} regression(s), {counts.get('improvement', 0)} improvement(s), "
        f"{counts.get('within noise', 0)} within noise, {counts.get('no baseline', 0)} not in run A. "
        "Rule: change = (B - A) / |A|; flagged beyond max(3 x robust relative stdev (1.4826 x MAD / |median|) of "
        "the metric over runs of the point up to A, 5%)."
    )
    return "\n".join(head + ["", table if rows else "(nothing beyond the noise band)", "", summary]), counts


def _print(df, fmt: str) -> None:
    """Tables with money in them: thousands separators instead of exponents."""
    if fmt != "table" or df.empty:
        _print_table(df, fmt)
        return
    from tabulate import tabulate

    shown = df.astype(object).map(_fmt)
    print(tabulate(shown, headers="keys", tablefmt="github", showindex=False, disable_numparse=True))


def _profile(con, run_id: str, args: argparse.Namespace) -> dict:
    """The traffic profile: the flags given, else the `capacity:` section of the run's plan. ValueError if none."""
    from wattbench.report.rows import run_capacity_profile

    params = run_capacity_profile(con, run_id) or {}
    for key in (
        "steady_qps",
        "peak_qps",
        "burst_hours_per_day",
        "input_tokens",
        "output_tokens",
        "elastic_gpu_hour_usd",
    ):
        value = getattr(args, key)
        if value is not None:
            params[key] = value
    params.setdefault("burst_hours_per_day", 4.0)
    for key in ("input_tokens", "output_tokens", "elastic_gpu_hour_usd"):
        params.setdefault(key, None)
    if params.get("steady_qps") is None or params.get("peak_qps") is None:
        raise ValueError(
            "no traffic profile: the run's plan has no `capacity:` section; pass --steady-qps and --peak-qps"
        )
    if params["peak_qps"] < params["steady_qps"]:
        raise ValueError(f"--peak-qps ({params['peak_qps']:g}) must be >= --steady-qps ({params['steady_qps']:g})")
    return params


def _profile_line(params: dict) -> str:
    return (
        f"steady {params['steady_qps']:g} req/s, peak {params['peak_qps']:g} req/s "
        f"for {params['burst_hours_per_day']:g} h/day, lengths {params['input_tokens'] or 'any'}/"
        f"{params['output_tokens'] or 'any'} tokens in/out"
    )


def _capacity(con, run_id: str, args: argparse.Namespace) -> int:
    from wattbench.connection import query_rows, run_sql
    from wattbench.report.render import CAPACITY_ASSUMPTIONS

    params = {**_profile(con, run_id, args), "run_id": run_id}
    columns, rows = query_rows(con, "slo_capacity", {"run_id": run_id})
    if rows:  # the capacity searches the plan sizes from (sql/slo_capacity.sql)
        print(f"SLO capacity, run {run_id}:")
        for row in rows:
            r = dict(zip(columns, row))
            print(f"- {r['engine']} ({r['workload']}): {r['answer']}")
        print()
    print(f"Capacity plan, run {run_id}: {_profile_line(params)}")
    _print(run_sql(con, "capacity_plan", params), args.format)
    print("\nHybrid topology against each engine alone:")
    _print(run_sql(con, "hybrid_plan", params), args.format)
    print("\nAssumptions:\n" + "\n".join(f"- {a}" for a in CAPACITY_ASSUMPTIONS))
    return 0


def latest_run_per_gpu(con) -> list[str]:
    """The latest run of each GPU kind among the runs of the latest run's model."""
    latest = resolve_run(con, None)
    rows = con.execute(
        """
        WITH per_run AS (
            SELECT d.run_id, any_value(d.model) AS model, any_value(d.gpu_name) AS gpu_name,
                   any_value(r.started_at) AS t
            FROM deployments d JOIN runs r USING (run_id) GROUP BY d.run_id)
        SELECT arg_max(run_id, t) FROM per_run
        WHERE model = (SELECT model FROM per_run WHERE run_id = ?)
        GROUP BY gpu_name ORDER BY gpu_name""",
        [latest],
    ).fetchall()
    return [r[0] for r in rows] or [latest]


def _buy(con, refs: list[str], args: argparse.Namespace) -> int:
    from wattbench.connection import run_sql
    from wattbench.report.render import CAPACITY_ASSUMPTIONS

    runs = [resolve_run(con, ref) for ref in refs] if refs else latest_run_per_gpu(con)
    params = {**_profile(con, runs[0], args), "runs": runs}
    print(
        f"What to buy for {_profile_line(params)}; runs {', '.join(runs)} (cheapest first, GPUs sized for the "
        "peak and always on, each run at its own $/GPU-hour):"
    )
    _print(run_sql(con, "what_to_buy", params), args.format)
    print("\nAssumptions:\n" + "\n".join(f"- {a}" for a in CAPACITY_ASSUMPTIONS))
    return 0


def _regressions(con, run_id: str, args: argparse.Namespace) -> int:
    from wattbench.connection import run_sql

    df = run_sql(con, "regressions", {"run_id": run_id})
    if args.only_flagged:
        df = df[df["flag"].isin(["REGRESSION", "improvement"])]
    print(f"Run {run_id} against the previous run of each load point:", file=sys.stderr)
    _print(df, args.format)
    return 1 if args.fail_on_regression and (df["flag"] == "REGRESSION").any() else 0


def _table_report(con, spec: ReportSpec, run_id: str, args: argparse.Namespace) -> int:
    """A table report of the registry: its title, then its table."""
    from wattbench.connection import run_sql

    print(f"{spec.title}, run {run_id}:", file=sys.stderr if args.format != "table" else sys.stdout)
    _print(run_sql(con, spec.sql, spec.params(run_id)), args.format)
    return 0


# The reports of the registry whose console form is more than their table.
_BESPOKE = {"capacity_plan": _capacity, "regressions": _regressions}


def _flag(spec: ReportSpec) -> str:
    return spec.cli.replace("-", "_")


def _report(args: argparse.Namespace) -> int:
    from wattbench.connection import WarehouseError, connect, duckdb

    try:
        with connect(args.db, read_only=True, sandbox=True) as con:
            if args.compare:
                run_a, run_b = (resolve_run(con, r) for r in args.compare)
                text, counts = compare_text(con, run_a, run_b, only_flagged=args.only_flagged)
                print(text)
                return 1 if args.fail_on_regression and counts.get("REGRESSION", 0) else 0
            if args.buy is not None:
                return _buy(con, args.buy, args)
            run_id = resolve_run(con, args.run)
            for spec in REPORTS:
                if spec.cli and getattr(args, _flag(spec), False):
                    handler = _BESPOKE.get(spec.name)
                    return handler(con, run_id, args) if handler else _table_report(con, spec, run_id, args)
            print(f"Head to head, run {run_id} (95% intervals in brackets):")
            print(head_to_head_text(con, run_id))
            contrasts = contrasts_text(con, run_id)
            if contrasts:
                print("\nEngines compared at each point (ratio of the first to the second, 95% interval):")
                print(contrasts)
    except ValueError as exc:
        return _fail(str(exc))
    except WarehouseError as exc:
        return _fail(str(exc))
    except duckdb.Error as exc:  # a query that failed (a damaged token file, ...): its message, not a traceback
        return _fail(_query_error(exc))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="print a run's reports: head-to-head (default), --capacity, --regressions, --compare RUN_A RUN_B"
    )
    p.add_argument("--run", help="run id or a unique prefix of one (default: the latest run)")
    p.add_argument("--db", help=settings.DB_HELP)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="two runs side by side: B against A per load point and metric, with deltas and flags",
    )
    for spec in REPORTS:  # the registry's reports that the console prints (wattbench/report/specs.py)
        if spec.cli:
            mode.add_argument(
                f"--{spec.cli}", action="store_true", dest=_flag(spec), help=spec.cli_help or spec.title.lower()
            )
    mode.add_argument(
        "--buy",
        nargs="*",
        metavar="RUN",
        help="what to buy: the traffic profile sized on these runs (default: the latest run of each GPU "
        "kind measured for the latest run's model), every engine config ranked by monthly cost",
    )
    p.add_argument("--only-flagged", action="store_true", help="--compare/--regressions: only rows beyond the band")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when something regressed (for CI)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="output format of the tables (--capacity, --buy, --regressions and the registry's table reports): "
        "table, csv, json (one array) or jsonl (one object a line)",
    )
    g = p.add_argument_group(
        "traffic profile for --capacity and --buy (default: the `capacity:` section of the run's plan)"
    )
    g.add_argument("--steady-qps", type=finite_float(0))
    g.add_argument("--peak-qps", type=finite_float(0, strict_minimum=True))
    g.add_argument("--burst-hours-per-day", type=finite_float(0, 24))
    g.add_argument("--input-tokens", type=int)
    g.add_argument("--output-tokens", type=int)
    g.add_argument("--elastic-gpu-hour-usd", type=finite_float(0, strict_minimum=True))
    p.set_defaults(func=_report)
