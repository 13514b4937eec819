"""A benchmark run: one measurement of a (model, scenario) partition, the rows it left in the warehouse, and its
status. Its identity (`runs.run_id`, the key of every row) is independent of the Dagster run a step runs in:

- `engine_builds` opens a benchmark; its id is the id of the Dagster run that opened it (`opened`);
- a re-execution of that Dagster run (from failure, or of chosen steps) continues the same benchmark (`resumed`):
  the `dagster/parent_run_id` and `dagster/root_run_id` tags lead to it;
- a check or report materialized alone (from the UI, or a backfill of one asset) works on the partition's latest
  complete benchmark (`reported`; a check also on a blocked one, to re-validate it), and fails with one clear line
  when there is none: never an empty green run;
- the `bench` stage only fills a benchmark opened or resumed in its own Dagster run.

Every Dagster run that worked on a benchmark is a row of `dagster_runs`. The status is set by the steps themselves,
so it is right without the Dagster daemon: `running` when opened (or resumed by a stage), `blocked` when a blocking
check fails at error level, `complete` when every blocking check has passed (or only warned), `failed` or
`interrupted` when a step of an opening or resuming run raises. A status other than `running` is never overwritten
by a later failure, so a report that fails on a complete benchmark leaves it complete.

This module imports no Dagster at module level: the CLI's read-only commands use its constants and queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wattbench.partitions import Partition

OPENED, RESUMED, REPORTED = "opened", "resumed", "reported"
# Statuses of a benchmark whose tables are whole and validated: a Dagster run's (every blocking check passed) or a
# complete bundle loaded with `wattbench ingest`. 'succeeded' is what wattbench before schema version 3 wrote.
COMPLETE = ("complete", "ingested", "succeeded")
UNFINISHED = ("running",)
_ENDED = ("failed", "interrupted")


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


# --- what a step knows about its Dagster run -------------------------------------------------------------------
def _op_context(context: Any) -> Any:
    return getattr(context, "op_execution_context", context)  # a check's context wraps an op context


def dagster_run_id(context: Any) -> str:
    return _op_context(context).run_id


def _tags(context: Any) -> dict[str, str]:
    try:
        return dict(_op_context(context).run.tags)
    except Exception:  # noqa: BLE001 - a directly invoked asset has no run
        return {}


def _job_name(context: Any) -> str | None:
    try:
        return _op_context(context).job_name
    except Exception:  # noqa: BLE001
        return None


def _step_name(context: Any) -> str:
    try:
        return _op_context(context).op_def.name
    except Exception:  # noqa: BLE001
        return "step"


def _key(partition: Partition | None) -> str | None:
    """The step's partition (read once, assets/partitions.step_partition) as runs.partition_key stores it."""
    return None if partition is None else partition.key


# --- queries ---------------------------------------------------------------------------------------------------
def benchmarks_of_dagster_run(con, run_id: str, roles: tuple[str, ...] = (OPENED, RESUMED)) -> list[str]:
    """The benchmarks a Dagster run opened or resumed (by default); a Dagster run unknown to `dagster_runs` (a
    warehouse written before schema version 3) stands for the benchmark of the same id, if there is one."""
    rows = con.execute(
        f"SELECT run_id FROM dagster_runs WHERE dagster_run_id = ? AND role IN "
        f"({', '.join('?' for _ in roles)}) ORDER BY recorded_at",
        [run_id, *roles],
    ).fetchall()
    if rows:
        return [r[0] for r in rows]
    known = con.execute("SELECT count(*) FROM dagster_runs WHERE dagster_run_id = ?", [run_id]).fetchone()[0]
    if known:
        return []
    return [r[0] for r in con.execute("SELECT run_id FROM runs WHERE run_id = ?", [run_id]).fetchall()]


def latest_of_partition(con, partition: str | None, statuses: tuple[str, ...] = COMPLETE) -> tuple[str, str] | None:
    """(run id, status) of the partition's newest benchmark in one of `statuses` (any partition for None)."""
    where = "partition_key = ?" if partition is not None else "TRUE"
    row = con.execute(
        f"SELECT run_id, status FROM runs WHERE {where} AND status IN ({', '.join('?' for _ in statuses)}) "
        "ORDER BY coalesce(started_at, make_timestamp(clock_anchor_unix_ns // 1000)) DESC NULLS LAST, run_id DESC "
        "LIMIT 1",
        [*([partition] if partition is not None else []), *statuses],
    ).fetchone()
    return (row[0], row[1]) if row else None


def record(con, dagster_run: str, run_id: str, role: str, job_name: str | None, partition: str | None) -> None:
    con.execute(
        "INSERT INTO dagster_runs (dagster_run_id, run_id, role, job_name, partition_key, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [dagster_run, run_id, role, job_name, partition, _now()],
    )


def set_status(con, run_id: str, status: str, from_statuses: tuple[str, ...] = UNFINISHED) -> bool:
    """Move a benchmark to `status` if it is in one of `from_statuses` (NULL counts as running); a final status
    ('complete', 'blocked', 'failed', 'interrupted') records when it ended. True when the row moved."""
    ended = "NULL" if status == "running" else "coalesce(finished_at, ?)"
    moved = con.execute(
        f"UPDATE runs SET status = ?, finished_at = {ended} WHERE run_id = ? AND (status IS NULL OR status IN "
        f"({', '.join('?' for _ in from_statuses)})) RETURNING run_id",
        [status, *([] if status == "running" else [_now()]), run_id, *from_statuses],
    ).fetchall()
    return bool(moved)


def mark_ended(
    con, dagster_run: str, status: str, error: str, job_name: str | None = None, partition: str | None = None
) -> list[str]:
    """A Dagster run ended `status` ('failed' or 'interrupted'): the benchmarks it opened or resumed that are
    still running take that status; a failure is also a `failed_runs` row (one per Dagster run). Returns the
    benchmarks moved."""
    moved = [b for b in benchmarks_of_dagster_run(con, dagster_run) if set_status(con, b, status)]
    if status == "failed":
        bench = (benchmarks_of_dagster_run(con, dagster_run) or [dagster_run])[0]
        source = con.execute("SELECT source FROM runs WHERE run_id = ?", [bench]).fetchone()
        con.execute("DELETE FROM failed_runs WHERE run_id = ?", [dagster_run])
        con.execute(
            "INSERT INTO failed_runs (run_id, source, job_name, partition_key, failed_at, error) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [dagster_run, source[0] if source else None, job_name or "unknown", partition, _now(), error],
        )
    return moved


def record_check(
    con,
    run_id: str,
    check_name: str,
    passed: bool,
    severity: str | None,
    dagster_run: str | None,
    required: tuple[str, ...],
) -> str | None:
    """Record a blocking check's outcome on a benchmark and move its status: 'blocked' when any check failed at
    error level, 'complete' once every check of `required` passed (or only warned). Returns the new status."""
    con.execute(
        "INSERT OR REPLACE INTO run_checks (run_id, check_name, passed, severity, dagster_run_id, checked_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [run_id, check_name, passed, severity, dagster_run, _now()],
    )
    outcomes = dict(
        con.execute(
            "SELECT check_name, passed OR coalesce(severity, '') <> 'ERROR' FROM run_checks WHERE run_id = ?", [run_id]
        ).fetchall()
    )
    movable = ("running", "blocked", "complete")
    if not all(outcomes.values()):
        return "blocked" if set_status(con, run_id, "blocked", movable) else None
    if all(outcomes.get(name) for name in required):
        return "complete" if set_status(con, run_id, "complete", movable) else None
    return None


# --- which benchmark a step works on ---------------------------------------------------------------------------
class NoBenchmark(RuntimeError):
    """A step has no benchmark to work on; the message is one line saying why and what to do."""


def open_benchmark(con, context: Any, row: dict[str, Any], *, partition: Partition | None) -> str:
    """`engine_builds`: open a new benchmark of the step's `partition`, named by this Dagster run, with status
    'running' (its row in `runs`, set as every run's fields are: wattbench/warehouse.set_run_fields)."""
    from wattbench.warehouse import set_run_fields

    run_id = dagster_run_id(context)
    key = _key(partition)
    set_run_fields(con, run_id, {**row, "partition_key": key, "status": "running", "finished_at": None})
    con.execute("DELETE FROM run_checks WHERE run_id = ?", [run_id])
    record(con, run_id, run_id, OPENED, _job_name(context), key)
    return run_id


def _ancestors(context: Any) -> list[str]:
    """The Dagster runs this one re-executes: its parent and root (the run's fields, or the tags the UI sets)."""
    tags = _tags(context)
    try:
        run = _op_context(context).run
        fields = (run.parent_run_id, run.root_run_id)
    except Exception:  # noqa: BLE001 - a directly invoked asset has no run
        fields = (None, None)
    found = (fields[0], tags.get("dagster/parent_run_id"), fields[1], tags.get("dagster/root_run_id"))
    return [r for r in dict.fromkeys(found) if r]


def resolve(
    con, context: Any, step: str, *, partition: Partition | None, log: Callable[[str], None] | None = None
) -> str:
    """The benchmark a step of `partition` works on. `step`: 'stage' (bench: fills the benchmark this Dagster run
    opened or resumes, and sets it running again on a resume), 'check' (also re-validates the partition's latest
    complete or blocked benchmark), 'report' (the partition's latest complete one). Raises NoBenchmark with one
    line."""
    here = dagster_run_id(context)
    own = benchmarks_of_dagster_run(con, here)
    if own:
        return own[-1]
    key = _key(partition)
    for ancestor in _ancestors(context):
        found = benchmarks_of_dagster_run(con, ancestor, (OPENED, RESUMED, REPORTED))
        if found:
            bench = found[-1]
            record(con, here, bench, RESUMED, _job_name(context), key)
            if step == "stage":
                set_status(con, bench, "running", ("running", "failed", "interrupted", "blocked", "complete"))
            if log:
                log(f"benchmark {bench}: continued by this re-execution of Dagster run {ancestor}")
            return bench
    where = f"partition {key}" if key else "the warehouse"
    if step == "stage":
        raise NoBenchmark(
            "no benchmark open in this Dagster run: the bench stages fill the benchmark that engine_builds opens; "
            "materialize them with engine_builds (the `benchmark` job, or `wattbench run`), or re-execute the run "
            "that opened it"
        )
    statuses = COMPLETE + (("blocked",) if step == "check" else ())
    latest = latest_of_partition(con, key, statuses)
    if latest is None:
        raise NoBenchmark(
            f"no complete benchmark of {where} to {'check' if step == 'check' else 'report on'}: materialize the "
            f"whole `benchmark` job for it first (`wattbench run --plan PLAN`, or Materialize all in the UI)"
        )
    bench, status = latest
    record(con, here, bench, REPORTED, _job_name(context), key)
    if log:
        log(f"materialized alone: working on benchmark {bench} ({status}), the latest of {where}")
    return bench


def benchmark_for_step(warehouse: Any, context: Any, step: str, *, partition: Partition | None) -> str:
    """`resolve` on a fresh connection of the step's DuckDBResource (schema applied first: the warehouse may be
    older); no benchmark is a dagster.Failure with the one line that says why."""
    import dagster as dg

    from assets.common import warehouse_connection
    from wattbench.warehouse import apply_schema

    with warehouse_connection(warehouse) as con:
        apply_schema(con)
        try:
            return resolve(con, context, step, partition=partition, log=context.log.info)
        except NoBenchmark as exc:
            raise dg.Failure(description=str(exc)) from None


def roles(con, context: Any, run_id: str) -> set[str]:
    return {
        r[0]
        for r in con.execute(
            "SELECT role FROM dagster_runs WHERE dagster_run_id = ? AND run_id = ?", [dagster_run_id(context), run_id]
        ).fetchall()
    }


@contextmanager
def ends_with_step(connect: Callable, context: Any, *, partition: Partition | None) -> Iterator[None]:
    """Around a step's body: if it raises, the benchmarks its Dagster run opened or resumed that are still running
    become 'interrupted' (SIGINT/SIGTERM) or 'failed', with a `failed_runs` row; without the Dagster daemon."""
    try:
        yield
    except GeneratorExit:
        raise
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "DagsterExecutionInterruptedError"
        text = (str(exc).strip().splitlines() or [""])[0]
        try:
            with connect() as con:
                mark_ended(
                    con,
                    dagster_run_id(context),
                    "interrupted" if interrupted else "failed",
                    f"{_step_name(context)}: {type(exc).__name__}: {text}"[:20000],
                    _job_name(context),
                    _key(partition),
                )
        except Exception:  # noqa: BLE001 - the step's own error is what the user must see
            pass
        raise
