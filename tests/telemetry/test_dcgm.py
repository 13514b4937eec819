"""Telemetry kind 'dcgm': NVIDIA dcgm-exporter's /metrics page (tests/telemetry/dcgm/README.md says where the page
comes from) served by a real HTTP server on loopback, read by the sampler in its own process."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wattbench_agent.telemetry import TelemetryUnavailable, open_sampler
from wattbench_agent.telemetry.dcgm import parse_page, row_of

PAGE = Path(__file__).parent / "dcgm" / "dcgm-exporter-h200x2.prom"
GPU0, GPU1 = "GPU-5b7d9c1e-2f44-4a8e-9d61-0c3e8f7a1b22", "GPU-a03e6f58-81c2-4d97-b5e0-7f9d2c4b6e13"
ROOT = Path(__file__).resolve().parents[2]


def schema_columns(table: str) -> set[str]:
    sql = (ROOT / "sql" / "schema.sql").read_text()
    body = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\);", sql, re.S).group(1)
    return {ln.split()[0] for ln in (x.strip() for x in body.splitlines()) if ln and not ln.startswith("--")}


class _Exporter(BaseHTTPRequestHandler):
    """The recorded page, with each GPU's energy counter advanced by its power draw x the time since start."""

    t0 = time.perf_counter()
    page = PAGE.read_text()
    power = {u: g["fields"]["DCGM_FI_DEV_POWER_USAGE"] for u, g in parse_page(page).items()}

    def do_GET(self):
        if self.path == "/engine/metrics":  # an engine's page, not an exporter's
            body = b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path != "/metrics":
            self.send_error(404)
            return
        dt = time.perf_counter() - self.t0

        def bump(m: re.Match) -> str:
            uuid = re.search(r'UUID="([^"]+)"', m.group(1)).group(1)
            return f"{m.group(1)} {int(int(m.group(2)) + self.power[uuid] * dt * 1000)}"

        body = re.sub(r"^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{.*\}) (\d+)$", bump, self.page, flags=re.M).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def exporter():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_page_fields_become_gpu_samples_columns():
    gpus = parse_page(PAGE.read_text())
    assert set(gpus) == {GPU0, GPU1}
    r0, r1 = row_of(GPU0, gpus[GPU0], 1), row_of(GPU1, gpus[GPU1], 1)
    assert r0["power_avg_w"] == 612.384 and r0["energy_mj"] == 48213370125 and r0["util_gpu_pct"] == 97
    assert r0["sm_clock_mhz"] == 1980 and r0["mem_clock_mhz"] == 3201 and r0["temp_c"] == 61 and r0["hbm_temp_c"] == 48
    assert r0["hbm_used_mib"] == 130612 and r0["hbm_total_mib"] == 130612 + 12034 and r0["util_mem_pct"] == 54
    assert r0["gpu_index"] == 0 and r1["gpu_index"] == 1
    assert r1["hbm_temp_c"] is None  # DCGM's "not supported" blank is NULL, not 9.2e18 degC
    # not among the default counters: NULL, never made up
    assert r0["power_w"] is None and r0["power_limit_w"] is None and r0["clock_event_reasons"] is None
    assert set(r0) <= schema_columns("gpu_samples")


def test_odd_lines_are_skipped():
    text = (
        PAGE.read_text() + '\nvllm:num_requests_running{model_name="m"} 3\nDCGM_FI_DEV_GPU_TEMP{gpu="9"\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-x"} NaN\n'
    )
    gpus = parse_page(text)
    assert set(gpus) == {GPU0, GPU1, "GPU-x"} and gpus["GPU-x"]["fields"]["DCGM_FI_DEV_GPU_TEMP"] is None


def test_label_values_are_unescaped_and_timestamps_read():
    """The exposition format's escapes (\\" \\\\ \\n) in label values and a trailing sample timestamp, as
    prometheus_client reads them."""
    text = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-y",modelName="NVIDIA \\"H200\\" {NVL}"} 57 1733460000000\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-y",modelName="NVIDIA \\"H200\\" {NVL}"} 1.5e2\n'
    )
    g = parse_page(text)["GPU-y"]
    assert g["labels"]["modelName"] == 'NVIDIA "H200" {NVL}'
    assert g["fields"] == {"DCGM_FI_DEV_GPU_TEMP": 57.0, "DCGM_FI_DEV_POWER_USAGE": 150.0}


def test_dcgm_kind_samples_and_reads_windows_from_the_energy_counter(exporter, sink):
    with open_sampler("dcgm", dcgm_url=exporter + "/metrics", hz=10, out=sink, deployment_id="d1") as s:
        s.begin_window("lp")
        time.sleep(1.0)
        w = s.end_window("lp")
    info = s.info()
    samples = sink.tables["gpu_samples"]
    assert {r["gpu_uuid"] for r in samples} == {GPU0, GPU1} and all(r["source"] == "measured" for r in samples)
    # the counter moved by power x time on the exporter's side; the window's seconds are the sampler's own
    assert w[GPU0] == pytest.approx(612.384 * w["seconds"], rel=0.05)
    assert w[GPU1] == pytest.approx(77.512 * w["seconds"], rel=0.05)
    assert w["total_j"] == pytest.approx(w[GPU0] + w[GPU1])
    assert w["trace_j"] is None  # no instant power field on the page: no trace integral
    assert info["telemetry_source"] == "dcgm" and info["gpu_name"] == "NVIDIA H200" and info["n_gpus"] == 2
    assert info["driver_version"] == "580.159.04"
    # which boards: the exporter's pci_bus_id labels (it gives no serial: NULL, not invented)
    assert info["gpu_pci_bus_ids"] == ["00000000:19:00.0", "00000000:3B:00.0"] and info["gpu_serials"] is None
    rows = {r["gpu_uuid"]: r for r in sink.tables["energy_windows"]}
    assert rows[GPU0]["energy_j"] == pytest.approx(w[GPU0]) and rows[GPU0]["source"] == "measured"


def test_dcgm_kind_picks_the_deployments_gpus(exporter, sink):
    with open_sampler("dcgm", gpu_uuids=[GPU1], dcgm_url=exporter, hz=10, out=sink, deployment_id="d2") as s:
        s.begin_window("w")
        time.sleep(0.3)
        w = s.end_window("w")
    assert {r["gpu_uuid"] for r in sink.tables["gpu_samples"]} == {GPU1} and GPU0 not in w


def test_a_page_without_dcgm_samples_says_so(exporter, capfd):
    with pytest.raises(TelemetryUnavailable, match=r"/engine/metrics has no DCGM_FI_DEV_\* sample with a UUID"):
        open_sampler("dcgm", dcgm_url=exporter + "/engine", deployment_id="d", strict=True)
    with open_sampler("dcgm", dcgm_url="http://127.0.0.1:9", deployment_id="d") as s:
        s.begin_window("w")
        w = s.end_window("w")
    assert s.info()["telemetry_source"] == "none" and w["total_j"] is None
    assert "dcgm-exporter at http://127.0.0.1:9/metrics unavailable" in capfd.readouterr().err


def test_cli_sample_kind_dcgm(exporter, tmp_path):
    out = tmp_path / "s.jsonl"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "telemetry",
            "sample",
            "--kind",
            "dcgm",
            "--url",
            exporter + "/metrics",
            "--seconds",
            "0.5",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "telemetry: dcgm" in p.stdout and out.read_text().count(GPU0) >= 2
