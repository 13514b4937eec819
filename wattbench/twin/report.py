"""The calibration's outputs: the emulator's package data (calibration.json) and the report under results/twin/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wattbench.twin.evaluate import (
    BY_BOARD,
    BY_WORKLOAD,
    GOAL,
    HELD_OUT_RUNS,
    IN_SAMPLE,
    LABEL,
    OTHER_MODEL,
    summary,
)
from wattbench.twin.measured import OUT, ROOT

PACKAGE_DATA = ROOT / "agent" / "wattbench_agent" / "emulator" / "calibration.json"
REPORT = OUT / "README.md"
ROWS = OUT / "cross_validation.json"  # every prediction of every protocol against what was measured
FINAL = OUT / "calibration.json"  # the final calibration in full: its parameters, spread and the windows they came from
COVERAGE = OUT / "coverage.md"  # the intervals and how often they held, per figure and protocol
BEFORE = OUT / "before.json"  # the twin this calibration replaced, scored as it was
PROTOCOLS = (BY_BOARD, BY_WORKLOAD, HELD_OUT_RUNS, OTHER_MODEL, IN_SAMPLE)
PROTOCOL_DOC = {
    BY_BOARD: "cross-validation, leave one board out",
    BY_WORKLOAD: "cross-validation, leave one workload out",
    HELD_OUT_RUNS: "held-out runs (8B, on the held-out list)",
    OTHER_MODEL: "held-out model (14.5B)",
    IN_SAMPLE: "in sample (reference, not a test)",
}


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


def errors_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per protocol and goal figure: points, within goal, median and largest |error|, inside the interval."""
    keys = ("n", "within_goal", "median_abs_error", "max_abs_error", "inside_interval")
    s = summary([r for r in rows if r["protocol"] != IN_SAMPLE])
    return {proto: {f: {k: v[k] for k in keys} for f, v in figs.items()} for proto, figs in s.items()}


def package_data(final: dict[str, Any], rows, ints: dict[str, Any], coverage: dict[str, Any]) -> dict[str, Any]:
    """What the emulator reads (agent/wattbench_agent/emulator/calibration.py)."""
    params = final["params"]
    return _round(
        {
            "_about": "The emulator's calibration on real hardware, written by `python -m wattbench.twin` (wattbench/"
            "twin/) from the committed real-hardware bundles of results/h200-vllm*/ not on the held-out list "
            "(results/twin/held_out.txt): do not edit by hand. profiles: the vllm-like profile's fitted kernel "
            "factors; power: the power coefficients; gpus: per-GPU factors; spread: the measured window-to-window "
            "spread of the host's launch time per layer of a prefill-carrying step and of the decode step; intervals: "
            "each figure's prediction interval, sized from the cross-validated errors (level and coverage in "
            "results/twin/coverage.md); phase_states: the windows of committed closed loops of equal lengths per "
            "phase state; held_out: the twin's errors by protocol (cross-validation by board and by workload, the "
            "held-out runs, the held-out model); fitted_on: the bundles it was fitted on with their sha256; "
            "excluded: what the held-out list kept out; content_sha256: the hash of the fitted values and the bundles "
            "(results/twin/README.md).",
            "content_sha256": final["content_sha256"],
            "fitted_on": final["fitted_on"],
            "excluded": final["excluded"],
            "profiles": {"vllm-like": params["kf"]},
            "power": params["pf"],
            "gpus": {"h200": params["gpu"]},
            "spread": {"vllm-like": final["spread"]},
            "intervals": {"vllm-like": {**ints, "coverage": coverage}},
            "phase_states": {"vllm-like": final["phase_states"]},
            "held_out": errors_summary(rows),
        }
    )


def _goal_cell(s: dict[str, Any] | None, before: dict[str, Any] | None = None) -> str:
    if not s:
        return "-"
    was = f"{before['within_goal']}/{before['n']} -> " if before else ""
    return f"{was}{s['within_goal']}/{s['n']}"


def summary_table(rows: list[dict[str, Any]], by: str, heading: str) -> list[str]:
    s = summary(rows, by)
    lines = [
        f"| {heading} | " + " | ".join(f"{LABEL[f]} (goal {100 * g:.0f}%)" for f, g in GOAL.items()) + " |",
        "|---|" + "---:|" * len(GOAL),
    ]
    for group, figs in s.items():
        lines.append(f"| {group} | " + " | ".join(_goal_cell(figs.get(f)) for f in GOAL) + " |")
    return lines


def errors_table(rows: list[dict[str, Any]], before: dict[str, Any] | None = None) -> list[str]:
    """Per protocol and figure: within the goal (before -> after where `before` has it), the errors and how often
    the measured value lay inside the interval (sized without that point's fold)."""
    s = summary(rows, "protocol")
    lines = [
        "| protocol | figure | points | within goal | median abs error | largest abs error | inside the 90% interval |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for proto in PROTOCOLS:
        for f, v in (s.get(proto) or {}).items():
            was = ((before or {}).get(proto) or {}).get(f)
            inside = "-" if v["inside_interval"] is None else f"{v['inside_interval']}/{v['n']}"
            lines.append(
                f"| {PROTOCOL_DOC[proto]} | {LABEL[f]} | {v['n']} | {_goal_cell(v, was)} "
                f"| {100 * v['median_abs_error']:.1f}% | {100 * v['max_abs_error']:.1f}% | {inside} |"
            )
    return lines


def coverage_table(ints: dict[str, Any], coverage: dict[str, Any], figures) -> list[str]:
    protos = [p for p in PROTOCOLS if p in coverage and p != IN_SAMPLE]
    lines = [
        "| figure | level | interval (measured / predicted) | sized on | "
        + " | ".join(f"inside: {PROTOCOL_DOC[p]}" for p in protos)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(protos),
    ]
    for f in figures:
        e = ints["figures"].get(f)
        if not e:
            continue
        cells = []
        for p in protos:
            c = coverage[p].get(f)
            cells.append("-" if not c else f"{c['inside']}/{c['n']} ({100 * c['share']:.0f}%)")
        lines.append(
            f"| {LABEL[f]} | {100 * ints['level']:.0f}% | {100 * e['lo']:+.1f}% to {100 * e['hi']:+.1f}% "
            f"| {e['n']} points | " + " | ".join(cells) + " |"
        )
    return lines


def point_table(rows: list[dict[str, Any]], protocol: str) -> list[str]:
    figs = list(GOAL)
    lines = [
        "| point | board | " + " | ".join(LABEL[f] for f in figs) + " |",
        "|---|---|" + "---:|" * len(figs),
    ]
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["protocol"] == protocol:
            by.setdefault(r["point"], {})[r["figure"]] = r
    for key, fr in sorted(by.items()):
        cells = []
        for f in figs:
            r = fr.get(f)
            if r is None:
                cells.append("n/a")
                continue
            miss = "" if r["meets_goal"] else "*"
            out = "" if r["inside"] is None or r["inside"] else " (outside)"
            other = ""
            if r.get("other_state") is not None and r.get("state"):
                share = "share n/a" if r["other_share"] is None else f"share {100 * r['other_share']:.0f}%"
                other = f"; other state {r['other_state']:,.4g}, {share}"
            cells.append(f"{r['measured']:,.4g} / {r['predicted']:,.4g}: {100 * r['error']:+.0f}%{miss}{out}{other}")
        lines.append(f"| {key} | {next(iter(fr.values()))['board']} | " + " | ".join(cells) + " |")
    return lines


PARAMS_DOC = {
    ("gpu", "mem_eff_scale"): "the H200's share of HBM bandwidth relative to the profile's mem_eff (decode steps)",
    ("kf", "fp8_act_quant_layer_s"): "fp8's fixed cost per layer and step (decode steps)",
    ("kf", "gemm_eff"): "dense GEMM share of the bf16 peak (2K-token prefill-carrying steps)",
    ("kf", "fp8_gemm_scale"): "fp8 GEMM share of the fp8 peak, relative to gemm_eff (2K-token prefill steps)",
    ("kf", "eager_layer_s"): "the host's launch time per layer of a step outside CUDA graphs: the median window",
    ("kf", "intake_latency_s"): "the API server's latency before intake (vLLM's TTFT split at 1-2 streams)",
    ("pf", "k_busy"): "static power while the engine iterates, share of TDP (window W)",
    ("pf", "k_cmp"): "tensor power at the dense peak, share of TDP (window W; the 735 W prefill anchor)",
    ("gpu", "mem_power_scale"): "the H200's memory power at full bandwidth relative to k_mem x TDP (window W)",
    ("gpu", "speed_scale"): "1: no board factor (withdrawn: no run separates a board from its host, start and weights)",
}


def _host_table(final: dict[str, Any], points) -> list[str]:
    cpu = {p.board: p.cpu for p in points}
    by: dict[str, list[dict]] = {}
    for w in final["host_windows"]:
        by.setdefault(w["board"], []).append(w)
    lines = [
        "| board | host CPU (where recorded) | windows | implied stall S, ms (min-max) | twin's GPU time of that step, "
        "ms | launch time per layer, us (median) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for board, ws in sorted(by.items()):
        s = sorted(w["implied_stall_ms"] for w in ws)
        e = sorted(w["eager_layer_s"] for w in ws)
        g = sorted(w["gpu_ms"] for w in ws)
        lines.append(
            f"| {board} | {cpu.get(board) or 'not recorded'} | {len(ws)} | {s[0]:.1f}-{s[-1]:.1f} "
            f"| {g[0]:.1f}-{g[-1]:.1f} | {1e6 * e[len(e) // 2]:.0f} |"
        )
    return lines


def _states_table(table: dict[str, Any]) -> list[str]:
    lines = ["| prompts | streams | windows spread | windows shared |", "|---|---:|---:|---:|"]
    for cls, by_c in sorted(table.items()):
        for c, n in sorted(by_c.items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {cls} | {c} | {n.get('spread', 0)} | {n.get('shared', 0)} |")
    return lines


def _before() -> dict[str, Any]:
    """The replaced twin's scores by protocol (results/twin/before.json), with 'inside_interval' its band's count."""
    if not BEFORE.exists():
        return {}
    b = json.loads(BEFORE.read_text())
    cv = b.get("cross-validated") or {}
    by = {BY_BOARD: cv.get("by board"), BY_WORKLOAD: cv.get("by workload"), OTHER_MODEL: b.get("held-out model")}
    by[HELD_OUT_RUNS] = b.get("held-out runs")
    return {k: v for k, v in by.items() if v}


def _before_after_table(rows: list[dict[str, Any]], before: dict[str, Any]) -> list[str]:
    s = summary(rows, "protocol")
    lines = [
        "| protocol | figure | within goal, before -> after | inside the band (before) -> the 90% interval (after) |",
        "|---|---|---:|---:|",
    ]
    for proto in (BY_BOARD, BY_WORKLOAD, HELD_OUT_RUNS, OTHER_MODEL):
        for f, v in (s.get(proto) or {}).items():
            was = (before.get(proto) or {}).get(f)
            band = f"{was['inside_band']}/{was['n']} -> " if was else ""
            inside = "-" if v["inside_interval"] is None else f"{v['inside_interval']}/{v['n']}"
            lines.append(f"| {PROTOCOL_DOC[proto]} | {LABEL[f]} | {_goal_cell(v, was)} | {band}{inside} |")
    return lines


def _header(final: dict[str, Any], points, took_s: float) -> list[str]:
    fitted, excl = final["fitted_on"], final["excluded"]
    return [
        "# The twin on the step composition: calibration, cross-validation and held-out runs",
        "",
        'Written by `python -m wattbench.twin` (wattbench/twin/; docs/EMULATOR.md, "The step composition") from the '
        f"committed real-hardware bundles of results/h200-vllm*/ ({len({p.rel for p in points})} bundles read, "
        f"{len(points)} points, {sum(len(p.repeats) for p in points)} windows); source: emulated (the twin) against "
        f"measured (real vLLM 0.25.0 on H200s). It took {took_s / 60:.0f} min on this machine (2 shared cores). The "
        "emulator reads the fitted values, the spread and the intervals from "
        "agent/wattbench_agent/emulator/calibration.json; every prediction records its sha256.",
        "",
        f"- **Fitted on** {len(fitted)} bundles (the 8B model): " + ", ".join(sorted(fitted)) + ".",
        f"- **Never fitted on** (the held-out list, {excl['list']}, enforced by calibrate.fitted_model): "
        + ", ".join(f"`{g}`" for g in excl["globs"])
        + "; committed now: "
        + (", ".join(excl["bundles"]) or "none")
        + ".",
        f"- **Content hash** (the fitted values, the spread and the bundles fitted on, each with its sha256): "
        f"`{final['content_sha256']}`.",
        "",
    ]


def _intervals_section(ints: dict[str, Any], coverage: dict[str, Any], figures) -> list[str]:
    return [
        "## Prediction intervals and their coverage",
        "",
        f"A predicted value v carries the interval [v (1 + low), v (1 + high)] at the {100 * ints['level']:.0f}% "
        "level: the split conformal ends of log(measured / predicted) over the points of the cross-validation by board "
        "(each predicted by a calibration that never saw its board: the case of a buyer's own machine). Where a "
        "closed loop of equal lengths can lock into either phase state and the other state's measured share is at "
        "least 10% (or not measured), the interval also spans that state's value (below). Coverage, each fold's "
        "points against the interval sized without that fold (cross-validation: not a held-out test), and the "
        "held-out runs and model against the shipped interval (also in coverage.md):",
        "",
        *coverage_table(ints, coverage, figures),
        "",
    ]


def _states_section(table: dict[str, Any]) -> list[str]:
    return [
        "## Phase states of closed loops of equal lengths",
        "",
        "Committed windows of closed loops whose requests all have the same lengths (expected stalled share (c - 1)/"
        "(o - 1) at most 0.3), by the state they ran in: `shared` when the stalled share is below the expected one / "
        "1.5 (prefills sharing steps), else `spread`. A prediction of such a point gives both states (wattbench/twin/"
        "states.py): the twin's figure stands for the state most of these windows ran in (spread where none), the "
        "other comes from the twin's step model with prefills two to a step (or one), and each carries its share "
        "here. No committed window at 16 streams ran shared (a fast state 14-28% above the spread one has been seen "
        "on H200s outside these bundles, docs/MEASUREMENT.md): its share is 0 here, so the interval does not span it.",
        "",
        *_states_table(table),
        "",
    ]


def _spread_coverage(before: dict[str, Any]) -> str:
    """How often the replaced twin's spread band held, cross-validated by board (before.json)."""
    b = before.get(BY_BOARD) or {}
    parts = [f"{LABEL[f]} {v['inside_band']} of {v['n']}" for f, v in b.items() if "inside_band" in v]
    return "as the replaced twin's band it held, cross-validated by board, for " + ", ".join(parts) if parts else ""


def write_report(final, rows, points, ints, coverage, figures, took_s: float) -> None:
    params, spread = final["params"], final["spread"]
    host, dec = spread["eager_layer_s"], spread["decode_step_ratio"]
    before = _before()
    lines = [*_header(final, points, took_s), "## Fitted on every point of the 8B model not held out", ""]
    lines += ["| part | value | what pins it |", "|---|---:|---|"]
    for (where, name), doc in PARAMS_DOC.items():
        v = params[where].get(name)
        if v is not None:
            lines.append(f"| {where} {name} | {v:.4g} | {doc} |")
    lines += [
        "",
        "## The spread the twin runs at the middle of",
        "",
        f"- the host's launch time per layer of a prefill-carrying step outside CUDA graphs, per window ({host['n']} "
        f"windows of 512-token prompts, 4-32 streams, spread phase): 5th percentile {1e6 * host['p05']:.0f} us, median "
        f"{1e6 * host['p50']:.0f} us, 95th {1e6 * host['p95']:.0f} us (min {1e6 * host['min']:.0f}, max "
        f"{1e6 * host['max']:.0f}); x 32 layers of the 8B model: {32e3 * host['p05']:.1f} / {32e3 * host['p50']:.1f} / "
        f"{32e3 * host['p95']:.1f} ms a step.",
        f"- the decode step, each window against the median of its configuration over every board and repeat "
        f"({dec['n']} windows): 5th percentile {dec['p05']:.3f}, 95th {dec['p95']:.3f} (min {dec['min']:.3f}, max "
        f"{dec['max']:.3f}). Board, host, server start and weights change together from run to run: this spread is "
        "all of them, not the boards'.",
        "",
        "A prediction is the twin at the median launch time and the median decode step. Its interval is not this "
        f"spread ({_spread_coverage(before)}) but the twin's own cross-validated errors (below).",
        "",
        "Per board (host), the windows the launch time comes from:",
        "",
        *_host_table(final, points),
        "",
        *_intervals_section(ints, coverage, figures),
        *_states_section(final["phase_states"]),
        "## Before -> after",
        "",
        "'Before' is the twin this calibration replaced (results/twin/before.json: fitted on the sweep too, its band "
        "the host's and the decode step's spread), scored as it was: cross-validated on the same points, the held-out "
        "model, and the sweep as its predictions were filed before the run (by the twin of that day). 'After' is this "
        "calibration. Goals: tok/s, TPOT p50, W and tok/J within 10%, TTFT p50 within 25%.",
        "",
        *_before_after_table(rows, before),
        "",
        "## Errors by protocol",
        "",
        *errors_table(rows),
        "",
        "### Cross-validation by board (each board's points predicted by a calibration on the other boards)",
        "",
        *summary_table([r for r in rows if r["protocol"] == BY_BOARD], "board", "board"),
        "",
        "### Cross-validation by workload (each workload predicted by a calibration on the others)",
        "",
        *summary_table(
            [{**r, "wl": f"{r['folder']}:{r['workload']}"} for r in rows if r["protocol"] == BY_WORKLOAD],
            "wl",
            "workload",
        ),
        "",
        "### Every point, cross-validated by board (measured / predicted: error, * misses the goal, (outside): "
        "outside its interval; at a point with two phase states, the other state's figure and its share)",
        "",
        *point_table(rows, BY_BOARD),
        "",
        "### The held-out runs (8B, on the held-out list: in no calibration)",
        "",
        *point_table(rows, HELD_OUT_RUNS),
        "",
        "### The held-out model (14.5B, in no calibration)",
        "",
        *point_table(rows, OTHER_MODEL),
        "",
    ]
    REPORT.write_text("\n".join(lines))


def write_coverage(ints: dict[str, Any], coverage: dict[str, Any], figures) -> None:
    COVERAGE.write_text(
        "\n".join(
            [
                "# The twin's prediction intervals: level, coverage, points",
                "",
                "Written by `python -m wattbench.twin` (wattbench/twin/intervals.py; results/twin/README.md says how "
                "they are sized). Cross-validation is not a held-out test: each fold's points are scored against the "
                "interval sized from the other folds' errors; the held-out runs and the held-out model (never fitted "
                "on) against the shipped interval.",
                "",
                *coverage_table(ints, coverage, figures),
                "",
            ]
        )
    )


def write_all(final, rows, points, ints, coverage, figures, took_s: float) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    ROWS.write_text(json.dumps(_round({"source": "emulated vs measured", "rows": rows}), indent=1) + "\n")
    FINAL.write_text(json.dumps(final, indent=1) + "\n")
    PACKAGE_DATA.write_text(json.dumps(package_data(final, rows, ints, coverage), indent=1) + "\n")
    write_coverage(ints, coverage, figures)
    write_report(final, rows, points, ints, coverage, figures, took_s)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))
