"""benchmarks/twin_fit.py's protocol: held-out points (another model size, later plans) never enter a fit; the fit
converges on a small real problem; the H200 README's out-of-sample section is written from the fit's rows."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from benchmarks import twin_fit


def test_held_out_model_and_late_points_are_in_no_training_set():
    points, meas = twin_fit.load_points(held_out_models=False)
    assert points and meas
    other = replace(points[0], group="held-out model", model="results/h200-vllm-14b/config.json")
    folds = twin_fit.folds([*points, other])
    assert "final (all points)" in folds and twin_fit.BEFORE_LIGHT in folds
    for name, (train, test, _frozen) in folds.items():
        assert other not in train and other not in test, name
        assert not any(p.workload in twin_fit.LATE for p in train), name
        if name.startswith("leave out"):
            held = name.removeprefix("leave out ")
            assert test and all(p.workload == held for p in test)
            assert not any(p.workload == held for p in train)
    light = folds[twin_fit.BEFORE_LIGHT]
    assert all(p.workload in twin_fit.LIGHT for p in light[1])
    assert not any(p.workload in twin_fit.LIGHT for p in light[0])


def test_power_refit_converges_on_two_points():
    """The power knobs alone, from a fold's stored fit, on two real light points (no ML.ENERGY): least squares ends
    by its own criterion and lowers the loss from where it started."""
    points, meas = twin_fit.load_points(held_out_models=False)
    train = [p for p in points if p.workload == "light" and p.concurrency == 1]
    stored = json.loads(twin_fit.OUT.read_text())["fits"]["final (all points)"]["params"]
    start = {**stored, "k_busy": 0.2, "k_mem": 0.9}  # moved off the fit
    frozen = {n for n, _w, _lo, _hi in twin_fit.PARAMS if n not in twin_fit.POWER_KNOBS}
    orig = twin_fit.residuals
    twin_fit.residuals = lambda prm, tr, m, with_ml=True: orig(prm, tr, m, with_ml=False)
    try:
        first = twin_fit.loss({**twin_fit.PRIOR, **start, **twin_fit.FIXED}, train, meas, with_ml=False)
        res = twin_fit.fit(train, meas, frozen=frozen, start=start, coarse=(0.125,), max_nfev=15)
    finally:
        twin_fit.residuals = orig
    assert res["converged"] and res["free_knobs"] == list(twin_fit.POWER_KNOBS)
    assert res["train_loss"] < 0.5 * first
    assert all(res["params"][n] == start[n] for n in frozen if n in start)


def test_readme_section_is_written_from_the_rows(tmp_path: Path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## prediction\n\n{twin_fit.README_BEGIN}\nstale\n{twin_fit.README_END}\n\n## next\n")
    row = {
        "protocol": "leave-one-workload-out",
        "engine": "vllm-bf16",
        "point": "light:c1",
        "measured": 472.3,
        "predicted": 480.0,
        "error": 480.0 / 472.3 - 1,
        "meets_goal": True,
    }
    rows = [{**row, "figure": "counter_w_per_gpu"}, {**row, "figure": "output_tok_s", "meets_goal": False}]
    summary = {"leave-one-workload-out": {"counter_w_per_gpu": {"within_goal": 1, "n": 1}}}
    twin_fit.write_readme_section({"rows": rows, "summary": summary}, {}, readme)
    text = readme.read_text()
    assert "stale" not in text and text.startswith("# x") and text.rstrip().endswith("## next")
    assert "472.3 / 480 (+2%)" in text and "W 1/1" in text and "(+2%)*" in text  # tok/s row marked as a miss


def test_held_out_sweep_enters_a_fit_only_when_moved_in(monkeypatch):
    points, _ = twin_fit.load_points(held_out_models=False)
    sweep = replace(points[0], group="held-out sweep", workload="sweep", label="c8")
    for _name, (train, test, _frozen) in twin_fit.folds([*points, sweep]).items():
        assert sweep not in train and sweep not in test
    monkeypatch.setattr(twin_fit, "FIT_SETS", ("held-out sweep",))
    folds = twin_fit.folds([*points, sweep])
    assert sweep in folds["final (all points)"][0]


def test_filed_predictions_are_scored_against_the_measured(tmp_path: Path, monkeypatch):
    """A sweep's predictions.json (filed before its run) is scored point by point: error = filed / measured - 1
    (540 W filed, 500 W measured: +8%, within the 10% goal); figures that are not goals are skipped."""
    points, _ = twin_fit.load_points(held_out_models=False)
    p = replace(points[0], group="held-out sweep", workload="sweep", label="c8")
    (tmp_path / "predictions.json").write_text(
        json.dumps(
            {
                "predicted_at": "2026-12-03T09:42:22+00:00",
                "points": [
                    {
                        "engine": p.engine,
                        "point": "sweep:c8",
                        "figures": {"counter_w_per_gpu": {"predicted": 540.0, "band": 0.18}, "nonsense": {}},
                    }
                ],
            }
        )
    )
    monkeypatch.setattr(twin_fit, "HELD_OUT_SWEEPS", {"held-out sweep": tmp_path})
    rows = twin_fit.filed_rows([p], {(p.key, "counter_w_per_gpu"): 500.0})
    assert len(rows) == 1
    r = rows[0]
    assert r["protocol"] == "held-out sweep, as filed before the run" and r["point"] == "sweep:c8"
    assert abs(r["error"] - 0.08) < 1e-12 and r["meets_goal"] and r["band_filed"] == 0.18


def test_the_same_configuration_measured_twice_is_paired_once_per_figure():
    """The reproducibility rows pair a point with its earlier twin configuration (the sweep's ref16 is the steady
    workload's c16 again) and nothing with itself; the change is second / first - 1 of the measured figures."""
    points, meas = twin_fit.load_points()
    rows = twin_fit.reproducibility(points, meas)
    pairs = {(r["engine"], r["first"], r["second"]) for r in rows}
    assert ("vllm-bf16", "steady:c16", "ref16:c16") in pairs and ("vllm-fp8", "steady:c16", "ref16:c16") in pairs
    assert all(r["first"] != r["second"] or r["engine"] == "vllm-fp8" for r in rows)  # fp8 sweep points: two runs
    for r in rows:
        assert r["change"] == r["second_value"] / r["first_value"] - 1.0
    # a configuration measured on several boards pairs once per board (the same labels can recur across runs)
    assert len(rows) == len(
        {(r["engine"], r["first"], r["first_gpu"], r["second"], r["second_gpu"], r["figure"]) for r in rows}
    )


def test_a_miss_inside_the_measured_repeats_is_counted_as_such():
    assert twin_fit._inside(105.0, [100.0, 110.0]) is True
    assert twin_fit._inside(111.0, [100.0, 110.0]) is False
    assert twin_fit._inside(105.0, [100.0]) is None and twin_fit._inside(105.0, None) is None
    rows = [
        {
            "protocol": "p",
            "figure": "output_tok_s",
            "error": 0.2,
            "meets_goal": False,
            "inside_repeats": True,
            "engine": "e",
            "point": "a",
        },
        {
            "protocol": "p",
            "figure": "output_tok_s",
            "error": 0.3,
            "meets_goal": False,
            "inside_repeats": False,
            "engine": "e",
            "point": "b",
        },
        {
            "protocol": "p",
            "figure": "output_tok_s",
            "error": 0.01,
            "meets_goal": True,
            "inside_repeats": True,
            "engine": "e",
            "point": "c",
        },
    ]
    s = twin_fit.summarise(rows)["p"]["output_tok_s"]
    assert s["within_goal"] == 1 and s["misses_inside_repeats"] == 1 and len(s["misses"]) == 2


def test_board_factors_recover_a_slower_board_and_shrink_toward_the_typical_one(monkeypatch):
    """Two boards: measured figures equal to the twin's on one, and on the other 10% slower (tok/s x 0.9, TPOT and
    TTFT / 0.9) at 5% less power. The profiled factors find that board's speed and power below 1 (shrunk toward 1 by
    the prior, never past the data) and the typical board near 1; scaled to its factors the twin's errors shrink."""
    points, _meas = twin_fit.load_points(held_out_models=False)
    train = [p for p in points if p.workload in ("steady", "light")]
    monkeypatch.setattr(twin_fit, "BOARDS", {p.key: ("slow" if p.workload == "steady" else "typical") for p in train})
    preds, meas = {}, {}
    for i, p in enumerate(train):
        pred = {
            "output_tok_s": 1000.0 + 10 * i,
            "tpot_p50_ms": 6.0,
            "ttft_p50_ms": 40.0,
            "ttft_p99_ms": 60.0,
            "prefill_ms": 20.0,
            "counter_w_per_gpu": 500.0,
            "output_tokens_per_j": (1000.0 + 10 * i) / 500.0,
        }
        preds[p.key] = pred
        slow = p.workload == "steady"
        s, q = (0.9, 0.95) if slow else (1.0, 1.0)
        for f, (a, c) in twin_fit.BOARD_SCALING.items():
            meas[(p.key, f)] = pred[f] * s**a * q**c
    boards = twin_fit.board_factors(preds, train, meas)
    (s_slow, q_slow), (s_typ, q_typ) = boards["slow"], boards["typical"]
    assert 0.9 < s_slow < 0.95 and 0.95 < q_slow < 0.99
    assert abs(s_typ - 1) < 1e-9 and abs(q_typ - 1) < 1e-9
    p = next(p for p in train if p.workload == "steady")
    scaled = twin_fit.on_board(preds[p.key], boards["slow"])
    for f in ("output_tok_s", "tpot_p50_ms", "counter_w_per_gpu", "output_tokens_per_j"):
        m = meas[(p.key, f)]
        assert abs(scaled[f] / m - 1) < abs(preds[p.key][f] / m - 1), f
    assert twin_fit.on_board(preds[p.key], None) is preds[p.key]


def test_a_board_factor_never_lifts_power_above_the_limit():
    pred = {"output_tok_s": 5000.0, "counter_w_per_gpu": 690.0, "output_tokens_per_j": 5000.0 / 690.0}
    on = twin_fit.on_board(pred, (1.05, 1.05))
    assert on["counter_w_per_gpu"] == twin_fit.BOARD_LIMIT_W
    assert abs(on["output_tokens_per_j"] - on["output_tok_s"] / on["counter_w_per_gpu"]) < 1e-9
