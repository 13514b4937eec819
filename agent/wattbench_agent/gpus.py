"""Which GPUs a deployment runs on: the plan's (by index or UUID) or free ones the agent assigns.

A deployment's figures count exactly its GPUs: the engine starts with CUDA_VISIBLE_DEVICES set to them (NVML
indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers them as NVML does; engines such as vLLM parse the
variable as integers, so UUIDs are not passed), and the sampler reads and sums the energy counters of exactly
those UUIDs. Without this, a TP-1 engine on an 8-GPU node would be charged for eight GPUs.

    node = NodeGpus.probe()                      # None where NVML is unavailable (no GPU, telemetry none)
    gpus = node.resolve(("0",), tp=1)            # the plan's GPUs, checked: exist, tp of them
    gpus = node.assign(tp=2, claimed={...})      # free GPUs: not claimed by a running deployment, no process on them

Agent-side code: stdlib and pynvml (or the fake NVML) only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from wattbench_agent.telemetry.sources import TelemetryUnavailable, load_nvml


class GpuAssignmentError(RuntimeError):
    """A deployment's GPUs cannot be what the plan asks; `kind` is a deployments.error_kind."""

    def __init__(self, kind: str, text: str):
        super().__init__(text)
        self.kind = kind


class GpusBusy(RuntimeError):
    """Not enough free GPUs now, but enough on the node: the deployment waits for a later round."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str | None = None


def visible_devices_env(gpus: Iterable[Gpu]) -> dict[str, str]:
    """The environment that pins an engine process to these GPUs."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NodeGpus:
    """The GPUs NVML sees on this node, and which of them have compute processes running."""

    def __init__(self, gpus: list[Gpu], busy: set[str] | None = None):
        self.gpus = list(gpus)
        self.busy = set(busy or ())

    @classmethod
    def probe(cls, nvml_spec: dict[str, Any] | None = None) -> NodeGpus | None:
        """The node's GPUs by NVML; None when NVML is not available here."""
        try:
            nvml = load_nvml(nvml_spec)
            nvml.nvmlInit()
        except (TelemetryUnavailable, Exception):  # noqa: BLE001 - no NVML, no driver: nothing to assign
            return None
        try:
            gpus, busy = [], set()
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                try:
                    name = _text(nvml.nvmlDeviceGetName(handle))
                except Exception:  # noqa: BLE001
                    name = None
                gpus.append(Gpu(index=i, uuid=uuid, name=name))
                try:
                    if nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                        busy.add(uuid)
                except Exception:  # noqa: BLE001 - not supported (or the fake NVML): taken as free
                    pass
            return cls(gpus, busy)
        except Exception:  # noqa: BLE001
            return None
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def describe(self) -> str:
        return ", ".join(f"{g.index}={g.uuid}" for g in self.gpus) or "no GPU"

    def resolve(self, wanted: Iterable[str], tp: int) -> list[Gpu]:
        """The plan's GPUs (indices or UUIDs), each found on this node, exactly tp of them."""
        out: list[Gpu] = []
        for item in wanted:
            item = str(item).strip()
            match = [g for g in self.gpus if g.uuid == item or (item.isdigit() and g.index == int(item))]
            if not match:
                raise GpuAssignmentError(
                    "gpu_not_found",
                    f"GPU {item!r} is not on this node; NVML sees {self.describe()} "
                    "(give an index or a UUID from that list)",
                )
            if match[0] in out:
                raise GpuAssignmentError("gpu_mismatch", f"GPU {item!r} is named twice")
            out.append(match[0])
        if len(out) != tp:
            raise GpuAssignmentError(
                "gpu_mismatch",
                f"the plan names {len(out)} GPU(s) ({', '.join(wanted)}) for tp={tp}; "
                f"expected exactly {tp}, one per tensor-parallel rank",
            )
        return out

    def assign(self, tp: int, claimed: set[str]) -> list[Gpu]:
        """tp free GPUs, lowest index first: not claimed by a deployment this agent runs, no process on them.

        Raises GpusBusy when the node has enough GPUs that will be free once the claimed ones are released,
        GpuAssignmentError when it never will."""
        usable = [g for g in self.gpus if g.uuid not in self.busy]
        if len(usable) < tp:
            busy = f" ({len(self.busy)} busy with other processes)" if self.busy else ""
            raise GpuAssignmentError(
                "gpu_mismatch",
                f"tp={tp} needs {tp} free GPU(s); this node has {len(usable)} of "
                f"{len(self.gpus)}{busy}: {self.describe()}",
            )
        free = [g for g in usable if g.uuid not in claimed]
        if len(free) < tp:
            raise GpusBusy(f"{len(free)} free now")
        return free[:tp]
