"""The views written for speed at scale (sql/views.sql) give exactly what their plain definitions give:
v_window_gpu_live (samples meet windows through time buckets) against the plain BETWEEN join, the imported-run views
(v_imported_*_live: their requests looked up among imported runs only) against the plain NOT EXISTS, and v_load_points
against v_load_points_core joined with the trace (the kept copies of the *_live views: tests/test_point_stats.py).
Real DuckDB warehouses: synthetic runs (benchmarks/synthetic.py) plus hand-made edge cases."""

from __future__ import annotations

import math

import pytest

from benchmarks.synthetic import SyntheticRun, insert_run
from wattbench.warehouse import connect, refresh_point_stats

KEY = "run_id, deployment_id, load_point_id"
PLAIN_WINDOW_GPU = f"""
SELECT l.run_id, l.deployment_id, l.load_point_id,
       avg(s.power_w) AS trace_mean_w_per_gpu, max(s.power_w) AS trace_peak_w_per_gpu,
       max(s.hbm_used_mib) AS peak_hbm_mib_per_gpu,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL
                WHEN s.clock_events LIKE '%power%' OR s.clock_events LIKE '%thermal%' THEN 1.0 ELSE 0.0 END)
           AS capped_share,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL WHEN s.clock_events LIKE '%power%' THEN 1.0 ELSE 0.0 END)
           AS power_capped_share,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL WHEN s.clock_events LIKE '%thermal%' THEN 1.0 ELSE 0.0 END)
           AS thermal_capped_share,
       avg(s.sm_clock_mhz) AS mean_sm_clock_mhz, avg(s.mem_clock_mhz) AS mean_mem_clock_mhz,
       max(s.temp_c) AS max_temp_c, max(s.hbm_temp_c) AS max_hbm_temp_c,
       avg(CASE WHEN s.clock_events IS NULL THEN NULL
                WHEN s.clock_events LIKE '%power%' OR s.clock_events LIKE '%thermal%'
                  OR s.clock_events LIKE '%hw_slowdown%' THEN 1.0 ELSE 0.0 END) AS throttled_share,
       count(*) AS samples
FROM load_runs l JOIN gpu_samples s
  ON s.run_id = l.run_id AND s.deployment_id = l.deployment_id AND s.t_ns BETWEEN l.window_start_ns AND l.window_end_ns
GROUP BY ALL ORDER BY {KEY}"""
PLAIN_IMPORTED_REQUESTS = f"""
SELECT {KEY} FROM load_runs l WHERE l.source LIKE 'imported:%'
  AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.run_id = l.run_id AND q.load_point_id = l.load_point_id)
ORDER BY {KEY}"""
PLAIN_IMPORTED_ITL = f"""
SELECT {KEY} FROM load_runs l WHERE l.source LIKE 'imported:%' AND (l.summary->'$.itl_ms') IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.run_id = l.run_id AND q.load_point_id = l.load_point_id
                  AND len(q.chunk_ns) > 1)
ORDER BY {KEY}"""


def _same_rows(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            if isinstance(u, float) and isinstance(v, float):
                assert math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-9), (x, y)
            else:
                assert u == v, (x, y)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    db = tmp_path_factory.mktemp("rewrites") / "w.duckdb"
    with connect(db) as con:
        for k in range(2):
            insert_run(con, SyntheticRun(f"syn-{k}", 6_000, seed=k, requests_per_point=1_500, events_per_request=8))
        # edge cases, one deployment: overlapping windows, one ten times longer than the rest, a window whose end is
        # before its start, one without bounds, samples exactly on window edges, and a run with no samples at all
        con.execute("INSERT INTO runs (run_id, source, status) VALUES ('edge', 'measured', 'complete')")
        con.execute(
            """INSERT INTO deployments (run_id, source, deployment_id, model, engine, config_name, status, tp, n_gpus)
            VALUES ('edge', 'measured', 'e', 'm', 'vllm', 'e', 'healthy', 1, 1)"""
        )
        s = 1_000_000_000
        windows = [
            ("e:a", 10 * s, 20 * s),
            ("e:b", 15 * s, 25 * s),  # overlaps a
            ("e:long", 0, 200 * s),  # holds every other window
            ("e:inverted", 50 * s, 40 * s),
            ("e:nobounds", None, None),
            ("e:edge", 30 * s, 30 * s),  # one instant: only a sample exactly at 30 s
            ("e:empty", 300 * s, 310 * s),  # no sample inside
        ]
        for lp, ws, we in windows:
            con.execute(
                """INSERT INTO load_runs (run_id, source, deployment_id, load_point_id, workload, shape,
                       window_start_ns, window_end_ns, window_s, status)
                VALUES ('edge', 'measured', 'e', ?, 'steady', 'concurrency', ?, ?, 10.0, 'ok')""",
                [lp, ws, we],
            )
        con.execute(
            f"""INSERT INTO gpu_samples (run_id, source, deployment_id, gpu_uuid, t_ns, power_w, hbm_used_mib,
                   sm_clock_mhz, clock_events)
            SELECT 'edge', 'measured', 'e', 'GPU-' || (t % 2), t * {s // 2}, 300 + t, 1000 + t, 1500,
                   CASE t % 3 WHEN 0 THEN NULL WHEN 1 THEN 'sw_power_cap' ELSE 'hw_thermal_slowdown' END
            FROM range(0, 260) r(t)"""
        )
        # imported runs: a point with its requests (figures from them), a point without (figures from the tool's
        # statistics), a point whose requests carry one event each (its ITL from the tool's statistics)
        con.execute("INSERT INTO runs (run_id, source, status) VALUES ('imp', 'imported:vllm-bench', 'complete')")
        con.execute(
            """INSERT INTO deployments (run_id, source, deployment_id, model, engine, config_name, status)
            VALUES ('imp', 'imported:vllm-bench', 'i', 'm', 'vllm', 'i', 'healthy')"""
        )
        for lp in ("i:with", "i:without", "i:one-event"):
            con.execute(
                """INSERT INTO load_runs (run_id, source, deployment_id, load_point_id, workload, shape, window_s,
                       sent, completed, failed, status, summary)
                VALUES ('imp', 'imported:vllm-bench', 'i', ?, 'steady', 'poisson', 60.0, 10, 10, 0, 'ok',
                        '{"ttft_ms": {"p50": 40.0}, "itl_ms": {"p50": 9.0}}')""",
                [lp],
            )
        for lp, chunks in (("i:with", [1, 2, 3]), ("i:one-event", [1])):
            con.execute(
                """INSERT INTO requests (run_id, source, deployment_id, load_point_id, request_id, ttft_ms,
                       chunk_ns, chunk_tokens, in_window)
                VALUES ('imp', 'imported:vllm-bench', 'i', ?, 'r0', 40.0, ?, ?, true)""",
                [lp, chunks, [1] * len(chunks)],
            )
        for run_id in ("edge", "imp"):  # the kept figures of the hand-made runs, as ingest and import keep them
            refresh_point_stats(con, run_id)
    return db


def test_window_gpu_equals_the_plain_join(warehouse):
    with connect(warehouse, read_only=True) as con:
        plain = con.execute(PLAIN_WINDOW_GPU).fetchall()
        view = con.execute(f"SELECT * FROM v_window_gpu_live ORDER BY {KEY}").fetchall()
        edge = {r[2]: r[-1] for r in view if r[0] == "edge"}
        one_run = con.execute(f"SELECT * FROM v_window_gpu_live WHERE run_id = 'syn-1' ORDER BY {KEY}").fetchall()
    _same_rows(view, plain)
    assert {r[0] for r in view} == {"syn-0", "syn-1", "edge"}
    # the edge cases did happen: overlapping windows share samples, the long one holds them all, an instant holds
    # the one sample exactly on it, and no row for a window that holds none, is inverted or has no bounds
    assert edge == {"e:a": 21, "e:b": 21, "e:long": 260, "e:edge": 1}
    _same_rows(one_run, [r for r in plain if r[0] == "syn-1"])


def test_imported_views_equal_the_plain_not_exists(warehouse):
    with connect(warehouse, read_only=True) as con:
        for view, plain, expected in (
            ("v_imported_request_stats_live", PLAIN_IMPORTED_REQUESTS, ["i:without"]),
            ("v_imported_itl_stats_live", PLAIN_IMPORTED_ITL, ["i:one-event", "i:without"]),
        ):
            got = con.execute(f"SELECT {KEY} FROM {view} ORDER BY {KEY}").fetchall()
            assert got == con.execute(plain).fetchall()
            assert [r[2] for r in got] == expected


def test_load_points_is_the_core_with_the_trace(warehouse):
    with connect(warehouse, read_only=True) as con:
        cols = [r[0] for r in con.execute("DESCRIBE v_load_points").fetchall()]
        core = [r[0] for r in con.execute("DESCRIBE v_load_points_core").fetchall()]
        trace = [c for c in cols if c not in core]
        assert trace == [
            "trace_mean_w_per_gpu",
            "trace_peak_w_per_gpu",
            "peak_hbm_mib_per_gpu",
            "capped_share",
            "power_capped_share",
            "thermal_capped_share",
            "mean_sm_clock_mhz",
            "decode_step_ms",
            "stalled_gap_fraction",
            "stall_ms_mean",
            "expected_stalled_fraction",
            "phase_state",
            "delivery_stalled_fraction",
            "delivery_stall_ms_mean",
            "prefills_per_step",
            "prefills_per_step_se",
            "shared_prefill_fraction",
            "phase_note",
            "host_saturated",
            "gpu_throttled",
            "search_id",
            "probe",
            "probe_phase",
            "probe_verdict",
        ]
        # energy per request and its note follow the energy figures, then the trace
        assert cols.index("j_per_request") == cols.index("output_tokens_per_j_above_idle") + 1
        assert cols.index("trace_mean_w_per_gpu") == cols.index("energy_note") + 1
        assert set(core) <= set(cols)
        both = con.execute(
            f"""SELECT count(*),
                   count(*) FILTER (WHERE p.trace_mean_w_per_gpu IS NOT DISTINCT FROM g.trace_mean_w_per_gpu
                                      AND p.output_tok_s IS NOT DISTINCT FROM c.output_tok_s)
            FROM v_load_points p JOIN v_load_points_core c USING ({KEY})
            LEFT JOIN v_window_gpu g USING ({KEY})"""
        ).fetchone()
        assert both[0] == con.execute("SELECT count(*) FROM load_runs WHERE status = 'ok'").fetchone()[0]
        assert both[0] == both[1]
