"""A stopping agent ends, whatever arrives and whatever its main thread is doing.

- A burst of SIGTERMs (the kernel sends PR_SET_PDEATHSIG once for each thread of a SIGKILLed `wattbench run` the
  agent is handed to): the second, arriving while the handler of the first holds the stop Event's lock, deadlocked the
  agent for good in CI, its engine left running. Only the first signal acts now.
- The stop watchdog (wattbench_agent.procs.StopWatchdog): an agent whose main thread never gets to stop (here it
  swallows SIGTERM and waits on a lock forever) still ends, with the engine it recorded, within the grace once its
  parent is SIGKILLed or a stop is asked for; it leaves every thread's stack in the bundle's logs.

Real processes and signals: a parent, the agent-like child under it (die_with_parent, procs.record) and a sleeper in
its own session as the engine."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.reliability.test_stale_runs import wait_gone
from wattbench_agent import procs

REPO = Path(__file__).resolve().parents[2]

# The agent-like child: grace 1 s + 1 s an engine; SIGTERM swallowed; the main thread blocked for good in a wait
# that no signal ends, inside an import. `stop_after_s`: it sets the stop event itself after that long (a stop asked
# for, the parent alive).
CHILD = """
import json, os, signal, subprocess, sys, threading, time
from pathlib import Path
from wattbench_agent import procs

procs.STOP_GRACE_BASE_S, procs.STOP_GRACE_PER_ENGINE_S = 1.0, 1.0
bundle, stop_after_s = Path(sys.argv[1]), float(sys.argv[2])

class Writer:  # what procs.record needs of a BundleWriter
    path = bundle
    manifest = {}
    def update_manifest(self, **fields):
        self.manifest.update(fields)
        (bundle / "manifest.json").write_text(json.dumps(self.manifest))

signal.signal(signal.SIGTERM, lambda *a: None)  # a main thread that never acts on the stop
stop = threading.Event()
procs.die_with_parent(stop=stop)
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
writer = Writer()
procs.record(writer, "agent", os.getpid())
procs.record(writer, "engine:e", engine.pid)
if stop_after_s >= 0:
    threading.Timer(stop_after_s, stop.set).start()
class NeverAnswers:  # an import finder that blocks: the main thread then holds the import lock, as the CI agent's did
    def find_spec(self, name, path=None, target=None):
        if name == "never_answered":
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # blocked for good
        return None

sys.meta_path.insert(0, NeverAnswers())
import never_answered
"""


def start_family(tmp: Path, stop_after_s: float) -> tuple[subprocess.Popen, dict]:
    """A parent (a plain Python process) whose child is the agent-like process; returns the parent and the
    manifest's processes once the engine is recorded."""
    bundle = tmp / "bundle"
    bundle.mkdir()
    script = tmp / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()",
            sys.executable,
            str(script),
            str(bundle),
            str(stop_after_s),
        ],
        cwd=REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            processes = json.loads((bundle / "manifest.json").read_text())["processes"]
        except (OSError, ValueError, KeyError):
            processes = {}
        if "engine:e" in processes:
            return parent, processes
        assert parent.poll() is None, "the parent exited early"
        time.sleep(0.05)
    raise AssertionError("the child never recorded its engine")


def kill_all(parent: subprocess.Popen, idents: dict) -> None:
    for ident in idents.values():
        try:
            procs.stop(ident, group=True, grace_s=1)
        except procs.Refused:
            pass
    if parent.poll() is None:
        parent.kill()
        parent.wait(10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.parametrize("how", ["parent SIGKILLed", "stop asked for"])
def test_a_stuck_agent_ends_with_its_engine_within_the_grace(tmp_path, how):
    parent, idents = start_family(tmp_path, stop_after_s=-1 if how == "parent SIGKILLed" else 0.5)
    try:
        if how == "parent SIGKILLed":
            time.sleep(1.5)  # not before the grace: the child stays while its parent lives
            assert all(procs.alive(i) for i in idents.values()), "the child or its engine ended with its parent alive"
            parent.send_signal(signal.SIGKILL)
            parent.wait(10)
        # grace: 1 s + 1 s for the engine, polled every 0.25 s, then the engine's SIGTERM
        left = wait_gone(idents, 20)
        assert not left, f"still running: {left}"
    finally:
        kill_all(parent, idents)
    text = (tmp_path / "bundle" / "logs" / "stop_watchdog.txt").read_text()
    why = "its parent died" if how == "parent SIGKILLed" else "it was asked to stop"
    assert f"after {why}; stopping its engines and exiting" in text, text
    # every thread's stack: the watchdog's own and the blocked main thread's (in the child's script)
    assert "Current thread" in text and "child.py" in text, text


# The agent's own SIGTERM handler (cli.stop_on_sigterm) with a stop Event that receives a second SIGTERM while it
# holds its lock, as a burst does: the handler must not wait on that lock.
BURST = """
import os, signal, sys, threading
from wattbench_agent import runner
from wattbench_agent.cli import stop_on_sigterm

class SecondSignalInside(threading.Event):
    def set(self):
        with self._cond:
            os.kill(os.getpid(), signal.SIGTERM)  # the next one, while this handler holds the lock
            for _ in range(1000):  # bytecode: Python runs the pending handler here
                pass
            self._flag = True
            self._cond.notify_all()

runner.STOP = SecondSignalInside()
stop_on_sigterm()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10**6):
        pass
except KeyboardInterrupt as exc:
    print("stopped:", exc, "| stop set:", runner.STOP.is_set())
"""


def test_a_second_sigterm_inside_the_first_handler_does_not_deadlock_the_agent():
    proc = subprocess.run(
        [sys.executable, "-c", BURST], cwd=REPO, capture_output=True, text=True, timeout=15, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "stopped: terminated by SIGTERM | stop set: True", proc.stdout + proc.stderr[-2000:]
