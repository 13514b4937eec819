"""(model, scenario) partitions: what a partition resolves to, and how `wattbench run` picks its own."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.partitions import BENCH_PARTITIONS, SCENARIOS
from pipelines.partitions import bench_partition, partition_for_plan
from resources.bench_plan import BenchPlan
from wattbench.partitions import scenario_key_for
from wattbench.plan import PlanError, load_plan
from wattbench.settings import DEFAULT_PLAN

REPO = Path(__file__).resolve().parents[2]
SMOKE_PLAN = REPO / "tests" / "data" / "smoke_plan.yaml"


def test_scenarios_are_the_plan_files():
    assert {"default", "h200-transformers"} <= set(SCENARIOS.get_partition_keys())
    assert BENCH_PARTITIONS.partition_dimension_names == ["model", "scenario"]


def test_wattbench_run_picks_the_plans_own_partition():
    plan, _ = load_plan(DEFAULT_PLAN)
    assert partition_for_plan(plan, DEFAULT_PLAN) == bench_partition("llama-3-70b", "default")


def test_a_partition_is_the_scenario_plan_with_the_partitions_model():
    res = BenchPlan(path=str(DEFAULT_PLAN))
    own, sha = res.load(bench_partition("llama-3-70b", "default"))
    assert own.model == "llama-3-70b" and sha == load_plan(DEFAULT_PLAN)[1]
    other, other_sha = res.load(bench_partition("meta-llama--Llama-3.1-8B-Instruct", "default"))
    assert other.model == "meta-llama/Llama-3.1-8B-Instruct" and other_sha != sha
    assert [e.name for e in other.engines] == [e.name for e in own.engines]  # the scenario's engine matrix
    h200, _ = res.load(dg.MultiPartitionKey({"model": "llama-3.1-8b", "scenario": "h200-transformers"}))
    assert h200.name == "h200-transformers-tiny-1b" and h200.model == "llama-3.1-8b"
    assert res.load("llama-3.1-8b|default")[0].model == "llama-3.1-8b"  # the string form works too
    with pytest.raises(PlanError, match="no plan file"):
        res.load(bench_partition("x", "nope"))
    assert res.load(None)[0].model == "llama-3-70b"  # unpartitioned: the file as written


def test_the_resources_own_file_stands_for_its_stem(tmp_path):
    copy = tmp_path / "default.yaml"
    copy.write_text(SMOKE_PLAN.read_text())
    plan, _ = BenchPlan(path=str(copy)).load(bench_partition("llama-3.1-8b", "default"))
    assert plan.name == "smoke"
    assert scenario_key_for(SMOKE_PLAN) == "smoke_plan"


@pytest.mark.slow
def test_wattbench_run_on_a_plan_outside_plans_dir(tmp_path):
    """`wattbench run --plan tests/data/smoke_plan.yaml`: its stem becomes a scenario, the model partition is added,
    and the run is partitioned (model=llama-3.1-8b, scenario=smoke_plan)."""
    env = {
        **os.environ,
        "WATTBENCH_DB": str(tmp_path / "w.duckdb"),
        "WATTBENCH_RUNS_DIR": str(tmp_path / "runs"),
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    env.pop("WATTBENCH_PLAN", None)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--plan", str(SMOKE_PLAN), "--log-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "partition llama-3.1-8b|smoke_plan" in proc.stderr
    assert "Head to head" in proc.stdout and "HTML report: " + str(tmp_path / "runs") in proc.stdout
    # every check that failed or warned is on the console, with its table, one line each (not only in the UI)
    import duckdb

    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        flagged = con.execute(
            "SELECT upper(severity), table_name, expectation FROM validation_results WHERE NOT success"
        ).fetchall()
    assert flagged, "the smoke plan's short windows warn"
    assert f"Validation: {len(flagged)} check(s) failed or warned" in proc.stdout
    lines = proc.stdout.splitlines()
    for severity, table, rule in flagged:
        assert sum(line.split()[:3] == [severity, table, rule + ":"] for line in lines) == 1, (rule, proc.stdout)
    home = {**env}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import dagster as dg; i = dg.DagsterInstance.get(); "
            "r = i.get_runs(limit=1)[0]; print(i.get_dynamic_partitions('models'), "
            "r.tags.get('dagster/partition'), r.tags.get('wattbench/trigger'), r.job_name)",
        ],
        cwd=REPO,
        env=home,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the code location's `benchmark` job with its partition, as a run launched from the UI: not an ephemeral job
    assert out.stdout.strip() == "['llama-3.1-8b'] llama-3.1-8b|smoke_plan cli benchmark", out.stderr[-2000:]
