"""The twin a calibration describes: the emulator's vllm-like profile on the H200 with some of its factors replaced,
run on a measured point as the load generator ran it (simulate() in virtual time).

A calibration is three dicts over the emulator's own values: `kf` (vllm-like KernelFactors fields), `pf`
(PowerFactors) and `gpu` (the H200's GPUSpec factors); calibration.json stores them under profiles / power / gpus.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wattbench.twin.measured import Point, model_path

PROFILE, GPU = "vllm-like", "h200"
SEEDS = (0, 1, 2)  # a prediction: the mean of three seeds (the API server's intake times vary with it)


@dataclass
class Params:
    kf: dict[str, float] = field(default_factory=dict)
    pf: dict[str, float] = field(default_factory=dict)
    gpu: dict[str, float] = field(default_factory=dict)

    def with_(self, kf: dict | None = None, pf: dict | None = None, gpu: dict | None = None) -> Params:
        return Params({**self.kf, **(kf or {})}, {**self.pf, **(pf or {})}, {**self.gpu, **(gpu or {})})

    def as_dict(self) -> dict[str, Any]:
        return {"kf": dict(self.kf), "pf": dict(self.pf), "gpu": dict(self.gpu)}


# The twin before this calibration (emulator 0.3.0 as shipped: fitted by the earlier procedure with a speed and a power
# factor per board, centred on the typical board; no host launch time): the 'before' of every held-out comparison.
BEFORE = Params(
    kf={
        "gemm_eff": 0.707,
        "attn_eff": 0.899,
        "mem_eff": 0.752,
        "fp8_gemm_scale": 0.724,
        "fp8_act_quant_layer_s": 4e-05,
        "fp8_act_quant_bytes": 7.44,
        "intake_s": 0.005,
        "finish_s": 0.0013,
        "intake_latency_s": 0.015,
        "eager_layer_s": 0.0,
    },
    pf={"k_busy": 0.240, "k_mem": 0.453, "k_cmp": 1.081},
    gpu={"mem_eff_scale": 0.932, "mem_power_scale": 1.032, "speed_scale": 0.919},
)


def setup_for(model: str, precision: str, config: dict, params: Params):
    """The emulator's EngineSetup for a model and engine configuration, with the calibration's factors."""
    from wattbench_agent.emulator import setup

    st = setup(PROFILE, model_path(model), GPU, 1, precision, config)
    dep = st.dep
    st.dep = replace(
        dep, kf=replace(dep.kf, **params.kf), pf=replace(dep.pf, **params.pf), gpu=replace(dep.gpu, **params.gpu)
    )
    return st


def workload_of(p: Point, arrivals: list | None = None):
    """The point's traffic as the twin runs it: the measured prompt length, the plan's output lengths, the shape;
    an open-loop repeat's measured send times replayed."""
    from wattbench_agent.emulator import Workload

    out = p.output_dist or p.output_tokens
    n_in = int(round(p.prompt_tokens))
    if arrivals is not None:
        return Workload(shape="trace", arrivals=list(arrivals), input_tokens=n_in, output_tokens=out)
    if p.shape == "concurrency":
        return Workload(concurrency=p.concurrency, input_tokens=n_in, output_tokens=out, ramp_s=p.ramp_s)
    return Workload(shape=p.shape, rate=p.rate, burstiness=p.burstiness or 1.0, input_tokens=n_in, output_tokens=out)


FIGURES = {  # measured figure -> (SimResult attribute, key); the first six are what `wattbench predict` files
    "output_tok_s": ("output_tok_s", None),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_p50_ms": ("tpot_ms", "p50"),
    "counter_w_per_gpu": ("avg_power_w", None),
    "output_tokens_per_j": ("tokens_per_joule", None),
    "mean_sm_clock_mhz": ("extra", "sm_clock_mean_mhz"),
    "prefill_ms": ("extra", "ttft_scheduled_to_first_ms"),
    "to_scheduled_ms": ("extra", "ttft_to_scheduled_ms"),
}
STEPS = ("decode_step_ms", "stalled_gap_fraction", "stall_ms_mean")
PREDICTED = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "counter_w_per_gpu", "output_tokens_per_j")


def sim_value(r, figure: str) -> float | None:
    """A figure of a SimResult, by FIGURES."""
    attr, key = FIGURES[figure]
    v = getattr(r, attr)
    return v.get(key) if key else v


def run(p: Point, params: Params, seeds: tuple[int, ...] = SEEDS, record: bool = False) -> dict[str, Any]:
    """The twin's figures at a point (means over seeds; an open-loop point replays one measured repeat per seed), its
    step decomposition where `record`, and each seed's power basis (simulate's extra['power_basis'])."""
    from wattbench_agent.emulator import simulate

    runs = [(s, workload_of(p)) for s in seeds]
    if p.arrivals:
        runs = [(s, workload_of(p, a)) for s, a in zip(seeds, p.arrivals)]
    acc: dict[str, list[float]] = {}
    bases = []
    for seed, wl in runs:
        st = setup_for(p.model, p.precision, p.config, params)
        r = simulate(
            PROFILE,
            model_path(p.model),
            GPU,
            1,
            p.precision,
            p.config,
            wl,
            duration_s=p.window_s,
            warmup_s=p.warmup_s,
            seed=seed,
            setup_=st,
            record=record,
        )
        for f in FIGURES:
            v = sim_value(r, f)
            if v is not None:
                acc.setdefault(f, []).append(float(v))
        for k in STEPS if record else ():
            v = (r.extra.get("steps") or {}).get(k)
            if v is not None:
                acc.setdefault(k, []).append(float(v))
        bases.append(r.extra["power_basis"])
    out: dict[str, Any] = {f: sum(v) / len(v) for f, v in acc.items()}
    out["power_basis"] = bases
    return out
