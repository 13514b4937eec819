"""The NVML sampler against the fake NVML replaying the REAL H200 recording (tests/telemetry/traces/h200_trace.json,
`wattbench telemetry record --seconds 24 --load matmul`), the emulated kind against a loopback HTTP server, and the
no-NVML path. No GPU needed.

Nothing about the recording is hard-coded: the GPU's UUID, name, power limit, driver, the phases and every expected
number are read from the trace file (conftest.TraceFacts), so a re-recording needs no test edits. Replay times are
computed from the fake's epoch (passed in explicitly), so expected window energies are the recorded counter's own
differences at the instants the windows were read. Fault cases the recording lacks are injected with the fake's
knobs (not_supported, reset_when_file, errors) on top of the recording, or replayed from the small SYNTHETIC
traces/synthetic_faults.json, which is labelled as such.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.bundle_files import read_table
from wattbench_agent.bundle import BundleWriter
from wattbench_agent.telemetry import TelemetryUnavailable, decode_clock_events, idle_baseline, open_sampler
from wattbench_agent.telemetry import sources as sources_mod
from wattbench_agent.telemetry.fake_nvml import (
    FAULTS_PROVENANCE,
    SYNTHETIC_PROVENANCE,
    FakeNvml,
    synthetic_faults_trace,
    synthetic_h200_trace,
)
from wattbench_agent.telemetry.sampler import TRACE_DISAGREE, _integrate
from wattbench_agent.telemetry.sources import SAMPLE_FIELDS, NvmlSource

SCHEMA = Path(__file__).resolve().parents[2] / "sql" / "schema.sql"
VALUE_COLUMNS = (
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


def schema_columns(table: str) -> set[str]:
    body = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\);", SCHEMA.read_text(), re.S).group(1)
    cols = set()
    for line in body.splitlines():
        m = re.match(r"\s+([a-z_0-9]+)\s+[A-Z]", line)
        if m and m.group(1) != "PRIMARY":
            cols.add(m.group(1))
    return cols


class Replay:
    """A fake-NVML spec with a known epoch, and the replay time (trace seconds) of a perf_counter_ns instant."""

    def __init__(self, trace_path, start_offset_s=0.0, speed=1.0, **kw):
        self.epoch_ns = time.perf_counter_ns()
        self.offset = start_offset_s
        self.speed = speed
        self.spec = {
            "fake": str(trace_path),
            "epoch_ns": self.epoch_ns,
            "start_offset_s": start_offset_s,
            "speed": speed,
            **kw,
        }

    def t(self, ns: int | None = None) -> float:
        ns = time.perf_counter_ns() if ns is None else ns
        return (ns - self.epoch_ns) / 1e9 * self.speed + self.offset

    def sleep_until(self, t_s: float) -> None:
        time.sleep(max(0.0, (t_s - self.t()) / self.speed))


def assert_window_energy_is_the_counters(facts, rp: Replay, row: dict, slack_s: float) -> None:
    """An energy_windows row holds recorded counter values read at its own instants, and energy_j is their
    difference: nothing but the recording's numbers."""
    a, b = rp.t(row["start_ns"]), rp.t(row["end_ns"])
    key = "nvmlDeviceGetTotalEnergyConsumption"
    recorded = {float(v) for v in facts.rets_between(key, a - slack_s, b + slack_s)}
    if rp.speed == 1.0:
        assert row["energy_start_mj"] in recorded and row["energy_end_mj"] in recorded
    lo, hi = facts.counter_j_bracket(a, b, slack_s)
    assert lo / rp.speed - 1e-6 <= row["energy_j"] <= hi / rp.speed + 1e-6, (row, lo, hi)
    assert row["energy_j"] == pytest.approx((row["energy_end_mj"] - row["energy_start_mj"]) / 1000)


# ------------------------------------------------------------------------------------------------------------
# The recording itself
# ------------------------------------------------------------------------------------------------------------
def test_trace_is_a_recording_and_self_consistent(trace, facts):
    assert trace["format"] == "wattbench-nvml-trace/1"
    assert trace["synthetic"] is False and trace["provenance"].startswith("recorded with `wattbench telemetry record`")
    assert len(trace["devices"]) == 1 and facts.uuid.startswith("GPU-")
    assert trace["driver_version"] == facts.driver and facts.power_limit_w > 0
    assert [n for n, _, _ in facts.phases][0] == "idle" and facts.load_phase is not None
    assert all(a < b for _, a, b in facts.phases)
    # the energy counter never runs backwards in the recording; it moves about every 100 ms (MEASUREMENT.md)
    energy = [e for _, _, e in facts.calls["nvmlDeviceGetTotalEnergyConsumption"]]
    assert all(b >= a for a, b in zip(energy, energy[1:]))
    assert sum(b != a for a, b in zip(energy, energy[1:])) > 0.8 * (len(energy) - 1)
    # the load is visible: busy samples inside the load phase, drawing several times idle power, under the limit
    a, b = facts.busy
    la, lb = facts.load_phase
    assert la <= a < b < lb
    busy_w = (facts.counter_mj(b) - facts.counter_mj(a)) / (b - a) / 1000
    ia, ib = facts.idle
    idle_w = (facts.counter_mj(ib) - facts.counter_mj(ia)) / (ib - ia) / 1000
    assert busy_w > 3 * idle_w and busy_w <= facts.power_limit_w * 1.01
    assert {r & 0x4 for r in facts.rets_between("nvmlDeviceGetCurrentClocksEventReasons", *facts.steady())} == {4}
    # call_stats (what `record` printed) is the sampler's own timing of the same calls: the recorded duration
    # (the NVML call alone, what the fake replays) plus the recording wrapper's bookkeeping (< 0.15 ms)
    stats = trace["call_stats"]
    for fn, s in stats.items():
        durs = [
            d
            for key, entries in {**trace["system"], **facts.calls}.items()
            if key.split(":")[0] == fn
            for _, d, _ in entries
        ]
        assert len(durs) == s["n"], fn
        assert statistics.mean(durs) - 2e-4 <= s["mean_ms"] <= statistics.mean(durs) + 0.15, fn
        assert max(durs) - 2e-4 <= s["max_ms"], fn


def _counter_vs_trace(facts, a_s: float, b_s: float) -> tuple[float, float]:
    """Counter energy between the counter reads nearest a and b, and the instant-power trace integrated by the
    sampler's own integrator over the same two instants (J, J)."""
    reads = [(t / 1000 + d / 2000, e) for t, d, e in facts.calls["nvmlDeviceGetTotalEnergyConsumption"]]
    ta, ea = min(reads, key=lambda r: abs(r[0] - a_s))
    tb, eb = min(reads, key=lambda r: abs(r[0] - b_s))
    pts = [(int(t * 1e9), w) for t, w in facts.power]
    return (eb - ea) / 1000, _integrate(pts, int(ta * 1e9), int(tb * 1e9))


def test_recorded_counter_agrees_with_integrated_instant_power(facts):
    # the matmul phase as the recording's phases give it, and the busy span measured inside it
    for name, (a, b) in (("load phase", facts.load_phase), ("busy span", facts.busy), ("steady", facts.steady())):
        counter_j, trace_j = _counter_vs_trace(facts, a, b)
        rel = (trace_j - counter_j) / counter_j
        assert abs(rel) <= TRACE_DISAGREE, (
            f"{name} [{a:.2f}, {b:.2f}] s: counter {counter_j:.1f} J, trace {trace_j:.1f} J, {rel * 100:+.2f} %"
        )
    # the whole recording, idle included
    counter_j, trace_j = _counter_vs_trace(facts, 0.0, facts.seconds)
    assert abs(trace_j - counter_j) / counter_j <= TRACE_DISAGREE


# ------------------------------------------------------------------------------------------------------------
# The sampler against the recording
# ------------------------------------------------------------------------------------------------------------
def test_one_sample_is_one_batched_field_call(trace_path, facts):
    rp = Replay(trace_path, start_offset_s=statistics.mean(facts.steady()), latency_scale=0)
    src = NvmlSource(nvml_spec=rp.spec)
    info = src.open()
    assert info["driver_version"] == facts.driver
    gpu = info["gpus"][0]
    assert (gpu["uuid"], gpu["name"], gpu["power_limit_w"]) == (facts.uuid, facts.name, facts.power_limit_w)
    assert gpu["persistence_mode"] is facts.persistence
    t0 = rp.t()
    (row,) = src.sample()
    t1 = rp.t()
    nv: FakeNvml = src.nvml
    assert nv.calls("nvmlDeviceGetFieldValues") == [(0, SAMPLE_FIELDS)]  # one batched call: 186, 185, 82
    assert nv.calls("nvmlDeviceGetPowerUsage") == []  # the 1-s average on Hopper: not used
    fields = facts.rets_between("nvmlDeviceGetFieldValues", t0, t1)
    assert row["power_w"] in {f["186"]["value"] / 1000 for f in fields}
    assert row["power_avg_w"] in {f["185"]["value"] / 1000 for f in fields}
    assert row["hbm_temp_c"] in {float(f["82"]["value"]) for f in fields}
    reasons = facts.rets_between("nvmlDeviceGetCurrentClocksEventReasons", t0, t1)
    assert row["clock_event_reasons"] in reasons
    assert row["clock_events"] == decode_clock_events(row["clock_event_reasons"])
    assert "sw_power_cap" in row["clock_events"]  # the steady matmul phase runs against the power limit
    assert row["util_gpu_pct"] in {float(u["gpu"]) for u in facts.rets_between("nvmlDeviceGetUtilizationRates", t0, t1)}
    assert row["hbm_total_mib"] == facts.hbm_total_mib
    assert row["energy_mj"] in {float(e) for e in facts.rets_between("nvmlDeviceGetTotalEnergyConsumption", t0, t1)}
    assert set(row) <= schema_columns("gpu_samples")
    src.close()


def test_not_supported_is_null_and_not_asked_again(trace_path, facts):
    src = NvmlSource(
        nvml_spec={
            "fake": str(trace_path),
            "latency_scale": 0,
            "not_supported": ["nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetUtilizationRates", "field:82"],
        }
    )
    src.open()
    rows = src.sample() + src.sample()
    for row in rows:
        assert row["energy_mj"] is None and row["util_gpu_pct"] is None and row["hbm_temp_c"] is None
        assert row["power_w"] is not None and row["sm_clock_mhz"] is not None
    assert src.read_energy()[facts.uuid][0] is None
    calls = src.stats.summary()
    assert calls["nvmlDeviceGetTotalEnergyConsumption"]["n"] == 1  # NotSupported remembered
    assert calls["nvmlDeviceGetTotalEnergyConsumption"]["errors"] == 1
    src.close()


def test_cadence_cost_and_bundle_rows(trace_path, facts, tmp_path):
    ia, ib = facts.idle
    rp = Replay(trace_path, start_offset_s=ia)  # latency_scale 1: every call costs what it cost on the H200
    with BundleWriter(tmp_path / "b", run_id="r1", source="measured") as bw:
        with open_sampler("nvml", gpu_uuids=[facts.uuid], hz=10, out=bw, deployment_id="dep1", nvml=rp.spec) as s:
            s.begin_window("idle_before")
            time.sleep(1.6)
            w = s.end_window("idle_before")
            times = [t for t, _ in s.samples(facts.uuid)]
        info = s.info()
    rows = read_table(tmp_path / "b", "gpu_samples")
    assert 13 <= len(rows) <= 22
    gaps = [(b - a) / 1e6 for a, b in zip(times, times[1:])]
    assert abs(statistics.median(gaps) - 100) < 15, gaps  # 10 Hz
    assert all(r["deployment_id"] == "dep1" and r["run_id"] == "r1" and r["source"] == "measured" for r in rows)
    assert set(rows[0]) <= schema_columns("gpu_samples")
    for r in rows:  # every power value is one the H200 reported at that replay instant
        t = rp.t(r["t_ns"])
        assert r["power_w"] in facts.power_w_between(t - 0.01, t + 0.01), (t, r["power_w"])
    # cost measured and reported with the run; the fake sleeps each recorded call duration, so the measured
    # cost can only be at least what the recording's calls cost in the replayed span
    a, b = rp.t(rows[0]["t_ns"]), rp.t(rows[-1]["t_ns"])
    per_tick_ms = sum(
        facts.median_ms(k, a, b) for k in ("nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEnergyConsumption")
    )
    assert info["telemetry_source"] == "nvml" and info["sampler_hz"] == 10
    assert 0 < info["sampler_cpu_share"] < 1
    assert info["sampler_call_ms"] >= 0.9 * per_tick_ms
    energy_call = info["sampler_calls"]["nvmlDeviceGetTotalEnergyConsumption"]
    assert energy_call["mean_ms"] >= 0.9 * facts.median_ms("nvmlDeviceGetTotalEnergyConsumption", a, b)
    assert info["sampler_calls"]["nvmlDeviceGetFieldValues"]["n"] == info["sampler_ticks"]
    assert "nvmlDeviceGetPowerUsage" not in info["sampler_calls"]
    assert info["window_read_ms"] >= 0.9 * min(d for _, d, _ in facts.calls["nvmlDeviceGetTotalEnergyConsumption"])
    assert info["window_read_ms"] < 100
    assert info["driver_version"] == facts.driver and info["power_limit_w"] == facts.power_limit_w
    assert info["persistence_mode"] is facts.persistence and info["gpu_uuids"] == [facts.uuid]
    cols = s.deployment_columns()
    assert set(cols) <= schema_columns("deployments")
    # the window: the recorded counter's difference between the instants it was read
    wrows = [json.loads(x) for x in (tmp_path / "b" / "energy_windows.jsonl").read_text().splitlines()]
    assert len(wrows) == 1 and set(wrows[0]) <= schema_columns("energy_windows")
    assert wrows[0]["counter_reset"] is False and wrows[0]["window_name"] == "idle_before"
    assert_window_energy_is_the_counters(facts, rp, wrows[0], slack_s=0.06)
    assert w[facts.uuid] == wrows[0]["energy_j"] == w["total_j"]


def test_window_energy_from_counter_agrees_with_trace(trace_path, facts):
    # replay 4x faster (sampler at 40 Hz = 10 samples per trace second, as recorded) so a window over most of the
    # steady matmul span takes ~2 s; the fake keeps counter energy == replayed power x real seconds.
    speed = 4.0
    sa, sb = facts.steady(trim_s=0.5)
    rp = Replay(trace_path, start_offset_s=sa - speed * 0.8, speed=speed, latency_scale=0.25)
    with open_sampler("nvml", hz=40, deployment_id="d", nvml=rp.spec) as s:
        rp.sleep_until(max(sa, rp.t() + speed * 0.2))  # at least 0.2 s of samples before the window
        span = min(8.0, sb - rp.t())
        assert span >= 4.0, f"the sampler took too long to start ({rp.t() - sa:.1f} trace s late)"
        s.begin_window("lp0")
        rp.sleep_until(rp.t() + span)
        w = s.end_window("lp0")
    a, b = rp.t(w["start_ns"]), rp.t(w["end_ns"])
    lo, hi = facts.counter_j_bracket(a, b, slack_s=0.03 * speed)
    assert lo / speed <= w["total_j"] <= hi / speed
    # counter vs the sampler's integrated instant power: what the recording supports (see the offline test)
    assert w["trace_flag"] is False and abs(w["trace_rel_diff"]) <= TRACE_DISAGREE, w
    assert w["counter_reset"] is False and w[facts.uuid] == w["total_j"]


def test_counter_reset_gives_null_energy(trace_path, facts, sink, tmp_path):
    flag = tmp_path / "reset"
    rp = Replay(trace_path, start_offset_s=facts.idle[0], latency_scale=0.25, reset_when_file=str(flag))
    with open_sampler("nvml", hz=10, out=sink, deployment_id="d", nvml=rp.spec) as s:
        s.begin_window("across")
        time.sleep(0.5)
        flag.touch()  # the counter restarts near zero (as after a driver reload)
        time.sleep(0.5)
        w = s.end_window("across")
        s.begin_window("after")
        time.sleep(0.6)
        w2 = s.end_window("after")
    assert w["counter_reset"] is True and w[facts.uuid] is None and w["total_j"] is None
    rows = {r["window_name"]: r for r in sink.tables["energy_windows"]}
    assert rows["across"]["counter_reset"] is True and rows["across"]["energy_j"] is None
    assert rows["across"]["energy_end_mj"] < rows["across"]["energy_start_mj"]
    # after the reset the counter moves as recorded: the window's energy is the recording's
    assert w2["counter_reset"] is False
    lo, hi = facts.counter_j_bracket(rp.t(w2["start_ns"]), rp.t(w2["end_ns"]), slack_s=0.05)
    assert lo <= w2[facts.uuid] <= hi


def test_not_supported_energy_is_null_in_windows(trace_path, facts, sink):
    spec = {"fake": str(trace_path), "latency_scale": 0, "not_supported": ["nvmlDeviceGetTotalEnergyConsumption"]}
    with open_sampler("nvml", hz=10, out=sink, deployment_id="d", nvml=spec) as s:
        s.begin_window("w")
        time.sleep(0.5)
        w = s.end_window("w")
    assert w[facts.uuid] is None and w["total_j"] is None and w["counter_reset"] is None
    assert w["trace_j"] is not None  # power is still there
    (row,) = sink.tables["energy_windows"]
    assert row["energy_j"] is None and row["energy_start_mj"] is None and row["counter_reset"] is None
    assert all(r["energy_mj"] is None and r["power_w"] is not None for r in sink.tables["gpu_samples"])


def test_idle_baseline(trace_path, facts):
    rp = Replay(trace_path, start_offset_s=facts.idle[0], latency_scale=0)
    with open_sampler("nvml", hz=10, deployment_id="d", nvml=rp.spec) as s:
        base = idle_baseline(s, 1.0, "idle_after")
    w = base["window"]
    lo, hi = facts.counter_j_bracket(rp.t(w["start_ns"]), rp.t(w["end_ns"]), slack_s=0.01)
    assert lo / w["seconds"] <= base[facts.uuid] <= hi / w["seconds"]
    assert base["total_w"] == base[facts.uuid] and w["name"] == "idle_after"


# ------------------------------------------------------------------------------------------------------------
# NVML errors mid-run (issue 7): GPU_IS_LOST on every call for a while, switched on and off at known instants
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lost_run(tmp_path_factory, facts, trace_path):
    """One sampling run over the recording's steady load with the GPU 'lost' for ~0.9 s in the middle.

    Windows: 'span' (edges before and after the gap), 'end_in_gap', 'start_in_gap', 'after' (after it clears).
    """
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("lost")
    flag = tmp / "gpu_lost"
    rp = Replay(
        trace_path,
        start_offset_s=facts.steady()[0],
        latency_scale=0.25,
        errors=[{"code": "NVML_ERROR_GPU_IS_LOST", "when_file": str(flag)}],
    )
    err = io.StringIO()
    out = {"facts": facts, "rp": rp, "bundle": tmp / "b"}
    with contextlib.redirect_stderr(err), BundleWriter(tmp / "b", run_id="r-lost", source="measured") as bw:
        with open_sampler("nvml", hz=10, out=bw, deployment_id="dep-lost", nvml=rp.spec) as s:
            time.sleep(0.3)
            s.begin_window("span")
            s.begin_window("end_in_gap")
            time.sleep(1.2)  # > FLUSH_S: rows of the healthy start are in the bundle before the gap
            out["rows_before"] = read_table(tmp / "b", "gpu_samples")
            out["on_ns"] = time.perf_counter_ns()
            flag.touch()
            time.sleep(0.6)  # > MAX_TRACE_GAP_S of the sampler change: no trace_j held across it
            out["w_end_in_gap"] = s.end_window("end_in_gap")
            s.begin_window("start_in_gap")
            time.sleep(0.3)
            flag.unlink()
            out["off_ns"] = time.perf_counter_ns()
            time.sleep(0.3)
            out["w_start_in_gap"] = s.end_window("start_in_gap")
            out["w_span"] = s.end_window("span")
            s.begin_window("after")
            time.sleep(0.6)
            out["w_after"] = s.end_window("after")
        out["info"] = s.info()
    out["stderr"] = err.getvalue()
    out["rows"] = read_table(tmp / "b", "gpu_samples")
    out["windows"] = {
        r["window_name"]: r for r in map(json.loads, (tmp / "b" / "energy_windows.jsonl").read_text().splitlines())
    }
    out["manifest"] = json.loads((tmp / "b" / "manifest.json").read_text())
    return out


def test_nvml_errors_mid_run_leave_a_null_gap_and_sampling_goes_on(lost_run):
    facts, rp, rows = lost_run["facts"], lost_run["rp"], lost_run["rows"]
    on, off = lost_run["on_ns"], lost_run["off_ns"]
    # the rows written before the fault are still there, unchanged
    before = lost_run["rows_before"]
    assert len(before) >= 8 and rows[: len(before)] == before
    # inside the gap: rows (the ticks happened) with every measured value NULL - nothing fabricated
    margin = 60_000_000
    gap = [r for r in rows if on + margin <= r["t_ns"] <= off - margin]
    assert len(gap) >= 3
    assert all(r[c] is None for r in gap for c in VALUE_COLUMNS), gap
    # outside it: only values the H200 reported at that instant
    healthy = [r for r in rows if r["t_ns"] < on or r["t_ns"] > off + margin]
    for r in healthy:
        t = rp.t(r["t_ns"])
        assert r["power_w"] in facts.power_w_between(t - 0.01, t + 0.01)
    # sampling went on after the error cleared, at its cadence
    after = [r for r in rows if r["t_ns"] > off + margin]
    assert len(after) >= 8 and all(r["power_w"] is not None and r["energy_mj"] is not None for r in after)
    info = lost_run["info"]
    assert info["sampler_error"] is None and info["telemetry_source"] == "nvml"
    assert info["sampler_calls"]["nvmlDeviceGetFieldValues"]["errors"] >= len(gap)
    assert info["sampler_calls"]["nvmlDeviceGetFieldValues"]["n"] == info["sampler_ticks"]


def test_nvml_errors_mid_run_windows(lost_run):
    facts, rp, wins = lost_run["facts"], lost_run["rp"], lost_run["windows"]
    u = facts.uuid
    # an edge read that failed: NULL energy, NULL counter_reset, the failed edge NULL, the good edge kept
    w = lost_run["w_end_in_gap"]
    assert w[u] is None and w["total_j"] is None and w["counter_reset"] is None
    assert wins["end_in_gap"]["energy_end_mj"] is None and wins["end_in_gap"]["energy_start_mj"] is not None
    assert wins["end_in_gap"]["energy_j"] is None and wins["end_in_gap"]["counter_reset"] is None
    w = lost_run["w_start_in_gap"]
    assert w[u] is None and w["total_j"] is None and w["counter_reset"] is None
    assert wins["start_in_gap"]["energy_start_mj"] is None and wins["start_in_gap"]["energy_end_mj"] is not None
    # edges outside the gap: the hardware counter kept counting, the window is the recording's counter difference
    for name in ("span", "after"):
        assert lost_run[f"w_{name}"]["counter_reset"] is False
        assert_window_energy_is_the_counters(facts, rp, wins[name], slack_s=0.05)
    # (no counter-vs-trace check on these sub-second windows: the recorded instant power swings 530-870 W
    # tick to tick under load, so < 2 s windows disagree by several % - see the offline test)


def test_nvml_errors_mid_run_reported_once(lost_run):
    lines = [x for x in lost_run["stderr"].splitlines() if x.strip()]
    assert len(lines) == 1, lines  # 8 calls x ~7 ticks + window reads failed: ONE line
    assert "NVML" in lines[0] and "GPU is lost" in lines[0] and lost_run["facts"].uuid in lines[0]
    errors = [e for e in lost_run["manifest"]["errors"] if e["kind"] == "telemetry_nvml_error"]
    assert len(errors) == 1 and "GPU is lost" in errors[0]["text"]
    # the power trace has a hole: no integrated figure is made up across it
    assert lost_run["w_span"]["trace_j"] is None and lost_run["w_end_in_gap"]["trace_j"] is None


def test_field_error_is_null_for_that_field_only(trace_path, facts):
    rp = Replay(
        trace_path,
        start_offset_s=facts.idle[0],
        latency_scale=0,
        errors=[
            {"code": "NVML_ERROR_UNKNOWN", "calls": ["field:186"], "from_s": 0.0, "until_s": 60.0},
            {"code": 999, "calls": ["nvmlDeviceGetTemperature"]},
        ],
    )
    src = NvmlSource(nvml_spec=rp.spec)
    src.open()
    rows = src.sample() + src.sample()
    assert all(r["power_w"] is None and r["temp_c"] is None for r in rows)
    assert all(r["power_avg_w"] is not None and r["energy_mj"] is not None for r in rows)
    assert src.stats.summary()["nvmlDeviceGetTemperature"]["n"] == 2  # not NotSupported: asked again
    src.close()


# ------------------------------------------------------------------------------------------------------------
# The synthetic traces (generator kept; faults file for what the recording lacks) - labelled synthetic
# ------------------------------------------------------------------------------------------------------------
def test_synthetic_generator_is_labelled_synthetic():
    tr = synthetic_h200_trace(seconds=2.0)
    assert tr["synthetic"] is True and tr["provenance"] == SYNTHETIC_PROVENANCE
    energy = [e for _, _, e in tr["devices"][0]["calls"]["nvmlDeviceGetTotalEnergyConsumption"]]
    assert all(b >= a for a, b in zip(energy, energy[1:]))
    src = NvmlSource(nvml_spec={"fake": tr, "latency_scale": 0})
    assert src.open()["gpus"][0]["name"] == "NVIDIA H200"
    assert src.sample()[0]["power_w"] is not None
    src.close()


def test_synthetic_faults_trace_replays_recorded_errors(faults_path):
    data = json.loads(faults_path.read_text())
    assert data == json.loads(json.dumps(synthetic_faults_trace()))  # the file is the generator's output
    assert data["synthetic"] is True and data["provenance"] == FAULTS_PROVENANCE
    faults = {f["kind"]: f for f in data["faults"]}
    uuid = data["devices"][0]["calls"]["nvmlDeviceGetUUID"][0][2]

    def source_at(t_s):
        src = NvmlSource(nvml_spec={"fake": str(faults_path), "latency_scale": 0, "start_offset_s": t_s})
        src.open()
        return src

    src = source_at(faults["counter_reset"]["at_s"] - 0.3)  # recorded NotSupported answers -> NULL, asked once
    rows = src.sample() + src.sample()
    assert all(r["util_gpu_pct"] is None and r["hbm_temp_c"] is None and r["power_w"] is not None for r in rows)
    assert src.stats.summary()["nvmlDeviceGetUtilizationRates"]["n"] == 1
    before = src.read_energy()[uuid][0]
    src.close()
    src = source_at(faults["counter_reset"]["at_s"] + 0.2)  # recorded counter restart: backwards
    assert src.read_energy()[uuid][0] < before
    src.close()
    lost = faults["nvml_error"]
    src = source_at((lost["from_s"] + lost["until_s"]) / 2)  # recorded GPU_IS_LOST: everything NULL
    (row,) = src.sample()
    assert all(row[c] is None for c in VALUE_COLUMNS) and src.read_energy()[uuid][0] is None
    assert src.stats.summary()["nvmlDeviceGetFieldValues"]["errors"] == 1
    src.close()


# ------------------------------------------------------------------------------------------------------------
class _NoLibrary:
    """An NVML module whose library is absent (as on this machine; forced so the test holds on a GPU host too)."""

    import pynvml as _p

    NVMLError = _p.NVMLError

    def nvmlInit(self):
        raise self._p.NVMLError(self._p.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_no_nvml_one_message_and_nulls(monkeypatch, capfd, sink):
    monkeypatch.delenv("WATTBENCH_FAKE_NVML", raising=False)
    monkeypatch.setattr(sources_mod, "load_nvml", lambda spec=None: _NoLibrary())
    with open_sampler("nvml", gpu_uuids=["GPU-a", "GPU-b"], out=sink, deployment_id="d") as s:
        s.begin_window("w")
        w = s.end_window("w")
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NVML" in err[0] and "NULL" in err[0]
    info = s.info()
    assert info["telemetry_source"] == "none" and info["requested_kind"] == "nvml"
    assert info["sampler_cpu_share"] is None and info["power_limit_w"] is None and info["driver_version"] is None
    assert "gpu_samples" not in sink.tables
    assert w["total_j"] is None and w["trace_j"] is None and w["GPU-a"] is None
    assert [r["energy_j"] for r in sink.tables["energy_windows"]] == [None, None]
    assert sink.errors and sink.errors[0][0] == "telemetry_unavailable"
    with pytest.raises(TelemetryUnavailable):
        open_sampler("nvml", deployment_id="d", strict=True)


def test_kind_none(capfd):
    with open_sampler("none", deployment_id="d") as s:
        s.begin_window("w")
        w = s.end_window("w")
    assert len(capfd.readouterr().err.strip().splitlines()) == 1
    assert w["total_j"] is None and s.info()["telemetry_source"] == "none"


# ------------------------------------------------------------------------------------------------------------
class _Emulator(BaseHTTPRequestHandler):
    t0 = time.perf_counter()

    def do_GET(self):
        if self.path != "/emulator/telemetry":
            self.send_error(404)
            return
        dt = time.perf_counter() - self.t0
        gpus = [
            {
                "gpu_uuid": f"GPU-emu-{i}",
                "gpu_index": i,
                "name": "H200 (emulated)",
                "power_w": 300.0 + i,
                "power_avg_w": 300.0,
                "energy_mj": 5e6 + dt * (300.0 + i) * 1000,
                "hbm_used_mib": 1000.0,
                "hbm_total_mib": 143771.0,
                "util_gpu_pct": 50.0,
                "util_mem_pct": 20.0,
                "sm_clock_mhz": 1800.0,
                "mem_clock_mhz": 3201.0,
                "temp_c": 50.0,
                "hbm_temp_c": 45.0,
                "power_limit_w": 700.0,
                "clock_event_reasons": 0,
                "clock_events": "",
            }
            for i in range(3)
        ]
        body = json.dumps({"t_ns": time.perf_counter_ns(), "gpus": gpus}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def emulator_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Emulator)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_emulated_kind(emulator_url, sink):
    with open_sampler(
        "emulated", gpu_uuids=["GPU-emu-0", "GPU-emu-2"], url=emulator_url, hz=10, out=sink, deployment_id="e1"
    ) as s:
        s.begin_window("lp")
        time.sleep(1.0)
        w = s.end_window("lp")
    info = s.info()
    samples = sink.tables["gpu_samples"]
    assert {r["gpu_uuid"] for r in samples} == {"GPU-emu-0", "GPU-emu-2"}
    assert all(r["source"] == "emulated" and r["deployment_id"] == "e1" for r in samples)
    assert set(samples[0]) <= schema_columns("gpu_samples") | {"run_id"}
    assert w["GPU-emu-0"] == pytest.approx(300 * w["seconds"], rel=0.05)
    assert w["GPU-emu-2"] == pytest.approx(302 * w["seconds"], rel=0.05)
    assert w["trace_j"] == pytest.approx(w["total_j"], rel=0.05)
    assert all(r["source"] == "emulated" for r in sink.tables["energy_windows"])
    assert info["telemetry_source"] == "emulated" and info["n_gpus"] == 2 and info["sampler_cpu_share"] > 0


def test_emulated_unreachable_is_none(capfd):
    with open_sampler("emulated", url="http://127.0.0.1:9", deployment_id="d") as s:
        s.begin_window("w")
        w = s.end_window("w")
    assert s.info()["telemetry_source"] == "none" and w["total_j"] is None
    assert "emulator telemetry" in capfd.readouterr().err


# ------------------------------------------------------------------------------------------------------------
def test_decode_clock_events():
    assert decode_clock_events(None) is None
    assert decode_clock_events(0) == ""
    assert decode_clock_events(0x4) == "sw_power_cap"
    assert decode_clock_events(0x1 | 0x40) == "gpu_idle,hw_thermal_slowdown"
    assert decode_clock_events(0x1000) == "unknown_0x1000"


def test_recorder_round_trip(trace_path, facts, tmp_path):
    from wattbench_agent.telemetry.record import record

    out = tmp_path / "rec.json"
    rp = Replay(trace_path, start_offset_s=statistics.mean(facts.steady()), latency_scale=0)
    rec = record(0.6, out, hz=10, nvml_spec=rp.spec, progress=False)
    assert rec["format"] == "wattbench-nvml-trace/1" and rec["synthetic"] is True  # recorded from a fake
    calls = rec["devices"][0]["calls"]
    assert {
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetClockInfo:1",
        "nvmlDeviceGetMemoryInfo:33554472",
        "nvmlDeviceGetUUID",
    } <= set(calls)
    assert all(len(e) == 3 and e[1] >= 0 for e in calls["nvmlDeviceGetFieldValues"])
    recorded_power = {f["186"]["value"] for _, _, f in calls["nvmlDeviceGetFieldValues"]}
    assert recorded_power <= {f["186"]["value"] for _, _, f in facts.calls["nvmlDeviceGetFieldValues"]}
    src = NvmlSource(nvml_spec={"fake": str(out), "latency_scale": 0})
    assert src.open()["gpus"][0]["uuid"] == facts.uuid
    (row,) = src.sample()
    assert row["power_w"] * 1000 in recorded_power and "sw_power_cap" in row["clock_events"]
    src.close()


_STAND_IN_LOAD = r"""
import sys, time
time.sleep(0.3)  # stands in for torch's import and CUDA start-up
print("wattbench-load: busy", flush=True)
time.sleep(float(sys.argv[1]) / 2)
print("wattbench-load: done", flush=True)
"""


def test_recorder_phases_are_the_observed_load(trace_path, facts, tmp_path, monkeypatch):
    import wattbench_agent.telemetry.record as record_mod

    monkeypatch.setattr(record_mod, "_MATMUL", _STAND_IN_LOAD)  # no torch / GPU here: a CPU stand-in
    rp = Replay(trace_path, start_offset_s=facts.idle[0], latency_scale=0)
    rec = record_mod.record(2.4, tmp_path / "rec.json", hz=10, load="matmul", nvml_spec=rp.spec, progress=False)
    names = [p["name"] for p in rec["phases"]]
    assert names == ["idle", "load_starting", "matmul_bf16", "idle"]
    launch, busy, done = (p["start_s"] for p in rec["phases"][1:])
    assert tuple(rec["load_planned_s"]) == (launch, 1.8)
    assert launch + 0.3 <= busy < done < 2.4 and tuple(rec["load_window_s"]) == (busy, done)
    assert done - busy == pytest.approx(0.6, abs=0.25)


def test_cli_sample_with_fake_nvml(trace_path, tmp_path, capsys):
    from wattbench_agent.telemetry.cli import main

    out = tmp_path / "s.jsonl"
    assert (
        main(
            [
                "telemetry",
                "sample",
                "--kind",
                "nvml",
                "--fake-nvml",
                str(trace_path),
                "--seconds",
                "0.6",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "mean" in text and "peak" in text and "% of one core" in text and "energy" in text
    assert out.read_text().count("\n") >= 4
    assert json.loads((tmp_path / "s.windows.jsonl").read_text().splitlines()[0])["window_name"] == "cli"
