"""The Great Expectations suites on one run of millions of requests: wall time and peak memory.

python -m benchmarks.validation_scale [--sizes 1m,10m] [--before CHECKOUT]

Builds a warehouse holding ONE run of N requests directly in DuckDB SQL (not through a bundle: a bundle of 10M
requests would be 31 GB of JSON lines and its ingest is timed by benchmarks/warehouse_scale.py), the synthetic run of
benchmarks/synthetic.py (the one warehouse_scale.py writes as bundles): load points of 25,000 requests at 300/s, 128
per-token times a request (kept in requests.chunk_ns as ingest keeps them), one request in 1,000 failed, 2
deployments of 8 GPUs sampled at 10 Hz over the whole run, energy windows and /metrics scrapes, and the per-point
figures ingest keeps (point_stats). Then, in a fresh process, every table's suite runs as the blocking checks run it
(wattbench/validation.validate_run) and the wall seconds and that process's peak RSS (VmHWM) are recorded, per
table and in all, in results/validation_scale.json and results/validation_scale.md. `--before CHECKOUT` also runs
another checkout's suites (e.g. /work/main: frames in pandas, GX's pandas engine) on the same warehouse, for sizes
up to --before-max (the old path holds every row in memory: at 10M it would not fit this machine).
Only sizes that were run are written. The rows are synthetic: every figure here is wattbench's own time or memory.
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

from benchmarks.synthetic import SIZES, SyntheticRun, chosen_sizes, insert_run, measured_on, work_folder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
DEFAULT_SIZES = ("1m", "10m")
GOAL = {"requests": 10_000_000, "seconds": 60.0, "peak_rss_mb": 2048.0}


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def build(db: Path, n_requests: int, run_id: str = "scale-run", seed: int = 0) -> dict:
    """A warehouse with one run of n_requests requests (benchmarks/synthetic.py), written by DuckDB (no Python per
    row), point_stats by the real refresh_point_stats."""
    from wattbench.warehouse import connect

    t0 = time.perf_counter()
    with connect(db) as con:
        con.execute("SET memory_limit = '4GB'")
        con.execute("SET preserve_insertion_order = false")
        counts = insert_run(con, SyntheticRun(run_id, n_requests, seed))
        con.execute("CHECKPOINT")
    rows = {t: counts[t] for t in ("load_runs", "requests", "gpu_samples", "server_metrics")}
    return {"build_s": time.perf_counter() - t0, "rows": rows, "warehouse_mb": db.stat().st_size / 1e6}


def child_validate(db: str) -> dict:
    """Every suite on the run, as assets/checks.py runs them (validate_run), in this fresh process."""
    t_import = time.perf_counter()
    from wattbench.validation import suites, validate_run
    from wattbench.warehouse import connect

    imported_s = time.perf_counter() - t_import
    tables, failed = {}, []
    t0 = time.perf_counter()
    with connect(db, read_only=True) as con:
        run_id = con.execute("SELECT max(run_id) FROM runs").fetchone()[0]
        for table in suites():
            t = time.perf_counter()
            result = validate_run(con, table, run_id)
            tables[table] = {"s": time.perf_counter() - t, "rows": result.rows, "rules": len(result.outcomes)}
            failed += [o.rule for o in result.outcomes if not o.success]
    return {
        "validation_s": time.perf_counter() - t0,
        "import_s": imported_s,
        "peak_rss_mb": _peak_rss_mb(),
        "tables": tables,
        "not_passed": failed,
    }


_BEFORE = """
import json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/agent"]
try:
    from wattbench.validation import suites, table_frame, validate_table
    from wattbench.warehouse import connect
except ImportError:  # a checkout from before the domain code moved out of resources/ (issue 33)
    from resources.validation import suites, table_frame, validate_table
    from resources.warehouse import connect
t0 = time.perf_counter()
failed = []
with connect(sys.argv[2], read_only=True) as con:
    run_id = con.execute("SELECT max(run_id) FROM runs").fetchone()[0]
    for table in suites():
        result = validate_table(table, table_frame(con, table, run_id))
        failed += [o.rule for o in result.outcomes if not o.success]
hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0]
print(json.dumps({"validation_s": time.perf_counter() - t0, "peak_rss_mb": hwm / 1024, "not_passed": failed}))
"""


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 3600) -> dict:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_results(results: dict, out: Path) -> None:
    (out / "validation_scale.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# GX suites at scale (benchmarks/validation_scale.py)",
        "",
        f"Measured {results['measured_at']} on {results['machine']}. One run of N synthetic requests per warehouse, "
        "built in DuckDB SQL (not through a bundle); every suite run as the blocking checks run it, in a fresh "
        "process: wall seconds (one timing each; the 1-minute load average is in the JSON: above 2 on 2 cores, "
        "other work competed) and that process's peak RSS. Goal (issue 18): 10M requests within 60 s and 2 GB.",
        "",
        "| requests in the run | build (s) | warehouse (MB) | suites (s) | peak RSS (MB) | slowest table | "
        "before: pandas + GX pandas engine (s, MB) |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    for label in results["sizes_run"]:
        e = results["sizes"][label]
        v = e.get("validation", {})
        slow = max(v.get("tables", {}).items(), key=lambda kv: kv[1]["s"], default=None)
        b = e.get("before")
        before = (
            f"{b['validation_s']:.1f} s, {b['peak_rss_mb']:,.0f} MB"
            if b and "validation_s" in b
            else (b.get("error", "-") if b else "not run (holds every row in memory: above --before-max)")
        )
        lines.append(
            f"| {e['requests']:,} | {e['build_s']:.0f} | {e['warehouse_mb']:,.0f} | "
            + (f"{v['validation_s']:.1f}" if "validation_s" in v else v.get("error", "failed"))
            + f" | {v.get('peak_rss_mb', float('nan')):,.0f} | "
            + (f"{slow[0]} {slow[1]['s']:.1f} s ({slow[1]['rows']:,} rows)" if slow else "-")
            + f" | {before} |"
        )
    lines += [
        "",
        "Rules not passed on the synthetic rows (the data, not the code: no engine builds are synthesized, "
        "and its 2 s warm-up is shorter than two request lifetimes):",
        "",
    ]
    for label in results["sizes_run"]:
        e = results["sizes"][label]
        now = e.get("validation", {}).get("not_passed")
        before = (e.get("before") or {}).get("not_passed")
        same = "" if before is None else (" (the same as before)" if before == now else f" (before: {before})")
        lines.append(f"- {e['requests']:,}: {', '.join(now) if now is not None else 'failed'}{same}")
    (out / "validation_scale.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES), help=f"comma-separated: {', '.join(SIZES)}")
    ap.add_argument("--before", metavar="CHECKOUT", help="also run another checkout's suites on the same warehouse")
    ap.add_argument("--before-max", default="1m", help="largest size --before runs (default 1m)")
    ap.add_argument("--work", help="folder for the warehouses (default: a temporary folder)")
    ap.add_argument("--out", default=str(RESULTS), help="where validation_scale.json/.md go (default results/)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_validate(*args.child[1:])))
        return 0
    labels = chosen_sizes(ap, args.sizes)
    work = work_folder(args.work, "wattbench-gx-scale-")
    results = {
        **measured_on(),
        "goal": GOAL,
        "sizes_run": [],
        "sizes": {},
    }
    try:
        for label in labels:
            db = work / f"gx-{label}.duckdb"
            db.unlink(missing_ok=True)
            entry = {"requests": SIZES[label], **build(db, SIZES[label])}
            print(f"  {label}: built in {entry['build_s']:.0f} s, {entry['warehouse_mb']:,.0f} MB", flush=True)
            entry["load_average_1min_before"] = os.getloadavg()[0]
            entry["validation"] = _run(
                [sys.executable, "-m", "benchmarks.validation_scale", "--child", "validate", str(db)], ROOT
            )
            entry["load_average_1min_after"] = os.getloadavg()[0]
            print(f"  {label}: suites {entry['validation']}", flush=True)
            if args.before and SIZES[label] <= SIZES[args.before_max]:
                code = Path(args.before).resolve()
                env = {**os.environ, "PYTHONPATH": f"{code}:{code / 'agent'}"}
                entry["before"] = {
                    "code": str(code),
                    **_run([sys.executable, "-c", _BEFORE, str(code), str(db)], code, env),
                }
                print(f"  {label}: before {entry['before']}", flush=True)
            db.unlink()
            results["sizes"][label] = entry
            results["sizes_run"].append(label)
            write_results(results, Path(args.out))  # after every size: a later size that fails loses nothing
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
