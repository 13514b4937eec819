"""The GPU sampler: a separate process sampling at `hz`, and energy windows read from the energy counter.

    with open_sampler(kind="nvml", gpu_uuids=[...], hz=10, out=bundle, deployment_id="d1") as sampler:
        base = idle_baseline(sampler, 10, "idle_before")
        sampler.begin_window("lp0"); ...; w = sampler.end_window("lp0")   # {uuid: J, total_j, trace_j, ...}
    sampler.info()   # deployments columns incl. sampler_cpu_share, sampler_call_ms

Design (docs/TELEMETRY.md has the why and the measured costs):
- The sampling loop runs in its own process (multiprocessing 'spawn'), so neither it nor the load generator
  disturbs the other. It sends each tick's rows over a pipe; a thread here batches them into the bundle's
  gpu_samples (about once a second) and keeps the instant-power trace for the windows.
- Window boundaries are read HERE, synchronously, with this process's own NVML handle (or its own HTTP client for
  the emulator): no round trip through the sampler, no waiting behind a sampling tick.
- kind='none' (or NVML missing): one warning line, no samples, every energy value None (NULL).

Agent-side code: stdlib, pynvml and httpx only.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import sys
import threading
import time
from typing import Any

from wattbench_agent.telemetry.kinds import make_source
from wattbench_agent.telemetry.sources import TelemetryUnavailable

KINDS = ("nvml", "dcgm", "emulated", "none")

TRACE_DISAGREE = 0.02  # flag a window when counter and integrated trace differ by more than 2 %
# Quiet GPUs (before an idle baseline): every GPU's utilisation 0 and its power within QUIET_TOL_W (or QUIET_TOL_REL of
# its level, if more) over the last quiet_s seconds of samples. After load a GPU keeps running kernels for a moment and
# its power falls over seconds: an idle window taken at once reads idle high (the H200 bundles: up to 716 W inside
# idle windows, idle up to ~8 W high).
QUIET_TOL_W = 5.0
QUIET_TOL_REL = 0.02
_RECENT_S = 120.0  # how much of each GPU's utilisation and power the quiet check keeps
FLUSH_S = 1.0  # how often sample rows are written to the bundle
MAX_TRACE_GAP_S = 0.5  # a window whose power trace has a longer hole (NVML errors, a stall) gets no trace_j


# ------------------------------------------------------------------------------------------------------------
# The sampler process
# ------------------------------------------------------------------------------------------------------------
def _sampler_main(kind: str, source_args: dict[str, Any], hz: float, data, ctrl) -> None:
    """Entry point of the sampler process: open the source, sample at hz until told to stop, report its cost."""
    try:
        source = make_source(kind, **source_args)
        source.open()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        data.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    data.send(("ready", source.info()))
    period_ns = int(1e9 / hz)
    ticks = missed = 0
    tick_ns_total = 0
    cpu0, wall0 = time.process_time(), time.perf_counter_ns()
    next_ns = wall0
    try:
        while True:
            t0 = time.perf_counter_ns()
            rows = source.sample()
            t1 = time.perf_counter_ns()
            ticks += 1
            tick_ns_total += t1 - t0
            if rows:
                data.send(("samples", rows))
            errors = source.take_errors() if hasattr(source, "take_errors") else []
            if errors:
                data.send(("call_errors", errors))
            next_ns += period_ns
            now = time.perf_counter_ns()
            if next_ns < now:  # fell behind (slow calls, CPU contention): skip ticks, never burst
                lag = (now - next_ns) // period_ns + 1
                missed += lag
                next_ns += lag * period_ns
            if ctrl.poll(max(0.0, (next_ns - time.perf_counter_ns()) / 1e9)) and ctrl.recv() == "stop":
                break
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        wall = time.perf_counter_ns() - wall0
        cpu = time.process_time() - cpu0
        stats = {
            "ticks": ticks,
            "missed_ticks": missed,
            "sampling_wall_s": wall / 1e9,
            "sampler_cpu_share": cpu / (wall / 1e9) if wall > 0 else None,
            "sampler_call_ms": tick_ns_total / ticks / 1e6 if ticks else None,
            "calls": source.stats.summary(),
        }
        source.close()
        try:
            data.send(("stats", stats))
        except (BrokenPipeError, OSError):
            pass


# ------------------------------------------------------------------------------------------------------------
# The caller's side
# ------------------------------------------------------------------------------------------------------------
class Sampler:
    """Handle on one deployment's telemetry. Use through `open_sampler(...)` as a context manager."""

    def __init__(
        self,
        kind: str,
        gpu_uuids: list[str] | None = None,
        url: str | None = None,
        hz: float = 10.0,
        out: Any = None,
        deployment_id: str | None = None,
        nvml: dict[str, Any] | None = None,
        strict: bool = False,
        sample_energy: bool = True,
        dcgm_url: str | None = None,
    ):
        if kind not in KINDS:
            raise ValueError(f"unknown telemetry kind {kind!r}; expected {', '.join(KINDS)}")
        if hz <= 0:
            raise ValueError(f"hz must be > 0, got {hz}")
        if out is not None and not deployment_id:
            raise ValueError("deployment_id is required when rows are written (out=...)")
        self.requested_kind = kind
        self.kind = kind
        self.gpu_uuids_requested = list(gpu_uuids) if gpu_uuids else None
        self.url = url
        self.hz = float(hz)
        self.out = out
        self.deployment_id = deployment_id
        self.nvml_spec = dict(nvml) if nvml else None
        self.strict = strict
        self.sample_energy = sample_energy
        self.dcgm_url = dcgm_url
        self.row_source = "emulated" if kind == "emulated" else "measured"
        self.telemetry_error: str | None = None
        self._src = None  # this process's source, for window reads
        self._src_info: dict[str, Any] = {"gpus": [], "driver_version": None}
        self._proc = None
        self._data = self._ctrl = None
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._trace: dict[str, list[tuple[int, float]]] = {}  # uuid -> [(t_ns, power_w)]
        self._recent: dict[str, collections.deque] = {}  # uuid -> (t_ns, util_gpu_pct, power_w), for quiet_for
        self._last_energy: dict[str, float] = {}
        self._resets: dict[str, list[int]] = {}  # uuid -> t_ns of counter resets seen in the samples
        self._stats: dict[str, Any] = {}
        self._stats_ready = threading.Event()
        self._windows: dict[str, dict[str, Any]] = {}
        self._ended: set[str] = set()
        self._window_read_ns: list[int] = []
        self.samples_written = 0
        self.sampler_error: str | None = None
        self.call_errors: list[str] = []  # NVML errors met while sampling or reading windows, one per GPU and code
        self._reported: set[tuple[str, Any]] = set()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> Sampler:
        if self.kind == "none":
            self._warn("telemetry kind 'none'")
            return self
        if self.nvml_spec and self.nvml_spec.get("fake") and "epoch_ns" not in self.nvml_spec:
            self.nvml_spec["epoch_ns"] = time.perf_counter_ns()  # one replay clock for both processes
        args = {
            "gpu_uuids": self.gpu_uuids_requested,
            "url": self.url,
            "nvml_spec": self.nvml_spec,
            "sample_energy": self.sample_energy,
        }
        if self.kind == "dcgm":
            args["dcgm_url"] = self.dcgm_url
        try:
            self._src = make_source(self.kind, **args)
            self._src_info = self._src.open()
        except TelemetryUnavailable as exc:
            self._src = None
            if self.strict:
                raise
            self._degrade(str(exc))
            return self
        ctx = mp.get_context("spawn")
        self._data, child_data = ctx.Pipe(duplex=False)
        child_ctrl, self._ctrl = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_sampler_main,
            name="wattbench-gpu-sampler",
            args=(self.kind, args, self.hz, child_data, child_ctrl),
            daemon=True,
        )
        self._proc.start()
        child_data.close()
        child_ctrl.close()
        if not self._data.poll(60):
            self._stop_process()
            return self._fail_start("sampler process did not start within 60 s")
        try:
            msg = self._data.recv()
        except (EOFError, OSError):  # the sampler process died before it reported ready
            return self._fail_start(f"sampler process exited with code {self._proc.exitcode} before it was ready")
        if msg[0] != "ready":
            self._stop_process()
            return self._fail_start(f"sampler process failed: {msg[1]}")
        self._reader = threading.Thread(target=self._read_loop, name="wattbench-sampler-reader", daemon=True)
        self._reader.start()
        return self

    def _fail_start(self, text: str) -> Sampler:
        if self._src is not None:
            self._src.close()
            self._src = None
        if self.strict:
            raise TelemetryUnavailable(text)
        self._degrade(text)
        return self

    def _degrade(self, reason: str) -> None:
        self.telemetry_error = reason
        self.kind = "none"
        self._src_info = {"gpus": [], "driver_version": None}
        self._warn(reason)

    def _warn(self, reason: str) -> None:
        print(
            f"wattbench telemetry: no GPU telemetry for deployment {self.deployment_id or '-'} ({reason}); "
            "gpu_samples stay empty and every energy value is NULL",
            file=sys.stderr,
            flush=True,
        )
        if self.out is not None and self.requested_kind != "none" and hasattr(self.out, "note_error"):
            self.out.note_error("telemetry_unavailable", reason)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        open_windows = sorted(set(self._windows) - self._ended)
        if open_windows:
            print(f"wattbench telemetry: windows never ended: {', '.join(open_windows)}", file=sys.stderr)
        if self._proc is not None:
            try:
                self._ctrl.send("stop")
            except (BrokenPipeError, OSError):
                pass
            self._stats_ready.wait(10)
            if self._reader is not None:
                self._reader.join(10)
            self._stop_process()
        self._flush()
        if self._src is not None:
            self._src.close()

    def _stop_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        proc.join(5)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- samples ----------------------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        last_flush = time.monotonic()
        while True:
            try:
                if not self._data.poll(0.25):
                    if not self._proc.is_alive() and not self._data.poll(0):
                        self.sampler_error = self.sampler_error or f"sampler process exited ({self._proc.exitcode})"
                        break
                    msg = None
                else:
                    msg = self._data.recv()
            except (EOFError, OSError):
                break
            if msg is not None:
                if msg[0] == "samples":
                    self._take(msg[1])
                elif msg[0] == "stats":
                    self._stats = msg[1]
                    self._stats_ready.set()
                    break
                elif msg[0] == "error":
                    self.sampler_error = msg[1]
                elif msg[0] == "call_errors":
                    self._report_call_errors(msg[1])
            if time.monotonic() - last_flush >= FLUSH_S:
                self._flush()
                last_flush = time.monotonic()
        self._stats_ready.set()

    def _take(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            for row in rows:
                uuid = row["gpu_uuid"]
                if row.get("power_w") is not None:
                    self._trace.setdefault(uuid, []).append((row["t_ns"], row["power_w"]))
                recent = self._recent.setdefault(uuid, collections.deque(maxlen=int(self.hz * _RECENT_S) + 1))
                recent.append((row["t_ns"], row.get("util_gpu_pct"), row.get("power_w")))
                e = row.get("energy_mj")
                if e is not None:
                    last = self._last_energy.get(uuid)
                    if last is not None and e < last:
                        self._resets.setdefault(uuid, []).append(row["t_ns"])
                    self._last_energy[uuid] = e
                row = dict(row, deployment_id=self.deployment_id, source=self.row_source)
                self._pending.append(row)

    def _flush(self) -> None:
        with self._lock:
            rows, self._pending = self._pending, []
        if rows and self.out is not None:
            self.out.write("gpu_samples", rows)
        self.samples_written += len(rows)

    def samples(self, uuid: str | None = None) -> list[tuple[int, float]]:
        """The instant-power trace kept in memory: [(t_ns, W)] of one GPU (the first when uuid is None)."""
        with self._lock:
            if uuid is None:
                uuid = next(iter(self._trace), None)
            return list(self._trace.get(uuid, []))

    def quiet_for(self, seconds: float, now_ns: int | None = None) -> bool | None:
        """Whether every GPU has been quiet for the last `seconds`: samples covering that stretch, utilisation 0 in
        all of them (where NVML reports it) and power within max(QUIET_TOL_W, QUIET_TOL_REL x its mean). None when
        there is nothing to judge (no telemetry, or neither utilisation nor power is read)."""
        if self.kind == "none":
            return None
        now = time.perf_counter_ns() if now_ns is None else now_ns
        since = now - int(seconds * 1e9)
        with self._lock:
            series = {u: list(self._recent.get(u, ())) for u in self._uuids()}
        if not series:
            return None
        judged = False
        for pts in series.values():
            if not pts or pts[0][0] > since:  # not yet sampled over the whole stretch
                return False
            window = [p for p in pts if p[0] >= since]
            if not window:
                return False
            utils = [u for _, u, _ in window if u is not None]
            powers = [w for _, _, w in window if w is not None]
            judged = judged or bool(utils or powers)
            if any(u > 0 for u in utils):
                return False
            if powers and max(powers) - min(powers) > max(QUIET_TOL_W, QUIET_TOL_REL * sum(powers) / len(powers)):
                return False
        return True if judged else None

    # -- windows ----------------------------------------------------------------------------------------------
    def _uuids(self) -> list[str]:
        if self._src_info["gpus"]:
            return [g["uuid"] for g in self._src_info["gpus"]]
        return list(self.gpu_uuids_requested or [])

    def _read_counters(self) -> dict[str, tuple[float | None, int]]:
        if self._src is None:
            now = time.perf_counter_ns()
            return {u: (None, now) for u in self._uuids()}
        t0 = time.perf_counter_ns()
        values = self._src.read_energy()
        self._window_read_ns.append(time.perf_counter_ns() - t0)
        if hasattr(self._src, "take_errors"):
            self._report_call_errors(self._src.take_errors())
        return values

    def _report_call_errors(self, errors: list[tuple[str, Any, str]]) -> None:
        """Report each (GPU, NVML error code) once: one stderr line and one manifest error; the values it hits
        stay NULL while it lasts and sampling goes on."""
        for uuid, code, text in errors:
            with self._lock:
                if (uuid, code) in self._reported:
                    continue
                self._reported.add((uuid, code))
                self.call_errors.append(text)
            print(
                f"wattbench telemetry: {text} (deployment {self.deployment_id or '-'}); the values it affects are "
                "NULL while it lasts, sampling goes on",
                file=sys.stderr,
                flush=True,
            )
            if self.out is not None and hasattr(self.out, "note_error"):
                self.out.note_error("telemetry_nvml_error", text)

    def begin_window(self, name: str) -> dict[str, Any]:
        """Read every GPU's energy counter now and open window `name`."""
        if name in self._windows:
            raise ValueError(f"window {name!r} was already begun; window names are unique per deployment")
        start_ns = time.perf_counter_ns()
        counters = self._read_counters()
        self._windows[name] = {"start_ns": start_ns, "counters": counters}
        return {"name": name, "start_ns": start_ns, **{u: c[0] for u, c in counters.items()}}

    def end_window(self, name: str) -> dict[str, Any]:
        """Read every GPU's energy counter now, close window `name` and write its energy_windows rows.

        Returns {gpu_uuid: J or None, 'total_j': J or None (None unless every GPU has a value),
        'trace_j': integrated instant power or None, 'trace_rel_diff', 'trace_flag' (> 2 % apart),
        'counter_reset': bool, 'start_ns', 'end_ns', 'seconds', 'read_ms'}.
        """
        if name not in self._windows:
            raise ValueError(f"window {name!r} was never begun")
        if name in self._ended:
            raise ValueError(f"window {name!r} already ended")
        t_read = time.perf_counter_ns()
        end = self._read_counters()
        read_ms = (time.perf_counter_ns() - t_read) / 1e6
        end_ns = time.perf_counter_ns()
        self._ended.add(name)
        w = self._windows[name]
        start_ns = w["start_ns"]
        result: dict[str, Any] = {
            "name": name,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "seconds": (end_ns - start_ns) / 1e9,
            "read_ms": read_ms,
        }
        rows = []
        energies = []
        any_reset = False
        for uuid in self._uuids():
            e0, t0 = w["counters"].get(uuid, (None, start_ns))
            e1, t1 = end.get(uuid, (None, end_ns))
            reset = None
            energy_j = None
            if e0 is not None and e1 is not None:
                with self._lock:
                    seen = any(t0 <= t <= t1 for t in self._resets.get(uuid, []))
                reset = e1 < e0 or seen
                energy_j = None if reset else (e1 - e0) / 1000.0
            any_reset = any_reset or bool(reset)
            result[uuid] = energy_j
            energies.append(energy_j)
            rows.append(
                {
                    "deployment_id": self.deployment_id,
                    "source": self.row_source,
                    "window_name": name,
                    "gpu_uuid": uuid,
                    "start_ns": t0,
                    "end_ns": t1,
                    "energy_start_mj": e0,
                    "energy_end_mj": e1,
                    "energy_j": energy_j,
                    "counter_reset": reset,
                }
            )
        result["total_j"] = sum(energies) if energies and all(e is not None for e in energies) else None
        known = any(r["counter_reset"] is not None for r in rows)
        result["counter_reset"] = any_reset if known else None
        result["trace_j"] = self._trace_energy(start_ns, end_ns)
        if result["total_j"] and result["trace_j"] is not None:
            result["trace_rel_diff"] = (result["trace_j"] - result["total_j"]) / result["total_j"]
            result["trace_flag"] = abs(result["trace_rel_diff"]) > TRACE_DISAGREE
        else:
            result["trace_rel_diff"] = None
            result["trace_flag"] = None
        if rows and self.out is not None:
            self.out.write("energy_windows", rows)
        return result

    def _trace_energy(self, start_ns: int, end_ns: int) -> float | None:
        """Integrated instant power (trapezoids) over [start, end], summed over GPUs; None without a trace.

        The boundaries are interpolated between neighbouring samples; past the newest sample the last value is
        held (end_window does not wait for the next tick).
        """
        total = 0.0
        have = False
        with self._lock:
            traces = {u: list(self._trace.get(u, [])) for u in self._uuids()}
        for pts in traces.values():
            if not pts:
                return None  # one GPU without a trace: no deployment-wide trace figure
            pts = [p for p in pts if p[0] >= start_ns - 5e8 and p[0] <= end_ns + 5e8]
            if not pts or pts[0][0] > start_ns + 5e8:
                return None
            edges = [start_ns] + [p[0] for p in pts if start_ns < p[0] < end_ns] + [end_ns]
            if max(b - a for a, b in zip(edges, edges[1:])) > max(MAX_TRACE_GAP_S, 3 / self.hz) * 1e9:
                return None  # a hole in the power trace: no integral made up across it
            have = True
            total += _integrate(pts, start_ns, end_ns)
        return total if have else None

    # -- info -------------------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Deployment-level facts (deployments columns) plus the sampler's measured cost once closed."""
        gpus = self._src_info["gpus"]
        limits = [g.get("power_limit_w") for g in gpus]
        persist = [g.get("persistence_mode") for g in gpus]
        st = self._stats
        reads = self._window_read_ns
        return {
            "telemetry_source": self.kind,
            "requested_kind": self.requested_kind,
            "telemetry_error": self.telemetry_error,
            "gpu_uuids": [g["uuid"] for g in gpus] or (self.gpu_uuids_requested or []),
            "gpu_names": [g.get("name") for g in gpus],
            "gpu_indices": [g.get("index") for g in gpus],
            "gpu_name": gpus[0].get("name") if gpus else None,
            "n_gpus": len(gpus) or None,
            "driver_version": self._src_info.get("driver_version"),
            "power_limit_w": limits[0] if limits and all(v is not None for v in limits) else None,
            "power_limits_w": limits,
            "persistence_mode": all(persist) if persist and all(v is not None for v in persist) else None,
            "gpu_serials": _known([g.get("serial") for g in gpus]),
            "gpu_pci_bus_ids": _known([g.get("pci_bus_id") for g in gpus]),
            "hz": self.hz if self.kind != "none" else None,
            "sampler_hz": self.hz if self.kind != "none" else None,
            "sampler_cpu_share": st.get("sampler_cpu_share"),
            "sampler_call_ms": st.get("sampler_call_ms"),
            "sampler_ticks": st.get("ticks"),
            "sampler_missed_ticks": st.get("missed_ticks"),
            "sampler_calls": st.get("calls"),
            "sampler_error": self.sampler_error,
            "telemetry_call_errors": list(self.call_errors),
            "samples_written": self.samples_written,
            "window_read_ms": (sum(reads) / len(reads) / 1e6) if reads else None,
            "window_read_calls": self._src.stats.summary() if self._src is not None else {},
        }

    def deployment_columns(self) -> dict[str, Any]:
        """The deployments columns this sampler knows, named exactly as in sql/schema.sql."""
        i = self.info()
        return {
            k: i[k]
            for k in (
                "gpu_uuids",
                "gpu_name",
                "n_gpus",
                "driver_version",
                "power_limit_w",
                "persistence_mode",
                "gpu_serials",
                "gpu_pci_bus_ids",
                "telemetry_source",
                "sampler_hz",
                "sampler_cpu_share",
                "sampler_call_ms",
            )
        }


def _known(values: list[Any]) -> list[Any] | None:
    """A per-GPU list, or None when no GPU's value is known (a column of NULLs says nothing a NULL does not)."""
    return values if any(v is not None for v in values) else None


def _integrate(pts: list[tuple[int, float]], start_ns: int, end_ns: int) -> float:
    """Trapezoid integral (J) of a [(t_ns, W)] series over [start_ns, end_ns], holding the ends flat."""

    def value_at(t: int) -> float:
        if t <= pts[0][0]:
            return pts[0][1]
        if t >= pts[-1][0]:
            return pts[-1][1]
        lo, hi = 0, len(pts) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pts[mid][0] <= t:
                lo = mid
            else:
                hi = mid
        (ta, pa), (tb, pb) = pts[lo], pts[hi]
        return pa + (pb - pa) * (t - ta) / (tb - ta) if tb > ta else pb

    knots = [(start_ns, value_at(start_ns))]
    knots += [p for p in pts if start_ns < p[0] < end_ns]
    knots.append((end_ns, value_at(end_ns)))
    return sum((tb - ta) / 1e9 * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(knots, knots[1:]))


def open_sampler(
    kind: str,
    gpu_uuids: list[str] | None = None,
    url: str | None = None,
    hz: float = 10.0,
    out: Any = None,
    deployment_id: str | None = None,
    *,
    nvml: dict[str, Any] | None = None,
    strict: bool = False,
    sample_energy: bool = True,
    dcgm_url: str | None = None,
) -> Sampler:
    """Start sampling one deployment's GPUs; use the result as a context manager (docs/CONTRACTS.md section 4).

    kind: 'nvml' (real GPUs by UUID; all GPUs when gpu_uuids is None), 'emulated' (the emulator at `url`; only
    for emulated engines), 'dcgm' (NVIDIA dcgm-exporter's /metrics at `dcgm_url`, else $WATTBENCH_DCGM_URL, else
    `url`; telemetry/dcgm.py), 'none'. Without NVML (or an unreachable emulator) it prints one warning line and
    behaves as 'none' - unless strict=True, which raises TelemetryUnavailable.
    out: a BundleWriter (or anything with .write(table, rows)); gpu_samples and energy_windows go there.
    nvml: test hook, e.g. {"fake": "tests/telemetry/traces/h200_trace.json"} (see fake_nvml.FakeNvml).
    sample_energy: also read the energy counter at every sample (gpu_samples.energy_mj; ~3.5 ms per GPU on an
    H200). Window energy is read at the boundaries either way.
    """
    return Sampler(
        kind,
        gpu_uuids,
        url,
        hz,
        out,
        deployment_id,
        nvml=nvml,
        strict=strict,
        sample_energy=sample_energy,
        dcgm_url=dcgm_url,
    ).start()


def wait_until_quiet(
    samplers: list[Sampler], quiet_s: float, timeout_s: float, poll_s: float = 0.1
) -> list[tuple[float, bool | None]]:
    """Wait until every sampler's GPUs have been quiet for `quiet_s` (Sampler.quiet_for), at most `timeout_s`.
    Returns, per sampler, (seconds waited, settled): True once quiet, False when the timeout came first, None when
    its telemetry cannot tell (no samples of utilisation or power)."""
    start = time.monotonic()
    out: list[tuple[float, bool | None] | None] = [None] * len(samplers)
    while True:
        waited = time.monotonic() - start
        for i, s in enumerate(samplers):
            if out[i] is None:
                q = s.quiet_for(quiet_s)
                if q is not False:
                    out[i] = (0.0 if q is None else waited, q)
        if all(o is not None for o in out):
            return out  # type: ignore[return-value]
        if waited >= timeout_s:
            return [o if o is not None else (waited, False) for o in out]
        time.sleep(poll_s)


def idle_baseline(sampler: Sampler, seconds: float, name: str = "idle_before") -> dict[str, Any]:
    """Hold a window of `seconds` with no traffic; mean W per GPU from the energy counter.

    Returns {gpu_uuid: W or None, 'total_w': W summed over GPUs or None, 'window': end_window's dict}.
    """
    sampler.begin_window(name)
    time.sleep(seconds)
    w = sampler.end_window(name)
    secs = w["seconds"]
    out: dict[str, Any] = {}
    for uuid in sampler._uuids():
        j = w.get(uuid)
        out[uuid] = j / secs if j is not None and secs > 0 else None
    out["total_w"] = w["total_j"] / secs if w["total_j"] is not None and secs > 0 else None
    out["window"] = w
    return out
