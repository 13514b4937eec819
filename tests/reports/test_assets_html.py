"""The report assets on a synthetic warehouse (invoked directly, no bench agent): tables with 95% intervals, the
pictures, Dagster table metadata, and the offline HTML report with its interactive charts."""

import re
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml
from dagster_duckdb import DuckDBResource

from assets.benchmark_run import dagster_run_id
from assets.reports import (
    REPORT_ASSETS,
    STAGES,
    capacity_plan,
    head_to_head,
    html_report,
    load_point_report,
    regressions,
    slo_capacity,
)
from resources.bench_plan import BenchPlan
from wattbench.report import charts, pictures, render
from wattbench.report.specs import REPORTS
from wattbench.warehouse import connect, run_sql

from .synth import Deployment, Point, emulated_interval, simple_point, started, ttfts, write_run

PNG = b"\x89PNG\r\n\x1a\n"
ALPHA_C8_RPS = (1.0, 1.05, 1.1)  # alpha's c8 throughput per repeat, as a share of the run's rps


def _deployments(rps_a: float = 10.0):
    """alpha (tp 2, idle power known): c8 and c32 and a gamma point, three repeats each; beta: c8 and c32, three
    repeats each. Repeats differ in throughput, so repeat-level figures get a t interval."""
    alpha, beta = [], []
    for r in (1, 2, 3):
        alpha += [
            simple_point("c8", rps_a * ALPHA_C8_RPS[r - 1], output_tokens=16, repeat=r, energy_j=5000.0 + 100 * r),
            simple_point(
                "c32", 2 * rps_a * (1 + 0.02 * r), output_tokens=16, concurrency=32, repeat=r, energy_j=8000.0 + 150 * r
            ),
            Point(
                "bursty",
                "gamma-r6-b0.25",
                ttft_ms=ttfts(30, 200, 100, seed=r),
                shape="gamma",
                concurrency=None,
                rate=6.0,
                output_tokens=16,
                repeat=r,
                energy_j=3000.0 + 50 * r,
            ),
        ]
        beta += [
            simple_point("c8", 6.0 * (1 + 0.03 * r), output_tokens=16, repeat=r, energy_j=5200.0 - 80 * r),
            simple_point(
                "c32", 12.0 * (1 + 0.01 * r), output_tokens=16, concurrency=32, repeat=r, energy_j=8500.0 + 60 * r
            ),
        ]
    return [Deployment("alpha", tp=2, idle_w=(150.0, 170.0), points=alpha), Deployment("beta", points=beta)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("assets")
    db = tmp / "w.duckdb"
    plan = yaml.safe_load((Path(__file__).parents[1] / "data" / "smoke_plan.yaml").read_text())
    plan["capacity"] = {
        "steady_qps": 20,
        "peak_qps": 50,
        "burst_hours_per_day": 4,
        "input_tokens": 512,
        "output_tokens": 16,
    }
    plan_path = tmp / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan))
    resources = {
        "warehouse": DuckDBResource(database=str(db)),
        "plan": BenchPlan(path=str(plan_path), output_dir=str(tmp / "runs")),
    }
    write_run(db, tmp, "earlier", _deployments(10.0), started=started(0))
    run_id = dagster_run_id(dg.build_asset_context())  # directly invoked assets all see this run id ('EPHEMERAL')
    write_run(db, tmp, run_id, _deployments(7.0), started=started(1))  # alpha 30% slower than before
    return run_id, tmp, resources


def ctx():
    return dg.build_asset_context()


def _records(table_value) -> list[dict]:
    return [dict(r.data) for r in table_value.records]


def test_report_assets_are_wired_and_gated(env):
    keys = {a.key.to_user_string() for a in REPORT_ASSETS}
    assert keys == {s.name for s in REPORTS} | {"html_report"}  # the registry's reports (wattbench/report/specs.py)
    assert {"load_point_report", "head_to_head", "slo_capacity", "capacity_plan", "regressions", "html_report"} <= keys
    for asset in (load_point_report, head_to_head, slo_capacity, capacity_plan, regressions):
        deps = {k.to_user_string() for k in asset.asset_deps[asset.key]}
        assert set(STAGES) <= deps, asset.key  # every stage's blocking check gates the report
        spec = next(iter(asset.specs))
        assert spec.description and spec.owners and spec.kinds
    html_deps = {k.to_user_string() for k in html_report.asset_deps[html_report.key]}
    assert html_deps == {s.name for s in REPORTS}
    assert {"load_point_report", "head_to_head", "slo_capacity", "capacity_plan", "regressions"} <= html_deps
    assert "slo_capacity" in {k.to_user_string() for k in capacity_plan.asset_deps[capacity_plan.key]}


def test_load_point_summary_is_a_dagster_table_with_intervals(env):
    """One row per engine x point (not per repeat), each figure 'estimate [lo, hi]' with the t interval over the three
    repeats, tokens per joule above idle right after the total."""
    _, _, res = env
    lp = load_point_report(ctx(), warehouse=res["warehouse"])
    assert lp.metadata["load_points"] == 5 and lp.metadata["load_runs"] == 15
    assert isinstance(lp.metadata["peak_output_tok_s"], dg.FloatMetadataValue)
    assert lp.metadata["plots"].value.count("data:image/png;base64,") == 6  # the frontiers too
    table = lp.metadata["summary"]
    assert isinstance(table, dg.TableMetadataValue)
    names = [c.name for c in table.schema.columns]
    total, above = names.index("tokens per joule, total (tok/J)"), names.index("tokens per joule, above idle (tok/J)")
    assert above == total + 1
    rows = {(r["engine config"], r["workload:point"]): r for r in _records(table)}
    assert set(rows) == {
        ("alpha", "steady:c8"),
        ("alpha", "steady:c32"),
        ("alpha", "bursty:gamma-r6-b0.25"),
        ("beta", "steady:c8"),
        ("beta", "steady:c32"),
    }
    per_repeat = np.array([round(7.0 * s * 10) * 16 / 10.0 for s in ALPHA_C8_RPS])  # tokens in the window / 10 s
    want = emulated_interval(list(per_repeat))  # one server start, the emulator's between-start prior
    cell = rows[("alpha", "steady:c8")]["output tok/s (window)"]
    est, lo, hi = map(float, re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell).groups())
    assert (est, lo, hi) == tuple(pytest.approx(x, rel=1e-3) for x in want)
    assert rows[("alpha", "steady:c8")]["repeats"] == 3
    assert rows[("beta", "steady:c8")]["tokens per joule, above idle (tok/J)"] == "NULL"  # beta has no idle baseline
    assert re.fullmatch(r"\S+ \[\S+, \S+\]", rows[("alpha", "steady:c8")]["tokens per joule, above idle (tok/J)"])
    assert "another server start or machine: 95% interval over 3 repeats of one start" in lp.metadata["intervals"].value


def test_head_to_head_is_a_dagster_table_too(env):
    _, _, res = env
    h2h = head_to_head(ctx(), warehouse=res["warehouse"])
    assert "@ steady:c" in h2h.metadata["head_to_head"].value
    assert isinstance(h2h.metadata["alpha/peak_output_tok_s"], dg.FloatMetadataValue)
    table = h2h.metadata["head_to_head_table"]
    assert [c.name for c in table.schema.columns] == ["figure", "alpha", "beta"]
    rows = {r["figure"]: r for r in _records(table)}
    assert re.fullmatch(r"\S+ \[\S+, \S+\] @ steady:c32", rows["peak output throughput (tok/s)"]["alpha"])
    assert rows["tokens per joule above idle at SLO (best) (tok/J)"]["beta"].startswith("NULL (no idle baseline")


def test_capacity_and_regressions(env):
    _, _, res = env
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


EXTERNAL = re.compile(
    r"""(?:src|href|action|srcset)\s*=\s*["']?\s*(?:https?:)?//|@import|<link\b|url\(\s*["']?(?:https?:)?//""",
    re.IGNORECASE,
)


def test_html_report_is_self_contained_with_interactive_charts(env):
    run_id, tmp, res = env
    result = html_report(ctx(), plan=res["plan"], warehouse=res["warehouse"])
    html = (tmp / "runs" / run_id / "report.html").read_text()
    assert not EXTERNAL.search(html)  # nothing to fetch: works offline
    scripts = re.findall(r"<script\b([^>]*)>", html)
    assert len(scripts) == 2 and all("src" not in attrs for attrs in scripts)  # the inlined bundle, the embed calls
    bundle, _ = charts.javascript_bundle()
    assert html.count(bundle) == 1 and "vegaEmbed" in bundle
    assert html.count("data:image/png;base64,") == 7  # the static copies (frontiers too) and the capacity plan
    divs = re.findall(r"<div class='chart' id='(chart-\d+)' data-chart='([^']+)'>", html)
    assert [name for _, name in divs] == [
        "power trace",
        "TTFT CDF",
        "E2E CDF",
        "throughput vs latency",
        "tokens per joule vs load",
    ]
    assert result.metadata["interactive_charts"].value == 5
    for heading in (
        "Head to head",
        "Every load point, summarised over its repeats",
        "Engines compared at each point",
        "Capacity plan",
        "Hybrid topology",
        "Against the previous run",
        "Every load run (each repeat)",
        "Interactive charts",
    ):
        assert heading in html
    assert "EMULATED" in html and "REGRESSION" in html and "rule pick" in html
    head = re.search(r"<thead>(.*?)</thead>", html[html.index("summarised over its repeats") :], re.S).group(1)
    cols = re.findall(r"<th>(.*?)</th>", head)
    assert cols.index("tokens per joule, above idle (tok/J)") == cols.index("tokens per joule, total (tok/J)") + 1
    contrasts = html[html.index("Engines compared at each point") : html.index("Capacity plan")]
    assert "beta / alpha" in contrasts and re.search(r"x\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", contrasts)
    assert re.search(r"(alpha better|beta better|no significant difference)", contrasts)


def _values(spec: dict, data: dict) -> list[dict]:
    """The rows of a chart's inline data (Altair moves them to the top-level `datasets` by name)."""
    return data["values"] if "values" in data else spec["datasets"][data["name"]]


def test_chart_specs_carry_the_summaries(env):
    """The interactive charts draw the point summaries: one throughput mark per engine x point with its interval,
    the Pareto line over fixed concurrency only, total and above-idle tokens per joule, engines in one colour each."""
    run_id, _, res = env
    with connect(res["warehouse"].database, read_only=True) as con:
        frames = render.report_frames(con, run_id)
        summary = run_sql(con, "load_points", {"run_id": run_id})
    specs = render.interactive_charts(frames, "emulated")
    tl = specs["throughput vs latency"]
    datasets = [_values(tl, layer["data"]) for layer in tl["layer"]]
    points = datasets[1]
    assert len(points) == len(summary) == 5
    row = next(p for p in points if p["engine"] == "alpha" and p["point"] == "steady:c8")
    ref = summary[(summary["engine"] == "alpha") & (summary["point_label"] == "c8")].iloc[0]
    assert (row["output_tok_s_lo"], row["output_tok_s_hi"]) == (ref["output_tok_s_lo"], ref["output_tok_s_hi"])
    frontier = datasets[0]
    assert frontier and all(
        f["e2e_p50_ms"] != next(p for p in points if p["point"] == "bursty:gamma-r6-b0.25")["e2e_p50_ms"]
        for f in frontier
        if f["engine"] == "alpha"
    )
    tpj = specs["tokens per joule vs load"]
    measures = {r["measure"] for r in _values(tpj, tpj["data"])}
    assert measures == {"total (GPU energy counter)", "above idle (idle W with the model loaded subtracted)"}
    color = tl["layer"][0]["encoding"]["color"]["scale"]
    assert color["domain"] == ["alpha", "beta"] and len(set(color["range"])) == 2
    cdf = specs["TTFT CDF"]
    order = cdf["spec"]["layer"][0]["encoding"]["color"]["scale"]["domain"]
    assert order == ["steady:c8", "steady:c32", "bursty:gamma-r6-b0.25"]  # load order, not string order
    (zoom,) = specs["power trace"]["params"]
    assert zoom["bind"] == "scales" and zoom["select"]["encodings"] == ["x"]  # wheel zooms, drag pans (x)


def test_pictures_are_png_even_without_data():
    empty_points = pd.DataFrame(
        columns=[
            "engine",
            "workload",
            "point_label",
            "shape",
            "concurrency",
            "achieved_concurrency",
            "output_tokens_per_j",
            "output_tokens_per_j_above_idle",
            "e2e_p50_ms",
            "output_tok_s",
            "repeats",
            "precision",
            "tp",
        ]
    )
    empty_requests = pd.DataFrame(
        columns=["engine", "workload", "point_label", "shape", "concurrency", "rate", "ttft_ms", "e2e_ms"]
    )
    pngs = [
        pictures.plot_throughput_latency(empty_points, "emulated"),
        pictures.plot_tokens_per_joule(empty_points, "emulated"),
        pictures.plot_power_trace(
            pd.DataFrame(columns=["deployment_id", "gpu_uuid", "t_ns", "power_w"]),
            pd.DataFrame(
                columns=["deployment_id", "engine", "point_label", "repeat", "window_start_ns", "window_end_ns"]
            ),
            "emulated",
        ),
        pictures.plot_latency_cdf(empty_requests, "emulated", "ttft_ms"),
        pictures.plot_latency_cdf(empty_requests, "emulated", "e2e_ms"),
        pictures.plot_capacity(pd.DataFrame(), "emulated", note="no traffic profile"),
    ]
    for png in pngs:
        assert png.startswith(PNG) and len(png) > 1000
    assert charts.throughput_latency_chart(empty_points, "emulated") is None
    assert charts.cdf_chart(empty_requests, "emulated") is None


def test_write_html_escapes_and_embeds(tmp_path):
    hostile = "</script><script>window.pwned = 1</script><!--"
    spec = {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.4.1.json",
        "title": hostile,
        "data": {"values": [{"a": 1}]},
        "mark": "point",
        "encoding": {"x": {"field": "a", "type": "quantitative"}},
    }
    path = render.write_html(
        tmp_path / "r.html",
        "t <x>",
        "measured",
        "run-1",
        [("A <section>", "<p>ok</p>")],
        {"pic": PNG + b"rest"},
        ["note & more"],
        interactive={"x <chart>": spec, "empty": None},
    )
    html = path.read_text()
    assert "MEASURED" in html and "A &lt;section&gt;" in html and "note &amp; more" in html
    assert re.search(r"src='data:image/png;base64,[A-Za-z0-9+/=]+'", html)
    assert hostile not in html and "<\\/script><script>window.pwned" in html
    assert "data-chart='x &lt;chart&gt;'" in html and "empty: nothing to draw for this run" in html
    without = render.write_html(tmp_path / "s.html", "t", "emulated", "run-1", [], {"pic": PNG}, [])
    assert "<script" not in without.read_text()  # no chart, no JavaScript
