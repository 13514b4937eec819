"""Where GPU telemetry comes from: NVML (real GPUs, or the fake NVML replaying a trace) or the emulator.

A source is used in two places: inside the sampler process (`sample()` at the sampling rate) and in the
caller's process (`read_energy()` at window boundaries, with its own NVML handle). Both produce values in the
units of sql/schema.sql (W, mJ, MiB, %, MHz, degC). A value NVML does not report is None, never 0.

Agent-side code: stdlib, `pynvml` (nvidia-ml-py) and httpx only.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

# gpu_samples columns a source fills in (deployment_id, run_id and source are added by the sampler).
SAMPLE_COLUMNS = (
    "gpu_uuid",
    "gpu_index",
    "t_ns",
    "power_w",
    "power_avg_w",
    "energy_mj",
    "hbm_used_mib",
    "hbm_total_mib",
    "util_gpu_pct",
    "util_mem_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temp_c",
    "hbm_temp_c",
    "power_limit_w",
    "clock_event_reasons",
    "clock_events",
)

# NVML field ids read in ONE nvmlDeviceGetFieldValues call per GPU and sample (values as in nvml.h).
FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT, mW
FI_POWER_AVERAGE = 185  # NVML_FI_DEV_POWER_AVERAGE, mW
FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP, degC (HBM)
SAMPLE_FIELDS = (FI_POWER_INSTANT, FI_POWER_AVERAGE, FI_MEMORY_TEMP)

NVML_ERROR_NOT_SUPPORTED = 3
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_V2 = 0x02000028  # nvmlMemory_v2
MIB = 1024 * 1024

# nvmlClocksEventReason* bits (nvml.h), decoded into gpu_samples.clock_events.
CLOCK_EVENT_BITS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


class TelemetryUnavailable(RuntimeError):
    """The requested telemetry source cannot be opened (no NVML library, no GPU, emulator unreachable)."""


def decode_clock_events(mask: int | None) -> str | None:
    """NVML clock-event bitmask -> 'sw_power_cap,hw_slowdown' ('' for none, None when unknown)."""
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_EVENT_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in CLOCK_EVENT_BITS)
    if rest:
        names.append(f"unknown_0x{rest:x}")
    return ",".join(names)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def load_nvml(spec: dict[str, Any] | None = None):
    """The NVML module to use: real `pynvml`, or the fake NVML when `spec` (or $WATTBENCH_FAKE_NVML) names a trace.

    spec: None | {"fake": TRACE_PATH, "epoch_ns": ..., "speed": ..., "start_offset_s": ..., "reset_after_s": ...,
    "not_supported": [...], "latency_scale": ...} (see fake_nvml.FakeNvml).
    """
    if spec is None and os.environ.get("WATTBENCH_FAKE_NVML"):
        spec = {"fake": os.environ["WATTBENCH_FAKE_NVML"]}
    if spec and spec.get("fake"):
        from wattbench_agent.telemetry.fake_nvml import FakeNvml

        return FakeNvml(**{k: v for k, v in spec.items() if k != "fake"}, trace=spec["fake"])
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:  # nvidia-ml-py not installed
        raise TelemetryUnavailable(f"nvidia-ml-py (module pynvml) is not installed: {exc}") from exc


class CallStats:
    """Latency of every NVML (or HTTP) call a source makes, per function."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {}  # fn -> [n, total_ns, errors, max_ns]

    def add(self, fn: str, dur_ns: int, error: bool = False) -> None:
        s = self.calls.setdefault(fn, [0, 0, 0, 0])
        s[0] += 1
        s[1] += dur_ns
        s[2] += int(error)
        s[3] = max(s[3], dur_ns)

    def summary(self) -> dict[str, dict[str, float]]:
        return {
            fn: {"n": int(n), "mean_ms": round(total / n / 1e6, 4), "max_ms": round(mx / 1e6, 4), "errors": int(err)}
            for fn, (n, total, err, mx) in sorted(self.calls.items())
            if n
        }


class NvmlSource:
    """Samples the GPUs of one deployment (selected by UUID) through NVML."""

    kind = "nvml"

    def __init__(
        self,
        gpu_uuids: list[str] | None = None,
        nvml_spec: dict[str, Any] | None = None,
        sample_energy: bool = True,
        nvml_module: Any = None,
    ):
        self.wanted = list(gpu_uuids) if gpu_uuids else None
        self.nvml_spec = nvml_spec
        self.sample_energy = sample_energy
        self.nvml = nvml_module  # given: use it as is (the recorder passes its recording wrapper)
        self.gpus: list[dict[str, Any]] = []  # {uuid, index, name, handle, power_limit_w, persistence_mode}
        self.driver_version: str | None = None
        self.stats = CallStats()
        self._unsupported: set[tuple[int, str]] = set()
        self._initialised = False
        self._seen_errors: set[tuple[int, int | None]] = set()
        self._new_errors: list[tuple[str, int | None, str]] = []  # (gpu uuid, NVML code, text), first of each

    # -- plumbing ---------------------------------------------------------------------------------------------
    def _call(self, fn: str, *args: Any, gpu: int = -1, key: str | None = None) -> Any:
        """Call nvml.<fn>(*args); None when NVML says 'not supported' (remembered, not asked again) or fails."""
        key = key or fn
        if (gpu, key) in self._unsupported:
            return None
        nvml = self.nvml
        t0 = time.perf_counter_ns()
        try:
            value = getattr(nvml, fn)(*args)
        except nvml.NVMLError as exc:
            self.stats.add(fn, time.perf_counter_ns() - t0, error=True)
            code = getattr(exc, "value", None)
            if code == NVML_ERROR_NOT_SUPPORTED:
                self._unsupported.add((gpu, key))
            elif (gpu, code) not in self._seen_errors:  # any other error: the caller reports the first one
                self._seen_errors.add((gpu, code))
                who = self.gpus[gpu]["uuid"] if 0 <= gpu < len(self.gpus) else "NVML"
                self._new_errors.append((who, code, f"NVML error on {who}: {exc} (NVML code {code}, first in {fn})"))
            return None
        except AttributeError:  # function absent from this nvidia-ml-py
            self._unsupported.add((gpu, key))
            return None
        self.stats.add(fn, time.perf_counter_ns() - t0)
        return value

    # -- lifecycle --------------------------------------------------------------------------------------------
    def open(self) -> dict[str, Any]:
        if self.nvml is None:
            self.nvml = load_nvml(self.nvml_spec)
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise TelemetryUnavailable(f"NVML could not be initialised: {exc}") from exc
        self._initialised = True
        driver = self._call("nvmlSystemGetDriverVersion")
        self.driver_version = _text(driver) if driver is not None else None
        handles = []
        if self.wanted:
            for uuid in self.wanted:
                try:
                    handles.append(nvml.nvmlDeviceGetHandleByUUID(uuid))
                except nvml.NVMLError as exc:
                    self.close()
                    raise TelemetryUnavailable(f"GPU {uuid} not found by NVML: {exc}") from exc
        else:
            count = self._call("nvmlDeviceGetCount") or 0
            if not count:
                self.close()
                raise TelemetryUnavailable("NVML sees no GPU")
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        for pos, handle in enumerate(handles):
            uuid = self._call("nvmlDeviceGetUUID", handle, gpu=pos)
            name = self._call("nvmlDeviceGetName", handle, gpu=pos)
            index = self._call("nvmlDeviceGetIndex", handle, gpu=pos)
            limit = self._call("nvmlDeviceGetEnforcedPowerLimit", handle, gpu=pos)
            persistence = self._call("nvmlDeviceGetPersistenceMode", handle, gpu=pos)
            serial = self._call("nvmlDeviceGetSerial", handle, gpu=pos)  # the board's, as printed on it
            pci = self._call("nvmlDeviceGetPciInfo", handle, gpu=pos)
            bus_id = getattr(pci, "busId", None) if pci is not None else None
            self.gpus.append(
                {
                    "uuid": _text(uuid) if uuid is not None else (self.wanted[pos] if self.wanted else f"gpu{pos}"),
                    "index": index,
                    "name": _text(name) if name is not None else None,
                    "handle": handle,
                    "power_limit_w": limit / 1000.0 if limit is not None else None,
                    "persistence_mode": bool(persistence) if persistence is not None else None,
                    "serial": _text(serial) if serial else None,
                    "pci_bus_id": _text(bus_id) if bus_id else None,
                }
            )
        return self.info()

    def take_errors(self) -> list[tuple[str, int | None, str]]:
        """NVML errors (other than NOT_SUPPORTED) seen for the first time since the last call: (uuid, code, text)."""
        errors, self._new_errors = self._new_errors, []
        return errors

    def info(self) -> dict[str, Any]:
        return {
            "gpus": [
                {
                    k: g[k]
                    for k in ("uuid", "index", "name", "power_limit_w", "persistence_mode", "serial", "pci_bus_id")
                }
                for g in self.gpus
            ],
            "driver_version": self.driver_version,
        }

    def close(self) -> None:
        if self._initialised:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down what may already be gone
                pass
            self._initialised = False

    # -- readings ---------------------------------------------------------------------------------------------
    def _fields(self, pos: int, handle: Any) -> dict[int, float | None]:
        values = self._call("nvmlDeviceGetFieldValues", handle, list(SAMPLE_FIELDS), gpu=pos)
        out: dict[int, float | None] = {f: None for f in SAMPLE_FIELDS}
        if values is None:
            return out
        for fv in values:
            if fv.nvmlReturn != 0:
                continue
            member = (
                ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[fv.valueType]
                if 0 <= fv.valueType <= 6
                else "ullVal"
            )
            out[int(fv.fieldId)] = getattr(fv.value, member)
        return out

    def sample(self) -> list[dict[str, Any]]:
        """One row per GPU: one batched field-values call for power, then the cheap calls."""
        rows = []
        for pos, g in enumerate(self.gpus):
            h = g["handle"]
            t0 = time.perf_counter_ns()
            f = self._fields(pos, h)
            t1 = time.perf_counter_ns()
            energy = self._call("nvmlDeviceGetTotalEnergyConsumption", h, gpu=pos) if self.sample_energy else None
            mem = self._call("nvmlDeviceGetMemoryInfo", h, NVML_MEMORY_V2, gpu=pos, key="mem_v2")
            util = self._call("nvmlDeviceGetUtilizationRates", h, gpu=pos)
            sm = self._call("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM, gpu=pos, key="clock_sm")
            memclk = self._call("nvmlDeviceGetClockInfo", h, NVML_CLOCK_MEM, gpu=pos, key="clock_mem")
            temp = self._call("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU, gpu=pos)
            reasons = self._call("nvmlDeviceGetCurrentClocksEventReasons", h, gpu=pos)
            limit = self._call("nvmlDeviceGetEnforcedPowerLimit", h, gpu=pos)
            p, pa, hbm_t = f[FI_POWER_INSTANT], f[FI_POWER_AVERAGE], f[FI_MEMORY_TEMP]
            rows.append(
                {
                    "gpu_uuid": g["uuid"],
                    "gpu_index": g["index"],
                    "t_ns": (t0 + t1) // 2,
                    "power_w": p / 1000.0 if p is not None else None,
                    "power_avg_w": pa / 1000.0 if pa is not None else None,
                    "energy_mj": float(energy) if energy is not None else None,
                    "hbm_used_mib": mem.used / MIB if mem is not None else None,
                    "hbm_total_mib": mem.total / MIB if mem is not None else None,
                    "util_gpu_pct": float(util.gpu) if util is not None else None,
                    "util_mem_pct": float(util.memory) if util is not None else None,
                    "sm_clock_mhz": float(sm) if sm is not None else None,
                    "mem_clock_mhz": float(memclk) if memclk is not None else None,
                    "temp_c": float(temp) if temp is not None else None,
                    "hbm_temp_c": float(hbm_t) if hbm_t is not None else None,
                    "power_limit_w": limit / 1000.0 if limit is not None else None,
                    "clock_event_reasons": int(reasons) if reasons is not None else None,
                    "clock_events": decode_clock_events(int(reasons)) if reasons is not None else None,
                }
            )
        return rows

    def read_energy(self) -> dict[str, tuple[float | None, int]]:
        """The energy counter of every GPU now: {uuid: (mJ or None, t_ns at the middle of the read)}."""
        out = {}
        for pos, g in enumerate(self.gpus):
            t0 = time.perf_counter_ns()
            energy = self._call("nvmlDeviceGetTotalEnergyConsumption", g["handle"], gpu=pos)
            t1 = time.perf_counter_ns()
            out[g["uuid"]] = (float(energy) if energy is not None else None, (t0 + t1) // 2)
        return out


class ScrapedSource:
    """What the telemetry sources read over HTTP share: the URL, the deployment's GPUs by UUID (all when None), one
    client, and each GET timed into the sampler's call statistics (its midpoint is the samples' time)."""

    call_name = "GET"

    def __init__(self, url: str, gpu_uuids: list[str] | None = None, timeout_s: float = 2.0):
        self.url = url
        self.wanted = list(gpu_uuids) if gpu_uuids else None
        self.timeout_s = timeout_s
        self.client = None
        self.gpus: list[dict[str, Any]] = []
        self.driver_version: str | None = None
        self.stats = CallStats()

    def _timed_get(self, decode) -> tuple[Any, int]:
        """GET the URL and decode the response; (what decode returned, host-clock midpoint of the call in ns)."""
        t0 = time.perf_counter_ns()
        try:
            resp = self.client.get(self.url)
            resp.raise_for_status()
            payload = decode(resp)
        except Exception:
            self.stats.add(self.call_name, time.perf_counter_ns() - t0, error=True)
            raise
        t1 = time.perf_counter_ns()
        self.stats.add(self.call_name, t1 - t0)
        return payload, (t0 + t1) // 2

    def info(self) -> dict[str, Any]:
        return {"gpus": [dict(g) for g in self.gpus], "driver_version": self.driver_version}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


class EmulatedSource(ScrapedSource):
    """The built-in emulator's modelled telemetry: GET {url}/emulator/telemetry (docs/CONTRACTS.md section 3)."""

    kind = "emulated"
    call_name = "GET /emulator/telemetry"

    def __init__(self, url: str, gpu_uuids: list[str] | None = None, timeout_s: float = 2.0):
        if not url:
            raise TelemetryUnavailable("kind='emulated' needs the emulator's url")
        super().__init__(url.rstrip("/") + "/emulator/telemetry", gpu_uuids, timeout_s)

    def _get(self) -> tuple[list[dict[str, Any]], int]:
        gpus, t_ns = self._timed_get(lambda resp: resp.json()["gpus"])
        if self.wanted:
            gpus = [g for g in gpus if g.get("gpu_uuid") in self.wanted]
        return gpus, t_ns

    def open(self) -> dict[str, Any]:
        import httpx

        self.client = httpx.Client(timeout=self.timeout_s)
        try:
            gpus, _ = self._get()
        except Exception as exc:  # noqa: BLE001
            self.close()
            raise TelemetryUnavailable(f"emulator telemetry at {self.url} unavailable: {exc}") from exc
        if not gpus:
            self.close()
            raise TelemetryUnavailable(f"emulator telemetry at {self.url} lists none of the GPUs {self.wanted}")
        self.gpus = [
            {
                "uuid": g["gpu_uuid"],
                "index": g.get("gpu_index"),
                "name": g.get("name"),
                "power_limit_w": g.get("power_limit_w"),
                "persistence_mode": None,
            }
            for g in gpus
        ]
        return self.info()

    def sample(self) -> list[dict[str, Any]]:
        try:
            gpus, t_ns = self._get()
        except Exception:  # noqa: BLE001 - a missed sample is skipped, never invented
            return []
        rows = []
        for g in gpus:
            row = {col: g.get(col) for col in SAMPLE_COLUMNS if col != "t_ns"}
            row["t_ns"] = t_ns  # host clock of this process, comparable with window boundaries
            rows.append(row)
        return rows

    def read_energy(self) -> dict[str, tuple[float | None, int]]:
        try:
            gpus, t_ns = self._get()
        except Exception:  # noqa: BLE001
            return {g["uuid"]: (None, time.perf_counter_ns()) for g in self.gpus}
        by_uuid = {g.get("gpu_uuid"): g.get("energy_mj") for g in gpus}
        return {g["uuid"]: (by_uuid.get(g["uuid"]), t_ns) for g in self.gpus}
