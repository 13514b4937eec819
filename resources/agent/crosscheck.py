"""An independent energy reading for cross-checking the sampler: nvidia-smi's energy query.

nvidia-smi is a separate program reading the driver's counter through its own code path; reading it at the
same window edges as the sampler (nvidia-smi first at both edges, so its call latency cancels out in the
difference) gives a second figure for every load point's energy.
"""

from __future__ import annotations

import re
import shutil
import subprocess

# Field names nvidia-smi has used for the total-energy counter (mJ since driver load), newest first.
_CANDIDATES = ("total_energy_consumption", "energy.consumption")


class NvidiaSmiEnergy:
    def __init__(self, gpu_uuids: list[str] | None = None):
        self.binary = shutil.which("nvidia-smi")
        self.gpu_uuids = gpu_uuids
        self.field = self._detect_field() if self.binary else None
        self._start: dict[str, float] = {}

    @property
    def available(self) -> bool:
        return self.field is not None

    def _detect_field(self) -> str | None:
        try:
            helptext = subprocess.run([self.binary, "--help-query-gpu"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        for name in _CANDIDATES:
            if re.search(rf'"{re.escape(name)}"', helptext):
                return name
        return None

    def read_mj(self) -> dict[str, float]:
        """Counter per GPU uuid, mJ (nvidia-smi reports mJ for this field with nounits)."""
        out = subprocess.run(
            [self.binary, f"--query-gpu=uuid,{self.field}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
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
        self._start = self.read_mj() if self.available else {}

    def end_j(self) -> float | None:
        if not self.available or not self._start:
            return None
        end = self.read_mj()
        deltas = [end[u] - self._start[u] for u in self._start if u in end]
        if not deltas or any(d < 0 for d in deltas):
            return None
        return sum(deltas) / 1000.0
