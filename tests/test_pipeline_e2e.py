"""End to end: materialize the whole graph on the emulator into a temporary DuckDB, then check that the report
figures agree with the rows they come from; and that a failing blocking check stops the reports."""

import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.checks import stage_checks
from pipelines.definitions import ALL_ASSETS, make_resources
from pipelines.partitions import bench_partition, ensure_models
from tests.bundle_files import read_table, write_table
from wattbench.report.specs import REPORTS
from wattbench.warehouse import connect, run_sql

pytestmark = pytest.mark.slow

SMOKE_PLAN = Path(__file__).parent / "data" / "smoke_plan.yaml"
# Assets are partitioned by (model, scenario). The plan resource's own file stands for the scenario of its stem,
# so the smoke plan copied to default.yaml runs as the partition (its model, "default").
SMOKE_PARTITION = bench_partition("llama-3.1-8b", "default")


def _instance() -> dg.DagsterInstance:
    instance = dg.DagsterInstance.ephemeral()
    ensure_models(instance, ["llama-3.1-8b"])
    return instance


def _smoke_as_default(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "default.yaml"
    shutil.copy(SMOKE_PLAN, path)
    return path


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    db = tmp / "w.duckdb"
    result = dg.materialize(
        [*ALL_ASSETS, *stage_checks],
        resources=make_resources(
            db_path=str(db), plan_path=str(_smoke_as_default(tmp / "plan")), output_dir=str(tmp / "runs")
        ),
        instance=_instance(),
        partition_key=SMOKE_PARTITION,
        raise_on_error=False,
    )
    return result, db, tmp


def test_whole_graph_materializes(smoke_run):
    result, db, tmp = smoke_run
    assert result.success
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {
        "engine_builds",
        "deployments",
        "load_runs",
        "requests",
        "gpu_samples",
        "server_metrics",
        *(s.name for s in REPORTS),  # the report registry (wattbench/report/specs.py)
        "html_report",
    }
    assert {"load_point_report", "head_to_head", "slo_capacity", "capacity_plan", "regressions"} <= materialized
    errors = [e for e in result.get_asset_check_evaluations() if not e.passed and e.severity.value == "ERROR"]
    assert not errors, [e.metadata for e in errors]


def test_every_row_is_labelled_emulated(smoke_run):
    result, db, _ = smoke_run
    with connect(db, read_only=True) as con:
        for table in (
            "engine_builds",
            "deployments",
            "load_runs",
            "requests",
            "gpu_samples",
            "energy_windows",
            "server_metrics",
        ):
            sources = {
                r[0]
                for r in con.execute(
                    f"SELECT DISTINCT source FROM {table} WHERE run_id = ?", [result.run_id]
                ).fetchall()
            }
            assert sources == {"emulated"}, table


def test_report_figures_agree_with_their_rows(smoke_run):
    result, db, _ = smoke_run
    run_id = result.run_id
    with connect(db, read_only=True) as con:
        report = run_sql(con, "SELECT * FROM v_load_points WHERE run_id = $run_id", {"run_id": run_id})
        assert len(report) == 2  # two engines x one point
        for _, row in report.iterrows():
            lr = (
                con.execute(
                    "SELECT * FROM load_runs WHERE run_id = ? AND load_point_id = ?", [run_id, row["load_point_id"]]
                )
                .df()
                .iloc[0]
            )
            # energy of the window = the counter deltas of every GPU of the deployment, from energy_windows
            counter_j = con.execute(
                "SELECT sum(energy_j) FROM energy_windows WHERE run_id = ? AND deployment_id = ? AND window_name = ?",
                [run_id, lr["deployment_id"], row["load_point_id"]],
            ).fetchone()[0]
            assert lr["energy_j"] == pytest.approx(counter_j, rel=1e-9)
            # output tokens in the window, recomputed from each request's chunk timestamps
            tokens = con.execute(
                """SELECT sum(t) FROM (SELECT unnest(times) AS ns,  -- wherever they are kept (sql/views.sql)
                          unnest(request_tokens(chunk_tokens, chunk_tokens_each, counts_file, events_at, events_n,
                                                times)) AS t
                   FROM (SELECT *, request_ns(chunk_ns, events_file, events_at, events_n) AS times FROM requests)
                   WHERE run_id = ? AND load_point_id = ? AND error_kind IS NULL) WHERE ns BETWEEN ? AND ?""",
                [run_id, row["load_point_id"], int(lr["window_start_ns"]), int(lr["window_end_ns"])],
            ).fetchone()[0]
            assert lr["output_tokens_in_window"] == pytest.approx(tokens, abs=1)
            assert row["output_tokens_per_j"] == pytest.approx(lr["output_tokens_in_window"] / counter_j)
            assert row["output_tok_s"] == pytest.approx(lr["output_tokens_in_window"] / lr["window_s"])
            usd = 2.5 * row["n_gpus"] / (row["output_tok_s"] * 3600) * 1e6
            assert row["usd_per_1m_output_tokens"] == pytest.approx(usd)
            ttft = con.execute(
                "SELECT quantile_cont(ttft_ms, 0.5) FROM requests WHERE run_id = ? AND load_point_id = ? "
                "AND in_window AND error_kind IS NULL",
                [run_id, row["load_point_id"]],
            ).fetchone()[0]
            assert row["ttft_p50_ms"] == pytest.approx(ttft)
            assert 0 < row["ttft_p50_ms"] <= row["e2e_p50_ms"]


def test_html_report_is_offline_and_marked_emulated(smoke_run):
    result, _, tmp = smoke_run
    html = (tmp / "runs" / result.run_id / "report.html").read_text()
    assert "EMULATED" in html and "Head to head" in html
    # nothing fetched: scripts are inline (the Vega bundle and the chart specs), no src/href leaves the file
    assert all("src" not in attrs for attrs in re.findall(r"<script\b([^>]*)>", html))
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|<link\b|@import""", html, re.IGNORECASE)
    assert html.count("class='chart'") == 5  # interactive charts (tests/browser/test_report_html.py)
    assert html.count("data:image/png;base64,") == 7  # 6 load-point pictures (the frontiers too) + the capacity plan


def test_validation_results_recorded(smoke_run):
    result, db, _ = smoke_run
    with connect(db, read_only=True) as con:
        tables = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT table_name FROM validation_results WHERE run_id = ?", [result.run_id]
            ).fetchall()
        }
    assert {"engine_builds", "deployments", "load_runs", "requests", "gpu_samples", "server_metrics"} <= tables


def test_failing_check_blocks_the_reports(smoke_run, tmp_path):
    """Replay the smoke run's bundle with one request whose TTFT exceeds its E2E: the requests check fails
    with ERROR severity and no report is materialized in that run."""
    result, _, tmp = smoke_run
    bundle = tmp_path / "bad_bundle"
    shutil.copytree(tmp / "runs" / result.run_id / "bundle", bundle)
    rows = read_table(bundle, "requests")
    rows[0]["ttft_ms"] = (rows[0]["e2e_ms"] or 1.0) * 10
    write_table(bundle, "requests", rows)
    db = tmp_path / "bad.duckdb"
    bad = dg.materialize(
        [*ALL_ASSETS, *stage_checks],
        resources=make_resources(
            db_path=str(db),
            plan_path=str(_smoke_as_default(tmp_path / "plan")),
            output_dir=str(tmp_path / "runs"),
            replay_bundle=str(bundle),
        ),
        instance=_instance(),
        partition_key=SMOKE_PARTITION,
        raise_on_error=False,
    )
    materialized = {e.asset_key.to_user_string() for e in bad.get_asset_materialization_events()}
    assert "requests" in materialized
    reports = {s.name for s in REPORTS} | {"html_report"}
    assert not reports & materialized
    failed = [e for e in bad.get_asset_check_evaluations() if not e.passed]
    assert any(e.check_name == "gx_requests" for e in failed)
    with connect(db, read_only=True) as con:
        n = con.execute(
            "SELECT unexpected_count FROM validation_results WHERE run_id = ? AND expectation = 'requests.ttft_le_e2e'",
            [bad.run_id],
        ).fetchone()[0]
    assert n == 1
