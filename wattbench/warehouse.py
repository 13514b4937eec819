"""The DuckDB warehouse's bundle ingest, and the one module its users import: the connection
(wattbench/connection.py), the query interface (wattbench/queries.py), the schema (wattbench/schema.py) and the kept
per-load-point figures (wattbench/point_stats.py) are re-exported here. Those import one another in one direction
(queries <- point_stats <- schema <- connection, which applies the schema to a writer's connection) and none of them
imports this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattbench import settings
from wattbench.connection import (  # noqa: F401 - the connection and query interface, re-exported
    REPO_ROOT,
    SANDBOX,
    SQL_DIR,
    WarehouseError,
    connect,
    duckdb,
    execute_sql,
    query_rows,
    run_sql,
    sql_text,
    table_columns,
)
from wattbench.ingest_checks import (
    LABELS_KEY,
    check_table_file,
    counts_problem,
    csv_header,
    mark_run,
    numeric_columns,
    run_status,
    scan_lines,
    suspect_rows,
)
from wattbench.point_stats import (  # noqa: F401 - re-exported: the kept figures
    AFTER_RUN_FIELDS,
    KEPT_VIEWS,
    RUN_FIELD_TABLES,
    fill_shape_traits,
    refresh_kept_views,
    refresh_point_stats,
    set_run_fields,
)
from wattbench.schema import LABELS_TEXT_TO_MAP, SCHEMA_VERSION, apply_schema  # noqa: F401 - apply_schema re-exported
from wattbench.step_fill import fill_steps
from wattbench_agent.bundle import BUNDLE_TABLES, BundleError, read_manifest, regular_file

if TYPE_CHECKING:  # it imports numpy: loaded where a bundle is read, not by `wattbench sql` or `report`
    from wattbench.chunk_files import ChunkFiles

# DuckDB's memory while a bundle loads (it spills to <warehouse>.tmp past it); WATTBENCH_INGEST_MEMORY overrides.
INGEST_MEMORY = "1GB"
# Once the rows are in, DuckDB's limit is set to this for a moment, so that it gives back the pages it cached while
# loading before the per-point figures hold a point's token times in numpy (the peak of an ingest was both at once)
EVICT_MEMORY = "128MB"


def ingest_memory() -> str:
    """DuckDB's memory limit while a bundle loads: WATTBENCH_INGEST_MEMORY, read when a bundle loads (importing the
    code location reads no environment variable), else INGEST_MEMORY; WarehouseError for a value that is not a size."""
    try:
        return settings.memory_size(settings.INGEST_MEMORY, INGEST_MEMORY)
    except ValueError as exc:
        raise WarehouseError(f"{exc}; nothing was loaded") from None


# Columns read from a bundle as another type than the table's, then converted (old bundles wrote them otherwise).
_READ_AS = {
    ("server_metrics", "labels"): (
        "JSON",
        "CASE WHEN labels IS NULL THEN NULL WHEN json_type(labels) = 'OBJECT' "
        "THEN labels::MAP(VARCHAR, VARCHAR) ELSE " + LABELS_TEXT_TO_MAP.format(col="(labels->>'$')") + " END",
    ),
}
# Tables whose rows belong to one deployment: a bundle replaces exactly its (run_id, deployment_id) rows.
_DEPLOYMENT_TABLES = (
    "deployments",
    "load_runs",
    "requests",
    "gpu_samples",
    "energy_windows",
    "server_metrics",
    "searches",
)


def ingest_bundle(
    con: duckdb.DuckDBPyConnection, bundle: str | os.PathLike, run_id: str | None = None, replace: bool = False
) -> dict[str, int]:
    """Load a result bundle in one transaction, replacing earlier rows of the same run and deployments.

    Idempotent: ingesting the same bundle twice leaves the same rows. `run_id` files the rows under another
    run (a bundle measured elsewhere, replayed into this run). A run that is already complete (status complete or
    ingested) keeps its rows: a bundle that would change the rows of a deployment it already has is refused
    (WarehouseError, nothing loaded; a deployment new to the run is added) unless `replace`: then the old rows of the
    bundle's deployments go, the new land, and the run's validation results (of the old rows) go, in the same one
    transaction, the run then `ingested` (or `incomplete`). Returns rows loaded per table.
    """
    from wattbench import token_store
    from wattbench.chunk_files import ChunkFiles, chunk_paths

    folder = Path(bundle)
    manifest = read_manifest(folder)
    run_id = run_id or manifest["run_id"]
    files = table_files(folder)
    for table, path in files.items():  # before DuckDB opens any: a FIFO or a device would hang or never end
        regular_file(path, f"a {'CSV' if _is_csv(path) else 'JSON-lines'} file of table {table}")
    types = {t: table_columns(con, t) for t in files}

    memory = ingest_memory()  # a value that is not a size is refused before anything starts
    chunks = None
    version = manifest.get("bundle_version", 1)
    if "requests" in files and (paths := chunk_paths(folder, version)) is not None:  # version 2: token times in binary
        chunks = ChunkFiles(con, paths, files["requests"])
        chunks.start_copy(token_store.folder_of(con))  # into the token store, in a thread, while the rest loads
    counts: dict[str, int] = {}
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.execute(f"SET memory_limit = '{memory}'")  # DuckDB spills to disk past it: a big bundle stays bounded
    interrupted = False  # after the commit: the bundle is loaded
    try:
        result = _ingest(con, folder, manifest, run_id, files, types, counts, chunks, replace)
    except _CommittedThenInterrupted:
        result, interrupted = dict(counts), True
    except BaseException as exc:
        if chunks is not None:  # what this bundle put in the token store goes with its rows, unless they may be kept
            _undo(chunks, keep_files=getattr(exc, "at_commit", False))
        failure = _write_failure(exc, con, folder)
        if failure is not None:
            raise failure from None
        if _interrupt(exc):
            raise IngestInterrupted(
                f"{folder}: interrupted; nothing of it was loaded (its transaction was rolled back)"
                if not getattr(exc, "at_commit", False)
                else f"{folder}: interrupted during its commit; see whether run {run_id} is in the warehouse "
                "(wattbench sql: SELECT * FROM runs)"
            ) from None
        raise
    finally:
        try:
            con.execute(f"SET memory_limit = '{limit}'")
        except (duckdb.Error, RuntimeError, KeyboardInterrupt):  # invalidated or interrupted: said above instead
            pass
    try:
        if chunks is not None:
            chunks.drop()
        if not interrupted:
            token_store.collect(con)  # files no row names any more (a run replaced): after the commit
    except BaseException as exc:
        if not _interrupt(exc):
            raise
        interrupted = True
    if interrupted:
        raise IngestInterrupted(
            f"{folder}: interrupted after its commit: run {run_id} is loaded (token files that no row names any "
            "more are removed by the next ingest)"
        )
    return result


class IngestInterrupted(WarehouseError):
    """An ingest stopped by an interrupt (Ctrl-C, SIGINT): the message says what became of the bundle."""


def _interrupt(exc: BaseException) -> bool:
    """Whether an error is an interrupt: Python's, or DuckDB's way of saying a query was stopped by one."""
    if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "InterruptException":
        return True
    return isinstance(exc, RuntimeError) and "interrupted" in str(exc).lower()


def _undo(chunks: ChunkFiles, keep_files: bool = False) -> None:
    """After a failed ingest: the staging table dropped where the database still answers, and the token files this
    bundle copied removed, unless `keep_files` (a commit that failed may still have reached DuckDB's log, and its rows
    name them; a file no row names is removed by the next ingest)."""
    try:
        chunks.drop()
    except (duckdb.Error, RuntimeError, KeyboardInterrupt):  # invalidated or interrupted: said by the caller
        pass
    if not keep_files:
        chunks.undo()


# Columns ingest computes, never read from a bundle (a row that names one is refused as naming an unknown column);
# events_at / events_n come from a version-3 bundle's requests.csv (or version 2's `chunks`) only.
_COMPUTED = {
    "requests": {"chunk_tokens_each", "events_file", "counts_file", "events_at", "events_n"},
    "server_metrics": {"labels_key"},
}
# Computed columns made from the row's own values as it is read: {table: {column: SQL}}.
_DERIVED = {"server_metrics": {"labels_key": LABELS_KEY.format(col="labels")}}
# A request whose events all carried one token count keeps that count, not the list (sql/views.sql event_tokens).
_UNIFORM_TOKENS = (
    "chunk_tokens IS NOT NULL AND len(chunk_tokens) > 0 AND len(chunk_tokens) = len(chunk_ns) "
    "AND list_min(chunk_tokens) = list_max(chunk_tokens) AND list_count(chunk_tokens) = len(chunk_tokens)"
)


def _allowed(table: str, cols: dict[str, str], chunks: ChunkFiles | None) -> set[str]:
    """The keys a row of a table file may have: its table's columns, and a version-2 request's `chunks` (a version-3
    request's `events_at`, `events_n`)."""
    extra = set()
    if chunks is not None and table == "requests":
        extra = {"events_at", "events_n"} if _is_csv(chunks.requests) else {"chunks"}
    return set(cols) - _COMPUTED.get(table, set()) | extra


def _is_csv(path: Path) -> bool:
    return path.name.endswith((".csv", ".csv.gz"))


# Statuses of a run whose rows are whole (the bundle's own, or validated): a bundle that would change them is refused.
_WHOLE = ("complete", "ingested")
# What a run's old rows were judged on: gone with them when --replace swaps them.
_JUDGED = ("validation_results", "run_checks")


def _fingerprint(con, run_id: str, deployment_ids: list[str]) -> dict[str, tuple[int, int]]:
    """(rows, xor of the rows' hashes) of some deployments of a run in every table a bundle fills for them: equal for
    the same rows."""
    out = {}
    for table in _DEPLOYMENT_TABLES:
        out[table] = con.execute(
            f"SELECT count(*), coalesce(bit_xor(hash(x)), 0) FROM (SELECT * EXCLUDE (run_id) FROM {table} "
            "WHERE run_id = ? AND deployment_id IN (SELECT unnest(?::VARCHAR[]))) x",
            [run_id, deployment_ids],
        ).fetchone()
    return out


def _ingest(con, folder, manifest, run_id, files, types, counts, chunks=None, replace=False) -> dict[str, int]:
    from wattbench.chunk_files import STAGING

    con.execute("BEGIN TRANSACTION")
    try:
        status = (con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone() or [None])[0]
        had = {r[0] for r in con.execute("SELECT deployment_id FROM deployments WHERE run_id = ?", [run_id]).fetchall()}
        con.execute(
            """INSERT INTO runs (run_id, source, host, clock_anchor_mono_ns, clock_anchor_unix_ns, status)
               VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING""",
            [
                run_id,
                manifest["source"],
                manifest.get("host"),
                manifest.get("clock_anchor_mono_ns"),
                manifest.get("clock_anchor_unix_ns"),
                run_status(manifest),
            ],
        )
        mark_run(con, run_id, manifest)
        if chunks is not None:  # a version-2/3 requests file is read into the staging table first: its deployments
            path = files["requests"]  # come from there, and its scan below only looks for unknown keys
            allowed = _allowed("requests", types["requests"], chunks)
            select = (
                _read_csv_select("requests", types["requests"], path, allowed)
                if _is_csv(path)
                else _read_json_select("requests", types["requests"], chunks)
            )
            _checked(
                con,
                "requests",
                path,
                types["requests"],
                lambda: chunks.stage(select, [run_id, str(path)], _is_csv(path)),
                allowed,
            )

        def ids_of(t: str) -> tuple[str, ...]:
            if t == "requests" and chunks is not None:
                return ()
            return ("deployment_id",) if t in _DEPLOYMENT_TABLES else ("build_id",) if t == "engine_builds" else ()

        # One pass of DuckDB over each file: lines that are not objects or name unknown columns, and the ids of the
        # rows it replaces (every table of a deployment the bundle carries, and its builds); a CSV file names its
        # columns once, in its header, and DuckDB reads its values as the table's types
        scans = {
            t: _checked(
                con,
                t,
                p,
                types[t],
                lambda t=t, p=p: scan_csv(con, p, t, types[t], _allowed(t, types[t], chunks), ids_of(t)),
                _allowed(t, types[t], chunks),
            )
            if _is_csv(p)
            else _checked(
                con,
                t,
                p,
                types[t],
                lambda t=t, p=p: scan_lines(
                    con, p, _allowed(t, types[t], chunks), ids_of(t), numeric_columns(types[t])
                ),
                _allowed(t, types[t], chunks),
            )
            for t, p in files.items()
        }
        if chunks is not None:
            staged = [
                r[0]
                for r in con.execute(
                    f"SELECT DISTINCT deployment_id FROM {STAGING} WHERE deployment_id IS NOT NULL"
                ).fetchall()
            ]
            scans["requests"] = (scans["requests"][0], {"deployment_id": sorted(staged)})
        for table, (suspect, _) in scans.items():
            if suspect:
                check_table_file(files[table], table, _allowed(table, types[table], chunks), types[table])
        deployment_ids = sorted({d for t, (_, ids) in scans.items() for d in ids.get("deployment_id", [])})
        # a complete run's rows change only when asked: the deployments of this bundle it has already
        kept = [d for d in deployment_ids if d in had]
        before = _fingerprint(con, run_id, kept) if status in _WHOLE and kept and not replace else None
        if replace and kept:  # what the old rows were judged on goes with them; the new rows are not judged yet
            for table in _JUDGED:
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
            con.execute("UPDATE runs SET status = ? WHERE run_id = ?", [run_status(manifest), run_id])
        # the token figures from the compiled pass where every request's lists are in the chunk files (not inline)
        flat = chunks if chunks is not None and chunks.staged and not chunks.inline_rows() else None
        staged = chunks is not None and chunks.staged
        order = list(files)
        if staged:  # requests last: the compiled pass runs over their token times while DuckDB loads the others
            order = [t for t in order if t != "requests"] + ["requests"]
            if "load_runs" not in files:
                chunks.start_pass(run_id)
        for table in order:
            counts[table] = _load_table(
                con,
                table,
                files[table],
                types[table],
                run_id,
                deployment_ids,
                scans[table][1].get("build_id", []),
                chunks if table == "requests" else None,
            )
            if staged and table == "load_runs":  # the windows are in
                chunks.start_pass(run_id)
        if problem := counts_problem(folder, manifest, files, counts):
            raise BundleError(problem)
        fill_shape_traits(con, run_id)
        # before the rows are compared with a complete run's: a bundle loads to the same rows each time
        fill_steps(con, run_id, flat)
        _derive_deployment_hbm(con, run_id)
        if before is not None:
            after = _fingerprint(con, run_id, kept)
            if after != before:
                changed = ", ".join(
                    f"{t} {before[t][0]} -> {after[t][0]} rows" if before[t][0] != after[t][0] else f"{t} rows differ"
                    for t in before
                    if before[t] != after[t]
                )
                raise WarehouseError(
                    f"{folder}: run {run_id} is already {status} in the warehouse, and this bundle would change the "
                    f"rows of its deployment(s) {', '.join(kept)} ({changed}); nothing was loaded. To replace them "
                    f"with this bundle's: wattbench ingest {folder} --replace"
                )
        # the figures below hold a point's token times in numpy: DuckDB gives back the pages it cached while loading
        # (its limit lowered, then raised again: what the figures' SQL reads comes back as it needs it)
        con.execute(f"SET memory_limit = '{EVICT_MEMORY}'")
        con.execute(f"SET memory_limit = '{ingest_memory()}'")
        refresh_point_stats(con, run_id, events=flat)
    except BaseException:  # an interrupt (Ctrl-C) too: nothing of the bundle stays
        _rollback(con)
        raise
    try:
        interrupted = _commit(con)
    except BaseException as exc:
        _rollback(con)
        exc.at_commit = True  # what was loaded is kept only if DuckDB's log took the commit (_write_failure says so)
        raise
    if interrupted:
        raise _CommittedThenInterrupted
    return counts


class _CommittedThenInterrupted(Exception):
    """An interrupt came while the ingest committed: the commit ended first, and the bundle is loaded."""


def _commit(con) -> bool:
    """COMMIT, an interrupt (SIGINT) held until it has ended, so that it is never cut in two: whether one came. (Only
    the main thread may set a handler: elsewhere, as in a Dagster step's thread, it commits as it is.)"""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        con.execute("COMMIT")
        return False
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        con.execute("COMMIT")
    finally:
        signal.signal(signal.SIGINT, previous)
    return bool(caught)


def _rollback(con) -> None:
    """ROLLBACK, where DuckDB has not ended the transaction itself (a full disk, an interrupt, a fatal error): its
    'no transaction is active' would otherwise take the place of the error that ended it."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _write_failure(exc: BaseException, con, folder: Path) -> WarehouseError | None:
    """A failure to write the warehouse or its token store (a full disk, a file-size limit, DuckDB's IO error or the
    fatal error it becomes) as one line naming it and what became of the bundle; None for any other error."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO):
        reason = f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    elif isinstance(exc, (duckdb.IOException, duckdb.FatalException)):
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        reason = next((line for line in lines if "Could not write" in line or "No space" in line), lines[0])
    else:
        return None
    if getattr(exc, "at_commit", False):
        kept = "its rows are in the warehouse only if DuckDB's log took the commit (wattbench sql: SELECT * FROM runs)"
    else:
        kept = "nothing of the bundle was loaded (its transaction was rolled back, its token files removed)"
    return WarehouseError(
        f"{_db_name(con)}: could not write the warehouse while ingesting {folder}: {reason}; {kept}. Free space "
        "where the warehouse lives, or point WATTBENCH_DB elsewhere, and ingest it again"
    )


def _db_name(con) -> str:
    """The warehouse file of a connection, for messages."""
    try:
        rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    except duckdb.Error:  # a database DuckDB invalidated answers nothing
        return "the warehouse"
    return str(rows[0][0]) if rows and rows[0][0] else ":memory:"


def table_files(folder: Path) -> dict[str, Path]:
    """The table files of a bundle folder: <table>.jsonl, or <table>.jsonl.gz (DuckDB reads gzip as it is)."""
    files = {}
    for t in BUNDLE_TABLES:
        for name in (f"{t}.csv", f"{t}.csv.gz", f"{t}.jsonl", f"{t}.jsonl.gz"):
            if (folder / name).exists() or (folder / name).is_symlink():
                files[t] = folder / name
                break
    return files


def _checked(
    con: duckdb.DuckDBPyConnection, table: str, path: Path, cols: dict[str, str], read, allowed: set[str] | None = None
):
    """Run `read` (DuckDB reading the file); where DuckDB refuses it, the line-by-line check names file, line and
    reason (BundleError), and otherwise DuckDB's own message is said as a BundleError."""
    allowed = allowed if allowed is not None else set(cols)
    try:
        return read()
    except duckdb.ConstraintException as exc:
        check_table_file(path, table, allowed, cols)
        raise BundleError(
            f"{path}: {str(exc).splitlines()[0]}; expected each row once per key (were two attempts "
            "written into one folder? the agent keeps earlier attempts under attempts/<n>/); "
            "nothing was loaded"
        ) from None
    except (duckdb.ConversionException, duckdb.InvalidInputException) as exc:
        check_table_file(path, table, allowed, cols)
        raise BundleError(
            f"{path}: {str(exc).splitlines()[0]}; expected values of the types in sql/schema.sql "
            f"(table {table}); nothing was loaded"
        ) from None


def _load_table(
    con: duckdb.DuckDBPyConnection,
    table: str,
    path: Path,
    cols: dict[str, str],
    run_id: str,
    deployment_ids: list[str],
    build_ids: list[str],
    chunks: ChunkFiles | None = None,
) -> int:
    """Replace this bundle's rows of one table by the file's (inside the ingest's transaction); rows loaded. The
    rules of resources/ingest_checks.py run in SQL on the rows just loaded. `chunks`: the requests' per-token times
    come from a version-2 bundle's chunk files (resources/chunk_files.py)."""
    if table in _DEPLOYMENT_TABLES:
        mine, params = "run_id = ? AND deployment_id IN (SELECT unnest(?::VARCHAR[]))", [run_id, deployment_ids]
    elif table == "engine_builds":
        mine, params = "run_id = ? AND build_id IN (SELECT unnest(?::VARCHAR[]))", [run_id, build_ids]
    else:
        mine, params = "run_id = ?", [run_id]
    if table in _DEPLOYMENT_TABLES or table == "engine_builds":
        con.execute(f"DELETE FROM {table} WHERE {mine}", params)
    if not path.stat().st_size:
        return 0
    allowed = _allowed(table, cols, chunks)
    if chunks is None:
        select = _read_csv_select(table, cols, path, allowed) if _is_csv(path) else _read_json_select(table, cols, None)
        if table in _DERIVED:
            select = f"SELECT *, {', '.join(f'{e} AS {c}' for c, e in _DERIVED[table].items())} FROM ({select})"
        _checked(
            con,
            table,
            path,
            cols,
            lambda: con.execute(f"INSERT INTO {table} BY NAME " + select, [run_id, str(path)]),
            allowed,
        )
    else:  # staged already (_ingest)
        _checked(con, table, path, cols, lambda: chunks.load(_UNIFORM_TOKENS), allowed)
    loaded, suspect = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {suspect_rows(table, cols)}) FROM {table} WHERE {mine}", params
    ).fetchone()
    if suspect:
        check_table_file(path, table, allowed, cols)  # names file, line and reason; a JSON text that only looked odd
    return loaded


def _read_json_select(table: str, cols: dict[str, str], chunks: ChunkFiles | None) -> str:
    """SELECT of a table file's rows as the table's columns (parameters: run_id, the file)."""
    read_types = {c: _READ_AS.get((table, c), (t,))[0] for c, t in cols.items() if c not in _COMPUTED.get(table, set())}
    if chunks is not None:
        read_types["chunks"] = "BIGINT[]"
    columns_literal = "{" + ", ".join(f"'{c}': '{t}'" for c, t in read_types.items()) + "}"
    converted = [f"{expr} AS {c}" for (tbl, c), (_, expr) in _READ_AS.items() if tbl == table]
    computed = ""
    if table == "requests" and chunks is None:  # inline lists (version 1); ChunkFiles.load does this for staged rows
        converted.append(f"CASE WHEN {_UNIFORM_TOKENS} THEN NULL ELSE chunk_tokens END AS chunk_tokens")
        computed = f", CASE WHEN {_UNIFORM_TOKENS} THEN chunk_tokens[1] END::INTEGER AS chunk_tokens_each"
    return (
        f"SELECT * REPLACE (?::VARCHAR AS run_id{''.join(', ' + e for e in converted)}){computed} FROM "
        f"read_json(?, format='newline_delimited', columns={columns_literal})"
    )


def _read_csv_select(table: str, cols: dict[str, str], path: Path, allowed: set[str]) -> str:
    """SELECT of a CSV table file's rows (version 3) as the table's columns, in the order its header names them, read
    by DuckDB with the table's types (parameters: run_id, the file). A header naming a column the table does not
    have is refused here, naming it."""
    header = csv_header(path, table, allowed)
    types = {**cols, "events_at": "BIGINT", "events_n": "BIGINT"}
    columns = "{" + ", ".join(f"'{c}': '{_READ_AS.get((table, c), (types[c],))[0]}'" for c in header) + "}"
    converted = [f"{expr} AS {c}" for (tbl, c), (_, expr) in _READ_AS.items() if tbl == table and c in header]
    read = (
        f"read_csv(?, header = true, columns = {columns}, auto_detect = false, allow_quoted_nulls = false, "
        "delim = ',', quote = '\"', escape = '\"', strict_mode = true, null_padding = false)"
    )
    if "run_id" in header:
        return f"SELECT * REPLACE (?::VARCHAR AS run_id{''.join(', ' + e for e in converted)}) FROM {read}"
    replaced = f" REPLACE ({', '.join(converted)})" if converted else ""
    return f"SELECT ?::VARCHAR AS run_id, *{replaced} FROM {read}"


def scan_csv(con, path: Path, table: str, cols: dict[str, str], allowed: set[str], ids: tuple[str, ...]):
    """A CSV table file's counterpart of ingest_checks.scan_lines: its header names only known columns (refused
    naming the one that is not), and the distinct values of the `ids` columns. Its values' types are DuckDB's to
    check as it reads them (a value that is not of its column's type is named by the line-by-line check)."""
    select = _read_csv_select(table, cols, path, allowed)
    if not ids or not path.stat().st_size:
        return False, {c: [] for c in ids}
    header = csv_header(path, table, allowed)
    present = [c for c in ids if c in header]
    if not present:
        return False, {c: [] for c in ids}
    row = con.execute(
        "SELECT "
        + ", ".join(f"list(DISTINCT {c}) FILTER (WHERE {c} IS NOT NULL)" for c in present)
        + f" FROM ({select})",
        ["", str(path)],
    ).fetchone()
    found = dict(zip(present, row))
    return False, {c: sorted(found.get(c) or []) for c in ids}


def _derive_deployment_hbm(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """HBM after load, before traffic: the GPU samples of the idle_before window, summed over the GPUs."""
    con.execute((SQL_DIR / "derive_deployment_hbm.sql").read_text(), {"run_id": run_id})


def replace_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]], key: tuple[str, ...]) -> int:
    """Insert rows, replacing those with the same key; one transaction."""
    if not rows:
        return 0
    cols = table_columns(con, table)
    unknown = set().union(*(r.keys() for r in rows)) - set(cols)
    if unknown:
        raise WarehouseError(f"table {table}: unknown column(s) {', '.join(sorted(unknown))}")
    names = [c for c in cols if any(c in r for r in rows)]
    con.execute("BEGIN TRANSACTION")
    try:
        for row in rows:
            where = " AND ".join(f"{k} = ?" for k in key)
            con.execute(f"DELETE FROM {table} WHERE {where}", [row[k] for k in key])
            values = [
                json.dumps(row.get(c)) if cols[c] == "JSON" and row.get(c) is not None else row.get(c) for c in names
            ]
            con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})", values)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return len(rows)
