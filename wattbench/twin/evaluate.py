"""The twin tested on real points its calibration never saw, before and after.

Protocols (each point of the fitted model is predicted by a calibration that did not see it):
- by workload: one calibration per workload of a results folder, on every other point of the fitted model;
- by board: one calibration per GPU board (NVML UUID), on every point measured on other boards (so on other hosts);
- held-out model: the 14.5B model (results/h200-vllm-14b) is in no calibration; the final one predicts it;
- in sample: the final calibration on its own points (for reference, not a test).
A prediction is the twin at the calibration's central values (the host's median launch time, no board factor), the
mean of three seeds; its band the two ends of the measured spread (wattbench_agent.emulator.twin.spread_corners).
'Before' is the twin this calibration replaces (model.BEFORE: emulator 0.3.0 as shipped, a speed and a power factor
per training board, centred on the typical board), on the same points: its own leave-one-workload-out prediction where
its procedure made one (results/h200-vllm/twin_fit.json), else its shipped values (which never saw those boards).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from typing import Any

from wattbench.twin.calibrate import calibrate, fitted_model
from wattbench.twin.measured import RESULTS, Point
from wattbench.twin.model import BEFORE, Params, run

GOAL = {
    "output_tok_s": 0.10,
    "tpot_p50_ms": 0.10,
    "counter_w_per_gpu": 0.10,
    "output_tokens_per_j": 0.10,
    "ttft_p50_ms": 0.25,
}
LABEL = {
    "output_tok_s": "tok/s",
    "tpot_p50_ms": "TPOT p50",
    "counter_w_per_gpu": "W",
    "output_tokens_per_j": "tok/J",
    "ttft_p50_ms": "TTFT p50",
}
BY_WORKLOAD, BY_BOARD, OTHER_MODEL, IN_SAMPLE = "by workload", "by board", "held-out model", "in sample"
OLD_FIT = RESULTS / "h200-vllm" / "twin_fit.json"


def folds(points: list[Point]) -> dict[str, tuple[str, list[str], list[str]]]:
    """fold name -> (protocol, training point keys, test point keys)."""
    fitted = fitted_model(points)
    out: dict[str, tuple[str, list[str], list[str]]] = {}
    for folder, workload in sorted({(p.folder, p.workload) for p in fitted}):
        test = [p.key for p in fitted if (p.folder, p.workload) == (folder, workload)]
        out[f"without {folder}:{workload}"] = (BY_WORKLOAD, [p.key for p in fitted if p.key not in test], test)
    for board in sorted({p.board for p in fitted}):
        test = [p.key for p in fitted if p.board == board]
        out[f"without board {board}"] = (BY_BOARD, [p.key for p in fitted if p.board != board], test)
    others = [p.key for p in points if p not in fitted]
    out["final"] = (OTHER_MODEL, [p.key for p in fitted], others)
    return out


def predict(p: Point, params: Params, spread: dict) -> dict[str, Any]:
    """The twin's figures at a point with their band: the mean of three seeds at the central values, and each figure's
    largest relative move at the two ends of the spread (seed 0 against seed 0)."""
    from wattbench_agent.emulator.twin import spread_corners

    central = run(p, params)
    first = run(p, params, seeds=(0,))
    band: dict[str, float] = {}
    for corner in spread_corners(spread).values():
        moved = run(
            p,
            params.with_(
                kf={"eager_layer_s": corner["eager_layer_s"]},
                gpu={"speed_scale": params.gpu.get("speed_scale", 1.0) / corner["gpu_time"]},
            ),
            seeds=(0,),
        )
        for f in GOAL:
            if first.get(f) and moved.get(f):
                band[f] = max(band.get(f, 0.0), abs(moved[f] / first[f] - 1.0))
    return {"figures": {f: central.get(f) for f in GOAL}, "band": band}


def _fold(args: tuple) -> tuple[str, dict[str, Any]]:
    name, protocol, train_keys, test_keys, points = args
    by_key = {p.key: p for p in points}
    cal = calibrate([by_key[k] for k in train_keys], log=lambda s: print(f"[{name}]{s}", file=sys.stderr, flush=True))
    params = Params(**cal["params"])
    preds = {k: predict(by_key[k], params, cal["spread"]) for k in test_keys}
    if name == "final":  # and the final calibration on its own points, for reference
        preds.update({k: {**predict(by_key[k], params, cal["spread"]), "in_sample": True} for k in train_keys})
    print(f"[{name}] done: {len(preds)} points", file=sys.stderr, flush=True)
    return name, {"protocol": protocol, "calibration": cal, "predictions": preds}


def run_folds(points: list[Point], workers: int = 1, only: set[str] | None = None) -> dict[str, dict]:
    jobs = [
        (name, proto, train, test, points)
        for name, (proto, train, test) in folds(points).items()
        if only is None or name in only
    ]
    jobs.sort(key=lambda j: j[0] != "final")
    if workers <= 1:
        return dict(map(_fold, jobs))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return dict(pool.imap_unordered(_fold, jobs, chunksize=1))


def old_held_out() -> dict[tuple[str, str, str], float]:
    """The replaced twin's own leave-one-workload-out predictions ((engine, workload:point, figure) -> value) on
    results/h200-vllm's points, as its procedure filed them."""
    if not OLD_FIT.exists():
        return {}
    rows = json.loads(OLD_FIT.read_text()).get("held_out", [])
    return {
        (r["engine"], r["point"], r["figure"]): r["predicted"]
        for r in rows
        if r["protocol"] == "leave-one-workload-out"
    }


def before(points: list[Point]) -> dict[str, dict[str, Any]]:
    """The replaced twin's figures at every point (see the module's docstring) and where they came from."""
    old = old_held_out()
    out = {}
    for p in points:
        mine = {f: old.get((p.engine, f"{p.workload}:{p.label}", f)) for f in GOAL} if p.folder == "h200-vllm" else {}
        if mine and all(v is not None for v in mine.values()):
            out[p.key] = {"figures": mine, "how": "its leave-one-workload-out fit"}
        else:
            shipped = run(p, BEFORE)
            out[p.key] = {"figures": {f: shipped.get(f) for f in GOAL}, "how": "as shipped (never saw the point)"}
    return out


def rows(points: list[Point], results: dict[str, dict], old: dict[str, dict]) -> list[dict[str, Any]]:
    """One row per protocol x point x figure: measured, predicted (with its band), before, errors, goal."""
    by_key = {p.key: p for p in points}
    out = []
    for name, res in sorted(results.items()):
        for key, pred in res["predictions"].items():
            p = by_key[key]
            protocol = IN_SAMPLE if pred.get("in_sample") else res["protocol"]
            for f, goal in GOAL.items():
                m, v = p.figures.get(f), pred["figures"].get(f)
                if not m or v is None:
                    continue
                b = (old.get(key) or {}).get("figures", {}).get(f)
                band = pred["band"].get(f)
                err = v / m - 1.0
                out.append(
                    {
                        "protocol": protocol,
                        "fold": name,
                        "point": key,
                        "folder": p.folder,
                        "workload": p.workload,
                        "board": p.board,
                        "engine": p.engine,
                        "precision": p.precision,
                        "label": p.label,
                        "figure": f,
                        "measured": m,
                        "predicted": v,
                        "error": err,
                        "meets_goal": abs(err) <= goal,
                        "band": band,
                        "inside_band": band is not None and abs(m / v - 1.0) <= band,
                        "before": b,
                        "before_error": None if b is None else b / m - 1.0,
                        "before_meets_goal": None if b is None else abs(b / m - 1.0) <= goal,
                        "before_how": (old.get(key) or {}).get("how"),
                    }
                )
    return out


def summary(rs: list[dict[str, Any]], by: str = "protocol") -> dict[str, dict[str, dict[str, Any]]]:
    """Per group (protocol, board, workload, ...) and figure: points, within goal after and before, the largest and
    median |error|, inside the band."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for group in sorted({r[by] for r in rs}):
        for f in GOAL:
            fr = [r for r in rs if r[by] == group and r["figure"] == f]
            if not fr:
                continue
            errs = sorted(abs(r["error"]) for r in fr)
            befores = [r for r in fr if r["before_meets_goal"] is not None]
            out.setdefault(group, {})[f] = {
                "n": len(fr),
                "within_goal": sum(r["meets_goal"] for r in fr),
                "before_within_goal": sum(r["before_meets_goal"] for r in befores) if befores else None,
                "before_n": len(befores),
                "median_abs_error": errs[len(errs) // 2],
                "max_abs_error": errs[-1],
                "inside_band": sum(r["inside_band"] for r in fr),
                "misses": [f"{r['point']} {100 * r['error']:+.0f}%" for r in fr if not r["meets_goal"]],
            }
    return out
