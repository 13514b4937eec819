"""The twin's prediction for a plan never measured (`wattbench predict`, pipelines/predict_cli.py): every engine x
point x repeat simulated, each figure with its prediction interval, written as a bundle with source 'predicted' and
filed as a run (the capacity plan and every report can use it, marked as such).

The twin is the built-in emulator run in virtual time (wattbench_agent.emulator.simulate) with the profile that
stands for each engine of the plan (wattbench_agent.emulator.twin), calibrated on real H200 vLLM runs (wattbench/twin/,
the emulator's calibration.json). The figure printed is the twin at the median of the host's launch time and of the
decode step; the interval beside it is the twin's own error as cross-validated on real points (wattbench/twin/
intervals.py: the level, its ends per figure and how often it held are in calibration.json and results/twin/). Where a
closed loop of equal lengths can lock into either phase state, the prediction gives both states with their measured
shares (wattbench/twin/states.py), and the interval spans the other state where its share is at least 1 - level or
unknown. The twin's errors by protocol are printed after the table and filed in the JSON, and every filing records
which calibration made it (its sha256, the bundles it was fitted on, what the held-out list kept out). TensorRT-LLM
rows have no interval (trtllm-like factors are assumptions, never measured); every row says where it leaves the
validated domain (vLLM 0.25.0, Llama-3.1-8B shape, one H200, bf16 and fp8, 512- and 2K-token prompts), where the
interval, sized inside it, is no longer a measured one.

The model the twin runs is the plan's twin_model, else its model: a specs.json name, or a Hugging Face config.json
(a local model folder holding one, or the file); a plan where no engine has a twin is refused and nothing is filed.
"""

from __future__ import annotations

import datetime as dt
import functools
import tempfile
from pathlib import Path
from typing import Any

from wattbench.twin.model import PREDICTED

# where the twin was validated (wattbench/twin/: the calibration and its held-out tests)
VALIDATED = {
    "profile": "vllm-like",
    "model": "llama-3.1-8b",
    "gpu": "h200",
    "tp": 1,
    "precisions": ("bf16", "fp8"),
    # vLLM's --quantization fp8 on a 16-bit checkpoint; a pre-quantised checkpoint (static scales) beside it
    "fp8_quantizations": ("online", "checkpoint"),
    "prompt_tokens": (512, 2049),
}
# the figures filed and printed, the twin's PREDICTED in its order: (v_point_figures metric, the table's label, its
# format)
_SHOWN = {
    "output_tok_s": ("tok/s", "{:,.0f}"),
    "ttft_p50_ms": ("TTFT p50 ms", "{:,.1f}"),
    "ttft_p99_ms": ("TTFT p99 ms", "{:,.1f}"),
    "tpot_p50_ms": ("TPOT p50 ms", "{:,.2f}"),
    "counter_w_per_gpu": ("W/GPU", "{:,.0f}"),
    "output_tokens_per_j": ("tok/J", "{:,.3f}"),
}
FIGURES = [(f, *_SHOWN[f]) for f in PREDICTED]


def held_out_errors() -> dict[str, Any]:
    """The twin's errors on real points its calibration never saw, by protocol and figure (calibration.json):
    cross-validated by board and by workload, and on the held-out runs and model."""
    from wattbench_agent.emulator import calibration

    return calibration.held_out()


def calibration_identity() -> dict[str, Any]:
    """Which calibration the twin runs with (calibration.identity): what every filing records."""
    from wattbench_agent.emulator import calibration

    return calibration.identity()


def point_states(st, load: dict[str, Any], first, level: float) -> dict[str, Any] | None:
    """At a closed loop of equal lengths that can lock into either phase state, both states (states.states) from the
    twin's run `first`: the state it stands for, the other's figures as ratios to it, the shares; else None."""
    from wattbench.twin import states
    from wattbench.twin.model import sim_value
    from wattbench_agent.emulator import calibration
    from wattbench_agent.loadgen import shapes

    fixed = not (load.get("input_tokens_dist") or load.get("output_tokens_dist") or load.get("random_range_ratio"))
    c, o = load.get("concurrency"), int(load["output_tokens"])
    if st.profile != "vllm-like" or not states.lockable(shapes.get(load["shape"]).closed_loop, fixed, c, o):
        return None
    figs = {f: v for f in PREDICTED if (v := sim_value(first, f)) is not None}
    s = states.states(st, int(c), float(load["input_tokens"]), o, figs, calibration.phase_states(st.profile), level)
    other = next(k for k in s["states"] if k != s["simulated"])
    moved = s["states"][other]["figures"]
    return {
        "simulated": s["simulated"],
        "other": other,
        "ratio": {f: moved[f] / figs[f] for f in moved if figs.get(f)},
        "share": {k: v["share"] for k, v in s["states"].items()},
        "prompts_a_step": {k: v["prompts_a_step"] for k, v in s["states"].items()},
        "windows": s["windows"],
        "band_covers_both": s["band_covers_both"],
    }


def _shape(model: str) -> tuple:
    from wattbench_agent.emulator.specs import model_spec

    m = model_spec(model)
    return (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab, m.experts, m.tied_embeddings)


def same_model(model: str) -> bool:
    """Whether the twin model has the validated model's shapes (a config.json of the same architecture counts)."""
    try:
        return _shape(model) == _shape(VALIDATED["model"])
    except ValueError:
        return False


def model_note(model: str) -> str:
    from wattbench_agent.emulator.specs import SpecError, model_spec

    try:
        m = model_spec(model)
    except SpecError as exc:
        return str(exc)
    return f"{m.id}, {m.params / 1e9:.2f}B parameters ({m.source})"


def extrapolation(
    profile: str, model: str, gpu: str, tp: int, precision: str, prompt_tokens: int, quantization: str | None = None
) -> list[str]:
    """Where a configuration leaves the validated domain (empty: inside it); `quantization` is the twin's fp8 mode
    (online | checkpoint)."""
    v = VALIDATED
    out = []
    if profile != v["profile"]:
        out.append("TensorRT-LLM: factors assumed, never measured")
    if not same_model(model):
        out.append(f"model {model}")
    if gpu != v["gpu"]:
        out.append(f"GPU {gpu}")
    if tp != v["tp"]:
        out.append(f"TP {tp}")
    if precision not in v["precisions"]:
        out.append(f"precision {precision}")
    elif precision == "fp8" and quantization and quantization not in v["fp8_quantizations"]:
        out.append(f"fp8 {quantization} (measured: {', '.join(v['fp8_quantizations'])})")
    lo, hi = v["prompt_tokens"]
    if not lo * 0.5 <= prompt_tokens <= hi * 1.5:
        out.append(f"{prompt_tokens}-token prompts")
    return out


def _workload(load: dict[str, Any]):
    from wattbench_agent.emulator import Workload
    from wattbench_agent.loadgen import shapes

    shape = shapes.get(load["shape"])
    # the lengths as the load generator draws them: a distribution of the plan's load_options, else its
    # random_range_ratio around input_tokens / output_tokens
    common = {
        "input_tokens": load.get("input_tokens_dist") or int(load["input_tokens"]),
        "output_tokens": load.get("output_tokens_dist") or int(load["output_tokens"]),
        "random_range_ratio": float(load.get("random_range_ratio") or 0.0),
        "params": {q.name: load[q.name] for q in shape.params if load.get(q.name) is not None},
    }
    if shape.closed_loop:
        return Workload(
            shape=shape.name, concurrency=int(load["concurrency"]), ramp_s=float(load.get("ramp_s") or 0.0), **common
        )
    if shape.ends_by_itself:
        return None  # trace: its requests' own lengths are not in the twin
    # open loop: the load generator's own schedule for the point (the fields its shape reads: rate, burstiness, ...)
    fields = {k: float(load[k]) for k in shape.fields if k != "concurrency" and load.get(k) is not None}
    return Workload(shape=shape.name, **fields, **common)


class NothingToPredict(ValueError):
    """No engine of the plan has a twin: nothing is simulated, nothing filed."""


def twin_model(plan) -> str:
    """What the twin runs for the plan's model: its twin_model (a specs.json name or a config.json, resolved by
    load_plan), else the model itself (a specs.json name, or a local folder holding a config.json)."""
    return plan.twin_model or plan.model


def twins(plan) -> tuple[list[tuple], list[dict[str, Any]]]:
    """[(engine spec, profile, twin config, mapping, setup)] for the engines with a twin, and one note per engine
    without one (why)."""
    from wattbench_agent.emulator import EngineStartupError, setup
    from wattbench_agent.emulator.specs import SpecError
    from wattbench_agent.emulator.twin import NoTwin, twin_engine

    found, skipped = [], []
    for spec, _cfg in plan.engine_configs():
        try:
            profile, config, how = twin_engine(
                spec.engine, spec.precision, spec.options, spec.profile, plan.model, checkpoint=spec.checkpoint
            )
            st = setup(profile, twin_model(plan), plan.gpu, spec.tp, spec.precision, config)
        except (NoTwin, SpecError, EngineStartupError, ValueError) as exc:
            skipped.append({"engine": spec.name, "skipped": str(exc)})
            continue
        found.append((spec, profile, config, how, st))
    return found, skipped


def _simulate(profile, model, gpu, spec, config, wl, load, setup_, seed: int, record: bool = True):
    """One engine entry at one load point through the twin, on `setup_` (the central one or a corner of the spread)."""
    from wattbench_agent.emulator import simulate

    return simulate(
        profile,
        model,
        gpu,
        spec.tp,
        spec.precision,
        config,
        wl,
        duration_s=float(load["duration_s"]),
        warmup_s=float(load["warmup_s"]),
        seed=seed,
        setup_=setup_,
        record=record,
    )


def predict_bundle(plan, out: Path, run_id: str, log=print) -> list[dict[str, Any]]:
    """Simulate every engine x point x repeat of the plan and write a bundle (source 'predicted') to `out`.
    Returns one note per engine (profile, mapping, extrapolation). Raises NothingToPredict (and writes nothing)
    when no engine of the plan has a twin."""
    from wattbench.plan import point_label
    from wattbench_agent.bundle import BundleWriter
    from wattbench_agent.emulator import EMULATOR_VERSION, setup
    from wattbench_agent.emulator.specs import model_spec
    from wattbench_agent.runner import load_seed

    found, notes = twins(plan)
    for n in notes:
        log(f"  {n['engine']}: not predicted: {n['skipped']}")
    if not found:
        raise NothingToPredict(
            f"no engine of plan {plan.name} has a twin ("
            + "; ".join(f"{n['engine']}: {n['skipped']}" for n in notes)
            + "); nothing predicted, nothing filed"
        )
    model = twin_model(plan)
    ident = calibration_identity()
    twin = f"emulator {EMULATOR_VERSION}"
    with BundleWriter(out, run_id, "predicted", plan=plan.name, twin=twin, calibration=ident) as bw:
        for spec, profile, config, how, st in found:
            dep = st.dep
            mid = model_spec(model).id
            deployment = {
                "deployment_id": spec.name,
                "source": "predicted",
                "model": plan.model,
                "engine": spec.engine,
                "config_name": spec.name,
                "precision": spec.precision,
                "tp": spec.tp,
                "gpu_name": dep.gpu.name,
                "n_gpus": spec.tp,
                "target": "twin",
                "engine_version": f"twin {profile} (emulator {EMULATOR_VERSION})",
                "engine_version_source": "twin",
                "version_checked": False,
                "status": "healthy",
                "hbm_used_mib": st.hbm_used_bytes / 2**20 * spec.tp,
                "hbm_total_mib": dep.gpu.hbm_mib * spec.tp,
                "idle_power_w_before": dep.idle_power() * spec.tp,
                "idle_power_w_after": dep.idle_power() * spec.tp,
                "power_limit_w": dep.power_limit_w,
                "telemetry_source": "emulated",
                "config": {
                    "profile": profile,
                    "twin_config": config,
                    "mapping": how,
                    "emulator": st.summary(),
                    "calibration": {k: ident.get(k) for k in ("file", "sha256", "content_sha256", "fitted_on_sha256")},
                },
            }
            bw.write("deployments", [deployment])
            extra: list[str] = []
            per_point: dict[str, dict[str, Any]] = {}
            for repeat in range(1, plan.repeats + 1):
                for workload in plan.workloads:
                    for load in workload.load_specs():
                        wl = _workload(load)
                        label = point_label(load)
                        if wl is None:
                            log(f"  {spec.name} {workload.name}:{label}: shape {load['shape']} is not in the twin")
                            continue
                        extra = extrapolation(
                            profile,
                            model,
                            dep.gpu.id,
                            spec.tp,
                            spec.precision,
                            int(load["input_tokens"]),
                            config.get("quantization"),
                        )

                        at = functools.partial(_simulate, profile, model, plan.gpu, spec, config, wl, load)
                        point_setup = setup(profile, model, plan.gpu, spec.tp, spec.precision, config)
                        # the seed the agent gives this point and repeat: the same arrivals and lengths
                        seed = load_seed(workload.name, label, repeat, load)
                        r = at(point_setup, seed)
                        if repeat == 1:
                            per_point[f"{workload.name}:{label}"] = point_interval(point_setup, load, r)
                        suffix = f"#{repeat}" if plan.repeats > 1 else ""
                        lp = f"{spec.name}:{workload.name}:{label}{suffix}"
                        bw.write("load_runs", [_load_run(spec.name, lp, workload, load, label, repeat, r, dep)])
                        t0 = float(load["warmup_s"])
                        bw.write("requests", _requests(spec.name, lp, r, t0, t0 + float(load["duration_s"])))
            notes.append(
                {
                    "engine": spec.name,
                    "profile": profile,
                    "mapping": how,
                    "extrapolates": extra,
                    "twin_model": mid,
                    **interval_notes(profile, per_point, extra),
                }
            )
    return notes


def point_interval(st, load: dict[str, Any], first) -> dict[str, Any]:
    """One point's interval per figure, as multipliers of the predicted value ([low, high]: the calibration's ends,
    joined to the other phase state's where the band must cover it), and its phase states (point_states)."""
    import math

    from wattbench_agent.emulator import calibration

    ints = calibration.intervals(st.profile)
    info = point_states(st, load, first, ints.get("level", 0.9)) if ints else None
    out: dict[str, Any] = {"range": {}, "states": info}
    for f, e in (ints.get("figures") or {}).items():
        lo, hi = math.exp(e["log_lo"]), math.exp(e["log_hi"])
        r = (info or {}).get("ratio", {}).get(f)
        if info and info["band_covers_both"] and r:
            lo, hi = min(lo, r * lo), max(hi, r * hi)
        out["range"][f] = [lo, hi]
    return out


def interval_notes(profile: str, per_point: dict[str, dict[str, Any]], extra: list[str]) -> dict[str, Any]:
    """An engine's note on its intervals: per point and figure the band (the larger relative distance to either end,
    for readers of a symmetric band) and the interval as multipliers, the level, the phase states, and where the
    interval stops being a measured one (the configuration extrapolates)."""
    from wattbench_agent.emulator import calibration

    ints = calibration.intervals(profile)
    bands = {k: {f: max(1.0 - lo, hi - 1.0) for f, (lo, hi) in v["range"].items()} for k, v in per_point.items()}
    scope = (
        "none: the profile's factors are assumed, never measured"
        if not ints
        else f"{100 * ints['level']:.0f}% prediction interval, sized on the twin's {ints['basis']} (H200, "
        "vLLM 0.25.0, the 8B model)"
        + (f"; this configuration extrapolates ({', '.join(extra)}): not a measured coverage" if extra else "")
    )
    return {
        "bands": bands,
        "intervals": {k: v["range"] for k, v in per_point.items()},
        "level": ints.get("level"),
        "interval_scope": scope,
        "phase_states": {k: v["states"] for k, v in per_point.items() if v["states"]},
    }


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def _load_run(dep_id: str, lp: str, workload, load: dict, label: str, repeat: int, r, dep) -> dict[str, Any]:
    t0, t1 = float(load["warmup_s"]), float(load["warmup_s"]) + float(load["duration_s"])
    return {
        "deployment_id": dep_id,
        "load_point_id": lp,
        "source": "predicted",
        "workload": workload.name,
        "shape": load["shape"],
        "status": "ok",
        "point_label": label,
        "repeat": repeat,
        "api": load.get("api"),
        "concurrency": load.get("concurrency"),
        "rate": load.get("rate"),
        "burstiness": load.get("burstiness"),
        "input_tokens": load["input_tokens"],
        "output_tokens": load["output_tokens"],
        "warmup_s": t0,
        "duration_s": float(load["duration_s"]),
        "window_start_ns": _ns(t0),
        "window_end_ns": _ns(t1),
        "window_s": r.window_s,
        "sent": sum(1 for q in r.extra["requests"] if t0 <= q["sent"] < t1),
        "completed": r.completed,
        "failed": 0,
        "output_tokens_in_window": r.output_tokens,
        "energy_j": r.energy_j,
        "idle_power_w": dep.idle_power() * dep.tp,
        "summary": {
            "source": "predicted",
            "ttft_ms": r.ttft_ms,
            "tpot_ms": r.tpot_ms,
            "itl_ms": r.itl_ms,
            "e2e_ms": r.e2e_ms,
            "output_token_throughput": r.output_tok_s,
            "request_throughput": r.request_throughput,
            "mean_batch": r.mean_batch,
            "power_capped_share": r.power_capped_share,
            "preemptions": r.preemptions,
        },
    }


def _requests(dep_id: str, lp: str, r, t0: float, t1: float) -> list[dict[str, Any]]:
    rows = []
    for q in r.extra["requests"]:
        times = q["tokens_at"]
        first, last = times[0], times[-1]
        n = q["completion_tokens"]
        rows.append(
            {
                "deployment_id": dep_id,
                "load_point_id": lp,
                "request_id": q["id"],
                "source": "predicted",
                "scheduled_ns": _ns(q["sent"]),
                "sent_ns": _ns(q["sent"]),
                "first_token_ns": _ns(first),
                "last_token_ns": _ns(last),
                "ttft_ms": (first - q["sent"]) * 1e3,
                "e2e_ms": (last - q["sent"]) * 1e3,
                "tpot_ms": (last - first) * 1e3 / (n - 1) if n > 1 else None,
                "prompt_tokens": q["prompt_tokens"],
                "completion_tokens": n,
                "token_count_source": "usage",
                "max_tokens": q["max_tokens"],
                "finish_reason": "length",
                "http_status": 200,
                "chunk_ns": [_ns(t) for t in times],
                "chunk_tokens": [1] * len(times),
                "in_window": t0 <= q["sent"] < t1,
            }
        )
    return rows


def predicted_points(con, run_id: str) -> dict[tuple[str, str], dict[str, float | None]]:
    """The twin's figures of a predicted run, by (engine, workload:point)."""
    rows = con.execute(
        "SELECT engine, workload || ':' || point_label AS point, metric, estimate FROM v_point_figures "
        "WHERE run_id = ? AND metric IN (" + ", ".join("?" for _ in FIGURES) + ") ORDER BY engine, workload, "
        "point_label",
        [run_id, *[f for f, _l, _f in FIGURES]],
    ).fetchall()
    by: dict[tuple, dict] = {}
    for engine, point, metric, est in rows:
        by.setdefault((engine, point), {})[metric] = est
    return by


def _note(engine: str, notes: list[dict]) -> dict | None:
    """An engine's note where its profile has intervals (not the TensorRT-LLM-like one: assumed factors)."""
    return next((n for n in notes if n["engine"] == engine and n.get("profile") != "trtllm-like"), None)


def band_of(engine: str, point: str, figure: str, notes: list[dict]) -> float | None:
    """The band of one predicted figure: the larger relative distance from it to either end of its interval; None
    for an engine whose profile has no interval (the TensorRT-LLM-like profile: its factors are assumptions,
    docs/EMULATOR.md)."""
    n = _note(engine, notes)
    return None if n is None else (n.get("bands") or {}).get(point, {}).get(figure)


def range_of(engine: str, point: str, figure: str, notes: list[dict]) -> list[float] | None:
    """The interval of one predicted figure as multipliers of it ([low, high]), None where there is none."""
    n = _note(engine, notes)
    return None if n is None else (n.get("intervals") or {}).get(point, {}).get(figure)


def states_json(engine: str, point: str, figs: dict, notes: list[dict]) -> dict | None:
    """Both phase states of a point that can lock into either: each state's figures and measured share."""
    n = _note(engine, notes)
    info = None if n is None else (n.get("phase_states") or {}).get(point)
    if not info:
        return None
    other = {f: figs[f] * r for f, r in info["ratio"].items() if figs.get(f) is not None}
    return {
        info["simulated"]: {
            "figures": {f: figs.get(f) for f in info["ratio"]},
            "share": info["share"][info["simulated"]],
            "prompts_a_step": info["prompts_a_step"][info["simulated"]],
            "how": "the twin's simulation",
        },
        info["other"]: {
            "figures": other,
            "share": info["share"][info["other"]],
            "prompts_a_step": info["prompts_a_step"][info["other"]],
            "how": "the twin's step model (wattbench/twin/states.py), not validated against a measured window",
        },
        "committed_windows": info["windows"],
        "band_covers_both": info["band_covers_both"],
    }


def points_json(by: dict[tuple[str, str], dict], notes: list[dict]) -> list[dict]:
    """Every predicted figure with its band (a fraction; null where the engine's twin has no interval), the range
    its interval spans and the level; at a point that can lock into either phase state, both states."""
    out = []
    for (engine, point), figs in by.items():
        figures = {}
        n = _note(engine, notes)
        for f, _l, _f in FIGURES:
            v, band, mult = figs.get(f), band_of(engine, point, f, notes), range_of(engine, point, f, notes)
            span = None if v is None or mult is None else [v * mult[0], v * mult[1]]
            figures[f] = {"predicted": v, "band": band, "range": span, "level": (n or {}).get("level")}
        row: dict[str, Any] = {"engine": engine, "point": point, "figures": figures}
        st = states_json(engine, point, figs, notes)
        if st:
            row["phase_states"] = st
        out.append(row)
    return out


def file_prediction(
    plan, plan_path: Path, sha: str, run_id: str, stamp: dt.datetime, db: Any = None, store: bool = True, log=print
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], dict[str, float | None]]]:
    """Predict the plan (predict_bundle) and file it as run `run_id` (status complete) in the warehouse `db`, or,
    with `store` off, in a scratch warehouse that is thrown away. Returns the notes and the predicted points
    (predicted_points). Raises NothingToPredict (nothing filed) and WarehouseError."""
    from wattbench.plan import plan_run_fields
    from wattbench.warehouse import connect, ingest_bundle, set_run_fields

    with tempfile.TemporaryDirectory() as tmp:
        notes = predict_bundle(plan, Path(tmp) / "bundle", run_id, log=log)
        with connect(db if store else Path(tmp) / "predict.duckdb") as con:
            ingest_bundle(con, Path(tmp) / "bundle")
            set_run_fields(
                con,
                run_id,
                {
                    **plan_run_fields(plan, plan_path, sha),
                    "started_at": stamp.replace(tzinfo=None),
                    "finished_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                    "status": "complete",
                },
            )
            return notes, predicted_points(con, run_id)
