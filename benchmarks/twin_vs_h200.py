"""The emulator's prediction beside every figure measured on the H200 (run: python -m benchmarks.twin_vs_h200).

Measured: real vLLM 0.25.0 on one H200, random-weight Llama-3.1-8B shape, bf16 and fp8, the bundles under
results/h200-vllm/ (three interleaved repeats per point, 95% intervals as `wattbench report` gives them).
Predicted: the emulator's vllm-like profile on the emulator's llama-3.1-8b spec and h200 GPU at the same precision,
the same workloads (closed-loop streams, the gamma arrivals at the same rate and burstiness, the same prompt and
output lengths, max_num_seqs 256) and the same warm-up and window, through its pure-Python simulate() (virtual time;
the HTTP server runs the same model). Nothing here is fitted to these measurements: the emulator's factors come
from public ML.ENERGY figures (benchmarks/emulator_calibration.py), so every error below is out of sample.

Writes results/h200-vllm/twin_vs_measured.json and prints a markdown table: per engine and point, per figure, the
measured value with its interval, the prediction, the error (prediction - measured) / measured, and whether the
prediction falls inside the measured interval.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "h200-vllm"
PLAN = ROOT / "plans" / "h200-vllm.yaml"
BUNDLES = ("bundle-steady.tar.xz", "bundle-long-bursty.tar.xz")
# figure -> (SimResult attribute, key within it or None, multiplier to the measured unit)
FIGURES = {
    "output_tok_s": ("output_tok_s", None),
    "requests_s": ("request_throughput", None),
    "counter_w_per_gpu": ("avg_power_w", None),
    "output_tokens_per_j": ("tokens_per_joule", None),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_p50_ms": ("tpot_ms", "p50"),
    "itl_p50_ms": ("itl_ms", "p50"),
    "e2e_p50_ms": ("e2e_ms", "p50"),
}


def measured(db: Path) -> list[dict[str, Any]]:
    """The committed bundles ingested into a scratch warehouse; every point's summary figures."""
    from resources.plan import load_plan, plan_run_fields
    from resources.warehouse import connect, ingest_bundle
    from wattbench_agent.bundle import read_manifest, unpacked

    plan, sha = load_plan(PLAN)
    fields = plan_run_fields(plan, PLAN, sha)
    with connect(db) as con:
        for name in BUNDLES:
            with unpacked(RESULTS / name) as folder:
                ingest_bundle(con, folder)
                run_id = read_manifest(folder)["run_id"]
            con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE run_id = ?",
                        [*fields.values(), run_id])
        rows = con.execute(
            "SELECT engine, precision, workload, point_label, shape, concurrency, rate, burstiness, input_tokens, "
            "output_tokens, metric, estimate, lo, hi, repeats FROM v_point_figures WHERE metric IN "
            f"({', '.join('?' for _ in FIGURES)}) ORDER BY engine, workload, point_label, metric", list(FIGURES)).df()
    return rows.to_dict("records")


def predict(point: dict[str, Any], warmup_s: float, window_s: float) -> dict[str, float | None]:
    from wattbench_agent.emulator import Workload, simulate

    if point["shape"] == "concurrency":
        wl = Workload(concurrency=int(point["concurrency"]), input_tokens=int(point["input_tokens"]),
                      output_tokens=int(point["output_tokens"]))
    else:
        wl = Workload(shape=point["shape"], rate=float(point["rate"]), burstiness=float(point["burstiness"] or 1.0),
                      input_tokens=int(point["input_tokens"]), output_tokens=int(point["output_tokens"]))
    r = simulate("vllm-like", "llama-3.1-8b", "h200", 1, point["precision"], {"max_num_seqs": 256}, wl,
                 duration_s=window_s, warmup_s=warmup_s, seed=0)
    out = {}
    for figure, (attr, key) in FIGURES.items():
        value = getattr(r, attr)
        out[figure] = value.get(key) if key else value
    return out


def compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from resources.plan import load_plan

    plan, _ = load_plan(PLAN)
    timing = {w.name: (w.warmup_s, w.duration_s) for w in plan.workloads}
    points: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        points.setdefault((r["engine"], r["workload"], r["point_label"]), {**r, "figures": {}})["figures"][r["metric"]] = r
    out = []
    for (engine, workload, label), p in sorted(points.items()):
        pred = predict(p, *timing[workload])
        for figure, m in p["figures"].items():
            value = pred.get(figure)
            err = (value - m["estimate"]) / m["estimate"] if value is not None and m["estimate"] else None
            inside = (m["lo"] is not None and m["hi"] is not None and value is not None
                      and m["lo"] == m["lo"] and m["lo"] <= value <= m["hi"])
            out.append({"engine": engine, "workload": workload, "point": label, "figure": figure,
                        "measured": m["estimate"], "measured_lo": _num(m["lo"]), "measured_hi": _num(m["hi"]),
                        "repeats": int(m["repeats"]), "predicted": value, "error": err, "inside_interval": inside})
    return out


def _num(x: Any) -> float | None:
    return None if x is None or x != x else float(x)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| engine | point | figure | measured [95% interval] | emulator | error |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        ci = (f" [{r['measured_lo']:.4g}, {r['measured_hi']:.4g}]" if r["measured_lo"] is not None else "")
        pred = f"{r['predicted']:.4g}" if r["predicted"] is not None else "n/a"
        err = f"{100 * r['error']:+.1f}%" if r["error"] is not None else "n/a"
        lines.append(f"| {r['engine']} | {r['workload']}:{r['point']} | {r['figure']} | {r['measured']:.4g}{ci} | "
                     f"{pred} | {err}{' (inside)' if r['inside_interval'] else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.twin_vs_h200", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "twin_vs_measured.json"))
    args = ap.parse_args(argv or [])
    with tempfile.TemporaryDirectory() as tmp:
        rows = compare(measured(Path(tmp) / "h200.duckdb"))
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    summary = {"points": len({(r["engine"], r["workload"], r["point"]) for r in rows}), "figures": len(rows),
               "median_abs_error": sorted(errors)[len(errors) // 2] if errors else None,
               "inside_interval": sum(r["inside_interval"] for r in rows)}
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(markdown(rows))
    print(f"\n{summary['figures']} figures at {summary['points']} points; median |error| "
          f"{100 * (summary['median_abs_error'] or 0):.1f}%; {summary['inside_interval']} predictions inside the "
          f"measured 95% interval -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
