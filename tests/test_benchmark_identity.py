"""A benchmark's identity is its own, not the Dagster run's a step runs in (issue 15, item 4): real Dagster
materializations on the emulator into one DuckDB file and one Dagster instance.

- a report materialized alone, with no complete benchmark of its partition, fails with one line (no green run);
- after a whole run, a report materialized alone (a new Dagster run, as from the UI) reports on that benchmark;
- a run whose bench step fails is 'failed' without any sensor or daemon, and its re-execution from failure (the
  tags Dagster gives a re-executed run) fills the same benchmark, which becomes 'complete';
- the bench stages without the engine_builds that opens a benchmark fail with one line; engine_builds alone
  leaves its benchmark 'incomplete' (nothing measured), which reports skip.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.bench import STAGE_TABLES
from assets.checks import stage_checks
from pipelines.definitions import ALL_ASSETS, make_resources
from pipelines.partitions import bench_partition, ensure_models
from tests.bundle_files import read_table, table_file, write_table
from wattbench.warehouse import connect

pytestmark = pytest.mark.slow

SMOKE_PLAN = Path(__file__).resolve().parent / "data" / "smoke_plan.yaml"
PARTITION = bench_partition("llama-3.1-8b", "default")
OTHER_PARTITION = bench_partition("qwen-7b", "default")
REPORTS = {"load_point_report", "head_to_head", "slo_capacity", "capacity_plan", "regressions", "html_report"}


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("identity")
    plan = tmp / "plan" / "default.yaml"  # the plan's stem is the scenario of the partition
    plan.parent.mkdir()
    shutil.copy(SMOKE_PLAN, plan)
    instance = dg.DagsterInstance.ephemeral()
    ensure_models(instance, ["llama-3.1-8b", "qwen-7b"])
    return {"db": tmp / "w.duckdb", "out": tmp / "runs", "plan": plan, "instance": instance, "tmp": tmp}


def materialize(place, selection=None, partition=PARTITION, tags=None, **plan_fields):
    return dg.materialize(
        [*ALL_ASSETS, *stage_checks],
        selection=selection,
        resources=make_resources(
            db_path=str(place["db"]), plan_path=str(place["plan"]), output_dir=str(place["out"]), **plan_fields
        ),
        instance=place["instance"],
        partition_key=partition,
        raise_on_error=False,
        tags=tags or {},
    )


def failure_lines(result) -> list[str]:
    out = []
    for event in result.get_step_failure_events():
        error = event.event_specific_data.error
        out.append(error.message.strip())
    return out


def status_of(place, run_id: str) -> str | None:
    with connect(place["db"], read_only=True) as con:
        row = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return row[0] if row else None


def materialized(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


@pytest.fixture(scope="module")
def whole(place):
    """Before any benchmark: a report alone fails; then one whole run of the partition."""
    alone = materialize(place, selection=["head_to_head"])
    whole = materialize(place)
    return alone, whole


def test_a_report_alone_with_no_benchmark_fails_with_one_line(whole):
    alone, _ = whole
    assert not alone.success and not materialized(alone)
    [line] = failure_lines(alone)
    assert "no complete benchmark of partition llama-3.1-8b|default to report on" in line
    assert "wattbench run" in line and "\n" not in line


def test_a_whole_run_opens_a_benchmark_that_its_checks_complete(place, whole):
    _, run = whole
    assert run.success and materialized(run) >= REPORTS
    assert status_of(place, run.run_id) == "complete"
    with connect(place["db"], read_only=True) as con:
        assert (
            con.execute("SELECT partition_key FROM runs WHERE run_id = ?", [run.run_id]).fetchone()[0]
            == "llama-3.1-8b|default"
        )
        checks = dict(
            con.execute(
                "SELECT check_name, passed OR severity = 'WARN' FROM run_checks WHERE run_id = ?", [run.run_id]
            ).fetchall()
        )
        assert len(checks) == len(stage_checks) and all(checks.values())
        assert con.execute("SELECT role FROM dagster_runs WHERE dagster_run_id = ?", [run.run_id]).fetchall() == [
            ("opened",)
        ]


def test_a_report_alone_reports_on_the_partitions_latest_complete_benchmark(place, whole):
    _, first = whole
    report = place["out"] / first.run_id / "report.html"
    report.unlink()
    alone = materialize(place, selection=["html_report", "head_to_head"])
    assert alone.success and materialized(alone) == {"html_report", "head_to_head"}
    assert alone.run_id != first.run_id
    metas = {e.asset_key.to_user_string(): e.materialization.metadata for e in alone.get_asset_materialization_events()}
    assert metas["html_report"]["run_id"].value == metas["head_to_head"]["run_id"].value == first.run_id
    assert metas["html_report"]["load_points"].value == 2  # two engines x one point: not an empty report
    assert "NULL (not measured)" not in metas["head_to_head"]["head_to_head"].value.split("\n")[2]
    assert report.is_file() and first.run_id in report.read_text()  # rewritten in the benchmark's own folder
    assert not (place["out"] / alone.run_id / "report.html").exists()
    with connect(place["db"], read_only=True) as con:
        assert con.execute(
            "SELECT run_id, role FROM dagster_runs WHERE dagster_run_id = ?", [alone.run_id]
        ).fetchall() == [(first.run_id, "reported")]
    assert status_of(place, first.run_id) == "complete"
    # another partition has no benchmark: its report alone fails, with one line naming that partition
    other = materialize(place, selection=["head_to_head"], partition=OTHER_PARTITION)
    assert not other.success
    assert "no complete benchmark of partition qwen-7b|default" in failure_lines(other)[0]


def test_a_failed_run_is_failed_without_a_daemon_and_its_re_execution_completes_it(place, whole):
    _, first = whole
    bundle = place["out"] / first.run_id / "bundle"
    broken = place["tmp"] / "broken_bundle"
    shutil.copytree(bundle, broken, dirs_exist_ok=True)
    requests = table_file(broken, "requests")  # requests.csv, or requests.jsonl of an older agent
    requests.write_text('{"run_id": "x", "deployment_id": \n')  # neither a CSV header nor JSON: ingest refuses it
    failed = materialize(place, replay_bundle=str(broken))
    assert not failed.success and "bench" in {e.step_key for e in failed.get_step_failure_events()}
    assert status_of(place, failed.run_id) == "failed"  # set by the step; no sensor ran
    with connect(place["db"], read_only=True) as con:
        error = con.execute("SELECT error FROM failed_runs WHERE run_id = ?", [failed.run_id]).fetchone()[0]
    assert requests.name in error

    # re-execution from failure: the failed step and what follows, tagged with the run it re-executes
    stages = [*STAGE_TABLES, *REPORTS]
    again = materialize(
        place,
        selection=stages,
        replay_bundle=str(bundle),
        tags={"dagster/parent_run_id": failed.run_id, "dagster/root_run_id": failed.run_id},
    )
    assert again.success and materialized(again) >= REPORTS
    metas = {e.asset_key.to_user_string(): e.materialization.metadata for e in again.get_asset_materialization_events()}
    assert metas["html_report"]["run_id"].value == failed.run_id  # the same benchmark, not a new empty one
    assert status_of(place, failed.run_id) == "complete"
    with connect(place["db"], read_only=True) as con:
        assert con.execute("SELECT count(*) FROM load_runs WHERE run_id = ?", [failed.run_id]).fetchone()[0] == 2
        assert con.execute("SELECT count(*) FROM load_runs WHERE run_id = ?", [again.run_id]).fetchone()[0] == 0
        assert con.execute(
            "SELECT run_id, role FROM dagster_runs WHERE dagster_run_id = ?", [again.run_id]
        ).fetchall() == [(failed.run_id, "resumed")]
        # the builds engine_builds made in the failed run are the benchmark's: not made again
        assert con.execute("SELECT count(*) FROM engine_builds WHERE run_id = ?", [failed.run_id]).fetchone()[0] == 2


def test_stages_without_the_step_that_opens_a_benchmark_fail_with_one_line(place, whole):
    stages_alone = materialize(place, selection=list(STAGE_TABLES))
    assert not stages_alone.success and not materialized(stages_alone)
    assert "no benchmark open in this Dagster run" in failure_lines(stages_alone)[0]
    # engine_builds alone (e.g. to fill the engine cache) opens a benchmark that nothing will measure: 'incomplete'
    builds_alone = materialize(place, selection=["engine_builds"])
    assert builds_alone.success
    assert status_of(place, builds_alone.run_id) == "incomplete"
    with connect(place["db"], read_only=True) as con:
        ids = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    assert stages_alone.run_id not in ids


def test_a_blocked_benchmark_is_blocked_and_a_report_alone_skips_it(place, whole):
    """A run with a planted bad row: its check blocks it ('blocked', set by the check); a report materialized
    alone afterwards reports on the last complete benchmark, not on the newer blocked one."""
    _, first = whole
    bad = place["tmp"] / "bad_bundle"
    shutil.copytree(place["out"] / first.run_id / "bundle", bad, dirs_exist_ok=True)
    rows = read_table(bad, "requests")
    rows[0]["ttft_ms"] = (rows[0]["e2e_ms"] or 1.0) * 10
    write_table(bad, "requests", rows)
    blocked = materialize(place, replay_bundle=str(bad))
    assert not REPORTS & materialized(blocked)
    assert status_of(place, blocked.run_id) == "blocked"
    alone = materialize(place, selection=["head_to_head"])
    assert alone.success
    [event] = alone.get_asset_materialization_events()
    assert event.materialization.metadata["run_id"].value != blocked.run_id
    assert status_of(place, event.materialization.metadata["run_id"].value) == "complete"


def _benchmark_job():
    """The code location's `benchmark` job, as the re-executed run's process rebuilds it (dg.reconstructable)."""
    import os

    from pipelines.definitions import Settings, build_definitions

    return build_definitions(
        Settings(
            db_path=os.environ["IDENTITY_TEST_DB"],
            plan_path=os.environ["IDENTITY_TEST_PLAN"],
            output_dir=os.environ["IDENTITY_TEST_RUNS"],
            replay_bundle=os.environ["IDENTITY_TEST_BUNDLE"],
        )
    ).resolve_job_def("benchmark")


def test_re_execution_from_failure_with_dagster_continues_the_benchmark(place, whole, tmp_path, monkeypatch):
    """Dagster's own re-execution (ReexecutionOptions.from_failure) of a `benchmark` job run whose bench step
    failed: the re-executed steps fill the failed run's benchmark, which ends 'complete'."""
    _, first = whole
    good = place["out"] / first.run_id / "bundle"
    bundle = tmp_path / "bundle"
    shutil.copytree(good, bundle)
    requests = table_file(bundle, "requests")
    requests.write_text("not json\n")  # not a table file of either format
    for key, value in (("DB", place["db"]), ("PLAN", place["plan"]), ("RUNS", place["out"]), ("BUNDLE", bundle)):
        monkeypatch.setenv(f"IDENTITY_TEST_{key}", str(value))
    job = dg.reconstructable(_benchmark_job)
    with dg.instance_for_test() as instance:
        ensure_models(instance, ["llama-3.1-8b"])
        tags = {
            "dagster/partition": "llama-3.1-8b|default",
            "dagster/partition/model": "llama-3.1-8b",
            "dagster/partition/scenario": "default",
        }
        with dg.execute_job(job, instance=instance, tags=tags, raise_on_error=False) as failed:
            assert not failed.success and failed.dagster_run.job_name == "benchmark"
        assert status_of(place, failed.run_id) == "failed"
        shutil.copy(good / requests.name, requests)  # the cause fixed
        options = dg.ReexecutionOptions.from_failure(failed.run_id, instance)
        with dg.execute_job(
            job,
            instance=instance,
            reexecution_options=options,
            tags=tags,  # as the UI copies them
            raise_on_error=False,
        ) as again:
            assert again.success, failure_lines(again)
            keys = {e.asset_key.to_user_string() for e in again.get_asset_materialization_events()}
    assert "engine_builds" not in keys and keys >= REPORTS  # only the failed step and what follows ran
    assert status_of(place, failed.run_id) == "complete"
    with connect(place["db"], read_only=True) as con:
        assert con.execute("SELECT count(*) FROM load_runs WHERE run_id = ?", [failed.run_id]).fetchone()[0] == 2
        assert con.execute(
            "SELECT run_id, role FROM dagster_runs WHERE dagster_run_id = ?", [again.run_id]
        ).fetchall() == [(failed.run_id, "resumed")]
    assert (place["out"] / failed.run_id / "report.html").is_file()
