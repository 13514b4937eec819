"""The warehouse: versioned idempotent schema, one-transaction idempotent bundle ingest, lock handling."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bundle_files import line_of, read_table, write_table
from wattbench.warehouse import SCHEMA_VERSION, WarehouseError, connect, ingest_bundle, run_sql
from wattbench_agent.bundle import BundleError, BundleWriter, read_manifest


def make_bundle(path, run_id="r1", deployment="d1", n_requests=5):
    with BundleWriter(path, run_id=run_id, source="emulated") as w:
        w.write(
            "deployments",
            [
                {
                    "deployment_id": deployment,
                    "model": "m",
                    "engine": "emulator:vllm-like",
                    "config_name": deployment,
                    "status": "healthy",
                    "n_gpus": 1,
                    "config": {"a": 1},
                    "gpu_uuids": ["GPU-1"],
                }
            ],
        )
        w.write(
            "load_runs",
            [
                {
                    "deployment_id": deployment,
                    "load_point_id": f"{deployment}:w:c1",
                    "workload": "w",
                    "shape": "concurrency",
                    "status": "ok",
                    "window_s": 2.0,
                    "window_start_ns": 0,
                    "window_end_ns": 2_000_000_000,
                    "output_tokens_in_window": 100,
                    "energy_j": 50.0,
                    "completed": n_requests,
                    "failed": 0,
                    "summary": {"x": 1},
                }
            ],
        )
        w.write(
            "requests",
            [
                {
                    "deployment_id": deployment,
                    "load_point_id": f"{deployment}:w:c1",
                    "request_id": str(i),
                    "ttft_ms": 10.0,
                    "e2e_ms": 50.0,
                    "chunk_ns": [1, 2, 3],
                    "chunk_tokens": [1, 1, 1],
                    "in_window": True,
                }
                for i in range(n_requests)
            ],
        )
        w.write(
            "gpu_samples",
            [
                {
                    "deployment_id": deployment,
                    "gpu_uuid": "GPU-1",
                    "t_ns": t * 100_000_000,
                    "power_w": 300.0,
                    "energy_mj": 1000.0 + t,
                }
                for t in range(10)
            ],
        )
    return path


def test_schema_is_idempotent_and_versioned(tmp_path):
    db = tmp_path / "w.duckdb"
    for _ in range(2):
        with connect(db) as con:
            pass
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*), max(version) FROM schema_version").fetchone() == (1, SCHEMA_VERSION)
        tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    for table in (
        "runs",
        "engine_builds",
        "deployments",
        "load_runs",
        "requests",
        "gpu_samples",
        "energy_windows",
        "server_metrics",
        "validation_results",
    ):
        assert table in tables
    with connect(db, read_only=True) as con:
        # bookkeeping tables (check verdicts, which Dagster runs worked on which benchmark, what the views were made
        # from) carry no source
        for table in {t for t in tables if not t.startswith("v_")} - {
            "schema_version",
            "views_made",
            "validation_results",
            "dagster_runs",
            "run_checks",
        }:
            cols = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
            assert {"run_id", "source"} <= cols, table


def test_ingest_is_idempotent(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        first = ingest_bundle(con, bundle)
        second = ingest_bundle(con, bundle)
        assert first == second
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 5
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 10
        assert con.execute("SELECT gpu_uuids FROM deployments").fetchone()[0] == ["GPU-1"]
        assert json.loads(con.execute("SELECT config FROM deployments").fetchone()[0]) == {"a": 1}


def test_ingest_replaces_only_its_deployments(tmp_path):
    """A run from several bundles, one per deployment: a new deployment is added; other rows for a deployment the
    complete run has already are refused unless asked for (replace), and then only that deployment's rows change."""
    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        ingest_bundle(con, make_bundle(tmp_path / "a", deployment="a", n_requests=3))
        ingest_bundle(con, make_bundle(tmp_path / "b", deployment="b", n_requests=4))
        with pytest.raises(WarehouseError, match=r"would change the rows of its deployment\(s\) a \(.*requests 3 -> 2"):
            ingest_bundle(con, make_bundle(tmp_path / "a2", deployment="a", n_requests=2))
        assert dict(con.execute("SELECT deployment_id, count(*) FROM requests GROUP BY 1").fetchall()) == {
            "a": 3,
            "b": 4,
        }
        ingest_bundle(con, tmp_path / "a2", replace=True)
        rows = dict(con.execute("SELECT deployment_id, count(*) FROM requests GROUP BY 1").fetchall())
    assert rows == {"a": 2, "b": 4}


def test_ingest_under_another_run_id(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, make_bundle(tmp_path / "b"), run_id="replayed")
        assert con.execute("SELECT DISTINCT run_id FROM requests").fetchall() == [("replayed",)]


def test_bad_bundle_is_rejected_whole(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    rows = read_table(bundle, "requests")
    rows.append({**rows[-1], "request_id": "z", "bogus_column": 1})
    path = write_table(bundle, "requests", rows)
    # a CSV table names its columns once, in its header (line 1); a JSON-lines row each on its own line
    line = 1 if path.suffix == ".csv" else line_of(bundle, "requests", len(rows) - 1)
    with connect(tmp_path / "w.duckdb") as con:
        with pytest.raises(BundleError, match=rf"{path.name}:{line}: unknown column\(s\) bogus_column"):
            ingest_bundle(con, bundle)
        assert con.execute("SELECT count(*) FROM deployments").fetchone()[0] == 0  # nothing half-loaded


def test_manifest_errors_are_clear(tmp_path):
    with pytest.raises(BundleError, match="no manifest.json"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        read_manifest(tmp_path)


def test_interrupted_bundle_keeps_what_was_written(tmp_path):
    path = tmp_path / "b"
    with pytest.raises(RuntimeError), BundleWriter(path, run_id="r", source="emulated") as w:
        w.write("gpu_samples", [{"deployment_id": "d", "gpu_uuid": "g", "t_ns": 1, "power_w": 1.0}])
        raise RuntimeError("killed")
    manifest = read_manifest(path)
    assert manifest["complete"] is False and manifest["tables"] == {"gpu_samples": 1}
    with connect(tmp_path / "w.duckdb") as con:
        assert ingest_bundle(con, path)["gpu_samples"] == 1


def test_locked_database_waits_then_says_so(tmp_path):
    db = tmp_path / "w.duckdb"
    with connect(db):
        pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,time; c=duckdb.connect({str(db)!r}); print('locked', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with (
            pytest.raises(WarehouseError, match=r"locked by another writer.*for more than 1 s"),
            connect(db, wait_s=1.0),
        ):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_read_only_without_warehouse_says_what_to_do(tmp_path):
    with pytest.raises(WarehouseError, match="run `make run`"), connect(tmp_path / "none.duckdb", read_only=True):
        pass


def test_named_queries_exist_and_parse(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, make_bundle(tmp_path / "b"))
        for name in ("load_points", "head_to_head"):
            run_sql(con, name, {"run_id": "r1"})
        with pytest.raises(WarehouseError, match=r"known queries: .*head_to_head.*load_points"):
            run_sql(con, "nope")


def test_a_version_1_warehouse_is_migrated_in_place(tmp_path):
    """A warehouse written by wattbench 0.1 (tests/data/schema_v1.sql) gains the version-2 columns, and its
    server_metrics labels, stored then as Prometheus label text, become a MAP with the same pairs."""
    import duckdb

    db = tmp_path / "v1.duckdb"
    old = duckdb.connect(str(db))
    old.execute((Path(__file__).parent / "data" / "schema_v1.sql").read_text())
    old.execute("INSERT INTO schema_version (version) VALUES (1)")
    old.execute("""INSERT INTO server_metrics VALUES ('r', 'measured', 'd', 'lp', 1, 'vllm:x_bucket',
                   '{le="0.1",model_name="a}b",engine="0"}', 3.0), ('r', 'measured', 'd', NULL, 2, 'up', NULL, 1.0)""")
    old.close()
    with connect(db) as con:
        assert con.execute("SELECT max(version), count(*) FROM schema_version").fetchone() == (SCHEMA_VERSION, 2)
        labels = dict(con.execute("SELECT t_ns, labels FROM server_metrics ORDER BY t_ns").fetchall())
        assert labels[1] == {"le": "0.1", "model_name": "a}b", "engine": "0"} and labels[2] is None
        cols = {r[0] for r in con.execute("DESCRIBE load_runs").fetchall()}
        assert {"point_label", "repeat"} <= cols
    with connect(db) as con:  # and applying the schema again changes nothing
        assert con.execute("SELECT count(*) FROM schema_version").fetchone() == (2,)


def test_a_version_10_warehouse_gains_the_shapes_traits(tmp_path):
    """Version 11 keeps each load run's shape traits (load_runs.closed_loop, .bursty) from the shape registry: a
    warehouse from before them gains the columns, filled for every run; a shape no longer registered stays NULL."""
    db = tmp_path / "v10.duckdb"
    with connect(db) as con:
        con.execute("ALTER TABLE load_runs DROP COLUMN closed_loop")
        con.execute("ALTER TABLE load_runs DROP COLUMN bursty")
        con.execute("DELETE FROM schema_version")
        con.execute("INSERT INTO schema_version (version) VALUES (10)")
        con.execute(
            "INSERT INTO load_runs (run_id, source, deployment_id, load_point_id, workload, shape, status) VALUES "
            "('a', 'emulated', 'd', 'd:w:c4', 'w', 'concurrency', 'ok'), ('a', 'emulated', 'd', 'd:w:g', 'w', "
            "'gamma', 'ok'), ('b', 'emulated', 'd', 'd:w:s', 'w', 'surge', 'ok'), ('b', 'emulated', 'd', 'd:w:p', "
            "'w', 'poisson', 'ok'), ('b', 'emulated', 'd', 'd:w:x', 'w', 'gone', 'ok')"
        )
    with connect(db) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        traits = con.execute("SELECT shape, closed_loop, bursty FROM load_runs ORDER BY shape").fetchall()
    assert traits == [
        ("concurrency", True, False),
        ("gamma", False, True),
        ("gone", None, None),
        ("poisson", False, False),
        ("surge", False, True),
    ]


def test_a_version_13_warehouse_keys_its_metrics_on_a_column(tmp_path):
    """Version 14 keys server_metrics on a stored column (labels_key, its labels as text in one order) instead of a
    unique index on that expression, which crashed DuckDB at the checkpoint of a re-ingest
    (tests/reliability/test_reingest.py): a warehouse from before keeps its samples, each with its key, and one copy of
    a sample without labels stored twice (the old index let those through); the new index refuses a sample twice."""
    import duckdb

    db = tmp_path / "v13.duckdb"
    with connect(db):
        pass
    old = duckdb.connect(str(db))  # server_metrics as version 13 made it
    old.execute("DROP TABLE server_metrics")
    old.execute(
        "CREATE TABLE server_metrics (run_id VARCHAR NOT NULL, source VARCHAR NOT NULL, deployment_id VARCHAR NOT "
        "NULL, load_point_id VARCHAR, t_ns BIGINT NOT NULL, metric VARCHAR NOT NULL, labels MAP(VARCHAR, VARCHAR), "
        "value DOUBLE, scrape VARCHAR)"
    )
    old.execute(
        "CREATE UNIQUE INDEX server_metrics_key ON server_metrics (run_id, deployment_id, t_ns, metric, "
        "(list_sort(map_entries(labels))::VARCHAR))"
    )
    old.execute(
        "INSERT INTO server_metrics VALUES ('r', 'measured', 'd', 'lp', 1, 'x_bucket', MAP {'le': '0.1', 'a': 'b'}, "
        "3.0, 'window_start'), ('r', 'measured', 'd', NULL, 2, 'up', NULL, 1.0, NULL), "
        "('r', 'measured', 'd', NULL, 2, 'up', NULL, 1.0, NULL)"
    )
    old.execute("DELETE FROM schema_version")
    old.execute("INSERT INTO schema_version (version) VALUES (13)")
    old.close()
    with connect(db) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 14
        rows = con.execute("SELECT t_ns, labels, value, scrape, labels_key FROM server_metrics ORDER BY 1").fetchall()
        assert rows == [
            (1, {"le": "0.1", "a": "b"}, 3.0, "window_start", "[{'key': a, 'value': b}, {'key': le, 'value': 0.1}]"),
            (2, None, 1.0, None, ""),
        ]
        (sql,) = con.execute("SELECT sql FROM duckdb_indexes() WHERE index_name = 'server_metrics_key'").fetchone()
        assert "labels_key" in sql and "list_sort" not in sql
        with pytest.raises(duckdb.ConstraintException, match="Duplicate key"):
            con.execute(
                "INSERT INTO server_metrics (run_id, source, deployment_id, t_ns, metric, labels, labels_key) "
                "SELECT run_id, source, deployment_id, t_ns, metric, labels, labels_key FROM server_metrics"
            )
    with connect(db) as con:  # and applying the schema again changes nothing
        assert con.execute("SELECT count(*) FROM server_metrics").fetchone()[0] == 2


def test_a_version_2_warehouse_is_migrated_to_benchmark_statuses(tmp_path):
    """A warehouse written before benchmark runs had an identity of their own (tests/data/schema_v2.sql): its runs
    gain partition_key (NULL: not known then), 'succeeded' becomes 'complete', the latest finished run is still found,
    and the tables dagster_runs and run_checks appear."""
    import duckdb

    from pipelines.commands import latest_run_id

    db = tmp_path / "v2.duckdb"
    old = duckdb.connect(str(db))
    old.execute((Path(__file__).parent / "data" / "schema_v2.sql").read_text())
    old.execute("INSERT INTO schema_version (version) VALUES (2)")
    old.execute(
        "INSERT INTO runs (run_id, source, status, started_at) VALUES ('a', 'emulated', 'succeeded', "
        "TIMESTAMP '2026-01-01'), ('b', 'emulated', 'failed', TIMESTAMP '2026-01-02')"
    )
    old.close()
    with connect(db, read_only=True) as con:  # read-only (wattbench sql) on the old file: 'succeeded' is finished
        assert latest_run_id(con) == "a"
    with connect(db) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 14
        assert dict(con.execute("SELECT run_id, status FROM runs").fetchall()) == {"a": "complete", "b": "failed"}
        assert con.execute("SELECT count(*) FROM runs WHERE partition_key IS NULL").fetchone()[0] == 2
        tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
        assert {"dagster_runs", "run_checks"} <= tables
        assert latest_run_id(con) == "a"
