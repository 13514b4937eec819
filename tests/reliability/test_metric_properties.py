"""Property-based tests of the load generator's metric computations (agent/wattbench_agent/loadgen/metrics.py)
against the definitions of docs/MEASUREMENT.md: TPOT = (E2E - TTFT) / (N - 1), ITL pools every gap between consecutive
content events, throughput counts only the tokens that arrived inside the window, percentiles are monotone,
and nothing depends on the order of the records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattbench_agent.loadgen.metrics import PERCENTILES, distribute_tokens, stats, summarize, tpot_ms

MS = 1_000_000
PKEYS = ["p50", "p90", "p95", "p99", "p999"]
finite_ms = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def record(draw, rid: str):
    """One `requests` row as the client writes it: content-event times, tokens per event, derived latencies."""
    sent = draw(st.integers(0, 5_000)) * MS
    ok = draw(st.booleans() | st.just(True))
    n_chunks = draw(st.integers(0 if not ok else 1, 12))
    first_gap = draw(st.integers(1, 400)) * MS // 4
    gaps = draw(
        st.lists(
            st.integers(0, 200_000).map(lambda g: g * 100), min_size=max(n_chunks - 1, 0), max_size=max(n_chunks - 1, 0)
        )
    )
    chunks = [sent + first_gap + sum(gaps[:i]) for i in range(n_chunks)] if n_chunks else []
    tokens = draw(st.lists(st.integers(1, 4), min_size=n_chunks, max_size=n_chunks))
    n_tok = sum(tokens)
    ttft = (chunks[0] - sent) / 1e6 if chunks else None
    e2e = (chunks[-1] - sent) / 1e6 if chunks else draw(finite_ms)
    return {
        "request_id": rid,
        "scheduled_ns": sent - draw(st.integers(0, 3)) * MS,
        "sent_ns": sent,
        "chunk_ns": chunks,
        "chunk_tokens": tokens,
        "first_token_ns": chunks[0] if chunks else None,
        "last_token_ns": chunks[-1] if chunks else None,
        "ttft_ms": ttft,
        "e2e_ms": e2e,
        "tpot_ms": tpot_ms(e2e, ttft, n_tok) if ok and chunks else None,
        "completion_tokens": n_tok if ok else None,
        "prompt_tokens": draw(st.integers(1, 100)),
        "error_kind": None if ok else draw(st.sampled_from(["http_5xx", "disconnected", "malformed_sse"])),
        "token_count_source": "usage",
    }


@st.composite
def load_point(draw, max_records: int = 25):
    n = draw(st.integers(1, max_records))
    recs = [draw(record(str(i))) for i in range(n)]
    ws = draw(st.integers(0, 3_000)) * MS
    we = ws + draw(st.integers(1, 4_000)) * MS
    return recs, ws, we


def in_window(r, ws, we):
    return r["sent_ns"] is not None and ws <= r["sent_ns"] <= we


values = st.lists(
    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False), min_size=1, max_size=200
)


@given(values)
def test_percentiles_are_monotone_and_bounded(xs):
    s = stats(xs)
    chain = [s["min"], *(s[k] for k in PKEYS), s["max"]]
    assert all(a <= b for a, b in zip(chain, chain[1:])), chain
    assert s["min"] - 1e-6 * abs(s["min"]) <= s["mean"] <= s["max"] + 1e-6 * abs(s["max"])
    assert s["stdev"] >= 0 and s["count"] == len(xs)
    assert s["stdev"] == pytest.approx(float(np.std(xs)), rel=1e-9, abs=1e-6)  # population stdev, as vllm bench


@given(values, st.randoms(use_true_random=False))
def test_stats_do_not_depend_on_order(xs, rnd):
    shuffled = list(xs)
    rnd.shuffle(shuffled)
    a, b = stats(xs), stats(shuffled)
    for k in [*PKEYS, "min", "max", "count"]:
        assert a[k] == b[k], k
    assert a["mean"] == pytest.approx(b["mean"], rel=1e-9, abs=1e-6)


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=50))
def test_percentiles_are_numpy_linear(xs):
    s = stats(xs)
    for key, p in zip(PKEYS, PERCENTILES):
        assert s[key] == pytest.approx(float(np.percentile(xs, p)), rel=1e-12, abs=1e-9)


@given(finite_ms, finite_ms, st.integers(-3, 10_000))
def test_tpot_definition(e2e, ttft, n):
    got = tpot_ms(e2e, ttft, n)
    if n <= 1:
        assert got is None  # N = 1 (or nothing) has no time per output token
    else:
        assert got == pytest.approx((e2e - ttft) / (n - 1))
    assert tpot_ms(None, ttft, n) is None and tpot_ms(e2e, None, n) is None


@given(st.integers(0, 500), st.lists(st.integers(0, 200), min_size=0, max_size=40))
def test_distribute_tokens_sums_and_never_starves(n, chars):
    out = distribute_tokens(n, chars)
    assert len(out) == len(chars)
    if chars:
        assert sum(out) == n and min(out) >= 0
        if n >= len(chars):
            assert min(out) >= 1  # every content event carried at least one token


@settings(max_examples=150, deadline=None)
@given(load_point())
def test_summary_follows_the_definitions(lp):
    recs, ws, we = lp
    s = summarize(recs, ws, we)
    window_s = (we - ws) / 1e9
    assert s["window_s"] == pytest.approx(window_s)
    ok_win = [r for r in recs if in_window(r, ws, we) and r["error_kind"] is None]

    # throughput: tokens of successful requests whose content events arrived inside the window, per second
    tokens = sum(
        t for r in recs if r["error_kind"] is None for c, t in zip(r["chunk_ns"], r["chunk_tokens"]) if ws <= c <= we
    )
    assert s["output_tokens_in_window"] == tokens
    assert s["output_token_throughput"] == pytest.approx(tokens / window_s)

    # ITL: every gap between consecutive content events, pooled over in-window successful requests
    gaps = [(b - a) / 1e6 for r in ok_win for a, b in zip(r["chunk_ns"], r["chunk_ns"][1:])]
    assert s["itl_ms"]["count"] == len(gaps)
    if gaps:
        assert s["itl_ms"]["min"] == pytest.approx(min(gaps)) and s["itl_ms"]["max"] == pytest.approx(max(gaps))
        assert s["itl_ms"]["mean"] == pytest.approx(sum(gaps) / len(gaps))

    # TPOT per request: (E2E - TTFT) / (N - 1) over in-window successful requests with N > 1
    tpots = [(r["e2e_ms"] - r["ttft_ms"]) / (r["completion_tokens"] - 1) for r in ok_win if r["completion_tokens"] > 1]
    assert s["tpot_ms"]["count"] == len(tpots)
    if tpots:
        assert s["tpot_ms"]["mean"] == pytest.approx(sum(tpots) / len(tpots))

    # TTFT <= E2E for every request, so every percentile of TTFT is at most the same percentile of E2E
    assert s["ttft_ms"]["count"] == s["e2e_ms"]["count"] == len(ok_win)
    if ok_win:
        for k in PKEYS:
            assert s["ttft_ms"][k] <= s["e2e_ms"][k] + 1e-9

    # counts
    assert s["completed"] + s["failed"] == s["sent"] == len(recs)
    assert s["sent_in_window"] == sum(in_window(r, ws, we) for r in recs)
    assert s["achieved_rate"] == pytest.approx(s["sent_in_window"] / window_s)
    assert 0 <= s["achieved_concurrency"] <= len(recs) + 1e-9
    assert sum(s["errors"].values()) == s["failed"]


@settings(max_examples=100, deadline=None)
@given(load_point(), st.randoms(use_true_random=False))
def test_summary_does_not_depend_on_record_order(lp, rnd):
    recs, ws, we = lp
    shuffled = list(recs)
    rnd.shuffle(shuffled)
    a, b = summarize(recs, ws, we), summarize(shuffled, ws, we)
    _assert_same(a, b)


@settings(max_examples=100, deadline=None)
@given(load_point(), st.integers(1, 5_000))
def test_tokens_outside_the_window_do_not_count(lp, after_ms):
    """A request whose content all arrived after the window (drain) adds nothing to throughput or latency."""
    recs, ws, we = lp
    base = summarize(recs, ws, we)
    late_sent = we + after_ms * MS
    late = {
        "request_id": "late",
        "scheduled_ns": late_sent,
        "sent_ns": late_sent,
        "chunk_ns": [late_sent + MS, late_sent + 2 * MS],
        "chunk_tokens": [5, 5],
        "first_token_ns": late_sent + MS,
        "last_token_ns": late_sent + 2 * MS,
        "ttft_ms": 1.0,
        "e2e_ms": 2.0,
        "tpot_ms": 1 / 9,
        "completion_tokens": 10,
        "prompt_tokens": 1,
        "error_kind": None,
    }
    with_late = summarize([*recs, late], ws, we)
    assert with_late["output_tokens_in_window"] == base["output_tokens_in_window"]
    assert with_late["output_token_throughput"] == base["output_token_throughput"]
    assert with_late["ttft_ms"] == base["ttft_ms"] and with_late["itl_ms"] == base["itl_ms"]
    assert with_late["sent"] == base["sent"] + 1 and with_late["sent_in_window"] == base["sent_in_window"]


@settings(max_examples=60, deadline=None)
@given(load_point(), st.floats(min_value=1, max_value=5_000), st.floats(min_value=1, max_value=500))
def test_goodput_never_exceeds_completed_in_window(lp, ttft_slo, tpot_slo):
    """Goodput counts the requests request throughput counts (ended in the window), over the same window."""
    recs, ws, we = lp
    s = summarize(recs, ws, we, slo={"ttft_ms": ttft_slo, "tpot_ms": tpot_slo})
    assert 0 <= s["goodput"] <= s["request_throughput"] + 1e-9
    assert s["request_throughput"] == pytest.approx(s["finished_in_window"] / s["window_s"])
    loose = summarize(recs, ws, we, slo={"ttft_ms": 1e12, "tpot_ms": 1e12, "e2e_ms": 1e12})
    assert loose["goodput"] == pytest.approx(s["request_throughput"])
    assert loose["goodput"] >= s["goodput"] - 1e-9  # a looser SLO never lowers goodput


def _assert_same(a, b, path="summary"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    else:
        assert a == b, path
