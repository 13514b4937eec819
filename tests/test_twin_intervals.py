"""The twin's prediction intervals (wattbench/twin/intervals.py) and phase states (wattbench/twin/states.py): the
intervals are the split conformal ends of the cross-validated errors, a fold's points are never scored against an
interval sized on their own errors, the shipped intervals and their coverage are what the committed predictions
give, and the two phase states of a closed loop of equal lengths come from one another by the closed loop's
arithmetic, each with the share of committed windows that ran in it."""

from __future__ import annotations

import json
import math

import pytest

from wattbench.twin import evaluate, intervals, measured, report, states
from wattbench.twin.model import PREDICTED, Params, setup_for


def test_conformal_ends_are_the_order_statistics_of_the_level():
    """n ratios at level 90%: the floor((n + 1) x 0.05)-th and ceil((n + 1) x 0.95)-th smallest; too few: none."""
    xs = [i / 100 for i in range(19)]
    assert intervals.conformal(list(reversed(xs)), 0.9) == (0.0, 0.18)  # n = 19: the smallest and the largest
    assert intervals.conformal(xs[:18], 0.9) is None  # 18 cannot hold 90% on both sides
    assert intervals.conformal(list(range(39)), 0.9) == (1, 37)  # n = 39: the 2nd smallest and the 2nd largest


def _row(fold: str, ratio: float, protocol: str = evaluate.BY_BOARD, **kw) -> dict:
    return {"protocol": protocol, "fold": fold, "figure": "output_tok_s", "measured": ratio, "predicted": 1.0, **kw}


def test_a_folds_points_are_scored_against_an_interval_sized_without_them():
    """A board whose error is far outside every other board's lies outside its interval, though an interval sized
    on all the boards (its own error among them) would hold it; a held-out run is scored against the interval sized
    on every cross-validated point."""
    rows = [_row(f"board {i}", 1.0 + (i % 2) / 1000) for i in range(20)] + [_row("board far", 1.5)]
    marked = {r["fold"]: r["inside"] for r in intervals.mark(rows, ["output_tok_s"])}
    assert marked["board far"] is False
    assert all(v for k, v in marked.items() if k != "board far")
    ends = intervals.size(rows, ["output_tok_s"])["figures"]["output_tok_s"]
    assert ends["log_hi"] == pytest.approx(math.log(1.5)) and ends["n"] == 21  # all of them: it would hold it
    held = intervals.mark(rows + [_row("final", 1.4, evaluate.HELD_OUT_RUNS)], ["output_tok_s"])[-1]
    assert held["inside"] is True
    # the other phase state's value widens the interval only where the band must cover it
    far = _row("final", 1.3, evaluate.HELD_OUT_RUNS, other_state=1.3, band_covers_both=False)
    narrow = {"log_lo": math.log(0.9), "log_hi": math.log(1.1)}
    assert intervals.inside(far, narrow) is False
    assert intervals.inside({**far, "band_covers_both": True}, narrow) is True


def test_the_shipped_intervals_and_their_coverage_are_the_committed_predictions():
    """calibration.json's intervals and coverage are what intervals.py makes of the committed predictions
    (results/twin/cross_validation.json), at a stated level, sized on the cross-validation by board; coverage.md
    states the level, each figure's interval and its coverage with the number of points."""
    from wattbench_agent.emulator import calibration

    rows = json.loads(report.ROWS.read_text())["rows"]
    marked = intervals.mark(rows, PREDICTED)
    shipped = calibration.intervals("vllm-like")
    assert shipped["level"] == evaluate.LEVEL == 0.9 and "by board" in shipped["basis"]
    sized = intervals.size(marked, PREDICTED)
    assert set(shipped["figures"]) == set(sized["figures"]) >= set(evaluate.GOAL)
    for f, e in sized["figures"].items():
        assert shipped["figures"][f]["log_lo"] == pytest.approx(e["log_lo"], rel=1e-5)
        assert shipped["figures"][f]["log_hi"] == pytest.approx(e["log_hi"], rel=1e-5)
        assert (
            shipped["figures"][f]["n"]
            == e["n"]
            == sum(1 for r in rows if r["protocol"] == evaluate.BY_BOARD and r["figure"] == f)
        )
    cov = intervals.coverage(marked, PREDICTED)
    assert shipped["coverage"] == json.loads(json.dumps(report._round(cov)))
    assert set(cov) >= {evaluate.BY_BOARD, evaluate.BY_WORKLOAD, evaluate.HELD_OUT_RUNS, evaluate.OTHER_MODEL}
    table = report.COVERAGE.read_text()
    for f in evaluate.GOAL:
        c = cov[evaluate.BY_BOARD][f]
        assert f"| {evaluate.LABEL[f]} | 90% |" in table and f"{c['inside']}/{c['n']}" in table


def test_a_windows_phase_state_and_which_points_can_lock():
    """A window is `shared` when its stalled share is below the expected one / 1.5; a point can lock into either
    state only as a closed loop of equal lengths with an expected stalled share above 0 and at most 0.3."""
    assert states.window_state(0.05, 15 / 127) == "shared"
    assert states.window_state(0.11, 15 / 127) == "spread"
    assert states.window_state(0.2, 0.5) is None and states.window_state(None, 0.1) is None
    assert states.lockable(True, True, 16, 128) and states.lockable(True, True, 32, 128)
    assert not states.lockable(True, True, 64, 128)  # every other step carries a prefill: no state to lock into
    assert not states.lockable(True, False, 16, 128)  # spread lengths
    assert not states.lockable(False, True, 16, 128)  # open loop
    assert not states.lockable(True, True, 1, 128)


def test_the_share_table_counts_the_committed_windows():
    points = measured.load()
    table = states.share_table(points)
    fixed16 = next(p for p in points if p.key == "h200-vllm-steps:vllm-bf16:fixed16:c16")
    spread16 = next(p for p in points if p.key == "h200-vllm-steps:vllm-bf16:spread16:c16")
    want = [states.window_state(r["stalled_gap_fraction"], r["expected_stalled_fraction"]) for r in fixed16.repeats]
    mine = states.share_table([fixed16, spread16])  # spread16's output lengths vary: not counted
    assert mine == {"short": {"16": {s: want.count(s) for s in set(want)}}}
    assert sum(table["short"]["16"].values()) >= len(want)
    assert states.share_of(table, 512, 16)["windows"] == sum(table["short"]["16"].values())
    assert states.share_of(table, 512, 12) == {"shared": 0, "windows": 0, "share": None}


def test_the_two_phase_states_move_into_each_other():
    """Prefills one to a step -> two to a step -> one to a step gives back the figures; at 16 streams of 512-token
    prompts on the fitted twin sharing steps shortens TPOT (fewer stalls) and lengthens TTFT (a longer step)."""
    from wattbench_agent.emulator import calibration

    params = Params(kf=calibration.kernel_factors("vllm-like"), pf=calibration.power(), gpu=calibration.gpu("h200"))
    cfg = {"async_scheduling": True}
    st = setup_for("results/h200-vllm/config.json", "bf16", cfg, params)
    spread = {
        "output_tok_s": 2300.0,
        "tpot_p50_ms": 6.7,
        "ttft_p50_ms": 42.0,
        "ttft_p99_ms": 60.0,
        "counter_w_per_gpu": 590.0,
        "output_tokens_per_j": 3.9,
    }
    shared = states.moved(st, 16, 512, 128, spread, 1, states.SHARED_K)
    assert shared["tpot_p50_ms"] < spread["tpot_p50_ms"] and shared["ttft_p50_ms"] > spread["ttft_p50_ms"]
    assert shared["output_tok_s"] > spread["output_tok_s"] and shared["counter_w_per_gpu"] == 590.0
    back = states.moved(st, 16, 512, 128, shared, states.SHARED_K, 1)
    for f, v in spread.items():
        assert back[f] == pytest.approx(v, rel=1e-9), f
    both = states.states(st, 16, 512, 128, spread, {"short": {"16": {"spread": 9, "shared": 1}}}, 0.9)
    assert both["simulated"] == "spread" and both["states"]["shared"]["share"] == pytest.approx(0.1)
    assert both["band_covers_both"]  # 10% of windows: at least 1 - 90%
    rare = states.states(st, 16, 512, 128, spread, {"short": {"16": {"spread": 20, "shared": 1}}}, 0.9)
    assert not rare["band_covers_both"]
    unknown = states.states(st, 16, 512, 128, spread, {}, 0.9)
    assert unknown["states"]["shared"]["share"] is None and unknown["band_covers_both"]
    mostly = states.states(st, 16, 512, 128, spread, {"short": {"16": {"shared": 5}}}, 0.9)
    assert mostly["simulated"] == "shared" and mostly["states"]["spread"]["share"] == 0.0
