"""The HTML report's interactive charts in a real browser, offline: the html_report asset writes the report of a
warehouse made from result bundles (tests/reports/synth.py), and Debian's headless Chromium opens it through
Playwright with the network cut (an offline context, and every request that is not the file itself aborted and
recorded). Every chart must render (a canvas or svg inside its vega-embed container) with nothing fetched and no
script error; the power trace zooms on the mouse wheel, the TTFT CDF answers a hover with a tooltip, the
throughput chart's tooltip carries the 95% intervals. Skips without /usr/bin/chromium or Playwright."""

from __future__ import annotations

import os
import re
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_duckdb import DuckDBResource

from assets.benchmark_run import dagster_run_id
from assets.reports import html_report
from resources.bench_plan import BenchPlan
from tests.reports.synth import Deployment, Point, simple_point, ttfts, write_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("WATTBENCH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("WATTBENCH_SCREENSHOTS_DIR", "/tmp/wattbench-ui-screenshots"))  # synthetic: never docs/
CHARTS = ["power trace", "TTFT CDF", "E2E CDF", "throughput vs latency", "tokens per joule vs load"]

if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium; .ci/run does)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed (pip install -e '.[dev]')"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """Two engines, c8/c32 and a gamma point, three repeats each, written by the html_report asset."""
    tmp = tmp_path_factory.mktemp("report")
    db = tmp / "w.duckdb"
    plan = yaml.safe_load((REPO / "tests" / "data" / "smoke_plan.yaml").read_text())
    plan_path = tmp / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan))
    deps = []
    for name, speed in (("trtllm-like", 1.15), ("vllm-like", 1.0)):
        points = []
        for r in (1, 2, 3):
            points += [
                simple_point(
                    "c8", 5.0 * speed * (1 + 0.02 * r), ttft=30.0, output_tokens=16, repeat=r, energy_j=3000.0 + 40 * r
                ),
                simple_point(
                    "c32",
                    11.0 * speed * (1 + 0.02 * r),
                    ttft=60.0,
                    concurrency=32,
                    output_tokens=16,
                    repeat=r,
                    energy_j=5000.0 + 60 * r,
                ),
                Point(
                    "bursty",
                    "gamma-r6-b0.25",
                    ttft_ms=ttfts(40, 45, 20, seed=r),
                    shape="gamma",
                    concurrency=None,
                    rate=6.0,
                    output_tokens=16,
                    repeat=r,
                    energy_j=2000.0 + 30 * r,
                ),
            ]
        deps.append(Deployment(name, tp=1, idle_w=(90.0, 100.0), points=points))
    run_id = dagster_run_id(dg.build_asset_context())
    write_run(db, tmp, run_id, deps)
    html_report(
        dg.build_asset_context(),
        plan=BenchPlan(path=str(plan_path), output_dir=str(tmp / "runs")),
        warehouse=DuckDBResource(database=str(db)),
    )
    return tmp / "runs" / run_id / "report.html"


def test_interactive_charts_render_offline(report):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            fetched, problems = [], []

            def route(r):
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:
                    fetched.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.on(
                "console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
            )
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.goto(report.as_uri())
            page.wait_for_function(
                "() => window.wattbenchCharts && "
                "Object.keys(window.wattbenchCharts).length === document.querySelectorAll('div.chart').length",
                timeout=60_000,
            )

            # 1. every chart rendered: a canvas or svg inside its vega-embed container, none failed
            rendered = page.eval_on_selector_all(
                "div.chart",
                "els => els.map(e => [e.dataset.chart, e.classList.contains('vega-embed'), "
                "!!e.querySelector('canvas, svg'), e.classList.contains('chart-error')])",
            )
            assert [r[0] for r in rendered] == CHARTS
            assert all(embed and drawn and not failed for _, embed, drawn, failed in rendered), rendered
            sizes = page.eval_on_selector_all("div.chart canvas", "cs => cs.map(c => [c.width, c.height])")
            assert len(sizes) == len(CHARTS) and all(w > 200 and h > 150 for w, h in sizes), sizes
            assert fetched == [], f"the report fetched {fetched}"
            assert problems == [], problems

            # 2. the power trace zooms: the mouse wheel narrows its x domain
            trace = page.locator("div.chart[data-chart='power trace'] canvas")
            trace.scroll_into_view_if_needed()
            chart_id = page.locator("div.chart[data-chart='power trace']").get_attribute("id")
            before = page.evaluate(f"() => window.wattbenchCharts['{chart_id}'].scale('x').domain()")
            box = trace.bounding_box()
            page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.5)
            page.mouse.wheel(0, -400)
            page.wait_for_function(
                f"() => {{ const d = window.wattbenchCharts['{chart_id}'].scale('x').domain(); "
                f"return d[1] - d[0] < {before[1] - before[0]} * 0.95; }}",
                timeout=10_000,
            )

            # 3. the TTFT CDF answers a hover: the nearest quantile's tooltip
            cdf = page.locator("div.chart[data-chart='TTFT CDF'] canvas")
            cdf.scroll_into_view_if_needed()
            box = cdf.bounding_box()
            tip = page.locator("#vg-tooltip-element")
            for fx in (0.15, 0.25, 0.35, 0.45):
                page.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * 0.55)
                page.wait_for_timeout(250)
                if tip.count() and "visible" in (tip.get_attribute("class") or ""):
                    break
            assert "visible" in (tip.get_attribute("class") or ""), "no tooltip on the TTFT CDF"
            assert re.search(r"TTFT \(ms\)\s+\d+\.\d", tip.inner_text()) and "share of requests" in tip.inner_text()

            # 4. a throughput point's tooltip names the point and its 95% intervals
            tl_id = page.locator("div.chart[data-chart='throughput vs latency']").get_attribute("id")
            page.locator(f"#{tl_id}").scroll_into_view_if_needed()
            x, y = page.evaluate(
                f"""() => {{ const v = window.wattbenchCharts['{tl_id}'];
                    const d = v.data(Object.keys(v.getState({{data: () => true, signals: () => false}}).data)
                        .find(n => (v.data(n) || []).some(r => r.point === 'steady:c32' && r.engine === 'vllm-like')))
                        .find(r => r.point === 'steady:c32' && r.engine === 'vllm-like');
                    const r = v.container().querySelector('canvas').getBoundingClientRect();
                    const o = v.origin(), p = v.padding();   // the plot's corner: padding + origin
                    return [r.left + p.left + o[0] + v.scale('x')(d.e2e_p50_ms),
                            r.top + p.top + o[1] + v.scale('y')(d.output_tok_s)]; }}"""
            )
            page.mouse.move(x + 12, y + 12)
            page.mouse.move(x, y)
            page.wait_for_timeout(300)
            text = tip.inner_text()
            assert "steady:c32" in text and "vllm-like" in text
            assert re.search(r"output tok/s \[95% interval\]\s+\d+(\.\d+)? \[\d+(\.\d+)?, \d+(\.\d+)?\]", text), text
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "report-charts.png"), full_page=False)
        finally:
            browser.close()
