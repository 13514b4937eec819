"""The twin's predictions filed before a run (FOLDER/predictions.json, `wattbench predict --format json`) against
what the GPU then measured (FOLDER's bundle-*.tar.xz, run with PLAN), per figure, with the twin's goals (tok/s, TPOT,
W, tok/J within 10%; TTFT within 25%):

    .venv/bin/python -m benchmarks.filed_predictions results/h200-vllm-sweep plans/h200-vllm-sweep.yaml

writes FOLDER/comparison.json and FOLDER/predicted_vs_measured.png and prints the markdown tables of FOLDER's README.
Measured figures come from the warehouse's own SQL (v_point_figures: the mean over repeats with its 95% t interval on
the log scale; a latency percentile: the mean of each repeat's percentile, no interval where a repeat has too few
requests for it). A point filed but not measured gets no row; it is listed as "not measured".

Every verdict is one of VERDICTS: a filed figure "holds" when its error is within its goal and "fails" otherwise,
whatever the reason it missed. A folder may also hold FOLDER/criteria.json: predictions filed in words
(predictions.md), each quoted verbatim (checked against the filed file) with the checks its numbers make, scored on
each window's figures recomputed from the bundle's own records by the definitions as filed (`bundle_windows`); a
prediction "holds" when every part holds, "fails" when any part fails, and is "not measured" otherwise (a part whose
data were never measured, e.g. a second GPU that never ran)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from wattbench.plan import load_plan, plan_run_fields
from wattbench.twin import evaluate
from wattbench.warehouse import connect, ingest_bundle, set_run_fields
from wattbench_agent.bundle import read_manifest, unpacked

ROOT = Path(__file__).resolve().parents[1]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
VERDICTS = ("holds", "fails", "not measured")
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
    rows, not_measured = [], []
    for p in pred["points"]:
        m = meas.get((p["engine"], p["point"]))
        if m is None:  # not measured (yet): no row, nothing invented, and said
            not_measured.append(f"{p['engine']} {p['point']}")
            continue
        for f, fig in p["figures"].items():
            if f not in m or fig["predicted"] is None:
                if f in GOAL:
                    not_measured.append(f"{p['engine']} {p['point']} {LABEL.get(f, f)}")
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
                    "verdict": "holds" if abs(err) <= GOAL[f] else "fails",
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
        "not_measured": not_measured,
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
        "| engine | point | figure | measured [95% CI] | predicted | error | verdict |",
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
            f"| {'holds' if r['meets_goal'] else 'fails'} |"
        )
    if result.get("not_measured"):
        lines += ["", f"Not measured ({len(result['not_measured'])} filed): " + "; ".join(result["not_measured"]) + "."]
    lines += [
        "",
        "| figure | points | holds (within goal) | inside the predicted band | largest error |",
        "|---|---:|---:|---:|---:|",
    ]
    for f, s in result["summary"].items():
        worst = "" if s["max_abs_error"] is None else f"{100 * s['max_abs_error']:.1f}%"
        lines.append(
            f"| {LABEL[f]} (goal {100 * GOAL[f]:.0f}%) | {s['points']} | {s['within_goal']} | {s['inside_band']} | "
            f"{worst} |"
        )
    return "\n".join(lines)


# --- predictions filed in words: FOLDER/criteria.json -------------------------------------------------------------

STALL_FACTOR = 1.5  # as filed (docs/MEASUREMENT.md, "Step decomposition", 2026-12-04): a stall is a gap > 1.5 d
BUNCHED_RATIO = 1.5  # as filed: a repeat is bunched when f < expected / 1.5


def filed_steps(records: list[dict]) -> dict:
    """d, f and s of one window by the definitions filed with the steps predictions: d the median gap per token
    (wattbench_agent's request_gaps: the exact part of a request's token times, an n-token event n gaps of gap / n),
    f the share of gaps longer than 1.5 d, s their mean length. Kept here, not read from steps.decompose, so that a
    later change of that code does not re-score a prediction filed against these definitions."""
    import numpy as np

    from wattbench_agent.loadgen.steps import request_gaps

    parts = []
    for r in records:
        g, n = request_gaps(r)
        if len(g):
            parts.append(np.repeat(g / n, n))
    if not parts:
        return {"d": None, "f": None, "s": None, "stalls": 0, "stall_ms_sum": 0.0}
    gaps = np.concatenate(parts)
    d = float(np.median(gaps))
    stalls = gaps[gaps > STALL_FACTOR * d]
    return {
        "d": d,
        "f": float(stalls.size / gaps.size),
        "s": float(stalls.mean()) if stalls.size else None,
        "stalls": int(stalls.size),
        "stall_ms_sum": float(stalls.sum()),
    }


def bundle_tables(folder: Path) -> dict[str, list[dict]]:
    """A bundle folder's tables as rows, each request with its token times (chunk_ns, chunk_tokens) in place."""
    import numpy as np

    from wattbench_agent.bundle import CHUNK_FILES, read_rows

    def rows(name: str) -> list[dict]:
        path = next((folder / f"{name}{x}" for x in (".csv", ".jsonl") if (folder / f"{name}{x}").exists()), None)
        return [r for _, r in read_rows(path)] if path else []

    events = {
        c: np.fromfile(folder / f, dtype="<i8" if code == "q" else "<i4") if (folder / f).exists() else None
        for c, (f, code, _) in CHUNK_FILES.items()
    }
    requests = rows("requests")
    for r in requests:
        where = [r.pop("events_at"), r.pop("events_n")] if r.get("events_at") is not None else r.pop("chunks", None)
        if where is not None:
            at, n = where
            r["chunk_ns"] = events["chunk_ns"][at : at + n].tolist()
            r["chunk_tokens"] = events["chunk_tokens"][at : at + n].tolist()
    return {
        "requests": requests,
        "load_runs": rows("load_runs"),
        "deployments": rows("deployments"),
        "gpu_samples": rows("gpu_samples"),
        "energy_windows": rows("energy_windows"),
    }


def _tokens_in(r: dict, start: int, end: int, first_half: bool = False) -> int:
    """Output tokens of request `r` whose events arrived in [start, end] (first_half: before its middle)."""
    times = r.get("chunk_ns") or []
    counts = r.get("chunk_tokens") or []
    if len(counts) != len(times):
        counts = [1] * len(times)
    if first_half:
        return sum(n for t, n in zip(times, counts, strict=True) if start <= t and 2 * t < start + end)
    return sum(n for t, n in zip(times, counts, strict=True) if start <= t <= end)


def bundle_windows(path: Path) -> list[dict]:
    """Every load window of a result bundle (a folder or its .tar.xz), its figures recomputed from the bundle's own
    records (windows_from)."""
    from wattbench_agent.bundle import read_manifest, unpacked

    with unpacked(path) as folder:
        run_id = read_manifest(folder)["run_id"]
        tables = bundle_tables(folder)
    return windows_from(tables, run_id, Path(path).name)


def windows_from(t: dict[str, list[dict]], run_id: str, bundle: str) -> list[dict]:
    """Every load window of a bundle's tables (bundle_tables), its figures recomputed from the records rather than
    read from the summaries the agent stored or the warehouse's views: output tokens whose events arrived in the
    window (and in each half of it) and tok/s, counter energy, W per GPU and tok/J, the TTFT, TPOT and E2E of the
    successful requests sent in the window, the GPU samples' clock-event reasons and SM clock, the engine's CPU
    seconds, the step decomposition as filed (filed_steps) and the phase as filed (bunched when f < expected / 1.5,
    expected = (c - 1) / (o - 1) for a closed loop whose requests all have o output tokens; None otherwise)."""
    deps = {d["deployment_id"]: d for d in t["deployments"]}
    by_point: dict[tuple, list[dict]] = {}
    for r in t["requests"]:
        by_point.setdefault((r.get("deployment_id"), r.get("load_point_id")), []).append(r)
    out = []
    for lr in t["load_runs"]:
        dep = deps.get(lr["deployment_id"], {})
        start, end, window_s = lr.get("window_start_ns"), lr.get("window_end_ns"), lr.get("window_s")
        if start is None or end is None or not window_s:
            continue  # a load run without a window (failed before it): nothing measured to score
        ok = [r for r in by_point.get((lr["deployment_id"], lr["load_point_id"]), []) if r.get("error_kind") is None]
        sent = [r for r in ok if r.get("sent_ns") is not None and start <= r["sent_ns"] <= end]
        tokens = sum(_tokens_in(r, start, end) for r in ok)
        first_half = sum(_tokens_in(r, start, end, first_half=True) for r in ok)
        samples = [
            s for s in t["gpu_samples"] if s.get("deployment_id") == lr["deployment_id"] and start <= s["t_ns"] <= end
        ]
        reasons = [s["clock_events"] for s in samples if s.get("clock_events") is not None]
        clocks = [s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz") is not None]
        energy = lr.get("energy_j")
        lengths = {r.get("completion_tokens") for r in sent}
        steps = filed_steps(sent)
        expected = None
        if lr.get("shape") == "concurrency" and lr.get("concurrency") and len(lengths) == 1 and None not in lengths:
            o = int(next(iter(lengths)))
            expected = min(1.0, (lr["concurrency"] - 1) / (o - 1)) if o > 1 else None
        out.append(
            {
                "bundle": bundle,
                "run_id": run_id,
                "engine": lr["deployment_id"],
                "precision": dep.get("precision"),
                "gpu": (dep.get("gpu_uuids") or [None])[0],
                "host": {k: dep.get(k) for k in ("cpu_model", "cpu_logical", "cpu_mhz", "cpu_max_mhz", "hypervisor")},
                "weights_hash": dep.get("model_weights_hash"),
                "workload": lr["workload"],
                "point": lr.get("point_label"),
                "load_point_id": lr["load_point_id"],
                "repeat": lr.get("repeat"),
                "concurrency": lr.get("concurrency"),
                "window_s": window_s,
                "tokens": tokens,
                "stored_tokens": lr.get("output_tokens_in_window"),
                "tok_s": tokens / window_s,
                "halves": (first_half, tokens - first_half),
                "energy_j": energy,
                "energy_trace_j": lr.get("energy_trace_j"),
                "energy_crosscheck_j": lr.get("energy_crosscheck_j"),
                "idle_w": (dep.get("idle_power_w_before"), dep.get("idle_power_w_after")),
                "idle_power_w": lr.get("idle_power_w"),
                "w": energy / window_s / (dep.get("n_gpus") or 1) if energy else None,
                "tok_j": tokens / energy if energy else None,
                "ttft_ms": [r["ttft_ms"] for r in sent if r.get("ttft_ms") is not None],
                "ttft_sent_s": [(r["sent_ns"] - start) / 1e9 for r in sent if r.get("ttft_ms") is not None],
                "tpot_ms": [r["tpot_ms"] for r in sent if r.get("tpot_ms") is not None],
                "e2e_ms": [r["e2e_ms"] for r in sent if r.get("e2e_ms") is not None],
                "output_lengths": sorted(x for x in lengths if x is not None),
                "throttled_share": _share(reasons, ("power", "thermal", "hw_slowdown")),
                "power_capped_share": _share(reasons, ("power",)),
                "sm_clock_mhz": sum(clocks) / len(clocks) if clocks else None,
                "engine_cores": lr["engine_cpu_s"] / window_s if lr.get("engine_cpu_s") is not None else None,
                "host_busy_cpus": lr.get("host_busy_cpus"),
                **steps,
                "expected": expected,
                # as filed: no phase where every step must carry a prefill (expected 1: as many streams as tokens)
                "bunched": (steps["f"] < expected / BUNCHED_RATIO)
                if expected and expected < 1 and steps["f"] is not None
                else None,
            }
        )
    return out


def _share(reasons: list[str], words: tuple[str, ...]) -> float | None:
    return sum(any(w in r for w in words) for r in reasons) / len(reasons) if reasons else None


def window_flags(plan_path: Path, bundles: list[Path]) -> dict[tuple[str, str], dict]:
    """v_window_flags (host_saturated, gpu_throttled) of every window of `bundles`, keyed by (run_id,
    load_point_id): the warehouse's own flags, which the filed words name."""
    with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "w.duckdb") as con:
        plan, sha = load_plan(plan_path)
        fields = plan_run_fields(plan, plan_path, sha)
        for bundle in bundles:
            with unpacked(bundle) as unpacked_folder:
                ingest_bundle(con, unpacked_folder)
                set_run_fields(con, read_manifest(unpacked_folder)["run_id"], fields)
        rows = con.execute("SELECT run_id, load_point_id, host_saturated, gpu_throttled FROM v_window_flags").fetchall()
    return {(r, lp): {"host_saturated": hs, "gpu_throttled": gt} for r, lp, hs, gt in rows}


def _select(windows: list[dict], where: dict) -> list[dict]:
    """The windows whose fields equal `where`'s values (a list: any of them)."""
    return [w for w in windows if all(w.get(k) in (v if isinstance(v, list) else [v]) for k, v in where.items())]


def _span(values: list[float], unit: str) -> str:
    """min-max of `values` in words: '%' as percentages, else 3 decimals and the unit."""
    if unit == "%":
        lo, hi, unit = f"{100 * min(values):.1f}", f"{100 * max(values):.1f}", "%"
    else:
        lo, hi, unit = f"{min(values):,.3f}", f"{max(values):,.3f}", f" {unit}" if unit else ""
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def _check_one(part: dict, ws: list[dict]) -> tuple[bool | None, str]:
    """One part's check on one GPU's windows: (True: holds, False: fails, None: nothing to score), and what was
    measured, in words."""
    import numpy as np

    kind, fig, unit = part["check"], part.get("figure"), part.get("unit", "")
    sel = _select(ws, part.get("where", {}))
    if not sel:
        return None, "no window"
    if kind == "count":
        n = sum(bool(w.get(part["flag"])) for w in sel)
        return part.get("lo", 0) <= n <= part.get("hi", len(sel)), f"{part['flag']} in {n} of {len(sel)} windows"
    if kind == "two_states":
        return _two_states(part, sel)
    if kind == "corr":
        x, y = [w[part["x"]] for w in sel], [w[part["y"]] for w in sel]
        r = float(np.corrcoef(x, y)[0, 1])
        return r <= part["hi"], f"r({part['x']}, {part['y']}) {r:+.2f} over {len(sel)} windows"
    if kind == "means_within":
        a = np.mean([w[fig] for w in _select(sel, part["a"])])
        b = np.mean([w[fig] for w in _select(sel, part["b"])])
        diff = max(a, b) / min(a, b) - 1
        return diff <= part["hi"], f"{fig} mean {a:.2f} against {b:.2f} {unit} ({100 * diff:.1f}% apart)"
    v = np.array([w[fig] for w in sel], dtype=float)
    what = f"{fig} {_span(list(v), unit)} over {len(v)} windows"
    if kind == "range":
        return bool(((v >= part["lo"]) & (v <= part["hi"])).all()), what
    if kind == "below":
        return bool((v < part["hi"]).all()), what
    if kind == "max_dev_from_mean":
        dev = float(np.max(np.abs(v / v.mean() - 1)))
        return dev <= part["hi"], f"{what}, largest {100 * dev:.2f}% from their mean {v.mean():.3f}"
    if kind == "cv":
        cv = float(v.std(ddof=1) / v.mean())
        return part.get("lo", 0) <= cv <= part.get(
            "hi", float("inf")
        ), f"{fig} CV {100 * cv:.1f}% over {len(v)} windows"
    if kind == "span":
        return float(v.max() - v.min()) <= part["hi"], f"{what} ({100 * (v.max() - v.min()):.1f} points)"
    if kind == "mean_range":
        return part["lo"] <= v.mean() <= part["hi"], f"{fig} mean {v.mean():.2f} {unit} over {len(v)} windows"
    raise ValueError(
        f"criteria.json: check {kind!r} not known; expected one of count, two_states, corr, "
        "means_within, range, below, max_dev_from_mean, cv, span, mean_range"
    )


def _two_states(part: dict, sel: list[dict]) -> tuple[bool, str]:
    """Some repeats bunched and some spread, within one value of part['by'] (e.g. each precision), the bunched
    ones at least tok_s_min_ratio x the spread ones' mean tok/s with their d within d_max_diff."""
    import numpy as np

    said, found = [], False
    for key in sorted({w[part["by"]] for w in sel}):
        g = [w for w in sel if w[part["by"]] == key]
        b, sp = [w for w in g if w["bunched"]], [w for w in g if w["bunched"] is False]
        said.append(f"{key}: {len(b)} of {len(g)} bunched")
        if b and sp:
            ratio = np.mean([w["tok_s"] for w in b]) / np.mean([w["tok_s"] for w in sp])
            dd = abs(np.mean([w["d"] for w in b]) / np.mean([w["d"] for w in sp]) - 1)
            said[-1] += f" (tok/s {ratio:.2f}x the spread ones', d {100 * dd:.1f}% apart)"
            found = found or (ratio >= part["tok_s_min_ratio"] and dd < part["d_max_diff"])
    return found, "; ".join(said)


def _across(part: dict, by_gpu: dict[str, list[dict]]) -> tuple[str, str]:
    """The GPUs' means of part['figure'] within part['hi'] of each other (per part['where']); with
    only_if_host_differs, a gap beyond it fails only where the GPUs' hosts report the same CPU model and clock."""
    import numpy as np

    missing = [g for g in part["gpus"] if not _select(by_gpu.get(g, []), part.get("where", {}))]
    if missing:
        return "not measured", f"{', '.join(missing)} not measured"
    means = {
        g: float(np.mean([w[part["figure"]] for w in _select(by_gpu[g], part.get("where", {}))])) for g in part["gpus"]
    }
    gap = max(means.values()) / min(means.values()) - 1
    what = ", ".join(f"{g} {m:.3f}" for g, m in means.items()) + f" ({100 * gap:.1f}% apart)"
    ok = gap <= part["hi"]
    if not ok and part.get("only_if_host_differs"):
        hosts = {g: (by_gpu[g][0]["host"]["cpu_model"], by_gpu[g][0]["host"]["cpu_max_mhz"]) for g in part["gpus"]}
        ok = len(set(hosts.values())) > 1
        what += "; hosts " + ("differ" if ok else "the same")
    return ("holds" if ok else "fails"), what


def score_part(part: dict, by_gpu: dict[str, list[dict]]) -> dict:
    """One part of a filed prediction over the GPUs it names: 'each' (every GPU must hold), 'any' (one suffices)
    or 'across' (the GPUs compared); a GPU without windows is 'not measured'."""
    mode = part.get("mode", "each")
    if mode == "across":
        verdict, what = _across(part, by_gpu)
        return {"what": part["what"], "verdict": verdict, "measured": what}
    results = {}
    for g in part["gpus"]:
        ok, what = _check_one(part, by_gpu.get(g, []))
        other = by_gpu.get(part.get("if_same_host_as", ""), [])
        if ok is not None and other and by_gpu[g][0]["host"] != other[0]["host"]:
            ok, what = True, f"{what}; the hosts differ, so the filed condition does not apply"
        said = {True: "holds", False: "fails", None: "not measured"}[ok]
        results[g] = (ok, f"{said}, {what}" if ok is not None else said)
    oks = [ok for ok, _ in results.values()]
    if mode == "any":
        verdict = "holds" if any(oks) else ("fails" if None not in oks else "not measured")
    else:
        verdict = "fails" if False in oks else ("not measured" if None in oks else "holds")
    return {
        "what": part["what"],
        "verdict": verdict,
        "measured": "; ".join(f"{g}: {w}" for g, (_, w) in results.items()),
    }


def score_criteria(folder: Path, plan_path: Path) -> list[dict] | None:
    """FOLDER/criteria.json's predictions, each scored (None: the folder files none). The quoted words must be in
    the file they were filed in, so a transcription cannot drift from what was filed."""
    path = folder / "criteria.json"
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    filed_text = " ".join((folder / doc["filed_in"]).read_text().split())
    for pred in doc["predictions"]:
        if " ".join(pred["filed"].split()) not in filed_text:
            raise ValueError(
                f"{path}: {pred['id']}'s quote is not in {folder / doc['filed_in']}; expected the filed words verbatim"
            )
    bundles = {g: [b for pat in pats for b in sorted(folder.glob(pat))] for g, pats in doc["gpus"].items()}
    flags = window_flags(plan_path, [b for bs in bundles.values() for b in bs])
    by_gpu: dict[str, list[dict]] = {}
    for g, bs in bundles.items():
        for b in bs:
            for w in bundle_windows(b):
                w.update(flags.get((w["run_id"], w["load_point_id"]), {}))
                by_gpu.setdefault(g, []).append(w)
    out = []
    for pred in doc["predictions"]:
        parts = [score_part(part, by_gpu) for part in pred["parts"]]
        verdicts = {p["verdict"] for p in parts}
        verdict = "fails" if "fails" in verdicts else ("holds" if verdicts == {"holds"} else "not measured")
        out.append(
            {
                "id": pred["id"],
                "filed": pred["filed"],
                "filed_at": doc.get("filed_at"),
                "parts": parts,
                "verdict": verdict,
            }
        )
    return out


def criteria_markdown(scored: list[dict]) -> str:
    lines = ["| prediction | filed criterion (quoted) | part | measured | verdict |", "|---|---|---|---|---|"]
    for p in scored:
        for i, part in enumerate(p["parts"]):
            head = (f"**{p['id']}: {p['verdict']}**", f'"{p["filed"]}"') if i == 0 else ("", "")
            lines.append(f"| {head[0]} | {head[1]} | {part['what']} | {part['measured']} | {part['verdict']} |")
    return "\n".join(lines)


# The committed filings (folder, the plan its runs were measured with): `make bench` scores each again.
FILINGS = [
    ("results/h200-vllm-sweep", "plans/h200-vllm-sweep.yaml"),
    ("results/h200-vllm-steps", "plans/h200-vllm-steps.yaml"),
    ("results/h200-vllm-unit", "plans/h200-vllm-unit.yaml"),
    ("results/h200-vllm-board", "plans/h200-vllm-board.yaml"),
    ("results/h200-vllm-fp8ckpt", "plans/h200-vllm-fp8ckpt.yaml"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "folder",
        type=Path,
        nargs="?",
        help="holds predictions.json and the bundle-*.tar.xz the run wrote (default: every committed filing, FILINGS)",
    )
    ap.add_argument("plan", type=Path, nargs="?", help="the plan the run was measured with")
    ap.add_argument(
        "--title",
        default="The twin's predictions filed before the run vs measured: vLLM 0.25.0, 1x H200, "
        "Llama-3.1-8B shape (random)",
    )
    args = ap.parse_args(argv)
    if args.folder is None:  # `make bench`: every committed filing scored again from its bundles
        rc = 0
        for folder, plan in FILINGS:
            print(f"== {folder}", flush=True)
            rc |= main([str(ROOT / folder), str(ROOT / plan), "--title", args.title])
        return rc
    if args.plan is None:
        ap.error("a folder needs the plan its run was measured with")
    try:
        result = compare(args.folder, args.plan)
        criteria = score_criteria(args.folder, args.plan)
    except (ValueError, FileNotFoundError) as exc:  # a filing that cannot be scored: one line, what and where
        print(f"filed_predictions: {exc}", file=sys.stderr)
        return 2
    if criteria is not None:
        result["criteria"] = criteria
    (args.folder / "comparison.json").write_text(json.dumps(result, indent=1) + "\n")
    if result["rows"]:
        picture(result, args.folder / "predicted_vs_measured.png", args.title)
    print(markdown(result))
    if criteria is not None:
        print("\n" + criteria_markdown(criteria))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
