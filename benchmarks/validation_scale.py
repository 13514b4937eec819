"""The Great Expectations suites on one run of millions of requests: wall time and peak memory.

python -m benchmarks.validation_scale [--sizes 1m,10m] [--before CHECKOUT]

Builds a warehouse holding ONE run of N requests directly in DuckDB SQL (not through a bundle: a bundle of 10M
requests would be 31 GB of JSON lines and its ingest is timed by benchmarks/warehouse_scale.py), shaped as
benchmarks/warehouse_scale.py synthesizes a run: load points of REQUESTS_PER_POINT requests at RATE_RPS, 128
per-token times a request (kept in requests.chunk_ns as ingest keeps them), one request in 1,000 failed, 2
deployments of 8 GPUs sampled at 10 Hz over the whole run, energy windows and /metrics scrapes, and the per-point
figures ingest keeps (point_stats). Then, in a fresh process, every table's suite runs as the blocking checks run it
(resources/validation.validate_run) and the wall seconds and that process's peak RSS (VmHWM) are recorded, per
table and in all, in results/validation_scale.json and results/validation_scale.md. `--before CHECKOUT` also runs
another checkout's suites (e.g. /work/main: frames in pandas, GX's pandas engine) on the same warehouse, for sizes
up to --before-max (the old path holds every row in memory: at 10M it would not fit this machine).
Only sizes that were run are written. The rows are synthetic: every figure here is wattbench's own time or memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.warehouse_scale import BASE_NS, GPUS, OUTPUT_TOKENS, RATE_RPS, REQUESTS_PER_POINT, SAMPLE_HZ

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SIZES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}
DEFAULT_SIZES = ("1m", "10m")
GOAL = {"requests": 10_000_000, "seconds": 60.0, "peak_rss_mb": 2048.0}
POINTS_PER_INSERT = 40  # requests are written 1M at a time: the build stays within its memory limit


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def build(db: Path, n_requests: int, run_id: str = "scale-run", seed: int = 0) -> dict:
    """A warehouse with one run of n_requests requests, written by DuckDB (no Python per row)."""
    from resources.warehouse import connect, refresh_point_stats

    t0 = time.perf_counter()
    points = max(1, -(-n_requests // REQUESTS_PER_POINT))
    per_point = -(-n_requests // points)
    point_s = per_point / RATE_RPS
    ps = f"({point_s!r}::DOUBLE)"  # a literal with decimals is a DECIMAL in DuckDB: products of them overflow
    with connect(db) as con:
        con.execute("SET memory_limit = '4GB'")
        con.execute("SET preserve_insertion_order = false")
        con.execute(
            "INSERT INTO runs (run_id, source, status, plan_name) VALUES (?, 'emulated', 'ingested', 'scale')", [run_id]
        )
        con.execute(
            f"""INSERT INTO deployments BY NAME
            SELECT '{run_id}' AS run_id, 'emulated' AS source, '{run_id}-d' || e AS deployment_id,
                   'llama-3-70b' AS model, 'emulator:vllm-like' AS engine, 'engine' || e AS config_name,
                   'healthy' AS status, {GPUS} AS tp, {GPUS} AS n_gpus, 'H100' AS gpu_name, 30.0 AS startup_s,
                   '0.0-emulated' AS engine_version, TRUE AS version_checked, 60000.0 AS hbm_used_mib,
                   81559.0 AS hbm_total_mib, 800.0 AS idle_power_w_before, 820.0 AS idle_power_w_after
            FROM range(2) t(e)"""
        )
        con.execute(
            f"""CREATE TEMP TABLE pts AS
            SELECT p, '{run_id}-d' || (p % 2) AS deployment_id,
                   '{run_id}-d' || (p % 2) || ':steady:c' || (64 * (1 + p // 6)) || '#' || (1 + (p // 2) % 3)
                       AS load_point_id,
                   {BASE_NS} + p * ({ps} + 5) * 1e9 AS start_ns
            FROM range({points}) t(p)"""
        )
        con.execute(
            f"""INSERT INTO load_runs BY NAME
            SELECT '{run_id}' AS run_id, 'emulated' AS source, deployment_id, load_point_id,
                   'c' || (64 * (1 + p // 6)) AS point_label, 1 + (p // 2) % 3 AS repeat, 'steady' AS workload,
                   'concurrency' AS shape, 'chat' AS api, 64 * (1 + p // 6) AS concurrency, 512 AS input_tokens,
                   {OUTPUT_TOKENS} AS output_tokens, 2.0 AS warmup_s, {ps} AS duration_s,
                   (start_ns + 2e9)::BIGINT AS window_start_ns, (start_ns + {ps} * 1e9)::BIGINT AS window_end_ns,
                   {ps} - 2.0 AS window_s, {float(RATE_RPS)} AS achieved_rate,
                   (64 * (1 + p // 6)) * 0.99 AS achieved_concurrency, {per_point} AS sent, {per_point} AS completed,
                   0 AS failed, (({ps} - 2.0) * {RATE_RPS} * {OUTPUT_TOKENS})::BIGINT AS output_tokens_in_window,
                   ({ps} - 2.0) * 5200.0 * (1 + 0.01 * (p % 3)) AS energy_j,
                   ({ps} - 2.0) * 5200.0 * (1 + 0.01 * (p % 3)) * 0.995 AS energy_trace_j, 'ok' AS status
            FROM pts"""
        )
        # TTFT 40-400 ms (log-uniform), TPOT 18-30 ms per point, per-gap jitter +-40%; 1 in 1,000 failed (HTTP 503)
        for first in range(0, points, POINTS_PER_INSERT):
            con.execute(
                f"""INSERT INTO requests BY NAME
                WITH r AS (
                    SELECT p.load_point_id, p.deployment_id, p.p, i, p.start_ns,
                           (p.start_ns + i * 1e9 / {RATE_RPS})::BIGINT AS sent_ns,
                           (40 * pow(10, hash(p.p, i, {seed}) % 1000 / 1000.0))::DOUBLE AS ttft_ms,
                           18 + (p.p % 7) * 2.0 AS tpot_base_ms,
                           hash(p.p, i, {seed}, 'e') % 1000 = 0 AS failed
                    FROM pts p, range({per_point}) t(i)
                    WHERE p.p >= {first} AND p.p < {first + POINTS_PER_INSERT}
                      AND p.p * {per_point} + i < {n_requests}),
                c AS (
                    SELECT *, sent_ns + (ttft_ms * 1e6)::BIGINT AS first_ns,
                           list_transform(range({OUTPUT_TOKENS}), lambda k: (k * tpot_base_ms * 1e6
                                + ((hash(i, k, p) % 800)::BIGINT - 400) * tpot_base_ms * 1e3 * (k > 0)::INT)::BIGINT)
                               AS offs
                    FROM r)
                SELECT '{run_id}' AS run_id, 'emulated' AS source, deployment_id, load_point_id,
                       i::VARCHAR AS request_id, sent_ns AS scheduled_ns, sent_ns,
                       CASE WHEN failed THEN NULL ELSE first_ns END AS first_token_ns,
                       CASE WHEN failed THEN NULL ELSE first_ns + offs[-1] END AS last_token_ns,
                       CASE WHEN failed THEN NULL ELSE ttft_ms END AS ttft_ms,
                       CASE WHEN failed THEN NULL ELSE ttft_ms + offs[-1] / 1e6 END AS e2e_ms,
                       CASE WHEN failed THEN NULL ELSE offs[-1] / 1e6 / {OUTPUT_TOKENS - 1} END AS tpot_ms,
                       512 AS prompt_tokens, CASE WHEN failed THEN NULL ELSE {OUTPUT_TOKENS} END AS completion_tokens,
                       'usage' AS token_count_source, 512 AS input_tokens_requested, {OUTPUT_TOKENS} AS max_tokens,
                       CASE WHEN failed THEN NULL ELSE 'length' END AS finish_reason,
                       CASE WHEN failed THEN 503 ELSE 200 END AS http_status,
                       CASE WHEN failed THEN 'http_503' END AS error_kind,
                       CASE WHEN failed THEN 'Service Unavailable' END AS error_text,
                       CASE WHEN failed THEN [] ELSE list_transform(offs, lambda o: first_ns + o) END AS chunk_ns,
                       CASE WHEN failed THEN [] ELSE list_transform(offs, lambda o: 1) END AS chunk_tokens,
                       sent_ns >= start_ns + 2000000000 AS in_window
                FROM c"""
            )
        total_s = points * (point_s + 5) + 5
        con.execute(
            f"""INSERT INTO gpu_samples BY NAME
            SELECT '{run_id}' AS run_id, 'emulated' AS source, '{run_id}-d' || (g // {GPUS}) AS deployment_id,
                   'GPU-' || (g // {GPUS}) || '-' || (g % {GPUS}) AS gpu_uuid, g % {GPUS} AS gpu_index,
                   {BASE_NS} + (t * 1e9 / {SAMPLE_HZ})::BIGINT AS t_ns, 600.0 + hash(g, t) % 1000 / 10.0 AS power_w,
                   650.0 AS power_avg_w, 1e6 + t * 65.0 AS energy_mj, 60000.0 AS hbm_used_mib,
                   81559.0 AS hbm_total_mib, (hash(t, g) % 100)::DOUBLE AS util_gpu_pct, 40.0 AS util_mem_pct,
                   1980.0 AS sm_clock_mhz, 2619.0 AS mem_clock_mhz, 60.0 AS temp_c, 700.0 AS power_limit_w,
                   0 AS clock_event_reasons,
                   CASE WHEN hash(t, g) % 50 = 0 THEN 'sw_power_cap' ELSE '' END AS clock_events
            FROM range({2 * GPUS}) a(g), range({int(total_s * SAMPLE_HZ)}) b(t)"""
        )
        con.execute(
            f"""INSERT INTO energy_windows BY NAME
            SELECT '{run_id}' AS run_id, 'emulated' AS source, l.deployment_id, l.load_point_id AS window_name,
                   'GPU-' || right(l.deployment_id, 1) || '-' || g AS gpu_uuid, l.window_start_ns AS start_ns,
                   l.window_end_ns AS end_ns, l.energy_j / {GPUS} AS energy_j
            FROM load_runs l, range({GPUS}) t(g) WHERE l.run_id = '{run_id}'"""
        )
        con.execute(
            f"""INSERT INTO server_metrics BY NAME
            SELECT '{run_id}' AS run_id, 'emulated' AS source, l.deployment_id, l.load_point_id,
                   CASE WHEN k = 0 THEN l.window_start_ns ELSE l.window_end_ns END AS t_ns, m || s AS metric,
                   MAP {{'model_name': 'm'}} AS labels,
                   k * CASE WHEN s = '_sum' THEN 900.0 ELSE 4500.0 END AS value,
                   CASE WHEN k = 0 THEN 'window_start' ELSE 'window_end' END AS scrape
            FROM load_runs l, range(2) a(k),
                 (VALUES ('vllm:time_to_first_token_seconds'), ('vllm:inter_token_latency_seconds'),
                         ('vllm:e2e_request_latency_seconds')) b(m), (VALUES ('_sum'), ('_count')) c(s)
            WHERE l.run_id = '{run_id}'"""
        )
        refresh_point_stats(con, run_id)
        con.execute("CHECKPOINT")
        rows = {
            t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0]
            for t in ("load_runs", "requests", "gpu_samples", "server_metrics")
        }
    return {"build_s": time.perf_counter() - t0, "rows": rows, "warehouse_mb": db.stat().st_size / 1e6}


def child_validate(db: str) -> dict:
    """Every suite on the run, as assets/checks.py runs them (validate_run), in this fresh process."""
    t_import = time.perf_counter()
    from resources.validation import suites, validate_run
    from resources.warehouse import connect

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
    labels = [s.strip().lower() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in labels if s not in SIZES]
    if unknown:
        ap.error(f"unknown size(s) {', '.join(unknown)}; expected some of {', '.join(SIZES)}")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wattbench-gx-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, Python {platform.python_version()}",
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
