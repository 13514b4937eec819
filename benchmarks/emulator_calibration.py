"""Calibration of the emulator against public and measured figures (run: python -m benchmarks.emulator_calibration).

Everything is computed with the pure-Python simulate() API (virtual time; a few minutes with the claims'
convergence and the sensitivity runs). Writes results/emulator_calibration.json and results/emulator_calibration.md.
The fitted factors come from the twin's calibration (wattbench/twin/: real H200 vLLM runs, cross-validated and
tested on held-out runs); its results are the "Real hardware" section here. The TensorRT-LLM-like factors are
assumptions (TRT_ASSUMPTIONS, each with its source) and every seed claim is checked against each of them +-20%.

Public figures:
- ML.ENERGY Leaderboard v3.0 (Dec 2025; vLLM 0.11.1, H100 SXM, GPU energy, steady state, Text Conversation task):
  Llama-3.1-8B on 1 GPU and Llama-3.1-70B on 4 GPUs at max batch sizes 8..1024.
- The seed article's claims (shared/000_b67110315c34baba.txt).
Assumption (documented, not fitted per point): ML.ENERGY's Text Conversation workload is modelled as lognormal
input lengths (mean WORKLOAD_INPUT_MEAN tokens) and lognormal output lengths with the published mean of 717 tokens,
run as a closed loop at concurrency = max_num_seqs = batch size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from wattbench_agent.emulator import FACTORS, Workload, setup, simulate
from wattbench_agent.emulator import perf as perf_mod
from wattbench_agent.emulator import profiles as prof_mod

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.25
WORKLOAD_INPUT_MEAN = 600
ML_ENERGY_WORKLOAD = dict(
    input_tokens={"dist": "lognormal", "mean": WORKLOAD_INPUT_MEAN, "sigma": 1.0, "min": 8, "max": 8000},
    output_tokens={"dist": "lognormal", "mean": 717, "sigma": 0.8, "min": 8, "max": 4000},
)
ML_ENERGY_SRC = "ML.ENERGY Leaderboard v3.0, vLLM 0.11.1, H100 SXM, Text Conversation"

# (model, tp, batch) -> public J per output token, total W (all GPUs; None = not published), output tok/s
ML_ENERGY = {
    ("llama-3.1-8b", 1, 8): (0.455, 486, 1070),
    ("llama-3.1-8b", 1, 64): (0.119, 610, 5147),
    ("llama-3.1-8b", 1, 256): (0.077, 691, 9010),
    ("llama-3.1-8b", 1, 512): (0.070, 688, 9806),
    ("llama-3.1-70b", 4, 8): (3.76, None, 470),
    ("llama-3.1-70b", 4, 128): (0.563, None, 3876),
    ("llama-3.1-70b", 4, 1024): (0.373, None, 6827),
}


def run_point(
    model: str, tp: int, batch: int, duration_s: float = 60.0, warmup_s: float = 30.0, seed: int = 0, setup_=None
):
    """One ML.ENERGY point through the twin (setup_: an EngineSetup with other factors, as a fit tries them)."""
    return simulate(
        "vllm-like",
        model,
        "h100-sxm",
        tp,
        "bf16",
        {"max_num_seqs": batch},
        Workload(concurrency=batch, **ML_ENERGY_WORKLOAD),
        duration_s=duration_s,
        warmup_s=warmup_s,
        seed=seed,
        setup_=setup_,
    )


def ml_energy_rows(
    duration_s: float = 60.0, warmup_s: float = 30.0, setup_for=None, independent: bool = False
) -> list[dict[str, Any]]:
    """Every public ML.ENERGY figure against the twin's (the one home of this comparison: the report here and every
    calibration, wattbench/twin/). setup_for(model, tp, batch): the EngineSetup to run (None: the shipped factors).
    independent: leave out J/token where W and tok/s are both published (it is their ratio): 14 numbers, not 18."""
    rows = []
    for (model, tp, batch), (jpt, watts, tps) in ML_ENERGY.items():
        st = setup_for(model, tp, batch) if setup_for else None
        r = run_point(model, tp, batch, duration_s, warmup_s, setup_=st)
        emu = {"J/token": r.j_per_token, "W": r.avg_power_w * tp, "tok/s": r.output_tok_s}
        pub = {"J/token": None if independent and watts is not None else jpt, "W": watts, "tok/s": tps}
        for metric in ("J/token", "W", "tok/s"):
            if pub[metric] is None:
                continue
            err = emu[metric] / pub[metric] - 1.0
            rows.append(
                {
                    "source": ML_ENERGY_SRC,
                    "point": f"{model} {tp}xH100 batch {batch}",
                    "metric": metric,
                    "emulated": emu[metric],
                    "public": pub[metric],
                    "error": err,
                    "diff_pct": 100.0 * err,
                    "within": abs(err) <= TOLERANCE,
                    "detail": {
                        "mean_batch": r.mean_batch,
                        "kv_usage": r.kv_usage_mean,
                        "preemptions": r.preemptions,
                        "power_capped_share": r.power_capped_share,
                        **r.extra,
                    },
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------- seed claims
# Every claim is computed on closed-loop streams ramped in over RAMP_S (as the load generator does; streams started
# together stay in lockstep), at a window doubled until the claim converges (moves < 1 point: 1 percentage point
# for % claims, 0.01 for x ratios), then re-run with three seeds for its spread.
RAMP_S = 2.0
WINDOWS = (20.0, 40.0, 80.0, 160.0, 320.0)
SEEDS = (0, 1, 2)
DEP = ("llama-3-70b", "h100-sxm")
# TensorRT-LLM-like factors: assumptions (no TensorRT-LLM measurement here), each with where it comes from
TRT_ASSUMPTIONS = {
    "gemm_eff": "vLLM-like's fitted share x 1.10 (TRT_RELATIVE): TensorRT-LLM's fused GEMM epilogues and tuned tactics "
    "taken ~10% better; no TensorRT-LLM measurement",
    "attn_eff": "vLLM-like's fitted share x 1.20: fp8 context FMHA (fp8 math with an fp8 KV cache) taken ~20% better "
    "than FlashAttention's bf16 math; no measurement",
    "mem_eff": "= vLLM-like's fitted share (x 1.0): decode GEMMs stream weights with the same class of kernels",
    "layer_overhead_s": "fused kernels, fewer launches per layer than vLLM-like's 2.5 us (ML.ENERGY fit); guessed",
    "allreduce_latency_s": "custom one-/two-shot NVLink all-reduce, as vLLM's",
    "nvlink_eff": "as vLLM's",
    "step_overhead_s": "C++ executor host time per step (hidden by the overlap scheduler); guessed",
    "seq_overhead_s": "C++ batch manager per sequence, against vLLM's Python 3 us; guessed",
    "frontend_event_s": "API server time per SSE event, against vLLM's 30 us; guessed",
    "host_overlap": "the overlap scheduler: TensorRT-LLM docs, on by default in the PyTorch flow",
    "intake_s": "= vLLM-like's (fitted on H200 vLLM): API server intake per request, no TensorRT-LLM figure",
    "finish_s": "= vLLM-like's: API server time per finished request",
    "intake_latency_s": "= vLLM-like's: fixed latency before intake",
    "fp8_act_quant_layer_s": "0 (with fp8_act_quant_bytes 0): TensorRT-LLM fuses fp8 activation quantisation into "
    "the norm and activation kernels; vLLM-like pays its fitted cost a layer-step and 7.44 B an element (fitted on "
    "H200 vLLM online fp8, and a pre-quantised checkpoint ran at the same speed: results/h200-vllm-fp8ckpt); assumed",
    "eager_layer_s": "0: TensorRT engines are launched from C++, so a context step's host launch time is taken as "
    "hidden behind the GPU; vLLM-like's is measured (0.37-0.78 ms a layer over H200 hosts: results/twin); assumed",
}
# assumptions at 0, where +-20% moves nothing: the alternative checked instead (label, knobs)
TRT_ALTERNATIVES = {
    "eager_layer_s": (
        "as vLLM-like's",
        {
            "eager_layer_s": FACTORS["vllm-like"].eager_layer_s,
            "graph_max_tokens": FACTORS["vllm-like"].graph_max_tokens,
        },
    ),
    "fp8_act_quant_layer_s": (
        "as vLLM-like's",
        {
            "fp8_act_quant_layer_s": FACTORS["vllm-like"].fp8_act_quant_layer_s,
            "fp8_act_quant_bytes": FACTORS["vllm-like"].fp8_act_quant_bytes,
        },
    ),
}
SENSITIVITY = 0.20


_SIMS: dict[tuple, Any] = {}


def _sim(
    profile: str,
    tp: int,
    precision: str,
    wl: Workload,
    window_s: float,
    warmup_s: float,
    seed: int = 0,
    trt: dict[str, float] | None = None,
):
    trt = trt if profile == "trtllm-like" else None
    key = (profile, tp, precision, repr(wl), window_s, warmup_s, seed, tuple(sorted((trt or {}).items())))
    if key not in _SIMS:  # the runs a sensitivity row shares with the claim itself are not repeated
        st = setup(profile, DEP[0], DEP[1], tp, precision, None)
        if trt:
            st.dep = replace(st.dep, kf=replace(st.dep.kf, **trt))
        _SIMS[key] = simulate(
            profile,
            DEP[0],
            DEP[1],
            tp,
            precision,
            None,
            wl,
            duration_s=window_s,
            warmup_s=warmup_s,
            seed=seed,
            setup_=st,
        )
    return _SIMS[key]


def _claim_fp8(profile: str, tp: int):
    def value(window_s: float, seed: int = 0, trt: dict | None = None) -> tuple[float, dict]:
        wl = Workload(concurrency=32, input_tokens=128, output_tokens=1024, ramp_s=RAMP_S)
        r16 = _sim(profile, tp, "fp16", wl, window_s, 10, seed, trt)
        r8 = _sim(profile, tp, "fp8", wl, window_s, 10, seed, trt)
        return r8.output_tok_s / r16.output_tok_s, {"fp16_tok_s": r16.output_tok_s, "fp8_tok_s": r8.output_tok_s}

    return value


def _claim_tokj(conc: int):
    def value(window_s: float, seed: int = 0, trt: dict | None = None) -> tuple[float, dict]:
        wl = Workload(concurrency=conc, input_tokens=512, output_tokens=128, ramp_s=RAMP_S)
        t = _sim("trtllm-like", 8, "fp8", wl, window_s, 10, seed, trt)
        v = _sim("vllm-like", 8, "fp8", wl, window_s, 10, seed, None)
        return 100 * (t.tokens_per_joule / v.tokens_per_joule - 1.0), {
            "trtllm_tok_per_j": t.tokens_per_joule,
            "vllm_tok_per_j": v.tokens_per_joule,
            "trtllm_tok_s": t.output_tok_s,
            "vllm_tok_s": v.output_tok_s,
            "trtllm_w_per_gpu": t.avg_power_w,
            "vllm_w_per_gpu": v.avg_power_w,
        }

    return value


def _claim_2k(which: str):
    def value(window_s: float, seed: int = 0, trt: dict | None = None) -> tuple[float, dict]:
        wl = Workload(concurrency=32, input_tokens=2048, output_tokens=256, ramp_s=RAMP_S)
        t = _sim("trtllm-like", 8, "fp8", wl, window_s, 15, seed, trt)
        v = _sim("vllm-like", 8, "fp8", wl, window_s, 15, seed, None)
        detail = {
            "trtllm_ttft_p50_ms": t.ttft_ms["p50"],
            "vllm_ttft_p50_ms": v.ttft_ms["p50"],
            "trtllm_e2e_p50_ms": t.e2e_ms["p50"],
            "vllm_e2e_p50_ms": v.e2e_ms["p50"],
        }
        if which == "ttft":
            return v.ttft_ms["p50"] / t.ttft_ms["p50"], detail
        return 100 * (v.e2e_ms["p50"] / t.e2e_ms["p50"] - 1.0), detail

    return value


# id, claim, unit, expected, pass(value), value function, does it involve trtllm-like factors
CLAIMS = [
    *[
        (
            f"fp8-{p}-{tp}",
            f"fp8 gives 1.8-2.1x the fp16 decode throughput ({p}, Llama-3-70B {tp}xH100, 32 streams 128 in / 1024 out)",
            "x",
            "1.8-2.1",
            lambda v: 1.8 <= v <= 2.1,
            _claim_fp8(p, tp),
            p == "trtllm-like",
        )
        for p in ("trtllm-like", "vllm-like")
        for tp in (4, 8)
    ],
    *[
        (
            f"tokj-{c}",
            "TensorRT-LLM-like gets 10-30% more tokens per joule on a steady workload (Llama-3-70B fp8 "
            f"8xH100, {c} streams 512/128)",
            "%",
            "10-30",
            lambda v: 10.0 <= v <= 30.0,
            _claim_tokj(c),
            True,
        )
        for c in (8, 32, 128)
    ],
    (
        "ttft-2k",
        "32 concurrent 2K-context requests: TensorRT-LLM-like has the lowest TTFT (p50)",
        "x (vllm/trtllm TTFT p50)",
        "> 1",
        lambda v: v > 1.0,
        _claim_2k("ttft"),
        True,
    ),
    (
        "e2e-2k",
        "...and vLLM-like stays within a few percent (<= 5%) on median end-to-end latency",
        "%",
        "0-5",
        lambda v: abs(v) <= 5.0,
        _claim_2k("e2e"),
        True,
    ),
]


def _point(unit: str) -> float:
    return 1.0 if unit == "%" else 0.01


def converge(fn, unit: str) -> tuple[float, float, dict, list[tuple[float, float]]]:
    """Double the window until the value moves less than one point; (value, window, detail, trail)."""
    trail: list[tuple[float, float]] = []
    prev = None
    for w in WINDOWS:
        v, detail = fn(w)
        trail.append((w, v))
        if prev is not None and abs(v - prev) < _point(unit):
            return v, w, detail, trail
        prev = v
    return v, w, detail, trail  # not converged within the longest window: trail says so


def seed_checks(sensitivity: bool = True) -> list[dict[str, Any]]:
    out = []
    for cid, claim, unit, expected, ok, fn, uses_trt in CLAIMS:
        value, window, detail, trail = converge(fn, unit)
        converged = len(trail) > 1 and abs(trail[-1][1] - trail[-2][1]) < _point(unit)
        spread = [value] + [fn(window, seed)[0] for seed in SEEDS[1:]]
        row = {
            "id": cid,
            "claim": claim,
            "value": value,
            "unit": unit,
            "expected": expected,
            "pass": ok(value),
            "window_s": window,
            "converged": converged,
            "trail": trail,
            "spread": [min(spread), max(spread)],
            "seeds": list(SEEDS),
            "detail": detail,
            "depends_on": [],
        }
        if sensitivity and uses_trt:
            sens = {}
            base = FACTORS["trtllm-like"]
            for factor in TRT_ASSUMPTIONS:
                vals = {}
                if factor in TRT_ALTERNATIVES:
                    label, knobs = TRT_ALTERNATIVES[factor]
                    vals[label] = fn(window, 0, knobs)[0]
                else:
                    for sign in (-1, +1):
                        x = getattr(base, factor) * (1 + sign * SENSITIVITY)
                        if factor in ("nvlink_eff", "host_overlap", "mem_eff", "gemm_eff", "attn_eff"):
                            x = min(x, 1.0)
                        vals[f"{'-' if sign < 0 else '+'}{int(SENSITIVITY * 100)}%"] = fn(window, 0, {factor: x})[0]
                if factor == "gemm_eff" and base.fp8_attention:  # the one boolean assumption, with the GEMMs
                    vals["fp8 FMHA off"] = fn(window, 0, {"fp8_attention": False})[0]
                flips = [k for k, v in vals.items() if ok(v) != row["pass"]]
                sens[factor] = {"values": vals, "flips": flips}
                if flips:
                    row["depends_on"].append(factor)
            row["sensitivity"] = sens
        row["verdict"] = (
            "depends on assumption " + ", ".join(row["depends_on"])
            if row["depends_on"]
            else ("holds" if row["pass"] else "does not hold")
        )
        out.append(row)
        print(
            f"  {cid}: {value:.3f} {unit} at {window:.0f} s ({'converged' if converged else 'NOT converged'}), "
            f"seeds {min(spread):.3f}-{max(spread):.3f}: {row['verdict']}",
            file=sys.stderr,
            flush=True,
        )
    return out


# The project's DEFAULT plan (Llama-3-70B, 8xH100 SXM, fp8, the seed's build and serve options)
DEFAULT_PLAN = {
    "model": "llama-3-70b",
    "gpu": "h100-sxm",
    "tp": 8,
    "precision": "fp8",
    "options": {
        "trtllm-like": {"max_batch_size": 128, "max_input_len": 2048, "max_seq_len": 4096},
        "vllm-like": {"max_num_seqs": 256, "gpu_memory_utilization": 0.9, "block_size": 16},
    },
    "points": [
        ("steady c=8", Workload(concurrency=8, input_tokens=512, output_tokens=128, ramp_s=RAMP_S)),
        ("steady c=32", Workload(concurrency=32, input_tokens=512, output_tokens=128, ramp_s=RAMP_S)),
        ("gamma 6 req/s b=0.25", Workload(shape="gamma", rate=6, burstiness=0.25, input_tokens=512, output_tokens=128)),
    ],
}


def default_plan_rows(duration_s: float = 60.0, warmup_s: float = 15.0) -> list[dict[str, Any]]:
    """The default plan's points through simulate(), both profiles: tok/s, TTFT p50, tok/J, TRT/vLLM tok/J."""
    d = DEFAULT_PLAN
    rows = []
    for name, wl in d["points"]:
        res = {
            p: simulate(
                p,
                d["model"],
                d["gpu"],
                d["tp"],
                d["precision"],
                d["options"][p],
                wl,
                duration_s=duration_s,
                warmup_s=warmup_s,
            )
            for p in ("trtllm-like", "vllm-like")
        }
        row: dict[str, Any] = {
            "point": name,
            "workload": {
                "shape": wl.shape,
                "concurrency": wl.concurrency,
                "rate": wl.rate,
                "burstiness": wl.burstiness,
                "input_tokens": wl.input_tokens,
                "output_tokens": wl.output_tokens,
            },
        }
        for p, r in res.items():
            row[p] = {
                "tok_s": r.output_tok_s,
                "ttft_p50_ms": r.ttft_ms["p50"],
                "e2e_p50_ms": r.e2e_ms["p50"],
                "tok_per_j": r.tokens_per_joule,
                "w_per_gpu": r.avg_power_w,
            }
        row["trt_over_vllm_tok_per_j"] = res["trtllm-like"].tokens_per_joule / res["vllm-like"].tokens_per_joule
        rows.append(row)
    return rows


def real_hardware_md() -> list[str]:
    """The real-hardware section, from the twin's calibration (wattbench/twin/: results/twin/cross_validation.json)."""
    from wattbench.twin import report

    if not report.ROWS.exists():
        missing = "(results/twin/cross_validation.json missing: run python -m wattbench.twin)"
        return ["## Real hardware", "", missing, ""]
    rows = json.loads(report.ROWS.read_text())["rows"]
    return [
        "## Real hardware (emulated vs measured: cross-validated, held-out runs, held-out model)",
        "",
        "Measured (source measured): real vLLM 0.25.0 on H200s, the committed bundles of results/h200-vllm*/. "
        'Predicted (source emulated): the twin on the step composition (docs/EMULATOR.md, "The step composition"), '
        "calibrated by `python -m wattbench.twin` on the bundles not on results/twin/held_out.txt and tested on points "
        "each calibration never saw: cross-validated by board and by workload, and on the held-out runs (the sweep) "
        "and the held-out model (14.5B), which no calibration fits on. Goal: tok/s, TPOT p50, W, tok/J within 10%, "
        "TTFT p50 within 25%; inside: the measured value inside the 90% prediction interval (sized without that "
        "point's fold). Every point and the calibration itself: results/twin/README.md.",
        "",
        *report.errors_table(rows),
        "",
    ]


def render_md(
    rows: list[dict[str, Any]], checks: list[dict[str, Any]], plan: list[dict[str, Any]] | None = None
) -> str:
    def fmt(x: float) -> str:
        return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.0f}"

    lines = [
        "# Emulator calibration (source: emulated vs public and measured figures)",
        "",
        "## Public figures (ML.ENERGY, H100)",
        "",
        f"Workload assumption for ML.ENERGY points: lognormal input (mean {WORKLOAD_INPUT_MEAN} tokens), "
        "lognormal output (mean 717 tokens, as published), closed loop at concurrency = max_num_seqs. "
        f"Tolerance +-{int(TOLERANCE * 100)}%. These figures are in every fit (never held out).",
        "",
        "| point | metric | emulated | public | diff | within +-25% |",
        "|---|---|---:|---:|---:|:---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['point']} | {r['metric']} | {fmt(r['emulated'])} | {fmt(r['public'])} | "
            f"{r['diff_pct']:+.1f}% | {'yes' if r['within'] else 'NO'} |"
        )
    lines += [""] + real_hardware_md()
    lines += [
        "## Seed claims",
        "",
        f"Closed-loop streams ramped in over {RAMP_S:g} s; each claim's window doubled from "
        f"{WINDOWS[0]:g} s until it moves < 1 point (1 percentage point, or 0.01 for x ratios); spread = min-max "
        f"over seeds {', '.join(map(str, SEEDS))} at that window. A claim that changes verdict when one "
        f"TensorRT-LLM-like assumption moves +-{int(SENSITIVITY * 100)}% is reported as depending on it.",
        "",
        "| seed claim | emulated | spread | window | expected | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for c in checks:
        conv = "" if c["converged"] else " (not converged)"
        lines.append(
            f"| {c['claim']} | {c['value']:.2f} {c['unit']} | {c['spread'][0]:.2f}-{c['spread'][1]:.2f} | "
            f"{c['window_s']:.0f} s{conv} | {c['expected']} | {c['verdict']} |"
        )
    sens = [c for c in checks if c.get("sensitivity")]
    if sens:
        factors = list(TRT_ASSUMPTIONS)
        lines += [
            "",
            f"Sensitivity: each claim at -{int(SENSITIVITY * 100)}% / +{int(SENSITIVITY * 100)}% of one "
            "TensorRT-LLM-like assumption (the others as shipped); **bold** = the verdict flips.",
            "",
            "| claim | " + " | ".join(factors) + " |",
            "|---|" + "---:|" * len(factors),
        ]
        for c in sens:
            cells = []
            for f in factors:
                x = c["sensitivity"][f]
                cells.append(
                    " / ".join(f"**{v:.2f}**" if k in x["flips"] else f"{v:.2f}" for k, v in x["values"].items())
                )
            lines.append(f"| {c['id']} ({c['unit']}) | " + " | ".join(cells) + " |")
        lines += [
            "",
            "(gemm_eff column: -20% / +20% / fp8 FMHA off; "
            + "; ".join(f"{k} column: {label}" for k, (label, _) in TRT_ALTERNATIVES.items())
            + ".) The TensorRT-LLM-like factors are assumptions, each with its source:",
            "",
        ]
        trt = FACTORS["trtllm-like"]
        lines += [f"- {k} = {getattr(trt, k):.4g}: {v}" for k, v in TRT_ASSUMPTIONS.items()]
    if plan:
        d = DEFAULT_PLAN
        lines += [
            "",
            "## Default plan",
            "",
            f"{d['model']} on {d['tp']}x{d['gpu']} at {d['precision']}; trtllm-like "
            f"{d['options']['trtllm-like']}, vllm-like {d['options']['vllm-like']}; chat 512 in / 128 out, "
            f"closed-loop streams ramped over {RAMP_S:g} s.",
            "",
            "| point | profile | tok/s | TTFT p50 ms | E2E p50 ms | W/GPU | tok/J | TRT/vLLM tok/J |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in plan:
            for p in ("trtllm-like", "vllm-like"):
                x = r[p]
                ratio = f"{r['trt_over_vllm_tok_per_j']:.3f}" if p == "trtllm-like" else ""
                lines.append(
                    f"| {r['point']} | {p} | {x['tok_s']:,.0f} | {x['ttft_p50_ms']:,.1f} | "
                    f"{x['e2e_p50_ms']:,.0f} | {x['w_per_gpu']:.0f} | {x['tok_per_j']:.3f} | {ratio} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.emulator_calibration")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--no-sensitivity", action="store_true", help="skip the +-20% sensitivity runs")
    ap.add_argument("--render", action="store_true", help="re-write the markdown from the stored JSON (no runs)")
    args = ap.parse_args(argv)
    if args.render:
        stored = json.loads((Path(args.out) / "emulator_calibration.json").read_text())
        md = render_md(stored["rows"], stored["seed_checks"], stored["default_plan"])
        (Path(args.out) / "emulator_calibration.md").write_text(md)
        print(md)
        return 0
    t0 = time.time()
    rows = ml_energy_rows()
    checks = seed_checks(sensitivity=not args.no_sensitivity)
    plan = default_plan_rows()
    md = render_md(rows, checks, plan)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    factors = {p: vars(f) for p, f in prof_mod.FACTORS.items()}
    (out / "emulator_calibration.json").write_text(
        json.dumps(
            {
                "source": "emulated",
                "tolerance": TOLERANCE,
                "workload_assumption": ML_ENERGY_WORKLOAD,
                "kernel_factors": factors,
                "power_factors": vars(perf_mod.POWER),
                "trtllm_assumptions": TRT_ASSUMPTIONS,
                "rows": rows,
                "seed_checks": checks,
                "default_plan": plan,
                "all_within": all(r["within"] for r in rows),
                "all_claims_converged": all(c["converged"] for c in checks),
                "runtime_s": time.time() - t0,
            },
            indent=2,
        )
    )
    (out / "emulator_calibration.md").write_text(md)
    print(md)
    print(f"wrote {out / 'emulator_calibration.json'} and {out / 'emulator_calibration.md'} ({time.time() - t0:.1f} s)")
    # misses (a public figure outside the tolerance, a claim that did not converge) are findings: reported here and
    # in the JSON, never a reason to stop `make bench`; a claim that does not hold is likewise a finding
    misses = [f"{r['point']} {r['metric']} {r['diff_pct']:+.1f}% (outside +-{int(TOLERANCE * 100)}%)" for r in rows]
    misses = [m for m, r in zip(misses, rows) if not r["within"]]
    misses += [f"claim {c['id']} not converged at {c['window_s']:.0f} s" for c in checks if not c["converged"]]
    print("misses: " + ("; ".join(misses) if misses else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
