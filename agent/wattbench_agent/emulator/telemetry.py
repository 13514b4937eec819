"""Emulated GPU telemetry in the gpu_samples schema: piecewise-constant power from the step model, integrated
into a cumulative energy counter per GPU (mJ since the emulator started).

When the engine runs out of work the GPUs do not go idle at once, as a real GPU does not: the engine's last work
keeps them busy for BUSY_TAIL_S (utilisation as in the last step), then their power falls from the last step's to idle
with time constant COOL_TAU_S (the energy counter integrates that curve). An idle baseline taken at once reads high;
one taken after the GPUs have been quiet for a few seconds reads idle (agent/wattbench_agent/runner.idle_windows)."""

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


BUSY_TAIL_S = 0.2
COOL_TAU_S = 0.4


def decode_reasons(mask: int) -> str:
    names = [n for bit, n in _REASON_NAMES if mask & bit]
    return ",".join(names) if names else "none"


def gpu_uuids(dep: Deployment, seed: str = "") -> list[str]:
    h = hashlib.sha256(f"{dep.gpu.id}|{dep.model.id}|{dep.tp}|{dep.precision.id}|{seed}".encode()).hexdigest()[:8]
    return [f"GPU-emu-{h}-{i}" for i in range(dep.tp)]


COUNTER_STEP_J = 1e9  # per server start: ~11.6 days of a 1 kW GPU, more than any start runs


class Telemetry:
    """Per-GPU state of an emulated deployment. All TP ranks run the same kernels; each GPU gets a small fixed
    per-board offset (+-0.4%) so that sums over GPUs are not trivially n x one value."""

    def __init__(
        self, dep: Deployment, hbm_used_bytes: float, seed: str = "", now_ns: int | None = None, server_start: int = 1
    ):
        self.dep = dep
        self.n = dep.tp
        self.uuids = gpu_uuids(dep, seed)
        self.board = [1.0 + 0.004 * math.sin(1.7 * i + 0.3) for i in range(self.n)]
        t = time.perf_counter_ns() if now_ns is None else now_ns
        self.t_ns = t
        # per-GPU base energy (before board factor). A real GPU's counter keeps counting across server restarts; the
        # emulator's process does not outlive its start, so a later start's counter begins far above where any
        # earlier start's could have reached (a jump forward, as a restart's idle gap is): monotone per GPU
        self.energy_j = COUNTER_STEP_J * (server_start - 1)
        self.power = dep.idle_power()
        self.avg_power = self.power
        self.util_gpu = 0.0
        self.util_mem = 0.0
        self.clk = 0.0
        self.reasons = CLOCK_EVENT_GPU_IDLE
        self.temp = 28.0 + 0.065 * self.power
        self.hbm_used_mib = hbm_used_bytes / 2**20
        # after the last step: (t_ns the work ended, the power then, the util/clock/reasons of the tail), else None
        self.cooling: tuple[int, float, tuple[float, float, float, int]] | None = None

    def _power_at(self, t_ns: int) -> float:
        if self.cooling is None:
            return self.power
        t0, p0, _ = self.cooling
        idle, ts = self.dep.idle_power(), t0 + BUSY_TAIL_S * 1e9  # the tail at the last step's power, then down
        return idle + (p0 - idle) * math.exp(-max(t_ns - ts, 0) * 1e-9 / COOL_TAU_S)

    def _energy_between(self, a_ns: int, b_ns: int) -> float:
        """J per GPU (before the board factor) from a_ns to b_ns at the power of that stretch (_power_at's curve)."""
        if self.cooling is None:
            return self.power * (b_ns - a_ns) * 1e-9
        t0, p0, _ = self.cooling
        idle, ts = self.dep.idle_power(), t0 + BUSY_TAIL_S * 1e9
        flat = max(min(b_ns, ts) - a_ns, 0) * 1e-9  # inside the tail
        a = max(a_ns, ts)
        if b_ns <= a:
            return p0 * flat
        ea, eb = (math.exp(-(t - ts) * 1e-9 / COOL_TAU_S) for t in (a, b_ns))
        return p0 * flat + idle * (b_ns - a) * 1e-9 + (p0 - idle) * COOL_TAU_S * (ea - eb)

    def _advance(self, t_ns: int) -> None:
        dt = (t_ns - self.t_ns) * 1e-9
        if dt <= 0:
            return
        self.energy_j += self._energy_between(self.t_ns, t_ns)
        power = self._power_at(t_ns)
        a = 1.0 - math.exp(-dt / 1.0)  # power_avg: ~1 s average as NVML reports on Hopper
        self.avg_power += (power - self.avg_power) * a
        target = 28.0 + 0.065 * power
        self.temp += (target - self.temp) * (1.0 - math.exp(-dt / 25.0))
        self.t_ns = t_ns

    def set_state(self, t_ns: int, power_w: float, util_gpu: float, util_mem: float, clk: float, reasons: int) -> None:
        self._advance(t_ns)
        self.cooling = None
        self.power = power_w
        self.util_gpu = util_gpu
        self.util_mem = util_mem
        self.clk = clk
        self.reasons = reasons

    def set_idle(self, t_ns: int) -> None:
        """No more work: the tail of busy utilisation, then power falling to idle (see the module's docstring)."""
        self._advance(t_ns)
        if self.cooling is not None or self.reasons & CLOCK_EVENT_GPU_IDLE:
            return  # already cooling, or idle
        self.cooling = (t_ns, self.power, (self.util_gpu, self.util_mem, self.clk, self.reasons))
        self.power = self.dep.idle_power()
        self.util_gpu, self.util_mem, self.clk, self.reasons = 0.0, 0.0, 0.0, CLOCK_EVENT_GPU_IDLE

    def snapshot(self, t_ns: int | None = None) -> dict[str, Any]:
        t = time.perf_counter_ns() if t_ns is None else t_ns
        self._advance(t)
        g = self.dep.gpu
        util_gpu, util_mem, clk, reasons = self.util_gpu, self.util_mem, self.clk, self.reasons
        if self.cooling is not None and t - self.cooling[0] < BUSY_TAIL_S * 1e9:  # the engine's last work
            util_gpu, util_mem, clk, reasons = self.cooling[2]
        power = self._power_at(t)
        sm = g.sm_clock_idle_mhz if reasons & CLOCK_EVENT_GPU_IDLE else g.sm_clock_max_mhz * clk
        gpus = []
        for i in range(self.n):
            b = self.board[i]
            gpus.append(
                {
                    "gpu_uuid": self.uuids[i],
                    "gpu_index": i,
                    "name": g.name,
                    "power_w": round(power * b, 3),
                    "power_avg_w": round(self.avg_power * b, 3),
                    "energy_mj": round(self.energy_j * b * 1000.0, 3),
                    "hbm_used_mib": round(self.hbm_used_mib, 1),
                    "hbm_total_mib": g.hbm_mib,
                    "util_gpu_pct": round(100.0 * util_gpu, 2),
                    "util_mem_pct": round(100.0 * util_mem, 2),
                    "sm_clock_mhz": round(sm, 1),
                    "mem_clock_mhz": g.mem_clock_mhz,
                    "temp_c": round(self.temp, 2),
                    "hbm_temp_c": round(self.temp + 4.0 + 6.0 * util_mem, 2),
                    "power_limit_w": self.dep.power_limit_w,
                    "clock_event_reasons": reasons,
                    "clock_events": decode_reasons(reasons),
                }
            )
        return {"t_ns": t, "source": "emulated", "gpus": gpus}
