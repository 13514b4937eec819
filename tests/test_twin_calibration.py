"""The twin's calibration (wattbench/twin/): no fold is trained on what it tests, no calibration fits on a bundle of
the held-out list, the stall a window's TPOT implies is the closed loop's arithmetic, the shipped package data is the
final calibration (the emulator runs with it, and it records what it was fitted on), and the calibration reproduces
from the committed bundles' measured cache."""

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
        evaluate.HELD_OUT_RUNS,
    }
    listed = measured.held_out_patterns()
    for name, (protocol, train, test) in folds.items():
        assert test and not set(train) & set(test), name
        trained = [by_key[k] for k in train]
        assert all(p.model_size == calibrate.FITTED_MODEL for p in trained)  # the 14.5B model is in no fit
        assert not any(measured.held_out(p.rel, listed) for p in trained), name  # nor any listed bundle
        if protocol == evaluate.BY_BOARD:
            assert not {by_key[k].board for k in test} & {p.board for p in trained}, name
        if protocol == evaluate.BY_WORKLOAD:
            held = {(by_key[k].folder, by_key[k].workload) for k in test}
            assert len(held) == 1 and not held & {(p.folder, p.workload) for p in trained}, name
    final = [by_key[k] for k in folds["final"][2]]
    assert {p.folder for p in final} == {"h200-vllm-14b", "h200-vllm-sweep"}
    assert {evaluate.held_out_protocol(p) for p in final} == {evaluate.OTHER_MODEL, evaluate.HELD_OUT_RUNS}


def test_the_held_out_list_names_the_runs_predicted_before_they_ran():
    """The list holds the held-out model, the sweep whose figures were filed before it ran, and gpu-choice (an H100
    and an H200 whose predictions were filed before them), including bundles of it committed later."""
    for rel in (
        "h200-vllm-14b/bundle-heavy.tar.xz",
        "h200-vllm-sweep/bundle-sweep.tar.xz",
        "h200-vllm-sweep/bundle-decode-fp8.tar.xz",
        "gpu-choice/bundle-h100.tar.xz",
        "gpu-choice/bundle-h200.tar.xz",
    ):
        assert measured.held_out(rel), rel
    assert not measured.held_out("h200-vllm/bundle-steady.tar.xz")


def test_a_bundle_on_the_held_out_list_is_never_fitted_on(points, tmp_path, monkeypatch):
    """Calibrating with and without a listed bundle's points among its inputs gives the same calibration, hash
    included; taken off the list, the same points change it (so the list, not the caller, keeps them out)."""
    board = [p for p in points if p.folder == "h200-vllm-board"]
    sweep = [p for p in points if p.folder == "h200-vllm-sweep"]
    assert board and sweep and all(measured.held_out(p.rel) for p in sweep)
    quiet = {"log": lambda s: None}
    without = calibrate.calibrate(board, **quiet)
    present = calibrate.calibrate(board + sweep, **quiet)
    assert present["content_sha256"] == without["content_sha256"] == calibrate.content_sha256(present)
    assert present["fitted_on"] == without["fitted_on"]
    assert set(present["fitted_on"]) == {"h200-vllm-board/bundle-board.tar.xz", "h200-vllm-board/bundle-mix.tar.xz"}
    assert not {p.key for p in sweep} & set(present["trained_on"])
    assert present["excluded"]["bundles"] and all(measured.held_out(b) for b in present["excluded"]["bundles"])
    unlisted = tmp_path / "held_out.txt"
    unlisted.write_text("h200-vllm-14b/bundle-*.tar.xz  # the sweep taken off the list\n")
    monkeypatch.setattr(measured, "HELD_OUT_LIST", unlisted)
    fitted = calibrate.calibrate(board + sweep, **quiet)
    assert fitted["content_sha256"] != without["content_sha256"]
    assert "h200-vllm-sweep/bundle-sweep.tar.xz" in fitted["fitted_on"]


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
    for proto in (evaluate.BY_BOARD, evaluate.BY_WORKLOAD, evaluate.HELD_OUT_RUNS, evaluate.OTHER_MODEL):
        assert shipped["held_out"][proto]["output_tok_s"]["n"] > 0


def test_the_calibration_records_what_it_was_fitted_on_and_what_it_kept_out():
    """calibration.json names every bundle it was fitted on with the sha256 of the committed file, none of them on
    the held-out list, the list's globs and the committed bundles they keep out, and the content hash of its fitted
    values and bundles; identity() (what a filing records) hashes the file and that set."""
    import hashlib

    from wattbench_agent.emulator import calibration

    shipped = json.loads(calibration.PATH.read_text())
    final = json.loads(report.FINAL.read_text())
    fitted = shipped["fitted_on"]
    assert fitted and fitted == final["fitted_on"]
    for rel, sha in fitted.items():
        assert not measured.held_out(rel) and measured.bundle_sha(rel) == sha, rel
    assert shipped["excluded"]["globs"] == measured.held_out_patterns()
    # what the list kept out when it was written (a held-out run committed since is kept out too, by the list)
    assert set(shipped["excluded"]["bundles"]) <= set(measured.excluded()["bundles"])
    assert shipped["content_sha256"] == calibrate.content_sha256(final)
    ident = calibration.identity()
    assert ident["sha256"] == hashlib.sha256(calibration.PATH.read_bytes()).hexdigest()
    assert ident["fitted_on_sha256"] == calibration.sha256_of(fitted) and ident["fitted_on"] == sorted(fitted)


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
    assert cal["fitted_on"] == final["fitted_on"] and cal["content_sha256"] == final["content_sha256"]


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
