"""Emulated GPU telemetry in the gpu_samples schema: piecewise-constant power from the step model, integrated
into a cumulative energy counter per GPU (mJ since the emulator started)."""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from wattbench_agent.emulator.perf import (
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
    Deployment,
)

_REASON_NAMES = (
    (CLOCK_EVENT_GPU_IDLE, "gpu_idle"),
    (CLOCK_EVENT_SW_POWER_CAP, "sw_power_cap"),
    (CLOCK_EVENT_SW_THERMAL, "sw_thermal_slowdown"),
)


def decode_reasons(mask: int) -> str:
    names = [n for bit, n in _REASON_NAMES if mask & bit]
    return ",".join(names) if names else "none"


def gpu_uuids(dep: Deployment, seed: str = "") -> list[str]:
    h = hashlib.sha256(f"{dep.gpu.id}|{dep.model.id}|{dep.tp}|{dep.precision.id}|{seed}".encode()).hexdigest()[:8]
    return [f"GPU-emu-{h}-{i}" for i in range(dep.tp)]


class Telemetry:
    """Per-GPU state of an emulated deployment. All TP ranks run the same kernels; each GPU gets a small fixed
    per-board offset (+-0.4%) so that sums over GPUs are not trivially n x one value."""

    def __init__(self, dep: Deployment, hbm_used_bytes: float, seed: str = "", now_ns: int | None = None):
        self.dep = dep
        self.n = dep.tp
        self.uuids = gpu_uuids(dep, seed)
        self.board = [1.0 + 0.004 * math.sin(1.7 * i + 0.3) for i in range(self.n)]
        t = time.perf_counter_ns() if now_ns is None else now_ns
        self.t_ns = t
        self.energy_j = 0.0  # per-GPU base energy (before board factor)
        self.power = dep.idle_power()
        self.avg_power = self.power
        self.util_gpu = 0.0
        self.util_mem = 0.0
        self.clk = 0.0
        self.reasons = CLOCK_EVENT_GPU_IDLE
        self.temp = 28.0 + 0.065 * self.power
        self.hbm_used_mib = hbm_used_bytes / 2**20

    def _advance(self, t_ns: int) -> None:
        dt = (t_ns - self.t_ns) * 1e-9
        if dt <= 0:
            return
        self.energy_j += self.power * dt
        a = 1.0 - math.exp(-dt / 1.0)  # power_avg: ~1 s average as NVML reports on Hopper
        self.avg_power += (self.power - self.avg_power) * a
        target = 28.0 + 0.065 * self.power
        self.temp += (target - self.temp) * (1.0 - math.exp(-dt / 25.0))
        self.t_ns = t_ns

    def set_state(self, t_ns: int, power_w: float, util_gpu: float, util_mem: float, clk: float, reasons: int) -> None:
        self._advance(t_ns)
        self.power = power_w
        self.util_gpu = util_gpu
        self.util_mem = util_mem
        self.clk = clk
        self.reasons = reasons

    def set_idle(self, t_ns: int) -> None:
        self.set_state(t_ns, self.dep.idle_power(), 0.0, 0.0, 0.0, CLOCK_EVENT_GPU_IDLE)

    def snapshot(self, t_ns: int | None = None) -> dict[str, Any]:
        t = time.perf_counter_ns() if t_ns is None else t_ns
        self._advance(t)
        g = self.dep.gpu
        sm = g.sm_clock_idle_mhz if self.reasons & CLOCK_EVENT_GPU_IDLE else g.sm_clock_max_mhz * self.clk
        gpus = []
        for i in range(self.n):
            b = self.board[i]
            gpus.append(
                {
                    "gpu_uuid": self.uuids[i],
                    "gpu_index": i,
                    "name": g.name,
                    "power_w": round(self.power * b, 3),
                    "power_avg_w": round(self.avg_power * b, 3),
                    "energy_mj": round(self.energy_j * b * 1000.0, 3),
                    "hbm_used_mib": round(self.hbm_used_mib, 1),
                    "hbm_total_mib": g.hbm_mib,
                    "util_gpu_pct": round(100.0 * self.util_gpu, 2),
                    "util_mem_pct": round(100.0 * self.util_mem, 2),
                    "sm_clock_mhz": round(sm, 1),
                    "mem_clock_mhz": g.mem_clock_mhz,
                    "temp_c": round(self.temp, 2),
                    "hbm_temp_c": round(self.temp + 4.0 + 6.0 * self.util_mem, 2),
                    "power_limit_w": self.dep.power_limit_w,
                    "clock_event_reasons": self.reasons,
                    "clock_events": decode_reasons(self.reasons),
                }
            )
        return {"t_ns": t, "source": "emulated", "gpus": gpus}
