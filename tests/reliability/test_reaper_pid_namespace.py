"""The stale-run reaper signals only a process it can prove is the run's own.

A manifest with `pid: -1` made the reaper call kill(-1, SIGTERM) then kill(-1, SIGKILL): as root, every process
of the host. A manifest without `start_ticks` or `host` made it kill whatever process then held the pid. Each case
here runs the reaper inside a private PID namespace (`unshare --pid --fork --mount-proc`; tests/reliability/
pidns_driver.py is its init), where a wrong signal can reach only the processes the case started there: a
sentinel nobody names, a live stranger whose pid a manifest names loosely, a group leader and a member of its group.
Every one of them must survive each malformed identity, the namespace's init must receive no signal, and the
refusal must name the entry and say why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "reliability" / "pidns_driver.py"
SMOKE = REPO / "tests" / "data" / "smoke_plan.yaml"
EVERYONE = ["sentinel", "stranger", "leader", "member", "outsider"]


def _namespaces_work() -> str | None:
    if not sys.platform.startswith("linux"):
        return "PID namespaces are Linux's"
    if shutil.which("unshare") is None:
        return "no unshare(1) on PATH"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "test $$ = 1"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"cannot make a private PID namespace here (needs root or user namespaces): {probe.stderr.strip()}"
    return None


NO_NAMESPACE = _namespaces_work()
pytestmark = pytest.mark.skipif(NO_NAMESPACE is not None, reason=f"{NO_NAMESPACE}; these tests signal real pids")


def in_namespace(tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 120) -> dict:
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(DRIVER), *args],
        cwd=REPO,
        env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "agent")])},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PIDNS-RESULT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1].removeprefix("PIDNS-RESULT "))


def stop_case(tmp_path: Path, processes: dict, env: dict | None = None) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    case = tmp_path / "case.json"
    case.write_text(json.dumps({"processes": processes}))
    return in_namespace(tmp_path, "stop", str(case), env=env)


GOOD = {"host": "$host", "start_ticks": "$sentinel.ticks"}

# name -> (the manifest's entry, what the refusal must say)
REFUSED = {
    "pid -1": ({"pid": -1, **GOOD}, "pid -1 means every process"),
    "pid 0": ({"pid": 0, **GOOD}, "pid 0 means the signaller's own process group"),
    "pid 1": ({"pid": 1, "host": "$host", "start_ticks": "$init.ticks"}, "pid 1 is init"),
    "pid -2 (a group)": ({"pid": -2, **GOOD}, "means process group 2"),
    "pid as a string": ({"pid": "$sentinel.str", **GOOD}, "is not an integer (str)"),
    "pid as a float": ({"pid": "$sentinel.float", **GOOD}, "is not an integer (float)"),
    "pid true": ({"pid": True, "host": "$host", "start_ticks": "$init.ticks"}, "is not an integer (bool)"),
    "huge pid": ({"pid": 2**64 - 1, **GOOD}, "beyond this host's pid_max"),
    "pid just past pid_max": ({"pid": 4194304, **GOOD}, "beyond this host's pid_max"),
    "a live stranger's pid, no start_ticks": ({"pid": "$stranger", "host": "$host"}, "no start time (start_ticks)"),
    "start_ticks as a string": ({"pid": "$stranger", "host": "$host", "start_ticks": "1"}, "not a non-negative"),
    "no host": ({"pid": "$sentinel", "start_ticks": "$sentinel.ticks"}, "no host recorded"),
    "another host": ({"pid": "$sentinel", "host": "far", "start_ticks": "$sentinel.ticks"}, "on host 'far'"),
    "not an object": (["$sentinel", "$host"], "not a process identity (list)"),
    "no pid": ({**GOOD}, "no pid recorded"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_malformed_identity_signals_nothing_and_says_why(tmp_path, name):
    entry, why = REFUSED[name]
    out = stop_case(tmp_path, {"engine:e": entry, "agent": entry})
    assert out["running"] == dict.fromkeys(EVERYONE, True), f"{name}: a process was signalled: {out}"
    assert out["init_signals"] == [], f"{name}: the namespace's init got {out['init_signals']}"
    assert out["stopped"] == []
    assert len(out["refused"]) == 2, out
    for refused in out["refused"]:
        assert why in refused and ("process 'engine:e'" in refused or "process 'agent'" in refused), refused
    assert any("not signalled" in line for line in out["log"])


def test_a_reused_pid_with_another_start_time_is_not_signalled(tmp_path):
    for i, name in enumerate(["agent", "engine:e"]):
        entry = {"pid": "$leader", "host": "$host", "start_ticks": 1, "pgid": "$leader", "run_token": "$token"}
        out = stop_case(tmp_path / str(i), {name: entry})
        assert out["running"] == dict.fromkeys(EVERYONE, True) and out["init_signals"] == [], out
        assert out["stopped"] == [] and out["refused"] == []  # the run's process ended; its pid is another's now


def test_a_group_is_signalled_only_where_the_manifest_recorded_its_leader(tmp_path):
    # the leader's identity without a recorded group: the leader alone is stopped, its group's member survives
    leader = {"pid": "$leader", "host": "$host", "start_ticks": "$leader.ticks", "run_token": "$token"}
    out = stop_case(tmp_path, {"engine:e": leader})
    alone = {"sentinel": True, "stranger": True, "leader": False, "member": True, "outsider": True}
    assert out["running"] == alone, out
    assert out["stopped"] == [f"engine:e (pid {out['pids']['leader']})"]
    # a group recorded as led by another process than the one named: the process alone
    out = stop_case(tmp_path / "other", {"engine:e": {**leader, "pgid": "$sentinel"}})
    assert out["running"] == alone, out


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "by pid"])
def test_a_proven_identity_is_stopped_with_its_recorded_group(tmp_path, pidfd):
    """The positive control: what the agent records (procs.identity) is stopped, its group with it; also where
    Linux has no pidfds."""
    mark = {"host": "$host", "run_token": "$token"}
    out = stop_case(
        tmp_path,
        {
            "engine:e": {"pid": "$leader", "start_ticks": "$leader.ticks", "pgid": "$leader", **mark},
            "agent": {"pid": "$stranger", "start_ticks": "$stranger.ticks", "pgid": 1, **mark},
            "engine:x": {"pid": -1, **GOOD},
            "engine:y": {"pid": "$sentinel", "host": "$host"},
        },
        env=None if pidfd else {"PIDNS_NO_PIDFD": "1"},
    )
    assert out["running"] == {**dict.fromkeys(EVERYONE, False), "sentinel": True, "outsider": True}, out
    assert len(out["refused"]) == 2 and out["init_signals"] == []
    assert len(out["stopped"]) == 2


def test_an_agent_started_by_hand_is_stopped_by_its_command_line(tmp_path):
    """An agent run by hand has no run token at its start: its manifest records the sha256 of its command line,
    which proves it for a process of the reaper's own user."""
    out = stop_case(tmp_path, {"agent": {"pid": "$outsider", "host": "$host", "start_ticks": "$outsider.ticks",
                                         "cmdline_sha256": "$outsider.cmd"}})  # fmt: skip
    assert out["running"] == {**dict.fromkeys(EVERYONE, True), "outsider": False}, out
    assert out["stopped"] == [f"agent (pid {out['pids']['outsider']})"] and out["refused"] == []


# A process of this host whose pid, start time and host a manifest names exactly, but which is not the run's.
# Probed on the old reaper: each of these was sent SIGTERM (and its group with it, for an engine).
NOT_THE_RUNS = {
    "no mark recorded": (
        {"pid": "$outsider", "host": "$host", "start_ticks": "$outsider.ticks", "pgid": "$outsider"},
        "no mark of the run recorded",
    ),
    "a token it does not carry": (
        {"pid": "$outsider", "host": "$host", "start_ticks": "$outsider.ticks", "run_token": "$token"},
        "has no WATTBENCH_RUN_TOKEN",
    ),
    "another run's token": (
        {"pid": "$stranger", "host": "$host", "start_ticks": "$stranger.ticks", "run_token": "f" * 32},
        "has another WATTBENCH_RUN_TOKEN",
    ),
    "another command line": (
        {"pid": "$outsider", "host": "$host", "start_ticks": "$outsider.ticks", "cmdline_sha256": "0" * 64},
        "runs another command line than the one recorded",
    ),
    "a token that is not one": (
        {"pid": "$stranger", "host": "$host", "start_ticks": "$stranger.ticks", "run_token": 12345},
        "is not a run token",
    ),
}


@pytest.mark.parametrize("name", list(NOT_THE_RUNS))
def test_a_process_without_the_runs_mark_is_not_signalled(tmp_path, name):
    entry, why = NOT_THE_RUNS[name]
    out = stop_case(tmp_path, {"engine:e": entry, "agent": entry})
    assert out["running"] == dict.fromkeys(EVERYONE, True), f"{name}: a process was signalled: {out}"
    assert out["init_signals"] == [] and out["stopped"] == []
    assert len(out["refused"]) == 2 and all(why in r for r in out["refused"]), out["refused"]
    assert all("\n" not in r for r in out["refused"])


def place_env(tmp_path: Path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return {
        "DAGSTER_HOME": str(home),
        "WATTBENCH_RUNS_DIR": str(tmp_path / "runs"),
        "WATTBENCH_DB": str(tmp_path / "w.duckdb"),
    }


def assert_reaped_safely(out: dict) -> None:
    assert out["survived"], f"a process of the namespace did not survive: before {out['before']}, after {out['after']}"
    assert out["running"] == dict.fromkeys(EVERYONE, True) and out["init_signals"] == [], out
    assert out["status"] == "FAILURE", out
    (message,) = out["failure"]
    for part in ("process 'agent' (pid -1)", "pid -1 means every process", "process 'engine:zero' (pid 0)",
                 "process 'engine:init' (pid 1)", "process 'engine:text' (pid '", "process 'engine:loose'",
                 "no start time"):  # fmt: skip
        assert part in message, message


def test_runs_clean_with_a_planted_pid_minus_one_manifest_leaves_every_process_alive(tmp_path):
    """`wattbench runs --clean` on a real Dagster instance, a stale run whose bundle names pid -1, 0, 1, ..."""
    out = in_namespace(tmp_path, "clean", str(tmp_path), env=place_env(tmp_path), timeout=300)
    assert out["rc"] == 0
    assert_reaped_safely(out)


@pytest.mark.slow
def test_wattbench_run_with_a_planted_pid_minus_one_manifest_leaves_every_process_alive(tmp_path):
    """`wattbench run` reaps stale runs at its start: with the same planted run, it runs the smoke plan to the end
    and every process of the namespace that was there before it is still there after."""
    out = in_namespace(tmp_path, "run", str(tmp_path), str(SMOKE), env=place_env(tmp_path), timeout=560)
    assert_reaped_safely(out)
    assert out["rc"] == 0, out["output"]
    assert "marked failed" in out["output"] and "not signalled" in out["output"], out["output"]
