"""`wattbench predict --plan PLAN`: the digital twin's figures for a configuration never measured, each with its
prediction interval (sized from the twin's cross-validated errors), labelled predicted; filed as a run with source
'predicted' (the capacity plan and every report can use it, marked as such), with the calibration that made it.

The prediction itself (the twin, its bands, the bundle it files) is wattbench/twin/predict.py; this module parses
the command and prints.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from wattbench import settings

# the errors' figures, as the summary after the table names them
FIGURE_LABELS = {
    "output_tok_s": "tok/s",
    "tpot_p50_ms": "TPOT p50",
    "counter_w_per_gpu": "W",
    "output_tokens_per_j": "tok/J",
    "ttft_p50_ms": "TTFT p50",
}


def table(by: dict[tuple[str, str], dict], notes: list[dict]) -> str:
    """The predicted figures, one row per engine and point, each with its interval as percentages of it ([-9%,
    +12%]; ±n/a: none, the profile's factors are assumed)."""
    from tabulate import tabulate

    from wattbench.twin.predict import FIGURES, range_of

    out = []
    for (engine, point), figs in by.items():
        row = {"engine": engine, "point": point}
        for f, label, fmt in FIGURES:
            v = figs.get(f)
            mult = range_of(engine, point, f, notes)
            band = " ±n/a" if mult is None else f" [{100 * (mult[0] - 1):+.0f}%, {100 * (mult[1] - 1):+.0f}%]"
            row[f"{label} (predicted)"] = "NULL" if v is None else fmt.format(v) + band
        out.append(row)
    return tabulate(out, headers="keys", tablefmt="github")


def states_lines(by: dict[tuple[str, str], dict], notes: list[dict]) -> list[str]:
    """One line per point that can lock into either phase state: both states' tok/s and their measured shares."""
    from wattbench.twin.predict import states_json

    lines = []
    for (engine, point), figs in by.items():
        st = states_json(engine, point, figs, notes)
        if not st:
            continue
        parts = []
        for name, s in st.items():
            if not isinstance(s, dict) or "figures" not in s:
                continue
            tok = s["figures"].get("output_tok_s")
            share = "share not measured" if s["share"] is None else f"{100 * s['share']:.0f}% of windows"
            tok_s = "NULL" if tok is None else f"{tok:,.0f}"
            parts.append(f"{name} ({s['prompts_a_step']} a step) {tok_s} tok/s, {share}")
        covers = "the interval spans both" if st["band_covers_both"] else "the interval spans the first only"
        lines.append(
            f"{engine} {point}: two phase states: " + "; ".join(parts) + f" ({st['committed_windows']} committed "
            f"windows at these streams; {covers})"
        )
    return lines


def main(args: argparse.Namespace) -> int:
    from wattbench.plan import PlanError, load_plan
    from wattbench.twin.predict import (
        NothingToPredict,
        calibration_identity,
        file_prediction,
        held_out_errors,
        model_note,
        points_json,
        twin_model,
    )
    from wattbench.warehouse import WarehouseError

    try:
        plan, sha = load_plan(args.plan)
    except PlanError as exc:
        print(f"wattbench predict: {exc}", file=sys.stderr)
        return 2
    stamp = dt.datetime.now(dt.UTC)
    run_id = args.run_id or f"predicted-{plan.name}-{stamp:%Y%m%dT%H%M%SZ}"
    held_out = held_out_errors()
    ident = calibration_identity()
    print(
        f"wattbench predict: plan {plan.name} ({plan.model} on {plan.gpu}); every figure is PREDICTED by the twin "
        f"(the emulator in virtual time), not measured",
        file=sys.stderr,
    )
    print(f"twin model: {model_note(twin_model(plan))}", file=sys.stderr)
    try:
        notes, by = file_prediction(
            plan,
            Path(args.plan).resolve(),
            sha,
            run_id,
            stamp,
            db=args.db,
            store=not args.no_store,
            log=lambda s: print(s, file=sys.stderr),
        )
    except (NothingToPredict, WarehouseError) as exc:
        print(f"wattbench predict: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(
            json.dumps(
                {
                    "run_id": None if args.no_store else run_id,
                    "plan": plan.name,
                    "predicted_at": stamp.isoformat(),
                    "source": "predicted",
                    "notes": notes,
                    "points": points_json(by, notes),
                    # the twin's errors on real points its calibration never saw (calibration.json's held_out:
                    # cross-validated by board and by workload, the held-out runs and model)
                    "held_out_errors": held_out,
                    # the calibration that made these figures: its sha256, the bundles it was fitted on, what the
                    # held-out list kept out
                    "calibration": ident,
                },
                indent=1,
            )
        )
    else:
        print(table(by, notes))
    print("", file=sys.stderr)
    for line in states_lines(by, notes):
        print(line, file=sys.stderr)
    level = next((n["level"] for n in notes if n.get("level")), None)
    if level:
        print(
            f"[low, high] = the {100 * level:.0f}% prediction interval, as percentages of the figure: the twin's own "
            "errors on real H200 points its calibration never saw (cross-validation by board; coverage in "
            "results/twin/coverage.md)",
            file=sys.stderr,
        )
    for proto in ("by board", "by workload", "held-out runs"):
        errs = held_out.get(proto)
        if errs:
            what = "held-out runs" if proto == "held-out runs" else f"cross-validated {proto}"
            print(
                f"the twin's error on real points its calibration never saw ({what}): "
                + ", ".join(
                    f"{FIGURE_LABELS.get(f, f)} within the goal at {v['within_goal']}/{v['n']} (median "
                    f"{100 * v['median_abs_error']:.0f}%, largest {100 * v['max_abs_error']:.0f}%)"
                    for f, v in errs.items()
                ),
                file=sys.stderr,
            )
    print(
        f"calibration: {ident.get('file')} sha256 {ident.get('sha256')} (fitted on {len(ident.get('fitted_on') or [])}"
        f" bundles; never fitted on: {', '.join((ident.get('excluded') or {}).get('globs') or []) or 'none listed'})",
        file=sys.stderr,
    )
    for n in notes:
        if n.get("skipped"):
            continue
        where = (
            ("; extrapolates beyond the validated domain (vLLM, Llama-3.1-8B, 1xH200): " + ", ".join(n["extrapolates"]))
            if n["extrapolates"]
            else "; inside the validated domain"
        )
        print(f"{n['engine']}: {n['mapping']}{where}", file=sys.stderr)
    if not args.no_store:
        print(
            f"filed as run {run_id} (source predicted): wattbench report --run {run_id}; "
            f"wattbench report --capacity --run {run_id}",
            file=sys.stderr,
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="the digital twin's figures for a plan never measured, with the validated error band",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--plan", required=True, help="the plan to predict (engines, workloads, prices, SLO, capacity)")
    p.add_argument("--db", help=settings.DB_HELP)
    p.add_argument("--run-id", help="file the predicted run under this id (default: predicted-<plan>-<time>)")
    p.add_argument("--no-store", action="store_true", help="print only; do not file the run in the warehouse")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=main)
