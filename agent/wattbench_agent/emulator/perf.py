"""The performance and power model: time and energy of one scheduler iteration on N tensor-parallel GPUs.

Roofline per operator class (docs/EMULATOR.md has the equations):
  linear layers   t_lin  = max(FLOP_lin / (peak * e_gemm * clk), bytes_weights / (BW * e_mem))
  attention       t_attn = max(FLOP_attn / (peak_attn * e_attn * clk), bytes_kv / (BW * e_mem))
  all-reduce      t_ar   = 2 L (alpha + 2 (N-1)/N * T h a / (B_nvlink * e_nvlink))          (N > 1)
  fixed           t_fix  = L * c_layer                     (kernel launches and tails, CUDA graphs or not)
  host            t_cpu  = c_step + c_seq * n_seqs         (scheduler, sampling, detokenization not hidden)
  launches        t_eag  = L * eager_layer_s [* piecewise_share]   (a prefill-carrying step outside CUDA graphs)
  step            t      = max(t_gpu, t_eag) + t_cpu - min(host_overlap * t_cpu, t_gpu)
                                                           (t_gpu = t_lin + t_attn + t_ar + t_fix)
Power per GPU while an iteration runs, three parts (docs/EMULATOR.md, 'Power'):
  static   P_idle + P_clk + k_busy TDP                      (idle measured; clocks up; active static)
  memory   k_mem TDP s_mem * bytes/s / HBM_bw               (weights + KV + activations read: energy per byte)
  compute  k_cmp TDP * FLOP/s / peak(compute type) * clk^(e-1)   (energy per FLOP; fp8's at twice the peak costs half)
capped at the power limit by lowering the SM clock (compute-bound time stretches by 1/clk, the compute part falls
~clk^e; clock-event reason sw_power_cap).
Pure Python, no dependencies: the server and simulate() share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wattbench_agent.emulator import calibration
from wattbench_agent.emulator.specs import GPUSpec, ModelSpec, PrecisionSpec

# NVML clock-event reason bits (nvml.h, nvmlClocksEventReason*)
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_SW_THERMAL = 0x20


@dataclass(frozen=True)
class KernelFactors:
    """Efficiency factors of one engine profile (fitted; see docs/EMULATOR.md, 'Fitted factors')."""

    gemm_eff: float  # fraction of dense tensor peak reached by large GEMMs (bf16; fp8 scaled by precision)
    attn_eff: float  # fraction of peak reached by prefill attention (flash attention)
    fp8_attention: bool  # attention math in fp8 when the KV cache is fp8 (TensorRT-LLM fp8 FMHA)
    mem_eff: float  # fraction of HBM bandwidth reached when streaming weights and KV
    layer_overhead_s: float  # fixed GPU time per layer and step (launch gaps, kernel tails)
    allreduce_latency_s: float  # latency of one small all-reduce
    nvlink_eff: float  # fraction of one-direction NVLink bandwidth reached by large all-reduces
    step_overhead_s: float  # host time per step not overlapped with the GPU
    seq_overhead_s: float  # host time per scheduled sequence and step
    frontend_event_s: float  # API-server time to turn one step's output of one request into an SSE event
    host_overlap: float = 0.0  # share of the host time hidden behind the GPU's previous iteration (overlap scheduler)
    # fp8 activation quantisation in kernels of their own (vLLM's per-tensor scaled-mm path, online fp8 and
    # pre-quantised checkpoints alike: measured equal on the H200, results/h200-vllm-fp8ckpt)
    fp8_act_quant_layer_s: float = 0.0  # extra GPU time per layer and step
    fp8_act_quant_bytes: float = 0.0  # HBM bytes per activation element with dynamic scales (amax pass + cast)
    fp8_gemm_scale: float | None = None  # fp8 GEMM share of the fp8 peak relative to gemm_eff (None: precision's)
    intake_s: float = 0.0  # API-server time to take in one new request (HTTP, chat template, tokenisation)
    intake_latency_s: float = 0.0  # fixed latency from the client's send to the API server's intake (hops, queues)
    finish_s: float = 0.0  # API-server time to finish one request (last chunk, usage, stats)
    # A step that carries a prefill and more tokens than the engine captured CUDA graphs for (vLLM 0.25: decode-only
    # batches replay full graphs, mixed batches up to graph_max_tokens piecewise ones, larger ones none) has its
    # kernels launched one by one by the host: the step lasts as long as the slower of the GPU's work and the host's
    # launches, eager_layer_s per layer (piecewise_share of that within the graphs' sizes). The host's speed, not the
    # GPU's: it is what differs from machine to machine (docs/EMULATOR.md, "The step composition").
    eager_layer_s: float = 0.0
    graph_max_tokens: int = 0  # 0: every step replays a graph (no host launch time)
    piecewise_share: float = 0.0


@dataclass(frozen=True)
class PowerFactors:
    """Power model, as fractions of the GPU's TDP: static, memory traffic, compute (fitted on ML.ENERGY H100 figures
    and the H200 vLLM runs; the calibration.json values over these: wattbench/twin/; scaled by TDP elsewhere)."""

    k_busy: float = 0.240  # static active power while the engine iterates (leakage at load, front ends)
    k_mem: float = 0.453  # memory-system power at 100% of the GPU's datasheet bandwidth (x gpu.mem_power_scale)
    k_cmp: float = 1.081  # tensor power at 100% of the dense peak FLOP/s at full clock (above TDP -> power capped)
    clk_exp: float = 2.5  # compute power ~ clk^clk_exp under DVFS (energy per FLOP ~ clk^(clk_exp - 1)); held
    min_clk: float = 0.55


POWER = PowerFactors(**calibration.power())  # the calibration's fitted coefficients where it has them


@dataclass
class StepLoad:
    """What one scheduler iteration computes (aggregated over the sequences it schedules)."""

    tokens: int = 0  # T: query tokens of the step (prefill chunks + one per decoding sequence)
    seqs: int = 0  # sequences scheduled
    sampled: int = 0  # sequences that produce a token this step (lm_head + sampling)
    attn_work: float = 0.0  # sum over sequences of q * (ctx_before + (q + 1) / 2)
    kv_read: float = 0.0  # sum over sequences of ctx_before (KV tokens read)
    prefill_tokens: int = 0


@dataclass
class StepCost:
    dt: float  # seconds of the whole step
    t_gpu: float
    t_cpu: float
    power_w: float  # per GPU (all TP ranks draw alike)
    util_gpu: float  # share of time a kernel ran
    util_mem: float  # share of HBM bandwidth used
    util_cmp: float
    clk: float  # SM clock factor (1 = max boost)
    reasons: int  # NVML clock-event bitmask
    flops: float  # per GPU
    bytes: float  # per GPU


@dataclass
class Deployment:
    """A model at a precision on N GPUs of one kind, with one profile's kernel factors."""

    model: ModelSpec
    gpu: GPUSpec
    precision: PrecisionSpec
    tp: int
    kf: KernelFactors
    power_limit_w: float | None = None
    pf: PowerFactors = field(default_factory=lambda: POWER)
    weight_only_fp8: bool = False  # fp8 weights on a GPU without fp8 tensor cores (Marlin-style)
    online_fp8: bool = False  # fp8 weights quantised at load from a 16-bit checkpoint, dynamic activation scales
    kv_bytes_elem: float | None = None  # KV-cache bytes per element (None: the precision's)

    def __post_init__(self) -> None:
        m, p, n = self.model, self.precision, self.tp
        if self.power_limit_w is None:
            self.power_limit_w = self.gpu.tdp_w
        self.kv_heads_per_gpu = max(1, m.kv_heads // n) if m.kv_heads >= n else 1
        self.heads_per_gpu = m.heads / n
        # weights
        self.dense_lin_params = m.layers * m.attn_params_per_layer
        self.expert_params = m.layers * m.expert_params_per_layer  # one expert, all layers
        head = m.embed_params  # lm_head (read for every sampling step); embedding lookup is negligible
        self.head_params = head
        total = m.total_params_derived
        self.weight_bytes_total = total * p.weight_bytes
        # embeddings and lm_head stay in 16 bit in fp8 / int4 checkpoints
        self.weight_bytes_total += (m.embed_params * (1 if m.tied_embeddings else 2)) * (2.0 - p.weight_bytes)
        self.weight_bytes_per_gpu = self.weight_bytes_total / n
        if self.kv_bytes_elem is None:
            self.kv_bytes_elem = p.kv_bytes
        kvb = self.kv_bytes_elem
        self.kv_bytes_per_token_gpu = 2 * m.layers * self.kv_heads_per_gpu * m.head_dim * kvb
        self.kv_bytes_per_token = 2 * m.layers * m.kv_heads * m.head_dim * kvb
        compute = p.compute
        if compute == "fp8" and not self.gpu.has_fp8:
            compute = "bf16"
            self.weight_only_fp8 = True
        self.peak = self.gpu.peak_flops(compute)
        scale = p.gemm_eff_scale if compute != "bf16" or p.id == "int4-awq" else 1.0
        if compute == "fp8" and self.kf.fp8_gemm_scale is not None:
            scale = self.kf.fp8_gemm_scale  # the profile's own fp8 GEMM kernels (fitted where measured)
        self.gemm_eff = self.kf.gemm_eff * scale
        attn_compute = "fp8" if (self.kf.fp8_attention and kvb == 1.0 and self.gpu.has_fp8) else "bf16"
        self.peak_attn = self.gpu.peak_flops(attn_compute)
        self.bw = self.gpu.hbm_bw * min(0.95, self.kf.mem_eff * self.gpu.mem_eff_scale)
        self.nvlink = self.gpu.nvlink_bw / 2 * self.kf.nvlink_eff  # one direction
        self.fixed_s = m.layers * self.kf.layer_overhead_s
        self.quant_bytes_per_token = 0.0
        if p.id == "fp8" and not self.weight_only_fp8:
            # fp8 GEMMs take fp8 inputs: every linear layer's input is quantised in kernels of their own - a fixed
            # cost per layer and step with a pre-quantised checkpoint (static scales) and online fp8 alike (vLLM 0.25
            # on the H200 decoded at one speed with both, results/h200-vllm-fp8ckpt) - and, with online fp8's dynamic
            # per-tensor scales, an amax pass first: HBM traffic per activation element (qkv and gate/up inputs are
            # whole, o and down inputs sharded over the TP ranks), which prefill feels (the checkpoint's TTFT was
            # 15-37% shorter at 8 and 32 streams). Profiles whose kernels fuse the quantisation (trtllm-like) set 0.
            self.fixed_s += m.layers * self.kf.fp8_act_quant_layer_s
            if self.online_fp8:
                elems = 2 * m.hidden + (m.heads * m.head_dim + m.intermediate) / n
                self.quant_bytes_per_token = m.layers * elems * self.kf.fp8_act_quant_bytes
        self.mem_power_w = self.gpu.tdp_w * self.pf.k_mem * self.gpu.mem_power_scale
        self._lin_bytes_dense = (self.dense_lin_params * p.weight_bytes) / n
        self._head_bytes = head * 2.0 / n

    # ------------------------------------------------------------------ memory
    def activation_reserve_bytes(self, max_tokens_per_step: int) -> float:
        """Peak activation + workspace memory per GPU for a step of that many tokens (profile run)."""
        m = self.model
        per_token = (m.hidden * 6 + m.intermediate * 3 / self.tp + m.vocab / self.tp * 2) * 2.0
        return max_tokens_per_step * per_token + 1.0 * 2**30  # + CUDA context / cuBLAS / NCCL workspaces

    # ------------------------------------------------------------------ time and power
    def step(self, load: StepLoad) -> StepCost:
        cost = self._step(load, 1.0)
        lim = self.power_limit_w
        if cost.power_w > lim + 1e-9:
            pf, tdp = self.pf, self.gpu.tdp_w
            p_cmp = tdp * pf.k_cmp * cost.util_cmp
            rest = cost.power_w - p_cmp
            if p_cmp <= 0:
                clk = 1.0
            elif lim <= rest:  # the rest alone is above the limit: the lowest clock, and more below
                clk = pf.min_clk
            else:
                clk = max(pf.min_clk, min(1.0, ((lim - rest) / p_cmp) ** (1.0 / pf.clk_exp)))
            cost = self._step(load, clk)
            if cost.power_w > lim + 1e-9:
                # still above the limit at the lowest clock (memory-bound power alone exceeds it): the GPU throttles
                # until the average fits, i.e. the same dynamic energy spread over a longer step
                static = self.gpu.idle_w + self.gpu.clock_up_w + tdp * pf.k_busy
                stretch = (cost.power_w - static) / max(lim - static, 1e-9)
                cost.dt *= stretch
                cost.t_gpu *= stretch
                cost.util_mem /= stretch
                cost.util_cmp /= stretch
            cost.power_w = min(cost.power_w, lim)
            cost.reasons |= CLOCK_EVENT_SW_POWER_CAP
        return cost

    def _step(self, load: StepLoad, clk: float) -> StepCost:
        m, kf, n = self.model, self.kf, self.tp
        T = load.tokens
        if T <= 0:
            return StepCost(0.0, 0.0, 0.0, self.idle_power(), 0.0, 0.0, 0.0, 1.0, CLOCK_EVENT_GPU_IDLE, 0.0, 0.0)
        # linear layers
        if m.experts > 1:
            touched = m.experts * (1.0 - (1.0 - m.experts_per_token / m.experts) ** T)
            lin_params_w = self.dense_lin_params + touched * self.expert_params
            lin_params_f = self.dense_lin_params + m.experts_per_token * self.expert_params
        else:
            lin_params_w = lin_params_f = self.dense_lin_params + self.expert_params
        lin_flops = 2.0 * T * lin_params_f / n + 2.0 * load.sampled * self.head_params / n
        w_bytes = lin_params_w * self.precision.weight_bytes / n + (self._head_bytes if load.sampled else 0.0)
        peak = self.peak * clk
        t_lin_c = lin_flops / (peak * self.gemm_eff)
        if self.weight_only_fp8:
            t_lin_c *= 1.15  # dequantisation in the GEMM main loop
        t_lin_m = w_bytes / self.bw
        t_lin = t_lin_c if t_lin_c > t_lin_m else t_lin_m
        # attention
        attn_flops = 4.0 * m.layers * self.heads_per_gpu * m.head_dim * load.attn_work
        kv_bytes = (load.kv_read + T) * self.kv_bytes_per_token_gpu
        t_attn_c = attn_flops / (self.peak_attn * clk * kf.attn_eff)
        t_attn_m = kv_bytes / self.bw
        t_attn = t_attn_c if t_attn_c > t_attn_m else t_attn_m
        # tensor-parallel all-reduce (two per layer, ring)
        if n > 1:
            msg = T * m.hidden * self.precision.act_bytes
            t_ar = 2 * m.layers * (kf.allreduce_latency_s + 2.0 * (n - 1) / n * msg / self.nvlink)
        else:
            t_ar = 0.0
        q_bytes = T * self.quant_bytes_per_token
        t_gpu = (t_lin + t_attn + t_ar + self.fixed_s + q_bytes / self.bw) / self.gpu.speed_scale
        t_cpu = kf.step_overhead_s + kf.seq_overhead_s * load.seqs
        if kf.host_overlap > 0.0:  # scheduling of step n+1 runs while the GPU executes step n
            hidden = min(t_cpu * kf.host_overlap, t_gpu)
            t_cpu -= hidden
        t_launch = self.launch_time(load)
        dt = (t_gpu if t_gpu > t_launch else t_launch) + t_cpu
        flops = lin_flops + attn_flops
        nbytes = w_bytes + kv_bytes + q_bytes
        busy = t_gpu / dt
        u_mem = min(1.0, nbytes / (self.gpu.hbm_bw * dt))
        # tensor math: FLOP/s as a share of the compute type's dense peak (energy per FLOP; an fp8 FLOP at twice the
        # peak costs half a bf16 one), independent of the kernels' efficiency
        u_cmp = min(1.0, (lin_flops / self.peak + attn_flops / self.peak_attn) / dt)
        pf, tdp = self.pf, self.gpu.tdp_w
        # static active power is drawn for the whole iteration: host gaps of a few hundred microseconds are far
        # shorter than the GPU's power-management reaction time, so clocks and voltage stay up (ML.ENERGY's
        # "static power wastage" of CPU-bound small batches)
        power = (
            self.gpu.idle_w
            + self.gpu.clock_up_w
            + tdp * (pf.k_busy + pf.k_cmp * u_cmp * clk ** (pf.clk_exp - 1.0))
            + self.mem_power_w * u_mem
        )
        return StepCost(dt, t_gpu, t_cpu, power, busy, u_mem, u_cmp, clk, 0, flops, nbytes)

    def launch_time(self, load: StepLoad) -> float:
        """The host's time to launch a step's kernels one by one (0 for a step that replays a CUDA graph): a step
        carrying a prefill with more tokens than graph_max_tokens runs outside the graphs; a smaller mixed step replays
        piecewise graphs around its attention (piecewise_share of the launches)."""
        kf = self.kf
        if not (kf.eager_layer_s and load.prefill_tokens and kf.graph_max_tokens):
            return 0.0
        share = 1.0 if load.tokens > kf.graph_max_tokens else kf.piecewise_share
        return self.model.layers * kf.eager_layer_s * share

    def idle_power(self) -> float:
        return self.gpu.idle_w
