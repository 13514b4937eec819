"""GPU telemetry from NVIDIA's dcgm-exporter: GET its /metrics page (Prometheus text) and turn the DCGM fields into
gpu_samples columns. Telemetry kind 'dcgm' (open_sampler(kind="dcgm", dcgm_url=...), `wattbench telemetry sample
--kind dcgm --url URL`, a plan's `telemetry: dcgm` with WATTBENCH_DCGM_URL on the agent's host).

The exporter's default counters (etc/default-counters.csv of NVIDIA/dcgm-exporter) give, per GPU (labels gpu,
UUID, device, modelName, Hostname, and pod/namespace/container on Kubernetes):

| DCGM field | unit | column |
|---|---|---|
| DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION | mJ since boot (counter) | energy_mj; window energy (figure of record) |
| DCGM_FI_DEV_POWER_USAGE | W, the driver's averaged power | power_avg_w |
| DCGM_FI_DEV_POWER_USAGE_INSTANT (not a default counter) | W | power_w (the instant trace) |
| DCGM_FI_DEV_FB_USED, _FB_FREE (+ _FB_RESERVED), or _FB_TOTAL | MiB | hbm_used_mib, hbm_total_mib |
| DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL | % | util_gpu_pct, util_mem_pct |
| DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_MEM_CLOCK | MHz | sm_clock_mhz, mem_clock_mhz |
| DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_MEMORY_TEMP | degC | temp_c, hbm_temp_c |
| DCGM_FI_DEV_POWER_MGMT_LIMIT (not a default counter) | W | power_limit_w |
| DCGM_FI_DEV_CLOCKS_EVENT_REASONS / _CLOCK_THROTTLE_REASONS (not default) | NVML bitmask | clock_event_reasons |

A field the page does not carry is NULL, and so is DCGM's "blank" value (int64 >= 0x7ffffffffffffff0, e.g.
9223372036854775794 = not supported; float >= 2^47). Without DCGM_FI_DEV_POWER_USAGE_INSTANT there is no instant
power trace, so trace_j is NULL: add that field to the exporter's counters CSV to get one.

Freshness: the exporter reads DCGM every `-c` milliseconds (30000 by default) and serves the last reading; a window
is only as sharp as that. Run it with `-c 100` (DCGM_EXPORTER_INTERVAL=100) for load points, as NVML's counter
updates every ~100 ms. Timestamps are this host's perf_counter_ns at the middle of the scrape, like the NVML source.

The page's sample lines are parsed by prometheus_client's text parser (escaped label values, sample timestamps, the
format's special values): 1.6 ms for the recorded 2-GPU page and 6.4 ms for an 8-GPU one on the 2-core CI machine,
against 0.34 and 1.4 ms for the regular expressions it replaced; at 10 Hz that is well inside the 100 ms tick
(an NVML tick costs ~4 ms per GPU, docs/TELEMETRY.md).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from wattbench_agent.telemetry.sources import ScrapedSource, TelemetryUnavailable, decode_clock_events

INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0  # 2**47: DCGM_FP64_BLANK and the special values above it

# gpu_samples column <- DCGM field (first present wins)
FIELDS = {
    "power_w": ("DCGM_FI_DEV_POWER_USAGE_INSTANT",),
    "power_avg_w": ("DCGM_FI_DEV_POWER_USAGE",),
    "energy_mj": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",),
    "hbm_used_mib": ("DCGM_FI_DEV_FB_USED",),
    "util_gpu_pct": ("DCGM_FI_DEV_GPU_UTIL",),
    "util_mem_pct": ("DCGM_FI_DEV_MEM_COPY_UTIL",),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK",),
    "mem_clock_mhz": ("DCGM_FI_DEV_MEM_CLOCK",),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP",),
    "hbm_temp_c": ("DCGM_FI_DEV_MEMORY_TEMP",),
    "power_limit_w": ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"),
    "clock_event_reasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
}


def _value(v: float) -> float | None:
    if v != v or v in (float("inf"), float("-inf")):
        return None
    if v >= FP64_BLANK:  # DCGM blank / not found / not supported / not permissioned (the int64 blanks too)
        return None
    return v


def _samples(lines: list[str]) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample line, parsed by prometheus_client. The lines are parsed together; when
    the parser refuses them (a malformed line), one by one, skipping the lines it refuses."""
    try:
        return _parsed("\n".join(lines))
    except ValueError:
        pass
    out = []
    for line in lines:
        try:
            out += _parsed(line)
        except ValueError:
            continue
    return out


def _parsed(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def parse_page(text: str) -> dict[str, dict[str, Any]]:
    """{gpu uuid: {"labels": {...}, "fields": {DCGM field: value or None}}} from a dcgm-exporter page. Lines that
    are not DCGM samples (comments, other exporters' metrics, malformed lines) are skipped."""
    gpus: dict[str, dict[str, Any]] = {}
    lines = [line for line in (raw.strip() for raw in text.splitlines()) if line.startswith("DCGM_FI_")]
    for name, labels, value in _samples(lines):
        key = labels.get("UUID") or (f"gpu{labels['gpu']}" if "gpu" in labels else None)
        if key is None:
            continue
        g = gpus.setdefault(key, {"labels": labels, "fields": {}})
        g["fields"][name] = _value(float(value))
    return gpus


def row_of(uuid: str, g: dict[str, Any], t_ns: int) -> dict[str, Any]:
    f = g["fields"]

    def pick(col: str) -> float | None:
        for name in FIELDS[col]:
            if f.get(name) is not None:
                return f[name]
        return None

    used = pick("hbm_used_mib")
    if f.get("DCGM_FI_DEV_FB_TOTAL") is not None:
        total = f["DCGM_FI_DEV_FB_TOTAL"]
    elif used is not None and f.get("DCGM_FI_DEV_FB_FREE") is not None:
        total = used + f["DCGM_FI_DEV_FB_FREE"] + (f.get("DCGM_FI_DEV_FB_RESERVED") or 0.0)
    else:
        total = None
    reasons = pick("clock_event_reasons")
    idx = g["labels"].get("gpu")
    return {
        "gpu_uuid": uuid,
        "gpu_index": int(idx) if idx is not None and idx.isdigit() else None,
        "t_ns": t_ns,
        "power_w": pick("power_w"),
        "power_avg_w": pick("power_avg_w"),
        "energy_mj": pick("energy_mj"),
        "hbm_used_mib": used,
        "hbm_total_mib": total,
        "util_gpu_pct": pick("util_gpu_pct"),
        "util_mem_pct": pick("util_mem_pct"),
        "sm_clock_mhz": pick("sm_clock_mhz"),
        "mem_clock_mhz": pick("mem_clock_mhz"),
        "temp_c": pick("temp_c"),
        "hbm_temp_c": pick("hbm_temp_c"),
        "power_limit_w": pick("power_limit_w"),
        "clock_event_reasons": int(reasons) if reasons is not None else None,
        "clock_events": decode_clock_events(int(reasons)) if reasons is not None else None,
    }


def metrics_url(url: str) -> str:
    u = url.rstrip("/")
    return u if u.endswith("/metrics") else u + "/metrics"


class DcgmSource(ScrapedSource):
    """Scrapes one dcgm-exporter; the deployment's GPUs are picked by UUID (all GPUs on the page when None)."""

    kind = "dcgm"
    call_name = "GET dcgm-exporter /metrics"

    def __init__(self, url: str | None, gpu_uuids: list[str] | None = None, timeout_s: float = 2.0):
        if not url:
            raise TelemetryUnavailable(
                "kind='dcgm' needs the dcgm-exporter URL (http://HOST:9400/metrics; "
                "WATTBENCH_DCGM_URL on the agent's host)"
            )
        super().__init__(metrics_url(url), gpu_uuids, timeout_s)

    def _get(self) -> tuple[dict[str, dict[str, Any]], int]:
        text, t_ns = self._timed_get(lambda resp: resp.text)
        gpus = parse_page(text)
        if self.wanted:
            gpus = {u: g for u, g in gpus.items() if u in self.wanted}
        return gpus, t_ns

    def open(self) -> dict[str, Any]:
        import httpx

        self.client = httpx.Client(timeout=self.timeout_s)
        try:
            gpus, _ = self._get()
        except Exception as exc:  # noqa: BLE001
            self.close()
            raise TelemetryUnavailable(f"dcgm-exporter at {self.url} unavailable: {exc}") from exc
        if not gpus:
            self.close()
            what = f"none of the GPUs {self.wanted}" if self.wanted else "no DCGM_FI_DEV_* sample with a UUID"
            raise TelemetryUnavailable(f"dcgm-exporter page {self.url} has {what}; expected dcgm-exporter's metrics")
        self.gpus = []
        for uuid, g in gpus.items():
            lab = g["labels"]
            self.driver_version = self.driver_version or lab.get("DCGM_FI_DRIVER_VERSION")
            idx = lab.get("gpu")
            limit = g["fields"].get("DCGM_FI_DEV_POWER_MGMT_LIMIT")
            self.gpus.append(
                {
                    "uuid": uuid,
                    "index": int(idx) if idx and idx.isdigit() else None,
                    "name": lab.get("modelName"),
                    "power_limit_w": limit,
                    "persistence_mode": None,
                    "hostname": lab.get("Hostname"),
                    "pci_bus_id": lab.get("pci_bus_id"),
                }
            )
        return self.info()

    def sample(self) -> list[dict[str, Any]]:
        try:
            gpus, t_ns = self._get()
        except Exception:  # noqa: BLE001 - a missed scrape is skipped, never invented
            return []
        return [row_of(g["uuid"], gpus[g["uuid"]], t_ns) for g in self.gpus if g["uuid"] in gpus]

    def read_energy(self) -> dict[str, tuple[float | None, int]]:
        try:
            gpus, t_ns = self._get()
        except Exception:  # noqa: BLE001
            return {g["uuid"]: (None, time.perf_counter_ns()) for g in self.gpus}
        return {
            g["uuid"]: ((gpus.get(g["uuid"]) or {}).get("fields", {}).get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), t_ns)
            for g in self.gpus
        }
