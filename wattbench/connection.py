"""The warehouse's connection and its query interface (the .sql files in sql/): all that a reader needs, without the
ingest code. `wattbench sql` and `wattbench report` import this module alone, so that they answer at once
(benchmarks/cli_startup.py); wattbench/warehouse.py (ingest) re-exports every name here. A writer's connection gets
the schema (wattbench/schema.py), imported when one opens.

Only the control plane writes DuckDB, one process at a time (DuckDB allows one writer): connections are
short, and opening a locked file waits and retries before it fails with a clear message.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wattbench.queries import (  # noqa: F401 - the query interface, re-exported for readers
    SQL_DIR,
    WarehouseError,
    default_columns,
    duckdb,
    execute_sql,
    query_rows,
    run_sql,
    sql_text,
    table_columns,
)
from wattbench.settings import REPO_ROOT, db_path  # noqa: F401 - REPO_ROOT re-exported

# A connection for SQL a user typed (`wattbench sql`): no files but the warehouse, no other databases, no extensions,
# no network, and no way to switch that back on from inside the query.
SANDBOX = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}


@contextmanager
def connect(
    path: str | os.PathLike | None = None, read_only: bool = False, wait_s: float = 30.0, sandbox: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived connection. A file locked by another writer is retried for `wait_s` seconds. `sandbox`:
    the connection reaches nothing but this database (see SANDBOX).

    A sandboxed connection (`wattbench sql`, `wattbench report`: SQL in, rows out) runs on DuckDB's engine alone;
    every other one loads the `duckdb` package too, whose Python layer the rest needs: relations, `.arrow()`, and
    the scans of Arrow tables that ingest hands DuckDB (wattbench/chunk_files.py). Importing it is most of a
    read-only command's start-up (benchmarks/cli_startup.py). A sandboxed connection gets the token store's
    functions (token_times, token_counts) when a query run through execute_sql first needs them, not at connect:
    registering a Python function imports numpy."""
    if not sandbox:
        import duckdb as _package  # noqa: F401 - sets up the engine's Python-side scans and methods
    db = Path(path) if path else db_path()
    if read_only and not db.exists():
        raise WarehouseError(
            f"{db}: no warehouse here yet; run `make run` (or `wattbench run`) first, or set WATTBENCH_DB"
        )
    if not read_only:
        db.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    delay = 0.1
    while True:
        try:
            con = duckdb.connect(str(db), read_only=read_only, config=dict(SANDBOX) if sandbox else {})
            break
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():  # not a lock: a directory, not a DuckDB file, no permission, ...
                raise WarehouseError(
                    f"{db}: cannot open the warehouse ({str(exc).splitlines()[0]}); expected a DuckDB "
                    "database file, or a path where one can be made"
                ) from exc
            if time.monotonic() >= deadline:
                holder = re.search(r"PID (\d+)", str(exc))
                who = f" (held by process {holder.group(1)})" if holder else ""
                raise WarehouseError(
                    f"{db}: locked by another writer{who} for more than {wait_s:.0f} s; "
                    "wait for that run to finish, or point WATTBENCH_DB at another file"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    try:
        if not read_only:
            from wattbench.schema import apply_schema

            try:
                apply_schema(con)  # registers the token store's functions too
            except (duckdb.IOException, duckdb.FatalException, duckdb.TransactionException, OSError) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                if isinstance(exc, duckdb.TransactionException) and "write" not in first.lower():
                    raise
                raise WarehouseError(
                    f"{db}: could not write the warehouse to bring its schema up to date ({first}); free space where "
                    "it lives, or point WATTBENCH_DB elsewhere"
                ) from None
        elif not sandbox:  # the per-token times beside the warehouse, read by sql/views.sql (wattbench/token_store.py)
            from wattbench import token_store

            token_store.register(con)
        # a sandboxed connection (`wattbench sql`, `report`) registers them when a query first needs them
        # (execute_sql): registering a Python function imports numpy, a third of a command that reads no token times
        yield con
    finally:
        con.close()
