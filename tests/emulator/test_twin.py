"""The mechanisms the real H200 vLLM runs showed: prefill token budget, the API server in front of the engine, the
scheduler running one step ahead, closed-loop ramps, online fp8, memory power and the power cap; the twin mapping."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from wattbench_agent.emulator import ConfigError, Workload, setup, simulate, step_time
from wattbench_agent.emulator.engine import Frontend, Request, Scheduler
from wattbench_agent.emulator.perf import StepLoad
from wattbench_agent.emulator.twin import NoTwin, twin_engine

H200_8B = ("llama-3.1-8b", "h200", 1)


def test_prefill_token_budget_admits_prompts_in_waves():
    st = setup("vllm-like", *H200_8B, "bf16", {"max_num_seqs": 256})
    s = Scheduler(st)
    for i in range(256):
        s.add(Request(f"r{i}", 513, 128))
    b = s.schedule()
    # 8192 tokens per step: 15 whole 513-token prompts and a chunk of the 16th, the other 240 wait
    assert b.load.tokens == 8192 and len(b.items) == 16 and b.items[-1][1] == 8192 - 15 * 513
    assert len(s.waiting) == 240
    small = Scheduler(setup("vllm-like", *H200_8B, "bf16", {"max_num_batched_tokens": 2048}))
    for i in range(8):
        small.add(Request(f"r{i}", 513, 128))
    assert small.schedule().load.tokens == 2048


def test_frontend_takes_requests_in_serially_after_finishing_work():
    fe = Frontend(intake_s=1e-3, finish_s=2e-3, seed=1)
    fe.finished(0.0, 5)  # five requests finish at t=0: 10 ms of API-server work first
    reqs = [Request(f"r{i}", 10, 10, arrival=0.0) for i in range(4)]
    fe.queue.extend(reqs)
    assert fe.release(0.0099) == []
    out = fe.release(1.0)
    assert out == reqs
    ready = [r.ready_t for r in out]
    assert ready == sorted(ready) and ready[0] > 0.010
    assert 0.010 + 4 * 0.5e-3 <= ready[-1] <= 0.010 + 4 * 1.5e-3  # each intake 0.5-1.5 x intake_s


def test_run_ahead_scheduler_admits_a_request_one_step_later():
    def admitted_at_second_step(async_on: bool) -> bool:
        st = setup("vllm-like", *H200_8B, "bf16", {"async_scheduling": async_on})
        st.dep = replace(st.dep, kf=replace(st.dep.kf, intake_s=0.0, finish_s=0.0, intake_latency_s=0.0))
        s = Scheduler(st)
        s.submit(Request("a", 100, 50, arrival=0.0), 0.0)
        b = s.schedule(0.0)
        s.submit(Request("b", 100, 50, arrival=0.005), 0.005)  # arrives while step 1 runs
        s.complete(b, 0.010)
        b2 = s.schedule(0.010)
        return any(r.rid == "b" for r, _q in b2.items)

    assert admitted_at_second_step(False)
    assert not admitted_at_second_step(True)  # it joins step 3: step 2 was scheduled while step 1 ran


def test_closed_loop_ramp_breaks_lockstep():
    kw = dict(duration_s=10, warmup_s=5)
    together = simulate(
        "vllm-like",
        *H200_8B,
        "bf16",
        {"async_scheduling": True},
        Workload(concurrency=16, input_tokens=512, output_tokens=128),
        **kw,
    )
    ramped = simulate(
        "vllm-like",
        *H200_8B,
        "bf16",
        {"async_scheduling": True},
        Workload(concurrency=16, input_tokens=512, output_tokens=128, ramp_s=2.0),
        **kw,
    )
    # started together, 16 prompts are prefilled in one 8K-token step again and again; ramped, one at a time
    assert ramped.ttft_ms["p50"] < 0.5 * together.ttft_ms["p50"]


def test_heavy_closed_loop_queues_behind_the_budget():
    cfg = {"async_scheduling": True, "max_num_seqs": 256}
    light = simulate(
        "vllm-like",
        *H200_8B,
        "bf16",
        cfg,
        Workload(concurrency=16, input_tokens=512, output_tokens=128, ramp_s=2),
        duration_s=12,
        warmup_s=5,
    )
    heavy = simulate(
        "vllm-like",
        *H200_8B,
        "bf16",
        cfg,
        Workload(concurrency=256, input_tokens=512, output_tokens=128, ramp_s=2),
        duration_s=12,
        warmup_s=5,
    )
    prefill_step = step_time("vllm-like", *H200_8B, "bf16", batch=0, prefill_tokens=8192).dt * 1e3
    # 256 x 512 prompt tokens need ~16 full-budget steps: the median request waits several of them
    assert heavy.ttft_ms["p50"] > 4 * prefill_step > light.ttft_ms["p50"]


def test_online_fp8_keeps_a_16bit_kv_cache_and_quantises_like_a_checkpoint():
    ckpt = setup("vllm-like", *H200_8B, "fp8")
    online = setup("vllm-like", *H200_8B, "fp8", {"quantization": "online"})
    assert online.dep.kv_bytes_per_token == 2 * ckpt.dep.kv_bytes_per_token
    assert online.kv_tokens < ckpt.kv_tokens
    assert (
        setup("vllm-like", *H200_8B, "fp8", {"quantization": "online", "kv_cache_dtype": "fp8"}).dep.kv_bytes_per_token
        == ckpt.dep.kv_bytes_per_token
    )
    for batch, prefill in ((16, 0), (0, 4096)):
        t_ckpt = step_time("vllm-like", *H200_8B, "fp8", batch=batch, context=600, prefill_tokens=prefill).dt
        t_online = step_time(
            "vllm-like",
            *H200_8B,
            "fp8",
            batch=batch,
            context=600,
            prefill_tokens=prefill,
            config={"quantization": "online"},
        ).dt
        t_bf16 = step_time("vllm-like", *H200_8B, "bf16", batch=batch, context=600, prefill_tokens=prefill).dt
        # both pay the per-layer quantisation kernels (decode measured at one speed on the H200,
        # results/h200-vllm-fp8ckpt); online fp8 adds the amax pass of its dynamic scales (and here a 16-bit KV cache)
        assert t_ckpt < t_online < t_bf16
        fixed_only = replace(online.dep, online_fp8=False, kv_bytes_elem=ckpt.dep.kv_bytes_elem)
        assert fixed_only.fixed_s == pytest.approx(online.dep.fixed_s) and fixed_only.quant_bytes_per_token == 0
    with pytest.raises(ConfigError, match="needs precision fp8"):
        setup("vllm-like", *H200_8B, "bf16", {"quantization": "online"})


def test_h200_decode_power_near_the_cap_and_capping_slows_memory_bound_steps():
    idle = step_time("vllm-like", *H200_8B, "bf16", batch=0, context=0)
    assert idle.power_w == pytest.approx(132)  # measured with vLLM loaded (specs.json cites it)
    h200 = step_time("vllm-like", *H200_8B, "bf16", batch=16, context=600)
    # a memory-bound decode at batch 16 draws three quarters of the 700 W limit or more, below the cap (measured:
    # 472 W at one stream, 627 W decode-only at 32 streams, benchmarks/twin_power_lag.py). Not compared with the H100:
    # the refit puts the H200's energy per byte read (HBM3e, 63 pJ/B) below the H100's (HBM3, 95 pJ/B), so at the
    # same batch the H200 need not draw more
    assert h200.util_mem > 0.5 and 0.75 * 700 < h200.power_w < 700 and not h200.reasons & 0x4
    capped = step_time("vllm-like", *H200_8B, "bf16", batch=16, context=600, config={"power_limit_w": 300})
    assert capped.power_w == pytest.approx(300) and capped.reasons & 0x4 and capped.dt > 1.2 * h200.dt


def test_twin_engine_mapping():
    prof, cfg, _ = twin_engine(
        "vllm", "fp8", {"max_num_seqs": 128, "gpu_memory_utilization": 0.8}, model="meta-llama/Llama-3.1-70B-Instruct"
    )
    assert prof == "vllm-like" and cfg["quantization"] == "online" and cfg["kv_cache_dtype"] == "bf16"
    assert cfg["async_scheduling"] is True and cfg["max_num_seqs"] == 128
    _, cfg, _ = twin_engine("vllm", "fp8", {"kv_cache_dtype": "fp8"}, model="meta-llama/Llama-3.1-405B-Instruct-FP8")
    assert cfg["quantization"] == "checkpoint" and cfg["kv_cache_dtype"] == "fp8"
    assert twin_engine("trtllm", "fp8", {"max_batch_size": 64})[:2] == ("trtllm-like", {"max_batch_size": 64})
    with pytest.raises(NoTwin):
        twin_engine("sglang", "fp8", {})


def _dep_with_gpu(gpu: str, **gpu_fields):
    st = setup("vllm-like", "llama-3.1-8b", gpu, 1, "bf16", None)
    return replace(st.dep, gpu=replace(st.dep.gpu, **gpu_fields))


def test_clock_up_power_is_drawn_only_while_busy():
    base, up = _dep_with_gpu("h100-sxm", clock_up_w=0.0), _dep_with_gpu("h100-sxm", clock_up_w=50.0)
    decode = StepLoad(tokens=1, seqs=1, sampled=1, attn_work=601.0, kv_read=600.0)
    assert up.step(decode).power_w == pytest.approx(base.step(decode).power_w + 50.0)
    assert up.step(StepLoad()).power_w == base.step(StepLoad()).power_w == up.gpu.idle_w  # idle: the idle clock


def test_mem_eff_scale_speeds_memory_bound_decode_only():
    base, fast = _dep_with_gpu("h200", mem_eff_scale=1.0), _dep_with_gpu("h200", mem_eff_scale=1.2)
    decode = StepLoad(tokens=1, seqs=1, sampled=1, attn_work=601.0, kv_read=600.0)
    prefill = StepLoad(tokens=8192, seqs=1, sampled=1, attn_work=8192 * 4096.5, prefill_tokens=8192)
    assert fast.step(decode).t_gpu < 0.9 * base.step(decode).t_gpu
    assert fast.step(prefill).t_gpu == pytest.approx(base.step(prefill).t_gpu, rel=0.02)  # compute bound


def test_speed_scale_stretches_gpu_time_at_the_same_dynamic_energy():
    """A slower board (speed_scale 0.9): an uncapped step's GPU time 1/0.9 as long, host time unchanged, and the same
    bytes and FLOPs over the longer step, so its dynamic (memory + compute) energy stays the same. A power-capped
    prefill draws less on the slower board, so it is capped less: slower, but by less than 1/0.9."""
    base, slow = _dep_with_gpu("h200", speed_scale=1.0), _dep_with_gpu("h200", speed_scale=0.9)
    decode = StepLoad(tokens=1, seqs=1, sampled=1, attn_work=601.0, kv_read=600.0)
    b, s = base.step(decode), slow.step(decode)
    assert s.t_gpu == pytest.approx(b.t_gpu / 0.9) and s.t_cpu == pytest.approx(b.t_cpu)
    g, pf = base.gpu, base.pf
    static = g.idle_w + g.clock_up_w + g.tdp_w * pf.k_busy
    assert (s.power_w - static) * s.dt == pytest.approx((b.power_w - static) * b.dt, rel=1e-6)
    prefill = StepLoad(tokens=8192, seqs=1, sampled=1, attn_work=8192 * 4096.5, prefill_tokens=8192)
    b, s = base.step(prefill), slow.step(prefill)
    assert b.clk < 1.0 and s.clk > b.clk  # capped; less so on the slower board
    assert b.t_gpu < s.t_gpu < b.t_gpu / 0.9


def test_power_split_static_memory_compute():
    """Power = static (idle + clocks + active static) + energy per byte read + energy per FLOP: at one stream the
    memory part dominates, and fp8 (half the weight bytes) draws less than bf16; an fp8 FLOP costs half a bf16
    one (twice the peak at the same power)."""
    bf16 = setup("vllm-like", *H200_8B, "bf16", None).dep
    fp8 = setup("vllm-like", *H200_8B, "fp8", {"quantization": "checkpoint"}).dep
    decode = StepLoad(tokens=1, seqs=1, sampled=1, attn_work=601.0, kv_read=600.0)
    b, f = bf16.step(decode), fp8.step(decode)
    g, pf = bf16.gpu, bf16.pf
    static = g.idle_w + g.clock_up_w + g.tdp_w * pf.k_busy
    mem = bf16.mem_power_w * b.util_mem
    cmp_ = b.power_w - static - mem
    assert mem > 2 * cmp_ > 0  # memory-bound decode: bytes, not FLOPs, set the dynamic power
    assert b.power_w == pytest.approx(static + mem + g.tdp_w * pf.k_cmp * b.flops / (bf16.peak * b.dt))
    assert f.power_w < b.power_w and f.util_mem * f.dt == pytest.approx(b.util_mem * b.dt / 2, rel=0.1)
    # the compute part per FLOP: fp8 half of bf16
    assert fp8.peak == pytest.approx(2 * bf16.peak, rel=1e-3)
    # efficiency does not change energy per FLOP: a slower kernel draws less power for longer
    slow = replace(bf16, kf=replace(bf16.kf, gemm_eff=bf16.kf.gemm_eff / 2))
    prefill = StepLoad(tokens=512, seqs=1, sampled=1, attn_work=512 * 256.5, prefill_tokens=512)
    fast_c, slow_c = bf16._step(prefill, 1.0), slow._step(prefill, 1.0)
    assert slow_c.dt > fast_c.dt
    e_fast = (fast_c.power_w - static) * fast_c.dt - bf16.mem_power_w * fast_c.util_mem * fast_c.dt
    e_slow = (slow_c.power_w - static) * slow_c.dt - bf16.mem_power_w * slow_c.util_mem * slow_c.dt
    assert e_slow == pytest.approx(e_fast, rel=1e-6)


def test_model_from_a_hugging_face_config(tmp_path):
    """A model the twin does not list is described by its config.json (a folder holding one, or the file); its
    parameter count is computed from the shapes and says so."""
    import json

    from wattbench_agent.emulator.specs import SpecError, model_spec

    cfg = {
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    }
    folder = tmp_path / "qwen14-shaped"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    m = model_spec(str(folder))
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate) == (48, 5120, 40, 8, 128, 13824)
    assert 14.0e9 < m.params < 15.0e9 and "computed" in m.source
    assert model_spec(str(folder / "config.json")) == m
    # the committed config.json of the random H200 model has the Llama-3.1-8B shape
    h200 = model_spec(str(Path(__file__).resolve().parents[2] / "results" / "h200-vllm" / "config.json"))
    assert h200.total_params_derived == model_spec("llama-3.1-8b").total_params_derived
    # a bigger model decodes slower on the same GPU
    small = step_time("vllm-like", str(folder / "config.json"), "h200", 1, "bf16", batch=1, context=512)
    assert small.dt > step_time("vllm-like", *H200_8B, "bf16", batch=1, context=512).dt
    moe = {**cfg, "num_local_experts": 8, "num_experts_per_tok": 2}
    (tmp_path / "moe.json").write_text(json.dumps(moe))
    mm = model_spec(str(tmp_path / "moe.json"))
    assert mm.experts == 8 and mm.active_params < mm.params
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(SpecError, match=r"bad/config.json: no num_attention_heads"):
        model_spec(str(bad.parent))
    with pytest.raises(SpecError, match="config.json"):
        model_spec("no-such-model")


def test_the_twins_ttft_splits_at_the_scheduled_time():
    """Each request's TTFT is its send -> scheduled part plus its scheduled -> first token part (vLLM's
    request_prefill_time): the two means add up to the mean TTFT, and with an API-server latency the first part holds
    at least that latency."""
    from wattbench_agent.emulator import Workload, simulate

    r = simulate(
        "vllm-like",
        "llama-3.1-8b",
        "h200",
        workload=Workload(concurrency=4, input_tokens=512, output_tokens=32),
        duration_s=4.0,
        warmup_s=1.0,
    )
    to_s, s_to_f = r.extra["ttft_to_scheduled_ms"], r.extra["ttft_scheduled_to_first_ms"]
    assert to_s > 0 and s_to_f > 0
    assert to_s + s_to_f == pytest.approx(r.ttft_ms["mean"], rel=1e-9)  # the same requests' TTFT, split
    assert to_s >= 1e3 * setup("vllm-like", "llama-3.1-8b", "h200", 1, "bf16").dep.kf.intake_latency_s


def test_a_prefill_step_outside_cuda_graphs_lasts_as_long_as_the_hosts_launches():
    """vLLM 0.25 replays CUDA graphs for decode-only steps and for mixed steps up to 512 tokens (piecewise); a bigger
    prefill-carrying step is launched by the host kernel by kernel, so it lasts max(GPU time, layers x launch time per
    layer). A slow host lengthens exactly those steps: not a decode step, not a GPU-bound 2K-token prefill."""
    base = setup("vllm-like", *H200_8B, "bf16", {"eager_layer_s": 0.0, "async_scheduling": True}).dep
    slow = setup("vllm-like", *H200_8B, "bf16", {"eager_layer_s": 0.0008, "async_scheduling": True}).dep
    layers = base.model.layers
    decode = StepLoad(tokens=16, seqs=16, sampled=16, attn_work=16 * 577.0, kv_read=16 * 576.0)
    mixed = StepLoad(
        tokens=15 + 520, seqs=16, sampled=16, attn_work=15 * 577.0 + 520 * 260.5, kv_read=15 * 576.0, prefill_tokens=520
    )
    small = StepLoad(
        tokens=15 + 256, seqs=16, sampled=16, attn_work=15 * 577.0 + 256 * 128.5, kv_read=15 * 576.0, prefill_tokens=256
    )
    long = StepLoad(
        tokens=7 + 2060, seqs=8, sampled=8, attn_work=7 * 1000.0 + 2060 * 1030.5, kv_read=7000.0, prefill_tokens=2060
    )
    assert slow.step(decode).dt == pytest.approx(base.step(decode).dt)
    assert slow.step(mixed).dt == pytest.approx(max(base.step(mixed).dt, layers * 0.0008), rel=1e-6)
    assert slow.step(mixed).dt > 1.5 * base.step(mixed).dt
    share = slow.kf.piecewise_share
    assert layers * 0.0008 * share <= slow.step(small).dt < layers * 0.0008  # piecewise graphs: a share of it
    assert base.step(long).dt > layers * 0.0008 and slow.step(long).dt == pytest.approx(base.step(long).dt)
    # the GPU idles between the host's launches: the same work over a longer step draws less power
    assert slow.step(mixed).power_w < base.step(mixed).power_w
    with pytest.raises(ConfigError, match="eager_layer_s"):
        setup("vllm-like", *H200_8B, "bf16", {"eager_layer_s": -1})


def test_phase_states_come_out_of_the_simulation():
    """The twin's step decomposition is the load generator's (loadgen/steps.py on its token times): streams started
    together with equal lengths stay bunched (their prefills share steps); ramped in, each prefill has a step of its
    own (spread, the stalled share near (c - 1)/(o - 1)); with spread output lengths there is no fixed expectation.
    The stall is as long as the host's launches of a prefill-carrying step."""
    kw = dict(duration_s=10, warmup_s=5, record=True)
    cfg = {"async_scheduling": True, "eager_layer_s": 0.0006}
    wl = dict(concurrency=16, input_tokens=512, output_tokens=128)
    together = simulate("vllm-like", *H200_8B, "bf16", cfg, Workload(**wl), **kw).extra["steps"]
    ramped = simulate("vllm-like", *H200_8B, "bf16", cfg, Workload(**wl, ramp_s=2.0), **kw).extra["steps"]
    spread = simulate(
        "vllm-like", *H200_8B, "bf16", cfg, Workload(**wl, ramp_s=2.0, random_range_ratio=0.5), **kw
    ).extra["steps"]
    assert together["phase_state"] == "bunched" and ramped["phase_state"] == "spread"
    assert ramped["stalled_gap_fraction"] == pytest.approx(15 / 127, rel=0.25)
    assert ramped["stall_ms_mean"] == pytest.approx(32 * 0.6, rel=0.15)  # the host's launch time of the step
    assert spread["phase_state"] is None and spread["expected_stalled_fraction"] is None
    assert spread["stalled_gap_fraction"] > 0.05


def test_a_windows_power_is_linear_in_the_power_coefficients():
    """simulate's power_basis: the window's W per GPU from the power model's coefficients, exactly (capped steps at
    their limit), which the twin's calibration solves for."""
    for c in (1, 64, 256):
        r = simulate("vllm-like", *H200_8B, "bf16", {}, Workload(concurrency=c), duration_s=6, warmup_s=2)
        dep = setup("vllm-like", *H200_8B, "bf16").dep
        g, pf, b = dep.gpu, dep.pf, r.extra["power_basis"]
        w = (
            g.idle_w * b["idle_s"]
            + b["capped_w_s"]
            + (g.idle_w + g.clock_up_w + g.tdp_w * pf.k_busy) * b["free_s"]
            + g.tdp_w * pf.k_cmp * b["free_cmp"]
            + g.tdp_w * pf.k_mem * g.mem_power_scale * b["free_mem"]
        ) / b["window_s"]
        assert w == pytest.approx(r.avg_power_w, rel=1e-9)


def test_the_twin_sends_what_the_load_generator_sends_for_the_same_seed():
    """Open loop with spread lengths: the twin's requests arrive at the load generator's send times for the seed and
    carry the lengths the load generator draws for them (request i, the i-th send), so a prediction made with the
    agent's seed for a point describes the very requests the run will send."""
    from wattbench_agent.loadgen import LoadSpec, shapes
    from wattbench_agent.loadgen.workload import Workload as Lengths

    seed, horizon = 1234, 6.0
    wl = Workload(shape="poisson", rate=10, input_tokens=512, output_tokens=128, random_range_ratio=0.5)
    r = simulate("vllm-like", *H200_8B, "bf16", {}, wl, duration_s=4, warmup_s=2, seed=seed, record=True)
    spec = LoadSpec(shape="poisson", rate=10, input_tokens=512, output_tokens=128, random_range_ratio=0.5, seed=seed)
    sends = shapes.get("poisson").offsets(vars(spec), horizon, seed)
    lengths = Lengths(spec, n_hint=len(sends))
    got = sorted(r.extra["requests"], key=lambda q: int(q["id"].split("-")[1]))
    assert got and len(got) <= len(sends)
    for q in got:
        i = int(q["id"].split("-")[1]) - 1
        assert q["sent"] == pytest.approx(sends[i])
        assert (q["prompt_tokens"], q["max_tokens"]) == lengths.lengths(i)
    assert len({q["max_tokens"] for q in got}) > 5  # spread, not one length


@pytest.mark.parametrize(
    "lengths",
    [
        {"output_tokens_dist": {"kind": "uniform", "min": 64, "max": 192}},  # the steps experiment's spread16
        {"random_range_ratio": 0.5},  # vllm bench serve's --random-range-ratio
    ],
)
def test_a_closed_loops_lengths_are_the_ones_the_load_generator_prepares(lengths):
    """Closed loop: the load generator sizes its draws from the window (streams x 2 x horizon + streams), and the
    lengths of request i depend on that size; the twin's requests carry the lengths the load generator's own
    preparation (loadgen.runner._prepare, one worker) gives requests 0, 1, 2, ... for the same seed."""
    from wattbench_agent.loadgen import LoadSpec
    from wattbench_agent.loadgen.runner import _prepare

    seed, c = 99, 16
    spec = LoadSpec(concurrency=c, input_tokens=512, output_tokens=128, warmup_s=2, duration_s=4, seed=seed, **lengths)
    prepared = _prepare(spec, None, "lp", 0, 1).workload
    wl = Workload(
        shape="concurrency",
        concurrency=c,
        ramp_s=1.0,
        input_tokens=512,
        output_tokens=lengths.get("output_tokens_dist", 128),
        random_range_ratio=lengths.get("random_range_ratio", 0.0),
    )
    r = simulate("vllm-like", *H200_8B, "bf16", {}, wl, duration_s=4, warmup_s=2, seed=seed, record=True)
    got = sorted(r.extra["requests"], key=lambda q: int(q["id"].split("-")[1]))
    assert len(got) > 3 * c
    for q in got:
        i = int(q["id"].split("-")[1]) - 1
        assert (q["prompt_tokens"], q["max_tokens"]) == prepared.lengths(i)
