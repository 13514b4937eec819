"""A fake NVML (the pynvml functions the sampler calls) that replays a trace of raw NVML returns.

Traces are written by `wattbench telemetry record` on a real GPU (agent/wattbench_agent/telemetry/record.py) or, until a
recording exists, by `synthetic_h200_trace()` below. Format "wattbench-nvml-trace/1":

    {"format": ..., "synthetic": bool, "provenance": "...", "driver_version": ..., "hz": ..., "seconds": ...,
     "system":  {KEY: [[t_ms, dur_ms, RET], ...]},               # calls without a device handle
     "devices": [{"index": 0, "calls": {KEY: [[t_ms, dur_ms, RET], ...]}}]}

KEY is the NVML function name, followed by ':' and the extra arguments for calls that take some
(nvmlDeviceGetClockInfo:1, nvmlDeviceGetMemoryInfo:33554472). RET is the raw return made JSON: a number or
string, a dict for structs ({total, free, used, ...}; {gpu, memory}), for nvmlDeviceGetFieldValues a dict
fieldId -> {value, valueType, nvmlReturn, timestamp, latencyUsec}, or {"nvml_error": code} for a raised error.

Replay: a call at replay time t returns the latest recorded return of that KEY at or before t (the first one
before the first), after sleeping the recorded call duration (x latency_scale), so the sampler's measured
cost reflects the recording. Replay time = (now - epoch) x speed + start_offset_s; past the end it wraps
around, and the energy counter keeps counting (each lap adds the recorded span), so it never runs backwards
unless reset_after_s asks it to. With speed != 1 the counter's increments are divided by speed, so that counter
energy still equals replayed power x real seconds (tests compress a trace without breaking that identity).

Fault injection on top of any trace (the recording has none of these):
- not_supported=[fn | "field:ID", ...]: those calls (or fields of the batch) answer NVML_ERROR_NOT_SUPPORTED.
- reset_after_s=S: the energy counter restarts near zero S seconds after the epoch (replay seconds, x speed);
  reset_when_file=PATH: the same, the first time a counter read finds PATH existing.
- errors=[{"code": 15 | "NVML_ERROR_GPU_IS_LOST", "calls": [fn | "field:ID", ...], "from_s": a, "until_s": b,
  "when_file": PATH}, ...]: NVML errors in the middle of a run. While a rule is active every call it names (all
  calls when "calls" is absent; "field:ID" sets that field's per-field nvmlReturn instead) raises NVMLError(code).
  A rule is active between from_s and until_s after the epoch (same clock as reset_after_s; either bound may be
  left out) and, when "when_file" is given, only while that file exists - so a test can switch a fault on and
  off at known instants in both processes that replay the trace (sampler and window reads).
- activity=[{"from_s": a, "until_s": b, "util": 100, "power_w": 650, "tau_s": 0.5}, ...]: a GPU still busy after
  load, as real ones are (the H200 bundles' idle windows held samples with utilisation above 0 and up to 716 W).
  Between from_s and until_s (seconds after the epoch, as for errors; until_s null or absent: for ever) every GPU
  reports utilisation `util` and instant and average power `power_w`; after until_s its power falls back to the
  trace's with time constant tau_s and its utilisation is the trace's. Readings only: the energy counter replays the
  trace.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml as _real  # constants and the NVMLError classes only; the library itself is never loaded here

TRACE_FORMAT = "wattbench-nvml-trace/1"
ENERGY_KEY = "nvmlDeviceGetTotalEnergyConsumption"
SYNTHETIC_PROVENANCE = "synthetic, shaped after MEASUREMENT.md facts, replace with a recording"
FAULTS_PROVENANCE = (
    "synthetic fault cases the H200 recording does not contain (recorded NotSupported answers, "
    "a counter reset, GPU_IS_LOST mid-run); not a recording"
)


def _error_code(code: int | str) -> int:
    """15 or "NVML_ERROR_GPU_IS_LOST" or "GPU_IS_LOST" -> 15."""
    if isinstance(code, str) and not code.lstrip("-").isdigit():
        name = code if code.startswith("NVML_ERROR_") else "NVML_ERROR_" + code
        return int(getattr(_real, name))
    return int(code)


class _ErrorRule:
    def __init__(self, rule: dict[str, Any]):
        self.code = _error_code(rule.get("code", "NVML_ERROR_UNKNOWN"))
        self.calls = set(rule["calls"]) if rule.get("calls") else None  # None: every call
        self.from_s = rule.get("from_s")
        self.until_s = rule.get("until_s")
        self.when_file = Path(rule["when_file"]) if rule.get("when_file") else None

    def hits(self, name: str, elapsed_s: float) -> bool:
        if self.calls is None:
            if name.startswith("field:"):
                return False  # a whole-call error already fails the batch
        elif name not in self.calls:
            return False
        if self.from_s is not None and elapsed_s < self.from_s:
            return False
        if self.until_s is not None and elapsed_s >= self.until_s:
            return False
        return self.when_file is None or self.when_file.exists()


@dataclass(frozen=True)
class FakeHandle:
    index: int


def call_key(fn: str, extra: tuple = ()) -> str:
    """The trace key of a call: function name plus its arguments after the handle."""
    if fn == "nvmlDeviceGetFieldValues" or not extra:
        return fn
    return fn + ":" + ",".join(str(a) for a in extra)


class _Timeline:
    def __init__(self, entries: list[list[Any]]):
        self.t = [e[0] for e in entries]
        self.entries = entries

    def at(self, t_ms: float) -> list[Any]:
        i = bisect.bisect_right(self.t, t_ms) - 1
        return self.entries[max(i, 0)]


class FakeNvml:
    """Module-like stand-in for pynvml, replaying `trace` (a path or an already loaded dict)."""

    NVMLError = _real.NVMLError

    def __init__(
        self,
        trace: str | Path | dict[str, Any],
        epoch_ns: int | None = None,
        speed: float = 1.0,
        start_offset_s: float = 0.0,
        reset_after_s: float | None = None,
        not_supported: list[str] | tuple[str, ...] = (),
        latency_scale: float = 1.0,
        errors: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
        reset_when_file: str | Path | None = None,
        activity: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
    ):
        data = trace if isinstance(trace, dict) else json.loads(Path(trace).read_text(encoding="utf-8"))
        if data.get("format") != TRACE_FORMAT:
            raise ValueError(f"{trace}: not a {TRACE_FORMAT} trace (format={data.get('format')!r})")
        self.trace = data
        self.synthetic = bool(data.get("synthetic"))
        self.epoch_ns = epoch_ns
        self.speed = speed
        self.start_offset_s = start_offset_s
        self.reset_after_s = reset_after_s
        self.reset_when_file = Path(reset_when_file) if reset_when_file else None
        self.not_supported = set(not_supported)
        self.latency_scale = latency_scale
        self.error_rules = [_ErrorRule(r) for r in errors]
        self.activity = [dict(r) for r in activity]
        self.span_ms = float(data.get("seconds", 0)) * 1000.0 or 1.0
        self.system = {k: _Timeline(v) for k, v in data.get("system", {}).items()}
        self.devices = [{k: _Timeline(v) for k, v in d["calls"].items()} for d in data["devices"]]
        self._reset_offset: list[float | None] = [None] * len(self.devices)
        self.call_log: list[tuple[str, tuple]] = []  # (fn, args) of every call, for tests
        self.initialised = False

    def __getattr__(self, name: str) -> Any:  # NVML_* constants, NVMLError_* classes, nvmlClocksEventReason*
        if name.startswith(("NVML_", "NVMLError", "nvmlClocksEventReason", "nvmlMemory_v")):
            return getattr(_real, name)
        raise AttributeError(f"fake NVML has no {name}")

    # -- replay core ------------------------------------------------------------------------------------------
    def _replay_ms(self) -> tuple[float, int]:
        elapsed_s = (time.perf_counter_ns() - self.epoch_ns) / 1e9 * self.speed + self.start_offset_s
        lap, t_ms = divmod(elapsed_s * 1000.0, self.span_ms)
        return t_ms, int(lap)

    def _error(self, code: int) -> None:
        raise _real.NVMLError(code)

    def _injected(self, name: str) -> int | None:
        """The NVML error code an active `errors` rule gives call (or "field:ID") `name`, else None."""
        if not self.error_rules:
            return None
        elapsed_s = (time.perf_counter_ns() - self.epoch_ns) / 1e9 * self.speed
        for rule in self.error_rules:
            if rule.hits(name, elapsed_s):
                return rule.code
        return None

    def _ret(self, timelines: dict[str, _Timeline], key: str, fn: str, dev: int | None) -> Any:
        if not self.initialised:
            self._error(_real.NVML_ERROR_UNINITIALIZED)
        if key in self.not_supported or fn in self.not_supported:
            self._error(_real.NVML_ERROR_NOT_SUPPORTED)
        injected = self._injected(fn)
        if injected is not None:
            self._error(injected)
        tl = timelines.get(key)
        if tl is None:  # never recorded: this GPU/driver did not answer it
            self._error(_real.NVML_ERROR_NOT_SUPPORTED)
        t_ms, lap = self._replay_ms()
        _, dur_ms, ret = tl.at(t_ms)
        if dur_ms and self.latency_scale:
            time.sleep(dur_ms * self.latency_scale / 1000.0)
        if isinstance(ret, dict) and "nvml_error" in ret:
            self._error(int(ret["nvml_error"]))
        if fn == ENERGY_KEY and dev is not None:
            first, last = tl.entries[0][2], tl.entries[-1][2]
            # keep counting across laps; with speed != 1 the counter advances in real time (power x real
            # seconds), so the energy stays consistent with the replayed power readings
            ret = first + (ret + lap * (last - first) - first) / self.speed
            reset_due = (
                self._reset_offset[dev] is not None
                or (
                    self.reset_after_s is not None
                    and (time.perf_counter_ns() - self.epoch_ns) / 1e9 * self.speed >= self.reset_after_s
                )
                or (self.reset_when_file is not None and self.reset_when_file.exists())
            )
            if reset_due:
                if self._reset_offset[dev] is None:
                    self._reset_offset[dev] = ret - 1000.0  # the counter restarts near zero
                ret = ret - self._reset_offset[dev]
        return ret

    def _busy(self) -> tuple[float | None, float | None, float]:
        """(util override or None, power override in W or None, weight of the override: 1 busy, falling after it)
        of the `activity` rules at this instant."""
        elapsed_s = (time.perf_counter_ns() - self.epoch_ns) / 1e9 * self.speed
        for rule in self.activity:
            start, until = float(rule.get("from_s", 0.0)), rule.get("until_s")
            if elapsed_s < start:
                continue
            if until is None or elapsed_s < float(until):
                return float(rule.get("util", 100.0)), float(rule.get("power_w", 650.0)), 1.0
            weight = math.exp(-(elapsed_s - float(until)) / float(rule.get("tau_s", 0.5)))
            if weight > 1e-6:
                return None, float(rule.get("power_w", 650.0)), weight
        return None, None, 0.0

    def _dev(self, handle: FakeHandle, fn: str, *extra: Any) -> Any:
        self.call_log.append((fn, (handle.index, *extra)))
        return self._ret(self.devices[handle.index], call_key(fn, extra), fn, handle.index)

    # -- the pynvml functions the sampler and recorder call -----------------------------------------------------
    def nvmlInit(self) -> None:
        if self.epoch_ns is None:
            self.epoch_ns = time.perf_counter_ns()
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self.call_log.append(("nvmlSystemGetDriverVersion", ()))
        return self._ret(self.system, "nvmlSystemGetDriverVersion", "nvmlSystemGetDriverVersion", None)

    def nvmlDeviceGetCount(self) -> int:
        self.call_log.append(("nvmlDeviceGetCount", ()))
        if not self.initialised:
            self._error(_real.NVML_ERROR_UNINITIALIZED)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < len(self.devices):
            self._error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, calls in enumerate(self.devices):
            tl = calls.get("nvmlDeviceGetUUID")
            if tl is not None and tl.entries[0][2] == uuid:
                return FakeHandle(i)
        self._error(_real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, h):
        return self._dev(h, "nvmlDeviceGetUUID")

    def nvmlDeviceGetName(self, h):
        return self._dev(h, "nvmlDeviceGetName")

    def nvmlDeviceGetIndex(self, h):
        return self._dev(h, "nvmlDeviceGetIndex")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._dev(h, "nvmlDeviceGetEnforcedPowerLimit")

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._dev(h, "nvmlDeviceGetPowerManagementLimit")

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._dev(h, "nvmlDeviceGetPersistenceMode")

    def nvmlDeviceGetSerial(self, h):
        return self._dev(h, "nvmlDeviceGetSerial")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(**self._dev(h, "nvmlDeviceGetPciInfo"))

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._dev(h, "nvmlDeviceGetTotalEnergyConsumption")

    def nvmlDeviceGetPowerUsage(self, h):
        return self._dev(h, "nvmlDeviceGetPowerUsage")

    def nvmlDeviceGetClockInfo(self, h, clock_type):
        return self._dev(h, "nvmlDeviceGetClockInfo", clock_type)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._dev(h, "nvmlDeviceGetTemperature", sensor)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._dev(h, "nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetUtilizationRates(self, h):
        rates = dict(self._dev(h, "nvmlDeviceGetUtilizationRates"))
        util, _, _ = self._busy() if self.activity else (None, None, 0.0)
        if util is not None:
            rates["gpu"] = util
        return SimpleNamespace(**rates)

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        extra = (version,) if version else ()
        return SimpleNamespace(**self._dev(h, "nvmlDeviceGetMemoryInfo", *extra))

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        ids = [f[0] if isinstance(f, (tuple, list)) else f for f in field_ids]
        self.call_log.append(("nvmlDeviceGetFieldValues", (h.index, tuple(ids))))
        recorded = self._ret(self.devices[h.index], "nvmlDeviceGetFieldValues", "nvmlDeviceGetFieldValues", h.index)
        out = []
        for fid in ids:
            rec = recorded.get(str(fid))
            if rec is None or f"field:{fid}" in self.not_supported:
                rec = {
                    "value": 0,
                    "valueType": 1,
                    "nvmlReturn": _real.NVML_ERROR_NOT_SUPPORTED,
                    "timestamp": 0,
                    "latencyUsec": 0,
                }
            injected = self._injected(f"field:{fid}")
            if injected is not None:
                rec = {"value": 0, "valueType": 1, "nvmlReturn": injected, "timestamp": 0, "latencyUsec": 0}
            v = rec["value"]
            if self.activity and fid in (185, 186) and rec.get("nvmlReturn", 0) == 0:  # average, instant power (mW)
                _, busy_w, weight = self._busy()
                if busy_w is not None:
                    v = int(round(v + (busy_w * 1000.0 - v) * weight))
            value = SimpleNamespace(dVal=v, uiVal=v, ulVal=v, ullVal=v, sllVal=v, siVal=v, usVal=v)
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    scopeId=0,
                    timestamp=rec.get("timestamp", 0),
                    latencyUsec=rec.get("latencyUsec", 0),
                    valueType=rec.get("valueType", 1),
                    nvmlReturn=rec.get("nvmlReturn", 0),
                    value=value,
                )
            )
        return out

    def calls(self, fn: str) -> list[tuple]:
        """Arguments of every logged call to `fn` in this process (tests)."""
        return [args for name, args in self.call_log if name == fn]


# ------------------------------------------------------------------------------------------------------------
# A synthetic trace shaped after the H200 facts in /work/shared/MEASUREMENT.md (until a recording replaces it)
# ------------------------------------------------------------------------------------------------------------
def synthetic_h200_trace(
    seconds: float = 24.0, hz: float = 10.0, seed: int = 0, load: tuple[float, float] = (6.0, 18.0)
) -> dict[str, Any]:
    """One H200: idle 85 W, a bf16 matmul load at 686-690 W against the 700 W limit (sw_power_cap) during `load`,
    idle again. Power, average power and the energy counter change every 100 ms; the counter is the exact sum of
    the 100 ms power steps. Call durations: energy counter 3.3-3.8 ms, field values ~0.1 ms, memory info 0.04 ms
    (MEASUREMENT.md); the other call durations are assumptions (0.03-0.06 ms)."""
    rng = random.Random(seed)
    step = 0.1
    n_steps = int(round(seconds / step)) + 1
    lo, hi = load
    power = []  # W during step k = [k*0.1, (k+1)*0.1)
    for k in range(n_steps):
        t = k * step
        if lo <= t < hi:
            ramp = min(1.0, (t - lo) / 0.5)
            p = 85.0 + ramp * (688.0 + rng.uniform(-2.0, 2.0) - 85.0)
        elif hi <= t < hi + 0.5:
            p = 688.0 - (t - hi) / 0.5 * (688.0 - 85.0)
        else:
            p = 85.0 + rng.uniform(-0.4, 0.4)
        power.append(p)
    energy0 = 41_234_567_890.0  # mJ since driver load (made up)
    energy = [energy0]
    for p in power[:-1]:
        energy.append(energy[-1] + p * step * 1000.0)  # W x s = J -> mJ

    def step_of(t: float) -> int:
        return min(int(t / step), n_steps - 1)

    def avg_power(k: int) -> float:  # NVML_FI_DEV_POWER_AVERAGE: ~1 s average
        window = power[max(0, k - 9) : k + 1]
        return sum(window) / len(window)

    def under_load(t: float) -> bool:
        return lo <= t < hi + 0.5

    temp = 29.0
    hbm = 33.0
    calls: dict[str, list[list[Any]]] = {}

    def add(key: str, t: float, dur: float, ret: Any) -> None:
        calls.setdefault(key, []).append([round(t * 1000.0, 3), round(dur, 4), ret])

    add("nvmlDeviceGetUUID", 0.0, 0.02, "GPU-5e7e71c0-0000-4000-8000-00000000h200")
    add("nvmlDeviceGetName", 0.0, 0.02, "NVIDIA H200")
    add("nvmlDeviceGetIndex", 0.0, 0.01, 0)
    add("nvmlDeviceGetEnforcedPowerLimit", 0.0, 0.03, 700000)
    add("nvmlDeviceGetPersistenceMode", 0.0, 0.02, 1)
    total_bytes = 143_771 * 1024 * 1024
    n_samples = int(seconds * hz)
    for i in range(n_samples):
        t = i / hz + rng.uniform(0.0, 0.002)
        k = step_of(t)
        busy = under_load(t)
        temp += ((62.0 if busy else 29.0) - temp) * 0.02
        hbm += ((55.0 if busy else 33.0) - hbm) * 0.02
        fields = {
            "186": {
                "value": int(power[k] * 1000),
                "valueType": 1,
                "nvmlReturn": 0,
                "timestamp": int((k * step) * 1e6),
                "latencyUsec": 0,
            },
            "185": {
                "value": int(avg_power(k) * 1000),
                "valueType": 1,
                "nvmlReturn": 0,
                "timestamp": int((k * step) * 1e6),
                "latencyUsec": 0,
            },
            "82": {
                "value": int(round(hbm)),
                "valueType": 1,
                "nvmlReturn": 0,
                "timestamp": int((k * step) * 1e6),
                "latencyUsec": 0,
            },
        }
        add("nvmlDeviceGetFieldValues", t, rng.uniform(0.09, 0.13), fields)
        add(ENERGY_KEY, t + 0.0002, rng.uniform(3.3, 3.8), int(energy[k]))
        used = (17_850 if busy else 1_310) * 1024 * 1024
        add(
            "nvmlDeviceGetMemoryInfo:33554472",
            t + 0.004,
            0.04,
            {
                "version": 33554472,
                "total": total_bytes,
                "reserved": 520 * 1024 * 1024,
                "free": total_bytes - used,
                "used": used,
            },
        )
        add(
            "nvmlDeviceGetUtilizationRates",
            t + 0.0041,
            rng.uniform(0.04, 0.06),
            {"gpu": 100 if busy else 0, "memory": 38 if busy else 0},
        )
        add("nvmlDeviceGetClockInfo:1", t + 0.0042, 0.03, int(1755 + rng.uniform(-60, 60)) if busy else 345)
        add("nvmlDeviceGetClockInfo:2", t + 0.0043, 0.03, 3201 if busy else 3201)
        add("nvmlDeviceGetTemperature:0", t + 0.0044, 0.05, int(round(temp)))
        add("nvmlDeviceGetCurrentClocksEventReasons", t + 0.0045, 0.03, 0x4 if busy else 0x1)
        add("nvmlDeviceGetEnforcedPowerLimit", t + 0.0046, 0.03, 700000)
    return {
        "format": TRACE_FORMAT,
        "synthetic": True,
        "provenance": SYNTHETIC_PROVENANCE,
        "generator": "wattbench_agent.telemetry.fake_nvml.synthetic_h200_trace"
        f"(seconds={seconds}, hz={hz}, seed={seed}, load={list(load)})",
        "driver_version": "580.159.04",
        "hz": hz,
        "seconds": seconds,
        "phases": [
            {"name": "idle", "start_s": 0.0},
            {"name": "matmul_bf16", "start_s": lo},
            {"name": "idle", "start_s": hi},
        ],
        "system": {"nvmlSystemGetDriverVersion": [[0.0, 0.02, "580.159.04"]], "nvmlDeviceGetCount": [[0.0, 0.01, 1]]},
        "devices": [{"index": 0, "calls": calls}],
    }


# ------------------------------------------------------------------------------------------------------------
# A small SYNTHETIC trace with the fault cases the H200 recording does not contain
# ------------------------------------------------------------------------------------------------------------
def synthetic_faults_trace(
    seconds: float = 3.0, reset_at_s: float = 1.5, lost: tuple[float, float] = (2.0, 2.4)
) -> dict[str, Any]:
    """SYNTHETIC, not a recording: an idle H200-shaped trace (synthetic_h200_trace) edited to hold, as recorded
    answers, what a faulty GPU would return: nvmlDeviceGetUtilizationRates answers NOT_SUPPORTED and field 82 (HBM
    temperature) has a per-field NOT_SUPPORTED return throughout; the energy counter restarts near zero at
    `reset_at_s`; every per-sample call answers GPU_IS_LOST during `lost`. The fault instants are listed under
    "faults" so tests read them from the file. tests/telemetry/traces/synthetic_faults.json is this output."""
    trace = synthetic_h200_trace(seconds=seconds, seed=1, load=(seconds, seconds))  # idle only
    calls = trace["devices"][0]["calls"]
    not_supported = {"nvml_error": int(_real.NVML_ERROR_NOT_SUPPORTED)}
    gpu_lost = {"nvml_error": int(_real.NVML_ERROR_GPU_IS_LOST)}
    calls["nvmlDeviceGetUtilizationRates"] = [
        [t, d, not_supported] for t, d, _ in calls["nvmlDeviceGetUtilizationRates"]
    ]
    for _, _, fields in calls["nvmlDeviceGetFieldValues"]:
        fields["82"].update(value=0, nvmlReturn=int(_real.NVML_ERROR_NOT_SUPPORTED))
    energy = calls[ENERGY_KEY]
    base = next(e for t, _, e in energy if t >= reset_at_s * 1000.0) - 1000
    for entry in energy:
        if entry[0] >= reset_at_s * 1000.0:
            entry[2] -= base  # restarts near zero (as after a driver reload)
    for entries in calls.values():
        if len(entries) > 1:  # the per-sample calls
            for entry in entries:
                if lost[0] * 1000.0 <= entry[0] < lost[1] * 1000.0:
                    entry[2] = gpu_lost
    trace.update(
        provenance=FAULTS_PROVENANCE,
        generator=f"wattbench_agent.telemetry.fake_nvml.synthetic_faults_trace(seconds={seconds}, "
        f"reset_at_s={reset_at_s}, lost={list(lost)})",
        phases=[{"name": "idle", "start_s": 0.0}],
        faults=[
            {"kind": "not_supported", "calls": ["nvmlDeviceGetUtilizationRates", "field:82"]},
            {"kind": "counter_reset", "at_s": reset_at_s},
            {"kind": "nvml_error", "code": int(_real.NVML_ERROR_GPU_IS_LOST), "from_s": lost[0], "until_s": lost[1]},
        ],
    )
    return trace


def node_trace(trace: dict[str, Any] | str | Path, n_gpus: int) -> dict[str, Any]:
    """A node of `n_gpus` GPUs for the fake NVML: the trace's first device cloned, each clone with its own UUID
    and index (SYNTHETIC: every GPU replays the same recording; what differs is which GPUs a deployment is given
    and whose counters it sums)."""
    data = trace if isinstance(trace, dict) else json.loads(Path(trace).read_text(encoding="utf-8"))
    base = data["devices"][0]
    uuid0 = base["calls"]["nvmlDeviceGetUUID"][0][2]
    devices = []
    for i in range(n_gpus):
        calls = json.loads(json.dumps(base["calls"]))  # deep copy
        calls["nvmlDeviceGetUUID"] = [[e[0], e[1], f"{uuid0[:-4]}{i:04d}"] for e in calls["nvmlDeviceGetUUID"]]
        calls["nvmlDeviceGetIndex"] = [[e[0], e[1], i] for e in calls.get("nvmlDeviceGetIndex", [[0.0, 0.01, i]])]
        devices.append({**base, "index": i, "calls": calls})
    system = json.loads(json.dumps(data["system"]))
    system["nvmlDeviceGetCount"] = [[0.0, 0.01, n_gpus]]
    return {
        **data,
        "synthetic": True,
        "system": system,
        "devices": devices,
        "provenance": f"{data.get('provenance', 'a trace')}; cloned to {n_gpus} GPUs (synthetic node)",
    }
