"""The vllm adapter against what real vLLM 0.25.0 wrote on an H200 (results/h200-vllm/): its server log and /metrics
page (tests/engines/data/), the agent's bundles with both engines' logs (bf16, and fp8 quantized on load), and its
/version answer; and against the vLLM 0.10.1.1 wording the fake engine prints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wattbench_agent.deploy.local import classify_start_failure, start_failure_cause
from wattbench_agent.engines.vllm import METRICS, STARTUP_PHASES, VllmAdapter, metric_name
from wattbench_agent.metrics_scrape import parse_prometheus

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
LOG = DATA / "vllm-serve-0.25.0.log"
PAGE = DATA / "vllm-metrics-0.25.0.txt"
RESULTS = ROOT / "results" / "h200-vllm"
FAKE_VLLM = ROOT / "tests" / "fake_engines" / "vllm"


def real_log() -> str:
    return LOG.read_text(encoding="utf-8")


def bundle_logs() -> list[tuple[str, str, dict]]:
    """(bundle, deployment id, its deployments row) with the engine's log text, for every engine of every bundle."""
    out = []
    for path in sorted(RESULTS.glob("bundle-*.tar.xz")):
        with tarfile.open(path) as tar:
            members = {Path(m.name).relative_to(Path(m.name).parts[0]).as_posix(): m for m in tar if m.isfile()}
            rows = [json.loads(line) for line in tar.extractfile(members["deployments.jsonl"]).read().splitlines()]
            for row in rows:
                log = tar.extractfile(members[f"logs/{row['deployment_id']}.log"]).read().decode("utf-8")
                out.append((path.name, log, row))
    return out


# ---------------------------------------------------------------------------------------------------------- version
def test_version_from_the_real_log_each_line_alone():
    text = real_log()
    adapter = VllmAdapter()
    assert adapter.detect_version(None, text) == ("0.25.0", "log")
    engine_line = [ln for ln in text.splitlines() if "Initializing a V1 LLM engine" in ln]
    banner = [ln for ln in text.splitlines() if re.search(r"\s+version 0\.25\.0$", ln)]
    assert len(engine_line) == 1 and len(banner) == 1
    # each line alone says it: the engine core's line, and the API server's start banner
    assert adapter.detect_version(None, engine_line[0]) == ("0.25.0", "log")
    assert adapter.detect_version(None, "\n".join(ln for ln in text.splitlines() if ln not in engine_line)) == (
        "0.25.0",
        "log",
    )
    assert adapter.detect_version(None, banner[0]) == ("0.25.0", "log")
    # the model line under the banner is not a version, nor is FlashAttention's "version 3"
    assert adapter.detect_version(
        None, "\n".join(ln for ln in text.splitlines() if ln not in engine_line + banner)
    ) == (None, "unknown")
    # vLLM 0.10's API server line
    assert adapter.detect_version(
        None, "INFO 08-20 10:00:00 [api_server.py:1805] vLLM API server version 0.10.1.1"
    ) == ("0.10.1.1", "log")
    assert adapter.version_checked("0.25.0") is True and adapter.version_checked("0.26.0") is False


def test_version_from_the_version_endpoint_as_vllm_answered():
    body = (RESULTS / "peer" / "vllm-version.json").read_bytes()  # GET /version of the H200's vLLM, as answered
    assert json.loads(body) == {"version": "0.25.0"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            code, out = (200, body) if self.path == "/version" else (404, b"{}")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        # the endpoint wins over the log
        assert VllmAdapter().detect_version(url, "vLLM API server version 0.10.1.1") == ("0.25.0", "/version")
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------------------------------- startup phases
def test_startup_phases_from_the_real_log():
    phases = VllmAdapter().startup_phases(real_log())
    assert phases == {
        "weights_load_s": 4.102294,
        "weights_read_s": 2.32,
        "compile_s": 3.91,
        "cuda_graph_capture_s": 4.0,
        "engine_init_s": 25.38,
    }
    # each pattern matches exactly one line of the real log, so no phase is taken from the wrong line
    for key, pattern in STARTUP_PHASES:
        assert len(pattern.findall(real_log())) == 1, key
    # reading the checkpoint is part of the model load; compilation and graph capture are part of engine init
    assert phases["weights_read_s"] < phases["weights_load_s"]
    assert phases["compile_s"] + phases["cuda_graph_capture_s"] < phases["engine_init_s"]


def test_startup_phases_of_every_engine_the_agent_ran_on_the_h200():
    engines = bundle_logs()
    # two or three engines per bundle (bf16, fp8, and in bundle-kv8 fp8 with an fp8 KV cache), every bundle read
    bundles = sorted((ROOT / "results" / "h200-vllm").glob("bundle-*.tar.xz"))
    assert {row["precision"] for _, _, row in engines} == {"bf16", "fp8"}
    assert len({b for b, _, _ in engines}) == len(bundles) and len(engines) >= 2 * len(bundles)
    for bundle, log, row in engines:
        phases = VllmAdapter().startup_phases(log)
        assert set(phases) == {k for k, _ in STARTUP_PHASES}, (bundle, row["deployment_id"], phases)
        # what the agent recorded on the H200 is what the same lines give today
        recorded = row["config"]["startup_phases"]
        assert {k: phases[k] for k in recorded} == recorded, (bundle, row["deployment_id"])
        assert phases["weights_read_s"] < phases["weights_load_s"] < row["startup_s"]
        assert phases["compile_s"] < phases["engine_init_s"] < row["startup_s"]
        assert VllmAdapter().detect_version(None, log) == ("0.25.0", "log") and row["engine_version"] == "0.25.0"
    # fp8 quantizes the 16-bit checkpoint on load, after reading it: inside weights_load_s, not weights_read_s. In
    # each bundle every fp8 engine spends longer than the bf16 one between the two (by 0.17-0.43 s across bundles).
    after_read: dict[tuple[str, str], list[float]] = {}
    for b, log, row in engines:
        p = VllmAdapter().startup_phases(log)
        after_read.setdefault((b, row["precision"]), []).append(p["weights_load_s"] - p["weights_read_s"])
    for b in {b for b, _ in after_read}:
        assert min(after_read[b, "fp8"]) > max(after_read[b, "bf16"]) + 0.1, b


def test_startup_phases_from_the_older_lines_the_fake_prints(tmp_path):
    """The fake vllm prints vLLM 0.10.1.1's wording (a real process, stopped once it listens)."""
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_VLLM), "serve", "m", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FAKE_VLLM_VERSION": "0.10.1.1"},
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "Uvicorn running" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    text = "".join(lines)
    assert (
        "torch.compile takes" in text
        and "init engine (profile, create kv cache, warmup model) took 0.08 seconds" in text
    )
    assert VllmAdapter().startup_phases(text) == {
        "weights_load_s": 0.052,
        "weights_read_s": 0.02,
        "compile_s": 0.03,
        "cuda_graph_capture_s": 0.0,
        "engine_init_s": 0.08,
    }
    assert VllmAdapter().detect_version(None, text) == ("0.10.1.1", "log")


def test_weights_load_line_wordings():
    ((key, pattern),) = [(k, p) for k, p in STARTUP_PHASES if k == "weights_load_s"]
    for line, seconds in (
        ("Model loading took 14.96 GiB and 4.102294 seconds", "4.102294"),  # 0.25.0
        ("Model loading took 14.9595 GiB and 2.577431 seconds", "2.577431"),  # 0.10.1.1
        ("Model loading took 18.14 GiB memory and 11.465340 seconds", "11.465340"),
    ):
        assert pattern.search(line).group(1) == seconds, line


# ----------------------------------------------------------------------------------------------------------- /metrics
def test_the_real_metrics_page_serves_every_name_wattbench_reads():
    samples = parse_prometheus(PAGE.read_text())
    names = {n for n, _, _ in samples}
    for what, (newest, *older) in METRICS.items():
        assert metric_name(names, what) == newest, what
        for old in older:  # the 0.10 names are gone in 0.25.0
            assert old not in names and f"{old}_count" not in names, old
    assert "vllm:gpu_cache_usage_perc" not in names and "vllm:time_per_output_token_seconds_count" not in names
    # every sample of the series wattbench reads carries the labels the emulator copies
    read = {n for what in METRICS for n in METRICS[what]}
    series = [(n, labels) for n, labels, _ in samples if re.sub(r"_(bucket|sum|count)$", "", n) in read]
    assert len(series) > 100 and all({"model_name", "engine"} <= set(labels) for _, labels in series)
    value = {n: v for n, labels, v in samples if not labels.get("le")}
    # what the page says agrees with itself: 800 requests of 128 output tokens, inter-token gaps after the first
    assert value["vllm:e2e_request_latency_seconds_count"] == value["vllm:time_to_first_token_seconds_count"] == 800
    assert value["vllm:generation_tokens_total"] == 800 * 128
    assert value["vllm:inter_token_latency_seconds_count"] == 800 * 127
    tpot = value["vllm:request_time_per_output_token_seconds_sum"] / 800
    itl = value["vllm:inter_token_latency_seconds_sum"] / value["vllm:inter_token_latency_seconds_count"]
    assert tpot == pytest.approx(itl, rel=0.01)  # equal-length requests: per-request TPOT mean = per-token ITL mean


def test_older_names_are_read_where_a_page_has_only_them():
    page_010 = (
        '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        "# TYPE vllm:time_per_output_token_seconds histogram\n"
        'vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 3.0\n'
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.3\n'
        'vllm:time_per_output_token_seconds_count{model_name="m"} 3.0\n'
    )
    names = {n for n, _, _ in parse_prometheus(page_010)}
    assert metric_name(names, "kv_cache_usage") == "vllm:gpu_cache_usage_perc"
    assert metric_name(names, "itl") == "vllm:time_per_output_token_seconds"
    assert metric_name(names, "tpot") is None  # no per-request TPOT before 0.11


def test_the_warehouse_reads_every_name_of_each_latency_histogram():
    """sql/views.sql v_client_vs_server compares the engine's own histograms with the client's figures: it must know
    each name vLLM has served them under."""
    views = (ROOT / "sql" / "views.sql").read_text()
    view = views[views.index("CREATE OR REPLACE VIEW v_client_vs_server") :]
    for what in ("ttft", "itl", "e2e"):
        for name in METRICS[what]:
            assert f"'{name}'" in view, name


# ----------------------------------------------------------------------------------------------------- start failures
def test_a_healthy_real_log_has_no_failure_cause():
    text = real_log()
    # the fd-limit warning quotes an OSError and the KV-cache line says "If OOM'ed": neither is a failure
    assert "OSError: [Errno 24]" in text and "If OOM'ed" in text
    assert start_failure_cause(text) is None
    assert classify_start_failure(text) == "start_failed"


def vllm_failure(exception_line: str) -> str:
    """The real 0.25.0 log up to the model load, then a failure as vLLM 0.25 reports it: the engine core logs the
    traceback at ERROR, the API server raises its own error pointing back at it."""
    head = real_log().split("[topk_topp_sampler.py", 1)[0].rsplit("\n", 1)[0]
    core = "(EngineCore pid=1885) ERROR 12-03 01:22:30 [core.py:1104] "
    api = "(APIServer pid=1765) "
    return "\n".join(
        [
            head,
            core + "EngineCore failed to start.",
            core + "Traceback (most recent call last):",
            core + '  File "vllm/v1/engine/core.py", line 1095, in run_engine_core',
            core + exception_line,
            api + "Traceback (most recent call last):",
            api + '  File "vllm/entrypoints/cli/main.py", line 75, in main',
            api + "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            "",
        ]
    )


def test_missing_flashinfer_is_a_start_failure_that_names_the_module_and_the_fix():
    text = vllm_failure("ModuleNotFoundError: No module named 'flashinfer'")
    assert classify_start_failure(text) == "start_failed"
    assert start_failure_cause(text) == "ModuleNotFoundError: No module named 'flashinfer'"
    hint = VllmAdapter().start_failure_hint(text)
    assert hint and "VLLM_USE_FLASHINFER_SAMPLER=0" in hint and "engines[].env" in hint
    assert VllmAdapter().start_failure_hint(vllm_failure("ModuleNotFoundError: No module named 'triton'")) is None


def test_a_kv_cache_that_cannot_hold_one_request_is_oom_at_start():
    line = (
        "ValueError: To serve at least one request with the models's max seq len (4096), (0.50 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (0.12 GiB). Based on the available memory, "
        "the estimated maximum model length is 1008. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )
    text = vllm_failure(line)
    assert classify_start_failure(text) == "oom_at_start"
    assert start_failure_cause(text) == line
    cuda = vllm_failure(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 139.72 GiB of which 1.05 GiB is free."
    )
    assert classify_start_failure(cuda) == "oom_at_start"
    assert start_failure_cause(cuda).startswith("torch.OutOfMemoryError: CUDA out of memory.")


# --------------------------------------------------------------------------------------------------------- scraping
def test_scrapes_of_the_real_page_keep_every_measurement_and_no_created_timestamp(tmp_path):
    """vLLM 0.25.0's page served on loopback and scraped as the agent does (periodic and at a window edge) into a
    real bundle: every `_created` sample (a creation time, seconds since 1970) is dropped, everything else is kept."""
    from wattbench_agent.bundle import BundleWriter
    from wattbench_agent.metrics_scrape import MetricsScraper

    page = PAGE.read_bytes()
    raw = [ln for ln in page.decode().splitlines() if ln and not ln.startswith("#")]
    created = [ln for ln in raw if re.match(r"[^{ ]+_created[{ ]", ln)]
    assert len(raw) == 420 and len(created) == 45 and all(float(ln.rsplit(" ", 1)[1]) > 1.7e9 for ln in created)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with BundleWriter(tmp_path / "b", run_id="r", source="measured") as writer:
            scraper = MetricsScraper(f"http://127.0.0.1:{server.server_address[1]}/metrics", writer, "d")
            periodic = scraper.scrape_once()
            edge = scraper.scrape_edge("lp", "window_end")
    finally:
        server.shutdown()
        server.server_close()
    rows = [json.loads(ln) for ln in (tmp_path / "b" / "server_metrics.jsonl").read_text().splitlines()]
    assert scraper.failures == 0 and periodic + edge == len(rows)
    assert not [r for r in rows if r["metric"].endswith("_created")]
    buckets = [ln for ln in raw if re.match(r"[^{ ]+_bucket[{ ]", ln)]
    assert edge == len(raw) - len(created)  # the edge scrape keeps everything else
    assert periodic == len(raw) - len(created) - len(buckets)  # the periodic one also leaves out histogram buckets
    edge_rows = {(r["metric"], json.dumps(r["labels"], sort_keys=True)): r["value"] for r in rows if r["scrape"]}
    assert edge_rows[("vllm:generation_tokens_total", '{"engine": "0", "model_name": "llama-8b-random"}')] == 102400.0
    # a counter named like a creation time but without a counter of its own name stays a measurement
    kept = parse_prometheus("# TYPE jobs_created counter\njobs_created_total 3\n# TYPE x_created gauge\nx_created 5\n")
    assert {n for n, _, _ in kept} == {"jobs_created_total", "x_created"}
