"""The twin on its held-out runs (the bundles of results/twin/held_out.txt that are committed): the figures filed
before each run (before: its predictions*.json, where there is one) and what `wattbench predict` gives now (after:
the shipped calibration, which no listed bundle entered), against what the GPU measured, per figure: within the
twin's goal (tok/s, TPOT p50, W, tok/J within 10%, TTFT p50 within 25%; error = predicted / measured - 1) and inside
the interval filed beside it (the filing's range: the band's ends before, the 90% prediction interval after).

    .venv/bin/python -m benchmarks.twin_held_out      # results/twin/held_out_runs.json and .md

Measured figures are the warehouse's own (v_point_figures over a bundle ingested alone, with the plan it ran); a
point filed but not measured (a capacity search has no prediction) gets no row. Nothing here is fitted: a run scored
here never enters a calibration (wattbench/twin/calibrate.fitted_model)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from wattbench.plan import load_plan, plan_run_fields
from wattbench.twin import measured
from wattbench.twin.evaluate import GOAL, LABEL
from wattbench.warehouse import connect, ingest_bundle, set_run_fields
from wattbench_agent.bundle import read_manifest, unpacked

OUT_JSON = measured.OUT / "held_out_runs.json"
OUT_MD = measured.OUT / "held_out_runs.md"
FIGURES = (*GOAL, "ttft_p99_ms")


def plan_of(bundle: Path, manifest: dict) -> Path:
    """The plan a bundle ran: plans/<folder>-<name>.yaml or plans/<folder>.yaml (measured.plan_for), else the plan
    its manifest names (a second run of a plan: results/gpu-choice/bundle-h100b.tar.xz ran gpu-choice-h100)."""
    path = measured.plan_for(bundle)
    return path if path.exists() else measured.ROOT / "plans" / f"{manifest.get('plan')}.yaml"


def filing(bundle: Path, plan_name: str | None) -> Path | None:
    """The predictions filed before a bundle's run: its folder's predictions-<name>.json, else predictions.json, else
    the filing of the plan it ran (a second run of a plan is held out against the same filing)."""
    name = bundle.name.removeprefix("bundle-").removesuffix(".tar.xz")
    for f in (bundle.parent / f"predictions-{name}.json", bundle.parent / "predictions.json"):
        if f.exists():
            return f
    for f in sorted(bundle.parent.glob("predictions*.json")):
        if json.loads(f.read_text()).get("plan") == plan_name:
            return f
    return None


def measured_points(bundle: Path) -> dict[str, Any]:
    """The bundle's plan, filing, GPU and measured points ((engine, workload:point) -> figure -> the mean over its
    repeats, v_point_figures)."""
    with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "w.duckdb") as con:
        with unpacked(bundle) as folder:
            manifest = read_manifest(folder)
            plan_path = plan_of(bundle, manifest)
            plan, sha = load_plan(plan_path)
            ingest_bundle(con, folder)
            set_run_fields(con, manifest["run_id"], plan_run_fields(plan, plan_path, sha))
        gpu = con.execute("SELECT any_value(gpu_name) FROM deployments").fetchone()[0]
        rows = con.execute(
            "SELECT engine, workload || ':' || point_label, metric, estimate FROM v_point_figures WHERE metric IN ("
            + ", ".join("?" for _ in FIGURES)
            + ")",
            list(FIGURES),
        ).fetchall()
    out: dict[tuple[str, str], dict[str, float]] = {}
    for engine, point, metric, est in rows:
        if est is not None:
            out.setdefault((engine, point), {})[metric] = float(est)
    return {"plan": plan_path, "filing": filing(bundle, manifest.get("plan")), "gpu": str(gpu), "points": out}


def _ranges(doc: dict) -> dict[tuple[str, str], dict[str, tuple[float | None, list | None]]]:
    """(engine, point) -> figure -> (predicted, [low, high]) of a filing; an old filing without a range: the band's
    ends [v (1 - band), v (1 + band)]."""
    out: dict[tuple[str, str], dict] = {}
    for p in doc.get("points", []):
        for f, fig in p["figures"].items():
            v, rng, band = fig.get("predicted"), fig.get("range"), fig.get("band")
            if rng is None and v is not None and band is not None:
                rng = [v * (1 - band), v * (1 + band)]
            out.setdefault((p["engine"], p["point"]), {})[f] = (v, rng)
    return out


def predict_now(plan_path: Path) -> dict:
    """`wattbench predict --no-store --format json`'s document for the plan, with the shipped calibration."""
    from wattbench.twin.predict import calibration_identity, file_prediction, held_out_errors, points_json

    plan, sha = load_plan(plan_path)
    stamp = dt.datetime.now(dt.UTC)
    notes, by = file_prediction(plan, plan_path, sha, "held-out-now", stamp, store=False, log=lambda s: None)
    return {
        "plan": plan.name,
        "predicted_at": stamp.isoformat(),
        "notes": notes,
        "points": points_json(by, notes),
        "held_out_errors": held_out_errors(),
        "calibration": calibration_identity(),
    }


def _row(run: str, gpu: str, key: tuple[str, str], f: str, m: float, before, after) -> dict[str, Any]:
    row: dict[str, Any] = {"run": run, "gpu": gpu, "engine": key[0], "point": key[1], "figure": f, "measured": m}
    for when, (v, rng) in (("before", before), ("after", after)):
        err = None if v is None else v / m - 1.0
        row[when] = {
            "predicted": v,
            "range": rng,
            "error": err,
            "meets_goal": None if err is None or f not in GOAL else abs(err) <= GOAL[f],
            "inside": None if rng is None else rng[0] <= m <= rng[1],
        }
    return row


def score(bundles: list[Path]) -> dict[str, Any]:
    """Every listed bundle's measured points against its filing (before) and a prediction now (after); a run the
    twin cannot predict from its plan (its model is on the GPU node only and the plan names no twin_model) is said
    and skipped (the held-out model is scored by the calibration itself: results/twin/README.md)."""
    from wattbench.twin.predict import NothingToPredict

    rows, runs, cache, skipped = [], {}, {}, {}
    none = (None, None)
    for bundle in bundles:
        run = f"{bundle.parent.name}/{bundle.name}"
        m = measured_points(bundle)
        plan_path, filed, gpu = m["plan"], m["filing"], m["gpu"]
        try:
            if plan_path not in cache:
                cache[plan_path] = predict_now(plan_path)
        except NothingToPredict:
            skipped[run] = (
                f"the twin cannot run {plan_path.name}'s model here (it names no twin_model); the held-out model is "
                "scored by the calibration itself, results/twin/README.md"
            )
            continue
        before = _ranges(json.loads(filed.read_text())) if filed else {}
        after = _ranges(cache[plan_path])
        where = str(filed.relative_to(measured.ROOT)) if filed else None
        runs[run] = {"gpu": gpu, "plan": str(plan_path.relative_to(measured.ROOT)), "filed": where}
        for key, figs in sorted(m["points"].items()):
            if key not in after and key not in before:
                continue  # not a predicted point (a capacity search's probe)
            for f in (f for f in FIGURES if f in figs):
                was, now = before.get(key, {}).get(f, none), after.get(key, {}).get(f, none)
                rows.append(_row(run, gpu, key, f, figs[f], was, now))
    calib = next(iter(cache.values()))["calibration"] if cache else None
    return {"rows": rows, "runs": runs, "skipped": skipped, "calibration": calib, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per run and figure: points, within goal and inside the interval, before and after."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in sorted({r["run"] for r in rows}):
        for f in FIGURES:
            fr = [r for r in rows if r["run"] == run and r["figure"] == f]
            if not fr:
                continue
            s: dict[str, Any] = {"n": len(fr)}
            for when in ("before", "after"):
                have = [r[when] for r in fr if r[when]["predicted"] is not None]
                s[when] = {
                    "n": len(have),
                    "within_goal": sum(bool(x["meets_goal"]) for x in have) if f in GOAL else None,
                    "inside": sum(bool(x["inside"]) for x in have),
                }
            out.setdefault(run, {})[f] = s
    return out


def markdown(result: dict[str, Any], took_s: float) -> str:
    cal = result.get("calibration") or {}
    lines = [
        "# The twin on its held-out runs: filed before the run, and now",
        "",
        "Written by `python -m benchmarks.twin_held_out` in "
        f"{took_s:.0f} s. Every committed bundle on results/twin/held_out.txt: measured (the warehouse's "
        "v_point_figures, the mean over a point's repeats) against the figures filed before it ran (before: its "
        "predictions*.json) and `wattbench predict` now (after: calibration.json sha256 "
        f"`{cal.get('sha256')}`, fitted on none of these runs). Within goal: |predicted / measured - 1| within 10% "
        "(tok/s, TPOT p50, W, tok/J) or 25% (TTFT p50); inside: the measured value inside the interval filed beside "
        "the figure (before: the band's ends; after: the 90% prediction interval, sized on H200 8B points: on "
        "another GPU or model it is an extrapolation, not a measured coverage).",
        "",
        "| run | GPU | figure | points | within goal, before -> after | inside, before -> after |",
        "|---|---|---|---:|---:|---:|",
    ]
    for run, figs in result["summary"].items():
        gpu = result["runs"][run]["gpu"]
        for f, s in figs.items():
            b, a = s["before"], s["after"]
            goal = "-" if a["within_goal"] is None else f"{b['within_goal']}/{b['n']} -> {a['within_goal']}/{a['n']}"
            if not b["n"] and a["within_goal"] is not None:
                goal = f"not filed -> {a['within_goal']}/{a['n']}"
            inside = f"{b['inside']}/{b['n']} -> {a['inside']}/{a['n']}" if b["n"] else f"- -> {a['inside']}/{a['n']}"
            lines.append(f"| {run} | {gpu} | {LABEL[f]} | {s['n']} | {goal} | {inside} |")
    for run, why in result.get("skipped", {}).items():
        lines += ["", f"{run}: not scored here ({why})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="score only the listed bundles whose path contains this")
    args = ap.parse_args(argv)
    t0 = time.time()
    bundles = [measured.RESULTS / b for b in measured.excluded()["bundles"] if not args.only or args.only in b]
    result = score(bundles)
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    OUT_MD.write_text(markdown(result, time.time() - t0))
    print(OUT_MD.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
