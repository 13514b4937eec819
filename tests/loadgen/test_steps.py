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
    """4 streams, 9 tokens a request: each request sees c - 1 = 3 of its 8 gaps stalled when every prefill has a step
    of its own; 40 such requests are exactly the spread phase."""
    s = decompose(closed_loop_requests(40, 3), closed_loop=True, concurrency=4)
    assert s["gaps"] == 320
    assert s["decode_step_ms"] == 5.0 and s["stall_threshold_ms"] == 7.5
    assert s["stalled_gap_fraction"] == 3 / 8 and s["stall_ms_mean"] == 15.0
    assert s["expected_stalled_fraction"] == 3 / 8
    assert s["phase_state"] == "spread" and s["note"] is None
    assert s["multi_token_gap_fraction"] == 0.0


def test_bunched_closed_loop():
    """The same load with one stalled gap a request (three prefills sharing each stalled step): 1/8 < (3/8) / 1.5."""
    s = decompose(closed_loop_requests(40, 1), closed_loop=True, concurrency=4)
    assert s["stalled_gap_fraction"] == 1 / 8 and s["expected_stalled_fraction"] == 3 / 8
    assert s["phase_state"] == "bunched"
    # at the boundary: 2 stalls of 8 is 0.25, exactly expected / 1.5, which is not below it
    assert decompose(closed_loop_requests(40, 2), closed_loop=True, concurrency=4)["phase_state"] == "spread"


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
        (closed_loop_requests(40, 3), {"closed_loop": False, "concurrency": 4}, "open loop"),
        (
            closed_loop_requests(20, 3) + [request([5.0] * 4)],
            {"closed_loop": True, "concurrency": 4},
            "output lengths vary (5-9 tokens)",
        ),
        (closed_loop_requests(40, 0), {"closed_loop": True, "concurrency": 1}, "one stream"),
        (closed_loop_requests(40, 1), {"closed_loop": True, "concurrency": 9}, "every step carries a prefill"),
        (closed_loop_requests(2, 3), {"closed_loop": True, "concurrency": 4}, "too few gaps for a phase: 6.0 stalls"),
        (closed_loop_requests(40, 0), {"closed_loop": True, "concurrency": 4}, "no stall found"),
    ],
)
def test_no_phase_where_it_is_not_defined(records, kw, note):
    s = decompose(records, **kw)
    assert s["phase_state"] is None and note in s["note"]
    assert (s["expected_stalled_fraction"] is None) == (note.startswith(("open loop", "output lengths")))


def test_stalls_too_short_to_count_give_no_phase():
    """Stalls of 8 ms on 5 ms steps (1.6 steps, as the emulator's 256-token prefills): counted, no phase verdict."""
    recs = [request([8.0] + [5.0] * 7) for _ in range(40)]
    s = decompose(recs, closed_loop=True, concurrency=4)
    assert s["stalled_gap_fraction"] == 1 / 8 and s["stall_ms_mean"] == 8.0
    assert s["phase_state"] is None and "1.60 decode steps" in s["note"]


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
    assert s["phase_state"] == "spread"
    row = res.load_run_row()
    assert row["decode_step_ms"] == s["decode_step_ms"] and row["phase_state"] == "spread"
    assert row["step_gaps"] == s["gaps"]
    # recomputed from the saved file: the very same summary
    assert summaries(out) == [res.summary]


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
    assert p.returncode == 2 and "missing.jsonl: cannot read it" in p.stderr
