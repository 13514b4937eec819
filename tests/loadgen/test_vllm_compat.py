"""`wattbench load` as a `vllm bench serve` user runs it: full endpoint URLs, vLLM's flag names, the server's only
model, a result file with vLLM's keys, fail-fast on a misconfigured run, ShareGPT output lengths; and
`wattbench emulate` with no flags. Real servers on loopback: the emulator and the load generator's test server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from functools import partial

import numpy as np
import pytest

from wattbench_agent.loadgen.testserver import server_process

from .conftest import ROOT, wattbench_load

# The keys of vllm bench serve's result JSON (vllm/benchmarks/serve.py: result_json = setup keys + the
# benchmark() result dict + process_one_metric's mean/median/std/p<P> per selected metric).
VLLM_KEYS = {
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
}
VLLM_DETAILED = {"input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts", "errors"}


load = partial(wattbench_load, timeout=120)


@pytest.fixture(scope="module")
def emulator():
    """`wattbench emulate` with no flags at all but the port: the defaults must serve."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "emulate", "--port", "0"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            break
    else:
        proc.kill()
        raise RuntimeError("emulator did not start: " + "".join(lines))
    yield m.group(1), lines
    proc.terminate()
    proc.wait(timeout=10)


def refused_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_emulate_without_flags_says_what_it_emulates(emulator):
    _url, lines = emulator
    first = lines[0]
    assert first.startswith("wattbench emulate: emulating a vllm-like engine serving llama-3.1-8b")
    assert "1x NVIDIA H100" in first and "bf16" in first and "requests name the model 'llama-3.1-8b'" in first
    assert "defaults used: --profile vllm-like, --model llama-3.1-8b" in first


def test_full_endpoint_url_sets_the_api_and_the_model_comes_from_the_server(emulator, tmp_path):
    url, _ = emulator
    out = tmp_path / "r.jsonl"
    p = load(
        "--url",
        f"{url}/v1/completions",
        "--num-prompts",
        "6",
        "--max-concurrency",
        "2",
        "--input-tokens",
        "16",
        "--output-tokens",
        "4",
        "--out",
        str(out),
        "--json",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["api"] == "completions" and s["sent"] == 6 and s["completed"] == 6 and s["failed"] == 0
    assert "model llama-3.1-8b (the server's only model)" in p.stderr
    assert s["total_token_throughput"] > s["output_token_throughput"] > 0
    assert all(json.loads(x)["completion_tokens"] == 4 for x in out.read_text().splitlines())


def test_base_url_and_endpoint_as_vllm_bench_serve(emulator):
    url, _ = emulator
    p = load(
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "llama-3.1-8b",
        "--request-rate",
        "inf",
        "--max-concurrency",
        "2",
        "--num-prompts",
        "4",
        "--random-input-len",
        "8",
        "--random-output-len",
        "3",
        "--json",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["api"] == "chat" and s["completed"] == 4 and s["shape"] == "concurrency"


def test_api_that_contradicts_the_endpoint_is_one_clear_line(emulator):
    url, _ = emulator
    p = load("--url", f"{url}/v1/completions", "--api", "chat", "--concurrency", "1")
    assert p.returncode == 2
    assert p.stderr.strip() == (
        f"wattbench load: --api chat does not match the endpoint {url}/v1/completions "
        "(which is the completions API); drop --api or give a base URL"
    )


def test_save_result_has_vllm_keys_and_consistent_values(emulator, tmp_path):
    url, _ = emulator
    p = load(
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--request-rate",
        "inf",
        "--max-concurrency",
        "3",
        "--num-prompts",
        "12",
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "6",
        "--goodput",
        "ttft:5000",
        "tpot:1000",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99.9",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(tmp_path / "res"),
        "--result-filename",
        "run.json",
        "--metadata",
        "tp=1",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "res" / "run.json").read_text())
    assert set(r) >= VLLM_KEYS | VLLM_DETAILED
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p90", "p99.9"):
            assert isinstance(r[f"{stat}_{m}_ms"], float), (stat, m)
    assert r["backend"] == "openai" and r["model_id"] == "llama-3.1-8b" and r["request_rate"] == "inf"
    assert r["max_concurrency"] == 3 and r["num_prompts"] == 12 and r["tp"] == "1"
    assert r["completed"] == 12 and r["failed"] == 0 and r["total_output_tokens"] == 72
    assert r["output_lens"] == [6] * 12 and len(r["ttfts"]) == len(r["itls"]) == 12
    # the statistics are the per-request lists' (seconds there, milliseconds here), computed as numpy computes them
    assert r["median_ttft_ms"] == pytest.approx(np.median(r["ttfts"]) * 1e3)
    assert r["p90_e2el_ms"] == pytest.approx(np.percentile(r["latencies"], 90) * 1e3)
    assert r["mean_itl_ms"] == pytest.approx(np.mean([g for gaps in r["itls"] for g in gaps]) * 1e3)
    assert r["request_goodput"] == pytest.approx(r["request_throughput"], rel=0.2)  # generous SLOs: all good
    assert r["total_token_throughput"] > r["output_throughput"] > 0
    assert 1 <= r["max_concurrent_requests"] <= 3
    assert r["wattbench"]["window_s"] == r["duration"]


def test_save_result_default_name_follows_vllm(emulator, tmp_path):
    url, _ = emulator
    p = load(
        "--url",
        url,
        "--request-rate",
        "20",
        "--max-concurrency",
        "2",
        "--num-prompts",
        "4",
        "--output-tokens",
        "2",
        "--save-result",
        "--result-dir",
        str(tmp_path),
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and re.fullmatch(
        r"wattbench-20\.0qps-concurrency2-llama-3\.1-8b-\d{8}-\d{6}\.json", files[0].name
    ), files
    r = json.loads(files[0].read_text())
    assert r["request_rate"] == 20.0 and r["completed"] == 4 and "ttfts" not in r  # not detailed
    assert set(r) >= VLLM_KEYS | {"p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "median_e2el_ms"}


def test_refused_connections_stop_at_once_with_one_line(tmp_path):
    url = refused_url()
    out = tmp_path / "r.jsonl"
    p = load(
        "--url", url, "--model", "m", "--concurrency", "32", "--duration", "30", "--out", str(out), "--no-progress"
    )
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"wattbench load: stopped: the first 8 requests to {url}/v1/chat/completions all failed the same way "
        "(connect_error): "
    )
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert 8 <= len(recs) <= 32 + 8  # not the thousands a 30 s run against a closed port used to send


def test_a_wrong_model_stops_with_the_servers_answer(emulator, tmp_path):
    url, _ = emulator
    p = load(
        "--url",
        f"{url}/v1/completions",
        "--model",
        "nope",
        "--rate",
        "200",
        "--duration",
        "30",
        "--no-progress",
        "--json",
        "--out",
        str(tmp_path / "r.jsonl"),
    )
    assert p.returncode == 1
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"wattbench load: stopped: the first 8 requests to {url}/v1/completions all failed the "
        "same way (http_4xx): HTTP 404: "
    )
    assert "The model `nope` does not exist." in line
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["fail_fast"]["http_status"] == 404 and s["sent"] < 200 * 30 / 10
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == s["sent"]  # every request sent is on disk


def test_every_request_failing_stops_but_a_mixed_failure_rate_keeps_going():
    from wattbench_agent.loadgen.result import FAIL_FAST_N
    from wattbench_agent.loadgen.runner import run_load
    from wattbench_agent.loadgen.spec import LoadSpec

    with server_process(ttft_ms=1, itl_ms=1, mode="http_500") as bad:
        res = run_load(LoadSpec(url=bad, model="m", concurrency=1, output_tokens=2, duration_s=30, max_requests=40))
    assert res.summary["fail_fast"]["requests"] == FAIL_FAST_N and res.summary["sent"] == FAIL_FAST_N
    assert res.status == "failed" and res.error_kind == "http_5xx" and "HTTP 500" in res.error_text
    # the same server with fail_fast off: every request is sent, as before
    with server_process(ttft_ms=1, itl_ms=1, mode="http_500") as bad:
        res = run_load(
            LoadSpec(
                url=bad, model="m", concurrency=1, output_tokens=2, duration_s=30, max_requests=12, fail_fast=False
            )
        )
    assert res.summary["sent"] == 12 and "fail_fast" not in res.summary
    # failures of several kinds among successes (ok, 500, 429, drop, ...): the run goes on
    with server_process(ttft_ms=1, itl_ms=1, mode="mix") as mixed:
        res = run_load(LoadSpec(url=mixed, model="m", concurrency=2, output_tokens=2, duration_s=30, max_requests=40))
    assert res.summary["sent"] == 40 and "fail_fast" not in res.summary and res.summary["failed"] >= 20


def test_sharegpt_keeps_its_own_output_lengths_unless_forced(tmp_path):
    from wattbench_agent.loadgen.runner import run_load  # noqa: F401  (the CLI below runs it)

    data = tmp_path / "sg.json"
    replies = ["word " * n for n in (40, 80, 120)]
    data.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": r}]}
                for i, r in enumerate(replies)
            ]
        )
    )
    with server_process(ttft_ms=1, itl_ms=1) as url:
        own, forced = tmp_path / "own.jsonl", tmp_path / "forced.jsonl"
        p = load(
            "--url",
            url,
            "--model",
            "m",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            str(data),
            "--num-prompts",
            "12",
            "--max-concurrency",
            "2",
            "--out",
            str(own),
            "--no-progress",
        )
        assert p.returncode == 0, p.stderr
        q = load(
            "--url",
            url,
            "--model",
            "m",
            "--dataset-path",
            str(data),
            "--output-tokens",
            "5",
            "--num-prompts",
            "6",
            "--max-concurrency",
            "2",
            "--out",
            str(forced),
            "--no-progress",
        )
        assert q.returncode == 0, q.stderr
    lens = {json.loads(x)["max_tokens"] for x in own.read_text().splitlines()}
    # no tokenizer: the reply's length estimated as characters / 4 (docs/LOADGEN.md)
    assert lens <= {round(len(r) / 4) for r in replies} and len(lens) >= 2
    assert {json.loads(x)["max_tokens"] for x in forced.read_text().splitlines()} == {5}


def test_dataset_name_needs_its_path():
    p = load("--url", "http://127.0.0.1:9", "--model", "m", "--dataset-name", "sharegpt", "--concurrency", "1")
    assert p.returncode == 2 and "--dataset-name sharegpt needs --dataset-path" in p.stderr
    p = load("--url", "http://127.0.0.1:9", "--model", "m", "--goodput", "ttft=5", "--concurrency", "1")
    assert p.returncode == 2 and "--goodput 'ttft=5': expected KEY:MILLISECONDS" in p.stderr


def test_num_prompts_window_runs_from_the_first_send_to_the_last_answer(tmp_path):
    """`--request-rate 20 --num-prompts 5` (Poisson sends, each answer 50 ms + 15 x 10 ms): vLLM's duration is the
    first send to the last answer, and every completion is in it; the window used to close at the last send (0.087 s,
    request throughput 0.0)."""
    out = tmp_path / "r.jsonl"
    with server_process(ttft_ms=50, itl_ms=10) as url:
        p = load(
            "--url", url, "--model", "m", "--request-rate", "20", "--num-prompts", "5", "--output-tokens", "16",
            "--json", "--no-progress", "--out", str(out),
        )  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    first_send_to_last_answer = (max(r["last_token_ns"] for r in recs) - min(r["sent_ns"] for r in recs)) / 1e9
    assert s["completed"] == 5 and s["finished_in_window"] == 5
    assert first_send_to_last_answer <= s["window_s"] <= first_send_to_last_answer + 0.05
    assert s["window_s"] >= 0.05 + 15 * 0.010  # at least one whole answer
    assert s["request_throughput"] == pytest.approx(5 / s["window_s"])
    assert s["output_token_throughput"] == pytest.approx(5 * 16 / s["window_s"])


def test_num_prompts_alone_sends_them_all_at_once_as_vllm_does(tmp_path):
    """vLLM's default request rate is inf: `--num-prompts 6` alone sends all six at once (one stream each, capped by
    --max-concurrency when given); it used to fail asking for a load shape."""
    with server_process(ttft_ms=20, itl_ms=5) as url:
        p = load("--url", url, "--model", "m", "--num-prompts", "6", "--output-tokens", "4", "--json", "--no-progress")
        capped = load(
            "--url", url, "--model", "m", "--num-prompts", "6", "--max-concurrency", "2", "--output-tokens", "4",
            "--json", "--no-progress",
        )  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["sent"] == 6 and s["completed"] == 6 and s["requested_concurrency"] == 6 and s["shape"] == "concurrency"
    assert s["achieved_concurrency"] > 4  # all at once
    c = json.loads(capped.stdout.strip().splitlines()[-1])
    assert c["completed"] == 6 and c["requested_concurrency"] == 2


# ------------------------------------------------------------------------------------------------ --backend
def _target(**kw):
    from argparse import Namespace

    from wattbench_agent.loadgen.cli import resolve_target

    args = {"url": None, "host": None, "port": None, "endpoint": None, "api": None, "backend": None, **kw}
    return resolve_target(Namespace(**args))


def test_backend_picks_the_api_and_endpoint_as_vllm_bench_serve():
    base = "http://h:9000"
    assert _target(url=base, backend="openai") == (f"{base}/v1/completions", "completions")
    assert _target(url=base, backend="vllm") == (f"{base}/v1/completions", "completions")
    assert _target(url=base + "/v1", backend="openai-chat") == (f"{base}/v1/chat/completions", "chat")
    assert _target(url=base, backend="openai", endpoint="/v1/completions") == (f"{base}/v1/completions", "completions")
    assert _target(url=f"{base}/v1/chat/completions", backend="openai-chat") == (f"{base}/v1/chat/completions", "chat")
    # no server named: vllm bench serve's 127.0.0.1:8000; no backend: wattbench's own default API (chat)
    assert _target() == ("http://127.0.0.1:8000", "chat")
    assert _target(backend="openai") == ("http://127.0.0.1:8000/v1/completions", "completions")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"backend": "openai", "endpoint": "/v1/chat/completions"}, "speaks the completions API but the endpoint"),
        ({"backend": "openai-chat", "api": "completions"}, "--api completions contradicts --backend openai-chat"),
        ({"backend": "openai-audio"}, "non-streaming or non-text API"),
        ({"backend": "tgii"}, "expected one of openai, vllm, openai-chat"),
    ],
)
def test_a_backend_that_does_not_fit_is_one_message(kw, message):
    from wattbench_agent.loadgen.endpoint import EndpointError

    with pytest.raises((ValueError, EndpointError), match=message):
        _target(url="http://h:9000", **kw)


def test_backend_openai_chat_alone_sends_chat_requests(emulator):
    url, _ = emulator
    p = load("--base-url", url, "--backend", "openai-chat", "--concurrency", "1", "--num-prompts", "2",
             "--input-tokens", "8", "--output-tokens", "2", "--json", "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["api"] == "chat" and s["completed"] == 2
    p = load("--base-url", url, "--backend", "openai-audio", "--concurrency", "1")
    assert p.returncode == 2 and "wattbench measures streamed text" in p.stderr
