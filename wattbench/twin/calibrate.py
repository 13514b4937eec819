"""The calibration: the twin's step composition fitted on measured windows, one part at a time, each on what pins it.

1. The decode step (a step of decode tokens only, replayed from a full CUDA graph; the host's scheduling runs one step
   ahead and is hidden): the H200's share of HBM bandwidth (gpu mem_eff_scale) and online fp8's fixed cost per layer
   (kf fp8_act_quant_layer_s), least squares of log(twin / measured) on every closed-loop window of 32 streams or fewer
   (where the median gap is a decode step), each point weighted once.
2. The GPU's work in a prefill-carrying step: the dense GEMM share (kf gemm_eff, fp8_gemm_scale), on the stall length
   that 2K-token prompts imply (measured.implied_stall_ms): there the GPU's work is longer than any host's launches.
3. The host's launch time of a prefill-carrying step outside CUDA graphs (kf eager_layer_s: seconds per layer): each
   512-token window (fixed lengths, 4-32 streams, spread phase) gives the stall its TPOT implies; where it exceeds the
   twin's GPU time for that step, the step was the host's: S / layers. Its median is shipped; its spread (5th to 95th
   percentile over windows, per window, not per board) is what predictions carry.
4. The API server's latency before intake (kf intake_latency_s), from vLLM's own split of TTFT at one or two streams:
   the client's TTFT less vLLM's scheduled -> first token, less the intake time.
5. The power coefficients (pf k_busy, k_cmp; the H200's gpu mem_power_scale; k_mem stays the ML.ENERGY H100 fit's):
   every training point simulated at its own windows' launch time, the window's W linear in them (simulate's
   power_basis), bounded linear least squares of relative errors, two rounds (capping moves with them); then the
   measured anchor (a dense 8K-token bf16 prefill step at full clock asks for at least 735 W: a matmul loop on this
   H200 was power capped at 686-691 W) raises k_cmp where needed.
6. The decode step's spread: the measured / twin ratio over every window of step 1 (5th to 95th percentile).

No step sees a point of a bundle on the held-out list (results/twin/held_out.txt): fitted_model() drops them, so a
held-out run committed later never enters a calibration, and the calibration records the bundles it was fitted on
(with their sha256) and what the list kept out.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from wattbench.twin import measured
from wattbench.twin.measured import Point
from wattbench.twin.model import BEFORE, Params, run, setup_for

TDP_W = 700.0
ANCHOR_W = 735.0
FITTED_MODEL = "h200-vllm"  # the model the twin is calibrated on (results/h200-vllm/config.json: the 8B shape)
LONG = 1500  # prompts longer than this many tokens: the prefill step is the GPU's
DECODE_MAX_STREAMS = 32


def base() -> Params:
    """Where every calibration starts: the previous twin's values, no host launch time, the typical board gone."""
    return BEFORE.with_(gpu={"speed_scale": 1.0})


def _setups(points: list[Point]):
    cache: dict[tuple, Any] = {}

    def get(p: Point, params: Params):
        key = (p.model, p.precision, tuple(sorted(p.config.items())), repr(params.as_dict()))
        if key not in cache:
            cache[key] = setup_for(p.model, p.precision, p.config, params)
        return cache[key]

    return get


def _mean_output(p: Point) -> float:
    d = p.output_dist
    if d and d.get("kind") == "uniform":
        return (float(d["min"]) + float(d["max"])) / 2
    return float(p.output_tokens)


def decode_step_load(c: int, prompt_tokens: float, mean_output: float):
    """A decode-only step of c streams at their mean context (prompt and half the output)."""
    from wattbench_agent.emulator.perf import StepLoad

    ctx = prompt_tokens + mean_output / 2
    return StepLoad(tokens=c, seqs=c, sampled=c, attn_work=c * (ctx + 1.0), kv_read=c * ctx)


def prefill_step_load(c: int, prompt_tokens: float, mean_output: float, k: int = 1):
    """A step of c streams in which k prompts are prefilled whole while the other c - k streams decode."""
    from wattbench_agent.emulator.perf import StepLoad

    ctx, n = prompt_tokens + mean_output / 2, int(round(prompt_tokens))
    return StepLoad(
        tokens=c - k + k * n,
        seqs=c,
        sampled=c,
        attn_work=(c - k) * (ctx + 1.0) + k * n * (n + 1) / 2,
        kv_read=(c - k) * ctx,
        prefill_tokens=k * n,
    )


def decode_load(p: Point):
    """A decode-only step of the point's streams at their mean context."""
    return decode_step_load(int(p.concurrency), p.prompt_tokens, _mean_output(p))


def stall_load(p: Point):
    """A step of the point's other streams decoding while one prompt is prefilled whole."""
    return prefill_step_load(int(p.concurrency), p.prompt_tokens, _mean_output(p))


def fitted_model(points: list[Point]) -> list[Point]:
    """The points a calibration may fit on: the fitted model's, from bundles not on the held-out list."""
    pats = measured.held_out_patterns()
    return [p for p in points if p.model_size == FITTED_MODEL and not measured.held_out(p.rel, pats)]


def _decode_points(points: list[Point]) -> list[tuple[Point, float]]:
    out = []
    for p in fitted_model(points):
        if p.shape != "concurrency" or not p.concurrency or p.concurrency > DECODE_MAX_STREAMS:
            continue
        ds = [r["decode_step_ms"] for r in p.repeats if r.get("decode_step_ms")]
        if ds:
            out.append((p, statistics.median(ds)))
    return out


def _least_squares(resid, names: list[str], lo: list[float], hi: list[float], x0: list[float]) -> list[float]:
    from scipy.optimize import least_squares

    x0 = [min(h, max(lo_, v)) for v, lo_, h in zip(x0, lo, hi)]
    res = least_squares(resid, x0, bounds=(lo, hi), x_scale=[h - lo_ for lo_, h in zip(lo, hi)], diff_step=1e-3)
    return [float(v) for v in res.x]


def fit_decode(points: list[Point], params: Params) -> Params:
    """Step 1: mem_eff_scale and fp8_act_quant_layer_s on the decode steps."""
    targets = _decode_points(points)
    get = _setups(points)

    def with_x(x) -> Params:
        return params.with_(kf={"fp8_act_quant_layer_s": x[1]}, gpu={"mem_eff_scale": x[0]})

    def resid(x):
        prm = with_x(x)
        return [math.log(get(p, prm).dep.step(decode_load(p)).dt * 1e3 / d) for p, d in targets]

    x = _least_squares(
        resid,
        ["mem_eff_scale", "fp8_act_quant_layer_s"],
        [0.7, 0.0],
        [1.4, 80e-6],
        [params.gpu.get("mem_eff_scale", 1.0), params.kf.get("fp8_act_quant_layer_s", 0.0)],
    )
    return with_x(x)


def _stall_windows(points: list[Point], long: bool) -> list[tuple[Point, float]]:
    out = []
    for p in fitted_model(points):
        if not p.fixed_closed_loop or not 4 <= p.concurrency <= DECODE_MAX_STREAMS:
            continue
        if (p.prompt_tokens > LONG) != long:
            continue
        for r in p.repeats:
            if r.get("implied_stall_ms") and (long or r.get("phase_state") == "spread"):
                out.append((p, float(r["implied_stall_ms"])))
    return out


def fit_prefill(points: list[Point], params: Params) -> Params:
    """Step 2: gemm_eff and fp8_gemm_scale on the stalls of 2K-token prompts (GPU-bound)."""
    targets = _stall_windows(points, long=True)
    if not targets:
        return params
    get = _setups(points)
    no_host = {"eager_layer_s": 0.0}

    def with_x(x) -> Params:
        return params.with_(kf={"gemm_eff": x[0], "fp8_gemm_scale": x[1]})

    def resid(x):
        prm = with_x(x).with_(kf=no_host)
        return [math.log(get(p, prm).dep.step(stall_load(p)).dt * 1e3 / s) for p, s in targets]

    x = _least_squares(
        resid,
        ["gemm_eff", "fp8_gemm_scale"],
        [0.4, 0.4],
        [0.95, 1.0],
        [params.kf.get("gemm_eff", 0.7), params.kf.get("fp8_gemm_scale", 0.7)],
    )
    return with_x(x)


def quantiles(values: list[float]) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    q = np.percentile(v, [5, 25, 50, 75, 95])
    return {
        "p05": float(q[0]),
        "p25": float(q[1]),
        "p50": float(q[2]),
        "p75": float(q[3]),
        "p95": float(q[4]),
        "min": float(v.min()),
        "max": float(v.max()),
        "n": int(v.size),
    }


def host_windows(points: list[Point], params: Params) -> list[dict[str, Any]]:
    """Step 3's windows: each 512-token window's implied stall against the twin's GPU time for that step; where the
    stall is longer, the host's launch time per layer (else the window bounds it from above: `host_bound` False)."""
    get = _setups(points)
    out = []
    for p, s in _stall_windows(points, long=False):
        st = get(p, params.with_(kf={"eager_layer_s": 0.0}))
        gpu_ms = st.dep.step(stall_load(p)).dt * 1e3
        layers = st.dep.model.layers
        out.append(
            {
                "point": p.key,
                "board": p.board,
                "implied_stall_ms": s,
                "gpu_ms": gpu_ms,
                "host_bound": s > gpu_ms,
                "eager_layer_s": max(s, gpu_ms) / 1e3 / layers,
            }
        )
    return out


def fit_intake_latency(points: list[Point], params: Params) -> Params:
    """Step 4: the API server's fixed latency: the measured part of TTFT before scheduling at one or two streams (the
    median over those points), less the intake time (the twin's is uniform 0.5-1.5 x intake_s)."""
    xs = [
        p.figures["to_scheduled_ms"]
        for p in fitted_model(points)
        if p.shape == "concurrency" and p.concurrency and p.concurrency <= 2 and "to_scheduled_ms" in p.figures
    ]
    if not xs:
        return params
    latency = statistics.median(xs) / 1e3 - params.kf.get("intake_s", 0.0)
    return params.with_(kf={"intake_latency_s": min(0.03, max(0.0, latency))})


def point_host(p: Point, windows: list[dict[str, Any]], default: float) -> float:
    """A training point's own launch time per layer: the median of its windows' (host-bound or not), else `default`."""
    own = [w["eager_layer_s"] for w in windows if w["point"] == p.key]
    return statistics.median(own) if own else default


def _power_rows(points: list[Point], params: Params, windows, default_host: float):
    from wattbench_agent.emulator.specs import gpu_spec

    g = gpu_spec("h200")
    idle, up, k_mem = g.idle_w, g.clock_up_w, params.pf.get("k_mem", 0.453)
    a, b = [], []
    for p in points:
        if "counter_w_per_gpu" not in p.figures:
            continue
        r = run(p, params.with_(kf={"eager_layer_s": point_host(p, windows, default_host)}), seeds=(0,))
        for basis in r["power_basis"]:
            win, meas = basis["window_s"], p.figures["counter_w_per_gpu"]
            known = (idle * basis["idle_s"] + basis["capped_w_s"] + (idle + up) * basis["free_s"]) / win
            a.append(
                [
                    TDP_W * basis["free_s"] / win / meas,
                    TDP_W * basis["free_cmp"] / win / meas,
                    TDP_W * k_mem * basis["free_mem"] / win / meas,
                ]
            )
            b.append((meas - known) / meas)
    return np.asarray(a), np.asarray(b)


def anchor_k_cmp(params: Params) -> float:
    """The least k_cmp at which an 8K-token bf16 prefill step of the 8B model at full clock asks for ANCHOR_W."""
    from wattbench_agent.emulator.perf import StepLoad

    st = setup_for("llama-3.1-8b", "bf16", {}, params)
    c = st.dep._step(StepLoad(tokens=8192, seqs=1, sampled=1, attn_work=8192 * 4096.5, prefill_tokens=8192), 1.0)
    k = params.pf.get("k_cmp", 1.0)
    return k + max(0.0, ANCHOR_W - c.power_w) / (TDP_W * c.util_cmp)


def fit_power(points: list[Point], params: Params, windows, default_host: float, rounds: int = 2) -> Params:
    """Step 5 (the module's docstring)."""
    from scipy.optimize import lsq_linear

    train = fitted_model(points)
    for _ in range(rounds):
        a, b = _power_rows(train, params, windows, default_host)
        res = lsq_linear(a, b, bounds=([0.0, 0.5, 0.5], [0.35, 3.0, 2.0]))
        kb, kc, mps = (float(v) for v in res.x)
        params = params.with_(pf={"k_busy": kb, "k_cmp": kc}, gpu={"mem_power_scale": mps})
        need = anchor_k_cmp(params)
        if need > kc:  # the anchor holds: k_cmp at its bound, the others refitted with it
            b2 = b - a[:, 1] * need
            res = lsq_linear(a[:, [0, 2]], b2, bounds=([0.0, 0.5], [0.35, 2.0]))
            params = params.with_(
                pf={"k_busy": float(res.x[0]), "k_cmp": need}, gpu={"mem_power_scale": float(res.x[1])}
            )
    return params


def decode_spread(points: list[Point]) -> dict[str, float]:
    """Step 6: how far a window's decode step lies from the median of every window of the same configuration
    (precision, engine, streams, prompt and output lengths) over every board and repeat: the decode step's own spread,
    not the twin's error (which the held-out tests measure)."""
    groups: dict[tuple, list[float]] = {}
    for p, _d in _decode_points(points):
        key = (p.precision, p.engine, p.concurrency, round(p.prompt_tokens, -1), p.output_tokens, repr(p.output_dist))
        groups.setdefault(key, []).extend(r["decode_step_ms"] for r in p.repeats if r.get("decode_step_ms"))
    ratios = [d / statistics.median(ds) for ds in groups.values() for d in ds]
    return quantiles(ratios)


def calibrate(points: list[Point], log=print) -> dict[str, Any]:
    """The whole calibration on `points` (the fitted model's are used; others ignored): the parameters, the measured
    spread of the host's launch time and of the decode step, and the windows they came from."""
    params = base()
    params = fit_decode(points, params)
    kf, gpu = params.kf, params.gpu
    log(f"  decode: mem_eff_scale {gpu['mem_eff_scale']:.3f}, fp8 {kf['fp8_act_quant_layer_s'] * 1e6:.1f} us/layer")
    params = fit_prefill(points, params)
    log(f"  prefill: gemm_eff {params.kf['gemm_eff']:.3f}, fp8_gemm_scale {params.kf['fp8_gemm_scale']:.3f}")
    windows = host_windows(points, params)
    host = quantiles([w["eager_layer_s"] for w in windows])
    params = params.with_(kf={"eager_layer_s": host["p50"]})
    us = {k: round(host[k] * 1e6) for k in ("p05", "p50", "p95")}
    log(f"  host launch per layer (us): {us} ({host['n']} windows, {sum(w['host_bound'] for w in windows)} host-bound)")
    params = fit_intake_latency(points, params)
    params = fit_power(points, params, windows, host["p50"])
    log(
        f"  power: k_busy {params.pf['k_busy']:.3f}, k_cmp {params.pf['k_cmp']:.3f}, mem_power_scale "
        f"{params.gpu['mem_power_scale']:.3f}"
    )
    speed = decode_spread(points)
    train = fitted_model(points)
    out = {
        "params": params.as_dict(),
        "spread": {"eager_layer_s": host, "decode_step_ratio": speed},
        "fitted_on": {rel: measured.bundle_sha(rel) for rel in sorted({p.rel for p in train})},
        "excluded": measured.excluded(),
        "host_windows": windows,
        "trained_on": sorted(p.key for p in train),
    }
    out["content_sha256"] = content_sha256(out)
    return out


def content_sha256(cal: dict[str, Any]) -> str:
    """What a calibration is: the sha256 of its fitted values, its measured spread and the bundles it was fitted on
    (each with its sha256); the same bundles give the same hash, whatever else lies in results/."""
    from wattbench_agent.emulator.calibration import sha256_of

    return sha256_of({k: cal[k] for k in ("params", "spread", "fitted_on")})
