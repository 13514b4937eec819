"""The load generator against real loopback servers (its own process): metrics, shapes, errors, API."""

import asyncio
import json
import socket
import threading

import pytest

from wattbench_agent.loadgen import LoadSpec, run_load, summarize
from wattbench_agent.loadgen.testserver import server_process

from .conftest import table_columns


def test_metrics_against_known_timing(server, tmp_path):
    calls = []
    out = tmp_path / "r.jsonl"
    res = run_load(
        LoadSpec(
            url=server,
            model="m",
            concurrency=4,
            input_tokens=32,
            output_tokens=16,
            warmup_s=0.3,
            duration_s=1.2,
            seed=1,
        ),
        out=out,
        on_window_start=lambda: calls.append("start"),
        on_window_end=lambda: calls.append("end"),
    )
    s = res.summary
    assert calls == ["start", "end"]
    assert s["failed"] == 0 and s["completed"] >= 8
    # the server's true timing is TTFT 50 ms, ITL 10 ms; tolerances are generous (shared 2-core host)
    assert 45 <= s["ttft_ms"]["p50"] <= 120
    assert 8 <= s["itl_ms"]["p50"] <= 14
    assert 8 <= s["tpot_ms"]["mean"] <= 16
    assert 190 <= s["e2e_ms"]["p50"] <= 320
    for r in res.records:
        assert r["completion_tokens"] == 16 and r["token_count_source"] == "usage"
        assert len(r["chunk_ns"]) == 16 and r["chunk_tokens"] == [1] * 16
        assert r["finish_reason"] == "length" and r["http_status"] == 200
        assert r["in_window"] == (res.window_start_ns <= r["sent_ns"] <= res.window_end_ns)
        assert r["ttft_ms"] == pytest.approx((r["chunk_ns"][0] - r["sent_ns"]) / 1e6)
    assert any(not r["in_window"] for r in res.records)  # warm-up requests are recorded, outside the window
    assert res.window_end_ns - res.window_start_ns == int(1.2e9)
    assert 3.0 <= s["achieved_concurrency"] <= 4.01
    # records: exactly the requests columns minus what the agent fills in; flushed to the JSONL
    # (and what ingest computes: chunk_tokens_each from chunk_tokens, the token store's references; warehouse._COMPUTED)
    computed = {"chunk_tokens_each", "events_file", "events_at", "events_n", "counts_file"}
    cols = set(table_columns("requests")) - {"run_id", "source", "deployment_id"} - computed
    assert all(set(r) == cols for r in res.records)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == len(res.records)
    # summary recomputes from stored records
    again = summarize(lines, res.window_start_ns, res.window_end_ns)
    assert again["ttft_ms"] == s["ttft_ms"] and again["output_token_throughput"] == s["output_token_throughput"]
    row = res.load_run_row()
    assert set(row) <= set(table_columns("load_runs"))
    assert row["status"] == "ok" and row["sent"] == len(res.records) and row["window_s"] == pytest.approx(1.2)
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert {"p50", "p90", "p99", "mean"} <= set(s[k])
    for k in ("request_throughput", "output_token_throughput", "completed", "failed", "window_s"):
        assert k in s


@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_completions_api_and_transports(fast_server, transport):
    res = run_load(
        LoadSpec(
            url=fast_server + "/v1",
            model="m",
            api="completions",
            concurrency=2,
            output_tokens=5,
            duration_s=0.4,
            transport=transport,
        )
    )
    assert res.summary["failed"] == 0 and res.summary["completed"] >= 2
    assert all(r["completion_tokens"] == 5 and len(r["chunk_ns"]) == 5 for r in res.records)


def test_open_loop_poisson_and_cap(fast_server):
    res = run_load(
        LoadSpec(
            url=fast_server, model="m", shape="poisson", rate=40, concurrency=3, output_tokens=4, duration_s=0.6, seed=3
        )
    )
    assert res.summary["failed"] == 0
    sched = sorted(r["scheduled_ns"] for r in res.records)
    assert len(sched) >= 5
    assert res.summary["send_lateness_ms"]["p50"] is not None
    assert res.summary["requested_rate"] == 40


def test_trace_replay(fast_server, tmp_path):
    t = tmp_path / "trace.jsonl"
    t.write_text(
        "\n".join(
            json.dumps({"timestamp": 100 + i * 0.05, "input_tokens": 8 + i, "output_tokens": 3 + i}) for i in range(6)
        )
    )
    res = run_load(LoadSpec(url=fast_server, model="m", shape="trace", params={"trace_path": str(t)}, duration_s=0))
    assert res.summary["sent"] == 6 and res.summary["failed"] == 0
    by_id = sorted(res.records, key=lambda r: r["request_id"])
    assert [r["max_tokens"] for r in by_id] == [3, 4, 5, 6, 7, 8]
    assert [r["completion_tokens"] for r in by_id] == [3, 4, 5, 6, 7, 8]
    offs = [(r["scheduled_ns"] - by_id[0]["scheduled_ns"]) / 1e9 for r in by_id]
    assert offs == pytest.approx([0, 0.05, 0.1, 0.15, 0.2, 0.25], abs=1e-6)


def test_every_error_kind_is_one_record_and_the_run_goes_on(tmp_path):
    with server_process(ttft_ms=2, itl_ms=1, mode="mix") as url:
        out = tmp_path / "e.jsonl"
        res = run_load(
            LoadSpec(
                url=url,
                model="m",
                concurrency=2,
                output_tokens=6,
                duration_s=30,
                max_requests=36,
                honor_retry_after=True,
            ),
            out=out,
        )
    recs = res.records
    assert len(recs) == 36 and len({r["request_id"] for r in recs}) == 36
    assert len(out.read_text().splitlines()) == 36
    kinds = {r["error_kind"] for r in recs}
    assert {
        None,
        "http_5xx",
        "http_4xx",
        "rate_limited",
        "disconnected",
        "malformed_sse",
        "empty_choices",
        "stream_error",
    } <= kinds
    rl = next(r for r in recs if r["error_kind"] == "rate_limited")
    assert rl["http_status"] == 429 and "Retry-After: 0" in rl["error_text"]
    nu = [r for r in recs if r["error_kind"] is None and r["token_count_source"] == "estimate"]
    assert nu and all(r["completion_tokens"] == len(r["chunk_ns"]) for r in nu)  # no usage chunk
    multi = [r for r in recs if r["error_kind"] is None and r["chunk_tokens"] and r["chunk_tokens"][0] == 2]
    assert multi and all(sum(r["chunk_tokens"]) == r["completion_tokens"] == 6 for r in multi)
    assert res.summary["completed"] + res.summary["failed"] == 36


@pytest.mark.parametrize("mode,kind", [("hang", "timeout"), ("hang_head", "timeout")])
def test_timeouts(mode, kind):
    with server_process(ttft_ms=2, itl_ms=1, mode=mode) as url:
        res = run_load(LoadSpec(url=url, model="m", concurrency=2, output_tokens=4, duration_s=0.3, timeout_s=0.4))
    assert res.records and all(r["error_kind"] == kind for r in res.records)
    assert res.status == "failed" and res.load_run_row()["error_kind"] == kind
    assert res.summary["drain_s"] < 2


def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run_load(LoadSpec(url=f"http://127.0.0.1:{port}", model="m", concurrency=1, duration_s=0.2, max_requests=3))
    assert len(res.records) == 3 and all(r["error_kind"] == "connect_error" for r in res.records)


def test_run_load_inside_a_running_event_loop(fast_server):
    async def caller():
        return run_load(LoadSpec(url=fast_server, model="m", concurrency=1, output_tokens=3, duration_s=0.2))

    res = asyncio.run(caller())
    assert res.summary["completed"] >= 1

    box = {}
    th = threading.Thread(
        target=lambda: box.setdefault(
            "r", run_load(LoadSpec(url=fast_server, model="m", concurrency=1, output_tokens=3, duration_s=0.2))
        )
    )
    th.start()
    th.join()
    assert box["r"].summary["completed"] >= 1


def test_two_worker_processes(fast_server, tmp_path):
    calls = []
    out = tmp_path / "w.jsonl"
    res = run_load(
        LoadSpec(url=fast_server, model="m", concurrency=4, output_tokens=4, duration_s=0.6, warmup_s=0.2),
        out=out,
        workers=2,
        on_window_start=lambda: calls.append("start"),
        on_window_end=lambda: calls.append("end"),
    )
    assert calls == ["start", "end"]
    assert res.summary["workers"] == 2 and res.summary["failed"] == 0
    ids = [r["request_id"] for r in res.records]
    assert len(ids) == len(set(ids)) == len(out.read_text().splitlines())
    assert {int(i) % 2 for i in ids} == {0, 1}
