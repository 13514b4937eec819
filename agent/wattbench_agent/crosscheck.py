"""An independent energy reading for cross-checking the sampler, taken at the same window edges.

Two sources, tried in order: nvidia-smi's energy query (where the driver's nvidia-smi has one; the H200 seen
with driver 580.159.04 has none), then Zeus's ZeusMonitor (ml-energy/zeus, when installed). Each reads the
counter through its own code path and process state. At both edges the cross-check reads first and the
sampler second, so the cross-check's own call latency cancels out in the difference.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Protocol

# Field names nvidia-smi has used for the total-energy counter (mJ since driver load), newest first.
_SMI_FIELDS = ("total_energy_consumption", "energy.consumption")


class CrossCheck(Protocol):
    source: str

    def begin(self) -> None: ...

    def end_j(self) -> float | None: ...


class NvidiaSmiEnergy:
    def __init__(self, gpu_uuids: list[str] | None, field: str):
        self.binary = shutil.which("nvidia-smi")
        self.gpu_uuids = gpu_uuids
        self.field = field
        self.source = f"nvidia-smi {field}"
        self._start: dict[str, float] = {}

    @staticmethod
    def detect_field() -> str | None:
        binary = shutil.which("nvidia-smi")
        if not binary:
            return None
        try:
            helptext = subprocess.run([binary, "--help-query-gpu"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return next((name for name in _SMI_FIELDS if re.search(rf'"{re.escape(name)}"', helptext)), None)

    def read_mj(self) -> dict[str, float]:
        out = subprocess.run(
            [self.binary, f"--query-gpu=uuid,{self.field}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        values = {}
        for line in out.strip().splitlines():
            uuid, value = [p.strip() for p in line.split(",", 1)]
            if self.gpu_uuids and uuid not in self.gpu_uuids:
                continue
            try:
                values[uuid] = float(value)
            except ValueError:
                continue  # "[N/A]": not supported here
        return values

    def begin(self) -> None:
        self._start = self.read_mj()

    def end_j(self) -> float | None:
        end = self.read_mj()
        deltas = [end[u] - self._start[u] for u in self._start if u in end]
        if not deltas or any(d < 0 for d in deltas):
            return None
        return sum(deltas) / 1000.0


class ZeusEnergy:
    def __init__(self, gpu_uuids: list[str] | None):
        import pynvml
        from zeus.monitor import ZeusMonitor

        pynvml.nvmlInit()
        indices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if not gpu_uuids or uuid in gpu_uuids:
                indices.append(i)
        self.monitor = ZeusMonitor(gpu_indices=indices, cpu_indices=[])
        import zeus

        self.source = f"zeus {getattr(zeus, '__version__', '')} ZeusMonitor".replace("  ", " ")
        self._n = 0

    def begin(self) -> None:
        self._n += 1
        self.monitor.begin_window(f"w{self._n}", sync_execution=False)

    def end_j(self) -> float | None:
        measurement = self.monitor.end_window(f"w{self._n}", sync_execution=False)
        return float(sum(measurement.gpu_energy.values()))


def open_crosscheck(gpu_uuids: list[str] | None) -> tuple[CrossCheck | None, str]:
    """The first independent energy reader available here, and a line saying what was chosen or why none."""
    field = NvidiaSmiEnergy.detect_field()
    if field:
        return NvidiaSmiEnergy(gpu_uuids, field), f"energy cross-check: nvidia-smi {field}"
    try:
        zeus = ZeusEnergy(gpu_uuids)
    except Exception as exc:  # not installed, or its dependencies are missing
        return None, f"energy cross-check skipped: nvidia-smi has no energy query and Zeus is unavailable ({exc})"
    return zeus, f"energy cross-check: {zeus.source} (nvidia-smi has no energy query here)"
