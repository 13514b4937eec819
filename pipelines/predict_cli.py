"""`wattbench predict --plan PLAN`: the digital twin's figures for a configuration never measured, each with the band
the measured spread gives it, labelled predicted; filed as a run with source 'predicted' (the capacity plan and every
report can use it, marked as such).

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

# the held-out errors' figures, as the summary after the table names them
FIGURE_LABELS = {
    "output_tok_s": "tok/s",
    "tpot_p50_ms": "TPOT p50",
    "counter_w_per_gpu": "W",
    "output_tokens_per_j": "tok/J",
    "ttft_p50_ms": "TTFT p50",
}


def table(by: dict[tuple[str, str], dict], notes: list[dict]) -> str:
    """The predicted figures, one row per engine and point, each with its band (±n/a: none measured)."""
    from tabulate import tabulate

    from wattbench.twin.predict import FIGURES, band_of

    out = []
    for (engine, point), figs in by.items():
        row = {"engine": engine, "point": point}
        for f, label, fmt in FIGURES:
            v = figs.get(f)
            band = band_of(engine, point, f, notes)
            band = " ±n/a" if band is None else f" ±{100 * band:.0f}%"
            row[f"{label} (predicted)"] = "NULL" if v is None else fmt.format(v) + band
        out.append(row)
    return tabulate(out, headers="keys", tablefmt="github")


def main(args: argparse.Namespace) -> int:
    from wattbench.plan import PlanError, load_plan
    from wattbench.twin.predict import (
        NothingToPredict,
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
                    # the twin's errors on real points its calibration never saw (calibration.json's held_out)
                    "held_out_errors": held_out,
                },
                indent=1,
            )
        )
    else:
        print(table(by, notes))
    print("", file=sys.stderr)
    print(
        "± = the band: how far the figure moves across the measured spread of the host's launch time of a prefill "
        "step and of the decode step (5th to 95th percentile over real H200 windows; agent/wattbench_agent/emulator/"
        "calibration.json)",
        file=sys.stderr,
    )
    for proto in ("by board", "by workload"):
        errs = held_out.get(proto)
        if errs:
            print(
                f"the twin's error on real points its calibration never saw ({proto}): "
                + ", ".join(
                    f"{FIGURE_LABELS.get(f, f)} within the goal at {v['within_goal']}/{v['n']} (median "
                    f"{100 * v['median_abs_error']:.0f}%, largest {100 * v['max_abs_error']:.0f}%)"
                    for f, v in errs.items()
                ),
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
