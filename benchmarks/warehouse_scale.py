"""How the warehouse scales: ingest, every report in sql/ and the validation suites on millions of requests.

Synthesizes result bundles shaped like a real run (benchmarks/synthetic.py; python -m benchmarks.warehouse_scale
[--sizes 100k,1m,10m]):
load points of REQUESTS_PER_POINT requests sent at a steady rate, each request streaming OUTPUT_TOKENS tokens one
per event (per-token arrival times with jitter around a TPOT, a TTFT spread over the point), a few failed
requests, 8 GPUs sampled at 10 Hz over the whole run, energy windows and engine /metrics scrapes at each window's
edges. A size of N requests is one bundle (one run) of up to RUN_REQUESTS requests; larger sizes are several runs
ingested into one warehouse (10M: ten runs of 1M). For each size it records, in results/warehouse_scale.json and
results/warehouse_scale.md:
- ingest: wall seconds of `ingest_bundle` per bundle and the peak RSS of the process doing it (a fresh Python
  process per size, so the peak is that size's; ru_maxrss of the child);
- queries: wall seconds of every report query in sql/ and every view reports read, on the full warehouse, run in
  a fresh process (cold: the first run after opening the file) for the latest run;
- validation: wall seconds and peak RSS of the GX suites (wattbench/validation.py) on the largest run.
Only sizes that were run are written: a size not run has no entry (never a figure).
The synthetic bundles are data shaped like measurements, not measurements: every figure here is a time or a size of
wattbench's own work (measured on this machine), never a figure about an engine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.synthetic import (
    GPUS,
    OUTPUT_TOKENS,
    REQUESTS_PER_POINT,
    SAMPLE_HZ,
    SIZES,
    chosen_sizes,
    measured_on,
    synthesize,
    work_folder,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
DEFAULT_SIZES = ("100k", "1m")
# The ingest before the token store (lists in DuckDB, numpy figures, JSON requests): the commit this benchmark compares
# with by default, unpacked from git (git archive) into the work folder and run on a version-2 bundle of the same run
BEFORE_COMMIT = "7119028"
RUN_REQUESTS = 1_000_000  # requests of one bundle (one run); larger sizes are several runs


# ------------------------------------------------------------------------------------------------ measuring
VIEWS = (
    "v_load_points",
    "v_point_figures",
    "v_repeat_figures",
    "v_engine_contrasts",
    "v_request_stats",
    "v_itl_stats",
    "v_window_gpu",
    "v_window_steadiness",
    "v_client_vs_server",
)
QUERY_PARAMS = {
    "steady_qps": 40,
    "peak_qps": 100,
    "input_tokens": 512,
    "output_tokens": 128,
    "burst_hours_per_day": 4,
    "elastic_gpu_hour_usd": None,
}


def _peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: its own address space since exec; ru_maxrss would also count
    the parent's memory at fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_ingest(db: str, bundle: str) -> dict:
    from wattbench.warehouse import connect, ingest_bundle

    t0 = time.perf_counter()
    with connect(db) as con:
        counts = ingest_bundle(con, bundle)
    return {"ingest_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(), "rows": counts}


def child_queries(db: str) -> dict:
    """Every report query in sql/ (parameters as `wattbench sql` fills them for the latest run) and every view
    reports read, each timed once on a freshly opened warehouse, then once more (warm)."""
    from wattbench.warehouse import SQL_DIR, connect, run_sql

    out: dict[str, dict] = {}
    with connect(db, read_only=True) as con:
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        params = {**QUERY_PARAMS, "run_id": runs[-1], "run_a": runs[0], "run_b": runs[-1], "runs": None}
        jobs = [
            (p.stem, p.read_text())
            for p in sorted(SQL_DIR.glob("*.sql"))
            if p.stem not in ("schema", "views", "derive_deployment_hbm")
        ]
        jobs += [(v, f"SELECT * FROM {v}") for v in VIEWS]
        jobs += [(f"{v} (latest run)", f"SELECT * FROM {v} WHERE run_id = $run_id") for v in VIEWS]
        for name, text in jobs:
            times, n = [], None
            for _ in range(2):
                t0 = time.perf_counter()
                n = len(run_sql(con, text, params))
                times.append(time.perf_counter() - t0)
            out[name] = {"cold_s": times[0], "warm_s": times[1], "rows": n}
    return {"queries": out, "peak_rss_mb": _peak_rss_mb()}


def child_validation(db: str) -> dict:
    """The GX suites of every table on the latest run (as assets/checks.py runs them)."""
    from wattbench.validation import suites, validate_run
    from wattbench.warehouse import connect

    t0 = time.perf_counter()
    failed = []
    with connect(db, read_only=True) as con:
        run_id = con.execute("SELECT max(run_id) FROM runs").fetchone()[0]
        for table in suites():
            result = validate_run(con, table, run_id)
            failed += [o.rule for o in result.outcomes if not o.success and o.severity == "error"]
    return {"validation_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(), "errors": failed}


_BEFORE = """
import json, resource, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/agent"]
try:
    from wattbench.warehouse import connect, ingest_bundle
except ImportError:  # a checkout from before the warehouse moved out of resources/ (issue 33)
    from resources.warehouse import connect, ingest_bundle
t0 = time.perf_counter()
with connect(sys.argv[2]) as con:
    counts = ingest_bundle(con, sys.argv[3])
hwm = [int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:")][0]
print(json.dumps({"ingest_s": time.perf_counter() - t0, "rows": counts, "peak_rss_mb": hwm / 1024}))
"""


def _child(what: str, *args: str, timeout: float = 3600) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.warehouse_scale", "--child", what, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit " + str(proc.returncode)])[-1]}
    return _last_json(proc.stdout)


def _last_json(stdout: str) -> dict:
    """The child's result: its last line that is a JSON object (what else it printed, a library's notice, is not)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": "no result line in the child's output: " + stdout.strip()[-200:]}


def _before_ingest(code: Path, db: Path, bundle: Path) -> dict:
    """Ingest `bundle` with another checkout's code (its own wattbench/, or resources/ before, and agent/), in a
    fresh process: wall seconds, peak RSS, the load around it, or the error."""
    commit = (
        (code / "COMMIT").read_text().strip()
        if (code / "COMMIT").exists()
        else subprocess.run(
            ["git", "-C", str(code), "log", "-1", "--format=%h %s"], capture_output=True, text=True
        ).stdout.strip()[:100]
    )
    load_before = os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": f"{code}:{code / 'agent'}"}
    proc = subprocess.run(
        [sys.executable, "-c", _BEFORE, str(code), str(db), str(bundle)],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
    )
    db.unlink(missing_ok=True)
    out = {"code": str(code), "commit": commit, "load_average_1min": [load_before, os.getloadavg()[0]]}
    if proc.returncode != 0:  # said, not dropped: a before that failed is no figure
        return {**out, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {**out, **_last_json(proc.stdout)}


def _checkout(spec: str | None, work: Path) -> Path | None:
    """--before as a folder of code: a checkout, or git:COMMIT unpacked from this repository (None: not asked, or
    git could not give it: said, and the before columns stay empty)."""
    if not spec or spec == "none":
        return None
    if not spec.startswith("git:"):
        return Path(spec).resolve()
    dest = work / f"before-{spec[4:]}"
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", spec[4:]], capture_output=True)
    if archive.returncode != 0:
        print(f"  before: git archive {spec[4:]} failed ({archive.stderr.decode().strip()[:200]}); not compared")
        return None
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    subprocess.run(["git", "init", "-q", str(dest)], check=False)  # so that its commit line can be read
    (dest / "COMMIT").write_text(spec[4:] + "\n")
    return dest


def run_size(label: str, n: int, work: Path, validation: bool, before: Path | None = None) -> dict:
    """One size: synthesize its bundles, ingest each (with `before`, another checkout's code, first: the same run as
    a version-2 bundle, which that code reads, one right after the other), then the queries and the suites on the
    warehouse."""
    db = work / f"w-{label}.duckdb"
    runs = max(1, -(-n // RUN_REQUESTS))
    ingests = []
    for k in range(runs):
        bundle = work / f"bundle-{label}-{k}"
        t0 = time.perf_counter()
        size = min(RUN_REQUESTS, n - k * RUN_REQUESTS)
        made = synthesize(bundle, f"scale-{label}-{k:03d}", size, seed=k)
        made["synthesize_s"] = time.perf_counter() - t0
        earlier = None
        if before:
            old = work / f"bundle-{label}-{k}-v2"
            synthesize(old, f"scale-{label}-{k:03d}", size, seed=k, bundle_version=2)
            earlier = _before_ingest(before, work / "before.duckdb", old)
            shutil.rmtree(old)
        load_before = os.getloadavg()[0]
        result = _child("ingest", str(db), str(bundle))
        ingests.append({**made, **result, "load_average_1min": [load_before, os.getloadavg()[0]]})
        if earlier:
            ingests[-1]["before"] = earlier
        print(
            f"  {label} run {k + 1}/{runs}: {made['requests']:,} requests, {made['bytes'] / 1e6:,.0f} MB of bundle "
            f"(version 3); ingest {result.get('ingest_s', float('nan')):.1f} s, peak RSS "
            f"{result.get('peak_rss_mb', float('nan')):,.0f} MB {result.get('error', '')}"
            + (
                f"; before ({earlier['commit'][:7]}): {earlier.get('ingest_s', float('nan')):.1f} s, "
                f"{earlier.get('peak_rss_mb', float('nan')):,.0f} MB {earlier.get('error', '')}"
                if earlier
                else ""
            ),
            flush=True,
        )
        shutil.rmtree(bundle)
    entry = {"requests": n, "runs": runs, "warehouse_mb": db.stat().st_size / 1e6, "ingest": ingests}
    entry.update(_child("queries", str(db)))
    entry["load_average_1min_after_queries"] = os.getloadavg()[0]
    slow = {k: v["cold_s"] for k, v in entry.get("queries", {}).items() if v["cold_s"] >= 1}
    print(
        f"  {label}: {len(entry.get('queries', {}))} queries, slowest cold "
        f"{max((v['cold_s'] for v in entry.get('queries', {}).values()), default=float('nan')):.2f} s; "
        f"1 s or more: {slow or 'none'}",
        flush=True,
    )
    if validation:
        entry["validation"] = _child("validation", str(db))
        print(f"  {label}: validation {entry['validation']}", flush=True)
    db.unlink()
    return entry


def write_results(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "warehouse_scale.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Warehouse at scale (benchmarks/warehouse_scale.py)",
        "",
        f"Measured {results['measured_at']} on {results['machine']}; synthetic bundles (shaped like a run, not "
        "measurements: every figure here is wattbench's own time or memory). Sizes run: "
        + ", ".join(results["sizes_run"])
        + ". Wall seconds of one timing each (no repeats); the machine is "
        "shared, so the 1-minute load average around each ingest is in warehouse_scale.json (above 2 on 2 cores "
        "means other work competed and the times are upper bounds).",
        "",
        "| requests | runs | bundle (MB) | ingest per run (s) | ingest peak RSS (MB) | before: ingest per run (s) | "
        "before: peak RSS (MB) | 1-min load around each ingest (before; this) | warehouse (MB) | "
        "slowest report query, cold (s) | validation (s) | validation peak RSS (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for label in results["sizes_run"]:
        e = results["sizes"][label]
        ing = e["ingest"]
        secs = [i.get("ingest_s") for i in ing if "ingest_s" in i]
        rss = [i.get("peak_rss_mb") for i in ing if "peak_rss_mb" in i]
        q = e.get("queries", {})
        reports = {k: v for k, v in q.items() if not k.startswith("v_") and not k.startswith("latency_")}
        worst = max(reports.items(), key=lambda kv: kv[1]["cold_s"]) if reports else None
        val = e.get("validation", {})
        lines.append(
            f"| {e['requests']:,} | {e['runs']} | {sum(i['bytes'] for i in ing) / 1e6:,.0f} | "
            f"{', '.join(f'{s:.1f}' for s in secs) or 'failed'} | {max(rss, default=float('nan')):,.0f} | "
            + _before_cells(ing)
            + f" | {e['warehouse_mb']:,.0f} | "
            + (f"{worst[1]['cold_s']:.2f} ({worst[0]})" if worst else "-")
            + " | "
            + (f"{val['validation_s']:.1f}" if "validation_s" in val else val.get("error", "not run"))
            + " | "
            + (f"{val['peak_rss_mb']:,.0f}" if "peak_rss_mb" in val else "-")
            + " |"
        )
    lines += [
        "",
        "Every query (cold, then warm, seconds) on the largest warehouse run:",
        "",
        "| query | cold (s) | warm (s) | rows |",
        "|---|---:|---:|---:|",
    ]
    largest = results["sizes"][results["sizes_run"][-1]]
    for name, v in largest.get("queries", {}).items():
        lines.append(f"| {name} | {v['cold_s']:.3f} | {v['warm_s']:.3f} | {v['rows']:,} |")
    before = [i["before"] for e in results["sizes"].values() for i in e["ingest"] if "before" in i]
    if before:
        lines += [
            "",
            f"Before: every run above was ingested first by the code of commit {before[0]['commit']} (per-token "
            "times stored as DuckDB lists, figures in numpy, requests as JSON), as the version-2 bundle that code "
            "reads, in a fresh process, then right after by this code as a version-3 bundle (requests and GPU samples "
            "as CSV, token times kept in the token store, figures in one compiled pass): the before columns, with the "
            "1-minute load average around each ingest.",
        ]
    growth = _growth(results)
    if growth:
        lines += ["", growth]
    if results.get("version_1"):
        v1 = results["version_1"]
        lines += [
            "",
            f"Old bundles: the {v1['requests']:,}-request run written as a version-1 bundle (every list inline in "
            f"requests.jsonl, {v1['bytes'] / 1e6:,.0f} MB) ingested by this code: "
            + (
                f"{v1['ingest_s']:.1f} s, peak RSS {v1['peak_rss_mb']:,.0f} MB"
                if "ingest_s" in v1
                else v1.get("error", "failed")
            )
            + f" (1-minute load {_loads(v1)}).",
        ]
    (out / "warehouse_scale.md").write_text("\n".join(lines) + "\n")


def _growth(results: dict) -> str | None:
    """How ingest grew from 100k to 1M requests, this code and before (10x the requests: 10x is linear)."""
    sizes = results["sizes"]
    if "100k" not in sizes or "1m" not in sizes:
        return None

    def first(label: str, key: str, side: str | None = None):
        ing = sizes[label]["ingest"][0]
        ing = ing.get(side, {}) if side else ing
        return ing.get(key)

    parts = []
    for side, name in ((None, "this code"), ("before", "before")):
        s0, s1 = first("100k", "ingest_s", side), first("1m", "ingest_s", side)
        r0, r1 = first("100k", "peak_rss_mb", side), first("1m", "peak_rss_mb", side)
        if s0 and s1 and r0 and r1:
            parts.append(f"{name} {s1 / s0:.1f}x the seconds and {r1 / r0:.1f}x the peak RSS")
    return ("Growth from 100,000 to 1,000,000 requests (10x): " + "; ".join(parts) + ".") if parts else None


def _before_cells(ingests: list[dict]) -> str:
    """The before columns of a size's row: another checkout's ingest of the same bundles ('-' where not run)."""
    before = [i["before"] for i in ingests if "before" in i]
    if not before:  # this code's load alone: the times are read against it
        return "- | - | " + "; ".join(f"-; {_loads(i)}" for i in ingests)
    secs = ", ".join(f"{b['ingest_s']:.1f}" if "ingest_s" in b else "failed" for b in before)
    rss = max((b["peak_rss_mb"] for b in before if "peak_rss_mb" in b), default=float("nan"))
    loads = "; ".join(f"{_loads(i['before'])}; {_loads(i)}" for i in ingests if "before" in i)
    return f"{secs} | {rss:,.0f} | {loads}"


def _loads(entry: dict) -> str:
    return "-".join(f"{x:.1f}" for x in entry.get("load_average_1min", [])) or "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes",
        default=",".join(DEFAULT_SIZES),
        help="comma-separated sizes to run: " + ", ".join(SIZES) + f" (default {','.join(DEFAULT_SIZES)}; "
        "10m: ten runs of 1M, about 10 GB of disk and 20-30 min here)",
    )
    ap.add_argument("--no-validation", action="store_true", help="skip the GX suites")
    ap.add_argument(
        "--before",
        metavar="CHECKOUT",
        default="git:" + BEFORE_COMMIT,
        help="also ingest every run with another checkout's code first (a folder, or git:COMMIT to unpack that "
        f"commit of this repository; default git:{BEFORE_COMMIT}, the ingest before the token store; 'none' to "
        "skip), and this code on the smallest size written as a version-1 bundle",
    )
    ap.add_argument("--work", help="folder for bundles and warehouses (default: a temporary folder)")
    ap.add_argument("--out", default=str(RESULTS), help="where warehouse_scale.json/.md go (default results/)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        fn = {"ingest": child_ingest, "queries": child_queries, "validation": child_validation}[args.child[0]]
        print(json.dumps(fn(*args.child[1:])))
        return 0
    labels = chosen_sizes(ap, args.sizes)
    work = work_folder(args.work, "wattbench-scale-")
    results = {
        **measured_on(),
        "shape": {
            "bundle_version": 2,
            "run_requests": RUN_REQUESTS,
            "requests_per_point": REQUESTS_PER_POINT,
            "output_tokens": OUTPUT_TOKENS,
            "gpus": GPUS,
            "sample_hz": SAMPLE_HZ,
        },
        "sizes_run": [],
        "sizes": {},
    }
    try:
        before = _checkout(args.before, work)
        if before:  # old bundles still load: this code on the smallest size written as a version-1 bundle
            bundle = work / "bundle-version-1"
            made = synthesize(bundle, "scale-v1", SIZES[labels[0]], bundle_version=1)
            load_mine = os.getloadavg()[0]
            mine = _child("ingest", str(work / "v1.duckdb"), str(bundle))
            results["version_1"] = {
                "requests": SIZES[labels[0]],
                "bytes": made["bytes"],
                **mine,
                "load_average_1min": [load_mine, os.getloadavg()[0]],
            }
            (work / "v1.duckdb").unlink(missing_ok=True)
            shutil.rmtree(bundle)
        for label in labels:
            results["sizes"][label] = run_size(label, SIZES[label], work, not args.no_validation, before)
            results["sizes_run"].append(label)
            write_results(results, Path(args.out))  # after every size: a later size that fails loses nothing
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
