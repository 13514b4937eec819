"""The twin tested on real points its calibration never saw: cross-validation over the bundles it may fit on, and the
held-out runs it may never fit on.

Protocols (each point is predicted by a calibration that did not see it):
- cross-validation by workload: one calibration per workload of a results folder, on every other point the
  calibration may fit on (calibrate.fitted_model: the 8B model, no bundle of the held-out list);
- cross-validation by board: one calibration per GPU board (NVML UUID), on every such point measured on other boards
  (so on other hosts);
- held-out runs: the 8B bundles on the held-out list (results/twin/held_out.txt), predicted by the final calibration,
  which never saw them (their predictions were filed before they ran; the model's structure was not blind to them);
- held-out model: the 14.5B model (results/h200-vllm-14b, also on the list), predicted by the final calibration;
- in sample: the final calibration on its own points (for reference, not a test).
A prediction is the twin at the calibration's central values (the host's median launch time, no board factor), the
mean of three seeds; where a closed loop of equal lengths can lock into either phase state, the other state's
figures beside it (states.py). Its interval comes from the cross-validated errors (intervals.py), not from here.
"""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any

from wattbench.twin import states
from wattbench.twin.calibrate import FITTED_MODEL, calibrate, fitted_model
from wattbench.twin.measured import Point
from wattbench.twin.model import PREDICTED, Params, run, setup_for

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
    "ttft_p99_ms": "TTFT p99",
}
BY_WORKLOAD, BY_BOARD, HELD_OUT_RUNS, OTHER_MODEL, IN_SAMPLE = (
    "by workload",
    "by board",
    "held-out runs",
    "held-out model",
    "in sample",
)
CROSS_VALIDATED = (BY_BOARD, BY_WORKLOAD)
LEVEL = 0.90  # the prediction intervals' level (intervals.py)


def folds(points: list[Point]) -> dict[str, tuple[str, list[str], list[str]]]:
    """fold name -> (protocol, training point keys, test point keys). The final fold tests every point no
    calibration may fit on (the held-out runs and the held-out model)."""
    fitted = fitted_model(points)
    out: dict[str, tuple[str, list[str], list[str]]] = {}
    for folder, workload in sorted({(p.folder, p.workload) for p in fitted}):
        test = [p.key for p in fitted if (p.folder, p.workload) == (folder, workload)]
        out[f"without {folder}:{workload}"] = (BY_WORKLOAD, [p.key for p in fitted if p.key not in test], test)
    for board in sorted({p.board for p in fitted}):
        test = [p.key for p in fitted if p.board == board]
        out[f"without board {board}"] = (BY_BOARD, [p.key for p in fitted if p.board != board], test)
    others = [p.key for p in points if p not in fitted]
    out["final"] = (HELD_OUT_RUNS, [p.key for p in fitted], others)
    return out


def held_out_protocol(p: Point) -> str:
    return HELD_OUT_RUNS if p.model_size == FITTED_MODEL else OTHER_MODEL


def predict(p: Point, params: Params, table: dict) -> dict[str, Any]:
    """The twin's figures at a point (the mean of three seeds at the central values) and, at a point that can lock
    into either phase state, both states with their measured shares (`table`: states.share_table of the training
    points)."""
    central = run(p, params)
    figs = {f: central.get(f) for f in PREDICTED}
    out: dict[str, Any] = {"figures": figs}
    if states.lockable(p.shape == "concurrency", p.output_dist is None, p.concurrency, p.output_tokens):
        st = setup_for(p.model, p.precision, p.config, params)
        known = {f: v for f, v in figs.items() if v is not None}
        out["states"] = states.states(st, p.concurrency, p.prompt_tokens, p.output_tokens, known, table, LEVEL)
    return out


def _fold(args: tuple) -> tuple[str, dict[str, Any]]:
    name, protocol, train_keys, test_keys, points = args
    by_key = {p.key: p for p in points}
    train = [by_key[k] for k in train_keys]
    cal = calibrate(train, log=lambda s: print(f"[{name}]{s}", file=sys.stderr, flush=True))
    params = Params(**cal["params"])
    table = states.share_table(fitted_model(train))
    cal["phase_states"] = table
    preds = {k: predict(by_key[k], params, table) for k in test_keys}
    if name == "final":  # the held-out points by kind, and the final calibration on its own points, for reference
        for k in test_keys:
            preds[k]["protocol"] = held_out_protocol(by_key[k])
        preds.update({k: {**predict(by_key[k], params, table), "protocol": IN_SAMPLE} for k in train_keys})
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


def rows(points: list[Point], results: dict[str, dict]) -> list[dict[str, Any]]:
    """One row per protocol x point x figure: measured, predicted, the error and the goal; at a point with two phase
    states, the other state's figure and whether the band covers it."""
    by_key = {p.key: p for p in points}
    out = []
    for name, res in sorted(results.items()):
        for key, pred in res["predictions"].items():
            p = by_key[key]
            protocol = pred.get("protocol") or res["protocol"]
            st = pred.get("states")
            other = None
            if st:
                other = next(s for k, s in st["states"].items() if k != st["simulated"])
            for f in PREDICTED:
                m, v = p.figures.get(f), pred["figures"].get(f)
                if not m or v is None:
                    continue
                err, goal = v / m - 1.0, GOAL.get(f)
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
                        "meets_goal": None if goal is None else abs(err) <= goal,
                        "state": st["simulated"] if st else None,
                        "other_state": (other or {}).get("figures", {}).get(f) if st else None,
                        "other_share": other["share"] if st else None,
                        "band_covers_both": bool(st and st["band_covers_both"]),
                    }
                )
    return out


def summary(rs: list[dict[str, Any]], by: str = "protocol") -> dict[str, dict[str, dict[str, Any]]]:
    """Per group (protocol, board, workload, ...) and goal figure: points, within goal, the largest and median
    |error|, and (where the rows carry it) inside the interval."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for group in sorted({r[by] for r in rs}):
        for f in GOAL:
            fr = [r for r in rs if r[by] == group and r["figure"] == f]
            if not fr:
                continue
            errs = sorted(abs(r["error"]) for r in fr)
            out.setdefault(group, {})[f] = {
                "n": len(fr),
                "within_goal": sum(r["meets_goal"] for r in fr),
                "median_abs_error": errs[len(errs) // 2],
                "max_abs_error": errs[-1],
                "inside_interval": sum(bool(r.get("inside")) for r in fr) if "inside" in fr[0] else None,
                "misses": [f"{r['point']} {100 * r['error']:+.0f}%" for r in fr if not r["meets_goal"]],
            }
    return out
