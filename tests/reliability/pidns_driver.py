"""Run the stale-run reaper inside a private PID namespace and say which processes there survived it.

Started by tests/reliability/test_reaper_pid_namespace.py as `unshare --pid --fork --mount-proc python THIS MODE
ARG`, so this process is the namespace's init (pid 1) and every process it starts lives there: a reaper that
signals the wrong pid (kill(-1) is every process of the namespace but its init) cannot reach the machine's other
processes. It catches SIGTERM, SIGINT and SIGHUP and notes them (the kernel ignores, in a namespace's init, every
signal it has no handler for, SIGKILL included), so a signal sent to pid 1 is seen too. It prints one JSON object.

Modes:
- `stop CASE.json`: CASE holds a manifest's `processes`, with `$sentinel`, `$stranger`, `$leader`, `$member`,
  `$outsider`, `$init` standing for those processes' pids (a `$name.ticks` string for their start times,
  `$name.cmd` for the sha256 of their command lines, `$host` for this host, `$token` for the run token that the
  stranger, the leader and its member were started with; the sentinel and the outsider carry none);
  `pipelines.runs.stop_run_processes` is called on a bundle holding it.
- `clean DIR`: a Dagster instance (DAGSTER_HOME) gets a run whose process is gone and whose bundle manifest names
  `pid: -1` and other malformed entries; `wattbench runs --clean` is run (in this process).
- `run DIR PLAN`: the same planted run, then `wattbench run --plan PLAN` in a child process.

With PIDNS_NO_PIDFD set, os.pidfd_open is taken away first (as on Linux < 5.3): procs falls back to pids.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "agent")]  # this checkout's agent, not an installed one

from wattbench_agent import procs  # noqa: E402

SEEN: list[str] = []


def note(sig: int, _frame) -> None:
    SEEN.append(signal.Signals(sig).name)


def running(pid: int) -> bool:
    """Whether `pid` runs (not a zombie); this process is init, so every orphan is its child and reaped here."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def everyone() -> dict[int, int | None]:
    """Every process of the namespace: pid -> start ticks."""
    return {int(p.name): procs.start_ticks(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}


TOKEN = "5eed" * 8  # the run token of the processes the planted run started


def start_processes() -> dict[str, subprocess.Popen]:
    outside = {k: v for k, v in os.environ.items() if k != procs.RUN_TOKEN_ENV}
    marked = {**outside, procs.RUN_TOKEN_ENV: TOKEN}
    started = {
        "sentinel": subprocess.Popen(["sleep", "300"], env=outside),  # a process nobody names: must outlive everything
        "stranger": subprocess.Popen(["sleep", "300"], env=marked),  # a live process whose pid a manifest names loosely
        # a process that leads its own group, and a member of that group (the member must survive when the
        # manifest did not record that the leader led a group)
        "leader": subprocess.Popen(
            ["sh", "-c", "sleep 300 & echo $! ; wait"],
            start_new_session=True,
            stdout=subprocess.PIPE,
            text=True,
            env=marked,
        ),
        # a process of this host and user that is not the run's: its pid, start time and host may all be copied
        # into a manifest, but it carries no run token
        "outsider": subprocess.Popen(["sleep", "301"], env=outside),
    }
    member = int(started["leader"].stdout.readline())
    started["member"] = member  # type: ignore[assignment]
    return started


def pids_of(started: dict) -> dict[str, int]:
    return {k: (v if isinstance(v, int) else v.pid) for k, v in started.items()} | {"init": os.getpid()}


def substitute(value, pids: dict[str, int]):
    """`$name` -> that process's pid, `$name.ticks` -> its start ticks, `$host` -> this host (recursively)."""
    if isinstance(value, dict):
        return {k: substitute(v, pids) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, pids) for v in value]
    if isinstance(value, str) and value.startswith("$"):
        name, _, what = value[1:].partition(".")
        if name == "host":
            return socket.gethostname()
        if name == "token":
            return TOKEN
        if what == "cmd":
            return procs._cmdline_sha256(pids[name])
        if what == "ticks":
            return procs.start_ticks(pids[name])
        if what == "str":
            return str(pids[name])
        if what == "float":
            return float(pids[name])
        return pids[name]
    return value


def settle(started: dict, watched: list[str]) -> dict[str, bool]:
    time.sleep(0.3)  # a signal, if one was sent, has been acted on
    pids = pids_of(started)
    return {name: running(pids[name]) for name in watched}


def mode_stop(case_file: str) -> dict:
    from pipelines.runs import stop_run_processes

    case = json.loads(Path(case_file).read_text())
    started = start_processes()
    pids = pids_of(started)
    bundle = Path(case_file).parent / "bundle"
    bundle.mkdir()
    processes = substitute(case["processes"], pids)
    (bundle / "manifest.json").write_text(json.dumps({"run_id": "r", "processes": processes}))
    log: list[str] = []
    stopped, refused = stop_run_processes(bundle, log.append)
    return {
        "pids": pids,
        "stopped": stopped,
        "refused": refused,
        "log": log,
        "running": settle(started, ["sentinel", "stranger", "leader", "member", "outsider"]),
    }


def plant_stale_run(place: Path, sentinel: int) -> tuple[str, dict]:
    """A run of the instance whose process is gone, holding the writer slot; its bundle names processes by
    identities that prove nothing (pid -1 first)."""
    import dagster as dg

    from pipelines.runs import HOST_TAG, PID_TAG, RUNS_DIR_TAG, START_TAG, WAREHOUSE_TAG

    dead = subprocess.Popen(["sleep", "300"])
    owner = procs.identity(dead.pid)
    dead.kill()
    dead.wait()
    instance = dg.DagsterInstance.get()
    run_id = str(uuid.uuid4())
    tags = {
        PID_TAG: str(owner["pid"]),
        START_TAG: str(owner["start_ticks"]),
        HOST_TAG: owner["host"],
        WAREHOUSE_TAG: str(place / "w.duckdb"),
        RUNS_DIR_TAG: str(place / "runs"),
    }
    instance.add_run(
        dg.DagsterRun(job_name="__ephemeral_asset_job__", run_id=run_id, status=dg.DagsterRunStatus.STARTED, tags=tags)
    )
    storage = instance.event_log_storage
    if "duckdb_writer" not in storage.get_concurrency_keys():
        storage.set_concurrency_slots("duckdb_writer", 1)
    assert storage.claim_concurrency_slot("duckdb_writer", run_id, "bench", 0).is_claimed
    bundle = place / "runs" / run_id / "bundle"
    bundle.mkdir(parents=True)
    host = socket.gethostname()
    (bundle / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "processes": {
                    "agent": {"pid": -1, "host": host, "start_ticks": 1},
                    "engine:zero": {"pid": 0, "host": host, "start_ticks": 1, "pgid": 0},
                    "engine:init": {"pid": 1, "host": host, "start_ticks": procs.start_ticks(1)},
                    "engine:text": {"pid": str(sentinel), "host": host, "start_ticks": procs.start_ticks(sentinel)},
                    "engine:loose": {"pid": sentinel, "host": host},
                },
            }
        )
    )
    return run_id, owner


def outcome(place: Path, run_id: str, before: dict[int, int | None]) -> dict:
    import dagster as dg

    run = dg.DagsterInstance.get().get_run_by_id(run_id)
    failure = [
        e.message
        for e in dg.DagsterInstance.get().all_logs(run_id)
        if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
    ]
    now = everyone()
    return {
        "status": run.status.value,
        "failure": failure,
        "survived": all(pid in now and now[pid] == ticks and running(pid) for pid, ticks in before.items()),
        "before": sorted(before),
        "after": sorted(now),
    }


def mode_clean(place: str) -> dict:
    from pipelines.cli import main as wattbench

    place = Path(place)
    started = start_processes()
    run_id, _ = plant_stale_run(place, started["sentinel"].pid)
    before = everyone()
    rc = wattbench(["runs", "--clean"])
    return {"rc": rc, **outcome(place, run_id, before), "running": settle(started, list(started))}


def mode_run(place: str, plan: str) -> dict:
    place = Path(place)
    started = start_processes()
    run_id, _ = plant_stale_run(place, started["sentinel"].pid)
    before = everyone()
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--plan", plan, "--db", str(place / "w.duckdb")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=500,
    )
    return {
        "rc": proc.returncode,
        "output": proc.stdout[-3000:] + proc.stderr[-6000:],
        **outcome(place, run_id, before),
        "running": settle(started, list(started)),
    }


def main() -> None:
    if os.getpid() != 1:
        raise SystemExit("pidns_driver: not the init of a private PID namespace; refusing to run")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, note)
    mode, *args = sys.argv[1:]
    if os.environ.get("PIDNS_NO_PIDFD"):  # as on Linux < 5.3 or Python < 3.9: signalled by pid
        del os.pidfd_open
    result = {"stop": mode_stop, "clean": mode_clean, "run": mode_run}[mode](*args)
    result["init_signals"] = SEEN
    print("PIDNS-RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
