"""An open-loop window is the span its schedule covers: `--rate R --duration D` measures over D seconds, whenever
the last arrival fell in them (docs/MEASUREMENT.md, "Steady-state window"). Closed loops and early stops keep their
windows. Real loopback servers: the load generator's test server."""

from __future__ import annotations

import pytest

from wattbench_agent.loadgen import LoadSpec, run_load, shapes
from wattbench_agent.loadgen.search import SearchSpec, run_search

# seed 1 of Poisson at 2 req/s over 3 s: three arrivals, the last at 0.69 s; the window used to end at the last answer
# (0.7 s: achieved rate 4.3 req/s for a 2 req/s schedule)
SEED, RATE, DURATION = 1, 2.0, 3.0
BASE = dict(model="m", input_tokens=8, output_tokens=4, api="completions", seed=SEED)


def test_the_schedule_is_what_the_test_says():
    offsets = shapes.arrival_offsets("poisson", rate=RATE, horizon_s=DURATION, seed=SEED)
    assert len(offsets) == 3 and offsets[-1] < 0.8  # the window would have closed 2.2 s early


@pytest.mark.parametrize("workers", [1, 2])
def test_an_open_loop_window_is_the_scheduled_span(fast_server, workers):
    spec = LoadSpec(url=fast_server, shape="poisson", rate=RATE, duration_s=DURATION, **BASE)
    s = run_load(spec, workers=workers).summary
    assert s["sent_in_window"] == 3 and s["completed"] == 3
    assert s["window_s"] == pytest.approx(DURATION, abs=0.02)
    assert s["achieved_rate"] == pytest.approx(3 / s["window_s"])  # sent in it / its length: 1.0 req/s
    assert s["request_throughput"] == pytest.approx(3 / s["window_s"])


def test_the_window_starts_after_the_warmup_and_still_spans_the_duration(fast_server):
    spec = LoadSpec(url=fast_server, shape="poisson", rate=RATE, duration_s=DURATION, warmup_s=0.5, **BASE)
    res = run_load(spec)
    assert res.window_s == pytest.approx(DURATION, abs=0.02)
    assert (res.window_start_ns - res.t0_ns) / 1e9 == pytest.approx(0.5, abs=1e-6)


def test_a_max_requests_cut_and_a_closed_loop_keep_their_windows(fast_server):
    """--num-prompts within a duration stops sending early: the window ends when sending ended (as before)."""
    cut = run_load(LoadSpec(url=fast_server, shape="poisson", rate=20, duration_s=5, max_requests=4, **BASE))
    assert cut.summary["sent"] == 4 and cut.window_s < 2.0
    closed = run_load(
        LoadSpec(url=fast_server, shape="concurrency", concurrency=1, duration_s=5, max_requests=3, **BASE)
    )
    assert closed.summary["sent"] == 3 and closed.window_s < 2.0


def test_a_searchs_first_probe_has_the_window_it_asked_for(fast_server):
    search = SearchSpec(over="rate", slo={"ttft_ms": 5000}, start=RATE, max_probes=1, repeats=1)
    base = LoadSpec(url=fast_server, shape="poisson", rate=RATE, duration_s=DURATION, **BASE)
    result = run_search(base, search, lambda spec, probe, **kw: run_load(spec, slo=search.slo, **kw))
    first = result.probes[0]
    assert first.window_s == pytest.approx(DURATION, abs=0.02)
    assert first.summary["achieved_rate"] == pytest.approx(first.summary["sent_in_window"] / first.window_s)
