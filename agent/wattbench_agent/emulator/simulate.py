"""Pure-Python use of the emulator, without a server: run the same schedulers and step model in virtual time.

from wattbench_agent.emulator import simulate, Workload
r = simulate("trtllm-like", "llama-3-70b", "h200", tp=4, precision="fp8",
             workload=Workload(shape="poisson", rate=5, input_tokens=2000, output_tokens=300), duration_s=120)
r.output_tok_s, r.ttft_ms["p99"], r.j_per_token, r.avg_power_w
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from wattbench_agent.emulator.engine import Request, Scheduler
from wattbench_agent.emulator.perf import StepCost, StepLoad
from wattbench_agent.emulator.profiles import EngineSetup, setup
from wattbench_agent.loadgen import shapes
from wattbench_agent.loadgen.steps import decompose
from wattbench_agent.loadgen.workload import range_ratio_dist, sample_lengths

LengthSpec = int | Sequence[int] | dict


@dataclass
class Workload:
    """Traffic: any load shape of the load generator's registry (wattbench_agent/loadgen/shapes/): fixed
    concurrency (closed loop), or open-loop Poisson / gamma / surge arrivals drawn exactly as the load generator
    draws them for the same seed, or a trace.

    input_tokens / output_tokens: an int, a list of ints (drawn uniformly), a load generator length distribution
    ({"kind": "uniform", "min": a, "max": b}, ...: loadgen/workload.sample_lengths), or
    {"dist": "lognormal", "mean": m, "sigma": s, "min": a, "max": b}.
    random_range_ratio: where the lengths are ints, each request's drawn as vllm bench serve's --random-range-ratio
    (uniform over [floor(L(1 - r)), ceil(L(1 + r))]), as the load generator draws them.
    shared_prefix_tokens: that many leading prompt tokens are identical in every request (prefix caching).
    ramp_s: closed loop only: stream k of N starts at k * ramp_s / N (as wattbench's load generator ramps), not
    all at t = 0.
    arrivals: shape "trace" only: the send times (s from the start) to replay, e.g. a measured run's.
    """

    shape: str = "concurrency"  # a registered load shape: concurrency | poisson | gamma | surge | trace | ...
    concurrency: int = 8
    rate: float | None = None  # requests/s for the open-loop shapes
    # gamma's and surge's own parameters (shapes.Param) as fields too, for the callers that name them (the twin's
    # calibration, wattbench/twin/model.py); `params` (what predict passes) wins where both say one
    burstiness: float = 1.0  # gamma shape (1 = Poisson; < 1 burstier), as in `vllm bench serve`
    surge_factor: float = 1.0  # surge: rate x surge_factor from surge_start_s for surge_duration_s
    surge_start_s: float = 0.0
    surge_duration_s: float = 0.0
    input_tokens: LengthSpec = 512
    output_tokens: LengthSpec = 128
    shared_prefix_tokens: int = 0
    ramp_s: float = 0.0
    arrivals: Sequence[float] | None = None
    random_range_ratio: float = 0.0
    params: dict = field(default_factory=dict)  # the shape's own parameters (shapes.Param), as LoadSpec.params


def _draw(spec: LengthSpec, rng: random.Random, ratio: float = 0.0) -> int:
    if isinstance(spec, int):
        if not ratio:
            return spec
        spec = range_ratio_dist(spec, ratio)
    if isinstance(spec, dict) and "kind" in spec:  # the load generator's own distributions
        return int(sample_lengths(spec, 1, 1, np.random.default_rng(rng.getrandbits(32)))[0])
    if isinstance(spec, dict):
        mean, sigma = float(spec["mean"]), float(spec.get("sigma", 0.8))
        mu = math.log(mean) - sigma * sigma / 2
        v = int(round(rng.lognormvariate(mu, sigma)))
        return max(int(spec.get("min", 1)), min(int(spec.get("max", 10**9)), v))
    return int(rng.choice(list(spec)))


def _loadgen_lengths(wl: Workload, seed: int, horizon: float, n_arrivals: int):
    """Where the lengths are the load generator's kind (an int with a random_range_ratio, or its length
    distributions), the load generator's own Workload for the same seed, sized as it sizes it for one worker (the
    arrivals of an open loop, else 2 x streams x the horizon + streams): request i gets the i-th request's lengths
    the load generator draws. None for the twin's own length specs (lists, the lognormal dict)."""
    from wattbench_agent.loadgen.spec import LoadSpec
    from wattbench_agent.loadgen.workload import Workload as Lengths

    def ok(spec) -> bool:
        return isinstance(spec, int) or (isinstance(spec, dict) and "kind" in spec)

    spread = wl.random_range_ratio or any(isinstance(s, dict) for s in (wl.input_tokens, wl.output_tokens))
    if not (spread and ok(wl.input_tokens) and ok(wl.output_tokens)):
        return None
    closed = shapes.get(wl.shape).closed_loop
    n = int(wl.concurrency * max(horizon, 1.0) * 2) + wl.concurrency if closed else n_arrivals
    spec = LoadSpec(
        input_tokens=wl.input_tokens if isinstance(wl.input_tokens, int) else 128,
        output_tokens=wl.output_tokens if isinstance(wl.output_tokens, int) else 128,
        input_tokens_dist=wl.input_tokens if isinstance(wl.input_tokens, dict) else None,
        output_tokens_dist=wl.output_tokens if isinstance(wl.output_tokens, dict) else None,
        random_range_ratio=wl.random_range_ratio,
        seed=seed,
    )
    return Lengths(spec, n_hint=max(n, 1))


def _pct(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    s = sorted(xs)

    def q(p: float) -> float:
        k = (len(s) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "mean": sum(s) / len(s)}


@dataclass
class SimResult:
    profile: str
    model: str
    gpu: str
    tp: int
    precision: str
    workload: dict[str, Any]
    window_s: float
    output_tokens: int  # generated inside the window
    output_tok_s: float
    request_throughput: float  # completions/s inside the window
    completed: int
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]  # per SSE event
    energy_j: float  # all GPUs, window
    avg_power_w: float  # per GPU, window
    j_per_token: float | None
    tokens_per_joule: float | None
    mean_batch: float  # sequences per step, time-weighted
    kv_usage_mean: float
    preemptions: int
    prefix_hit_rate: float | None
    tokens_per_event: float  # SSE coalescing
    power_capped_share: float  # share of window time at the power limit
    steps: int
    kv_tokens: int
    source: str = "emulated"
    extra: dict[str, Any] = field(default_factory=dict)


def step_time(
    profile: str,
    model: str,
    gpu: str,
    tp: int = 1,
    precision: str = "bf16",
    *,
    batch: int = 1,
    context: int = 512,
    prefill_tokens: int = 0,
    prefill_context: int = 0,
    config: dict[str, Any] | None = None,
) -> StepCost:
    """Cost of one iteration: `batch` decoding sequences at `context` tokens, plus one prefill chunk of
    `prefill_tokens` tokens after `prefill_context` cached ones."""
    st = setup(profile, model, gpu, tp, precision, config)
    ld = StepLoad(
        tokens=batch + prefill_tokens,
        seqs=batch + (1 if prefill_tokens else 0),
        sampled=batch + (1 if prefill_tokens else 0),
        attn_work=batch * (context + 1.0) + prefill_tokens * (prefill_context + (prefill_tokens + 1) / 2),
        kv_read=batch * context + prefill_context,
        prefill_tokens=prefill_tokens,
    )
    return st.dep.step(ld)


class _Run:
    """One simulated load point: the requests it makes, what a load generator and an energy counter record of them
    in the window [t0, t1], and the loop that advances the engine in virtual time (simulate() below)."""

    def __init__(self, wl: Workload, st: EngineSetup, seed: int, t0: float, t1: float, record: bool):
        self.wl, self.st, self.dep = wl, st, st.dep
        self.sched = Scheduler(st, seed)
        self.rng = random.Random(seed)
        self.t0, self.t1, self.record = t0, t1, record
        self.shape = shapes.get(wl.shape)  # the load generator's own shape: the same schedule for the same seed
        point = {**vars(wl), **wl.params}  # the fields as the shape reads them (LoadSpec.point)
        problem = self.shape.params_problem(wl.params) or self.shape.check(point)
        if problem:
            raise ValueError(problem)
        self.arrivals = self.shape.twin_arrivals(point, t1, seed)
        self.lengths = _loadgen_lengths(wl, seed, t1, len(self.arrivals))
        self.prefix_blocks = wl.shared_prefix_tokens // self.sched.bs
        self.made = 0
        self.now = 0.0
        # TTFT's two parts: send -> scheduled, scheduled -> first token (vLLM's "prefill")
        self.lat: dict[str, list[float]] = {k: [] for k in ("ttft", "to_sched", "sched_to_first", "tpot", "e2e")}
        self.itl_w: list[tuple[float, int]] = []
        self.records: list[dict[str, Any]] = []
        self.stats = dict.fromkeys(
            (
                "tokens",
                "completed",
                "energy",
                "batch_time",
                "kv_time",
                "capped",
                "events",
                "ev_tokens",
                "busy",
                "umem",
                "ucmp",
                "clk_busy",
                "run_time",
                "capped_w_s",
                "free_s",
                "free_cmp",
                "free_mem",
            ),
            0.0,
        )

    def make(self, arrival: float) -> Request:
        """A new request sent at `arrival`, its lengths drawn as the load generator draws them."""
        wl, sched = self.wl, self.sched
        self.made += 1
        if self.lengths is not None:  # the load generator's own draws for this seed, request by request
            pl, ol = self.lengths.lengths(self.made - 1)
        else:
            pl = max(1, _draw(wl.input_tokens, self.rng, wl.random_range_ratio))
            ol = max(1, _draw(wl.output_tokens, self.rng, wl.random_range_ratio))
        hashes: list[int] = []
        if sched.prefix_caching:
            nfull = pl // sched.bs
            hashes = [hash(("shared", i)) if i < self.prefix_blocks else hash((self.made, i)) for i in range(nfull)]
        target, _trunc, err = sched.validate(pl, ol)
        r = Request(f"sim-{self.made}", pl, ol, arrival, hashes, meta=[] if self.record else None)
        r.target = 0 if err else target
        if err:
            r.finish_reason = "error"
        return r

    def emit(self, r: Request, n: int, done: bool) -> None:
        """A token of `r` streamed at the current time (the scheduler's callback)."""
        t, t0, t1, lat = self.now, self.t0, self.t1, self.lat
        if self.record:
            r.meta.append(t)
            if done:
                self.records.append(
                    {
                        "id": r.rid,
                        "sent": r.arrival,
                        "tokens_at": r.meta,
                        "prompt_tokens": r.prompt_len,
                        "completion_tokens": r.generated,
                        "max_tokens": r.max_tokens,
                    }
                )
        if r.generated == 1 and r.arrival >= t0:
            lat["ttft"].append((t - r.arrival) * 1e3)
            if r.sched_t is not None:
                lat["to_sched"].append((r.sched_t - r.arrival) * 1e3)
                lat["sched_to_first"].append((t - r.sched_t) * 1e3)
        if t0 <= t <= t1:
            self.stats["tokens"] += n
        if done:
            if t0 <= t <= t1:
                self.stats["completed"] += 1
            if r.arrival >= t0:
                lat["e2e"].append((t - r.arrival) * 1e3)
                if r.generated > 1:
                    lat["tpot"].append((t - r.first_token_t) * 1e3 / (r.generated - 1))
            if self.shape.closed_loop and t < t1:
                self.sched.submit(self.make(t), t)

    def overlap(self, a: float, b: float) -> float:
        return max(0.0, min(b, self.t1) - max(a, self.t0))

    def account(self, t: float, c: StepCost, load: StepLoad) -> None:
        """What the window sees of one step from t to t + c.dt: energy, batch, KV use, clocks, SSE events."""
        ov = self.overlap(t, t + c.dt)
        if ov <= 0:
            return
        st, sched = self.stats, self.sched
        st["energy"] += c.power_w * self.dep.tp * ov
        st["batch_time"] += load.seqs * ov
        st["kv_time"] += sched.kv_usage() * ov
        st["run_time"] += ov
        if c.reasons & 0x4:
            st["capped"] += ov
            st["capped_w_s"] += c.power_w * ov
        else:  # what the power model's coefficients multiply in an uncapped step (power_basis)
            pf = self.dep.pf
            st["free_s"] += ov
            st["free_cmp"] += c.util_cmp * c.clk ** (pf.clk_exp - 1.0) * ov
            st["free_mem"] += c.util_mem * ov
        st["busy"] += c.util_gpu * ov
        st["umem"] += c.util_mem * ov
        st["ucmp"] += c.util_cmp * ov
        st["clk_busy"] += c.clk * ov
        si = int(self.st.options.get("stream_interval") or 1)
        k = max(si, math.ceil(len(sched.running) * self.dep.kf.frontend_event_s / c.dt))
        n_dec = load.sampled
        st["events"] += n_dec / k * ov / c.dt
        st["ev_tokens"] += n_dec * ov / c.dt
        self.itl_w.append((c.dt * k * 1e3, n_dec))

    def run(self) -> None:
        """Advance the engine step by step until the window ends: arrivals, the API server, idle gaps, steps."""
        sched, arrivals, t1 = self.sched, self.arrivals, self.t1
        idle_w = self.dep.idle_power() * self.dep.tp
        ai, t = 0, 0.0
        while t < t1:
            while ai < len(arrivals) and arrivals[ai] <= t:
                sched.submit(self.make(arrivals[ai]), arrivals[ai])
                ai += 1
            sched.pump(t)
            if not sched.has_work():
                nxt = arrivals[ai] if ai < len(arrivals) else t1
                intake = sched.next_intake()
                if intake is not None and intake < nxt:
                    nxt = intake
                self.stats["energy"] += idle_w * self.overlap(t, nxt)
                t = nxt
                continue
            b = sched.schedule(t)
            if b is None:  # the head of the queue can never fit
                sched.waiting.popleft()
                continue
            c = self.dep.step(b.load)
            self.account(t, c, b.load)
            t += c.dt
            self.now = t
            sched.complete(b, t, self.emit)

    def steps(self) -> dict[str, Any] | None:
        """The window's step decomposition as the load generator computes it (loadgen/steps.py), from the recorded
        token times of the requests sent in the window; None without recorded requests."""
        if not self.record:
            return None
        every = [
            {"chunk_ns": [round(x * 1e9) for x in q["tokens_at"]], "completion_tokens": q["completion_tokens"]}
            for q in self.records
        ]
        recs = [r for r, q in zip(every, self.records) if self.t0 <= q["sent"] < self.t1]
        return decompose(recs, closed_loop=self.shape.closed_loop, concurrency=self.wl.concurrency, all_records=every)

    def result(self, profile: str) -> SimResult:
        dep, st, stats, lat, win = self.dep, self.st, self.stats, self.lat, self.t1 - self.t0
        tokens, energy = stats["tokens"], stats["energy"]
        itl_samples: list[float] = []  # ITL pooled over events (weighted by sequences decoding in the step)
        if self.itl_w:
            stride = max(1, len(self.itl_w) // 4000)
            for dt_ms, n in self.itl_w[::stride]:
                itl_samples.extend([dt_ms] * min(n, 64))
        sched, clk_idle = self.sched, dep.gpu.sm_clock_idle_mhz * (win - stats["run_time"])
        return SimResult(
            profile=st.profile,
            model=dep.model.id,
            gpu=dep.gpu.id,
            tp=dep.tp,
            precision=dep.precision.id,
            workload=asdict(self.wl),
            window_s=win,
            output_tokens=int(tokens),
            output_tok_s=tokens / win,
            request_throughput=stats["completed"] / win,
            completed=int(stats["completed"]),
            ttft_ms=_pct(lat["ttft"]),
            tpot_ms=_pct(lat["tpot"]),
            e2e_ms=_pct(lat["e2e"]),
            itl_ms=_pct(itl_samples),
            energy_j=energy,
            avg_power_w=energy / win / dep.tp,
            j_per_token=energy / tokens if tokens else None,
            tokens_per_joule=tokens / energy if energy else None,
            mean_batch=stats["batch_time"] / win,
            kv_usage_mean=stats["kv_time"] / win,
            preemptions=sched.num_preemptions,
            prefix_hit_rate=(sched.prefix_hits / sched.prefix_queries) if sched.prefix_queries else None,
            tokens_per_event=(stats["ev_tokens"] / stats["events"]) if stats["events"] else 1.0,
            power_capped_share=stats["capped"] / win,
            steps=sched.steps,
            kv_tokens=st.kv_tokens,
            extra={
                "util_gpu_mean": stats["busy"] / win,
                "util_mem_mean": stats["umem"] / win,
                "util_cmp_mean": stats["ucmp"] / win,
                # SM clock as NVML reports it, time-averaged over the window (idle: the GPU's idle clock)
                "sm_clock_mean_mhz": (dep.gpu.sm_clock_max_mhz * stats["clk_busy"] + clk_idle) / win,
                # TTFT's two parts, means: send -> scheduled and scheduled -> first token, comparable with the
                # client's TTFT minus vLLM's request_prefill_time histogram and that histogram (v_engine_ttft_split)
                "ttft_to_scheduled_ms": _mean(lat["to_sched"]),
                "ttft_scheduled_to_first_ms": _mean(lat["sched_to_first"]),
                # the window's power as a linear function of the power model's coefficients, uncapped steps only:
                # W per GPU = (idle x idle_s + capped_w_s + (idle + clock_up + TDP k_busy) free_s + TDP k_cmp free_cmp
                # + TDP k_mem mem_power_scale free_mem) / window (the twin's calibration fits them so)
                "power_basis": {
                    "window_s": win,
                    "idle_s": win - stats["run_time"],
                    **{k: stats[k] for k in ("capped_w_s", "free_s", "free_cmp", "free_mem")},
                },
                **({"requests": self.records, "steps": self.steps()} if self.record else {}),
            },
        )


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def simulate(
    profile: str,
    model: str,
    gpu: str,
    tp: int = 1,
    precision: str = "bf16",
    config: dict[str, Any] | None = None,
    workload: Workload | None = None,
    *,
    duration_s: float = 60.0,
    warmup_s: float = 10.0,
    seed: int = 0,
    setup_: EngineSetup | None = None,
    record: bool = False,
    **workload_kw: Any,
) -> SimResult:
    """Run a workload through the emulated engine in virtual time (no sleeping) and report what a load generator
    and an energy counter would have measured in the window [warmup_s, warmup_s + duration_s]. `record`: also
    return every completed request (send, token times, lengths) in extra["requests"] and the window's step
    decomposition (decode step, stalls, phase: loadgen/steps.py) in extra["steps"]."""
    wl = workload or Workload(**workload_kw)
    st = setup_ or setup(profile, model, gpu, tp, precision, config)
    run = _Run(wl, st, seed, warmup_s, warmup_s + duration_s, record)
    run.run()
    return run.result(profile)
