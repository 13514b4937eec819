"""Runs whose process is gone, and runs stopped by a signal: found, cleaned up, and said so.

A `wattbench run` killed outright (SIGKILL, OOM killer, a closed laptop) cannot clean up after itself: its Dagster
run stays STARTED, its step keeps the only `duckdb_writer` pool slot (so the next run waits forever), its
warehouse row stays 'running', and its agent and engines may still run. So:

- `wattbench run` tags its Dagster run with its process's identity (`process_tags`: pid, host, start time) and
  where its warehouse and run folders are;
- the agent records itself and every engine server it starts in the bundle's manifest (`processes`), and dies
  with its parent (wattbench_agent.procs.die_with_parent);
- `reap_stale_runs` (at the start of every `wattbench run`, and `wattbench runs --clean`) finds the runs of this
  instance that are not finished but whose process is gone, and for each: stops the agent and engines its bundle
  names (only those very processes: wattbench_agent.procs.stop refuses, signalling nothing, any identity that does
  not prove it - pid -1, 0 or 1, a pid that is not an integer, no host or start time - and the refusals are named
  in the run's failure), frees its pool slots, marks it failed in Dagster and in the warehouse (`runs.status =
  'failed'`, a `failed_runs` row). Slots still held by runs that finished are freed too. Tags that name no
  process this host can check leave the run alone until it is named.

`interruptible_slot_wait()` makes SIGINT and SIGTERM stop a `wattbench run` that waits for a pool slot: Dagster's
in-process executor captures both signals for the run and only looks at them inside a step, so a run queued
behind another ignored them (`ActiveExecution.sleep_til_ready`, dagster 1.13.27, is wrapped for the call).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattbench_agent import procs

PID_TAG = "wattbench/pid"
START_TAG = "wattbench/pid_start_ticks"
HOST_TAG = "wattbench/host"
WAREHOUSE_TAG = "wattbench/warehouse"
RUNS_DIR_TAG = "wattbench/runs_dir"

Log = Callable[[str], None]


def process_tags(warehouse: str | os.PathLike, runs_dir: str | os.PathLike) -> dict[str, str]:
    """Tags of a run executed by this process: who runs it, and where its warehouse and run folders are."""
    me = procs.identity()
    return {
        PID_TAG: str(me["pid"]),
        START_TAG: str(me["start_ticks"] or ""),
        HOST_TAG: me["host"],
        WAREHOUSE_TAG: str(Path(warehouse).resolve()),
        RUNS_DIR_TAG: str(Path(runs_dir).resolve()),
    }


def _unfinished_statuses():
    import dagster as dg

    S = dg.DagsterRunStatus
    return [S.NOT_STARTED, S.STARTING, S.STARTED, S.CANCELING]


@dataclass
class RunState:
    """One unfinished run of the instance and what is known of the process that runs it."""

    run: Any  # dagster.DagsterRun
    owner: dict[str, Any] | None  # the identity of the process executing it (None: not tagged)
    alive: bool | None  # None: cannot tell (no tag, or another host)

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def stale(self) -> bool:
        return self.owner is not None and self.alive is False

    @property
    def bundle(self) -> Path | None:
        root = self.run.tags.get(RUNS_DIR_TAG)
        return Path(root) / self.run_id / "bundle" if root else None

    @property
    def warehouse(self) -> Path | None:
        db = self.run.tags.get(WAREHOUSE_TAG)
        return Path(db) if db else None


def _tag_int(value: str | None) -> int | str | None:
    """A tag's integer; an empty tag is None, one that is not an integer is kept as found (procs says why it
    cannot be used)."""
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        return value


def owner_of(run: Any) -> dict[str, Any] | None:
    """The identity of the process that executes `run`, as its tags say (None: not tagged). Tags are text anyone
    can set: a value that is not an integer is kept as found, and `procs.alive` cannot tell (None) for it."""
    tags = run.tags
    if not tags.get(PID_TAG):
        return None
    return {"pid": _tag_int(tags[PID_TAG]), "host": tags.get(HOST_TAG), "start_ticks": _tag_int(tags.get(START_TAG))}


def describe_process(owner: dict[str, Any] | None, state: bool | None, sep: str = " ") -> str:
    """`1234 running`, `1234 gone`, `1234 other host`, or why the tags name no process this host can check."""
    if owner is None:
        return "-"
    why = procs.why_unknown(owner)
    if why and not why.startswith("recorded on host"):
        return f"unknown ({why})"
    return f"{owner['pid']}{sep}" + ("running" if state else "other host" if state is None else "gone")


def unfinished_runs(instance: Any, limit: int = 200) -> list[RunState]:
    import dagster as dg

    runs = instance.get_runs(filters=dg.RunsFilter(statuses=_unfinished_statuses()), limit=limit)
    out = []
    for run in runs:
        owner = owner_of(run)
        out.append(RunState(run=run, owner=owner, alive=procs.alive(owner) if owner else None))
    return out


def stop_run_processes(bundle: Path | None, log: Log) -> tuple[list[str], list[str]]:
    """Stop what a run's bundle says it started and still runs: the agent first (it stops its engines and closes
    the bundle, complete=false), then any engine left, each only if its identity proves it is that very process
    (wattbench_agent.procs.stop). Returns what was stopped, and what was refused (nothing signalled) with why."""
    if bundle is None:
        return [], []
    path = bundle / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return [], []  # the run never started its agent
    except (OSError, ValueError) as exc:
        refused = [f"{path}: unreadable ({type(exc).__name__}: {exc}); its processes are not known"]
        log(f"wattbench: not signalled: {refused[0]}")
        return [], refused
    processes = manifest.get("processes") if isinstance(manifest, dict) else None
    run_id = manifest.get("run_id") if isinstance(manifest, dict) else None
    if processes is None:
        return [], []
    if not isinstance(processes, dict):
        refused = [f"{path}: 'processes' is a JSON {type(processes).__name__}; expected an object of identities"]
        log(f"wattbench: not signalled: {refused[0]}")
        return [], refused
    stopped, refused = [], []
    order = sorted(processes.items(), key=lambda kv: kv[0] != "agent")
    for name, ident in order:
        pid = ident.get("pid") if isinstance(ident, dict) else None
        try:
            if procs.stop(ident, group=name.startswith("engine:"), grace_s=20.0 if name == "agent" else 10.0):
                stopped.append(f"{name} (pid {pid})")
        except procs.Refused as exc:
            refused.append(f"process '{name}' (pid {pid!r}) of {path}: {exc}")
    if stopped:
        log(f"wattbench: stopped {', '.join(stopped)} of run {run_id}")
    for why in refused:
        log(f"wattbench: not signalled: {why}")
    return stopped, refused


def mark_in_warehouse(
    db: Path | None,
    run_id: str,
    status: str,
    error: str,
    job_name: str | None = None,
    partition: str | None = None,
    log: Log = print,
) -> bool:
    """A Dagster run ended `status`: the benchmarks it opened or resumed that are still running take it, and a
    failure is a `failed_runs` row (assets/benchmark_run.mark_ended). False when the warehouse could not be
    written (said on `log`); the Dagster side stands."""
    from assets.benchmark_run import mark_ended
    from wattbench.settings import db_path
    from wattbench.warehouse import WarehouseError, connect

    db = db or db_path()
    if not Path(db).exists():
        return False
    try:
        with connect(db, wait_s=10.0) as con:
            mark_ended(con, run_id, status, error, job_name, partition)
    except WarehouseError as exc:
        log(
            f"wattbench: run {run_id}: the warehouse could not be updated ({exc}); `wattbench runs --clean` tries again"
        )
        return False
    return True


@dataclass
class Reaped:
    run_id: str
    reason: str
    stopped: list[str] = field(default_factory=list)
    warehouse_marked: bool = False


def reap(instance: Any, state: RunState, reason: str, log: Log = print) -> Reaped:
    """Clean up after one run that is not running any more: its processes, its pool slots, its status."""
    run = state.run
    stopped, refused = stop_run_processes(state.bundle, log)
    if refused:
        reason += "; not signalled (identity not proven): " + "; ".join(refused)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    current = instance.get_run_by_id(run.run_id)
    if current is not None and current.status in _unfinished_statuses():
        instance.report_run_failed(current, message=f"wattbench: {reason}; marked failed by the stale-run reaper")
    marked = mark_in_warehouse(
        state.warehouse, run.run_id, "failed", reason, run.job_name, run.tags.get("dagster/partition"), log
    )
    log(
        f"wattbench: run {run.run_id} was left '{run.status.value}' ({reason}): marked failed, its pool slots "
        f"freed" + (f", {', '.join(stopped)} stopped" if stopped else "") + "."
    )
    return Reaped(run.run_id, reason, stopped, marked)


def free_slots_of_finished_runs(instance: Any, log: Log = print) -> list[str]:
    """Pool slots (claimed or pending) of runs that finished or no longer exist: freed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed = []
    for key in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(key)
        holders = {s.run_id for s in info.claimed_slots} | {s.run_id for s in info.pending_steps}
        for run_id in sorted(holders):
            run = instance.get_run_by_id(run_id)
            if run is None or run.status not in _unfinished_statuses():
                storage.free_concurrency_slots_for_run(run_id)
                freed.append(run_id)
                log(
                    f"wattbench: freed the '{key}' pool slot held by run {run_id}, which "
                    + ("no longer exists" if run is None else f"is {run.status.value}")
                )
    return freed


def reap_stale_runs(instance: Any, log: Log = print, named: list[str] = ()) -> list[Reaped]:
    """Every unfinished run of the instance whose process is gone: cleaned up (see the module's docstring).
    `named`: runs the user says are dead (runs that carry no process tags, e.g. from an older wattbench); a named
    run whose process is known to run is left alone."""
    reaped = []
    states = {s.run_id: s for s in unfinished_runs(instance)}
    for state in states.values():
        if state.stale:
            pid = state.owner["pid"] if state.owner else "?"
            reaped.append(reap(instance, state, f"its process {pid} on {state.owner.get('host')} is gone", log))
    for run_id in named:
        state = states.get(run_id)
        if state is None:
            run = instance.get_run_by_id(run_id)
            log(f"wattbench: run {run_id}: " + ("no such run" if run is None else f"already {run.status.value}"))
        elif state.alive:
            log(
                f"wattbench: run {run_id}: its process {state.owner['pid']} is running; left alone (stop it with "
                "Ctrl-C or kill -TERM)"
            )
        elif not state.stale:
            reaped.append(reap(instance, state, "named by `wattbench runs --clean` (no process known to run it)", log))
    free_slots_of_finished_runs(instance, log)
    return reaped


def slot_holders(instance: Any, pool: str) -> list[str]:
    """Who holds `pool`'s slots, in words: run id and its process (for the line a waiting run prints)."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits or pool not in storage.get_concurrency_keys():
        return []
    out = []
    for run_id in sorted({s.run_id for s in storage.get_concurrency_info(pool).claimed_slots}):
        run = instance.get_run_by_id(run_id)
        owner = owner_of(run) if run is not None else None
        state = procs.alive(owner) if owner else None
        out.append(
            f"run {run_id} ("
            + ("process unknown" if owner is None else f"process {describe_process(owner, state, ', ')}")
            + ")"
        )
    return out


# ----------------------------------------------------------------------------------------------------------------
# Signals while waiting for a pool slot
# ----------------------------------------------------------------------------------------------------------------
@contextmanager
def interruptible_slot_wait(poll_s: float = 0.2) -> Iterator[None]:
    """While inside: SIGINT/SIGTERM (which Dagster captures during a run) stop a run waiting for a pool slot, as
    they stop a running step: DagsterExecutionInterruptedError, the run fails, its pending claims are freed."""
    from dagster._core.errors import DagsterExecutionInterruptedError
    from dagster._core.execution.plan.active import ActiveExecution
    from dagster._utils.interrupts import pop_captured_interrupt

    original = ActiveExecution.sleep_til_ready

    def sleep_til_ready(self) -> None:
        deadline = time.monotonic() + max(0.0, self.sleep_interval())
        while True:
            if pop_captured_interrupt():
                self.mark_interrupted()
                raise DagsterExecutionInterruptedError("interrupted while waiting for a pool slot")
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(poll_s, left))

    ActiveExecution.sleep_til_ready = sleep_til_ready
    try:
        yield
    finally:
        ActiveExecution.sleep_til_ready = original


def was_interrupted(result: Any) -> bool:
    """Whether a materialize result ended because of SIGINT/SIGTERM (in a step, or while waiting for a slot)."""
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:
            if error.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt"):
                return True
            error = error.cause
        if event.is_failure and "interrupted" in (event.message or "").lower():
            return True
    return False


# ----------------------------------------------------------------------------------------------------------------
# `wattbench runs`
# ----------------------------------------------------------------------------------------------------------------
def runs_table(instance: Any, limit: int = 20) -> list[dict[str, Any]]:
    """The latest runs of the instance with their process and warehouse status."""
    from wattbench.warehouse import WarehouseError, connect

    rows = []
    status_by_db: dict[str, dict[str, str]] = {}
    for run in instance.get_runs(limit=limit):
        owner = owner_of(run)
        state = procs.alive(owner) if owner else None
        unfinished = run.status in _unfinished_statuses()
        process = describe_process(owner, state)
        db = run.tags.get(WAREHOUSE_TAG)
        if db and db not in status_by_db:
            try:
                with connect(db, read_only=True, wait_s=2.0) as con:  # a Dagster run's benchmark, or its own id
                    status_by_db[db] = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
                    if "dagster_runs" in {r[0] for r in con.execute("SHOW TABLES").fetchall()}:
                        status_by_db[db].update(
                            con.execute(
                                "SELECT d.dagster_run_id, r.status || CASE WHEN d.run_id <> d.dagster_run_id THEN "
                                "' (' || d.role || ' ' || d.run_id || ')' ELSE '' END FROM dagster_runs d JOIN runs r "
                                "USING (run_id) WHERE d.role <> 'reported'"
                            ).fetchall()
                        )
            except WarehouseError:
                status_by_db[db] = {}
        rows.append(
            {
                "run_id": run.run_id,
                "dagster": run.status.value,
                "partition": run.tags.get("dagster/partition", ""),
                "process": process,
                "warehouse": (status_by_db.get(db) or {}).get(run.run_id, "-") if db else "-",
                "stale": unfinished and owner is not None and state is False,
            }
        )
    return rows


def warehouse_runs(db: str | None, limit: int = 20) -> list[dict[str, Any]]:
    """The latest runs of the warehouse, whatever made them (a Dagster run, `wattbench import`, `predict` or
    `ingest`): id, source, status, start, plan or file, load points. [] when there is no warehouse yet."""
    from wattbench import settings
    from wattbench.warehouse import WarehouseError, connect

    path = settings.db_path(db)
    if not path.exists():
        return []
    try:
        with connect(path, read_only=True, wait_s=2.0) as con:
            rows = con.execute(
                "SELECT r.run_id, r.source, r.status, r.started_at, r.plan_name, "
                "(SELECT count(*) FROM load_runs l WHERE l.run_id = r.run_id) AS load_runs "
                "FROM runs r ORDER BY r.started_at DESC NULLS LAST, r.run_id DESC LIMIT ?",
                [limit],
            ).fetchall()
    except WarehouseError:
        return []
    keys = ("run_id", "source", "status", "started_at", "plan or file", "load runs")
    return [dict(zip(keys, r)) for r in rows]


def main_runs(clean: bool, limit: int, named: list[str] = (), log: Log = print, db: str | None = None) -> int:
    """`wattbench runs [--clean [RUN_ID ...]]`: the Dagster runs of the instance with their process, then the runs
    of the warehouse (imported, predicted and ingested ones have no Dagster run)."""
    from tabulate import tabulate

    from pipelines.instance import open_instance

    stored = warehouse_runs(db, limit)
    if not os.environ.get("DAGSTER_HOME"):
        log("wattbench: DAGSTER_HOME is not set: runs are not kept between commands, so none can be left behind")
        rows = []
    else:
        instance = open_instance()
        if clean:
            reaped = reap_stale_runs(instance, log, named)
            if not reaped:
                log("wattbench: no run was left behind by a process that is gone")
        rows = runs_table(instance, limit)
    if rows:
        shown = [{**r, "stale": "STALE (wattbench runs --clean)" if r["stale"] else ""} for r in rows]
        print(tabulate(shown, headers="keys", tablefmt="github"))
    if stored:
        print(("\n" if rows else "") + "In the warehouse (see one: wattbench sql load_points --run RUN_ID):")
        print(tabulate(stored, headers="keys", tablefmt="github"))
    if not rows and not stored:
        log("(no runs)")
    return 0
