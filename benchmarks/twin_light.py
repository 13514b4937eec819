"""Light load on the real H200 (1 and 4 streams) beside the twin (run: python -m benchmarks.twin_light).

Measured (source: measured): the light-load bundles of results/h200-vllm (bundle-light*.tar.xz: real vLLM 0.25.0 on
one H200, Llama-3.1-8B shape, bf16 and online fp8, 1 and 4 closed-loop streams of 512 or 2K-token prompts and 128
output tokens, three interleaved repeats per point), ingested with the plan into a scratch warehouse: every figure
with its 95% interval as v_point_figures gives it, and fp8 / bf16 as v_engine_contrasts gives it (repeats paired).
Emulated (source: emulated): the shipped twin (benchmarks/twin_fit.py's predict_point with the factors as shipped),
same workloads, warm-up, window and ramp; and, where results/h200-vllm/twin_fit.json holds it, the prediction of the
fit made before these points were measured (held out: it never saw them).

Writes results/h200-vllm/light_load.json and the tables of results/h200-vllm/README.md's "Light load" section
(between its twin_light markers), and prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import twin_fit

FIGS = ["output_tok_s", "counter_w_per_gpu", "output_tokens_per_j", "ttft_p50_ms", "tpot_p50_ms"]
HEAD = ["output tok/s", "W (counter)", "tok/J", "TTFT p50 (ms)", "TPOT p50 (ms)"]
RATIOS = ["output_tok_s", "output_tokens_per_j", "counter_w_per_gpu"]


def measured() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from resources.plan import load_plan, plan_run_fields
    from resources.warehouse import connect, ingest_bundle, set_run_fields
    from wattbench_agent.bundle import read_manifest, unpacked

    plan, sha = load_plan(twin_fit.PLAN)
    fields = plan_run_fields(plan, twin_fit.PLAN, sha)
    bundles = sorted(twin_fit.RESULTS.glob("bundle-light*.tar.xz"))
    if not bundles:
        raise SystemExit(f"no light-load bundle (bundle-light*.tar.xz) under {twin_fit.RESULTS}")
    with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "light.duckdb") as con:
        for b in bundles:
            with unpacked(b) as folder:
                ingest_bundle(con, folder)
                run_id = read_manifest(folder)["run_id"]
            set_run_fields(con, run_id, fields)
        q = ", ".join("?" for _ in FIGS)
        figs = (
            con.execute(
                "SELECT engine, workload, point_label, metric, estimate, lo, hi, repeats FROM v_point_figures "
                f"WHERE metric IN ({q}) ORDER BY workload, point_label, engine",
                FIGS,
            )
            .df()
            .to_dict("records")
        )
        q = ", ".join("?" for _ in RATIOS)
        ratios = (
            con.execute(
                "SELECT workload, point_label, metric, ratio, ratio_lo, ratio_hi, pairs, finding "
                "FROM v_engine_contrasts WHERE engine = 'vllm-fp8' AND other = 'vllm-bf16' "
                f"AND metric IN ({q}) ORDER BY workload, point_label",
                RATIOS,
            )
            .df()
            .to_dict("records")
        )
    clean = lambda x: None if x is None or x != x else float(x)  # noqa: E731 (NaN -> None)
    for r in figs + ratios:
        for k, v in list(r.items()):
            if isinstance(v, float):
                r[k] = clean(v)
    return figs, ratios


def emulated() -> dict[str, dict[str, dict[str, float]]]:
    """point key -> {'shipped': figures, 'held_out': figures of the fit made before these points existed}."""
    points, _ = twin_fit.load_points()
    stored = json.loads(twin_fit.OUT.read_text()) if twin_fit.OUT.exists() else {}
    before = stored.get("fits", {}).get(twin_fit.BEFORE_LIGHT)
    out = {}
    for p in points:
        if p.workload not in twin_fit.LIGHT:
            continue
        out[p.key] = {"shipped": twin_fit.predict_point(p, {})}
        if before:
            out[p.key]["held_out"] = twin_fit.predict_point(p, {**twin_fit.PRIOR, **before["params"]})
    return out


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else (f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}")


def markdown(figs: list[dict], ratios: list[dict], emu: dict) -> str:
    by: dict[tuple, dict] = {}
    for r in figs:
        by.setdefault((r["workload"], r["point_label"], r["engine"]), {})[r["metric"]] = r
    lines = ["| engine | prompts | streams | " + " | ".join(HEAD) + " |", "|---|---|---:|" + "---:|" * len(HEAD)]
    for (wl, label, engine), m in sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        e = emu.get(f"{engine}:{wl}:{label}", {})
        cells = []
        for f in FIGS:
            r = m.get(f)
            if r is None:
                cells.append("n/a")
                continue
            ci = f" [{_fmt(r['lo'])}, {_fmt(r['hi'])}]" if r["lo"] is not None else ""
            twin = e.get("shipped", {}).get(f)
            held = e.get("held_out", {}).get(f)
            pred = ""
            if twin is not None:
                pred = f" / {_fmt(twin)} ({100 * (twin / r['estimate'] - 1):+.0f}%)"
            if held is not None:
                pred += f" / {_fmt(held)} ({100 * (held / r['estimate'] - 1):+.0f}%)"
            cells.append(f"{_fmt(r['estimate'])}{ci}{pred}")
        lines.append(
            f"| {engine} | {'2K' if wl == 'light-long' else '512'} | {label.lstrip('c')} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "| prompts | streams | output tok/s fp8 / bf16 | tok/J fp8 / bf16 | W fp8 / bf16 | twin: tok/s, tok/J |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rb: dict[tuple, dict] = {}
    for r in ratios:
        rb.setdefault((r["workload"], r["point_label"]), {})[r["metric"]] = r
    for (wl, label), m in sorted(rb.items()):
        cells = []
        for f in RATIOS:
            r = m.get(f)
            cells.append(
                "n/a"
                if r is None
                else f"{r['ratio']:.2f} [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]"
                + ("" if r["finding"] != "no significant difference" else ": no significant difference")
            )
        e8, e16 = (
            emu.get(f"vllm-fp8:{wl}:{label}", {}).get("shipped"),
            emu.get(f"vllm-bf16:{wl}:{label}", {}).get("shipped"),
        )
        twin = (
            (
                f"{e8['output_tok_s'] / e16['output_tok_s']:.2f}, "
                f"{e8['output_tokens_per_j'] / e16['output_tokens_per_j']:.2f}"
            )
            if e8 and e16
            else "n/a"
        )
        lines.append(
            f"| {'2K' if wl == 'light-long' else '512'} | {label.lstrip('c')} | " + " | ".join(cells) + f" | {twin} |"
        )
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- twin_light: begin (written by python -m benchmarks.twin_light; do not edit by hand) -->"
README_END = "<!-- twin_light: end -->"


def summary_line(figs: list[dict], emu: dict) -> str:
    """The range of the twin's errors per figure, as shipped and held out, over the light points."""
    out = []
    for which, what in (("shipped", "as shipped (in sample)"), ("held_out", "fitted before these points (held out)")):
        parts = []
        for f, head in zip(FIGS, HEAD):
            errs = [
                e[which][f] / r["estimate"] - 1
                for r in figs
                if r["metric"] == f and r["estimate"]
                for e in [emu.get(f"{r['engine']}:{r['workload']}:{r['point_label']}", {})]
                if e.get(which, {}).get(f) is not None
            ]
            if errs:
                parts.append(f"{head.split(' (')[0]} {100 * min(errs):+.0f}% to {100 * max(errs):+.0f}%")
        if parts:
            out.append(f"the twin {what}: " + ", ".join(parts))
    return ("Errors over the eight light points: " + "; ".join(out) + ".") if out else ""


def write_readme_section(text: str, path: Path | None = None) -> bool:
    path = path or twin_fit.RESULTS / "README.md"
    section = README_BEGIN + "\n\n" + text.rstrip() + "\n\n" + README_END
    return twin_fit.write_between_markers(path, README_BEGIN, README_END, section)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.twin_light", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(twin_fit.RESULTS / "light_load.json"))
    args = ap.parse_args(argv or [])
    figs, ratios = measured()
    emu = emulated()
    Path(args.out).write_text(
        json.dumps(
            {
                "measured": {"source": "measured", "figures": figs, "fp8_over_bf16": ratios},
                "emulated": {
                    "source": "emulated",
                    "what": "shipped: the twin as shipped; held_out: the fit made before these points were measured",
                    "points": emu,
                },
            },
            indent=1,
        )
        + "\n"
    )
    text = markdown(figs, ratios, emu) + "\n" + summary_line(figs, emu) + "\n"
    write_readme_section(text)
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
