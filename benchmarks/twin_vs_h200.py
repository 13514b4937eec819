"""The emulator's prediction beside every figure measured on the H200 (run: python -m benchmarks.twin_vs_h200).

Measured: real vLLM 0.25.0 on one H200, random-weight Llama-3.1-8B shape, bf16 and fp8, the bundles under
results/h200-vllm/ (three interleaved repeats per point, 95% intervals as `wattbench report` gives them; read once
into results/h200-vllm/measured_figures.json by benchmarks/twin_fit.py).
Predicted: the emulator's vllm-like profile as shipped, configured as the measured engines were
(wattbench_agent.emulator.twin: async scheduling, online fp8 with a bf16 KV cache, the plan's KV-cache size), the same
workloads (closed-loop streams ramped over 2 s, gamma arrivals replaying each repeat's send times), the measured
prompt length, the same warm-up and window; the mean of three runs, as the measurement is of three repeats.

IN SAMPLE: the shipped factors were fitted on these very points (benchmarks/twin_fit.py, "final"), so these errors
show how well the model can describe them, not how well it predicts. The held-out errors (points a fit never saw)
are in results/h200-vllm/twin_fit.json and results/emulator_calibration.md.

Writes results/h200-vllm/twin_vs_measured.json and prints a markdown table: per engine and point, per figure, the
measured value with its interval, the emulator's value, the error (emulated - measured) / measured, and whether it
falls inside the measured interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "h200-vllm"


def compare() -> list[dict[str, Any]]:
    from benchmarks import twin_fit

    data = (
        json.loads(twin_fit.MEASURED_CACHE.read_text())
        if twin_fit.MEASURED_CACHE.exists()
        else twin_fit.refresh_measured()
    )
    points, _meas = twin_fit.load_points(held_out_models=False)  # the fitted model's points only
    by_key = {p.key: p for p in points}
    preds = {k: twin_fit.predict_point(p, {}) for k, p in by_key.items()}  # {}: the factors as shipped
    out = []
    for r in data["rows"]:
        key = f"{r['engine']}:{r['workload']}:{r['point_label']}"
        value = preds[key].get(r["metric"])
        m = r["estimate"]
        err = (value - m) / m if value is not None and m else None
        inside = r["lo"] is not None and r["hi"] is not None and value is not None and r["lo"] <= value <= r["hi"]
        out.append(
            {
                "engine": r["engine"],
                "workload": r["workload"],
                "point": r["point_label"],
                "figure": r["metric"],
                "measured": m,
                "measured_lo": r["lo"],
                "measured_hi": r["hi"],
                "repeats": int(r["repeats"]),
                "predicted": value,
                "error": err,
                "inside_interval": inside,
                "in_sample": r["workload"] not in twin_fit.LATE,
            }
        )
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| engine | point | figure | measured [95% interval] | emulator (in sample) | error |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ci = f" [{r['measured_lo']:.4g}, {r['measured_hi']:.4g}]" if r["measured_lo"] is not None else ""
        pred = f"{r['predicted']:.4g}" if r["predicted"] is not None else "n/a"
        err = f"{100 * r['error']:+.1f}%" if r["error"] is not None else "n/a"
        lines.append(
            f"| {r['engine']} | {r['workload']}:{r['point']} | {r['figure']} | {r['measured']:.4g}{ci} | "
            f"{pred} | {err}{' (inside)' if r['inside_interval'] else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.twin_vs_h200", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "twin_vs_measured.json"))
    args = ap.parse_args(argv or [])
    rows = compare()
    errors = sorted(abs(r["error"]) for r in rows if r["error"] is not None)
    summary = {
        "points": len({(r["engine"], r["workload"], r["point"]) for r in rows}),
        "figures": len(rows),
        "median_abs_error": errors[len(errors) // 2] if errors else None,
        "inside_interval": sum(r["inside_interval"] for r in rows),
        "note": "in sample except rows with in_sample false (workloads kv8, kv8-long: measured after the "
        "final fit); held-out errors are in twin_fit.json",
    }
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(markdown(rows))
    print(
        f"\n{summary['figures']} figures at {summary['points']} points; median |error| "
        f"{100 * (summary['median_abs_error'] or 0):.1f}% (in sample); {summary['inside_interval']} predictions "
        f"inside the measured 95% interval -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
