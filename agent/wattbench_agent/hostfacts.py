"""Facts about the host a run measured on, and what its CPUs did during each load window.

A GPU's numbers depend on the host around it: a saturated or stolen CPU lengthens the steps an engine schedules
(measured on an H200 host of 16 cores: 15 busy processes cost a 64-stream point 14% of its tok/s and raised its TTFT
p50 from 94 to 344 ms). So every bundle says what the host was and how busy it was in each window:

- `host_facts()`: the deployments columns about the node: host name, CPU model, logical CPUs, the CPUs this
  agent may use (affinity, and a cgroup quota where one is set), the CPUs' clock, the hypervisor, the kernel;
- `CpuWindow`: read at a load window's edges (/proc/stat, /proc/loadavg and the engine's processes under /proc):
  the load_runs columns host_load_1m (the 1-minute load average at the window's end), host_busy_cpus (mean busy
  logical CPUs over the window: all time but idle and iowait), host_steal_share (the share of the CPUs' time the
  hypervisor gave to others) and engine_cpu_s (CPU seconds of the engine's process and all its descendants, those
  that ended included once their parent reaped them);
- `model_weights_hash(path)`: a bounded-cost fingerprint of a model folder (see its docstring).

A value /proc does not give (another OS, a container without it) is None, never 0. Stdlib only (the agent runs in
engine images).
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")
SYS = Path("/sys")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


# -- the host -----------------------------------------------------------------------------------------------------
def _cpuinfo() -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict a logical CPU."""
    text = _read(PROC / "cpuinfo") or ""
    cpus, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                cpus.append(cur)
            cur = {}
            continue
        key, _, value = line.partition(":")
        cur[key.strip()] = value.strip()
    if cur:
        cpus.append(cur)
    return cpus


def cpu_model(cpus: list[dict[str, str]] | None = None) -> str | None:
    """The CPU's model name (x86 'model name'; on Arm, the implementer and part /proc gives, else the machine)."""
    cpus = _cpuinfo() if cpus is None else cpus
    for key in ("model name", "Model", "cpu model", "Processor"):
        for c in cpus:
            if c.get(key):
                return c[key]
    if cpus and cpus[0].get("CPU implementer"):
        return f"implementer {cpus[0]['CPU implementer']} part {cpus[0].get('CPU part', '?')}"
    return platform.processor() or platform.machine() or None


def hypervisor(cpus: list[dict[str, str]] | None = None) -> str | None:
    """'none' where the CPU says it runs on bare metal (x86: no `hypervisor` flag); under a hypervisor its name as
    the firmware (DMI) says it, else what the clock sources say (kvm, hyperv, xen), else 'unknown'; None where this
    cannot be told (no x86 flags and no other sign)."""
    cpus = _cpuinfo() if cpus is None else cpus
    flags = next((c["flags"].split() for c in cpus if c.get("flags")), None)
    dmi = " ".join(
        v.strip()
        for v in (_read(SYS / "class/dmi/id/sys_vendor"), _read(SYS / "class/dmi/id/product_name"))
        if v and v.strip()
    )
    clocks = _read(SYS / "devices/system/clocksource/clocksource0/available_clocksource") or ""
    xen = (_read(SYS / "hypervisor/type") or "").strip()
    sign = xen or next(
        (name for key, name in (("kvm", "kvm"), ("hyperv", "hyperv"), ("xen", "xen")) if key in clocks), ""
    )
    if flags is not None and "hypervisor" not in flags:
        return "none"
    if flags is None and not sign:
        return None
    return dmi or sign or "unknown"


def cpu_usable() -> float | None:
    """CPUs this process may use: its affinity, lowered to the cgroup's quota where one is set (cgroup v2 cpu.max,
    v1 cfs_quota_us / cfs_period_us)."""
    try:
        n: float | None = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        n = float(os.cpu_count()) if os.cpu_count() else None
    quota = None
    v2 = _read(SYS / "fs/cgroup/cpu.max")
    if v2:
        q, _, period = v2.strip().partition(" ")
        if q != "max" and period:
            quota = int(q) / int(period)
    else:
        q1, p1 = _read(SYS / "fs/cgroup/cpu/cpu.cfs_quota_us"), _read(SYS / "fs/cgroup/cpu/cpu.cfs_period_us")
        if q1 and p1 and int(q1) > 0:
            quota = int(q1) / int(p1)
    if quota is not None and n is not None:
        return min(n, quota)
    return quota if n is None else n


def cpu_clock_mhz(cpus: list[dict[str, str]] | None = None) -> tuple[float | None, float | None]:
    """(mean current clock over the logical CPUs, the highest clock cpufreq allows), MHz; None where not said."""
    cpus = _cpuinfo() if cpus is None else cpus
    now = [float(c["cpu MHz"]) for c in cpus if c.get("cpu MHz")]
    top = _read(SYS / "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    return (sum(now) / len(now) if now else None), (int(top) / 1000 if top and top.strip().isdigit() else None)


def host_facts() -> dict[str, Any]:
    """The deployments columns about the host (sql/schema.sql): host, cpu_model, cpu_logical, cpu_usable, cpu_mhz,
    cpu_max_mhz, hypervisor, kernel."""
    cpus = _cpuinfo()
    mhz, max_mhz = cpu_clock_mhz(cpus)
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(cpus),
        "cpu_logical": os.cpu_count(),
        "cpu_usable": cpu_usable(),
        "cpu_mhz": mhz,
        "cpu_max_mhz": max_mhz,
        "hypervisor": hypervisor(cpus),
        "kernel": f"{platform.system()} {platform.release()}".strip() or None,
    }


# -- CPU use over a window ----------------------------------------------------------------------------------------
def cpu_times() -> tuple[int, int, int] | None:
    """(all, idle + iowait, steal) jiffies of the host's CPUs so far (/proc/stat's cpu line; guest time is already
    inside user and nice, so it is not added again)."""
    text = _read(PROC / "stat")
    if not text or not text.startswith("cpu "):
        return None
    v = [int(x) for x in text.split("\n", 1)[0].split()[1:9]]
    v += [0] * (8 - len(v))
    return sum(v), v[3] + v[4], v[7]


def load_1m() -> float | None:
    text = _read(PROC / "loadavg")
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _stat_fields(pid: str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    text = _read(PROC / pid / "stat")
    if not text or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


def _ticks(fields: list[str]) -> int:
    return int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])  # utime stime cutime cstime


def _children_tree(root: str) -> list[str] | None:
    """`root` and its descendants from /proc/<pid>/task/<tid>/children (kernels with CONFIG_PROC_CHILDREN): reads
    only the tree's own files. None where the kernel does not offer them."""
    try:
        tasks = os.listdir(PROC / root / "task")
    except OSError:
        return None
    if not tasks or not (PROC / root / "task" / tasks[0] / "children").exists():
        return None
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        try:
            tids = os.listdir(PROC / pid / "task")
        except OSError:
            continue  # ended meanwhile
        for tid in tids:
            todo.extend((_read(PROC / pid / "task" / tid / "children") or "").split())
    return seen


def tree_cpu_ticks(root: int) -> int | None:
    """CPU ticks (user + system, and those of its reaped children) of process `root` and all its descendants; None
    when the process is gone or /proc cannot say. Where the kernel lists each task's children, only the tree's files
    are read; else every process's stat (about 30 us each), to find the tree by parent ids."""
    tree = _children_tree(str(root))
    if tree is not None:
        total, found = 0, False
        for pid in tree:
            f = _stat_fields(pid)
            if f is not None and len(f) >= 15:
                total += _ticks(f)
                found = found or pid == str(root)
        return total if found else None
    parent: dict[str, str] = {}
    ticks: dict[str, int] = {}
    try:
        pids = [p for p in os.listdir(PROC) if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        f = _stat_fields(pid)
        if f is None or len(f) < 15:
            continue
        parent[pid] = f[1]
        ticks[pid] = _ticks(f)
    if str(root) not in ticks:
        return None
    children: dict[str, list[str]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [str(root)]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


class CpuWindow:
    """The host's and an engine's CPU use between `begin()` and `end()` (a load window's edges)."""

    def __init__(self, engine_pid: int | None = None):
        self.engine_pid = engine_pid
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else None
        self._start: dict[str, Any] | None = None

    def _snapshot(self) -> dict[str, Any]:
        return {
            "cpu": cpu_times(),
            "engine": tree_cpu_ticks(self.engine_pid) if self.engine_pid else None,
            "t": time.monotonic(),
        }

    def begin(self) -> None:
        self._start = self._snapshot()

    def end(self) -> dict[str, Any]:
        """The load_runs columns host_load_1m, host_busy_cpus, host_steal_share, engine_cpu_s (None: not measured)."""
        out: dict[str, Any] = {
            "host_load_1m": load_1m(),
            "host_busy_cpus": None,
            "host_steal_share": None,
            "engine_cpu_s": None,
        }
        a, b = self._start, self._snapshot()
        if a is None:
            return out
        n = os.cpu_count()
        if a["cpu"] and b["cpu"] and b["cpu"][0] > a["cpu"][0]:
            total = b["cpu"][0] - a["cpu"][0]
            idle = b["cpu"][1] - a["cpu"][1]
            out["host_busy_cpus"] = (total - idle) / total * n if n else None
            out["host_steal_share"] = (b["cpu"][2] - a["cpu"][2]) / total
        if a["engine"] is not None and b["engine"] is not None and self.tick_s:
            out["engine_cpu_s"] = max(b["engine"] - a["engine"], 0) * self.tick_s
        return out


# -- the model's weights ------------------------------------------------------------------------------------------
HASH_METHOD = "sampled-v1"
WHOLE_FILE_BYTES = 1 << 20  # files up to this size are read whole ...
WHOLE_BUDGET_BYTES = 32 << 20  # ... while they total this much (the rest of them: name and size only)
SAMPLE_BUDGET_BYTES = 32 << 20  # larger files: three blocks each (start, middle, end) sharing this much
MAX_BLOCK_BYTES = 1 << 20
MIN_BLOCK_BYTES = 4 << 10
MAX_FILES = 100_000


def model_weights_hash(path: str | os.PathLike) -> dict[str, Any] | None:
    """A fingerprint of a local model (a folder, or one file such as a GGUF) at a bounded cost: sha256 over every
    file's relative path and size in name order, the whole content of files up to 1 MiB (config, tokenizer, the
    safetensors index: up to 32 MiB of them), and of larger files (the weights) three blocks - start (the safetensors
    header), middle and end - of at most 1 MiB, sharing 32 MiB. So at most 64 MiB is read and one stat made a file
    (at most 100,000 files): a second on a cold disk, and the hash changes when any file is added, removed, resized
    or rewritten at its start, middle or end (seeded random weights change everywhere). It is not a content hash
    of every byte. None when `path` is not a local file or folder. Returns {hash: 'sampled-v1:<hex>', files, bytes,
    read_bytes, seconds}."""
    p = Path(path)
    t0 = time.monotonic()
    try:
        if p.is_file():
            files = [(p.name, p)]
        elif p.is_dir():
            files = []
            for folder, dirs, names in os.walk(p):
                dirs.sort()
                for name in names:
                    full = Path(folder) / name
                    files.append((full.relative_to(p).as_posix(), full))
                    if len(files) > MAX_FILES:
                        raise ValueError(f"more than {MAX_FILES} files under {p}")
            files.sort()
        else:
            return None
    except OSError:
        return None
    sizes = []
    for rel, full in files:
        try:
            sizes.append((rel, full, full.stat().st_size))
        except OSError:
            sizes.append((rel, full, -1))  # a dangling link: named, not read
    big = [s for s in sizes if s[2] > WHOLE_FILE_BYTES]
    block = max(MIN_BLOCK_BYTES, min(MAX_BLOCK_BYTES, SAMPLE_BUDGET_BYTES // max(3 * len(big), 1)))
    h = hashlib.sha256()
    read = whole = 0
    for rel, full, size in sizes:
        h.update(f"{rel}\0{size}\0".encode("utf-8", "surrogateescape"))
        if size < 0:
            continue
        try:
            with open(full, "rb") as f:
                if size <= WHOLE_FILE_BYTES:
                    if whole + size <= WHOLE_BUDGET_BYTES:
                        data = f.read()
                        h.update(data)
                        whole += len(data)
                        read += len(data)
                    continue
                for offset in sorted({0, max(size // 2 - block // 2, 0), max(size - block, 0)}):
                    f.seek(offset)
                    data = f.read(block)
                    h.update(offset.to_bytes(8, "little") + data)
                    read += len(data)
        except OSError:
            h.update(b"\0unreadable")
    return {
        "hash": f"{HASH_METHOD}:{h.hexdigest()}",
        "files": len(sizes),
        "bytes": sum(max(s[2], 0) for s in sizes),
        "read_bytes": read,
        "seconds": time.monotonic() - t0,
    }
