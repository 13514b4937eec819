"""The report assets on a synthetic warehouse (invoked directly, no bench agent), the pictures, and the offline
HTML report."""

import re
from pathlib import Path


import dagster as dg
import pandas as pd
import pytest
import yaml
from dagster_duckdb import DuckDBResource

from assets.common import run_id_of
from assets.reports import REPORT_ASSETS, STAGES, capacity_plan, head_to_head, html_report, load_point_report, regressions
from resources.bench_plan import BenchPlan
from assets import reporting

from .synth import Deployment, Point, simple_point, started, ttfts, write_run

PNG = b"\x89PNG\r\n\x1a\n"


def _deployments(rps_a: float = 10.0):
    return [
        Deployment("alpha", tp=2, points=[
            simple_point("c8", rps_a, output_tokens=16),
            Point("bursty", "gamma-r6-b0.25", ttft_ms=ttfts(30, 200, 100), shape="gamma", concurrency=None, rate=6.0,
                  output_tokens=16),
        ]),
        Deployment("beta", points=[simple_point("c8", 6.0, output_tokens=16), simple_point("c32", 12.0, output_tokens=16)]),
    ]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("assets")
    db = tmp / "w.duckdb"
    plan = yaml.safe_load((Path(__file__).parents[1] / "data" / "smoke_plan.yaml").read_text())
    plan["capacity"] = {"steady_qps": 20, "peak_qps": 50, "burst_hours_per_day": 4, "input_tokens": 512,
                        "output_tokens": 16}
    plan_path = tmp / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan))
    resources = {"warehouse": DuckDBResource(database=str(db)),
                 "plan": BenchPlan(path=str(plan_path), output_dir=str(tmp / "runs"))}
    write_run(db, tmp, "earlier", _deployments(10.0), started=started(0))
    run_id = run_id_of(dg.build_asset_context())  # directly invoked assets all see this run id ('EPHEMERAL')
    write_run(db, tmp, run_id, _deployments(7.0), started=started(1))   # alpha 30% slower than before
    return run_id, tmp, resources


def ctx():
    return dg.build_asset_context()


def test_report_assets_are_wired_and_gated(env):
    keys = {a.key.to_user_string() for a in REPORT_ASSETS}
    assert keys == {"load_point_report", "head_to_head", "capacity_plan", "regressions", "html_report"}
    for asset in (load_point_report, head_to_head, capacity_plan, regressions):
        deps = {k.to_user_string() for k in asset.asset_deps[asset.key]}
        assert set(STAGES) <= deps, asset.key        # every stage's blocking check gates the report
        spec = next(iter(asset.specs))
        assert spec.description and spec.owners and spec.kinds
    assert {k.to_user_string() for k in html_report.asset_deps[html_report.key]} == {
        "load_point_report", "head_to_head", "capacity_plan", "regressions"}


def test_assets_give_tables_pictures_and_float_figures(env):
    _, _, res = env
    lp = load_point_report(ctx(), warehouse=res["warehouse"])
    assert lp.metadata["load_points"] == 4
    assert isinstance(lp.metadata["peak_output_tok_s"], dg.FloatMetadataValue)
    assert lp.metadata["plots"].value.count("data:image/png;base64,") == 4
    h2h = head_to_head(ctx(), warehouse=res["warehouse"])
    assert "@ steady:c8" in h2h.metadata["head_to_head"].value
    assert isinstance(h2h.metadata["alpha/peak_output_tok_s"], dg.FloatMetadataValue)
    cap = capacity_plan(ctx(), plan=res["plan"], warehouse=res["warehouse"])
    assert "steady 20 req/s, peak 50 req/s" in cap.metadata["traffic_profile"]
    assert cap.metadata["hybrid_monthly_gpu_usd"].value > 0
    assert cap.metadata["best_single_pool_monthly_gpu_usd"].value >= cap.metadata["cheapest_monthly_gpu_usd"].value
    assert "data:image/png;base64," in cap.metadata["picture"].value
    reg = regressions(ctx(), warehouse=res["warehouse"])
    assert reg.metadata["regressions"].value >= 1
    assert "REGRESSION" in reg.metadata["flagged"].value
    (check,) = reg.check_results
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN


def test_html_report_is_self_contained(env):
    run_id, tmp, res = env
    html_report(ctx(), plan=res["plan"], warehouse=res["warehouse"])
    html = (tmp / "runs" / run_id / "report.html").read_text()
    assert "http://" not in html and "https://" not in html           # nothing to fetch: works offline
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert html.count("data:image/png;base64,") == 5
    for heading in ("Head to head", "Capacity plan", "Hybrid topology", "Against the previous run", "Every load point"):
        assert heading in html
    assert "EMULATED" in html and "REGRESSION" in html and "rule pick" in html


def test_pictures_are_png_even_without_data():
    empty_points = pd.DataFrame(columns=["engine", "shape", "concurrency", "achieved_concurrency", "output_tokens_per_j",
                                         "e2e_p50_ms", "output_tok_s", "load_point_id", "precision", "tp"])
    pictures = [
        reporting.plot_throughput_latency(empty_points, "emulated"),
        reporting.plot_tokens_per_joule(empty_points, "emulated"),
        reporting.plot_power_trace(pd.DataFrame(columns=["deployment_id", "gpu_uuid", "t_ns", "power_w"]),
                                   pd.DataFrame(columns=["deployment_id", "load_point_id", "window_start_ns",
                                                         "window_end_ns"]), "emulated"),
        reporting.plot_ttft_cdf(pd.DataFrame({"load_point_id": [], "ttft_ms": [], "in_window": pd.Series([], dtype=bool),
                                              "error_kind": []}), "emulated"),
        reporting.plot_capacity(pd.DataFrame(), "emulated", note="no traffic profile"),
    ]
    for png in pictures:
        assert png.startswith(PNG) and len(png) > 1000


def test_write_html_escapes_and_embeds(tmp_path):
    path = reporting.write_html(tmp_path / "r.html", "t <x>", "measured", "run-1",
                                [("A <section>", "<p>ok</p>")], {"pic": PNG + b"rest"}, ["note & more"])
    html = path.read_text()
    assert "MEASURED" in html and "A &lt;section&gt;" in html and "note &amp; more" in html
    assert re.search(r"src='data:image/png;base64,[A-Za-z0-9+/=]+'", html)
