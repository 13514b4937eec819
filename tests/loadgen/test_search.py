"""The SLO capacity search (agent/wattbench_agent/loadgen/search.py, `wattbench load --search`): against loopback
servers of known capacity (the test server's --slots: at most N streams generate at once, the rest wait, so the
TTFT rises past a known load), each edge case (no load meets the SLO, every load meets it, the server fails in the
middle), the probe and time bounds, the JSON the CLI prints and the file it saves."""

from __future__ import annotations

import json
import math
from functools import partial
from types import SimpleNamespace

import pytest

from wattbench_agent.loadgen import LoadSpec, run_load
from wattbench_agent.loadgen.search import (
    SearchError,
    SearchSpec,
    _first_crossing,
    answer,
    probe_spec,
    run_search,
)
from wattbench_agent.loadgen.testserver import server_process

from .conftest import wattbench_load

# 4 slots, TTFT 20 ms, 10 ms a token, 16 tokens: a stream holds its slot 170 ms. Up to 4 closed-loop streams never
# wait (TTFT 20 ms, 80 ms under the bound: room for a loaded host); a fifth always waits for a slot, up to 170 ms:
# under a 100 ms TTFT bound the capacity is 4.
SLOTS = dict(ttft_ms=20, itl_ms=10, slots=4)
LOAD = dict(model="model", input_tokens=16, output_tokens=16, warmup_s=0.3, duration_s=1.5, api="completions")


@pytest.fixture(scope="module")
def slot_server():
    with server_process(**SLOTS) as url:
        yield url


def _measure(slo):
    def measure(spec, probe, on_record=None, stop_event=None):
        return run_load(spec, slo=slo, on_record=on_record, stop_event=stop_event)

    return measure


_cli = partial(wattbench_load, timeout=300)


# ------------------------------------------------------------------------------------------------ real servers
def test_a_concurrency_search_finds_the_servers_known_capacity(slot_server):
    search = SearchSpec(over="concurrency", slo={"ttft_ms": 100}, start=2, tolerance=0.1, repeats=3)
    base = LoadSpec(url=slot_server, shape="concurrency", concurrency=2, **LOAD)
    lines: list[str] = []
    result = run_search(base, search, _measure(search.slo), log=lines.append)
    assert result.status == "found" and result.value == 4
    assert result.lo == 4 and result.hi == 4  # every repeat met at 4 streams and missed at 5: whole streams
    assert result.binding == "ttft_ms" and result.binding_load == 5 and result.binding_share < 0.99
    loads = [p.load for p in result.probes]
    assert loads[:3] == [2, 4, 8]  # bracket: x2 until a miss
    assert loads.count(4) == 3 and loads.count(3) == 3  # the capacity and one step below, three windows each
    assert all(p.passed for p in result.probes if p.load <= 4) and not any(
        p.passed for p in result.probes if p.load > 4
    )
    assert len(lines) == len(result.probes) and "-> meets" in lines[0]
    text = answer(result)
    assert text.startswith("capacity 4 streams [4, 4]") and "binding: TTFT at 5 streams" in text
    assert "queueing" in text and f"{len(result.probes)} probes" in text


def test_an_oversaturated_probe_ends_early_and_the_rate_found_is_below_the_servers_limit(tmp_path):
    """2 slots of 100 ms each serve at most 20 req/s; nearly regular arrivals (gamma, burstiness 20) at 60 req/s
    queue without bound, so that probe stops early: its window is shorter than asked, its verdict oversaturated."""
    with server_process(ttft_ms=10, itl_ms=10, slots=2) as url:
        search = SearchSpec(over="rate", slo={"ttft_ms": 60}, start=60, tolerance=0.25, repeats=1, min_load=2)
        base = LoadSpec(
            url=url,
            shape="gamma",
            rate=60,
            params={"burstiness": 20},
            **{**LOAD, "output_tokens": 10, "duration_s": 3.0},
        )
        result = run_search(base, search, _measure(search.slo))
    first = result.probes[0]
    assert first.verdict == "oversaturated" and first.stopped_early is not None
    assert first.window_s < 3.0 * 0.8 and first.stopped_early["in_flight_slope_per_s"] > 0
    assert first.summary["window_s"] == pytest.approx(first.window_s)
    assert result.status == "found" and 5 <= result.value < 20
    assert all(p.verdict != "meets" for p in result.probes if p.load > 20)


def test_no_load_meeting_the_slo_is_an_answer_not_an_error(slot_server):
    """TTFT is 20 ms at any load: a 10 ms bound is never met. Exit 0, and the answer says what the lowest probe saw."""
    r = _cli(
        "--url", slot_server, "--search", "concurrency", "--goodput", "ttft:10", "--concurrency", "2",
        "--input-tokens", "16", "--output-tokens", "16", "--duration", "1", "--warmup", "0.2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("no load meets the SLO (TTFT p99 <= 10 ms")
    assert "at the lowest probe, 1 streams: 0.0% of requests met the SLO" in last
    assert "what limits it: queueing" in last


def test_every_load_meeting_the_slo_up_to_the_bound_says_at_least(slot_server):
    r = _cli(
        "--url", slot_server, "--search", "concurrency", "--goodput", "ttft:500", "--search-max", "4",
        "--input-tokens", "16", "--output-tokens", "16", "--duration", "1", "--warmup", "0.2",
        "--search-repeats", "1", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["capacity"]["bound"] == "at_least" and out["capacity"]["value"] == 4
    assert out["capacity"]["hi"] is None and out["capacity"]["binding"] is None
    assert out["answer"].startswith("at least 4 streams (closed-loop streams) meets the SLO")


def test_a_server_that_fails_mid_search_ends_it_with_the_probes_kept_and_a_nonzero_exit(tmp_path):
    """The server exits when its 60th request arrives (the third probe): the search stops there, exit 1, and the
    probes measured before are in the JSON, the saved result and the per-request file."""
    with server_process(ttft_ms=5, itl_ms=2, die_after=60) as url:
        r = _cli(
            "--url", url, "--search", "concurrency", "--goodput", "ttft:500", "--concurrency", "1",
            "--input-tokens", "16", "--output-tokens", "16", "--duration", "1", "--warmup", "0",
            "--json", "--save-result", "--result-dir", str(tmp_path), "--result-filename", "s.json",
            "--out", str(tmp_path / "r.jsonl"), "--no-fail-fast",
        )  # fmt: skip
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["capacity"]["bound"] == "server_failed" and out["capacity"]["value"] is None
    assert out["answer"].startswith("search ended: the server stopped answering during probe")
    probes = out["probes"]
    assert len(probes) >= 2 and probes[0]["verdict"] == "meets"
    saved = json.loads((tmp_path / "s.json").read_text())
    assert len(saved["probes"]) == len(probes) and len(saved["probe_summaries"]) == len(probes)
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len({r["load_point_id"] for r in records}) == len(probes)


def test_the_json_line_and_the_saved_result(slot_server, tmp_path):
    r = _cli(
        "--url", slot_server, "--search", "concurrency", "--goodput", "ttft:100", "tpot:50", "--concurrency", "4",
        "--slo-attainment", "0.95", "--input-tokens", "16", "--output-tokens", "16", "--duration", "1",
        "--warmup", "0.2", "--search-repeats", "2", "--json", "--save-result", "--result-dir", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1  # --json: one line on stdout, the probes and the answer on stderr
    out = json.loads(lines[0])
    cap = out["capacity"]
    assert {"value", "lo", "hi", "binding", "probes"} <= set(cap)
    assert cap["value"] == 4 and cap["lo"] <= 4 <= cap["hi"] and cap["binding"] == "ttft_ms"
    assert cap["probes"] == len(out["probes"]) and cap["unit"] == "streams" and cap["window_s"] > 0
    assert out["slo"] == {"ttft_ms": 100.0, "tpot_ms": 50.0} and out["attainment"] == 0.95
    assert {"probe", "phase", "load", "verdict", "attainment", "ttft_p95_ms", "window_s"} <= set(out["probes"][0])
    assert "probe  1 bracket" in r.stderr and "capacity 4 streams" in r.stderr
    (saved,) = list(tmp_path.glob("wattbench-search-concurrency-model-*.json"))
    doc = json.loads(saved.read_text())
    assert doc["capacity"] == cap and doc["wattbench"]["url"] == slot_server and doc["wattbench"]["api"] == "chat"
    assert len(doc["probe_summaries"]) == cap["probes"] and doc["probe_summaries"][0]["slo_attainment"] == 1.0


def test_the_probe_bound_stops_the_search_and_says_so(slot_server):
    search = SearchSpec(over="concurrency", slo={"ttft_ms": 100}, start=1, repeats=1, max_probes=2)
    base = LoadSpec(url=slot_server, shape="concurrency", concurrency=1, **LOAD)
    result = run_search(base, search, _measure(search.slo))
    assert len(result.probes) == 2 and result.stopped_by == "max_probes"
    assert result.status == "at_least" and result.value == 2
    assert "stopped before finding a load that missed it" in answer(result)


def test_flags_a_search_needs_are_one_message_each(slot_server):
    r = _cli("--url", slot_server, "--search", "rate", "--rate", "2", "--duration", "1")
    assert r.returncode == 2 and "--search needs an SLO: --goodput" in r.stderr
    r = _cli("--url", slot_server, "--search", "rate", "--goodput", "ttft:50", "--slo-attainment", "1.5")
    assert r.returncode == 2 and "attainment must be in (0, 1]" in r.stderr
    r = _cli("--url", slot_server, "--search", "rate", "--goodput", "ttft:50", "--concurrency", "4")
    assert r.returncode == 2 and "--concurrency does not go with it" in r.stderr
    r = _cli("--url", slot_server, "--search", "rate", "--goodput", "ttfb:50")
    assert r.returncode == 2 and "KEY one of ttft, tpot, e2el" in r.stderr


# ------------------------------------------------------------------------------- the arithmetic, on known curves
def _curve(attainment_at):
    """A measure function over a known attainment curve (what the server would have answered), for the search's
    bookkeeping: every window has 200 requests."""

    def measure(spec, probe, on_record=None, stop_event=None):
        load = spec.rate if spec.shape != "concurrency" else spec.concurrency
        a = attainment_at(load, probe.repeat)
        summary = {
            "slo_attainment": a,
            "slo_met": {"ttft_ms": a, "no_error": 1.0},
            "sent_in_window": 200,
            "window_s": 10.0,
            "ttft_ms": {"p99": 100 if a >= 0.99 else 900},
        }
        return SimpleNamespace(summary=summary, status="ok", error_kind=None, error_text=None)

    return measure


def _base():
    return LoadSpec(url="http://127.0.0.1:9", shape="poisson", rate=1.0, duration_s=10.0)


def test_bisection_stops_at_the_tolerance_and_repeats_reach_their_count():
    """Attainment 1 below 10 req/s, 0.5 above: bracket 1, 2, ..., 16; bisect in log-load until within 10%."""
    search = SearchSpec(over="rate", slo={"ttft_ms": 500}, start=1, tolerance=0.1, repeats=3, early_stop=False)
    result = run_search(_base(), search, _curve(lambda x, r: 1.0 if x <= 10 else 0.5))
    assert result.status == "found" and 9.0 < result.value <= 10
    fail = min(p.load for p in result.probes if not p.passed)
    assert fail / result.value <= 1.1 + 1e-9 and fail > 10
    assert [p.phase for p in result.probes[:5]] == ["bracket"] * 5
    assert len(result.at_probes(result.value)) == 3
    assert result.lo <= result.value <= result.hi <= fail


def test_a_load_meets_only_when_every_window_does_and_the_interval_holds_the_spread():
    """Issue 39 item 5: windows that disagree at a load (1.0, 0.985, 1.0) pooled to 0.995 and counted as met against
    0.99, though one window in three missed. Now a load meets only when every window does (load_meets): 8.72 misses,
    the capacity is 8 (three windows at 1.0), the binding bound is read from the window that missed, and the interval
    reaches from 8 to where the upper end of attainment's t interval over 8.72's windows crosses the target (between
    8.72 and 9.51, the next load measured), in log-load."""

    def curve(x, r):
        if x <= 8.5:
            return 1.0
        return {1: 1.0, 2: 0.985, 3: 1.0}[r] if x <= 9.5 else 0.9

    search = SearchSpec(over="rate", slo={"ttft_ms": 500}, start=8, tolerance=0.1, repeats=3, early_stop=False)
    result = run_search(_base(), search, _curve(curve))
    assert [p.verdict for p in result.at_probes(8.72)] == ["meets", "misses", "meets"]
    assert result.status == "found" and result.value == 8.0 and result.missed_load == 8.72
    half = 4.303 * math.sqrt(((1 - 0.995) ** 2 * 2 + (0.985 - 0.995) ** 2) / 2) / math.sqrt(3)
    a_hi = 0.995 + half
    hi = math.exp(math.log(8.72) + (a_hi - 0.99) / (a_hi - 0.9) * math.log(9.51 / 8.72))  # between 8.72 and 9.51
    assert result.lo == 8.0 and result.hi == pytest.approx(hi) and 8.72 < result.hi < 9.51
    assert result.binding == "ttft_ms" and result.binding_load == 8.72 and result.binding_share == 0.985
    text = answer(result)
    assert text.startswith(f"capacity 8 req/s [8, {hi:.3g}]")
    assert "the search's step, 8.72 req/s missed" in text and "met in every one of its 3 windows" in text
    assert "1 of its 3 windows missed" in text
    assert result.capacity()["met_rule"] == "every window at the load met the attainment"


def test_the_interval_holds_the_searchs_step():
    """Issue 39 item 5: "16 [16, 16] streams" hid the search's step. Every window meets up to 16 streams and misses
    above: the search brackets 4, 8, 16, 32, bisects 23 and 19 (within the 0.25 tolerance of 16) and repeats 16 and
    13; the capacity is only known to lie below 19, the lowest load that missed, so the interval reaches 18."""
    search = SearchSpec(over="concurrency", slo={"ttft_ms": 500}, start=4, tolerance=0.25, repeats=3)
    result = run_search(_base(), search, _curve(lambda x, r: 1.0 if x <= 16 else 0.5))
    assert [p.load for p in result.probes[:6]] == [4, 8, 16, 32, 23, 19]
    assert result.value == 16 and result.missed_load == 19
    assert (result.lo, result.hi) == (16, 18)
    assert answer(result).startswith("capacity 16 streams [16, 18] (95% interval: the repeats' spread and the search's")


def test_first_crossing_interpolates_in_log_load():
    assert _first_crossing([(4, 1.0), (8, 1.0), (16, 0.5)], 0.99) == pytest.approx(
        math.exp(math.log(8) + 0.02 * math.log(2))
    )
    assert _first_crossing([(4, 0.5), (8, 1.0)], 0.99) == 4  # below the target at the first load already
    assert _first_crossing([(4, 1.0), (8, 1.0)], 0.99) == 8  # never falls within the loads measured


def test_probes_at_one_load_have_their_own_seed_and_the_loads_are_rounded():
    base = _base()
    a, b = probe_spec(base, "rate", 12.3456), probe_spec(base, "rate", 12.3456, repeat=2)
    assert a.seed != b.seed and a.rate == 12.3456 and a.shape == "poisson"
    assert probe_spec(base, "concurrency", 5).concurrency == 5
    from wattbench_agent.loadgen.search import _round_load

    assert _round_load("rate", 12.3456) == 12.3 and _round_load("rate", 0.012345) == 0.0123
    assert _round_load("concurrency", 4.6) == 5


def test_a_search_spec_that_cannot_run_is_one_message():
    with pytest.raises(SearchError, match="needs an SLO"):
        SearchSpec(over="rate").validate()
    with pytest.raises(SearchError, match="start 2000 is outside"):
        SearchSpec(over="concurrency", slo={"ttft_ms": 1}, start=2000, max_load=1024).validate()
    with pytest.raises(SearchError, match="unknown search setting"):
        SearchSpec.from_dict({"over": "rate", "slo": {"ttft_ms": 1}, "tol": 0.1})
    assert SearchSpec(over="rate", slo={"ttft_ms": 1}, attainment=0.95).percentile_key() == "p95"
    assert SearchSpec(over="rate", slo={"ttft_ms": 1}, attainment=0.999).percentile_key() == "p999"


def test_a_stop_asked_for_ends_the_window_then_not_when_the_drain_ends():
    """A probe the search ends early (stop_event) measures up to that instant: the window and its edge callbacks end
    there, while the requests in flight drain after it (here each takes 2 s)."""
    import threading
    import time

    with server_process(ttft_ms=50, itl_ms=50, tokens=40) as url:
        stop = threading.Event()
        edges: dict[str, float] = {}
        spec = LoadSpec(url=url, model="model", shape="poisson", rate=20, duration_s=4.0, warmup_s=0.2, seed=1)

        def start() -> None:  # the stop comes 1 s into the window (what run_load does before t0 is not timed)
            edges["start"] = time.perf_counter()
            threading.Timer(1.0, stop.set).start()

        res = run_load(
            spec,
            stop_event=stop,
            on_window_start=start,
            on_window_end=lambda: edges.setdefault("end", time.perf_counter()),
        )
    assert res.window_s < 1.5 and res.drain_s > 1.0
    assert edges["end"] - edges["start"] < 1.6  # the energy window closed at the stop, not after the drain


def test_the_goodput_flag_reads_vllms_form_into_the_searchs_slo():
    """`--goodput ttft:MS tpot:MS e2el:MS` (vllm bench serve's syntax, space or comma separated) is the search's SLO."""
    from wattbench_agent.loadgen.vllm_result import ResultArgError, parse_goodput

    assert parse_goodput(["ttft:2000", "tpot:100"]) == {"ttft_ms": 2000.0, "tpot_ms": 100.0}
    assert parse_goodput(["ttft:500,e2el:9000"]) == {"ttft_ms": 500.0, "e2e_ms": 9000.0}
    slo = parse_goodput(["ttft:2000", "tpot:100", "e2el:30000"])
    assert SearchSpec(over="rate", slo=slo).validate().slo_text() == (
        "TTFT p99 <= 2000 ms, TPOT p99 <= 100 ms, E2E p99 <= 30 s (99% of requests meeting every bound)"
    )
    for bad, message in (("itl:5", "KEY one of ttft, tpot, e2el"), ("ttft:fast", "not a number"), ("ttft:-1", ">= 0")):
        with pytest.raises(ResultArgError, match=message):
            parse_goodput([bad])
    with pytest.raises(SearchError, match="positive number of milliseconds"):
        SearchSpec(over="rate", slo=parse_goodput(["ttft:0"])).validate()
