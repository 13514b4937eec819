"""The twin's calibration (wattbench/twin/): no fold is trained on what it tests, the stall a window's TPOT implies is
the closed loop's arithmetic, the shipped package data is the final calibration (the emulator runs with it), and the
calibration reproduces from the committed bundles' measured cache."""

from __future__ import annotations

import json

import pytest

from wattbench.twin import calibrate, evaluate, measured, report
from wattbench.twin.model import Params


@pytest.fixture(scope="module")
def points():
    return measured.load()


def test_no_fold_trains_on_what_it_tests(points):
    by_key = {p.key: p for p in points}
    folds = evaluate.folds(points)
    assert {proto for proto, _tr, _te in folds.values()} == {
        evaluate.BY_WORKLOAD,
        evaluate.BY_BOARD,
        evaluate.OTHER_MODEL,
    }
    for name, (protocol, train, test) in folds.items():
        assert test and not set(train) & set(test), name
        trained = [by_key[k] for k in train]
        assert all(p.model_size == calibrate.FITTED_MODEL for p in trained)  # the 14.5B model is in no fit
        if protocol == evaluate.BY_BOARD:
            assert not {by_key[k].board for k in test} & {p.board for p in trained}, name
        if protocol == evaluate.BY_WORKLOAD:
            held = {(by_key[k].folder, by_key[k].workload) for k in test}
            assert len(held) == 1 and not held & {(p.folder, p.workload) for p in trained}, name
    assert {by_key[k].model_size for k in folds["final"][2]} == {"h200-vllm-14b"}


def test_implied_stall_is_the_closed_loops_arithmetic():
    """16 streams of 128 tokens: each request sees 15 other prefills among its 127 gaps; a TPOT of 6.2 ms over a
    5.2 ms decode step means 15 stalls of S - 5.2 ms spread over 127 gaps: S = 5.2 + 1.0 x 127 / 15."""
    assert measured.implied_stall_ms(5.2, 6.2, 16, 128) == pytest.approx(5.2 + 127 / 15)
    assert measured.implied_stall_ms(5.2, 6.2, 1, 128) is None  # one stream: no other prefill
    assert measured.implied_stall_ms(None, 6.2, 16, 128) is None


def test_host_launch_time_comes_from_the_windows(points):
    """Every window the launch time is read from: S over the model's layers where the stall outlasts the twin's GPU
    time for that step, else (not host-bound) that GPU time; the shipped median is their median."""
    final = json.loads(report.FINAL.read_text())
    for w in final["host_windows"]:
        assert w["eager_layer_s"] * 32 * 1e3 == pytest.approx(max(w["implied_stall_ms"], w["gpu_ms"]), rel=1e-9)
        assert w["host_bound"] == (w["implied_stall_ms"] > w["gpu_ms"])
    keys = {w["point"] for w in final["host_windows"]}
    assert keys and all(k.split(":")[0] != "h200-vllm-14b" for k in keys)


def test_package_data_is_the_final_calibration_and_the_emulator_runs_with_it():
    from wattbench_agent.emulator import FACTORS, calibration
    from wattbench_agent.emulator.perf import POWER
    from wattbench_agent.emulator.specs import gpu_spec

    final = json.loads(report.FINAL.read_text())
    shipped = json.loads(calibration.PATH.read_text())
    params = final["params"]
    for k, v in params["kf"].items():
        assert shipped["profiles"]["vllm-like"][k] == pytest.approx(v, rel=1e-5)
        assert getattr(FACTORS["vllm-like"], k) == pytest.approx(v, rel=1e-5)
    for k, v in params["pf"].items():
        assert getattr(POWER, k) == pytest.approx(v, rel=1e-5)
    for k, v in params["gpu"].items():
        assert getattr(gpu_spec("h200"), k) == pytest.approx(v, rel=1e-5)
    assert shipped["spread"]["vllm-like"]["eager_layer_s"]["p50"] == pytest.approx(params["kf"]["eager_layer_s"])
    for proto in (evaluate.BY_BOARD, evaluate.BY_WORKLOAD):
        assert shipped["held_out"][proto]["output_tok_s"]["n"] > 0


def test_the_calibration_reproduces_from_the_measured_cache(points):
    """The shipped values are what the calibration computes from the committed bundles (their measured cache),
    not written by hand."""
    final = json.loads(report.FINAL.read_text())
    cal = calibrate.calibrate(points, log=lambda s: None)
    for part in ("kf", "pf", "gpu"):
        for k, v in final["params"][part].items():
            assert cal["params"][part][k] == pytest.approx(v, rel=1e-6), (part, k)
    for name in ("eager_layer_s", "decode_step_ratio"):
        for q, v in final["spread"][name].items():
            assert cal["spread"][name][q] == pytest.approx(v, rel=1e-6), (name, q)
    assert Params(**cal["params"]).kf["eager_layer_s"] == pytest.approx(final["spread"]["eager_layer_s"]["p50"])


def test_the_measured_cache_is_read_again_when_the_figures_definitions_change(tmp_path, monkeypatch):
    """The cache holds figures computed by sql/views.sql and the step decomposition: when either changes (a new
    figure definition), the bundles are read again rather than the old figures served under the new definitions."""
    cache = tmp_path / "measured.json"
    monkeypatch.setattr(measured, "CACHE", cache)
    monkeypatch.setattr(measured, "OUT", tmp_path)
    reads = []
    monkeypatch.setattr(measured, "_read", lambda paths: reads.append(len(paths)) or [])
    want = {str(p.relative_to(measured.RESULTS)): measured._sha(p) for p in measured.bundles()}
    current = {"bundles": want, "definitions": measured.definitions(), "points": []}
    cache.write_text(json.dumps(current))
    assert measured.load() == [] and reads == []  # up to date: served from the cache
    stale = {**current, "definitions": {**current["definitions"], "sql/views.sql": "an earlier definition"}}
    cache.write_text(json.dumps(stale))
    monkeypatch.setattr(measured.tempfile, "gettempdir", lambda: str(tmp_path / "scratch"))
    assert measured.load() == [] and reads == [len(want)]
    assert json.loads(cache.read_text()) == stale  # a test or predict never rewrites the committed cache
    assert measured.load() == [] and reads == [len(want)]  # the scratch copy serves it next time
    assert measured.load(save=True) == [] and reads == [len(want)] * 2  # python -m wattbench.twin rewrites it
    assert json.loads(cache.read_text())["definitions"] == measured.definitions()
