"""`wattbench telemetry record`: capture raw NVML returns (with per-call timing) for the fake NVML to replay.

It drives the very sampler code (NvmlSource.sample / read_energy) through a recording wrapper around pynvml,
so the trace holds exactly the calls, arguments and return values the fake replays (fake_nvml.py documents
the format). Optionally it runs a bf16 matmul load on the GPU for the middle half of the recording
(`--load matmul`, needs torch) so one recording covers idle -> power-capped load -> idle.

The load process announces on stdout when its first matmul batch has finished ("wattbench-load: busy") and when it
stops ("wattbench-load: done"); the recorder stamps those lines, so `phases` and `load_window_s` say when the GPU was
actually loaded (torch's import and CUDA start-up take seconds: the "load_starting" phase), and `load_planned_s`
keeps the planned window.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from wattbench_agent.telemetry.fake_nvml import TRACE_FORMAT, call_key
from wattbench_agent.telemetry.sources import NvmlSource, load_nvml

_MATMUL = r"""
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
first = True
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    if first:
        print("wattbench-load: busy", flush=True)
        first = False
print("wattbench-load: done", flush=True)
"""
LOAD_MARK = "wattbench-load: "


def _stamp_marks(stream: Any, start: float, marks: dict[str, float]) -> None:
    """Reader thread: the recording time (s) of each 'wattbench-load: X' line of the load process."""
    for line in stream:
        if line.startswith(LOAD_MARK):
            marks.setdefault(line[len(LOAD_MARK) :].strip(), round(time.perf_counter() - start, 3))


def _plain(value: Any) -> Any:
    """A raw NVML return made JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: _plain(getattr(value, name)) for name, *_ in fields}
    if hasattr(value, "__dict__"):  # fake NVML's SimpleNamespace
        return {k: _plain(v) for k, v in vars(value).items()}
    return repr(value)


def _field_values(values: Any) -> dict[str, Any]:
    members = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    out = {}
    for fv in values:
        vt = int(fv.valueType)
        out[str(int(fv.fieldId))] = {
            "value": getattr(fv.value, members[vt] if 0 <= vt <= 6 else "ullVal"),
            "valueType": vt,
            "nvmlReturn": int(fv.nvmlReturn),
            "scopeId": int(fv.scopeId),
            "timestamp": int(fv.timestamp),
            "latencyUsec": int(fv.latencyUsec),
        }
    return out


def _handle_key(handle: Any) -> Any:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class RecordingNvml:
    """Wraps an NVML module; every nvml* call is passed through and logged as [t_ms, dur_ms, RET]."""

    def __init__(self, real: Any):
        self._real = real
        self.NVMLError = real.NVMLError
        self.t0_ns = time.perf_counter_ns()
        self.system: dict[str, list] = {}
        self.devices: dict[int, dict[str, list]] = {}
        self._index_of: dict[Any, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if not (callable(attr) and name.startswith("nvml")) or name in ("nvmlInit", "nvmlShutdown"):
            return attr

        def wrapper(*args: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                ret = attr(*args)
                err = None
            except self._real.NVMLError as exc:
                ret, err = None, exc
            t1 = time.perf_counter_ns()
            self._log(name, args, t0, t1, ret, err)
            if err is not None:
                raise err
            return ret

        return wrapper

    def _log(self, name: str, args: tuple, t0: int, t1: int, ret: Any, err: Exception | None) -> None:
        if name in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByUUID"):
            if err is None:
                index = args[0] if name.endswith("Index") else self._real.nvmlDeviceGetIndex(ret)
                self._index_of[_handle_key(ret)] = int(index)
            return
        entry_ret: Any
        if err is not None:
            entry_ret = {"nvml_error": int(getattr(err, "value", -1))}
        elif name == "nvmlDeviceGetFieldValues":
            entry_ret = _field_values(ret)
        else:
            entry_ret = _plain(ret)
        entry = [round((t0 - self.t0_ns) / 1e6, 3), round((t1 - t0) / 1e6, 4), entry_ret]
        if name.startswith("nvmlDevice") and name != "nvmlDeviceGetCount":
            index = self._index_of.get(_handle_key(args[0]), -1)
            extra = tuple(args[2:]) if name == "nvmlDeviceGetFieldValues" else tuple(args[1:])
            self.devices.setdefault(index, {}).setdefault(call_key(name, extra), []).append(entry)
        else:
            self.system.setdefault(call_key(name, tuple(args)), []).append(entry)


def record(
    seconds: float,
    out: str | Path,
    hz: float = 10.0,
    gpu_uuids: list[str] | None = None,
    load: str = "none",
    nvml_spec: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Record `seconds` of NVML returns at `hz` into `out`; returns the trace dict (also written to `out`)."""
    rec = RecordingNvml(load_nvml(nvml_spec))
    src = NvmlSource(gpu_uuids, nvml_module=rec)
    src.open()
    load_proc = None
    load_planned = None
    load_exit_s = None
    marks: dict[str, float] = {}  # 'busy' / 'done' -> recording seconds, stamped by the reader thread
    reader = None
    period = 1.0 / hz
    start = time.perf_counter()
    next_t = start
    last_energy_read = start
    try:
        while True:
            now = time.perf_counter()
            elapsed = now - start
            if elapsed >= seconds:
                break
            if load == "matmul" and load_proc is None and elapsed >= seconds / 4:
                load_planned = (round(elapsed, 3), round(seconds * 3 / 4, 3))
                load_proc = subprocess.Popen(
                    [sys.executable, "-c", _MATMUL, str(seconds / 2)],
                    env={**os.environ, "CUDA_VISIBLE_DEVICES": src.gpus[0]["uuid"]},
                    stdout=subprocess.PIPE,
                    text=True,
                )
                reader = threading.Thread(target=_stamp_marks, args=(load_proc.stdout, start, marks), daemon=True)
                reader.start()
            if load_proc is not None and load_exit_s is None and load_proc.poll() is not None:
                load_exit_s = round(elapsed, 3)
            src.sample()
            if now - last_energy_read >= 1.0:  # window-boundary style reads too, as the caller makes them
                src.read_energy()
                last_energy_read = now
            next_t += period
            time.sleep(max(0.0, next_t - time.perf_counter()))
    finally:
        if load_proc is not None:
            try:
                load_proc.wait(timeout=max(5.0, seconds))
            except subprocess.TimeoutExpired:
                load_proc.terminate()
        if reader is not None:
            reader.join(5)
        src.close()
    phases = [{"name": "idle", "start_s": 0.0}]
    load_window = None
    if load_planned is not None:
        busy, done = marks.get("busy"), marks.get("done", load_exit_s)
        phases.append({"name": "load_starting", "start_s": load_planned[0]})
        if busy is not None:
            phases.append({"name": "matmul_bf16", "start_s": busy})
            load_window = (busy, done)
        if done is not None and done < seconds:
            phases.append({"name": "idle", "start_s": done})
    try:
        from importlib.metadata import version

        nvml_version = version("nvidia-ml-py")
    except Exception:  # noqa: BLE001
        nvml_version = None
    trace = {
        "format": TRACE_FORMAT,
        "synthetic": bool(nvml_spec and nvml_spec.get("fake")),
        "provenance": (
            "re-recorded from a fake NVML (test)"
            if nvml_spec and nvml_spec.get("fake")
            else f"recorded with `wattbench telemetry record` on {socket.gethostname()}"
        ),
        "recorded_unix": time.time(),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "nvidia_ml_py": nvml_version,
        "driver_version": src.driver_version,
        "hz": hz,
        "seconds": seconds,
        "load": load,
        "load_window_s": load_window,  # observed: first batch done -> load stopped (None: never got busy)
        "load_planned_s": load_planned,
        "phases": phases,
        "call_stats": src.stats.summary(),
        "system": rec.system,
        "devices": [{"index": i, "calls": rec.devices[i]} for i in sorted(k for k in rec.devices if k >= 0)],
    }
    # devices are numbered 0..n-1 in the trace (the fake's handles); keep the NVML index inside the calls
    for pos, d in enumerate(trace["devices"]):
        d["nvml_index"] = d["index"]
        d["index"] = pos
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(trace, separators=(",", ":")), encoding="utf-8")
    if progress:
        n = sum(len(v) for d in trace["devices"] for v in d["calls"].values())
        print(f"recorded {n} NVML calls on {len(trace['devices'])} GPU(s) over {seconds:.0f} s -> {out}")
        for fn, s in src.stats.summary().items():
            print(f"  {fn:45s} n={s['n']:5d} mean={s['mean_ms']:.3f} ms max={s['max_ms']:.3f} ms")
    return trace
