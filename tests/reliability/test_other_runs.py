"""A failing error-level check blocks the reports of its own run only: in one warehouse, a clean run, then a
run with a planted bad row (its reports blocked, the check naming the expectation, the row count and a sample),
then another clean run (its reports made). The first run's rows and reports are untouched throughout. And a
plan that lowers that expectation to `warn` lets the same bad rows through with a warning."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.checks import stage_checks
from pipelines.definitions import ALL_ASSETS, make_resources
from pipelines.partitions import bench_partition, ensure_models
from tests.bundle_files import read_table, write_table
from wattbench.warehouse import connect

pytestmark = pytest.mark.slow

SMOKE_PLAN = Path(__file__).resolve().parents[1] / "data" / "smoke_plan.yaml"
# Assets are partitioned by (model, scenario); a plan file stands for the scenario of its stem, so each plan is
# copied to <folder>/default.yaml and every run here is the partition (llama-3.1-8b, default).
PARTITION = bench_partition("llama-3.1-8b", "default")
REPORTS = {"load_point_report", "head_to_head", "slo_capacity", "capacity_plan", "regressions", "html_report"}
TABLES = (
    "runs",
    "engine_builds",
    "deployments",
    "load_runs",
    "requests",
    "gpu_samples",
    "energy_windows",
    "server_metrics",
    "validation_results",
)


def plan_file(folder: Path, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "default.yaml"
    path.write_text(text if text is not None else SMOKE_PLAN.read_text())
    return path


def materialize(db: Path, out: Path, plan: Path, **plan_fields):
    instance = dg.DagsterInstance.ephemeral()
    ensure_models(instance, ["llama-3.1-8b"])
    return dg.materialize(
        [*ALL_ASSETS, *stage_checks],
        resources=make_resources(db_path=str(db), plan_path=str(plan), output_dir=str(out), **plan_fields),
        instance=instance,
        partition_key=PARTITION,
        raise_on_error=False,
    )


def materialized(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


def fingerprint(db: Path, run_id: str) -> dict[str, tuple]:
    """Row count and a digest of every row of a run, per table."""
    out = {}
    with connect(db, read_only=True) as con:
        for t in TABLES:
            out[t] = con.execute(
                "SELECT count(*), md5(coalesce(string_agg(CAST(x AS VARCHAR), '|' "
                "ORDER BY CAST(x AS VARCHAR)), '')) "
                f"FROM (SELECT * EXCLUDE (checked_at) FROM {t} WHERE run_id = ?) x"
                if t == "validation_results"
                else "SELECT count(*), md5(coalesce(string_agg(CAST(x AS VARCHAR), '|' "
                "ORDER BY CAST(x AS VARCHAR)), '')) "
                f"FROM (SELECT * FROM {t} WHERE run_id = ?) x",
                [run_id],
            ).fetchone()
    return out


def test_a_failing_check_blocks_only_its_own_runs_reports(tmp_path):
    db, out = tmp_path / "w.duckdb", tmp_path / "runs"
    smoke = plan_file(tmp_path / "plan")
    clean = materialize(db, out, smoke)
    assert clean.success and materialized(clean) >= REPORTS
    before = fingerprint(db, clean.run_id)
    assert before["requests"][0] > 0

    # a second run replays the first run's bundle with one request whose TTFT exceeds its E2E
    good_bundle = out / clean.run_id / "bundle"
    bad_bundle = tmp_path / "bad_bundle"
    shutil.copytree(good_bundle, bad_bundle)
    rows = read_table(bad_bundle, "requests")
    rows[0]["ttft_ms"] = (rows[0]["e2e_ms"] or 1.0) * 10
    write_table(bad_bundle, "requests", rows)
    bad = materialize(db, out, smoke, replay_bundle=str(bad_bundle))
    assert "requests" in materialized(bad) and not REPORTS & materialized(bad)
    (check,) = [e for e in bad.get_asset_check_evaluations() if e.check_name == "gx_requests"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    # the check's metadata names the expectation, how many rows failed, and shows a sample
    assert check.metadata["failed"].value == "requests.ttft_le_e2e (1 rows)", check.metadata["failed"]
    table = check.metadata["results"].value
    assert "| requests.ttft_le_e2e | error | **FAIL** | 1 /" in table
    with connect(db, read_only=True) as con:
        n, sample, severity = con.execute(
            "SELECT unexpected_count, sample, severity FROM validation_results WHERE run_id = ? AND NOT success "
            "AND expectation = 'requests.ttft_le_e2e'",
            [bad.run_id],
        ).fetchone()
        bad_status = con.execute("SELECT status FROM runs WHERE run_id = ?", [bad.run_id]).fetchone()[0]
    assert n == 1 and severity == "error" and json.loads(sample)
    assert bad_status == "blocked"  # set by the failing check itself: no daemon, no CLI needed

    # a third run after the failing one, in the same warehouse, makes its reports
    third = materialize(db, out, smoke, replay_bundle=str(good_bundle))
    assert materialized(third) >= REPORTS
    assert not [e for e in third.get_asset_check_evaluations() if not e.passed and e.severity.value == "ERROR"]
    assert (out / third.run_id / "report.html").is_file()

    # the first run: rows, validation results and report untouched
    assert fingerprint(db, clean.run_id) == before
    assert (out / clean.run_id / "report.html").is_file()
    with connect(db, read_only=True) as con:
        statuses = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
    assert statuses[clean.run_id] == statuses[third.run_id] == "complete"

    # the plan can lower that expectation to a warning: same bad rows, reports made, the check says WARN
    plan = yaml.safe_load(SMOKE_PLAN.read_text())
    plan["validation"]["severity"]["requests.ttft_le_e2e"] = "warn"
    lenient = plan_file(tmp_path / "lenient", yaml.safe_dump(plan))
    warned = materialize(db, out, plan=lenient, replay_bundle=str(bad_bundle))
    assert materialized(warned) >= REPORTS
    (check,) = [e for e in warned.get_asset_check_evaluations() if e.check_name == "gx_requests"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "requests.ttft_le_e2e (1 rows)" in check.metadata["warnings"].value
    assert fingerprint(db, clean.run_id) == before
