"""A long stream stays bounded: past MAX_CHUNK_EVENTS a request's content events are coalesced one entry a second
(issue 18, item 6), and every figure stays right: TTFT, E2E and TPOT exact, tokens per window within a second,
inter-token gaps from the exact part only (agent side here; warehouse side: tests/test_point_stats.py)."""

from __future__ import annotations

import json

import numpy as np

from wattbench_agent.loadgen import client as loadgen_client
from wattbench_agent.loadgen.client import SSEParser
from wattbench_agent.loadgen.metrics import exact_chunks, summarize
from wattbench_agent.loadgen.vllm_result import metric_values


def _event(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


def stream(parser: SSEParser, n: int, itl_ns: int, t0: int) -> list[int]:
    times = [t0 + i * itl_ns for i in range(n)]
    for t in times:
        parser.feed(t, _event("ab"))
    return times


def test_a_stream_past_the_cap_keeps_its_head_and_one_entry_a_second():
    p = SSEParser(chat=True)
    p.cap = 1000
    times = stream(p, 20_000, 10_000_000, 5_000_000_000)  # 200 s of 100 tok/s
    assert p.exact == 1000 and p.events() == 20_000
    # 1,000 exact + 190 s of tail, one entry a second (the bucket boundary may split one more)
    assert 1000 + 189 <= len(p.chunk_ns) <= 1000 + 191
    assert p.chunk_ns[:1000] == times[:1000] and p.chunk_ns[-1] == times[-1]
    assert sum(p.tail_counts) == 19_000


def test_the_record_of_a_capped_stream_keeps_every_figure(monkeypatch):
    monkeypatch.setattr(loadgen_client, "MAX_CHUNK_EVENTS", 500)
    p = SSEParser(chat=True)
    assert p.cap == 500
    sent = 1_000_000_000
    itl = 20_000_000
    times = stream(p, 3000, itl, sent + 100_000_000)  # TTFT 100 ms, 3,000 tokens 20 ms apart: 60 s
    p.usage = {"completion_tokens": 3000, "prompt_tokens": 10}
    gen = loadgen_client.RequestRunner.__new__(loadgen_client.RequestRunner)
    gen.lp, gen.tok = "lp", None
    rec = gen._record("r0", sent, sent, None, 200, p, 10, 3000, None)
    assert rec["chunks_exact"] == 500 and len(rec["chunk_ns"]) < 600
    assert sum(rec["chunk_tokens"]) == 3000
    assert rec["ttft_ms"] == 100.0 and rec["e2e_ms"] == (times[-1] - sent) / 1e6
    assert abs(rec["tpot_ms"] - 20.0) < 1e-9
    rec["in_window"] = True
    gaps = np.diff(exact_chunks(rec)) / 1e6
    assert len(gaps) == 499 and np.allclose(gaps, 20.0)
    assert np.allclose(metric_values([rec], "itl"), 20.0)  # vLLM-style result: the exact part only
    s = summarize([rec], sent, times[-1])
    assert abs(s["itl_ms"]["p99"] - 20.0) < 1e-9
    # tokens in a window: exact to within the one-second buckets of the tail
    half = summarize([rec], sent, sent + 30_000_000_000)
    true_in_half = sum(1 for t in times if t <= sent + 30_000_000_000)
    assert abs(half["output_tokens_in_window"] - true_in_half) <= 50  # one bucket: 1 s at 50 tok/s


def test_an_ordinary_request_is_not_touched():
    p = SSEParser(chat=True)
    times = stream(p, 128, 20_000_000, 0)
    assert p.exact is None and p.chunk_ns == times and p.tail_counts == []
