"""Which processes a run started, so that whoever finds the run dead can stop exactly them.

A process is named by its identity: pid, the host, its start time in clock ticks since boot (/proc/<pid>/stat
field 22) and its process group. A pid is reused after a process ends; pid and start time together are not, so
`alive(identity)` is false for a process that ended even when its pid now belongs to another one, and
`stop(identity)` never signals a stranger.

An identity is read from files (a bundle's manifest) and tags that anyone can write, so `stop` signals only what it
can prove (`refusal` says why not): a real integer pid > 1 and below the kernel's pid_max (0, -1 and other negative
numbers are process groups or every process, 1 is init), recorded on this host, with its start time recorded and
equal to the running process's; a process group only where the identity recorded that the process led its own
group and it still does. Where Linux has pidfds (5.3+), the process is opened once, checked through /proc while
held open and signalled through the same handle, so a pid reused between the check and the signal is never hit.

Pid, host and start time say which process it is, not that it is the run's: anyone can read them from /proc and
write them into a manifest. So the process must also carry the run's mark: the run token (`WATTBENCH_RUN_TOKEN`, a
random value set in the environment a process of the run starts with: `wattbench run` gives one to the agent, the
agent to every engine it starts) found in /proc/<pid>/environ, which only its owner and root can read, and no
other process holds; or, for an agent started by hand without a token, the sha256 of its exact command line, which
proves it only for a process of the reaper's own user (anyone can read a command line). A manifest an older agent
wrote records neither: it is refused, and says so.

- the agent records itself and each engine server it starts in its bundle's manifest (`processes`);
- `wattbench run` tags its Dagster run with its own identity;
- the stale-run reaper (pipelines/runs.py) reads both when the run's process is gone.

`die_with_parent()` asks Linux to SIGTERM the calling process when its parent dies (PR_SET_PDEATHSIG): the agent
does so under Dagster Pipes, so a `wattbench run` killed with SIGKILL takes its agent (and through the agent's
SIGTERM handling, the engines) with it. A watchdog thread makes that bounded whatever the main thread is doing: it
sends the signal to the main thread itself when the parent is gone (a process-wide signal taken by another thread
does not interrupt a main thread blocked in a wait), and once the parent is gone or a stop was asked for, a process
still running `stop_grace_s()` later writes every thread's stack, stops the engines it recorded and exits.

Stdlib only; Linux /proc (elsewhere a process is taken as alive while its pid exists, and none can be proven, so
`stop` signals nothing).
"""

from __future__ import annotations

import errno
import faulthandler
import hashlib
import os
import secrets
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

# the kernel's largest pid_max (PID_MAX_LIMIT on 64-bit), where /proc/sys/kernel/pid_max cannot be read
PID_MAX_LIMIT = 4 * 1024 * 1024
# the run's mark on its processes (module docstring)
RUN_TOKEN_ENV = "WATTBENCH_RUN_TOKEN"
_MIN_TOKEN_CHARS = 16


class Refused(Exception):
    """An identity that does not prove which process it names: nothing was signalled. The message says why."""


def pid_max() -> int:
    """Pids on this host are below this (/proc/sys/kernel/pid_max)."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return PID_MAX_LIMIT


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on, or None where /proc does not say (or the process is gone)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 19 else None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None where /proc does not say (or it is gone)."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except ValueError:
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def run_token() -> str:
    """This run's token: the one this process was started with, else a new one, set in its environment so that
    every process it starts from now on carries it."""
    token = os.environ.get(RUN_TOKEN_ENV)
    if not token or len(token) < _MIN_TOKEN_CHARS:
        token = os.environ[RUN_TOKEN_ENV] = secrets.token_hex(16)
    return token


def _environ_token(pid: int) -> str | None:
    """The run token in the environment `pid` started with (/proc/<pid>/environ), or None (none, or unreadable)."""
    try:
        data = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    key = RUN_TOKEN_ENV.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key) :].decode("utf-8", "replace")
    return None


def _cmdline_sha256(pid: int) -> str | None:
    """sha256 of `pid`'s command line (/proc/<pid>/cmdline), or None. A hash: an engine's command line may hold a
    secret (`--api-key`), and the manifest is a file of the bundle."""
    try:
        data = (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if data else None


def identity(pid: int | None = None) -> dict[str, Any]:
    """{"pid", "host", "start_ticks", "pgid"} of a process (default: this one), and its mark: "run_token" where it
    was started with one, else "cmdline_sha256". A process that leads its own process group (an engine server
    started in a session of its own) has pgid == pid."""
    pid = os.getpid() if pid is None else int(pid)
    ident: dict[str, Any] = {
        "pid": pid,
        "host": socket.gethostname(),
        "start_ticks": start_ticks(pid),
        "pgid": _pgid(pid),
    }
    token = _environ_token(pid)
    if token is not None:
        ident["run_token"] = token
    else:
        ident["cmdline_sha256"] = _cmdline_sha256(pid)
    return ident


def _is_int(value: Any) -> bool:
    return type(value) is int  # not bool, float or str, which int() would take


def _pid_refusal(ident: Any) -> str | None:
    """Why `ident`'s pid cannot name one process of this host (None: it can)."""
    if not isinstance(ident, dict):
        return f"not a process identity ({type(ident).__name__}); expected an object with pid, host and start_ticks"
    if "pid" not in ident or ident["pid"] is None:
        return "no pid recorded"
    pid = ident["pid"]
    if not _is_int(pid):
        return f"pid {pid!r} is not an integer ({type(pid).__name__})"
    if pid <= 1:
        what = {
            1: "is init",
            0: "means the signaller's own process group to kill()",
            -1: "means every process to kill()",
        }.get(pid, f"means process group {-pid} to kill()")
        return f"pid {pid} {what}; expected the pid of one process, an integer > 1"
    limit = pid_max()
    if pid >= limit:
        return f"pid {pid} is beyond this host's pid_max ({limit}); expected an integer > 1 and < {limit}"
    return None


def _host_refusal(ident: dict[str, Any]) -> str | None:
    host, here = ident.get("host"), socket.gethostname()
    if not isinstance(host, str) or not host:
        return f"no host recorded ({host!r}); expected the name of the host that ran it"
    if host != here:
        return f"recorded on host {host!r}, this is {here!r}"
    return None


def why_unknown(ident: Any) -> str | None:
    """Why this host cannot tell whether `ident`'s process runs (`alive` is None), or None where it can."""
    return _pid_refusal(ident) or _host_refusal(ident)


def refusal(ident: Any) -> str | None:
    """Why `stop(ident)` would refuse to signal anything (None: the identity names one process of this host
    precisely enough to check it)."""
    why = why_unknown(ident)
    if why:
        return why
    pid, ticks = ident["pid"], ident.get("start_ticks")
    if ticks is None:
        return (
            f"no start time (start_ticks) recorded: pid {pid} cannot be told apart from a later process given the "
            "same pid"
        )
    if not _is_int(ticks) or ticks < 0:
        return f"start_ticks {ticks!r} is not a non-negative integer"
    if pid == os.getpid():
        return f"pid {pid} is this process"
    token, cmd = ident.get("run_token"), ident.get("cmdline_sha256")
    if token is None and cmd is None:
        return (
            "no mark of the run recorded (run_token or cmdline_sha256; an older agent's manifest?): pid, host and "
            "start time say which process it is, not that it is the run's"
        )
    if token is not None and not (isinstance(token, str) and len(token) >= _MIN_TOKEN_CHARS):
        return f"run_token {token!r:.40} is not a run token; expected a string of {_MIN_TOKEN_CHARS}+ characters"
    if token is None and not (isinstance(cmd, str) and len(cmd) == 64):
        return f"cmdline_sha256 {cmd!r:.40} is not a sha256; expected 64 hex digits"
    return None


def mark_refusal(ident: dict[str, Any]) -> str | None:
    """Why the running process at `ident`'s pid does not carry the run's mark `ident` recorded (None: it does).
    Read while the process is held (`stop`); `refusal(ident)` must be None first."""
    pid, token = ident["pid"], ident.get("run_token")
    if token is not None:
        found = _environ_token(pid)
        if found == token:
            return None
        what = "has no WATTBENCH_RUN_TOKEN" if found is None else "has another WATTBENCH_RUN_TOKEN"
        return f"pid {pid} {what} in /proc/{pid}/environ (or it cannot be read); it is not a process of this run"
    try:
        owner = os.stat(Path("/proc") / str(pid)).st_uid
    except OSError:
        owner = None
    if owner != os.geteuid():
        return (
            f"pid {pid} is another user's (uid {owner}) and is marked by its command line only, which anyone can read; "
            "expected a run token"
        )
    if _cmdline_sha256(pid) != ident["cmdline_sha256"]:
        return f"pid {pid} runs another command line than the one recorded; it is not a process of this run"
    return None


def _zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] == "Z"


def alive(ident: Any) -> bool | None:
    """True if the process named by `ident` still runs, False if it ended (or its pid now belongs to a process
    with another start time), None if this host cannot tell: the identity is from another host, or has no usable
    pid or host. Without a recorded start time a process holding the pid is taken as alive. Signals nothing."""
    if why_unknown(ident):
        return None
    pid = ident["pid"]
    try:
        os.kill(pid, 0)  # signal 0: sends nothing, says whether the pid exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    if _zombie(pid):
        return False
    want = ident.get("start_ticks")
    if not _is_int(want):
        return True
    now = start_ticks(pid)
    return now is None or now == want  # None: /proc does not say (not Linux)


class _Handle:
    """One process, held: through a pidfd where Linux has them (the signal reaches the process that was checked,
    whatever happens to its pid meanwhile), else by its pid."""

    def __init__(self, pid: int):
        self.pid = pid
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(pid)
        except AttributeError:  # Python < 3.9 or not Linux
            pass
        except ProcessLookupError:
            raise
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # a thread's id, not a process's
                raise Refused(f"pid {pid} is not a process (a thread of another?)") from exc
            if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EACCES):
                raise

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def send(self, sig: int) -> None:
        if self.fd is not None:
            signal.pidfd_send_signal(self.fd, sig)
        else:
            os.kill(self.pid, sig)

    def running(self) -> bool:
        """Whether the held process has not exited (a zombie has)."""
        if self.fd is not None:
            readable, _, _ = select.select([self.fd], [], [], 0)  # a pidfd is readable once its process exits
            return not readable
        return not _zombie(self.pid) and _stat_fields(self.pid) is not None

    def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the process to exit; True if it did."""
        deadline = time.monotonic() + timeout_s
        while self.running():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.fd is not None:
                select.select([self.fd], [], [], left)
            else:
                time.sleep(min(0.1, left))
        return True


def stop(ident: Any, group: bool = False, grace_s: float = 10.0) -> bool:
    """SIGTERM the process `ident` names, SIGKILL after `grace_s`. Returns True if it was running (and was
    signalled), False if it had ended or its pid now belongs to another process (by start time).

    With `group`, its process group is signalled instead, but only where `ident` recorded that the process led its
    own group (pgid == pid) and it still does; otherwise the process alone. Raises Refused, signalling nothing,
    when `ident` cannot prove which process it names (see `refusal`), or the process it names does not carry the
    run's mark (see `mark_refusal`)."""
    why = refusal(ident)
    if why:
        raise Refused(why)
    pid, want = ident["pid"], ident["start_ticks"]
    try:
        handle = _Handle(pid)
    except ProcessLookupError:
        return False
    try:
        # its start time is read between two looks at the held process: if it still runs after the read, the
        # /proc entry read was its own (a pid is not reused while its process runs, nor while it is a zombie)
        if not handle.running() or start_ticks(pid) != want or not handle.running():
            return False
        why = mark_refusal(ident)  # the very process, held: is it the run's?
        if why:
            raise Refused(why)
        # its group only if it was recorded leading one and still does
        lead = group and ident.get("pgid") == pid and _pgid(pid) == pid

        def send(sig: int) -> None:
            try:
                if lead and handle.running():
                    os.killpg(pid, sig)  # the leader, checked above, holds the group's id while it runs
                else:
                    handle.send(sig)  # the very process checked above
            except (ProcessLookupError, PermissionError):
                pass

        send(signal.SIGTERM)
        if not handle.wait(grace_s):
            send(signal.SIGKILL)
        return True
    finally:
        handle.close()


def die_with_parent(sig: int = signal.SIGTERM, stop: threading.Event | None = None) -> None:
    """Have Linux send `sig` to this process when its parent dies (also by SIGKILL). If the parent is already gone,
    the signal is raised now. Then watch (`StopWatchdog`): the parent's death, or `stop` being set, ends this
    process within `stop_grace_s()` whatever its main thread is doing. Elsewhere a no-op."""
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
    StopWatchdog(parent, sig, stop).start()


# The bundle writer this process records its processes with (`record`): the watchdog reads the engines it stops,
# and where to write, from it.
_WRITER: list[Any] = []
# the time a stopping agent gets to stop its engines and close its bundle on its own: a base, and a server's
# LocalProcess.stop (SIGTERM, 10 s, SIGKILL, 5 s) for each engine it runs
STOP_GRACE_BASE_S = 30.0
STOP_GRACE_PER_ENGINE_S = 15.0


def _recorded_engines() -> list[dict[str, Any]]:
    """The identities of the processes this agent started, as its manifest records them (not the agent itself).
    Read without the writer's lock, which a stuck main thread may hold: `record` replaces the dict whole."""
    processes = (_WRITER[0].manifest.get("processes") or {}) if _WRITER else {}
    return [ident for name, ident in processes.items() if name != "agent"]


def stop_grace_s() -> float:
    return STOP_GRACE_BASE_S + STOP_GRACE_PER_ENGINE_S * sum(1 for ident in _recorded_engines() if alive(ident))


class StopWatchdog(threading.Thread):
    """A daemon thread that bounds how long a stopping agent runs. Every 0.25 s: once the parent is gone (its pid
    is no longer the parent's), `sig` goes to the main thread itself, which a wait it is blocked in then returns
    from (the kernel's own signal may have been taken by another thread); once the parent is gone or `stop` is
    set, a process still running `stop_grace_s()` later writes every thread's stack to stderr and to the bundle's
    logs/stop_watchdog.txt, stops the engines it recorded (their process groups: SIGTERM, SIGKILL after 5 s) and
    exits with 128 + sig. What the bundle already holds stays (its manifest says complete=false)."""

    def __init__(self, parent: int, sig: int, stop: threading.Event | None, poll_s: float = 0.25):
        super().__init__(name="stop-watchdog", daemon=True)
        self.parent, self.sig, self.stop, self.poll_s = parent, int(sig), stop, poll_s

    def run(self) -> None:
        deadline = None
        while True:
            time.sleep(self.poll_s)
            gone = os.getppid() != self.parent
            asked = self.stop is not None and self.stop.is_set()
            if deadline is None and (gone or asked):
                why = "its parent died" if gone else "it was asked to stop"
                grace = stop_grace_s()
                deadline = time.monotonic() + grace
                if not asked:
                    signal.pthread_kill(threading.main_thread().ident, self.sig)
            if deadline is not None and time.monotonic() > deadline:
                self.end(why, grace)

    def end(self, why: str, grace: float) -> None:
        # Nothing here may wait on what the stuck main thread may hold: no import (its module lock), no sys.stderr
        # (its buffer's lock); the stacks go to a file of its own, then to fd 2 from a thread given 2 s.
        line = (
            f"wattbench agent: still running {grace:.0f} s after {why}; stopping its engines and exiting "
            "(every thread's stack follows)\n"
        )
        try:
            path = Path(_WRITER[0].path) / "logs" / "stop_watchdog.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as out:  # bytes: no codec to look up
                out.write(line.encode())
                out.flush()
                faulthandler.dump_traceback(file=out, all_threads=True)
        except (IndexError, OSError):
            pass
        for ident in _recorded_engines():
            try:
                stop(ident, group=True, grace_s=5.0)
            except (Refused, OSError):
                pass

        def to_stderr() -> None:
            try:
                os.write(2, line.encode())
                faulthandler.dump_traceback(file=2, all_threads=True)
            except OSError:
                pass

        said = threading.Thread(target=to_stderr, name="stop-watchdog-stderr", daemon=True)
        said.start()
        said.join(2.0)
        os._exit(128 + self.sig)


def record(writer: Any, name: str, pid: int) -> None:
    """Note a process this run started in the bundle's manifest (`processes`), for the stale-run reaper (and the
    StopWatchdog, should this agent not stop it itself): its identity, with its process group (an engine server
    leads its own)."""
    processes = dict(writer.manifest.get("processes") or {})
    processes[name] = identity(pid)
    writer.update_manifest(processes=processes)
    if not _WRITER:
        _WRITER.append(writer)
