"""Synthetic prompts meet the length asked for on the server's own count (loadgen/prompt_length.py), against the
emulator, whose tokens are words and whose chat template adds ten (BOS, role headers, end of turn, the assistant's
header): 512 asked arrived as 522 at the chat API before. vllm-like serves vLLM's POST /tokenize
(`server_tokenize`); trtllm-like does not, so its usage is read instead (`calibrated_on_usage`)."""

from __future__ import annotations

import json
from functools import partial

import pytest

from tests.emulator.conftest import start_emulator, stop
from wattbench_agent.loadgen import LoadSpec, run_load

from .conftest import ROOT, wattbench_load


@pytest.fixture(scope="module")
def servers():
    vllm, vllm_url = start_emulator("--profile", "vllm-like", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    trt, trt_url = start_emulator("--profile", "trtllm-like", "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    yield {"vllm-like": vllm_url, "trtllm-like": trt_url}
    stop(vllm)
    stop(trt)


load = partial(wattbench_load, timeout=120)


@pytest.mark.parametrize(
    ("profile", "method"), [("vllm-like", "server_tokenize"), ("trtllm-like", "calibrated_on_usage")]
)
@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_512_tokens_asked_arrive_as_512(servers, profile, method, endpoint):
    p = load("--base-url", servers[profile], "--endpoint", endpoint, "--num-prompts", "8", "--max-concurrency", "4",
             "--random-input-len", "512", "--random-output-len", "2", "--json", "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    pl = s["prompt_length"]
    assert pl["method"] == method and pl["requests_counted"] == 8
    assert pl["requested_mean_tokens"] == 512
    assert abs(pl["achieved_mean_tokens"] - 512) <= 512 * 0.01, pl  # within 1% (here exact: the emulator's words)
    overhead = 10 if endpoint.endswith("chat/completions") else 1  # the template's tokens, or BOS
    assert pl["calibration"]["overhead"] == pytest.approx(overhead) and pl["calibration"]["per_word"] == 1


def test_spread_lengths_and_a_shared_prefix_meet_theirs_too(servers):
    p = load("--url", servers["vllm-like"], "--num-prompts", "12", "--max-concurrency", "4", "--random-input-len",
             "300", "--random-range-ratio", "0.5", "--random-prefix-len", "64", "--random-output-len", "2", "--json",
             "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    pl = json.loads(p.stdout.strip().splitlines()[-1])["prompt_length"]
    assert pl["requested_mean_tokens"] != 364  # lengths spread around 300 + 64
    assert abs(pl["achieved_mean_tokens"] - pl["requested_mean_tokens"]) <= pl["requested_mean_tokens"] * 0.01


def test_without_calibration_the_framing_is_on_top(servers):
    """calibrate_prompts off (a LoadSpec field; plans may set it): one word a token, the chat template on top."""
    res = run_load(LoadSpec(url=servers["vllm-like"], model="llama-3.1-8b", concurrency=2, max_requests=4,
                            duration_s=0, input_tokens=512, output_tokens=2, calibrate_prompts=False))  # fmt: skip
    pl = res.summary["prompt_length"]
    assert pl["method"] == "uncalibrated" and pl["achieved_mean_tokens"] == 522


def test_a_dataset_is_sent_as_it_is(servers):
    sg = ROOT / "tests" / "data" / "datasets" / "sharegpt.json"
    p = load("--url", servers["vllm-like"], "--dataset-path", str(sg), "--num-prompts", "3", "--output-len", "2",
             "--json", "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    pl = json.loads(p.stdout.strip().splitlines()[-1])["prompt_length"]
    assert pl["method"] == "dataset" and "calibration" not in pl and pl["achieved_mean_tokens"] > 0


def test_a_missing_tokenizer_file_says_so():
    p = load("--url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "/missing/file", "--concurrency", "1",
             "--duration", "1")  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip() == "wattbench load: tokenizer /missing/file: no such file or folder"


def test_a_server_that_never_answers_costs_the_calibration_its_bound_not_the_requests_timeout():
    """A server that accepts and says nothing: the calibration gives up within its own bound (CALIBRATION_TIMEOUT_S,
    /tokenize and usage together), says why, and the run goes on uncalibrated; it was 25 s against a 120 s timeout."""
    import time

    from tests.loadgen.test_hostile_servers import raw_server
    from wattbench_agent.loadgen.prompt_length import CALIBRATION_TIMEOUT_S, calibrate

    def silent(conn, stats) -> None:
        time.sleep(40)

    with raw_server(silent) as (url, _):
        started = time.monotonic()
        cal = calibrate(LoadSpec(url=url, model="m", concurrency=1, input_tokens=64, timeout_s=120))
        took = time.monotonic() - started
    assert cal.method == "uncalibrated" and cal.note, cal
    assert took < CALIBRATION_TIMEOUT_S + 5, took
