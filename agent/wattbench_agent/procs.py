"""Which processes a run started, so that whoever finds the run dead can stop exactly them.

A process is named by its identity: pid, the host, and its start time in clock ticks since boot
(/proc/<pid>/stat field 22). A pid is reused after a process ends; pid and start time together are not, so
`alive(identity)` is false for a process that ended even when its pid now belongs to another one, and
`stop(identity)` never signals a stranger.

- the agent records itself and each engine server it starts in its bundle's manifest (`processes`);
- `wattbench run` tags its Dagster run with its own identity;
- the stale-run reaper (pipelines/runs.py) reads both when the run's process is gone.

`die_with_parent()` asks Linux to SIGTERM the calling process when its parent dies (PR_SET_PDEATHSIG): the agent
does so under Dagster Pipes, so a `wattbench run` killed with SIGKILL takes its agent (and through the agent's
SIGTERM handling, the engines) with it.

Stdlib only; Linux /proc (elsewhere a process is taken as alive while its pid exists).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None where /proc does not say (or it is gone)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def identity(pid: int | None = None) -> dict[str, Any]:
    """{"pid", "host", "start_ticks"} of a process (default: this one)."""
    pid = os.getpid() if pid is None else int(pid)
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": start_ticks(pid)}


def _zombie(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def alive(ident: dict[str, Any] | None) -> bool | None:
    """True if the process named by `ident` still runs, False if it ended, None if this host cannot tell (the
    identity is from another host)."""
    if not ident or not ident.get("pid"):
        return False
    if ident.get("host") and ident["host"] != socket.gethostname():
        return None
    pid = int(ident["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    if _zombie(pid):
        return False
    want = ident.get("start_ticks")
    return want is None or start_ticks(pid) in (None, int(want))


def stop(ident: dict[str, Any], group: bool = False, grace_s: float = 10.0) -> bool:
    """SIGTERM the process (its process group with `group`: an engine server leads its own), SIGKILL after
    `grace_s`. Returns True if it was running. Only ever signals the very process `ident` names."""
    if not alive(ident):
        return False
    pid = int(ident["pid"])

    def send(sig: int) -> None:
        try:
            if group and os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(ident):
            return True
        time.sleep(0.1)
    if alive(ident):
        send(signal.SIGKILL)
    return True


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have Linux send `sig` to this process when its parent dies (also by SIGKILL). If the parent is already gone,
    the signal is raised now. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def record(writer: Any, name: str, pid: int) -> None:
    """Note a process this run started in the bundle's manifest (`processes`), for the stale-run reaper."""
    processes = dict(writer.manifest.get("processes") or {})
    processes[name] = identity(pid)
    writer.update_manifest(processes=processes)
