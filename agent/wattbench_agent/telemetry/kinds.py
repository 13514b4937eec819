"""A telemetry kind's source: nvml (this host's NVML, sources.NvmlSource), dcgm (an NVIDIA dcgm-exporter's
/metrics, dcgm.DcgmSource) or emulated (the emulator's /telemetry, sources.EmulatedSource). The sampler opens one
through `make_source`, in its own process."""

from __future__ import annotations

import os

from wattbench_agent.telemetry.dcgm import DcgmSource
from wattbench_agent.telemetry.sources import EmulatedSource, NvmlSource


def make_source(kind: str, gpu_uuids=None, url=None, nvml_spec=None, sample_energy=True, dcgm_url=None):
    if kind == "nvml":
        return NvmlSource(gpu_uuids, nvml_spec=nvml_spec, sample_energy=sample_energy)
    if kind == "emulated":
        return EmulatedSource(url, gpu_uuids)
    if kind == "dcgm":
        return DcgmSource(dcgm_url or os.environ.get("WATTBENCH_DCGM_URL") or url, gpu_uuids)
    raise ValueError(f"unknown telemetry kind {kind!r}; expected nvml, dcgm, emulated or none")
