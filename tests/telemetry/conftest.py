"""Fixtures for the telemetry tests.

The primary fixture is the REAL recording tests/telemetry/traces/h200_trace.json (`wattbench telemetry record
--load matmul` on an H200). Nothing about it is hard-coded in the tests: `TraceFacts` reads the GPU's identity,
the phases and every expected value (counter energy over a window, the power values the fake can answer) from
the file, so a re-recording needs no test edits. traces/synthetic_faults.json is SYNTHETIC (fault cases the
recording lacks) and is used only where a test says so.
"""

import bisect
import json
import statistics
from pathlib import Path

import pytest

TRACES = Path(__file__).parent / "traces"
TRACE = TRACES / "h200_trace.json"
FAULTS = TRACES / "synthetic_faults.json"

PER_TICK_KEYS = (  # the calls NvmlSource.sample() makes per GPU and tick, as trace keys
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetMemoryInfo:33554472",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetClockInfo:1",
    "nvmlDeviceGetClockInfo:2",
    "nvmlDeviceGetTemperature:0",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetEnforcedPowerLimit",
)


class TraceFacts:
    """What a trace says, in the terms the tests need. Times are trace seconds (replay time), energies J."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text(encoding="utf-8"))
        self.calls = self.data["devices"][0]["calls"]
        self.seconds = float(self.data["seconds"])
        first = lambda key: self.calls[key][0][2]  # noqa: E731
        self.uuid = first("nvmlDeviceGetUUID")
        self.name = first("nvmlDeviceGetName")
        self.power_limit_w = first("nvmlDeviceGetEnforcedPowerLimit") / 1000.0
        self.persistence = bool(first("nvmlDeviceGetPersistenceMode"))
        self.driver = self.data["system"]["nvmlSystemGetDriverVersion"][0][2]
        mem = first("nvmlDeviceGetMemoryInfo:33554472")
        self.hbm_total_mib = mem["total"] / (1024 * 1024) if isinstance(mem, dict) and "total" in mem else None
        self._t = {k: [e[0] / 1000.0 for e in v] for k, v in self.calls.items()}
        # phases: [(name, start_s, end_s)]
        ph = self.data.get("phases") or [{"name": "idle", "start_s": 0.0}]
        ends = [p["start_s"] for p in ph[1:]] + [self.seconds]
        self.phases = [(p["name"], float(p["start_s"]), float(e)) for p, e in zip(ph, ends)]
        load = [(a, b) for n, a, b in self.phases if n.startswith("matmul")]
        self.load_phase = load[0] if load else None
        # per-sample series from the batched field call: (t_s, instant W, util %, clock-event mask)
        util = self.calls.get("nvmlDeviceGetUtilizationRates", [])
        reasons = self.calls.get("nvmlDeviceGetCurrentClocksEventReasons", [])
        self.power = [
            (t / 1000.0 + d / 2000.0, r["186"]["value"] / 1000.0)
            for t, d, r in self.calls["nvmlDeviceGetFieldValues"]
            if isinstance(r, dict) and "186" in r and r["186"].get("nvmlReturn", 0) == 0
        ]
        self.busy = self._busy_span(util)
        self.idle = self._idle_span(reasons)

    # -- spans derived from the samples ---------------------------------------------------------------------
    def _busy_span(self, util):
        """(first, last) sample time inside the load phase where the GPU was busy (utilization >= 90 %)."""
        if self.load_phase is None:
            return None
        a, b = self.load_phase
        busy = [t / 1000.0 for t, _, r in util if isinstance(r, dict) and r.get("gpu", 0) >= 90 and a <= t / 1000.0 < b]
        return (busy[0], busy[-1]) if busy else None

    def _idle_span(self, reasons):
        """Samples before the first non-idle phase in the GPU's idle state (clock-event gpu_idle): (first, end)."""
        end = next((a for n, a, _ in self.phases if n != "idle"), self.seconds)
        idle = [t / 1000.0 for t, _, r in reasons if isinstance(r, int) and r & 0x1 and t / 1000.0 < end]
        return (idle[0], end) if idle else (0.0, end)

    def steady(self, trim_s: float = 1.0):
        """The busy span without its first and last `trim_s` (ramp; POWER_AVERAGE lags ~1 s)."""
        a, b = self.busy
        return a + trim_s, b - trim_s

    # -- what the fake answers ------------------------------------------------------------------------------
    def at(self, key: str, t_s: float):
        """The return the fake gives a call of `key` made at replay time t_s (latest at or before; first before)."""
        i = bisect.bisect_right(self._t[key], t_s) - 1
        return self.calls[key][max(i, 0)][2]

    def rets_between(self, key: str, a_s: float, b_s: float) -> list:
        """Every return the fake can give a call of `key` made at some replay time in [a_s, b_s]."""
        i = max(bisect.bisect_right(self._t[key], a_s) - 1, 0)
        j = max(bisect.bisect_right(self._t[key], b_s) - 1, 0)
        return [e[2] for e in self.calls[key][i : j + 1]]

    def power_w_between(self, a_s: float, b_s: float) -> set[float]:
        return {r["186"]["value"] / 1000.0 for r in self.rets_between("nvmlDeviceGetFieldValues", a_s, b_s)}

    def counter_mj(self, t_s: float) -> float:
        return float(self.at("nvmlDeviceGetTotalEnergyConsumption", t_s))

    def counter_j_bracket(self, a_s: float, b_s: float, slack_s: float) -> tuple[float, float]:
        """Counter energy (J) of a window whose edge reads looked the counter up somewhere in [a-slack, a] and
        [b-slack, b] (a read is stamped at its middle; the fake looks up at its start). The counter is monotonic
        in the recording, so the extremes are the answer's bounds."""
        lo = self.counter_mj(b_s - slack_s) - self.counter_mj(a_s)
        hi = self.counter_mj(b_s) - self.counter_mj(a_s - slack_s)
        return lo / 1000.0, hi / 1000.0

    def median_ms(self, key: str, a_s: float, b_s: float) -> float:
        return statistics.median(d for t, d, _ in self.calls[key] if a_s <= t / 1000.0 <= b_s)


@pytest.fixture(scope="session")
def trace_path() -> Path:
    return TRACE


@pytest.fixture(scope="session")
def trace() -> dict:
    return json.loads(TRACE.read_text())


@pytest.fixture(scope="session")
def facts() -> TraceFacts:
    return TraceFacts(TRACE)


@pytest.fixture(scope="session")
def faults_path() -> Path:
    return FAULTS


class ListSink:
    """Collects rows like BundleWriter.write does."""

    def __init__(self):
        self.tables: dict[str, list[dict]] = {}
        self.errors: list[tuple[str, str]] = []

    def write(self, table, rows):
        rows = list(rows)
        self.tables.setdefault(table, []).extend(rows)
        return len(rows)

    def note_error(self, kind, text):
        self.errors.append((kind, text))


@pytest.fixture
def sink() -> ListSink:
    return ListSink()
