"""The twin's predictions filed before a run (FOLDER/predictions.json, `wattbench predict --format json`) against
what the GPU then measured (FOLDER's bundle-*.tar.xz, run with PLAN), per figure, with the twin's goals (tok/s, TPOT,
W, tok/J within 10%; TTFT within 25%):

    .venv/bin/python -m benchmarks.filed_predictions results/h200-vllm-sweep plans/h200-vllm-sweep.yaml

writes FOLDER/comparison.json and FOLDER/predicted_vs_measured.png and prints the markdown tables of FOLDER's README.
Measured figures come from the warehouse's own SQL (v_point_figures: the mean over repeats with its 95% t interval on
the log scale; a latency percentile: the mean of each repeat's percentile, no interval where a repeat has too few
requests for it). A point filed but not measured gets no row."""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from wattbench.plan import load_plan, plan_run_fields
from wattbench.twin import evaluate
from wattbench.warehouse import connect, ingest_bundle, set_run_fields
from wattbench_agent.bundle import read_manifest, unpacked

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
# the twin's goals (wattbench/twin/evaluate.py), and TTFT p99 within 25% as filings have always been scored
GOAL = {**evaluate.GOAL, "ttft_p99_ms": 0.25}
LABEL = {**evaluate.LABEL, "ttft_p99_ms": "TTFT p99"}


def measured(folder: Path, plan_path: Path) -> dict[tuple[str, str], dict[str, tuple[float, float, float]]]:
    with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "w.duckdb") as con:
        plan, sha = load_plan(plan_path)
        fields = plan_run_fields(plan, plan_path, sha)
        for bundle in sorted(folder.glob("bundle-*.tar.xz")):
            with unpacked(bundle) as folder:
                ingest_bundle(con, folder)
                set_run_fields(con, read_manifest(folder)["run_id"], fields)
        rows = con.execute(
            "SELECT engine, workload || ':' || point_label, metric, estimate, lo, hi FROM v_point_figures "
            "WHERE metric IN (" + ", ".join("?" for _ in GOAL) + ")",
            list(GOAL),
        ).fetchall()
    out: dict[tuple[str, str], dict] = {}
    for engine, point, metric, est, lo, hi in rows:
        out.setdefault((engine, point), {})[metric] = (est, lo, hi)
    return out


def filed(folder: Path) -> dict:
    """Every filing in FOLDER: predictions.json and any predictions-*.json (one per plan a folder's runs used), their
    points together; predicted_at and plan list each filing's."""
    files = sorted(folder.glob("predictions*.json"))
    if not files:
        raise FileNotFoundError(f"{folder}: no predictions.json (the twin's figures filed before the run)")
    docs = [json.loads(f.read_text()) for f in files]
    if len(docs) == 1:
        return docs[0]
    return {
        "predicted_at": ", ".join(str(d.get("predicted_at")) for d in docs),
        "plan": ", ".join(str(d.get("plan")) for d in docs),
        "points": [p for d in docs for p in d.get("points", [])],
    }


def compare(folder: Path, plan_path: Path) -> dict:
    pred = filed(folder)
    meas = measured(folder, plan_path)
    rows = []
    for p in pred["points"]:
        m = meas.get((p["engine"], p["point"]))
        if m is None:
            continue  # not measured (yet): no row, nothing invented
        for f, fig in p["figures"].items():
            if f not in m or fig["predicted"] is None:
                continue
            est, lo, hi = m[f]
            err = fig["predicted"] / est - 1
            rows.append(
                {
                    "engine": p["engine"],
                    "point": p["point"],
                    "figure": f,
                    "measured": est,
                    "measured_lo": lo,
                    "measured_hi": hi,
                    "predicted": fig["predicted"],
                    "error": err,
                    "goal": GOAL[f],
                    "meets_goal": abs(err) <= GOAL[f],
                    "band": fig["band"],
                    "inside_band": _inside(fig, est, err),
                }
            )
    summary = {
        f: {
            "points": len(fr := [r for r in rows if r["figure"] == f]),
            "within_goal": sum(r["meets_goal"] for r in fr),
            "inside_band": sum(r["inside_band"] for r in fr),
            "max_abs_error": max((abs(r["error"]) for r in fr), default=None),
        }
        for f in GOAL
    }
    return {
        "predicted_at": pred.get("predicted_at"),
        "plan": pred.get("plan"),
        "what": "the twin's figures filed before the run (predictions.json) against the H200's measurement; "
        "error = predicted / measured - 1",
        "rows": rows,
        "summary": summary,
    }


def _inside(fig: dict, measured: float, err: float) -> bool:
    """A filing with a prediction interval (its `level`): the measured value inside its range; an older one, as it
    was scored: the error within its symmetric band."""
    if fig.get("level") and fig.get("range"):
        return fig["range"][0] <= measured <= fig["range"][1]
    return fig["band"] is not None and abs(err) <= fig["band"]


def _streams(point: str) -> int | None:
    m = re.fullmatch(r"sweep:c(\d+)", point)
    return int(m.group(1)) if m else None


def picture(result: dict, path: Path, title: str) -> None:
    """Measured (mean, 95% interval) against predicted (with its band) per stream count of the `sweep` workload,
    one panel per figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = [f for f in GOAL if any(r["figure"] == f for r in result["rows"])]
    fig, axes = plt.subplots(2, (len(figures) + 1) // 2, figsize=(13, 7), squeeze=False)
    engines = sorted({r["engine"] for r in result["rows"]})
    colors = dict(zip(engines, COLORS * len(engines), strict=False))
    # a sweep of stream counts on a log axis; any other set of points side by side, one tick each
    sweep = any(_streams(r["point"]) for r in result["rows"])
    names = sorted({r["point"] for r in result["rows"]}, key=lambda p: _order_key(p))
    where = {p: (_streams(p) if sweep else i + 1) for i, p in enumerate(names)}
    ticks = sorted({v for v in where.values() if v})
    for ax, f in zip(axes.flat, figures, strict=False):
        for engine, color in colors.items():
            rs = sorted(
                (r for r in result["rows"] if r["figure"] == f and r["engine"] == engine and where[r["point"]]),
                key=lambda r: where[r["point"]],
            )
            if not rs:
                continue
            x = [where[r["point"]] for r in rs]
            y = [r["measured"] for r in rs]
            # no interval (one repeat, too few requests a repeat for a p99): a zero-length bar, n/a in the table
            err = [
                [r["measured"] - (r["measured_lo"] if r["measured_lo"] is not None else r["measured"]) for r in rs],
                [(r["measured_hi"] if r["measured_hi"] is not None else r["measured"]) - r["measured"] for r in rs],
            ]
            ax.errorbar(
                x, y, yerr=err, fmt="o-" if sweep else "o", color=color, capsize=3, label=f"{engine} measured (95% CI)"
            )
            band = [r["band"] or 0 for r in rs]
            pred = [r["predicted"] for r in rs]
            ax.errorbar(
                [v * 1.06 if sweep else v + 0.15 for v in x],
                pred,
                yerr=[[p * b for p, b in zip(pred, band, strict=True)]] * 2,
                fmt="s--" if sweep else "s",
                color=color,
                alpha=0.45,
                capsize=3,
                label=f"{engine} predicted before (band)",
            )
        if sweep:
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlabel("closed-loop streams (512 in / 128 out)")
        else:
            ax.set_xticks(ticks, [p for p in names if where[p]], fontsize=7)
            ax.set_xlabel("load point")
        ax.set_title(f"{LABEL[f]} (goal ±{100 * GOAL[f]:.0f}%)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(figures) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _order_key(point: str) -> tuple:
    workload, label = point.split(":")
    return (workload, int(label.lstrip("c")) if label[1:].isdigit() else 0)


def markdown(result: dict) -> str:
    lines = [
        "| engine | point | figure | measured [95% CI] | predicted | error | goal met |",
        "|---|---|---|---:|---:|---:|:---:|",
    ]

    def order(r: dict) -> tuple:
        return (*_order_key(r["point"]), r["engine"], list(GOAL).index(r["figure"]))

    def interval(r: dict) -> str:
        if r["measured_lo"] is None or r["measured_hi"] is None:
            return "[n/a: no interval]"
        return f"[{r['measured_lo']:,.4g}, {r['measured_hi']:,.4g}]"

    for r in sorted(result["rows"], key=order):
        lines.append(
            f"| {r['engine']} | {r['point']} | {LABEL[r['figure']]} | {r['measured']:,.4g} "
            f"{interval(r)} | {r['predicted']:,.4g} | {100 * r['error']:+.1f}% "
            f"| {'yes' if r['meets_goal'] else 'no'} |"
        )
    lines += [
        "",
        "| figure | points | within goal | inside the predicted band | largest error |",
        "|---|---:|---:|---:|---:|",
    ]
    for f, s in result["summary"].items():
        worst = "" if s["max_abs_error"] is None else f"{100 * s['max_abs_error']:.1f}%"
        lines.append(
            f"| {LABEL[f]} (goal {100 * GOAL[f]:.0f}%) | {s['points']} | {s['within_goal']} | {s['inside_band']} | "
            f"{worst} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="holds predictions.json and the bundle-*.tar.xz the run wrote")
    ap.add_argument("plan", type=Path, help="the plan the run was measured with")
    ap.add_argument(
        "--title",
        default="The twin's predictions filed before the run vs measured: vLLM 0.25.0, 1x H200, "
        "Llama-3.1-8B shape (random)",
    )
    args = ap.parse_args(argv)
    result = compare(args.folder, args.plan)
    (args.folder / "comparison.json").write_text(json.dumps(result, indent=1) + "\n")
    picture(result, args.folder / "predicted_vs_measured.png", args.title)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
