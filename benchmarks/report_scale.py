"""Every report on a warehouse of 10M requests over many runs: cold and warm seconds of each query and view.

python -m benchmarks.report_scale [--runs 10] [--run-requests 1000000] [--events 16] [--work DIR] [--keep]

Builds one warehouse of RUNS runs of RUN_REQUESTS requests each (default 10 x 1M = 10M requests), each the synthetic
run of benchmarks/synthetic.py written straight into the warehouse in SQL (no bundle: ingest is timed by
benchmarks/warehouse_scale.py), its per-load-point figures kept in point_stats and the other kept tables
(load_points_core, point_figures, ...) by the real wattbench.warehouse.refresh_point_stats, as ingest keeps them.
The runs are one plan measured again and again (same engines, points and repeats; a start time an hour apart; a
GPU-hour price, an energy price and an SLO), so regressions and run comparisons have a history to read. To keep the
build within minutes here, each request's 128 tokens arrive in EVENTS content events (16 by default: 8 tokens an
event, as an engine that coalesces its stream writes) rather than one an event; the reports read the kept per-point
figures, never the token arrays, so their time does not depend on it (the ingest-time definitions that do are timed,
for one run, in the last table).

Then, for every report query in sql/ (parameters as `wattbench sql` fills them: the latest run; --compare the first
and the latest; what_to_buy every run) and every view reports read (whole, and for the latest run), a fresh Python
process opens the warehouse read-only, runs the query once (cold: the first query of that process, so it pays
for loading the catalog and planning the views) and once more (warm), fetching every row. The operating system's
file cache is not dropped (a warehouse just used); the connection's opening is timed apart. Writes
results/report_scale.json and results/report_scale.md. Goal (issue 18): every report under 1 s.
The rows are synthetic: every figure here is wattbench's own time, never a figure about an engine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.synthetic import OUTPUT_TOKENS, SyntheticRun, insert_run, measured_on, work_folder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
GOAL_S = 1.0
RUNS = 10
RUN_REQUESTS = 1_000_000
EVENTS = 16
NOT_REPORTS = ("schema", "views", "derive_deployment_hbm")  # sql/ files that are not report queries
# Views no report reads: the ingest-time definitions of the kept figures (*_live, v_request_slo_counts) and the raw
# inter-token gaps. Timed for the latest run (count of rows), apart from the goal.
RAW_VIEWS = (
    "v_itl",
    "v_request_stats_live",
    "v_itl_stats_live",
    "v_client_stats_live",
    "v_window_steadiness_live",
    "v_request_slo_counts",
    "v_window_gpu_live",
    "v_imported_request_stats_live",
    "v_imported_itl_stats_live",
    "v_request_tallies_live",
    "v_load_points_core_live",
    "v_point_figures_live",
)
PROFILE = {
    "steady_qps": 40,
    "peak_qps": 100,
    "input_tokens": 512,
    "output_tokens": OUTPUT_TOKENS,
    "burst_hours_per_day": 4,
    "elastic_gpu_hour_usd": None,
}


def build(db: Path, runs: int, run_requests: int, events: int) -> dict:
    from wattbench.warehouse import connect

    t0 = time.perf_counter()
    per_run = []
    with connect(db) as con:
        con.execute("SET memory_limit = '4GB'")
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET enable_progress_bar = false")
        for k in range(runs):
            t = time.perf_counter()
            run = SyntheticRun(f"scale-{k:03d}", run_requests, seed=k, events_per_request=events)
            rows = insert_run(
                con,
                run,
                runs_row={
                    "started_at": f"2026-11-01 {k % 24:02d}:00:00",
                    "status": "complete",
                    "gpu_price_per_hour": 2.5,
                    "energy_price_per_kwh": 0.12,
                    "pue": 1.3,
                    "slo_ttft_ms": 500.0,
                    "slo_tpot_ms": 50.0,
                    "slo_e2e_ms": 10_000.0,
                },
            )
            con.execute("CHECKPOINT")
            per_run.append({"run_id": run.run_id, "s": time.perf_counter() - t, "rows": rows})
            print(f"  built {run.run_id}: {rows['requests']:,} requests in {per_run[-1]['s']:.0f} s", flush=True)
        totals = {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "load_runs", "requests", "gpu_samples", "point_stats")
        }
    return {
        "build_s": time.perf_counter() - t0,
        "rows": totals,
        "runs": per_run,
        "warehouse_mb": db.stat().st_size / 1e6,
    }


def jobs(db: Path) -> list[tuple[str, str, str]]:
    """(name, kind, SQL) of every report query in sql/, every view reports read (whole and for the latest run), and
    the views no report reads (for the latest run)."""
    import duckdb

    from wattbench.warehouse import SQL_DIR

    con = duckdb.connect(str(db), read_only=True)
    views = [
        r[0]
        for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY view_name"
        ).fetchall()
    ]
    has_run = {
        v
        for v in views
        if con.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = 'run_id'", [v]
        ).fetchone()[0]
    }
    con.close()
    out = [(p.stem, "report", p.stem) for p in sorted(SQL_DIR.glob("*.sql")) if p.stem not in NOT_REPORTS]
    for v in views:
        if v in RAW_VIEWS:
            continue
        out.append((v, "view", f"SELECT * FROM {v}"))
        if v in has_run:
            out.append((f"{v} (latest run)", "view", f"SELECT * FROM {v} WHERE run_id = $run_id"))
    out += [
        (f"{v} (latest run)", "raw", f"SELECT count(*) FROM {v} WHERE run_id = $run_id")
        for v in RAW_VIEWS
        if v in views
    ]
    return out


def child_query(db: str, text: str) -> dict:
    """In this fresh process: open the warehouse read-only, run the query twice, fetching every row."""
    t0 = time.perf_counter()
    from wattbench.warehouse import connect, query_rows

    imported = time.perf_counter() - t0
    with connect(db, read_only=True) as con:
        opened = time.perf_counter() - t0 - imported
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at, run_id").fetchall()]
        params = {**PROFILE, "run_id": runs[-1], "run_a": runs[0], "run_b": runs[-1], "runs": runs}
        times, n = [], 0
        for _ in range(2):
            t = time.perf_counter()
            n = len(query_rows(con, text, params)[1])
            times.append(time.perf_counter() - t)
    return {"cold_s": times[0], "warm_s": times[1], "rows": n, "open_s": opened, "import_s": imported}


def time_queries(db: Path) -> dict:
    out = {}
    for name, kind, text in jobs(db):
        load = os.getloadavg()[0]
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.report_scale", "--child", str(db), text],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            entry = {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
        else:
            entry = json.loads(proc.stdout.strip().splitlines()[-1])
        out[name] = {"kind": kind, **entry, "load_average_1min": load}
        shown = f"{entry['cold_s']:.3f} s cold, {entry['warm_s']:.3f} s warm" if "cold_s" in entry else entry["error"]
        print(f"  {name}: {shown}", flush=True)
    return out


def write_results(results: dict, out: Path) -> None:
    (out / "report_scale.json").write_text(json.dumps(results, indent=2) + "\n")
    b, q = results["build"], results["queries"]
    graded = {k: v for k, v in q.items() if v["kind"] != "raw"}
    over = sorted(k for k, v in graded.items() if v.get("cold_s", float("inf")) >= GOAL_S)
    worst = max(graded.items(), key=lambda kv: kv[1].get("cold_s", float("inf")))
    loads = [v["load_average_1min"] for v in q.values()]
    lines = [
        "# Reports at 10M requests (benchmarks/report_scale.py)",
        "",
        f"Measured {results['measured_at']} on {results['machine']}. One warehouse of {b['rows']['runs']} synthetic "
        f"runs, {b['rows']['requests']:,} requests in all ({b['rows']['load_runs']:,} load runs, "
        f"{b['rows']['gpu_samples']:,} GPU samples, {b['warehouse_mb']:,.0f} MB), built in SQL in {b['build_s']:.0f} s "
        "with point_stats and the other kept tables filled by refresh_point_stats; each request's "
        f"{OUTPUT_TOKENS} tokens in {results['shape']['events_per_request']} stream events. Each query in a fresh "
        "process: cold (its first query: catalog and view planning included), then warm; every row fetched; one "
        f"timing each (1-minute load average {min(loads):.1f}-{max(loads):.1f}, in the JSON for"
        " each query: other work competed and the times are upper bounds). "
        + (
            f"The warehouse was reused (--keep): built earlier, then opened for writing by this checkout, which brings "
            f"its schema, views and kept tables up to date, in {results['reused']['upgrade_s']:.1f} s. "
            if results.get("reused")
            else ""
        )
        + f"Goal (issue 18): every report under {GOAL_S:.0f} s. Slowest, cold: {worst[0]} "
        f"{worst[1].get('cold_s', float('nan')):.3f} s; at or over the goal: {', '.join(over) or 'none'}.",
        "",
        "| query | kind | cold (s) | warm (s) | rows | opening the warehouse (s) | before: cold, warm (s) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    before = results.get("before", {}).get("queries", {})
    for name, v in q.items():
        b = before.get(name, {})
        was = f"{b['cold_s']:.3f}, {b['warm_s']:.3f}" if "cold_s" in b else "-"
        if "cold_s" in v:
            lines.append(
                f"| {name} | {v['kind']} | {v['cold_s']:.3f} | {v['warm_s']:.3f} | {v['rows']:,} | "
                f"{v['open_s']:.3f} | {was} |"
            )
        else:
            lines.append(f"| {name} | {v['kind']} | failed: {v['error']} | | | | {was} |")
    lines += [
        "",
        "kind: report = a query in sql/ (what `wattbench sql NAME` and `wattbench report` run); view = a view reports "
        "read; raw = a view no report reads (the ingest-time definitions of the kept figures and the raw inter-token "
        "gaps: refresh_point_stats runs them once per run at ingest), counted for the latest run, not held to the "
        "goal.",
    ]
    if results.get("before"):
        b = results["before"]
        lines += [
            "",
            f"before: the same warehouse and queries timed the same way with the views of {b['code']}, measured "
            f"{b['measured_at']} (a view that did not exist then has no figure).",
        ]
    (out / "report_scale.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=RUNS, help=f"runs in the warehouse (default {RUNS})")
    ap.add_argument("--run-requests", type=int, default=RUN_REQUESTS, help=f"requests per run ({RUN_REQUESTS:,})")
    ap.add_argument("--events", type=int, default=EVENTS, help=f"stream events per request (default {EVENTS})")
    ap.add_argument("--work", help="folder for the warehouse (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the warehouse (in --work) and reuse it when there")
    ap.add_argument("--out", default=str(RESULTS), help="where report_scale.json/.md go (default results/)")
    ap.add_argument(
        "--before",
        nargs=2,
        metavar=("JSON", "CODE"),
        help="an earlier report_scale.json of the same warehouse and the code it timed, shown beside these timings",
    )
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_query(*args.child)))
        return 0
    if args.keep and not args.work:
        ap.error("--keep needs --work (where the warehouse stays)")
    work = work_folder(args.work, "wattbench-report-scale-")
    db = work / f"reports-{args.runs}x{args.run_requests}-e{args.events}.duckdb"
    results = {
        **measured_on(),
        "goal_s": GOAL_S,
        "shape": {
            "runs": args.runs,
            "run_requests": args.run_requests,
            "events_per_request": args.events,
            "output_tokens": OUTPUT_TOKENS,
        },
    }
    try:
        if args.keep and db.exists():
            results["build"] = json.loads(db.with_suffix(".build.json").read_text())
            from wattbench.warehouse import connect

            t = time.perf_counter()
            with connect(db):  # this checkout's schema and views (the timings are of this code's queries)
                pass
            results["reused"] = {"upgrade_s": time.perf_counter() - t}
            print(f"  reusing {db} (opened for writing in {results['reused']['upgrade_s']:.1f} s)", flush=True)
        else:
            db.unlink(missing_ok=True)
            results["build"] = build(db, args.runs, args.run_requests, args.events)
            db.with_suffix(".build.json").write_text(json.dumps(results["build"]))
        results["queries"] = time_queries(db)
        if args.before:
            earlier = json.loads(Path(args.before[0]).read_text())
            results["before"] = {
                "code": args.before[1],
                "measured_at": earlier["measured_at"],
                "queries": {
                    k: {"cold_s": v["cold_s"], "warm_s": v["warm_s"]}
                    for k, v in earlier["queries"].items()
                    if "cold_s" in v
                },
            }
        write_results(results, Path(args.out))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True) if not args.work else db.unlink(missing_ok=True)
    over = [k for k, v in results.get("queries", {}).items() if v["kind"] != "raw" and v.get("cold_s", 99) >= GOAL_S]
    print(f"  reports at or over {GOAL_S} s cold: {', '.join(over) or 'none'}", flush=True)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
