"""Two `wattbench run`s at once into one DuckDB file (two processes, one Dagster instance with the writer
pool): both succeed and both runs' rows are complete."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wattbench.warehouse import connect

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_two_runs_at_once_both_land(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")  # pools: default_limit 1
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    db = tmp_path / "w.duckdb"
    cmd = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "run",
        "--plan",
        str(REPO / "tests" / "data" / "smoke_plan.yaml"),
        "--db",
        str(db),
    ]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
        assert "HTML report:" in out
    with connect(db, read_only=True) as con:
        runs = con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall()
        assert len(runs) == 2 and {s for _, s in runs} == {"complete"}
        for run_id, _ in runs:
            n_points = con.execute(
                "SELECT count(*) FROM load_runs WHERE run_id = ? AND status = 'ok'", [run_id]
            ).fetchone()[0]
            n_requests = con.execute("SELECT count(*) FROM requests WHERE run_id = ?", [run_id]).fetchone()[0]
            n_checks = con.execute(
                "SELECT count(DISTINCT check_name) FROM validation_results WHERE run_id = ?", [run_id]
            ).fetchone()[0]
            assert n_points == 2 and n_requests > 0 and n_checks >= 6


def test_first_use_of_a_fresh_dagster_home_is_serialized(tmp_path):
    """Four processes open one fresh DAGSTER_HOME at once (as four `wattbench run`s would): without the lock in
    open_instance some die creating the SQLite storages ("table alembic_version already exists"); with it all
    succeed and the model partition is added once."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    code = "from pipelines.instance import open_instance; open_instance(['llama-3.1-8b'])"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], "\n".join(e[-800:] for e in errors)
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dagster as dg; print(dg.DagsterInstance.get().get_dynamic_partitions('models'))",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert check.stdout.strip() == "['llama-3.1-8b']"
