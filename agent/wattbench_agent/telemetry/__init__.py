"""GPU telemetry for wattbench: NVML sampling in its own process, energy windows from the energy counter.

Public API (docs/CONTRACTS.md section 4, docs/TELEMETRY.md):
    open_sampler(kind, gpu_uuids=None, url=None, hz=10.0, out=None, deployment_id=None) -> Sampler
    Sampler.begin_window(name) / Sampler.end_window(name) -> dict / Sampler.info() -> dict
    idle_baseline(sampler, seconds, name="idle_before") -> dict
"""

from wattbench_agent.telemetry.sampler import Sampler, idle_baseline, open_sampler
from wattbench_agent.telemetry.sources import TelemetryUnavailable, decode_clock_events

__all__ = ["Sampler", "TelemetryUnavailable", "decode_clock_events", "idle_baseline", "open_sampler"]
