"""Idle baselines from quiet windows: after load a GPU runs on for a moment and its power falls over a second or two
(in the real H200 bundles, idle windows held samples with utilisation above 0 and up to 716 W). Before each idle
window the agent waits until every GPU has been quiet (utilisation 0, power steady) for a few seconds, bounded by a
timeout, records the wait, and flags a window that never settled. The fake NVML replaying the real H200 recording
(with a GPU kept busy on top of it) and the emulator's own telemetry (its GPUs cool down after the last step) are
what it is tested on."""

from __future__ import annotations

import json
import time

import pytest

from tests.emulator.conftest import start_emulator, stop
from wattbench_agent.loadgen import LoadSpec, run_load
from wattbench_agent.runner import run_spec
from wattbench_agent.telemetry import idle_baseline, open_sampler
from wattbench_agent.telemetry.sampler import wait_until_quiet
from wattbench_agent.wire import WIRE_VERSION


def _fake(trace_path, facts, activity: list[dict]) -> dict:
    """The real recording, replayed from its flat deep idle (1.8-6 s: 77-79 W, utilisation 0), with `activity`."""
    return {
        "fake": str(trace_path),
        "epoch_ns": time.perf_counter_ns(),
        "start_offset_s": facts.idle[0],
        "latency_scale": 0,
        "activity": activity,
    }


def test_a_gpu_still_busy_after_load_is_waited_for(trace_path, facts):
    """Busy for 0.6 s (100 %, 650 W), then its power falls back with a 0.25 s time constant: not quiet while busy or
    falling; quiet once 0.8 s of samples are flat at idle; the wait is how long that took."""
    spec = _fake(trace_path, facts, [{"from_s": 0.0, "until_s": 0.6, "util": 100, "power_w": 650, "tau_s": 0.25}])
    with open_sampler("nvml", hz=10, deployment_id="d", nvml=spec) as s:
        time.sleep(0.4)
        assert s.quiet_for(0.3) is False  # utilisation 100 %
        [(waited, settled)] = wait_until_quiet([s], quiet_s=0.8, timeout_s=10)
        assert settled is True and 0.6 + 0.8 <= waited + 0.4 < 4.0
        assert s.quiet_for(0.8) is True


def test_a_gpu_that_never_settles_is_taken_at_the_timeout_and_says_so(trace_path, facts):
    spec = _fake(trace_path, facts, [{"from_s": 0.0, "util": 30, "power_w": 300}])  # busy for ever
    with open_sampler("nvml", hz=10, deployment_id="d", nvml=spec) as s:
        [(waited, settled)] = wait_until_quiet([s], quiet_s=0.5, timeout_s=1.5)
    assert settled is False and 1.5 <= waited < 3.0


def test_no_telemetry_cannot_tell_and_does_not_wait(capfd):
    with open_sampler("none") as s:
        assert wait_until_quiet([s], quiet_s=5, timeout_s=30) == [(0.0, None)]


@pytest.fixture(scope="module")
def emulator():
    proc, url = start_emulator(
        "--profile", "vllm-like", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--precision", "bf16"
    )
    yield url
    stop(proc)


def _load(url: str) -> None:
    run_load(LoadSpec(url=url, model="llama-3.1-8b", concurrency=16, output_tokens=64, duration_s=1.0))


def test_the_emulators_gpus_cool_down_and_a_quiet_idle_window_reads_idle(emulator):
    """Right after load the emulated GPU is still busy and its power still falling: an idle window taken at once
    reads high (what the H200 bundles show); taken once it has been quiet, it reads the idle power."""
    with open_sampler("emulated", url=emulator, hz=10, deployment_id="e") as s:
        time.sleep(3.5)
        settled_idle = idle_baseline(s, 0.5, "reference")["total_w"]  # long after any load: idle
        _load(emulator)
        at_once = idle_baseline(s, 0.5, "at_once")["total_w"]
        _load(emulator)
        [(waited, settled)] = wait_until_quiet([s], quiet_s=1.0, timeout_s=10)
        quiet = idle_baseline(s, 0.5, "quiet")["total_w"]
    assert at_once > settled_idle * 1.3  # the window began in the busy tail and the fall of power
    assert settled is True and waited >= 1.0
    assert quiet == pytest.approx(settled_idle, rel=0.02)


def test_the_agent_waits_records_the_wait_and_takes_idle_from_quiet_gpus(tmp_path):
    """An emulated deployment with warm-up requests just before its first idle window: the agent waited until its
    GPUs were quiet (idle_settle_s_before, idle_settled_before), so idle before reads as idle after."""
    spec = {
        "version": WIRE_VERSION,
        "run_id": "quiet",
        "out": str(tmp_path / "bundle"),
        "source": "emulated",
        "telemetry": "emulated",
        "idle_baseline_s": 0.5,
        "idle_quiet_s": 1.0,
        "idle_quiet_timeout_s": 15,
        "warmup_requests": 16,
        "deployments": [
            {
                "deployment_id": "e",
                "engine_config": {
                    "engine": "emulator",
                    "model": "llama-3.1-8b",
                    "config_name": "e",
                    "precision": "bf16",
                    "tp": 1,
                    "gpu": "h100-sxm",
                    "profile": "vllm-like",
                },
                "load_points": [
                    {
                        "load_point_id": "e:w:c16",
                        "workload": "w",
                        "point_label": "c16",
                        "load": {"shape": "concurrency", "concurrency": 16, "output_tokens": 64, "duration_s": 1.0},
                    }
                ],
            }
        ],
    }
    bundle = run_spec(spec, log=lambda m: None)
    (dep,) = [json.loads(x) for x in (bundle / "deployments.jsonl").read_text().splitlines()]
    assert dep["idle_settled_before"] is True and dep["idle_settled_after"] is True
    assert dep["idle_settle_s_before"] >= 1.0 and dep["idle_settle_s_after"] >= 1.0
    assert dep["idle_power_w_before"] == pytest.approx(dep["idle_power_w_after"], rel=0.02)
