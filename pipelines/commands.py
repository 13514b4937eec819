"""Control-plane subcommands: run (the code location's benchmark job), runs (list, clean up), sql, spec, ingest."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from assets.benchmark_run import COMPLETE
from pipelines.instance import open_instance
from wattbench import settings


def _fail(message: str) -> int:
    print(f"wattbench: {message}", file=sys.stderr)
    return 2


def _json_value(value):
    """JSON for what DuckDB returns beyond JSON's own types: timestamps and dates in ISO 8601 (as stored: UTC),
    decimals as numbers, anything else as its text."""
    import datetime as dt
    import decimal

    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return str(value)


FORMATS = ("table", "csv", "json", "jsonl")


def print_rows(columns: list[str], rows, fmt: str = "table") -> None:
    """A query result (column names, row tuples) as a table, CSV, a JSON array of objects (`json`: one document,
    as json.load reads it) or JSON lines (`jsonl`: one object a line); NULL and NaN print as NULL in a table, empty in
    CSV, null in JSON (which has no Infinity either: null, where a table and CSV say inf)."""
    import math

    def missing(v) -> bool:
        return v is None or (isinstance(v, float) and (math.isnan(v) or fmt.startswith("json") and math.isinf(v)))

    rows = [[None if missing(v) else v for v in row] for row in rows]
    if fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt in ("json", "jsonl"):
        import json

        lines = [
            json.dumps(dict(zip(columns, row)), default=_json_value, allow_nan=False, separators=(",", ":"))
            for row in rows
        ]
        if fmt == "jsonl":
            if lines:
                print("\n".join(lines))
        else:  # one array, one object a line inside it: json.load reads it, a pager still shows a row a line
            print("[" + ",\n".join(lines) + "]")
    else:
        from tabulate import tabulate

        print(tabulate(rows, headers=columns, tablefmt="github", floatfmt=".4g", missingval="NULL"))


def _print_table(df, fmt: str = "table") -> None:
    """A pandas DataFrame, printed as print_rows prints a query result."""
    frame = df.astype(object).where(df.notna(), None)
    print_rows([str(c) for c in frame.columns], frame.itertuples(index=False, name=None), fmt)


# Run statuses (runs.status) of a benchmark whose tables are whole and validated (assets/benchmark_run.COMPLETE):
# anything else (running, blocked, failed, interrupted, incomplete) may be partial.
FINISHED = COMPLETE


def latest_run_id(con, say: bool = False) -> str | None:
    """The newest finished run (FINISHED). Newer runs that did not finish are never taken silently: with `say`,
    stderr names them and how to see one (--run). With no finished run at all, the newest run, said to be
    incomplete."""
    rows = con.execute(
        "SELECT run_id, coalesce(status, 'unknown') FROM runs ORDER BY coalesce(started_at, "
        "make_timestamp(clock_anchor_unix_ns // 1000)) DESC NULLS LAST, run_id DESC"
    ).fetchall()
    if not rows:
        return None
    finished = next((i for i, (_, status) in enumerate(rows) if status in FINISHED), None)
    if finished is None:
        run_id, status = rows[0]
        if say:
            print(
                f"wattbench: note: no run has finished yet; showing the newest, run {run_id}, which is {status}: "
                "its tables may be partial",
                file=sys.stderr,
            )
        return run_id
    if finished and say:
        newer = ", ".join(f"{r} ({st})" for r, st in rows[:finished][:3]) + (" ..." if finished > 3 else "")
        print(
            f"wattbench: note: showing run {rows[finished][0]}, the latest that finished; newer run(s) did not "
            f"finish: {newer}. See one with --run RUN_ID (wattbench runs lists them)",
            file=sys.stderr,
        )
    return rows[finished][0]


def _run(args: argparse.Namespace) -> int:
    from wattbench.plan import PlanError, load_plan

    try:
        plan, _ = load_plan(args.plan)
    except PlanError as exc:
        return _fail(str(exc))
    db = settings.db_path(args.db)  # as `report` and `sql` find it: docs/USAGE.md
    db.parent.mkdir(parents=True, exist_ok=True)
    plan_file = Path(args.plan).resolve()
    import dataclasses

    import dagster as dg

    from pipelines.definitions import Settings, build_definitions
    from pipelines.partitions import BENCHMARK_JOB, MODEL_TAG, SCENARIO_TAG, TRIGGER_TAG, partition_for_plan
    from wattbench.partitions import partition_of
    from wattbench.warehouse import connect

    runs_dir = settings.runs_dir()
    # the code location's own definitions, built for this plan, warehouse and run folder: the run is their
    # `benchmark` job, as a run launched from the UI is (a plan outside plans/ adds its stem as a scenario)
    defs = build_definitions(
        dataclasses.replace(
            Settings.from_env(),
            db_path=str(db),
            plan_path=str(plan_file),
            output_dir=str(runs_dir),
            extra_plan=str(plan_file),
        )
    )
    job = defs.resolve_job_def(BENCHMARK_JOB)
    try:
        partition = partition_for_plan(plan, plan_file, job.partitions_def)
    except PlanError as exc:
        return _fail(str(exc))
    from assets.common import WRITER_POOL
    from pipelines.runs import (
        interruptible_slot_wait,
        mark_in_warehouse,
        process_tags,
        reap_stale_runs,
        slot_holders,
        stop_run_processes,
        was_interrupted,
    )

    instance = open_instance([partition_of(partition).model])
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    reap_stale_runs(instance, say)  # runs a killed `wattbench run` left behind must not hold the writer slot
    for holder in slot_holders(instance, WRITER_POOL):
        say(
            f"wattbench: the warehouse writer slot is held by {holder}; this run waits for it (Ctrl-C stops it; "
            "a run whose process is gone is cleaned up by `wattbench runs --clean`)"
        )
    n_points = sum(len(w.expanded_points()) for w in plan.workloads) * len(plan.engines)
    repeats = f" x {plan.repeats} repeats, interleaved" if plan.repeats > 1 else ""
    print(
        f"wattbench: plan {plan.name}: {len(plan.engines)} engine(s), {n_points} load point(s){repeats}; "
        f"partition {partition}; warehouse {db}",
        file=sys.stderr,
    )
    started = time.monotonic()
    with interruptible_slot_wait():  # SIGINT/SIGTERM stop the run also while it waits for the writer slot
        result = job.execute_in_process(
            instance=instance,
            partition_key=partition,
            tags={
                MODEL_TAG: plan.model,
                SCENARIO_TAG: partition_of(partition).scenario,
                TRIGGER_TAG: "cli",
                **process_tags(db, runs_dir),
            },
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": args.log_level}}}},
        )
    elapsed = time.monotonic() - started
    run_id = result.run_id
    if was_interrupted(result):
        bundle = runs_dir / run_id / "bundle"
        stop_run_processes(bundle, say)  # an agent that did not stop within Pipes' grace period
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
        mark_in_warehouse(
            db, run_id, "interrupted", "interrupted by SIGINT/SIGTERM", BENCHMARK_JOB, str(partition), say
        )
        say(
            f"wattbench: run {run_id} interrupted after {elapsed:.0f} s and marked 'interrupted'"
            + (
                f"; its agent and engines are stopped, and {bundle} keeps every load point finished before the signal "
                f"(load it with `wattbench ingest {bundle}`)"
                if bundle.exists()
                else "; no engine had been started"
            )
        )
        return 130
    failed_checks = [
        f"{e.asset_key.to_user_string()}:{e.check_name}"
        for e in result.get_asset_check_evaluations()
        if not e.passed and e.severity.value == "ERROR"
    ]
    if not result.success:  # a step that failed marked its benchmark already; this catches what it could not
        why = [e.message or "" for e in result.get_step_failure_events()] + [f"check {c} failed" for c in failed_checks]
        mark_in_warehouse(
            db, run_id, "failed", "; ".join(why)[:20000] or "run failed", BENCHMARK_JOB, str(partition), say
        )
    from assets.benchmark_run import benchmarks_of_dagster_run

    with connect(db, read_only=True) as con:
        run_id = (benchmarks_of_dagster_run(con, run_id) or [run_id])[0]
        status = (con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone() or ["none"])[0]
        _print_run_tables(con, run_id, plan)
    # the report's path as the html_report asset recorded it (none when validation blocked the reports)
    reports = [
        e.materialization.metadata["path"].value
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == dg.AssetKey("html_report") and "path" in e.materialization.metadata
    ]
    print()
    for event in result.get_step_failure_events():
        error = event.event_specific_data.error if event.event_specific_data else None
        cause = (error.cause or error) if error else None
        message = (cause.message.strip().splitlines() or [""])[-1] if cause else ""
        print(f"Step {event.step_key} failed: {message}")
    if failed_checks:
        print(
            f"Validation failed ({', '.join(failed_checks)}): reports for this run were not produced. "
            f"See: wattbench sql \"SELECT * FROM validation_results WHERE run_id = '{run_id}' AND NOT success\""
        )
    for report in reports:
        print(f"HTML report: {report}")
    print(f"Warehouse: {db}   (try: wattbench sql load_points)   run {run_id} is {status}; took {elapsed:.0f} s")
    return 0 if result.success and not failed_checks else 1


def _print_run_tables(con, run_id: str, plan) -> None:
    """`wattbench run`'s terminal summary of a benchmark: the head-to-head, the engines compared point by point, each
    SLO capacity search's answer with the figures at it, and the checks that failed or warned."""
    from wattbench.report.rows import checks_lines, contrasts_text, head_to_head_text, slo_capacity_text

    print()
    print(
        f"Head to head (run {run_id}, {plan.name}"
        + (", EMULATED" if plan.is_emulated else "")
        + "; 95% intervals in brackets):"
    )
    print(head_to_head_text(con, run_id))

    contrasts = contrasts_text(con, run_id)
    if contrasts:
        print("\nEngines compared at each point (ratio of the first to the second, 95% interval):")
        print(contrasts)
    capacity = slo_capacity_text(con, run_id)
    if capacity:
        print("\nSLO capacity (the highest load meeting the search's SLO in every window; 95% intervals):")
        print(capacity)
    checks = checks_lines(con, run_id)
    if checks:
        print(f"\nValidation: {len(checks)} check(s) failed or warned (docs/RELIABILITY.md says what each means):")
        print("\n".join("  " + line for line in checks))


_READ_ONLY_HINT = (
    "`wattbench sql` only reads the warehouse: no files, other databases, extensions, network or "
    "settings; to save a result, use --format csv > FILE"
)


def _query_error(exc: Exception) -> str:
    """A DuckDB error of a user's query as one line; what the read-only sandbox refused says so."""
    import duckdb

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    udf = "Python exception occurred while executing the UDF: "
    if udf in first:  # the token store's functions: their own message (a damaged or missing file, what to do)
        first = first.split(udf, 1)[1].split(": ", 1)[-1]
    if "configuration has been locked" in first or "while database is running" in first:
        return f"query refused, the configuration is locked: {first}; {_READ_ONLY_HINT}"
    if (
        isinstance(exc, (duckdb.PermissionException, duckdb.ResourceInUseException))
        or "read-only" in first
        or "read only" in first.lower()
    ):
        return f"query refused (read-only): {first}; {_READ_ONLY_HINT}"
    return f"query failed: {first}"


def _named_params(given: list[str]) -> dict[str, str]:
    """`--param NAME=VALUE` flags as {NAME: VALUE}; ValueError naming the one that is not of that form."""
    out = {}
    for item in given:
        name, eq, value = item.partition("=")
        if not eq or not name.strip().isidentifier():
            raise ValueError(f"--param {item!r}: expected NAME=VALUE (a parameter's name, '=', its value)")
        out[name.strip()] = value
    return out


def _finite_params(params: dict) -> None:
    import math

    for key, value in params.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--param {key}={value}: expected a finite number")


def _sql(args: argparse.Namespace) -> int:
    from wattbench.connection import WarehouseError, connect, query_rows, sql_text

    try:
        with connect(args.db, read_only=True, sandbox=True) as con:
            query = args.query
            text = (
                sql_text(query)
                if query.replace("-", "_").replace(".sql", "").isidentifier() and " " not in query
                else query
            )
            from wattbench.report.rows import query_params

            run_id = None
            if "$" in text:
                run_id = args.run or latest_run_id(con, say=True)
                if run_id is None and "$run_id" in text:
                    return _fail("no runs in the warehouse yet; run `make run` first")
                if "$run_id" in text:
                    print(f"-- run_id = {run_id}", file=sys.stderr)
            try:
                params = query_params(con, text, run_id, _named_params(args.param))
                _finite_params(params)
            except ValueError as exc:
                return _fail(str(exc))
            columns, rows = query_rows(con, text, params)
            columns, rows = _shown_columns(text, columns, rows, args.all)
    except WarehouseError as exc:
        return _fail(str(exc))
    except Exception as exc:  # duckdb errors: show the message, not a traceback
        return _fail(_query_error(exc))
    print_rows(columns, rows, args.format)
    return 0


def _shown_columns(text: str, columns: list[str], rows: list, every: bool) -> tuple[list[str], list]:
    """A named query that names its default columns (wattbench.queries.default_columns) shows those, and says on
    stderr how many it left out; `--all` (every) shows every one."""
    from wattbench.connection import default_columns

    shown = None if every else default_columns(text)
    if not shown:
        return columns, rows
    keep = [i for i, c in enumerate(columns) if c in shown]
    if len(keep) == len(columns):
        return columns, rows
    print(f"-- {len(keep)} of {len(columns)} columns; --all shows every one", file=sys.stderr)
    return [columns[i] for i in keep], [[row[i] for i in keep] for row in rows]


def _runs(args: argparse.Namespace) -> int:
    from pipelines.runs import main_runs

    return main_runs(
        args.clean is not None,
        args.limit,
        args.clean or [],
        log=lambda m: print(m, file=sys.stderr, flush=True),
        db=args.db,
    )


def _ingest(args: argparse.Namespace) -> int:
    from wattbench.ingest_checks import incomplete_note
    from wattbench.warehouse import IngestInterrupted, WarehouseError, connect, ingest_bundle, set_run_fields
    from wattbench_agent.bundle import ArchiveLimits, BundleError, GiB, read_manifest, unpacked

    plan_fields = None
    if args.plan:  # the plan the bundle was measured on: its prices and SLO for the reports
        from wattbench.plan import PlanError, load_plan, plan_run_fields

        try:
            plan, sha = load_plan(args.plan)
        except PlanError as exc:
            return _fail(str(exc))
        plan_fields = plan_run_fields(plan, Path(args.plan).resolve(), sha)
    try:
        limits = ArchiveLimits(
            max_bytes=round(args.max_unpacked_gb * GiB), max_members=args.max_members, max_ratio=args.max_ratio
        )
        with unpacked(args.bundle, limits) as folder, connect(args.db) as con:
            manifest = read_manifest(folder)
            counts = ingest_bundle(con, folder, replace=args.replace)
            if plan_fields:
                set_run_fields(con, manifest["run_id"], plan_fields)
    except IngestInterrupted as exc:
        print(f"wattbench: {exc}", file=sys.stderr)
        return 130
    except (BundleError, WarehouseError) as exc:
        return _fail(str(exc))
    print("ingested " + ", ".join(f"{t}: {n} rows" for t, n in counts.items()))
    note = incomplete_note(Path(args.bundle), manifest)
    if note:
        print(f"wattbench: note: {note}", file=sys.stderr)
    return 0


def _spec(args: argparse.Namespace) -> int:
    """An agent spec for a plan, to run the agent by hand on a GPU node without Dagster (then `wattbench ingest`)."""
    import uuid

    from wattbench.plan import PlanError, agent_spec, load_plan
    from wattbench_agent.safety import plain_name_problem, secret_paths
    from wattbench_agent.wire import MAX_RUN_ID_CHARS

    try:
        plan, _ = load_plan(args.plan)
    except PlanError as exc:
        return _fail(str(exc))
    if args.workload:
        known = [w.name for w in plan.workloads]
        unknown = sorted(set(args.workload) - set(known))
        if unknown:
            return _fail(f"{args.plan}: no workload {', '.join(unknown)}; the plan has {', '.join(known)}")
        plan = plan.model_copy(update={"workloads": [w for w in plan.workloads if w.name in args.workload]})
    run_id = args.run_id or f"{plan.name}-{uuid.uuid4().hex[:8]}"
    problem = plain_name_problem(run_id, MAX_RUN_ID_CHARS)  # it names the bundle's folder
    if problem:
        return _fail(f"--run-id {problem}")
    spec = agent_spec(plan, run_id, Path(args.out or f"bundle-{run_id}"), builds={})
    text = spec.to_json(indent=1)
    secrets = secret_paths(spec.to_dict())
    if secrets and not args.write:  # the agent needs them in clear, so the spec goes to a file only its owner reads
        return _fail(
            f"{args.plan}: the spec holds secrets ({', '.join(secrets[:6])}); not printed: write it with "
            "--write FILE (made readable by you only)"
        )
    if args.write:
        fd = os.open(args.write, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secrets else 0o644)
        if secrets:
            os.fchmod(fd, 0o600)  # also a file that was there before
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        n = sum(len(d.load_points) for d in spec.deployments)
        print(
            f"wattbench: {args.write}: run {run_id}, {len(spec.deployments)} deployment(s), {n} load point(s); "
            f"on the GPU node: wattbench-agent --spec {Path(args.write).name}; then here: wattbench ingest BUNDLE",
            file=sys.stderr,
        )
    else:
        print(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="materialize the whole asset graph on a plan and print the head-to-head table")
    p.add_argument("--plan", default=str(settings.plan_path()), help="benchmark plan YAML")
    p.add_argument("--db", help=settings.DB_HELP)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_run)

    p = sub.add_parser(
        "runs",
        help="the latest runs with their process and status; --clean cleans up after runs "
        "whose process is gone (frees the writer slot, stops their agent and engines)",
    )
    p.add_argument(
        "--clean",
        nargs="*",
        metavar="RUN_ID",
        default=None,
        help="clean up every run whose process is gone, and the runs named (left by a wattbench that did "
        "not record its process)",
    )
    p.add_argument("--limit", type=int, default=20, help="how many runs to list")
    p.add_argument("--db", help=settings.DB_HELP)
    p.set_defaults(func=_runs)

    p = sub.add_parser("sql", help="run SQL (or a named query from sql/) on the warehouse, read-only")
    p.add_argument("query", help="SQL text, or the name of a query in sql/ (e.g. load_points, head_to_head)")
    p.add_argument("--db", help=settings.DB_HELP)
    p.add_argument("--run", help="run id for queries that use $run_id (default: the latest run)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table, csv, json (one array of objects) or jsonl (one object a line)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every column of a named query (load_points shows its main figures by default)",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a $NAME parameter of the query (the capacity profile defaults to the run's plan)",
    )
    p.set_defaults(func=_sql)

    p = sub.add_parser(
        "spec",
        help="write the bench agent's spec for a plan (to run `wattbench-agent` by hand on a "
        "GPU node, then `wattbench ingest` the bundle)",
    )
    p.add_argument("--plan", default=str(settings.plan_path()), help="benchmark plan YAML")
    p.add_argument("--workload", action="append", default=[], help="only this workload (repeatable)")
    p.add_argument("--run-id", help="the run id its rows will carry (default: <plan name>-<random>)")
    p.add_argument("--out", help="the bundle folder on the GPU node (default: bundle-<run id>)")
    p.add_argument("--write", metavar="FILE", help="write the spec to FILE instead of stdout")
    p.set_defaults(func=_spec)

    p = sub.add_parser("ingest", help="load a result bundle into the warehouse (idempotent, one transaction)")
    p.add_argument("bundle", help="bundle folder (holds manifest.json), or a tar archive of one (.tar.xz, .tgz)")
    p.add_argument(
        "--replace",
        action="store_true",
        help="the bundle's run is already complete in the warehouse with other rows: drop them all and load the "
        "bundle's instead (one transaction); without it such a bundle is refused",
    )
    p.add_argument("--db", help=settings.DB_HELP)
    p.add_argument(
        "--plan",
        help="the plan the bundle was measured on: its prices and SLO go with the run (cost and "
        "goodput figures need them)",
    )
    from wattbench_agent.argtypes import bounded_int, finite_float
    from wattbench_agent.bundle import ArchiveLimits, GiB

    limits = ArchiveLimits()
    p.add_argument(
        "--max-unpacked-gb",
        type=finite_float(minimum=0, strict_minimum=True),
        default=limits.max_bytes / GiB,
        help="an archive: refuse it if it would unpack to more than this many GiB (default %(default)g)",
    )
    p.add_argument(
        "--max-members",
        type=bounded_int(minimum=1),
        default=limits.max_members,
        help="an archive: refuse it if it holds more members (default %(default)d)",
    )
    p.add_argument(
        "--max-ratio",
        type=finite_float(minimum=1),
        default=limits.max_ratio,
        help="an archive: refuse it if it would unpack to more than this many bytes per byte, once past "
        f"{limits.ratio_floor_bytes // 1024**2} MiB (default %(default)g; real bundles pack 8-30 to 1)",
    )
    p.set_defaults(func=_ingest)
