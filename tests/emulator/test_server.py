"""The emulator as a real HTTP server: OpenAI API, /metrics, /emulator/telemetry, refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx
import pytest

from tests.emulator.conftest import ROOT

EMULATED_COLUMNS_EXCLUDED = {"run_id", "source", "deployment_id", "t_ns"}


def gpu_sample_columns() -> list[str]:
    sql = (ROOT / "sql" / "schema.sql").read_text()
    block = sql.split("CREATE TABLE IF NOT EXISTS gpu_samples", 1)[1].split(");", 1)[0]
    cols = [ln.strip().split()[0] for ln in block.splitlines()[1:] if ln.strip() and not ln.strip().startswith("--")]
    return [c for c in cols if c not in EMULATED_COLUMNS_EXCLUDED]


def parse_prometheus(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", ln)
        assert m, f"bad exposition line: {ln!r}"
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def test_seed_client_unchanged(vllm_server):
    from openai import OpenAI

    client = OpenAI(base_url=vllm_server + "/v1", api_key="none")
    resp = client.chat.completions.create(
        model="meta-llama/Llama-3.1-8B-Instruct",
        messages=[{"role": "user", "content": "Summarize this log"}],
        max_tokens=256,
    )
    assert resp.usage.completion_tokens == 256
    assert len(resp.choices[0].message.content.split()) == 256  # one word per token
    assert resp.choices[0].finish_reason == "length"


def test_streaming_usage_matches_streamed_tokens(vllm_server):
    from openai import OpenAI

    client = OpenAI(base_url=vllm_server + "/v1", api_key="none")
    stream = client.chat.completions.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "one two three four"}],
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "min_tokens": 40},
    )
    words, usage, finish = 0, None, None
    for ch in stream:
        if ch.choices:
            words += len((ch.choices[0].delta.content or "").split())
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = ch.usage
    assert usage is not None and usage.completion_tokens == 40 == words
    assert finish == "length"
    assert usage.prompt_tokens > 4  # chat template tokens count too


def test_completions_stream_and_nonstream(vllm_server):
    body = {"model": "llama-3.1-8b", "prompt": "a b c d e", "max_tokens": 7}
    r = httpx.post(vllm_server + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200
    j = r.json()
    assert j["usage"] == {"prompt_tokens": 6, "completion_tokens": 7, "total_tokens": 13}
    assert len(j["choices"][0]["text"].split()) == 7
    events = []
    with httpx.stream(
        "POST",
        vllm_server + "/v1/completions",
        timeout=30,
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 7
    assert sum(len(c["choices"][0]["text"].split()) for c in chunks if c["choices"]) == 7


def test_models_health_errors(vllm_server):
    assert httpx.get(vllm_server + "/health").status_code == 200
    models = httpx.get(vllm_server + "/v1/models").json()
    assert models["data"][0]["id"] == "llama-3.1-8b"
    r = httpx.post(
        vllm_server + "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    r = httpx.post(vllm_server + "/v1/completions", json={"model": "llama-3.1-8b", "prompt": "x", "max_tokens": 10**7})
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]


def test_metrics_parse(vllm_server):
    httpx.post(
        vllm_server + "/v1/completions", json={"model": "llama-3.1-8b", "prompt": "hello", "max_tokens": 5}, timeout=30
    )
    m = parse_prometheus(httpx.get(vllm_server + "/metrics").text)
    names = {k[0] for k in m}
    for n in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_count",
        "vllm:request_time_per_output_token_seconds_count",
    ):
        assert n in names, n
    gen = [v for (n, _), v in m.items() if n == "vllm:generation_tokens_total"][0]
    assert gen >= 5
    buckets = [v for (n, _), v in m.items() if n == "vllm:time_to_first_token_seconds_bucket"]
    assert buckets == sorted(buckets)


REAL_PAGE = ROOT / "tests" / "engines" / "data" / "vllm-metrics-0.25.0.txt"


def families(text: str) -> dict[str, dict]:
    """name -> {"type", "help", "labels": label names of its samples (less le), "buckets": le values} per family."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for f in text_string_to_metric_families(text):
        out[f.name] = {
            "type": f.type,
            "help": f.documentation,
            "labels": {k for s in f.samples for k in s.labels if k not in ("le", "finished_reason")},
            "buckets": [s.labels["le"] for s in f.samples if s.name.endswith("_bucket")],
            "reasons": sorted({s.labels["finished_reason"] for s in f.samples if "finished_reason" in s.labels}),
        }
    return out


@pytest.mark.parametrize("profile", ["vllm-like", "trtllm-like"])
def test_metrics_speak_vllm_025(profile, vllm_server, trt_server):
    """Every vllm:* family the emulator serves is one real vLLM 0.25.0 serves (tests/engines/data), with its type,
    HELP text, labels and histogram buckets; deprecated names are gone; every name wattbench reads is there."""
    from wattbench_agent.engines.vllm import METRICS, metric_name

    url = vllm_server if profile == "vllm-like" else trt_server
    httpx.post(url + "/v1/completions", json={"model": "llama-3.1-8b", "prompt": "a b c", "max_tokens": 9}, timeout=30)
    real = families(REAL_PAGE.read_text())
    page = httpx.get(url + "/metrics").text
    emulated = {n: f for n, f in families(page).items() if n.startswith("vllm:")}
    assert emulated and set(emulated) <= set(real), sorted(set(emulated) - set(real))
    for name, fam in emulated.items():
        assert fam == real[name], name
    m = parse_prometheus(page)
    samples = {n for n, _ in m}
    for what, names in METRICS.items():  # what wattbench reads, under its 0.25 name
        assert metric_name(samples, what) == names[0], what
    assert "vllm:gpu_cache_usage_perc" not in page and "vllm:time_per_output_token_seconds" not in page
    tpot_n = [v for (n, _), v in m.items() if n == "vllm:request_time_per_output_token_seconds_count"][0]
    e2e_n = [v for (n, _), v in m.items() if n == "vllm:e2e_request_latency_seconds_count"][0]
    assert tpot_n == e2e_n >= 1  # one per finished request, as vLLM observes it


def test_version_says_what_it_emulates(vllm_server, trt_server):
    from wattbench_agent.emulator.profiles import EMULATOR_VERSION

    v = httpx.get(vllm_server + "/version").json()
    assert v == {
        "version": f"wattbench-emulator-{EMULATOR_VERSION}",
        "emulates": "vllm 0.25.0",
        "profile": "vllm-like",
        "source": "emulated",
    }
    t = httpx.get(trt_server + "/version").json()
    assert t["emulates"] == "tensorrt-llm 0.18.2" and t["version"] == v["version"]
    from wattbench_agent.engines.trtllm import TrtllmAdapter
    from wattbench_agent.engines.vllm import VllmAdapter

    # the releases named are the ones wattbench's adapters were checked against
    assert v["emulates"].split()[1] in VllmAdapter.checked_versions
    assert t["emulates"].split()[1] == TrtllmAdapter.follows_version


def test_telemetry_schema_and_energy_monotone(vllm_server):
    cols = gpu_sample_columns()
    first = httpx.get(vllm_server + "/emulator/telemetry").json()
    assert first["source"] == "emulated" and len(first["gpus"]) == 1
    g0 = first["gpus"][0]
    assert sorted(g0) == sorted(cols + ["name"])  # contract section 3: gpu_samples columns + name
    assert re.fullmatch(r"GPU-emu-[0-9a-f]+-0", g0["gpu_uuid"])
    httpx.post(
        vllm_server + "/v1/completions", json={"model": "llama-3.1-8b", "prompt": "x", "max_tokens": 20}, timeout=30
    )
    second = httpx.get(vllm_server + "/emulator/telemetry").json()
    g1 = second["gpus"][0]
    assert g1["gpu_uuid"] == g0["gpu_uuid"]
    assert second["t_ns"] > first["t_ns"]
    assert g1["energy_mj"] > g0["energy_mj"]
    # energy grew at least at idle power over the interval
    dt = (second["t_ns"] - first["t_ns"]) * 1e-9
    assert (g1["energy_mj"] - g0["energy_mj"]) / 1000 >= 0.9 * 72 * dt
    assert g1["power_w"] <= g1["power_limit_w"]


def test_trtllm_truncation_visible(trt_server):
    prompt = " ".join(["w"] * 30)  # 31 prompt tokens (BOS) -> 33 left of max_seq_len 64
    events = []
    with httpx.stream(
        "POST",
        trt_server + "/v1/completions",
        timeout=30,
        json={
            "model": "llama-3.1-8b",
            "prompt": prompt,
            "max_tokens": 100,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ) as resp:
        assert resp.status_code == 200  # silently truncated: no error
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    usage = events[-1]["usage"]
    assert usage["prompt_tokens"] == 31 and usage["completion_tokens"] == 33 < 100
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"
    streamed = sum(len(e["choices"][0]["text"].split()) for e in events if e["choices"])
    assert streamed == 33
    # a prompt beyond the compiled max_input_len is rejected
    r = httpx.post(
        trt_server + "/v1/completions", json={"model": "llama-3.1-8b", "prompt": " ".join(["w"] * 60), "max_tokens": 1}
    )
    assert r.status_code == 400 and "max" in r.json()["error"]["message"].lower()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "emulate", "--port", "0", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("profile,kind", [("vllm-like", "OutOfMemoryError"), ("trtllm-like", "out of memory")])
def test_oom_refusal(profile, kind):
    p = run_cli("--profile", profile, "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "1", "--precision", "bf16")
    assert p.returncode != 0
    assert kind in p.stderr and "listening" not in p.stderr


def test_unknown_names_and_keys():
    p = run_cli("--profile", "vllm-like", "--model", "llama-3.1-8b", "--config", "max_batch_size=4")
    assert p.returncode == 2 and "max_batch_size" in p.stderr and "max_num_seqs" in p.stderr
    p = run_cli("--profile", "vllm-like", "--model", "gpt-5")
    assert p.returncode == 2 and "llama-3-70b" in p.stderr
    p = run_cli("--profile", "vllm-like", "--model", "llama-3.1-8b", "--gpu", "b300")
    assert p.returncode == 2 and "h200" in p.stderr
