"""Local-process deployment target: start an engine server, wait for health, keep its log, stop it gracefully.

Agent-side code: stdlib and httpx only.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from wattbench_agent import fetch
from wattbench_agent.engines.failures import DeployError

# Lines engines print when weights plus KV cache do not fit (vLLM, TensorRT-LLM, PyTorch, the emulator). vLLM
# >= 0.6 refuses a KV cache too small for one max-length request: "To serve at least one request with the
# models's max seq len (4096), (0.50 GiB KV cache is needed, which is larger than the available KV cache memory
# (0.12 GiB)"; older releases and the emulator: "The model's max seq len (4096) is larger than the maximum number
# of tokens that can be stored in KV cache (1000)".
_OOM_MARKERS = (
    "out of memory",
    "outofmemoryerror",
    "no available memory for the cache blocks",
    "insufficient memory",
    "larger than the available kv cache memory",
    "larger than the maximum number of tokens that can be stored in kv cache",
)


def _die_with_parent() -> None:
    """In the engine's process, before exec: ask Linux to SIGTERM it when the agent dies (even by SIGKILL), so a
    killed run leaves no server holding the GPU's memory. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def engine_environment(extra: dict[str, str]) -> dict[str, str]:
    """The environment an engine process starts with: the agent's, less the Dagster Pipes context (the engine is
    not the Pipes process), plus the deployment's own variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES_")}
    env.update(extra)
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


# Lines TensorRT prints when an engine was compiled for another GPU architecture or TensorRT release.
_HW_MARKERS = (
    "generated on an incompatible device",
    "engine plan file is not compatible",
    "serialization assertion stdversionread == kserialization_version failed",
)


# How much of a failed server's log is read for its kind and cause: a multi-process engine (vLLM) prints the root
# cause in its engine core's traceback, and after it the API server's own traceback of several kB.
START_LOG_BYTES = 200_000

# A log line's prefixes: vLLM's process tag "(EngineCore pid=1885) " / "(APIServer pid=1765) ", then its logger's
# "ERROR 12-03 01:22:36 [core.py:708] ".
_PROCESS_TAG = r"^\s*(?:\([\w.-]+ pid=\d+\)\s*)?"
_LINE_PREFIX = re.compile(
    _PROCESS_TAG + r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"\s+\[[^\]]*\]\s*)?"
)
# The last line of a Python traceback: "ModuleNotFoundError: No module named 'flashinfer'",
# "torch.OutOfMemoryError: CUDA out of memory. ...", "RuntimeError: [TensorRT-LLM][ERROR] ...".
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)(?::\s.*)?$")
# Exceptions that only report that another process failed (vLLM's API server: "RuntimeError: Engine core
# initialization failed. See root cause above. Failed core proc(s): {}").
_WRAPPER_MARKERS = ("see root cause above", "engine core initialization failed")
# A line that reports an error without a traceback: logged at ERROR/CRITICAL, or "ERROR: ...", "[ERROR] ...".
_ERROR_LINE = re.compile(_PROCESS_TAG + r"(?:ERROR|CRITICAL)\b|\b(?:error|fatal)(?::|\])", re.IGNORECASE)


def start_failure_cause(log_text: str, max_chars: int = 500) -> str | None:
    """The line of a failed server's log that says why: the first exception raised (the root cause: later ones
    report it again from other processes), without its process and logger prefixes; else the last line that
    reports an error (logged at ERROR, or "ERROR: ..."); None when no line does."""
    raw = log_text.splitlines()
    lines = [_LINE_PREFIX.sub("", line).strip() for line in raw]
    raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
    cause = next(
        (line for line in raised if not any(m in line.lower() for m in _WRAPPER_MARKERS)), raised[0] if raised else None
    )
    if cause is None:
        cause = next(
            (line for line, original in zip(reversed(lines), reversed(raw)) if line and _ERROR_LINE.search(original)),
            None,
        )
    if cause is not None and len(cause) > max_chars:
        cause = cause[: max_chars - 3] + "..."
    return cause


def classify_start_failure(log_text: str) -> str:
    """The deployment error kind of a server that exited before it was healthy, from its log: hardware_mismatch,
    oom_at_start, port_in_use, else start_failed (a missing module, a bad flag, a crash: the cause line says)."""
    lowered = log_text.lower()
    if any(m in lowered for m in _HW_MARKERS):
        return "hardware_mismatch"
    if any(m in lowered for m in _OOM_MARKERS):
        return "oom_at_start"
    if "address already in use" in lowered:
        return "port_in_use"
    return "start_failed"


@dataclass
class LocalProcess:
    """One engine server process with its log file."""

    command: list[str]
    log_path: Path
    host: str = "127.0.0.1"
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    started_ns: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalProcess:
        if self.port and port_in_use(self.host, self.port):
            raise DeployError(
                "port_in_use", f"{self.host}:{self.port} is already in use; choose another port or stop what holds it"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.started_ns = time.perf_counter_ns()
        self.proc = subprocess.Popen(
            self.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=engine_environment(self.env),
            start_new_session=True,  # so stop() can signal the whole process group
            preexec_fn=_die_with_parent,
        )
        log.close()
        return self

    def log_tail(self, n_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return ""
        return data[-n_bytes:].decode(errors="replace")

    def wait_healthy(self, health_path: str = "/health", timeout_s: float = 600.0) -> float:
        """Poll the health endpoint until it answers 200; returns seconds since start."""
        assert self.proc is not None and self.started_ns is not None
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                log = self.log_tail(START_LOG_BYTES)
                cause = start_failure_cause(log)
                raise DeployError(
                    classify_start_failure(log),
                    f"server exited with code {code} before it was healthy"
                    + (f": {cause}" if cause else "")
                    + f"\nlog {self.log_path}, last lines:\n{log[-1200:]}",
                )
            try:  # the head only, 2 s in total: a body is not needed, nor waited for
                if fetch.status(self.url + health_path, timeout_s=2.0) == 200:
                    return (time.perf_counter_ns() - self.started_ns) / 1e9
            except fetch.FetchError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise DeployError(
                    "health_timeout",
                    f"{self.url}{health_path} not healthy after {timeout_s:.0f} s; log {self.log_path}",
                )
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the process group, then SIGKILL after `grace_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return self.proc.poll()
        try:
            return self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=5)


def start_server(
    command_for_port,
    log_path: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    health_path: str = "/health",
    health_timeout_s: float = 600.0,
    env: dict[str, str] | None = None,
    port_retries: int = 2,
) -> tuple[LocalProcess, float]:
    """Start a server and wait for health; returns (process, startup seconds).

    `command_for_port(port)` gives the command line for a port. With port 0 a free port is picked, and when the
    server still loses a race for it ('address already in use' in its log) another free port is tried, up to
    `port_retries` times. An explicit port that is taken is an error at once (DeployError 'port_in_use').
    """
    attempts = 1 + (port_retries if not port else 0)
    last: DeployError | None = None
    for _ in range(attempts):
        p = port or free_port(host)
        server = LocalProcess(
            command=list(command_for_port(p)), log_path=log_path, host=host, port=p, env=dict(env or {})
        )
        server.start()
        try:
            return server, server.wait_healthy(health_path, health_timeout_s)
        except DeployError as exc:
            server.stop()
            if exc.kind != "port_in_use":
                raise
            last = exc
    assert last is not None
    raise last
