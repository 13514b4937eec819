"""The figures the warehouse keeps per load point, recomputed from the rows at ingest and whenever a run's own
fields change: point_stats (one pass over a point's token times), the kept views (each *_live view of sql/views.sql
stored as a table), and the load shapes' traits in load_runs. Every function works inside the caller's transaction
unless it says otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wattbench.queries import WarehouseError, duckdb, table_columns

if TYPE_CHECKING:  # it imports numpy: loaded where a bundle is read
    from wattbench.chunk_files import ChunkFiles


def fill_shape_traits(con: duckdb.DuckDBPyConnection, run_id: str | None) -> None:
    """load_runs.closed_loop and .bursty of a run's rows (every run's: None) from the shape registry
    (wattbench_agent.loadgen.shapes), so SQL asks a point's traits, not its shape's name. A shape this wattbench
    does not know keeps what the row had (NULL from a bundle: bundles do not carry traits, docs/CONTRACTS.md)."""
    from wattbench_agent.loadgen import shapes

    traits = [(name, shape.closed_loop, shape.bursty) for name, shape in shapes.SHAPES.items()]
    con.execute(
        "UPDATE load_runs SET closed_loop = t.closed_loop, bursty = t.bursty "
        "FROM (SELECT unnest(?, recursive := true)) t WHERE load_runs.shape = t.shape AND (? IS NULL OR run_id = ?)",
        [[{"shape": n, "closed_loop": c, "bursty": b} for n, c, b in traits], run_id, run_id],
    )


# The per-request parts of point_stats (no token arrays read): v_request_stats_live, v_request_slo_counts and the
# client's TTFT/E2E of v_client_stats_live.
_POINT_STATS_PARTS = {
    "q": "SELECT * FROM v_request_stats_live WHERE {where}",
    "c": "SELECT * FROM v_request_slo_counts WHERE {where}",
    "r": """SELECT q.run_id, q.deployment_id, q.load_point_id,
           avg(q.ttft_ms) FILTER (WHERE q.first_token_ns BETWEEN l.window_start_ns AND l.window_end_ns) AS ttft_ms,
           count(*) FILTER (WHERE q.first_token_ns BETWEEN l.window_start_ns AND l.window_end_ns) AS ttft_n,
           avg(q.e2e_ms) FILTER (WHERE q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns)
                                       AND coalesce(l.window_end_ns, q.last_token_ns)) AS e2e_ms,
           count(*) FILTER (WHERE q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns)
                                  AND coalesce(l.window_end_ns, q.last_token_ns)) AS e2e_n
    FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE q.error_kind IS NULL AND q.{where}
    GROUP BY ALL""",
}
# Every token event read once for v_itl_stats_live, v_window_steadiness_live and the client's ITL of
# v_client_stats_live (their definitions in sql/views.sql; tests/test_point_stats.py checks they agree): the events
# unnested from the requests' lists (request_ns: stored in the row, or read from the token store). A bundle whose
# requests' events are all in its chunk files has them from the compiled pass instead (resources/token_pass.py, the
# same definitions: tests/test_point_stats.py).
_TOKEN_EVENTS = """
        SELECT q.run_id, q.deployment_id, q.load_point_id, q.in_window, l.window_start_ns AS ws,
               l.window_end_ns AS we, l.run_id IS NOT NULL AS has_load_run,
               unnest(q.times) AS t,
               unnest(request_tokens(q.chunk_tokens, q.chunk_tokens_each, q.counts_file, q.events_at, q.events_n,
                                     q.times)) AS n,
               unnest(CASE WHEN len(q.times) = 0 THEN []::BIGINT[]  -- the previous event of an exact one
                           ELSE list_transform(range(1, len(q.times) + 1), lambda j: CASE WHEN j > 1
                                AND j <= coalesce(q.chunks_exact, len(q.times)) THEN q.times[j - 1] END) END)
                 AS prev
        FROM (SELECT *, request_ns(chunk_ns, events_file, events_at, events_n) AS times FROM requests
              WHERE error_kind IS NULL AND {where}) q
        LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)"""
_TOKEN_FIGURES = """
    SELECT run_id, deployment_id, load_point_id,
           quantile_cont((t - prev) / 1e6, [0.50, 0.90, 0.95, 0.99, 0.999])
               FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_q,
           avg((t - prev) / 1e6) FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_mean_ms,
           stddev_pop((t - prev) / 1e6) FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_stdev_ms,
           count(*) FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_samples,
           count(*) FILTER (WHERE has_load_run AND we > ws) AS steady_events,
           sum(n) FILTER (WHERE we > ws AND t >= ws AND t < (ws + we) / 2) AS first_half_tokens,
           sum(n) FILTER (WHERE we > ws AND t >= (ws + we) / 2 AND t <= we) AS second_half_tokens,
           avg((t - prev) / 1e6) FILTER (WHERE has_load_run AND prev IS NOT NULL AND t BETWEEN ws AND we)
               AS client_itl_ms,
           count(*) FILTER (WHERE has_load_run AND prev IS NOT NULL AND t BETWEEN ws AND we) AS client_itl_n
    FROM ev GROUP BY ALL"""
_POINT_STATS_PARTS["t"] = "WITH ev AS (" + _TOKEN_EVENTS + ")" + _TOKEN_FIGURES
_ITL_LEVELS = (0.50, 0.90, 0.95, 0.99, 0.999)


_POINT_STATS = """
WITH keys AS (SELECT run_id, deployment_id, load_point_id FROM _ps_q
              UNION SELECT run_id, deployment_id, load_point_id FROM _ps_t
                    WHERE itl_samples > 0 OR steady_events > 0 OR client_itl_n > 0
              UNION SELECT run_id, deployment_id, load_point_id FROM _ps_r)
SELECT k.run_id, coalesce(lr.source, r.source, 'unknown') AS source, k.deployment_id, k.load_point_id,
       q.run_id IS NOT NULL AS has_requests, q.* EXCLUDE (run_id, deployment_id, load_point_id),
       r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms, c.meeting_slo_completed_in_window, c.meeting_slo_in_window,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[1] END AS itl_p50_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[2] END AS itl_p90_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[3] END AS itl_p95_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[4] END AS itl_p99_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[5] END AS itl_p999_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_mean_ms END AS itl_mean_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_stdev_ms END AS itl_stdev_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_samples END AS itl_samples,
       coalesce(t.steady_events > 0, false) AS has_steadiness,
       CASE WHEN t.steady_events > 0 THEN t.first_half_tokens END AS first_half_tokens,
       CASE WHEN t.steady_events > 0 THEN t.second_half_tokens END AS second_half_tokens,
       CASE WHEN t.steady_events > 0 THEN abs(t.second_half_tokens - t.first_half_tokens)
            / nullif((t.second_half_tokens + t.first_half_tokens) / 2, 0) END AS window_drift,
       x.run_id IS NOT NULL AS has_client, x.ttft_ms AS client_ttft_ms, x.ttft_n AS client_ttft_n,
       x.e2e_ms AS client_e2e_ms, x.e2e_n AS client_e2e_n,
       CASE WHEN x.run_id IS NOT NULL AND t.client_itl_n > 0 THEN t.client_itl_ms END AS client_itl_ms,
       CASE WHEN x.run_id IS NOT NULL AND t.client_itl_n > 0 THEN t.client_itl_n END AS client_itl_n
FROM keys k
LEFT JOIN _ps_q q USING (run_id, deployment_id, load_point_id)
LEFT JOIN _ps_c c USING (run_id, deployment_id, load_point_id)
LEFT JOIN _ps_t t USING (run_id, deployment_id, load_point_id)
LEFT JOIN _ps_r x USING (run_id, deployment_id, load_point_id)
LEFT JOIN runs r USING (run_id)
LEFT JOIN load_runs lr USING (run_id, deployment_id, load_point_id)
"""


def refresh_point_stats(con: duckdb.DuckDBPyConnection, run_id: str | None, events: ChunkFiles | None = None) -> int:
    """Recompute the kept per-load-point figures (point_stats) of one run (every run: None) from the requests, as
    the *_live definitions of sql/views.sql compute them, every token event read once; inside the caller's
    transaction. `events`: the run's token events come from the chunk files being ingested. Returns the rows
    written."""
    where, params = ("run_id = $run_id", {"run_id": run_id}) if run_id is not None else ("run_id IS NOT NULL", {})
    for name, sql in _POINT_STATS_PARTS.items():
        if name != "t":
            con.execute(f"CREATE OR REPLACE TEMP TABLE _ps_{name} AS " + sql.format(where=where), params)
    # token events load point by load point: the exact ITL percentiles hold a point's gaps in memory, never a run's
    points = con.execute(
        f"SELECT DISTINCT run_id, load_point_id FROM requests WHERE {where} ORDER BY ALL", params
    ).fetchall()
    one = _POINT_STATS_PARTS["t"].format(where="run_id = $run_id AND load_point_id = $lp")
    con.execute("CREATE OR REPLACE TEMP TABLE _ps_t AS " + one + " LIMIT 0", {"run_id": "", "lp": ""})
    if events is not None and run_id is not None:
        from wattbench.chunk_files import STAGING

        figures = []
        for dep, lp in events.points():
            fig = events.point_figures(dep, lp)
            if fig is not None:
                figures.append({"run_id": run_id, "deployment_id": dep, "load_point_id": lp, **fig})
        if figures:  # a row a load point (pyarrow.Table.from_pylist would import pandas for them)
            cols = list(figures[0])
            con.executemany(
                f"INSERT INTO _ps_t ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                [[f.get(c) for c in cols] for f in figures],
            )
        # the run's other deployments (loaded from another bundle) from their stored lists
        points = con.execute(
            f"SELECT DISTINCT run_id, load_point_id FROM requests WHERE {where} AND deployment_id NOT IN "
            f"(SELECT deployment_id FROM {STAGING}) ORDER BY ALL",
            params,
        ).fetchall()
    for rid, lp in points:
        con.execute("INSERT INTO _ps_t " + one, {"run_id": rid, "lp": lp})
    try:
        con.execute(f"DELETE FROM point_stats WHERE {where}", params)
        con.execute("INSERT INTO point_stats BY NAME " + _POINT_STATS)
    finally:
        for name in _POINT_STATS_PARTS:
            con.execute(f"DROP TABLE IF EXISTS _ps_{name}")
    refresh_kept_views(con, run_id)
    return con.execute(f"SELECT count(*) FROM point_stats WHERE {where}", params).fetchone()[0]


# Tables that keep a view's rows (its definition: the *_live view of sql/views.sql) and are refreshed with point_stats,
# in this order: load_points_core reads the others (and point_stats), point_figures reads load_points_core.
KEPT_VIEWS = {
    "window_gpu_stats": "v_window_gpu_live",
    "imported_request_stats": "v_imported_request_stats_live",
    "imported_itl_stats": "v_imported_itl_stats_live",
    "request_tallies": "v_request_tallies_live",
    "load_points_core": "v_load_points_core_live",
    "point_figures": "v_point_figures_live",
    "slo_capacity": "v_slo_capacity_live",
}
# The kept tables whose live view reads the run's own row (runs: SLO, prices, start time), refreshed by set_run_fields,
# and slo_capacity, which reads point_figures (its cost): a run without a capacity search has no row of it.
RUN_FIELD_TABLES = ("load_points_core", "point_figures")
AFTER_RUN_FIELDS = (*RUN_FIELD_TABLES, "slo_capacity")
# Live views that carry their load point's source themselves
_OWN_SOURCE = {"v_load_points_core_live", "v_point_figures_live", "v_slo_capacity_live"}


def refresh_kept_views(
    con: duckdb.DuckDBPyConnection, run_id: str | None, tables: tuple[str, ...] | None = None
) -> int:
    """Recompute the tables of KEPT_VIEWS (or those named in `tables`) for one run (every run: None) from their
    *_live views, inside the caller's transaction; each row with its load point's source. Returns the rows written."""
    where, params = ("run_id = $run_id", {"run_id": run_id}) if run_id is not None else ("run_id IS NOT NULL", {})
    written = 0
    for table, live in KEPT_VIEWS.items():
        if tables is not None and table not in tables:
            continue
        con.execute(f"DELETE FROM {table} WHERE {where}", params)
        if live in _OWN_SOURCE:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {live} WHERE {where}", params)
        else:
            con.execute(
                f"INSERT INTO {table} BY NAME SELECT v.*, coalesce(l.source, 'unknown') AS source "
                f"FROM {live} v LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id) WHERE {where}",
                params,
            )
        written += con.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0]
    return written


def set_run_fields(con: duckdb.DuckDBPyConnection, run_id: str, fields: dict[str, Any]) -> None:
    """Set a run's own fields (its row in `runs`, made if there is none: plan name and file, prices, SLO, start time,
    status, ...) and refresh the kept figures that read them (RUN_FIELD_TABLES), in one transaction. Every place that
    sets them calls this (a benchmark opened, `wattbench ingest --plan`, `wattbench predict`): a plain UPDATE would
    leave load_points_core with the cost of the old prices and the goodput of the old SLO."""
    cols = table_columns(con, "runs")
    unknown = set(fields) - set(cols)
    if unknown:
        raise WarehouseError(f"table runs: unknown column(s) {', '.join(sorted(unknown))}")
    names = [c for c in fields if c != "run_id"]
    con.execute("BEGIN TRANSACTION")
    try:
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            if names:
                sets = ", ".join(f"{c} = ?" for c in names)
                con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*(fields[c] for c in names), run_id])
        else:
            con.execute(
                f"INSERT INTO runs (run_id{''.join(', ' + c for c in names)}) VALUES (?{', ?' * len(names)})",
                [run_id, *(fields[c] for c in names)],
            )
        refresh_kept_views(con, run_id, AFTER_RUN_FIELDS)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
