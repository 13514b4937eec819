"""Schedules (nightly pinned matrix, weekly full sweep) and the run-failure sensor that records failed runs."""

from datetime import UTC, datetime

import dagster as dg
import pytest
from dagster_duckdb import DuckDBResource

from assets.partitions import BENCH_PARTITIONS, SCENARIOS
from pipelines.schedules import nightly_regression, weekly_full_sweep
from pipelines.sensors import record_failed_runs
from wattbench.warehouse import connect, replace_rows

TICK = datetime(2026, 10, 6, 2, 0, tzinfo=UTC)


def _context(instance):
    return dg.build_schedule_context(instance=instance, scheduled_execution_time=TICK)


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:  # a schedule context needs an instance with a ref (not ephemeral)
        yield inst


def test_nightly_runs_the_pinned_matrix_for_every_registered_model(instance):
    instance.add_dynamic_partitions("models", ["Qwen--fixture-Qwen4-7B"])
    requests = list(nightly_regression(_context(instance)))
    # the default plan's own model is registered by the schedule itself
    assert set(instance.get_dynamic_partitions("models")) == {"Qwen--fixture-Qwen4-7B", "llama-3-70b"}
    assert {
        (r.partition_key.keys_by_dimension["model"], r.partition_key.keys_by_dimension["scenario"]) for r in requests
    } == {("Qwen--fixture-Qwen4-7B", "default"), ("llama-3-70b", "default")}
    assert {r.tags["wattbench/model_id"] for r in requests} == {"Qwen/fixture-Qwen4-7B", "llama-3-70b"}
    assert all(r.run_key.startswith("nightly:2026-10-06:") for r in requests)
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        assert all(BENCH_PARTITIONS.has_partition_key(r.partition_key) for r in requests)


def test_weekly_sweeps_every_scenario(instance):
    requests = list(weekly_full_sweep(_context(instance)))
    scenarios = {r.partition_key.keys_by_dimension["scenario"] for r in requests}
    assert scenarios == set(SCENARIOS.get_partition_keys()) >= {"default", "h200-transformers"}
    assert len({r.run_key for r in requests}) == len(requests)


def test_schedules_target_the_partitioned_benchmark_job():
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    for name, cron in (("nightly_regression", "0 2 * * *"), ("weekly_full_sweep", "0 3 * * 0")):
        schedule = defs.get_schedule_def(name)
        assert schedule.job_name == "benchmark" and schedule.cron_schedule == cron


@dg.op
def _explode():
    raise RuntimeError("engine did not come up: fixture failure")


@dg.job
def _failing_job():
    _explode()


def test_failed_runs_are_recorded_in_the_warehouse(tmp_path):
    db = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    result = _failing_job.execute_in_process(
        instance=instance, raise_on_error=False, tags={"dagster/partition": "llama-3-70b|default"}
    )
    assert not result.success
    with connect(db) as con:  # the run had opened its row in `runs`
        replace_rows(
            con, "runs", [{"run_id": result.run_id, "source": "emulated", "status": "running"}], key=("run_id",)
        )
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
    context = dg.build_run_status_sensor_context(
        sensor_name="record_failed_runs",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=failure,
        resources={"warehouse": DuckDBResource(database=str(db))},
    ).for_run_failure()
    record_failed_runs(context)
    record_failed_runs(context)  # twice: still one row
    with connect(db, read_only=True) as con:
        rows = con.execute("SELECT run_id, job_name, partition_key, failed_at, error FROM failed_runs").fetchall()
        source = con.execute("SELECT source FROM failed_runs").fetchone()[0]
        status = con.execute("SELECT status, finished_at FROM runs WHERE run_id = ?", [result.run_id]).fetchone()
    assert len(rows) == 1
    run_id, job, partition, failed_at, error = rows[0]
    assert (run_id, job, partition) == (result.run_id, "_failing_job", "llama-3-70b|default")
    assert failed_at is not None and "engine did not come up" in error and "_explode" in error
    assert status[0] == "failed" and status[1] is not None and source == "emulated"


def test_failure_sensor_is_on_by_default():
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    sensor = defs.get_sensor_def("record_failed_runs")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
