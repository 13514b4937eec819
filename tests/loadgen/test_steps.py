"""The step decomposition (agent/wattbench_agent/loadgen/steps.py): exact figures on token times with known stalls,
then a live run against the loopback server injecting stalls, and `wattbench inspect` giving back the live summary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wattbench_agent.loadgen import LoadSpec, run_load
from wattbench_agent.loadgen.replay import points_path, summaries
from wattbench_agent.loadgen.steps import COLUMNS, decompose
from wattbench_agent.loadgen.testserver import server_process

from .conftest import ROOT, table_columns
from .timelines import closed_loop, hold

MS = 1_000_000


def request(gaps_ms: list[float], tokens: list[int] | None = None, start_ms: float = 1000.0, **extra) -> dict:
    """A successful in-window request whose content events are `gaps_ms` apart (the first event at start_ms)."""
    t = [int(start_ms * MS)]
    for g in gaps_ms:
        t.append(t[-1] + int(g * MS))
    tokens = tokens if tokens is not None else [1] * len(t)
    return {
        "request_id": "r",
        "sent_ns": t[0] - 50 * MS,
        "chunk_ns": t,
        "chunk_tokens": tokens,
        "completion_tokens": sum(tokens),
        "error_kind": None,
        "in_window": True,
        **extra,
    }


def closed_loop_requests(n: int, stalls_per_request: int, gaps: int = 8) -> list[dict]:
    """n requests of gaps + 1 tokens, each with `stalls_per_request` gaps of 15 ms among 5 ms decode steps."""
    return [request([15.0] * stalls_per_request + [5.0] * (gaps - stalls_per_request)) for _ in range(n)]


def test_spread_closed_loop_exact_figures():
    """4 streams, 41 tokens a request, every prefill in a step of its own: each request sees c - 1 = 3 of its 40 gaps
    stalled, as expected; 48 prefills in 48 steps, none shared: the spread phase."""
    s = decompose(closed_loop(4, 41), closed_loop=True, concurrency=4)
    assert s["gaps"] == 48 * 40
    assert s["decode_step_ms"] == 5.0 and s["stall_threshold_ms"] == 7.5
    assert s["stalled_gap_fraction"] == 3 / 40 and s["stall_ms_mean"] == 15.0
    assert s["gpu_stalls"] == 48 * 3 and s["delivery_stalls"] == 0 and s["delivery_stall_ms_mean"] is None
    assert s["expected_stalled_fraction"] == 3 / 40
    assert s["prefills"] == 48 and s["prefill_steps"] == 48 and s["prefills_per_step"] == 1.0
    assert s["prefills_per_step_se"] == 0.0 and s["shared_prefill_fraction"] == 0.0
    assert s["prefill_step_sizes"] == {"1": 48}
    assert s["phase_state"] == "spread" and s["note"] is None
    assert s["multi_token_gap_fraction"] == 0.0


@pytest.mark.parametrize("k", [2, 4])
def test_prefills_sharing_a_step_are_counted_from_the_first_tokens(k):
    """The same 4 streams in groups of k whose prefills share a step: k prefills a prefill step, every prefill shared,
    and the stalled share falls to (4 / k - 1) / 40: bunched."""
    s = decompose(closed_loop(4, 41, k, periods=24), closed_loop=True, concurrency=4)
    assert s["prefills"] == 96 and s["prefill_steps"] == 96 // k and s["prefills_per_step"] == k
    assert s["shared_prefill_fraction"] == 1.0 and s["prefill_step_sizes"] == {str(k): 96 // k}
    assert s["stalled_gap_fraction"] == (4 // k - 1) / 40
    assert s["phase_state"] == "bunched"


def test_a_paired_prefill_over_two_steps_is_bunched_whatever_the_stalled_share():
    """Pairs of streams whose prefills run over two long steps (a chunked prefill) before their first tokens come out
    together: two prefills a step, although the stalled share, 2 x (3 - 1) / 40 = 10%, is within 1.5 of the
    expected 5 / 40 (which a phase read from the stalled share took for spread)."""
    s = decompose(closed_loop(6, 41, 2, periods=24, prefill_steps=2), closed_loop=True, concurrency=6)
    assert s["stalled_gap_fraction"] == 4 / 40 and s["expected_stalled_fraction"] == 5 / 40
    assert s["phase_state"] == "bunched"
    assert s["prefills_per_step"] == 2.0 and s["shared_prefill_fraction"] == 1.0


def test_a_delivery_stall_is_counted_apart_from_the_gpu_stalls():
    """One request's 4 tokens held by the host and delivered at once, where no prefill came out: its gap of 4 steps
    (20 ms) is a delivery stall, not a GPU stall: the GPU stalls' share and mean length stay those of the prefill
    steps (3 of 40 gaps, 15 ms)."""
    recs = closed_loop(4, 41)
    recs[5] = hold(recs[5], 22, 4)  # its tokens 22-25: the steps they came out of carried no prefill (20 and 30 did)
    s = decompose(recs, closed_loop=True, concurrency=4)
    assert s["stall_ms_mean"] == 15.0 and s["stalled_gap_fraction"] == 3 / 40
    assert s["delivery_stalls"] == 1 and s["delivery_stall_ms_mean"] == pytest.approx(20.0 - 0.3)
    assert s["delivery_stalled_fraction"] == 1 / (48 * 40) and s["gpu_stalls"] == 48 * 3
    assert s["phase_state"] == "spread"


def test_a_burst_carrying_a_prefill_is_a_gpu_stall():
    """The host holds a request's tokens over a step that carried another stream's prefill, and that prefill's first
    token comes out in the same burst: a GPU stall (a prefill step, delivered late), not a delivery stall."""
    recs = closed_loop(4, 41)
    victim = recs[0]  # group 0's first request; group 1's first prefill comes out 10 steps after group 0's
    other = next(r for r in recs if r["request_id"] == "1.0.0")
    at = next(i for i, t in enumerate(victim["chunk_ns"]) if t > other["chunk_ns"][0]) - 1  # the stalled token
    held = hold(victim, at, 3)
    release = held["chunk_ns"][at]
    other["chunk_ns"] = [release + 150_000] + other["chunk_ns"][1:]  # its first token delivered in that burst
    recs[0] = held
    s = decompose(recs, closed_loop=True, concurrency=4)
    assert s["delivery_stalls"] == 0
    assert s["gpu_stalls"] == 48 * 3  # the held gap replaces the stall that step made
    assert s["stall_ms_mean"] > 15.0  # it lasted the held steps, not one


def test_tokens_not_events_count():
    """An event of n tokens ends n steps: its gap counts n times at gap / n. Events with no token are skipped (the
    gap runs from the token-carrying event before), and a long stream's coalesced tail is not read."""
    # 4 events of 1 token 5 ms apart, one of 2 tokens after 10 ms (2 gaps of 5), one of 3 tokens after 45 ms (3 of 15)
    r = request([5, 5, 5, 10, 45], tokens=[1, 1, 1, 1, 2, 3])
    s = decompose([r])
    assert s["gaps"] == 3 + 2 + 3
    assert s["decode_step_ms"] == 5.0 and s["stalled_gap_fraction"] == 3 / 8 and s["stall_ms_mean"] == 15.0
    assert s["multi_token_gap_fraction"] == 5 / 8
    # a zero-token event 2 ms after the first: skipped, so the gaps are still 5, 5, 5
    z = request([2, 3, 5, 5], tokens=[1, 0, 1, 1, 1])
    assert decompose([z])["gaps"] == 3 and decompose([z])["decode_step_ms"] == 5.0
    # chunks_exact = 4: the entries after the fourth are one a second (client.MAX_CHUNK_EVENTS), not gaps
    tail = request([5, 5, 5, 1000, 1000], chunks_exact=4)
    assert decompose([tail])["gaps"] == 3 and decompose([tail])["stalled_gap_fraction"] == 0.0


@pytest.mark.parametrize(
    "records, kw, note",
    [
        (closed_loop(4, 41), {"closed_loop": False, "concurrency": 4}, "open loop"),
        (
            closed_loop(4, 41) + [request([5.0] * 4)],
            {"closed_loop": True, "concurrency": 4},
            "output lengths vary (5-41 tokens)",
        ),
        (closed_loop(1, 41), {"closed_loop": True, "concurrency": 1}, "one stream"),
        (closed_loop(4, 41, periods=4), {"closed_loop": True, "concurrency": 4}, "too few prefill steps"),
        # expected stalled share (16 - 1) / 40 = 0.375: no verdict, however spread the prefills are
        (closed_loop(16, 41), {"closed_loop": True, "concurrency": 16}, "expected stalled share 0.38, above 0.3"),
        (closed_loop(4, 41, 1, periods=12) + closed_loop(4, 41, 2, periods=6), {}, "open loop"),
    ],
)
def test_no_phase_where_it_is_not_defined(records, kw, note):
    s = decompose(records, **kw)
    assert s["phase_state"] is None and note in s["note"]
    assert (s["expected_stalled_fraction"] is None) == (note.startswith(("open loop", "output lengths")))
    assert s["prefills_per_step"] >= 1.0  # measured, verdict or not


def test_no_phase_where_the_prefills_a_step_are_not_clear_of_one_and_a_half():
    """Half the streams' prefills in pairs, half alone (4 / 3 prefills a step, 0.47 standard error on 24 steps): too
    near 1.5 for either verdict."""
    recs = closed_loop(4, 41, 2, periods=6) + [
        {**r, "chunk_ns": [t + 3 * MS for t in r["chunk_ns"]], "request_id": "x" + r["request_id"]}
        for r in closed_loop(4, 41, 1, periods=3)
    ]
    s = decompose(recs, closed_loop=True, concurrency=4)
    assert s["prefill_steps"] == 24 and s["prefills_per_step"] == pytest.approx(36 / 24)
    assert s["phase_state"] is None and "not clear of 1.5" in s["note"]


def test_short_stalls_do_not_hide_the_phase():
    """Stalls of 8 ms on 5 ms steps (1.6 steps, as the emulator's 256-token prefills): the phase reads the prefills'
    first tokens, not the stall count."""
    s = decompose(closed_loop(4, 41, s=8.0), closed_loop=True, concurrency=4)
    assert s["stalled_gap_fraction"] == 3 / 40 and s["stall_ms_mean"] == 8.0
    assert s["phase_state"] == "spread"


def test_first_tokens_of_other_requests_mark_the_prefills():
    """A pool's prefill whose partner was sent outside the window still shared its step: every request of the point
    gives its first token (all_records), only the pool's are counted."""
    recs = closed_loop(4, 41, 2, periods=12)
    pool = [r for r in recs if r["request_id"].split(".")[1] == "0"]  # one stream of each pair
    alone = decompose(pool, closed_loop=True, concurrency=4)
    assert alone["prefills_per_step"] == 1.0 and alone["shared_prefill_fraction"] == 0.0
    s = decompose(pool, closed_loop=True, concurrency=4, all_records=recs)
    assert s["prefills"] == 24 and s["prefill_steps"] == 24 and s["prefills_per_step"] == 2.0
    assert s["shared_prefill_fraction"] == 1.0


def test_no_gaps():
    s = decompose([request([])], closed_loop=True, concurrency=2)
    assert s["gaps"] == 0 and s["decode_step_ms"] is None and s["phase_state"] is None


def test_load_runs_columns_are_in_the_schema():
    assert set(COLUMNS) <= set(table_columns("load_runs"))


@pytest.fixture(scope="module")
def stalling_server():
    """ITL 20 ms; every 5th content event 60 ms late: 4 of the 20 gaps of a 21-token request are 80 ms stalls (wide
    apart, so that the scheduling jitter of a busy 2-core machine does not move a gap across the threshold)."""
    with server_process(ttft_ms=5, itl_ms=20, tokens=21, stall_every=5, stall_ms=60) as url:
        yield url


def test_live_run_finds_the_injected_stalls(stalling_server, tmp_path):
    out = tmp_path / "r.jsonl"
    spec = LoadSpec(url=stalling_server, model="m", concurrency=4, output_tokens=21, warmup_s=0.3, duration_s=2.5)
    res = run_load(spec, out=out)
    s = res.summary["steps"]
    assert s["gaps"] >= 200
    assert s["decode_step_ms"] == pytest.approx(20.0, abs=2.0)
    assert s["stalled_gap_fraction"] == pytest.approx(4 / 20, abs=0.03)
    assert s["stall_ms_mean"] == pytest.approx(80.0, abs=6.0)
    assert s["expected_stalled_fraction"] == 3 / 20  # (c - 1) / (o - 1): the server's stalls are its own
    assert s["delivery_stalls"] == 0  # one event at a time: no burst
    ok = [r for r in res.records if r.get("error_kind") is None and r.get("in_window")]
    assert s["prefills"] == len(ok) and 1 <= s["prefills_per_step"] <= 4
    # about 15 prefill steps in 2.5 s: too few for a phase verdict
    assert s["phase_state"] is None and "too few prefill steps" in s["note"]
    row = res.load_run_row()
    assert row["decode_step_ms"] == s["decode_step_ms"] and row["phase_note"] == s["note"]
    assert row["step_gaps"] == s["gaps"] and row["prefills_per_step"] == s["prefills_per_step"]
    # recomputed from the saved file: the very same summary
    assert summaries(out) == [res.summary]


def test_live_delivery_stalls_are_counted_apart(tmp_path):
    """A server that holds 3 of every 7 content events and writes them at once (a host delivering late, over real
    HTTP): each hold is a gap of 3 steps followed by a burst, 2 of a 17-token request's 16 gaps (events 4-6 and
    11-13, away from its ends, where another stream's first token could come out in the burst); counted as delivery
    stalls, none as a GPU stall, and the decode step stays the server's ITL."""
    with server_process(ttft_ms=5, itl_ms=20, tokens=17, hold_every=7, hold_events=3) as url:
        spec = LoadSpec(url=url, model="m", concurrency=4, output_tokens=17, warmup_s=0.3, duration_s=2.5)
        s = run_load(spec).summary["steps"]
    assert s["decode_step_ms"] == pytest.approx(20.0, abs=2.0)
    assert s["stalled_gap_fraction"] < 0.02 and s["gpu_stalls"] <= 0.1 * s["delivery_stalls"]
    assert s["delivery_stalled_fraction"] == pytest.approx(2 / 16, abs=0.03)
    assert s["delivery_stall_ms_mean"] == pytest.approx(60.0, abs=6.0)


def load_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_inspect_prints_the_live_json_summary(stalling_server, tmp_path):
    out = tmp_path / "r.jsonl"
    common = ["--url", stalling_server, "--model", "m", "--output-tokens", "21", "--warmup", "0.3"]
    live = load_cli("load", *common, "--concurrency", "2", "--duration", "1.5", "--out", str(out), "--json")
    assert live.returncode == 0, live.stderr
    again = load_cli("inspect", str(out), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(live.stdout.splitlines()[-1])
    table = load_cli("inspect", str(out))
    assert "steps: decode" in table.stdout and "expected 5.0%" in table.stdout

    # a sweep appended to the same file: both points, each with its own records
    sweep = load_cli("load", *common, "--concurrency", "1,3", "--duration", "1", "--out", str(out), "--json")
    assert sweep.returncode == 0, sweep.stderr
    both = json.loads(load_cli("inspect", str(out), "--json").stdout)["sweep"]
    assert both[1:] == json.loads(sweep.stdout.splitlines()[-1])["sweep"]
    assert both[0] == json.loads(live.stdout.splitlines()[-1])
    assert [p["requested_concurrency"] for p in both] == [2, 1, 3]


def test_inspect_without_the_points_file(stalling_server, tmp_path):
    """An interrupted run (or one saved before points files) has no points line: the window comes from the sends,
    the same requests' gaps give the same decomposition, and there is no expectation without the load shape."""
    out = tmp_path / "r.jsonl"
    spec = LoadSpec(url=stalling_server, model="m", concurrency=2, output_tokens=21, warmup_s=0.3, duration_s=1.5)
    live = run_load(spec, out=out).summary["steps"]
    points_path(out).unlink()
    (s,) = summaries(out)
    assert "no points line" in s["inspect_note"]
    same = ("gaps", "decode_step_ms", "stalled_gap_fraction", "stall_ms_mean", "multi_token_gap_fraction")
    assert {k: s["steps"][k] for k in same} == {k: live[k] for k in same}
    assert s["steps"]["expected_stalled_fraction"] is None


def test_inspect_names_a_bad_line(tmp_path):
    bad = tmp_path / "r.jsonl"
    bad.write_text('{"request_id": "1", "load_point_id": "c1"}\nnot json\n')
    p = load_cli("inspect", str(bad))
    assert p.returncode == 2 and f"{bad}:2: not JSON" in p.stderr
    p = load_cli("inspect", str(tmp_path / "missing.jsonl"))
    assert p.returncode == 2 and "missing.jsonl: missing; expected one request record a line" in p.stderr
