"""Small synthetic warehouses for the report tests: hand-made load points written as a result bundle
(wattbench_agent.bundle.BundleWriter) and ingested (wattbench.warehouse.ingest_bundle), so every figure a report
computes can be checked against numbers chosen here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from wattbench.warehouse import connect, ingest_bundle, set_run_fields
from wattbench_agent.bundle import BundleWriter

S = 1_000_000_000  # ns per second
# The between-start prior sql/views.sql gives emulated engines (v_between_start_prior: the emulator's own spread,
# START_SPEED_SD, df 1000): a synthetic run of one server start is widened by it (scope 'prior').
EMULATOR_PRIOR_DF = 1000
T0 = datetime(2026, 1, 1, 12, 0, 0)


@dataclass
class Point:
    """One load point. `ttft_ms`/`tpot_ms` are per-request values for the requests sent inside the window;
    every request carries `output_tokens` tokens; the i-th point's window starts at 10 + 1000 i s."""

    workload: str
    label: str
    ttft_ms: list[float]
    tpot_ms: list[float] | float = 10.0
    shape: str = "concurrency"
    concurrency: int | None = 8
    rate: float | None = None
    window_s: float = 10.0
    output_tokens: int = 128
    input_tokens: int = 512
    energy_j: float | None = 5000.0
    energy_trace_j: float | None = None
    output_tokens_in_window: int | None = None  # default: requests x output_tokens
    errors: list[str] = field(default_factory=list)  # error kinds of extra failed requests
    power_w: list[float] = field(default_factory=lambda: [400.0, 500.0])  # sampled per GPU
    clock_events: list[str | None] = field(default_factory=lambda: ["none", "sw_power_cap"])
    status: str = "ok"
    error_kind: str | None = None
    repeat: int | None = None  # set: the load point id gets "#<repeat>" and the row its point_label and repeat
    phase_state: str | None = None  # the load run's phase state (bunched | spread), as the load generator sets it
    extra: dict[str, Any] = field(default_factory=dict)  # more load_runs columns (a capacity search's probe marks)


@dataclass
class Deployment:
    name: str
    engine: str = "emulator:vllm-like"
    tp: int = 1
    points: list[Point] = field(default_factory=list)
    status: str = "healthy"
    error_kind: str | None = None
    error_text: str | None = None
    startup_s: float | None = 12.5
    build_status: str = "no_build"
    build_s: float | None = None
    hardware_lock: dict | None = None
    idle_w: tuple[float | None, float | None] = (None, None)  # idle power before and after its points
    searches: list[dict[str, Any]] = field(default_factory=list)  # rows of `searches` (deployment_id filled in)


def write_run(
    db: Path,
    tmp: Path,
    run_id: str,
    deployments: list[Deployment],
    *,
    started: datetime | None = None,
    model: str = "m",
    gpu: str = "h100-sxm",
    price: float = 2.0,
    kwh: float = 0.12,
    pue: float = 1.3,
    slo_ttft_ms: float | None = 2000.0,
    slo_tpot_ms: float | None = 200.0,
    source: str = "emulated",
) -> str:
    bundle = tmp / f"bundle-{run_id}"
    builds, deps, loads, reqs, samples, searches = [], [], [], [], [], []
    for d in deployments:
        searches += [{"deployment_id": d.name, **row} for row in d.searches]
        build_id = f"b-{d.name}"
        builds.append(
            {
                "build_id": build_id,
                "model": model,
                "engine": d.engine,
                "config_name": d.name,
                "precision": "fp8",
                "tp": d.tp,
                "gpu_name": gpu,
                "status": d.build_status,
                "build_s": d.build_s,
                "hardware_lock": d.hardware_lock,
            }
        )
        uuids = [f"GPU-{d.name}-{i}" for i in range(d.tp)]
        deps.append(
            {
                "deployment_id": d.name,
                "build_id": build_id,
                "model": model,
                "engine": d.engine,
                "config_name": d.name,
                "precision": "fp8",
                "tp": d.tp,
                "gpu_name": gpu,
                "n_gpus": d.tp,
                "gpu_uuids": uuids,
                "status": d.status,
                "startup_s": d.startup_s,
                "error_kind": d.error_kind,
                "error_text": d.error_text,
                "engine_version": "1.0",
                "idle_power_w_before": d.idle_w[0],
                "idle_power_w_after": d.idle_w[1],
            }
        )
        for idx, p in enumerate(d.points):
            lp = f"{d.name}:{p.workload}:{p.label}" + (f"#{p.repeat}" if p.repeat is not None else "")
            start = (10 + 1000 * idx) * S  # each point its own stretch of time, so samples land in one window
            end = start + int(p.window_s * S)
            n = len(p.ttft_ms)
            tpots = p.tpot_ms if isinstance(p.tpot_ms, list) else [p.tpot_ms] * n
            tokens = p.output_tokens_in_window if p.output_tokens_in_window is not None else n * p.output_tokens
            loads.append(
                {
                    "deployment_id": d.name,
                    "load_point_id": lp,
                    "workload": p.workload,
                    "shape": p.shape,
                    "concurrency": p.concurrency,
                    "rate": p.rate,
                    "input_tokens": p.input_tokens,
                    "output_tokens": p.output_tokens,
                    "window_start_ns": start,
                    "window_end_ns": end,
                    "window_s": p.window_s,
                    "achieved_rate": n / p.window_s,
                    "achieved_concurrency": float(p.concurrency or 4),
                    "sent": n + len(p.errors),
                    "completed": n,
                    "failed": len(p.errors),
                    "output_tokens_in_window": tokens,
                    "energy_j": p.energy_j,
                    "energy_trace_j": p.energy_trace_j,
                    "status": p.status,
                    "error_kind": p.error_kind,
                    "point_label": p.label,
                    "repeat": p.repeat,
                    "phase_state": p.phase_state,
                    # a chosen phase comes with the figures an agent reads it from (else ingest makes them)
                    "prefill_steps": n if p.phase_state else None,
                    "prefills_per_step": {"bunched": 2.0, "spread": 1.0}.get(p.phase_state),
                    **p.extra,
                }
            )
            # sends spread so that every request also completes inside the window: latency figures count requests
            # sent in the window, throughput figures requests completed in it, and here both are the n requests
            longest_ms = max((t + tp * (p.output_tokens - 1) for t, tp in zip(p.ttft_ms, tpots)), default=0.0)
            spread_s = max(p.window_s - longest_ms / 1000 - 1e-3, 0.0)
            for i, (ttft, tpot) in enumerate(zip(p.ttft_ms, tpots)):
                sent = start + int(i * spread_s * S / max(n, 1))
                first = sent + int(ttft * 1e6)
                chunks = [first + int(k * tpot * 1e6) for k in range(p.output_tokens)]
                e2e = ttft + tpot * (p.output_tokens - 1)
                reqs.append(
                    {
                        "deployment_id": d.name,
                        "load_point_id": lp,
                        "request_id": f"{lp}-{i}",
                        "sent_ns": sent,
                        "first_token_ns": first,
                        "last_token_ns": chunks[-1],
                        "ttft_ms": ttft,
                        "tpot_ms": tpot,
                        "e2e_ms": e2e,
                        "prompt_tokens": p.input_tokens,
                        "completion_tokens": p.output_tokens,
                        "max_tokens": p.output_tokens,
                        "chunk_ns": chunks,
                        "chunk_tokens": [1] * len(chunks),
                        "in_window": True,
                        "finish_reason": "length",
                        "http_status": 200,
                    }
                )
            for j, kind in enumerate(p.errors):
                reqs.append(
                    {
                        "deployment_id": d.name,
                        "load_point_id": lp,
                        "request_id": f"{lp}-err{j}",
                        "sent_ns": start,
                        "in_window": True,
                        "error_kind": kind,
                        "http_status": 500,
                    }
                )
            for k, (w, ev) in enumerate(zip(p.power_w, p.clock_events)):
                for g in uuids:
                    samples.append(
                        {
                            "deployment_id": d.name,
                            "gpu_uuid": g,
                            "t_ns": start + (k + 1) * S,
                            "power_w": w,
                            "hbm_used_mib": 70000.0 + k,
                            "clock_events": ev,
                        }
                    )
    with BundleWriter(bundle, run_id=run_id, source=source) as w:
        for table, rows in (
            ("engine_builds", builds),
            ("deployments", deps),
            ("load_runs", loads),
            ("requests", reqs),
            ("gpu_samples", samples),
            ("searches", searches),
        ):
            if rows:
                w.write(table, rows)
    with connect(db) as con:
        ingest_bundle(con, bundle)
        set_run_fields(
            con,
            run_id,
            {
                "source": source,
                "plan_name": "synthetic",
                "started_at": started or T0,
                "status": "complete",
                "gpu_price_per_hour": price,
                "energy_price_per_kwh": kwh,
                "pue": pue,
                "slo_ttft_ms": slo_ttft_ms,
                "slo_tpot_ms": slo_tpot_ms,
                "slo_e2e_ms": None,
            },
        )
    return run_id


def ttfts(n: int, base: float = 100.0, spread: float = 0.0, seed: int = 0) -> list[float]:
    """n TTFTs around `base` ms (uniform +-spread)."""
    rng = np.random.default_rng(seed)
    return list(base + rng.uniform(-spread, spread, n)) if spread else [base] * n


def simple_point(label: str, rps: float, window_s: float = 10.0, ttft: float = 100.0, **kw: Any) -> Point:
    """A load point whose goodput is `rps` (every request meets the SLO unless ttft says otherwise)."""
    n = int(round(rps * window_s))
    return Point(workload=kw.pop("workload", "steady"), label=label, ttft_ms=[ttft] * n, window_s=window_s, **kw)


def started(i: int) -> datetime:
    return T0 + timedelta(hours=i)


def two_engine_sweep(folder: Path) -> Path:
    """The pictures' run (tests/reports/test_pictures.py, benchmarks/plot_stacks.py): two engines, c8/c32/c128 with
    three repeats each plus a gamma point, written as run 'run' into folder/w.duckdb (returned)."""
    deps = []
    for name, speed in (("trtllm-like", 1.1), ("vllm-like", 1.0)):
        pts = []
        for r in (1, 2, 3):
            for c, rps in ((8, 4.0), (32, 9.0), (128, 14.0)):
                pts.append(
                    simple_point(
                        f"c{c}",
                        rps * speed * (1 + 0.02 * r),
                        ttft=20.0 + c / 4,
                        concurrency=c,
                        output_tokens=16,
                        repeat=r,
                        energy_j=2000.0 + 40 * c + 30 * r,
                    )
                )
            pts.append(
                Point(
                    "bursty",
                    "gamma-r6-b0.25",
                    ttft_ms=ttfts(30, 30, 10, seed=r),
                    shape="gamma",
                    concurrency=None,
                    rate=6.0,
                    output_tokens=16,
                    repeat=r,
                    energy_j=1500.0 + 20 * r,
                )
            )
        deps.append(Deployment(name, tp=8, idle_w=(100.0, 120.0), points=pts))
    db = folder / "w.duckdb"
    write_run(db, folder, "run", deps)
    return db


def emulated_interval(values: list[float], scale: str = "log") -> tuple[float, float | None, float | None]:
    """(estimate, lo, hi) of a figure whose repeats are `values`, one server start of an emulated engine, as the
    warehouse gives it (agent/wattbench_agent/intervals.py, the arithmetic of sql/views.sql v_point_figures_live)."""
    from wattbench_agent.emulator.profiles import START_SPEED_SD
    from wattbench_agent.intervals import interval

    iv = interval([list(values)], scale=scale, prior_sd=START_SPEED_SD, prior_df=EMULATOR_PRIOR_DF)
    return iv.estimate, iv.lo, iv.hi
