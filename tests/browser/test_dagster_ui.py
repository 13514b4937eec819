"""The Dagster UI in a real browser: `dagster dev` on a loopback port over this code location, opened in Debian's
headless Chromium through Playwright. Finds every stage on the asset graph, launches a materialization of the plan
through the UI's "Materialize all" dialog (picking the (model, scenario) partition), waits for the run to succeed,
and checks that the report's tables and pictures show on the html_report and head_to_head asset pages, and that
the run's HTML report renders its interactive charts offline (nothing fetched). Then launches a backfill over two
models of the scenario from the same dialog ("Launch backfill"), opens the backfill's page from the toast and waits
for both partitions' runs to succeed.
Screenshots go to docs/img/ (ui-asset-graph.png, ui-run-success.png, ui-asset-head-to-head.png, ui-asset-report.png,
report-html.png, ui-backfill.png) for `make test-browser`, else to WATTBENCH_SCREENSHOTS_DIR
(/tmp/wattbench-ui-screenshots).

The plan is the small tests/data/smoke_plan.yaml (WATTBENCH_PLAN), so its stem `smoke_plan` is a scenario of the
served code location and the run takes well under a minute. Skips (with the reason) without /usr/bin/chromium or
Playwright; `.ci/run` installs chromium. Never runs `playwright install`: the browser is the system's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("WATTBENCH_CHROMIUM", "/usr/bin/chromium"))
# Screenshots go to docs/img/ only when asked (`make test-browser`); a plain `make test` leaves the tree clean.
SHOTS = (
    (REPO / "docs" / "img")
    if os.environ.get("WATTBENCH_SCREENSHOTS") == "docs"
    else Path(os.environ.get("WATTBENCH_SCREENSHOTS_DIR", "/tmp/wattbench-ui-screenshots"))
)
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
STAGES = [
    "engine_builds",
    "deployments",
    "load_runs",
    "requests",
    "gpu_samples",
    "server_metrics",
    "load_point_report",
    "head_to_head",
    "slo_capacity",
    "capacity_plan",
    "regressions",
    "html_report",
]
MODEL, SCENARIO = "llama-3.1-8b", "smoke_plan"
PARTITION = f"{MODEL}|{SCENARIO}"

if not CHROMIUM.exists():
    pytest.skip(
        f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium; .ci/run does)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed (pip install -e '.[dev]')"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(url: str, query: str, variables: dict | None = None) -> dict:
    r = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=30)
    r.raise_for_status()
    body = r.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


RUNS = """query($partition: String!) { runsOrError(filter: {tags: [{key: "dagster/partition", value: $partition}]}) {
  ... on Runs { results { runId status } } } }"""


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WATTBENCH_DB": str(tmp / "wattbench.duckdb"),
        "WATTBENCH_RUNS_DIR": str(tmp / "runs"),
        "WATTBENCH_PLAN": str(REPO / "tests" / "data" / "smoke_plan.yaml"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    # the model partition exists before the UI opens (wattbench run, the sensor or the UI's "Add partition" add it)
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import dagster as dg; dg.DagsterInstance.get().add_dynamic_partitions('models', [{MODEL!r}])",
        ],
        cwd=REPO,
        env=env,
        check=True,
        timeout=120,
    )
    port = _free_port()
    log = (tmp / "dagster-dev.log").open("w")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "dagster"),
            "dev",
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150
        while True:
            assert proc.poll() is None, f"dagster dev exited: {(tmp / 'dagster-dev.log').read_text()[-3000:]}"
            try:
                data = _graphql(
                    url,
                    "{ workspaceOrError { ... on Workspace { locationEntries { name "
                    "locationOrLoadError { __typename } } } } }",
                )
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and all(
                    e["locationOrLoadError"] and e["locationOrLoadError"]["__typename"] == "RepositoryLocation"
                    for e in entries
                ):
                    break
                if any(
                    e["locationOrLoadError"] and e["locationOrLoadError"]["__typename"] == "PythonError"
                    for e in entries
                ):
                    pytest.fail(f"code location failed to load: {entries}")
            except (httpx.HTTPError, KeyError, TypeError):
                pass
            assert time.monotonic() < deadline, "dagster dev did not serve the code location within 150 s"
            time.sleep(1.0)
        yield url, tmp
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # dagster dev and the daemon/webserver/code server it started
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


# The webserver shows a community sign-up dialog on loopback origins about a second after the first page loads
# (later on a slow machine); the dialog's own "dismissed" flag in localStorage keeps it away.
NO_NUX = "window.localStorage.setItem('communityNux', JSON.stringify('1'));"


def _clear_overlays(page, settle_ms: int = 2500) -> None:
    """Wait for late dialogs to appear, then close whatever modal overlay is open (its backdrop would swallow
    the next click)."""
    page.wait_for_timeout(settle_ms)
    backdrop = page.locator(".bp5-overlay-backdrop").filter(visible=True)
    for _ in range(10):
        if not backdrop.count():
            return
        for name in ("Skip", "Close", "Dismiss", "Not now", "Got it"):
            button = page.get_by_role("button", name=name).filter(visible=True)
            if button.count():
                button.first.click()
                break
        else:
            page.keyboard.press("Escape")
        page.wait_for_timeout(500)
    assert not backdrop.count(), "a modal dialog stays open over the page"


def _launch_dialog(page):
    """The "Launch runs to materialize …" dialog that "Materialize all…" opens."""
    return page.get_by_role("dialog").filter(has_text="Launch runs to materialize")


def _pick(page, index: int, *values: str) -> None:
    """Open the index-th partition picker of the launch dialog (0: model, 1: scenario) and tick each of `values`."""
    expect = sync_api.expect
    trigger = _launch_dialog(page).locator("[aria-haspopup='dialog']").nth(index)
    trigger.click()
    box = page.get_by_placeholder("Filter partitions")
    expect(box).to_have_count(1)  # the picker just opened, and only it
    picker = page.locator(".dagster-popover").filter(has=box)
    for value in values:
        box.fill(value)
        # a menu item per partition key, named "<key> <key>" (the key and its tooltip)
        item = picker.get_by_role("menuitem", name=re.compile(rf"^{re.escape(value)}( |$)"))
        item.click()
        expect(item.get_by_role("checkbox")).to_be_checked()
    page.keyboard.press("Escape")
    # the picker must be closed before the next one opens, or two filter boxes are on the page
    expect(box).to_have_count(0, timeout=10_000)
    for value in values:
        expect(trigger).to_contain_text(value)  # a tag per ticked key in the picker's box


def _asset_graph_page(browser, url: str):
    """A new page on the asset graph, with no dialog in the way."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.add_init_script(NO_NUX)
    page.set_default_timeout(30_000)
    page.goto(f"{url}/asset-groups", wait_until="networkidle")
    _clear_overlays(page)
    return page


def test_ui_graph_materialize_and_report(webserver, browser):
    url, tmp = webserver
    # 1. the asset graph shows every stage
    page = _asset_graph_page(browser, url)
    graph = page.locator("[data-testid='asset-graph'], .react-flow, svg").first
    for name in STAGES:
        page.get_by_text(name, exact=True).filter(visible=True).first.wait_for()
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "ui-asset-graph.png"))
    assert graph.count()

    # 2. launch the materialization from the UI: Materialize all -> pick (model, scenario) -> Launch 1 run
    _clear_overlays(page, settle_ms=0)
    page.get_by_role("button", name="Materialize all…").click()
    page.get_by_text("Launch runs to materialize").wait_for()
    _pick(page, 0, MODEL)
    _pick(page, 1, SCENARIO)
    page.get_by_role("button", name="Launch 1 run").click()
    page.get_by_text("Launched run").wait_for()

    # 3. wait for success (GraphQL: the same API the UI reads), then show the run page
    deadline = time.monotonic() + 240
    run = None
    while time.monotonic() < deadline:
        runs = _graphql(url, RUNS, {"partition": PARTITION})["runsOrError"]["results"]
        run = runs[0] if runs else None
        if run and run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    assert run is not None, "the UI launched no run for the partition"
    assert run["status"] == "SUCCESS", f"run {run['runId']} ended {run['status']}: see {tmp / 'dagster-dev.log'}"
    page.goto(f"{url}/runs/{run['runId']}", wait_until="networkidle")
    page.get_by_text("Success", exact=True).filter(visible=True).first.wait_for()
    page.wait_for_timeout(1500)
    page.screenshot(path=str(SHOTS / "ui-run-success.png"))

    # 4. the report's table and plots on the asset page of the partition (metadata of its latest materialization)
    partition = quote(PARTITION, safe="")
    page.goto(f"{url}/assets/html_report?view=partitions&partition={partition}", wait_until="networkidle")
    page.get_by_text("Latest materialization").filter(visible=True).first.wait_for()
    for key in ("run_id", "peak_output_tok_s", "best_output_tokens_per_j", "head_to_head", "power_trace"):
        page.locator("tr", has_text=key).filter(visible=True).first.wait_for()
    page.locator("tr", has_text="head_to_head").get_by_text("[Show Markdown]").click()
    page.get_by_text("peak output throughput (tok/s)").filter(visible=True).first.wait_for()
    page.get_by_text("tokens per joule at SLO (best) (tok/J)").filter(visible=True).first.wait_for()
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / "ui-asset-head-to-head.png"))
    page.get_by_role("button", name="Close").click()
    page.locator("tr", has_text="power_trace").get_by_text("[Show Markdown]").click()
    plot = page.locator("img[src^='data:image/png;base64,']").filter(visible=True)
    plot.first.wait_for()
    assert page.evaluate("img => img.naturalWidth", plot.first.element_handle()) > 100  # the PNG decoded
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / "ui-asset-report.png"))

    # 5. the run's own HTML report: every interactive chart renders with the network cut (nothing fetched)
    report = tmp / "runs" / run["runId"] / "report.html"
    assert report.exists(), f"no {report}"
    offline = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
    try:
        rp = offline.new_page()
        fetched: list[str] = []
        rp.route(
            "**/*",
            lambda r: (
                r.continue_() if r.request.url.startswith("file://") else (fetched.append(r.request.url), r.abort())
            ),
        )
        rp.goto(report.as_uri())
        rp.wait_for_function(
            "() => window.wattbenchCharts && Object.keys(window.wattbenchCharts).length === "
            "document.querySelectorAll('div.chart').length",
            timeout=60_000,
        )
        charts = rp.locator("div.chart")
        assert charts.count() >= 4 and rp.locator("div.chart.vega-embed").count() == charts.count()
        assert rp.locator("div.chart canvas, div.chart svg").count() >= charts.count()
        assert rp.locator(".chart-error").count() == 0 and fetched == [], fetched
        rp.locator("div.chart[data-chart='throughput vs latency']").scroll_into_view_if_needed()
        rp.wait_for_timeout(500)
        rp.screenshot(path=str(SHOTS / "report-html.png"))
    finally:
        offline.close()


BACKFILL = """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
  __typename ... on PartitionBackfill { status } ... on PythonError { message } } }"""
BACKFILL_RUNS = """query($id: String!) { runsOrError(filter: {tags: [{key: "dagster/backfill", value: $id}]}) {
  ... on Runs { results { runId status tags { key value } } } } }"""


@pytest.mark.timeout(600)
def test_backfill_over_two_models(webserver, browser):
    """A backfill over two model partitions of the smoke scenario, launched from the UI as a user would:
    "Materialize all…", tick both models and the scenario in the launch dialog, "Launch backfill", then "View" in
    the "Created backfill <id>" toast. The daemon runs both partitions and both succeed."""
    url, tmp = webserver
    expect = sync_api.expect
    second = "mixtral-8x7b"
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "dagster_home")}
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import dagster as dg; dg.DagsterInstance.get().add_dynamic_partitions('models', [{second!r}])",
        ],
        cwd=REPO,
        env=env,
        check=True,
        timeout=120,
    )
    partitions = [PARTITION, f"{second}|{SCENARIO}"]
    # 1. Materialize all… -> tick both models and the scenario -> 2 partitions -> Launch backfill
    page = _asset_graph_page(browser, url)
    page.get_by_role("button", name="Materialize all…").click()
    dialog = _launch_dialog(page)
    dialog.wait_for()
    _pick(page, 0, MODEL, second)
    _pick(page, 1, SCENARIO)
    expect(dialog.get_by_text("2 partitions", exact=True)).to_be_visible()
    dialog.get_by_role("button", name="Launch backfill", exact=True).click()

    # 2. the toast names the backfill; its "View" opens the backfill's page
    page.get_by_text("Created backfill").first.wait_for(timeout=60_000)
    expect(dialog).to_have_count(0)
    view = page.get_by_role("link", name="View", exact=True).filter(visible=True).first
    href = view.get_attribute("href") or ""
    match = re.fullmatch(r"/runs/b/(\w+)", href)
    assert match, f"the toast's View link goes to {href!r}, not a backfill page"
    backfill_id = match.group(1)
    view.click()
    page.wait_for_url(f"**/runs/b/{backfill_id}")
    for partition in partitions:  # the page's "Partition selection"
        page.get_by_text(partition, exact=True).filter(visible=True).first.wait_for()

    # 3. wait for the daemon to finish it (GraphQL: the same API the UI reads): one successful run per partition
    deadline = time.monotonic() + 420
    status = None
    while time.monotonic() < deadline:
        status = _graphql(url, BACKFILL, {"id": backfill_id})["partitionBackfillOrError"].get("status")
        if status in ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"):
            break
        time.sleep(3)
    runs = _graphql(url, BACKFILL_RUNS, {"id": backfill_id})["runsOrError"]["results"]
    by_partition = {next(t["value"] for t in run["tags"] if t["key"] == "dagster/partition"): run for run in runs}
    assert status in ("COMPLETED", "COMPLETED_SUCCESS"), (
        f"backfill {backfill_id} ended {status}: {by_partition}; see {tmp / 'dagster-dev.log'}"
    )
    assert sorted(by_partition) == sorted(partitions), by_partition
    for partition, run in by_partition.items():
        assert run["status"] == "SUCCESS", (partition, run)

    # 4. the backfill page shows it done: every asset at 100 % for both partitions
    page.reload(wait_until="networkidle")
    expect(page.get_by_text("100% completed", exact=True)).to_have_count(len(STAGES), timeout=60_000)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "ui-backfill.png"))
