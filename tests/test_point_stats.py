"""Kept per-load-point figures (point_stats, schema 3; window_gpu_stats, schema 4) equal their on-the-fly
definitions, and a version-2 or version-3 warehouse gains them on upgrade. Real bundles: the H200 runs kept under
results/ (measured vLLM and transformers), and a synthetic run with failed requests and engine /metrics scrapes
(benchmarks/synthetic.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from benchmarks.synthetic import synthesize
from wattbench.importers import read_file, store_run
from wattbench.warehouse import SCHEMA_VERSION, connect, ingest_bundle, refresh_point_stats, set_run_fields
from wattbench_agent.bundle import unpacked

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("run_id", "deployment_id", "load_point_id", "workload", "point_label", "metric")
IMPORTS = ("vllm-bench-serve-0.25.0.json", "guidellm-0.8.1-concurrent-2-4.json")
KEPT = ("v_window_gpu", "v_imported_request_stats", "v_imported_itl_stats", "v_request_tallies")  # warehouse.KEPT_VIEWS
# kept view -> (its on-the-fly definition, the kept view's rows)
PAIRS = {
    "v_request_stats": (
        "SELECT l.*, c.meeting_slo_completed_in_window, c.meeting_slo_in_window "
        "FROM v_request_stats_live l JOIN v_request_slo_counts c USING (run_id, deployment_id, load_point_id)",
        "SELECT * FROM v_request_stats WHERE run_id IN (SELECT run_id FROM requests)",
    ),
    "v_itl_stats": (
        "SELECT * FROM v_itl_stats_live",
        "SELECT * FROM v_itl_stats WHERE run_id IN (SELECT run_id FROM requests)",
    ),
    "v_window_steadiness": (
        "SELECT * EXCLUDE (deployment_id) FROM v_window_steadiness_live",
        "SELECT * FROM v_window_steadiness",
    ),
    **{v: (f"SELECT * FROM {v}_live", f"SELECT * FROM {v}") for v in KEPT},
    "v_load_points_core": ("SELECT * FROM v_load_points_core_live", "SELECT * FROM v_load_points_core"),
    "v_point_figures": ("SELECT * FROM v_point_figures_live", "SELECT * FROM v_point_figures"),
}


def rows(con, sql: str) -> dict[tuple, dict]:
    df = con.execute(sql).df()
    keys = [k for k in KEYS if k in df.columns]
    return {tuple(r[k] for k in keys): r for r in df.to_dict("records")}


# A mean or deviation of a load point's gaps: kept from numpy's sum over a version-2 bundle's events
# (warehouse.point_token_figures), defined by DuckDB's: equal to their summation order, 1e-12 relative.
SUMMED = {"itl_mean_ms", "itl_stdev_ms", "client_itl_ms", "client_mean_ms"}


def same(a, b, col: str | None = None) -> bool:
    if hasattr(a, "__len__") and not isinstance(a, str) and hasattr(b, "__len__") and not isinstance(b, str):
        return len(a) == len(b) and all(same(x, y, col) for x, y in zip(a, b))  # a list (per_repeat)
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return (a is None or a != a) and (b is None or b != b)
    if col in SUMMED:
        return math.isclose(a, b, rel_tol=1e-12)
    return a == b  # percentiles, counts and sums of tokens: equal to the bit


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ps")
    db = tmp / "w.duckdb"
    with connect(db) as con:
        for archive in ("results/h200-vllm/bundle-long-bursty.tar.xz", "results/h200-transformers/bundle"):
            with unpacked(ROOT / archive) as folder:
                ingest_bundle(con, folder)
        ingest_bundle(con, _synthetic(tmp / "syn"))
        ingest_bundle(con, _capped(tmp / "capped"))
        for name in IMPORTS:  # other tools' results, with their per-request rows and without (the tool's statistics)
            run = read_file(ROOT / "tests" / "data" / "imports" / name)
            store_run(con, run)
            bare = dataclasses.replace(run, points=[dataclasses.replace(p, requests=[]) for p in run.points])
            store_run(con, bare, run_id=f"{name}-without-requests")
        for (run_id,) in con.execute("SELECT run_id FROM runs").fetchall():  # a run's SLO set after ingest
            set_run_fields(con, run_id, {"slo_ttft_ms": 2000, "slo_tpot_ms": 200})
    return db


def _capped(folder: Path) -> Path:
    """A run whose requests streamed past the load generator's cap: 3 exact events, then one entry a second."""
    from wattbench_agent.bundle import BundleWriter

    ms = 1_000_000
    with BundleWriter(folder, run_id="capped", source="emulated") as w:
        w.write(
            "deployments",
            [
                {
                    "deployment_id": "c",
                    "model": "m",
                    "engine": "emulator:vllm-like",
                    "config_name": "c",
                    "status": "healthy",
                    "n_gpus": 1,
                }
            ],
        )
        w.write(
            "load_runs",
            [
                {
                    "deployment_id": "c",
                    "load_point_id": "c:w:c1",
                    "workload": "w",
                    "shape": "concurrency",
                    "status": "ok",
                    "window_s": 3.0,
                    "window_start_ns": 0,
                    "window_end_ns": 3000 * ms,
                    "output_tokens_in_window": 300,
                    "energy_j": 50.0,
                }
            ],
        )
        w.write(
            "requests",
            [
                {
                    "deployment_id": "c",
                    "load_point_id": "c:w:c1",
                    "request_id": str(i),
                    "sent_ns": 0,
                    "ttft_ms": 10.0 + i,
                    "e2e_ms": 2500.0,
                    "completion_tokens": 203,
                    "chunk_ns": [(10 + i) * ms, (20 + i) * ms, (30 + i) * ms, 1000 * ms, 2000 * ms],
                    "chunk_tokens": [1, 1, 1, 100, 100],
                    "chunks_exact": 3,
                    "in_window": True,
                }
                for i in range(4)
            ],
        )
    return folder


def test_a_capped_stream_gives_gaps_of_its_exact_part_only(warehouse):
    with connect(warehouse, read_only=True) as con:
        gaps = [r[0] for r in con.execute("SELECT itl_ms FROM v_itl WHERE run_id = 'capped'").fetchall()]
        assert gaps == [10.0] * 8  # 2 gaps of 3 exact events, 4 requests; the one-second tail is no gap
        ((p50, n),) = con.execute("SELECT itl_p50_ms, itl_samples FROM v_itl_stats WHERE run_id = 'capped'").fetchall()
        assert (p50, n) == (10.0, 8)
        (itl,) = con.execute(
            "SELECT estimate FROM v_point_figures WHERE run_id = 'capped' AND metric = 'itl_p50_ms'"
        ).fetchone()
        assert itl == 10.0
        (tokens,) = con.execute(
            "SELECT first_half_tokens + second_half_tokens FROM v_window_steadiness WHERE run_id = 'capped'"
        ).fetchone()
        assert tokens == 4 * 203  # every token counted, the tail's included


def _synthetic(folder: Path) -> Path:
    synthesize(folder, "syn", 6_000, requests_per_point=1_000)
    return folder


@pytest.mark.parametrize("view", sorted(PAIRS))
def test_kept_figures_equal_the_definitions(warehouse, view):
    live_sql, kept_sql = PAIRS[view]
    with connect(warehouse, read_only=True) as con:
        live, kept = rows(con, live_sql), rows(con, kept_sql)
    assert live and set(live) == set(kept), view
    for key, row in live.items():
        for col, value in row.items():
            assert same(value, kept[key][col], col), (view, key, col, value, kept[key][col])


def test_client_vs_server_reads_the_kept_client_figures(warehouse):
    with connect(warehouse, read_only=True) as con:
        kept = con.execute("SELECT count(*) FROM v_client_vs_server").fetchone()[0]
        live = rows(con, "SELECT * FROM v_client_stats_live")
        for run, dep, lp, family, mean, n in con.execute(
            "SELECT run_id, deployment_id, load_point_id, family, client_mean_ms, client_n FROM v_client_vs_server"
        ).fetchall():
            r = live[(run, dep, lp)]
            assert same(mean, r[f"client_{family}_ms"], "client_mean_ms") and n == r[f"client_{family}_n"]
    assert kept > 0  # the synthetic run's scrapes give every family a server figure


def test_a_changed_slo_recounts_goodput(warehouse):
    """The SLO was set after ingest (as `wattbench ingest --plan` does): goodput follows it, not the kept count, in
    v_request_stats and in the kept load_points_core that set_run_fields refreshed."""
    goodput = "SELECT sum(goodput_requests_s) FROM v_load_points_core"
    with connect(warehouse, read_only=True) as con:
        stale = {r[0] for r in con.execute("SELECT run_id FROM v_point_stale_slo").fetchall()}
        assert stale  # the kept counts were made against no SLO
        tight = con.execute("SELECT sum(meeting_slo_in_window) FROM v_request_stats").fetchone()[0]
        good = con.execute(goodput).fetchone()[0]
    with connect(warehouse) as con:
        run_ids = [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()]
        for run_id in run_ids:
            set_run_fields(con, run_id, {"slo_ttft_ms": 1})
        assert con.execute("SELECT sum(meeting_slo_in_window) FROM v_request_stats").fetchone()[0] < tight
        assert con.execute(goodput).fetchone()[0] < good
        refresh_point_stats(con, None)
        assert not con.execute("SELECT count(*) FROM v_point_stale_slo").fetchone()[0]
        for run_id in run_ids:
            set_run_fields(con, run_id, {"slo_ttft_ms": 2000})
        assert con.execute(goodput).fetchone()[0] == pytest.approx(good)


def test_a_version_2_warehouse_gains_its_kept_figures(tmp_path):
    db = tmp_path / "v2.duckdb"
    with connect(db) as con:
        ingest_bundle(con, _synthetic(tmp_path / "syn"))
        before = con.execute("SELECT * FROM v_load_points ORDER BY load_point_id").df()
        con.execute("DELETE FROM point_stats")  # what a version-2 warehouse holds: requests, no kept figures
        con.execute("DELETE FROM schema_version")
        con.execute("INSERT INTO schema_version (version) VALUES (2)")
    with connect(db) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 14
        after = con.execute("SELECT * FROM v_load_points ORDER BY load_point_id").df()
    assert len(before) == 6 and list(before.columns) == list(after.columns)
    summed = [c for c in before.columns if c in SUMMED]
    assert summed and before.drop(columns=summed).equals(after.drop(columns=summed))
    for col in summed:
        assert all(same(a, b, col) for a, b in zip(before[col], after[col], strict=True)), col


def test_a_version_3_warehouse_gains_its_kept_trace_figures(tmp_path):
    db = tmp_path / "v3.duckdb"
    with connect(db) as con:
        ingest_bundle(con, _synthetic(tmp_path / "syn"))
        live = con.execute("SELECT * FROM v_window_gpu_live ORDER BY load_point_id").fetchall()
        con.execute("DELETE FROM window_gpu_stats")  # what a version-3 warehouse holds: no kept trace figures
        con.execute("DELETE FROM schema_version")
        con.execute("INSERT INTO schema_version (version) VALUES (3)")
        assert con.execute("SELECT count(trace_mean_w_per_gpu) FROM v_load_points").fetchone()[0] == 0
    with connect(db) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        kept = con.execute("SELECT * FROM v_window_gpu ORDER BY load_point_id").fetchall()
        with_trace = con.execute("SELECT count(trace_mean_w_per_gpu) FROM v_load_points").fetchone()[0]
    assert len(live) == 6 and kept == live and with_trace == 6


def test_a_version_4_warehouse_gains_its_kept_load_run_figures(tmp_path):
    db = tmp_path / "v4.duckdb"
    with connect(db) as con:
        ingest_bundle(con, _synthetic(tmp_path / "syn"))
        live = con.execute("SELECT * FROM v_load_points_core_live ORDER BY load_point_id").fetchall()
        for table in ("load_points_core", "point_figures", "request_tallies"):  # what a version-4 warehouse holds
            con.execute(f"DELETE FROM {table}")
        con.execute("DELETE FROM schema_version")
        con.execute("INSERT INTO schema_version (version) VALUES (4)")
    with connect(db) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        kept = con.execute("SELECT * FROM v_load_points_core ORDER BY load_point_id").fetchall()
        figures = con.execute("SELECT count(*) FROM v_point_figures").fetchone()[0]
        tallies = con.execute("SELECT sum(requests) FROM v_request_tallies").fetchone()[0]
    assert len(live) == 6 and kept == live and figures > 0 and tallies == 6_000


@pytest.mark.parametrize("table", ["load_points_core", "point_figures"])
def test_the_kept_figures_have_their_definitions_columns(warehouse, table):
    """load_points_core and point_figures (sql/schema.sql) have the columns of their *_live views, in their order and
    types (the views that read them are SELECT *)."""
    with connect(warehouse, read_only=True) as con:
        kept = con.execute(f"DESCRIBE {table}").fetchall()
        live = con.execute(f"DESCRIBE v_{table}_live").fetchall()
    assert [(r[0], r[1]) for r in kept] == [(r[0], r[1]) for r in live]
