"""One synthetic run, defined once, for the benchmarks that need millions of requests shaped like a real run.

A run of N requests: load points of `requests_per_point` requests sent at a steady RATE_RPS by 2 deployments of
GPUS GPUs (alternating point by point; concurrency 64, 128, ... every 6 points; repeats 1-3), each request streaming
OUTPUT_TOKENS tokens in `events_per_request` content events (128: one token an event, as a token-by-token stream;
fewer: the tokens coalesced evenly, as an engine that batches its stream writes), per-event arrival times with jitter
around a per-point TPOT, a TTFT spread over each point, one request in 1,000 failed (HTTP 503), the GPUs sampled at
SAMPLE_HZ over the whole run, an energy window per point and GPU, and the engine's latency histograms scraped at
each window's edges.

Every row is written by DuckDB SQL (no Python per row). `SyntheticRun.stage(con)` puts the run's small tables in
temporary tables of a connection (syn_points, syn_deployments, syn_load_runs); the *_sql methods are SELECTs over
them that give the rows of the warehouse's tables, column for column. Two ways to use them:
- `synthesize(folder, ...)` writes a result bundle, as the agent writes one (benchmarks/warehouse_scale.py times its
  ingest);
- `insert_run(con, run)` writes the run straight into a warehouse, point_stats included (by the real
  wattbench.warehouse.refresh_point_stats), without a bundle (benchmarks/validation_scale.py, report_scale.py).
The rows are data shaped like measurements, not measurements: a benchmark built on them measures wattbench's own
time and memory, never an engine.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REQUESTS_PER_POINT = 25_000  # requests of one load point (one repeat of one point)
OUTPUT_TOKENS = 128  # tokens per request
GPUS = 8  # per deployment; a run has 2 deployments
SAMPLE_HZ = 10
RATE_RPS = 300  # requests sent per second: 1M requests are 55 min of load
WARMUP_S = 2.0
BASE_NS = 864_000_123_456_789  # perf_counter_ns of a host up 10 days: timestamps as long as real ones


# What the scale benchmarks (warehouse_scale, validation_scale, report_scale) share besides the run itself.
SIZES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}


def chosen_sizes(ap, text: str) -> list[str]:
    """--sizes as labels of SIZES, in the order given; an unknown one is the parser's error naming the known ones."""
    labels = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = [s for s in labels if s not in SIZES]
    if unknown:
        ap.error(f"unknown size(s) {', '.join(unknown)}; expected some of {', '.join(SIZES)}")
    return labels


def work_folder(path: str | None, prefix: str) -> Path:
    """--work, or a fresh temporary folder."""
    work = Path(path) if path else Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work


def measured_on() -> dict[str, str]:
    """When and on what a scale benchmark ran (its results' first two fields)."""
    return {
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, Python {platform.python_version()}",
    }


@dataclass(frozen=True)
class SyntheticRun:
    run_id: str
    n_requests: int
    seed: int = 0
    requests_per_point: int = REQUESTS_PER_POINT
    events_per_request: int = OUTPUT_TOKENS  # content events per request; OUTPUT_TOKENS / this tokens each
    source: str = "emulated"

    def __post_init__(self) -> None:
        if self.n_requests < 1 or self.requests_per_point < 1:
            raise ValueError(f"a synthetic run needs requests (got {self.n_requests}, {self.requests_per_point})")
        if not 1 <= self.events_per_request <= OUTPUT_TOKENS or OUTPUT_TOKENS % self.events_per_request:
            raise ValueError(
                f"events_per_request {self.events_per_request}: expected a divisor of {OUTPUT_TOKENS} "
                "(every event carries the same number of tokens)"
            )

    @property
    def points(self) -> int:
        return max(1, -(-self.n_requests // self.requests_per_point))

    @property
    def per_point(self) -> int:
        return -(-self.n_requests // self.points)

    @property
    def point_s(self) -> float:
        return self.per_point / RATE_RPS

    @property
    def total_s(self) -> float:
        """Seconds the GPU trace covers: every point, 5 s apart, and 5 s after."""
        return self.points * (self.point_s + 5) + 5

    def stage(self, con) -> None:
        """The run's points, deployments and load runs as temporary tables of `con` (replaced if there)."""
        rid, ps = self.run_id, f"({self.point_s!r}::DOUBLE)"  # a literal with decimals is a DECIMAL: products overflow
        con.execute(f"""CREATE OR REPLACE TEMP TABLE syn_points AS
            SELECT p, '{rid}-d' || (p % 2) AS deployment_id,
                   '{rid}-d' || (p % 2) || ':steady:c' || (64 * (1 + p // 6)) || '#' || (1 + (p // 2) % 3)
                       AS load_point_id,
                   {BASE_NS} + p * {int((self.point_s + 5) * 1e9)} AS start_ns
            FROM range({self.points}) t(p)""")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE syn_deployments AS
            SELECT '{rid}' AS run_id, '{self.source}' AS source, '{rid}-d' || e AS deployment_id,
                   'llama-3-70b' AS model, 'emulator:vllm-like' AS engine, 'engine' || e AS config_name,
                   'healthy' AS status, {GPUS} AS tp, {GPUS} AS n_gpus, 'H100' AS gpu_name,
                   list_transform(range({GPUS}), lambda g: 'GPU-' || e || '-' || g) AS gpu_uuids,
                   30.0 AS startup_s, '0.0-emulated' AS engine_version, TRUE AS version_checked,
                   60000.0 AS hbm_used_mib, 81559.0 AS hbm_total_mib, 800.0 AS idle_power_w_before,
                   820.0 AS idle_power_w_after, '{{"synthetic": true}}'::JSON AS config
            FROM range(2) t(e)""")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE syn_load_runs AS
            SELECT '{rid}' AS run_id, '{self.source}' AS source, deployment_id, load_point_id,
                   'c' || (64 * (1 + p // 6)) AS point_label, 1 + (p // 2) % 3 AS repeat, 'steady' AS workload,
                   'concurrency' AS shape, 'chat' AS api, 64 * (1 + p // 6) AS concurrency, 512 AS input_tokens,
                   {OUTPUT_TOKENS} AS output_tokens, {WARMUP_S} AS warmup_s, {ps} AS duration_s,
                   start_ns + {int(WARMUP_S * 1e9)} AS window_start_ns,
                   start_ns + {int(self.point_s * 1e9)} AS window_end_ns,
                   {ps} - {WARMUP_S} AS window_s, {float(RATE_RPS)} AS achieved_rate,
                   (64 * (1 + p // 6)) * 0.99 AS achieved_concurrency, {self.per_point} AS sent,
                   {self.per_point} AS completed, 0 AS failed,
                   (({ps} - {WARMUP_S}) * {RATE_RPS} * {OUTPUT_TOKENS})::BIGINT AS output_tokens_in_window,
                   ({ps} - {WARMUP_S}) * 5200.0 * (1 + 0.01 * (p % 3)) AS energy_j,
                   ({ps} - {WARMUP_S}) * 5200.0 * (1 + 0.01 * (p % 3)) * 0.995 AS energy_trace_j, 'ok' AS status,
                   '{{"synthetic": true}}'::JSON AS summary
            FROM syn_points""")

    def requests_sql(self, first_point: int = 0, end_point: int | None = None, ordered: bool = False) -> str:
        """The requests of points first_point <= p < end_point (all by default), the columns of table requests.
        TTFT 40-400 ms (log-uniform), TPOT 18-30 ms per point, per-gap jitter +-40% (never negative); 1 in 1,000
        failed."""
        end = self.points if end_point is None else end_point
        e, tpe = self.events_per_request, OUTPUT_TOKENS // self.events_per_request
        return f"""
        WITH r AS (
            SELECT p.load_point_id, p.deployment_id, p.p, i, p.start_ns,
                   p.start_ns + (i * 1e9 / {RATE_RPS})::BIGINT AS sent_ns,
                   (40 * pow(10, hash(p.p, i, {self.seed}) % 1000 / 1000.0))::DOUBLE AS ttft_ms,
                   18 + (p.p % 7) * 2.0 AS tpot_base_ms,
                   hash(p.p, i, {self.seed}, 'e') % 1000 = 0 AS failed
            FROM syn_points p, range({self.per_point}) t(i)
            WHERE p.p >= {first_point} AND p.p < {end}
              AND p.p * {self.per_point} + i < {self.n_requests}),
        c AS (
            SELECT *, sent_ns + (ttft_ms * 1e6)::BIGINT AS first_ns,
                   list_transform(range({e}), lambda k: (k * {tpe} * tpot_base_ms * 1e6
                        + ((hash(i, k, p) % 800)::BIGINT - 400) * {tpe} * tpot_base_ms * 1e3 * (k > 0)::INT)::BIGINT)
                       AS offs
            FROM r)
        SELECT '{self.run_id}' AS run_id, '{self.source}' AS source, deployment_id, load_point_id,
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
               CASE WHEN failed THEN [] ELSE list_transform(offs, lambda o: {tpe}) END AS chunk_tokens,
               sent_ns >= start_ns + {int(WARMUP_S * 1e9)} AS in_window
        FROM c""" + (" ORDER BY p, i" if ordered else "")

    def gpu_samples_sql(self) -> str:
        return f"""
        SELECT '{self.run_id}' AS run_id, '{self.source}' AS source,
               '{self.run_id}-d' || (g // {GPUS}) AS deployment_id,
               'GPU-' || (g // {GPUS}) || '-' || (g % {GPUS}) AS gpu_uuid, g % {GPUS} AS gpu_index,
               {BASE_NS} + (t * 1e9 / {SAMPLE_HZ})::BIGINT AS t_ns, 600.0 + hash(g, t) % 1000 / 10.0 AS power_w,
               650.0 AS power_avg_w, 1e6 + t * 65.0 AS energy_mj, 60000.0 AS hbm_used_mib, 81559.0 AS hbm_total_mib,
               (hash(t, g) % 100)::DOUBLE AS util_gpu_pct, 40.0 AS util_mem_pct, 1980.0 AS sm_clock_mhz,
               2619.0 AS mem_clock_mhz, 60.0 AS temp_c, 700.0 AS power_limit_w, 0 AS clock_event_reasons,
               CASE WHEN hash(t, g) % 50 = 0 THEN 'sw_power_cap' ELSE '' END AS clock_events
        FROM range({2 * GPUS}) a(g), range({int(self.total_s * SAMPLE_HZ)}) b(t)"""

    def energy_windows_sql(self) -> str:
        return f"""
        SELECT run_id, source, deployment_id, load_point_id AS window_name,
               'GPU-' || right(deployment_id, 1) || '-' || g AS gpu_uuid, window_start_ns AS start_ns,
               window_end_ns AS end_ns, energy_j / {GPUS} AS energy_j
        FROM syn_load_runs, range({GPUS}) t(g)"""

    def server_metrics_sql(self) -> str:
        """vLLM's latency histograms (_sum and _count) at each window's edges."""
        return """
        SELECT run_id, source, deployment_id, load_point_id,
               CASE WHEN k = 0 THEN window_start_ns ELSE window_end_ns END AS t_ns, m || s AS metric,
               MAP {'model_name': 'm'} AS labels, k * CASE WHEN s = '_sum' THEN 900.0 ELSE 4500.0 END AS value,
               CASE WHEN k = 0 THEN 'window_start' ELSE 'window_end' END AS scrape
        FROM syn_load_runs, range(2) a(k),
             (VALUES ('vllm:time_to_first_token_seconds'), ('vllm:inter_token_latency_seconds'),
                     ('vllm:e2e_request_latency_seconds')) b(m), (VALUES ('_sum'), ('_count')) c(s)
        ORDER BY load_point_id, k, m, s"""


# ------------------------------------------------------------------------------------------------ into a warehouse
POINTS_PER_INSERT = 40  # requests go in 40 points (1M at the default shape) at a time: the build stays in memory


def insert_run(con, run: SyntheticRun, runs_row: dict | None = None) -> dict[str, int]:
    """Write the run into the warehouse of `con` (its schema applied) as ingest leaves one: its rows in every table,
    then point_stats (and the kept figures made from them) by wattbench.warehouse.refresh_point_stats, as ingest
    computes them. `runs_row`: columns of its row in table runs (default: status 'ingested', plan 'scale', nothing
    else). Returns the rows per table."""
    from wattbench.ingest_checks import LABELS_KEY
    from wattbench.warehouse import refresh_point_stats

    run.stage(con)
    row = {"run_id": run.run_id, "source": run.source, "status": "ingested", "plan_name": "scale", **(runs_row or {})}
    con.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    con.execute("INSERT INTO deployments BY NAME SELECT * FROM syn_deployments")
    con.execute("INSERT INTO load_runs BY NAME SELECT * FROM syn_load_runs")
    for first in range(0, run.points, POINTS_PER_INSERT):
        con.execute("INSERT INTO requests BY NAME " + run.requests_sql(first, first + POINTS_PER_INSERT))
    con.execute("INSERT INTO gpu_samples BY NAME " + run.gpu_samples_sql())
    con.execute("INSERT INTO energy_windows BY NAME " + run.energy_windows_sql())
    con.execute(  # with its key, as ingest writes it (wattbench/ingest_checks.LABELS_KEY)
        f"INSERT INTO server_metrics BY NAME SELECT *, {LABELS_KEY.format(col='labels')} AS labels_key "
        f"FROM ({run.server_metrics_sql()})"
    )
    refresh_point_stats(con, run.run_id)
    return {
        t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run.run_id]).fetchone()[0]
        for t in ("load_runs", "requests", "gpu_samples", "server_metrics", "point_stats", "point_figures")
    }


# ------------------------------------------------------------------------------------------------ as a bundle
def synthesize(
    folder: Path,
    run_id: str,
    n_requests: int,
    seed: int = 0,
    requests_per_point: int = REQUESTS_PER_POINT,
    bundle_version: int = 3,
    events_per_request: int = OUTPUT_TOKENS,
) -> dict[str, int]:
    """Write one bundle of the run (DuckDB writes the JSON lines and CSV: fast, and no Python per row). Bundle version
    3 (what the agent writes): per-token times in the chunk files (wattbench_agent.bundle.CHUNK_FILES), the requests'
    other fields in requests.csv; version 2: those in requests.jsonl; version 1: every list inline in requests.jsonl,
    as agents before version 2 wrote them."""
    import duckdb

    from wattbench_agent.bundle import CSV_TABLES, BundleWriter

    run = SyntheticRun(run_id, n_requests, seed, requests_per_point, events_per_request)
    folder.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 2}")
    con.execute("SET enable_progress_bar = false")
    run.stage(con)

    def rows(table: str) -> list[dict]:
        return [json.loads(r[0]) for r in con.execute(f"SELECT to_json(t) FROM {table} t").fetchall()]

    with BundleWriter(folder, run_id=run_id, source=run.source) as w:
        w.write("deployments", rows("syn_deployments"))
        w.write("load_runs", rows("syn_load_runs"))
    if bundle_version == 1:
        con.execute(f"COPY ({run.requests_sql(ordered=True)}) TO '{folder / 'requests.jsonl'}' (FORMAT json)")
    else:
        _write_chunked_requests(con, folder, run, csv=bundle_version >= 3)
    written = {"requests": con.execute(f"SELECT count(*) FROM ({run.requests_sql()})").fetchone()[0]}
    for table, sql in (
        ("gpu_samples", run.gpu_samples_sql()),
        ("energy_windows", run.energy_windows_sql()),
        ("server_metrics", run.server_metrics_sql()),
    ):
        written[table] = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
        if bundle_version >= 3 and table in CSV_TABLES:  # as the agent writes it: its columns, strings quoted
            have = {d[0] for d in con.execute(f"DESCRIBE {sql}").fetchall()}
            cols = ", ".join(c if c in have else f"NULL AS {c}" for c, _ in CSV_TABLES[table])
            strings = ", ".join(c for c, kind in CSV_TABLES[table] if kind == "str")
            con.execute(
                f"COPY (SELECT {cols} FROM ({sql})) TO '{folder / (table + '.csv')}' "
                f"(FORMAT csv, HEADER true, FORCE_QUOTE ({strings}))"
            )
            continue
        con.execute(f"COPY ({sql}) TO '{folder / (table + '.jsonl')}' (FORMAT json)")
    con.close()
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["complete"] = True
    manifest["tables"].update(written)  # the rows of each table, as the agent counts them (ingest holds files to it)
    manifest["bundle_version"] = bundle_version  # a version-1 bundle says so: older code reads only that
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return {
        "requests": n_requests,
        "load_points": run.points,
        "bytes": sum(f.stat().st_size for f in folder.iterdir() if f.is_file()),
    }


def _write_chunked_requests(con, folder: Path, run: SyntheticRun, csv: bool = True) -> None:
    """requests.csv of a version-3 bundle (requests.jsonl of a version-2 one, `csv` False) and its chunk files, a load
    point at a time (as the agent writes them)."""
    import numpy as np
    import pyarrow as pa

    from wattbench_agent.bundle import CHUNK_FILES, CSV_TABLES

    at = 0
    part = folder / ("requests.part.csv" if csv else "requests.part.jsonl")
    names = [c for c, _ in CSV_TABLES["requests"]]
    strings = ", ".join(c for c, kind in CSV_TABLES["requests"] if kind == "str")
    with (
        open(folder / ("requests.csv" if csv else "requests.jsonl"), "wb") as rows_out,
        open(folder / CHUNK_FILES["chunk_ns"][0], "wb") as ns_out,
        open(folder / CHUNK_FILES["chunk_tokens"][0], "wb") as tok_out,
    ):
        for p in range(run.points):
            tbl = con.sql(run.requests_sql(p, p + 1, ordered=True)).to_arrow_table()
            ns = tbl.column("chunk_ns").combine_chunks()
            offsets = np.asarray(ns.offsets, dtype=np.int64)
            np.asarray(ns.flatten(), dtype="<i8").tofile(ns_out)
            np.asarray(tbl.column("chunk_tokens").combine_chunks().flatten(), dtype="<i4").tofile(tok_out)
            refs = pa.array(
                [[at + int(a), int(b - a)] for a, b in zip(offsets[:-1], offsets[1:])], pa.list_(pa.int64())
            )
            scalars = tbl.drop_columns(["chunk_ns", "chunk_tokens"])
            if csv:  # the agent's columns, in its order; strings quoted (an empty one is "", null an empty field)
                n = offsets[1:] - offsets[:-1]
                scalars = scalars.append_column("events_at", pa.array(at + offsets[:-1])).append_column(  # noqa: F841
                    "events_n", pa.array(n)
                )
                cols = ", ".join(c if c in scalars.column_names else f"NULL AS {c}" for c in names)
                header = "true" if p == 0 else "false"
                con.execute(
                    f"COPY (SELECT {cols} FROM scalars) TO '{part}' "
                    f"(FORMAT csv, HEADER {header}, FORCE_QUOTE ({strings}))"
                )
            else:
                scalars = scalars.append_column("chunks", refs)  # noqa: F841
                con.execute(f"COPY (SELECT * FROM scalars) TO '{part}' (FORMAT json)")
            at += int(offsets[-1])
            rows_out.write(part.read_bytes())
    part.unlink()
