"""A server that dies mid-run: the load stops within about two seconds, the load point is recorded as failed with
error kind `server_gone` (the requests that completed before are kept), `wattbench load` exits non-zero, and the
bench agent marks the deployment failed and runs none of its later points. Real servers on loopback (the load
generator's test server, in its own process, killed with SIGKILL)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from tests.bundle_files import read_table
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.loadgen.runner import run_load
from wattbench_agent.loadgen.spec import LoadSpec
from wattbench_agent.runner import run_spec
from wattbench_agent.wire import WIRE_VERSION

from .conftest import ROOT

STOP_WITHIN_S = 2.0  # from the server's death to the load's last send


def _server(ttft_ms: float = 5, itl_ms: float = 2) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "wattbench_agent.loadgen.testserver", "--port", "0", "--ttft-ms", str(ttft_ms)]
        + ["--itl-ms", str(itl_ms)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT / "agent",
    )
    line = proc.stdout.readline()
    assert line.startswith("LISTENING"), line
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def _kill_after(proc: subprocess.Popen, seconds: float, box: dict, url: str | None = None) -> threading.Thread:
    """Kill the server `seconds` after now and, given its url, not before it has answered some requests whole (its
    /stats): on a loaded machine worker processes can take longer than `seconds` to send their first request, and a
    server killed before any answer tests a refused connection, not a server that went away."""

    def served() -> int:
        try:
            with urllib.request.urlopen(url + "/stats", timeout=5) as r:
                return sum(1 for q in json.load(r)["requests"] if q["last_ns"])
        except OSError:
            return 0

    def kill() -> None:
        time.sleep(seconds)
        deadline = time.monotonic() + 60
        while url is not None and served() < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        box["killed_ns"] = time.perf_counter_ns()  # CLOCK_MONOTONIC: the records' clock too
        proc.kill()
        proc.wait()

    th = threading.Thread(target=kill, daemon=True)
    th.start()
    return th


def test_wattbench_load_stops_and_exits_nonzero_when_the_server_dies(tmp_path):
    """35,842 requests in 7 s against a dead server and exit code 0, before: now the last request goes out within two
    seconds of the death, the completed ones are on disk, and the exit code says the window broke."""
    proc, url = _server()
    out = tmp_path / "r.jsonl"
    cli = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "load", "--url", url, "--model", "m", "--concurrency", "8"]
        + ["--duration", "30", "--output-tokens", "20", "--out", str(out), "--json", "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 50):
            time.sleep(0.05)
        killed_ns = time.perf_counter_ns()
        proc.kill()
        proc.wait()
        stdout, stderr = cli.communicate(timeout=30)
    finally:
        proc.kill()
        cli.kill()
    assert cli.returncode == 1, stderr
    s = json.loads(stdout.strip().splitlines()[-1])
    assert s["server_gone"]["successful_requests"] == s["completed"] > 0
    assert "stopped answering" in stderr and "are kept" in stderr
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert sum(r["error_kind"] is None for r in recs) == s["completed"]  # every completed request kept
    assert max(r["sent_ns"] for r in recs) - killed_ns < STOP_WITHIN_S * 1e9
    assert s["failed"] < 10_000  # a 30 s window of refused connections fired hundreds of thousands
    # `wattbench inspect` of the saved run gives the live summary back, the broken window's verdict included
    again = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "inspect", str(out), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == s


def test_worker_processes_stop_too_and_the_point_is_failed_server_gone():
    proc, url = _server()
    box: dict = {}
    try:
        _kill_after(proc, 1.0, box, url)
        res = run_load(
            LoadSpec(url=url, model="m", concurrency=8, output_tokens=20, duration_s=30, warmup_s=0.2), workers=2
        )
    finally:
        proc.kill()
    assert res.status == "failed" and res.error_kind == "server_gone" and "stopped answering" in res.error_text
    assert res.summary["completed"] > 0 and res.summary["workers"] == 2
    assert max(r["sent_ns"] for r in res.records) - box["killed_ns"] < STOP_WITHIN_S * 1e9
    assert res.load_run_row()["status"] == "failed" and res.load_run_row()["error_kind"] == "server_gone"


def test_a_server_that_stays_up_is_not_gone():
    """Failures among successes (the test server's mix: 500s, drops, malformed events) are not a dead server."""
    proc, url = _server()
    try:
        res = run_load(
            LoadSpec(url=url, model="mode:mix", concurrency=4, output_tokens=4, duration_s=2.0, fail_fast=False)
        )
    finally:
        proc.kill()
    assert "server_gone" not in res.summary and res.summary["failed"] > 0 and res.status == "ok"


def _rows(bundle: Path, table: str) -> list[dict]:
    return read_table(bundle, table)  # whatever format the agent wrote it in


def test_the_agent_marks_the_deployment_failed_and_runs_none_of_its_later_points(tmp_path):
    """An external endpoint that goes away during the first of three points: that point is failed (server_gone, its
    completed requests kept), the deployment is failed, and the two later points are not run (no row claims them)."""
    proc, url = _server()
    cfg = EngineConfig(engine="external", model="m", config_name="ext", precision="bf16", tp=1)
    points = [
        {
            "load_point_id": f"ext:w:c4#{i}",
            "workload": "w",
            "point_label": "c4",
            "repeat": i,
            "load": {"api": "chat", "shape": "concurrency", "concurrency": 4, "output_tokens": 16, "duration_s": 3.0},
        }
        for i in (1, 2, 3)
    ]
    spec = {
        "version": WIRE_VERSION,
        "run_id": "gone",
        "source": "measured",
        "out": str(tmp_path / "bundle"),
        "telemetry": "none",
        "idle_baseline_s": 0,
        "warmup_requests": 0,
        "deployments": [
            {
                "deployment_id": "ext",
                "build_id": cfg.build_id(),
                "engine_config": asdict(cfg),
                "target": "external",
                "url": url,
                "load_points": points,
            }
        ],
    }
    box: dict = {}
    logs: list[str] = []
    try:
        _kill_after(proc, 1.5, box)
        bundle = run_spec(spec, log=logs.append)
    finally:
        proc.kill()
    (dep,) = _rows(bundle, "deployments")
    assert dep["status"] == "failed" and dep["error_kind"] == "server_gone"
    assert "its 2 later load point(s) were not run" in dep["error_text"]
    (lr,) = _rows(bundle, "load_runs")
    assert lr["load_point_id"] == "ext:w:c4#1" and lr["status"] == "failed" and lr["error_kind"] == "server_gone"
    # the answers that completed (the test server counts prompts its own way: the agent marks them truncated_prompt)
    ok = [r for r in _rows(bundle, "requests") if r.get("http_status") == 200 and r.get("completion_tokens") == 16]
    assert len(ok) == lr["completed"] > 0
    assert any("not running its 2 later point(s)" in m for m in logs)
