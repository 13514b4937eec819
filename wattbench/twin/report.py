"""The calibration's outputs: the emulator's package data (calibration.json) and the report under results/twin/."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from wattbench.twin.evaluate import BY_BOARD, BY_WORKLOAD, GOAL, IN_SAMPLE, LABEL, OTHER_MODEL, summary
from wattbench.twin.measured import OUT, ROOT

PACKAGE_DATA = ROOT / "agent" / "wattbench_agent" / "emulator" / "calibration.json"
REPORT = OUT / "README.md"
ROWS = OUT / "held_out.json"
FINAL = OUT / "calibration.json"  # the final calibration in full: its parameters, spread and the windows they came from
PROTOCOLS = (BY_WORKLOAD, BY_BOARD, OTHER_MODEL, IN_SAMPLE)


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


def package_data(final: dict[str, Any], rows: list[dict[str, Any]], bundles: dict[str, str]) -> dict[str, Any]:
    """What the emulator reads (agent/wattbench_agent/emulator/calibration.py)."""
    params = final["params"]
    held = summary([r for r in rows if r["protocol"] != IN_SAMPLE])
    return _round(
        {
            "_about": "The emulator's calibration on real hardware, written by `python -m wattbench.twin` (wattbench/"
            "twin/) from every committed real-hardware bundle (results/h200-vllm*/): do not edit by hand. profiles: "
            "the vllm-like profile's fitted kernel factors; power: the power coefficients; gpus: per-GPU factors; "
            "spread: the measured window-to-window spread of the host's launch time per layer of a prefill-carrying "
            "step and of the decode step (measured / median of its configuration), which predictions carry as "
            "bands; held_out: the twin's errors on points its calibration never saw (results/twin/README.md).",
            "made_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "bundles": bundles,
            "profiles": {"vllm-like": params["kf"]},
            "power": params["pf"],
            "gpus": {"h200": params["gpu"]},
            "spread": {"vllm-like": final["spread"]},
            "held_out": {
                proto: {
                    f: {k: v[k] for k in ("n", "within_goal", "median_abs_error", "max_abs_error", "inside_band")}
                    for f, v in figs.items()
                }
                for proto, figs in held.items()
            },
        }
    )


def _cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    before = f"{s['before_within_goal']}/{s['before_n']} -> " if s.get("before_n") else ""
    return f"{before}{s['within_goal']}/{s['n']}"


def summary_table(rows: list[dict[str, Any]], by: str, heading: str) -> list[str]:
    s = summary(rows, by)
    lines = [
        f"| {heading} | " + " | ".join(f"{LABEL[f]} (goal {100 * g:.0f}%)" for f, g in GOAL.items()) + " |",
        "|---|" + "---:|" * len(GOAL),
    ]
    for group, figs in s.items():
        lines.append(f"| {group} | " + " | ".join(_cell(figs.get(f)) for f in GOAL) + " |")
    return lines


def errors_table(rows: list[dict[str, Any]]) -> list[str]:
    s = summary(rows, "protocol")
    lines = [
        "| protocol | figure | points | within goal, before -> after | median abs error | largest abs error "
        "| measured inside the band |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for proto in PROTOCOLS:
        for f, v in (s.get(proto) or {}).items():
            lines.append(
                f"| {proto} | {LABEL[f]} | {v['n']} | {_cell(v)} | {100 * v['median_abs_error']:.1f}% "
                f"| {100 * v['max_abs_error']:.1f}% | {v['inside_band']}/{v['n']} |"
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
            band = f" ±{100 * r['band']:.0f}%" if r.get("band") is not None else ""
            before = f" (was {100 * r['before_error']:+.0f}%)" if r.get("before_error") is not None else ""
            miss = "" if r["meets_goal"] else "*"
            cells.append(f"{r['measured']:,.4g} / {r['predicted']:,.4g}{band}: {100 * r['error']:+.0f}%{miss}{before}")
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
    ("gpu", "speed_scale"): "1: no board factor (withdrawn: the decode step is the same on every board)",
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


def write_report(final: dict[str, Any], rows: list[dict[str, Any]], points, took_s: float) -> None:
    params, spread = final["params"], final["spread"]
    host, dec = spread["eager_layer_s"], spread["decode_step_ratio"]
    lines = [
        "# The twin on the step composition: calibration and held-out tests",
        "",
        'Written by `python -m wattbench.twin` (wattbench/twin/; docs/EMULATOR.md, "The step composition") from every '
        f"committed real-hardware bundle (results/h200-vllm*/, {len({p.bundle for p in points})} bundles, "
        f"{len(points)} points, {sum(len(p.repeats) for p in points)} windows); source: emulated (the twin) against "
        f"measured (real vLLM 0.25.0 on H200s). It took {took_s / 60:.0f} min on this machine. The emulator reads the "
        "fitted values and the spread from agent/wattbench_agent/emulator/calibration.json.",
        "",
        "## Fitted on every point of the 8B model",
        "",
        "| part | value | what pins it |",
        "|---|---:|---|",
    ]
    for (where, name), doc in PARAMS_DOC.items():
        v = params[where].get(name)
        if v is not None:
            lines.append(f"| {where} {name} | {v:.4g} | {doc} |")
    lines += [
        "",
        "## The spread a prediction carries",
        "",
        f"- the host's launch time per layer of a prefill-carrying step outside CUDA graphs, per window ({host['n']} "
        f"windows of 512-token prompts, 4-32 streams, spread phase): 5th percentile {1e6 * host['p05']:.0f} us, median "
        f"{1e6 * host['p50']:.0f} us, 95th {1e6 * host['p95']:.0f} us (min {1e6 * host['min']:.0f}, max "
        f"{1e6 * host['max']:.0f}); x 32 layers of the 8B model: {32e3 * host['p05']:.1f} / {32e3 * host['p50']:.1f} / "
        f"{32e3 * host['p95']:.1f} ms a step.",
        f"- the decode step, each window against the median of its configuration over every board and repeat "
        f"({dec['n']} windows): 5th percentile {dec['p05']:.3f}, 95th {dec['p95']:.3f} (min {dec['min']:.3f}, max "
        f"{dec['max']:.3f}): the decode step is the same on every board within a few percent.",
        "",
        "A prediction is the twin at the median launch time and the median decode step; its band is the largest move "
        "of each figure when both sit at their 95th or both at their 5th percentile (two more simulations).",
        "",
        "Per board (host), the windows the launch time comes from:",
        "",
        *_host_table(final, points),
        "",
        "## Held out: within the goal, before -> after",
        "",
        "'Before' is the twin this replaces (a speed and a power factor per board, centred on the typical board): its "
        "own leave-one-workload-out prediction where its procedure made one, else its shipped values (which never saw "
        "those boards). Goal: tok/s, TPOT p50, W and tok/J within 10%, TTFT p50 within 25%.",
        "",
        *errors_table(rows),
        "",
        "### By board (each board's points predicted by a calibration on the other boards)",
        "",
        *summary_table([r for r in rows if r["protocol"] == BY_BOARD], "board", "board"),
        "",
        "### By workload (each workload predicted by a calibration on the others)",
        "",
        *summary_table(
            [{**r, "wl": f"{r['folder']}:{r['workload']}"} for r in rows if r["protocol"] == BY_WORKLOAD],
            "wl",
            "workload",
        ),
        "",
        "### Every point, by board (measured / predicted ± band: error, * misses the goal; was: the replaced twin's "
        "error)",
        "",
        *point_table(rows, BY_BOARD),
        "",
        "### The held-out model (14.5B, in no calibration)",
        "",
        *point_table(rows, OTHER_MODEL),
        "",
    ]
    REPORT.write_text("\n".join(lines))


def write_all(
    final: dict[str, Any], rows: list[dict[str, Any]], points, bundles: dict[str, str], took_s: float
) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    ROWS.write_text(json.dumps(_round({"source": "emulated vs measured", "rows": rows}), indent=1) + "\n")
    FINAL.write_text(json.dumps(final, indent=1) + "\n")
    PACKAGE_DATA.write_text(json.dumps(package_data(final, rows, bundles), indent=1) + "\n")
    write_report(final, rows, points, took_s)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))
