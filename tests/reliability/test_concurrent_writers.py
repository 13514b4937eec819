"""Two writers at once: DuckDB allows one writing process, so concurrent ingests wait for the lock and retry
(wattbench/warehouse.connect), and in Dagster every step that writes the warehouse is in the `duckdb_writer`
pool, whose limit (1) comes from dagster.yaml."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

from wattbench.warehouse import connect
from wattbench_agent.bundle import BundleWriter

REPO = Path(__file__).resolve().parents[2]
# benchmark_for_step records which Dagster run worked on which benchmark (dagster_runs): every step writes.
WRITES = re.compile(
    r"\b(INSERT|UPDATE|DELETE|CREATE|replace_rows|ingest_bundle|apply_schema|benchmark_for_step|"
    r"open_benchmark|set_run_fields)\b"
)


def bundle(path: Path, run_id: str, n_requests: int) -> Path:
    with BundleWriter(path, run_id=run_id, source="emulated") as w:
        w.write(
            "deployments",
            [
                {
                    "deployment_id": "d",
                    "model": "m",
                    "engine": "emulator:vllm-like",
                    "config_name": "d",
                    "status": "healthy",
                    "n_gpus": 1,
                }
            ],
        )
        w.write(
            "load_runs",
            [
                {
                    "deployment_id": "d",
                    "load_point_id": "d:w:c1",
                    "workload": "w",
                    "shape": "concurrency",
                    "status": "ok",
                    "window_s": 20.0,
                    "completed": n_requests,
                }
            ],
        )
        w.write(
            "requests",
            [
                {
                    "deployment_id": "d",
                    "load_point_id": "d:w:c1",
                    "request_id": str(i),
                    "ttft_ms": 1.0,
                    "e2e_ms": 2.0,
                    "chunk_ns": [1, 2],
                    "chunk_tokens": [1, 1],
                }
                for i in range(n_requests)
            ],
        )
        w.write(
            "gpu_samples",
            [{"deployment_id": "d", "gpu_uuid": "GPU-0", "t_ns": t, "power_w": 100.0} for t in range(n_requests)],
        )
    return path


def test_two_processes_ingest_into_one_file_at_once(tmp_path):
    db = tmp_path / "w.duckdb"
    with connect(db):
        pass
    bundles = {f"run-{k}": bundle(tmp_path / k, f"run-{k}", 3000) for k in ("a", "b")}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # a third process holds the write lock first, so both ingests must wait for it and then for each other
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,time; c=duckdb.connect({str(db)!r}); print('locked', flush=True); "
            "time.sleep(1.5); c.close()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        ingests = [
            subprocess.Popen(
                [sys.executable, "-m", "pipelines.cli", "ingest", str(path), "--db", str(db)],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for path in bundles.values()
        ]
        results = [p.communicate(timeout=120) for p in ingests]
    finally:
        holder.kill()
        holder.wait()
    for p, (out, err) in zip(ingests, results):
        assert p.returncode == 0, err
        assert "ingested" in out and "requests: 3000 rows" in out
    assert time.monotonic() - started >= 1.0  # they did wait for the holder
    with connect(db, read_only=True) as con:
        got = dict(con.execute("SELECT run_id, count(*) FROM requests GROUP BY 1").fetchall())
        samples = dict(con.execute("SELECT run_id, count(*) FROM gpu_samples GROUP BY 1").fetchall())
        runs = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    assert got == {"run-a": 3000, "run-b": 3000} and samples == got and runs == set(bundles)


def _nodes():
    from assets.checks import stage_checks
    from pipelines.definitions import ALL_ASSETS

    for definition in [*ALL_ASSETS, *stage_checks]:
        node = definition.node_def
        yield node.name, node, definition.required_resource_keys


def test_every_warehouse_writer_is_in_the_duckdb_writer_pool():
    from assets.common import WRITER_POOL

    writers, readers = [], []
    for name, node, resources in _nodes():
        if "warehouse" not in resources:
            continue
        source = inspect.getsource(node.compute_fn.decorated_fn)
        (writers if WRITES.search(source) else readers).append(name)
        if WRITES.search(source):
            assert node.pool == WRITER_POOL, (
                f"{name} writes the warehouse but is in pool {node.pool!r}, not {WRITER_POOL!r}"
            )
    assert {
        "engine_builds",
        "bench",
        "html_report",
        "load_point_report",
        "head_to_head",
        "slo_capacity",
        "capacity_plan",
        "regressions",
    } <= set(writers)
    assert sum(1 for w in writers if "_gx_" in w) == 6  # one blocking check per stage table
    # even the reports write: the benchmark they report on is recorded (assets/benchmark_run.py)
    assert not readers, readers


def test_the_pool_limit_is_one_in_dagster_yaml():
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["concurrency"]["pools"]["default_limit"] == 1
    assert "dagster.yaml" in (REPO / "Makefile").read_text()  # copied into $DAGSTER_HOME by make run / make ui
