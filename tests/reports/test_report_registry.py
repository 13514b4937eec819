"""The report registry (wattbench/report/specs.py): every report is an asset gated by the stages' checks and a
dependency of the HTML report; a toy report added through the registry, in this test alone, becomes a Dagster asset
with its table and figures as metadata, a `wattbench report --toy` flag and a section of the HTML report, with the
numbers the hand-made warehouse was given."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_duckdb import DuckDBResource

from assets.benchmark_run import dagster_run_id
from assets.reports import REPORT_ASSETS, STAGES, html_report, report_asset
from pipelines.cli import main
from resources.bench_plan import BenchPlan
from wattbench.connection import SQL_DIR
from wattbench.report.specs import REPORTS, ReportSpec, register, registered

from .synth import Deployment, simple_point, started, write_run

# engine (the deployment's config name here), its load runs and their requests completed, per run
TOY = ReportSpec(
    "toy_report",
    "Toy report",
    "Load runs and completed requests per engine (a report made in a test, through the registry).",
    sql="SELECT engine, count(*) AS load_runs, sum(completed) AS completed FROM v_load_points "
    "WHERE run_id = $run_id GROUP BY engine ORDER BY engine",
    cli="toy",
    cli_help="the toy report",
    figures=("load_runs", "completed"),
    key=("engine",),
)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("registry")
    db = tmp / "w.duckdb"
    plan_path = tmp / "plan.yaml"
    plan_path.write_text(
        yaml.safe_dump(yaml.safe_load((Path(__file__).parents[1] / "data" / "smoke_plan.yaml").read_text()))
    )
    run_id = dagster_run_id(dg.build_asset_context())  # what directly invoked assets see
    # alpha: 5 req/s and beta 6 req/s over 10 s windows, three repeats each: 50 and 60 completed per repeat
    write_run(
        db,
        tmp,
        run_id,
        [
            Deployment("alpha", points=[simple_point("c8", 5.0, repeat=r) for r in (1, 2, 3)]),
            Deployment("beta", points=[simple_point("c8", 6.0, repeat=r) for r in (1, 2, 3)]),
        ],
        started=started(0),
    )
    resources = {
        "warehouse": DuckDBResource(database=str(db)),
        "plan": BenchPlan(path=str(plan_path), output_dir=str(tmp / "runs")),
    }
    return run_id, db, tmp, resources


def test_every_registered_report_is_an_asset_the_html_report_waits_for():
    by_name = {a.key.to_user_string(): a for a in REPORT_ASSETS}
    assert list(by_name) == [*(s.name for s in REPORTS), "html_report"]
    for s in REPORTS:
        deps = {k.to_user_string() for k in by_name[s.name].asset_deps[by_name[s.name].key]}
        assert set(STAGES) <= deps, s.name  # every stage's blocking check gates it
        if s.sql and s.sql.isidentifier():
            assert (SQL_DIR / f"{s.sql}.sql").exists(), s.name
    assert {k.to_user_string() for k in html_report.asset_deps[html_report.key]} == {s.name for s in REPORTS}


def test_names_and_flags_are_unique():
    with pytest.raises(ValueError, match="already registered"):
        register(ReportSpec("head_to_head", "again", "again", sql="SELECT 1"))
    with pytest.raises(ValueError, match="--capacity"):
        register(ReportSpec("other", "other", "other", sql="SELECT 1", cli="capacity"))
    with pytest.raises(ValueError, match="needs its sql"):
        ReportSpec("no_sql", "no sql", "no sql")
    assert [s.name for s in REPORTS].count("other") == 0


def test_a_toy_report_through_the_registry(env, capsys):
    run_id, db, tmp, res = env
    with registered(TOY):
        # the asset: its table and figures as metadata
        asset = report_asset(TOY)
        assert set(STAGES) <= {k.to_user_string() for k in asset.asset_deps[asset.key]}
        result = asset(dg.build_asset_context(), warehouse=res["warehouse"])
        meta = result.metadata
        assert meta["run_id"] == run_id and meta["dagster/row_count"].value == 2
        rows = [dict(r.data) for r in meta["toy_report"].records]
        assert rows == [
            {"engine": "alpha", "load_runs": 3, "completed": 150.0},
            {"engine": "beta", "load_runs": 3, "completed": 180.0},
        ]
        assert meta["alpha/completed"].value == 150.0 and meta["beta/load_runs"].value == 3.0

        # the console: `wattbench report --toy`
        assert main(["report", "--toy", "--db", str(db)]) == 0
        out = capsys.readouterr().out
        assert f"Toy report, run {run_id}:" in out
        assert "| alpha" in out and "150" in out and "180" in out

        # the HTML report: a section with its title, description and table
        html_report(dg.build_asset_context(), plan=res["plan"], warehouse=res["warehouse"])
        page = (tmp / "runs" / run_id / "report.html").read_text()
        assert "Toy report" in page and "a report made in a test, through the registry" in page
        section = page[page.index("Toy report") :]
        assert "<td>alpha</td>" in section and "<td>150</td>" in section
    # gone with the block: no flag, no section
    assert TOY not in REPORTS
    with pytest.raises(SystemExit):
        main(["report", "--toy", "--db", str(db)])
