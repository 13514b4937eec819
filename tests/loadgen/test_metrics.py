import pytest

from wattbench_agent.loadgen.metrics import distribute_tokens, stats, summarize, tpot_ms


def rec(sent, chunks, ok=True, ct=None, in_window=None, rid="r"):
    ct = len(chunks) if ct is None else ct
    return {
        "request_id": rid,
        "scheduled_ns": sent,
        "sent_ns": sent,
        "chunk_ns": chunks,
        "chunk_tokens": distribute_tokens(ct, [1] * len(chunks)),
        "first_token_ns": chunks[0] if chunks else None,
        "last_token_ns": chunks[-1] if chunks else None,
        "ttft_ms": (chunks[0] - sent) / 1e6 if chunks else None,
        "e2e_ms": (chunks[-1] - sent) / 1e6 if chunks else 1.0,
        "tpot_ms": tpot_ms((chunks[-1] - sent) / 1e6, (chunks[0] - sent) / 1e6, ct) if chunks and ok else None,
        "completion_tokens": ct,
        "prompt_tokens": 10,
        "error_kind": None if ok else "http_5xx",
        "in_window": in_window,
    }


MS = 1_000_000


def test_summary_of_known_records():
    # window [1000 ms, 2000 ms]; two requests sent inside it, one before (warm-up), one failed
    a = rec(1100 * MS, [1150 * MS, 1160 * MS, 1170 * MS], in_window=True, rid="a")
    b = rec(1500 * MS, [1600 * MS, 1620 * MS], in_window=True, rid="b")
    w = rec(900 * MS, [950 * MS, 1010 * MS, 1020 * MS], in_window=False, rid="w")  # warm-up request
    f = rec(1200 * MS, [], ok=False, in_window=True, rid="f")
    s = summarize([a, b, w, f], 1000 * MS, 2000 * MS)
    assert s["window_s"] == pytest.approx(1.0)
    assert s["ttft_ms"]["count"] == 2 and s["ttft_ms"]["p50"] == pytest.approx(75.0)
    assert sorted([s["itl_ms"]["min"], s["itl_ms"]["max"]]) == pytest.approx([10.0, 20.0])
    assert s["itl_ms"]["count"] == 3  # gaps of in-window successful requests only
    assert s["e2e_ms"]["mean"] == pytest.approx((70 + 120) / 2)
    assert s["tpot_ms"]["mean"] == pytest.approx((10 + 20) / 2)
    # tokens arriving in the window: 3 (a) + 2 (b) + 2 of the warm-up request = 7
    assert s["output_tokens_in_window"] == 7 and s["output_token_throughput"] == pytest.approx(7.0)
    assert s["completed"] == 3 and s["failed"] == 1 and s["sent"] == 4 and s["sent_in_window"] == 3
    assert s["achieved_rate"] == pytest.approx(3.0)
    assert s["request_throughput"] == pytest.approx(3.0)  # a, b and w finished inside the window
    assert s["errors"] == {"http_5xx": 1}
    for k in ("p50", "p90", "p95", "p99", "p999", "mean", "stdev"):
        assert k in s["ttft_ms"]


def test_stats_empty_and_tpot():
    assert stats([])["p50"] is None and stats([])["count"] == 0
    assert tpot_ms(100.0, 10.0, 1) is None
    assert tpot_ms(100.0, 10.0, 10) == pytest.approx(10.0)


@pytest.mark.parametrize("n,chars", [(5, [1, 1, 1, 1, 1]), (9, [1, 4, 1, 4]), (2, [3, 3, 3, 3]), (0, [1, 2])])
def test_distribute_tokens_sums(n, chars):
    out = distribute_tokens(n, chars)
    assert sum(out) == n and len(out) == len(chars) and min(out) >= 0
    if n >= len(chars):
        assert min(out) >= 1


def test_goodput_counts_the_requests_throughput_counts_over_the_same_window():
    """Goodput and request throughput: one window, one denominator, one set of requests (successful requests that
    ended inside the window), so goodput never exceeds throughput. Requests sent late in the window that met the SLO
    but ended in the drain counted for goodput and not for throughput: goodput 3 > throughput 1 req/s here."""
    done = rec(1100 * MS, [1150 * MS, 1160 * MS], in_window=True, rid="done")
    late = [rec(t * MS, [(t + 40) * MS, 2100 * MS], in_window=True, rid=f"late{t}") for t in (1900, 1950)]
    s = summarize([done, *late], 1000 * MS, 2000 * MS, slo={"ttft_ms": 100})
    assert s["request_throughput"] == pytest.approx(1.0) and s["finished_in_window"] == 1
    assert s["goodput"] == pytest.approx(1.0)  # done: the one request throughput counts, within the SLO
    s = summarize([done, *late], 1000 * MS, 2000 * MS, slo={"ttft_ms": 45})
    assert s["goodput"] == pytest.approx(0.0)  # done (50 ms) misses it; the late ones (40 ms) are not in the window
    assert s["goodput"] <= s["request_throughput"]
