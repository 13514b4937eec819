"""The DuckDB warehouse: schema, bundle ingest and the kept per-load-point figures. Its connection and the .sql files
in sql/ as the query interface live in resources/connection.py (what a reader needs, without the ingest code), and
are re-exported here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    check_table_file,
    csv_header,
    ensure_natural_keys,
    mark_run,
    numeric_columns,
    run_status,
    scan_lines,
    suspect_rows,
)
from wattbench_agent.bundle import BUNDLE_TABLES, BundleError, read_manifest, regular_file

if TYPE_CHECKING:  # it imports numpy: loaded where a bundle is read, not by `wattbench sql` or `report`
    from wattbench.chunk_files import ChunkFiles

# 7: step decomposition, host facts, GPU clocks per window (sql/schema.sql migration block); 8: point figures over
# repeats on the log scale, latency intervals from them (sql/views.sql), the idle windows' wait for quiet GPUs;
# 9: SLO capacity searches, energy per request (sql/schema.sql migration block);
# 10: per-token times in the token store beside the warehouse (requests.events_file, ...; resources/token_store.py);
# 11: the load shape's traits in load_runs (closed_loop, bursty: fill_shape_traits)
SCHEMA_VERSION = 11
# DuckDB's memory while a bundle loads (it spills to <warehouse>.tmp past it); WATTBENCH_INGEST_MEMORY overrides.
INGEST_MEMORY = "1GB"
# Once the rows are in, DuckDB's limit is set to this for a moment, so that it gives back the pages it cached while
# loading before the per-point figures hold a point's token times in numpy (the peak of an ingest was both at once)
EVICT_MEMORY = "128MB"


def ingest_memory() -> str:
    """DuckDB's memory limit while a bundle loads: WATTBENCH_INGEST_MEMORY, read when a bundle loads (importing the
    code location reads no environment variable), else INGEST_MEMORY."""
    return os.environ.get("WATTBENCH_INGEST_MEMORY", INGEST_MEMORY)


# Prometheus label text ({a="b",le="0.1"}) -> MAP: how version-1 warehouses and bundles stored labels.
_LABELS_TEXT_TO_MAP = (
    "CASE WHEN {col} IS NULL THEN NULL ELSE map("
    "regexp_extract_all({col}, '([a-zA-Z_][a-zA-Z0-9_]*)=\"', 1), "
    'regexp_extract_all({col}, \'="((?:[^"\\\\]|\\\\.)*)"\', 1)) END'
)
# Columns read from a bundle as another type than the table's, then converted (old bundles wrote them otherwise).
_READ_AS = {
    ("server_metrics", "labels"): (
        "JSON",
        "CASE WHEN labels IS NULL THEN NULL WHEN json_type(labels) = 'OBJECT' "
        "THEN labels::MAP(VARCHAR, VARCHAR) ELSE " + _LABELS_TEXT_TO_MAP.format(col="(labels->>'$')") + " END",
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


def apply_schema(con: duckdb.DuckDBPyConnection) -> int:
    """Create every table if absent and record the schema version; safe to call on every connection (it also gives
    the connection the token store's functions, which sql/views.sql reads: resources/token_store.py)."""
    from wattbench import token_store

    token_store.register(con)
    con.execute((SQL_DIR / "schema.sql").read_text())
    if table_columns(con, "server_metrics").get("labels") == "VARCHAR":  # a version-1 warehouse
        con.execute(
            "ALTER TABLE server_metrics ALTER labels SET DATA TYPE MAP(VARCHAR, VARCHAR) USING "
            + _LABELS_TEXT_TO_MAP.format(col="labels")
        )
    if table_columns(con, "point_stats").get("longest_context_tokens") == "INTEGER":  # a sum past 2^31 overflowed
        con.execute("ALTER TABLE point_stats ALTER longest_context_tokens SET DATA TYPE BIGINT")
    con.execute((SQL_DIR / "views.sql").read_text())
    ensure_natural_keys(con)  # unique indexes where a table has no primary key (resources/ingest_checks.py)
    current = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    if current is not None and current < 3:  # version 3 keeps per-load-point figures: fill them for every run
        refresh_point_stats(con, None)
    elif current is not None and current < 4:  # version 4 keeps the GPU trace's and imported points' figures
        refresh_kept_views(con, None)
    elif current is not None and current < 5:  # version 5 keeps load runs' and points' figures, request tallies
        refresh_kept_views(con, None, ("request_tallies", *_AFTER_RUN_FIELDS, "window_gpu_stats"))
    elif current is not None and current < 7:  # version 7 keeps GPU clocks, temperatures, throttling per window
        refresh_kept_views(con, None, ("window_gpu_stats", *_AFTER_RUN_FIELDS))
    elif current is not None and current < 9:  # 8: figures by one definition; 9: energy per request, slo_capacity
        refresh_kept_views(con, None, _AFTER_RUN_FIELDS)
    if current is not None and current < 11:  # 11: the shape's traits in load_runs, for every run
        fill_shape_traits(con, None)
    if current is None or current < SCHEMA_VERSION:  # new, or migrated by schema.sql's migration block
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION])
    elif current > SCHEMA_VERSION:
        raise WarehouseError(
            f"warehouse schema version {current} is newer than this wattbench's {SCHEMA_VERSION}; upgrade wattbench"
        )
    return SCHEMA_VERSION


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

    chunks = None
    version = manifest.get("bundle_version", 1)
    if "requests" in files and (paths := chunk_paths(folder, version)) is not None:  # version 2: token times in binary
        chunks = ChunkFiles(con, paths, files["requests"])
        chunks.start_copy(token_store.folder_of(con))  # into the token store, in a thread, while the rest loads
    counts: dict[str, int] = {}
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.execute(f"SET memory_limit = '{ingest_memory()}'")  # DuckDB spills to disk past it: a big bundle stays bounded
    try:
        result = _ingest(con, folder, manifest, run_id, files, types, counts, chunks, replace)
    except BaseException:
        if chunks is not None:
            chunks.drop()
            chunks.undo()  # what this bundle put in the token store goes with its rows
        raise
    finally:
        con.execute(f"SET memory_limit = '{limit}'")
    if chunks is not None:
        chunks.drop()
    token_store.collect(con)  # files no row names any more (a run replaced): after the commit
    return result


# Columns ingest computes, never read from a bundle (a row that names one is refused as naming an unknown column);
# events_at / events_n come from a version-3 bundle's requests.csv (or version 2's `chunks`) only.
_COMPUTED = {"requests": {"chunk_tokens_each", "events_file", "counts_file", "events_at", "events_n"}}
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
        fill_shape_traits(con, run_id)
        if staged:  # before the rows are compared with a complete run's: a bundle loads to the same rows each time
            _fill_steps(con, run_id, chunks)
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
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return counts


def fill_shape_traits(con: duckdb.DuckDBPyConnection, run_id: str | None) -> None:
    """load_runs.closed_loop and .bursty of a run's rows (every run's: None) from the shape registry
    (wattbench_agent.loadgen.shapes), so SQL asks a point's traits, not its shape's name. A shape this wattbench
    does not know keeps what the row had (NULL from a bundle: bundles do not carry traits, docs/CONTRACTS.md)."""
    from wattbench_agent.loadgen import shapes

    traits = [(name, shape.closed_loop, shape.bursty) for name, shape in shapes.SHAPES.items()]
    con.execute(
        "UPDATE load_runs SET closed_loop = t.closed_loop, bursty = t.bursty "
        "FROM (SELECT unnest(?, recursive := true)) t WHERE load_runs.shape = t.shape AND (? IS NULL OR run_id = ?)",
        [[{"shape": n, "closed_loop": c, "bursty": b} for n, c, b in traits], run_id, run_id],
    )


def _fill_steps(con, run_id: str, chunks: ChunkFiles) -> int:
    """The step decomposition of each load point (load_runs.step_gaps ... phase_state), from the compiled pass over
    its token times, where the bundle's row has none (a bundle from before the agent computed it); where it has one,
    the agent's stays (the same definition over the same requests: wattbench_agent.loadgen.steps). Rows filled."""
    from wattbench_agent.loadgen import shapes, steps

    parts = chunks.point_steps()
    if not parts:
        return 0
    rows = con.execute(
        """SELECT l.deployment_id, l.load_point_id, l.shape, l.concurrency,
                  (SELECT list(DISTINCT q.completion_tokens) FROM _rq q WHERE q.deployment_id = l.deployment_id
                     AND q.load_point_id = l.load_point_id AND q.error_kind IS NULL AND coalesce(q.in_window, false)),
                  (SELECT count(*) FILTER (WHERE q.completion_tokens IS NULL) FROM _rq q
                    WHERE q.deployment_id = l.deployment_id AND q.load_point_id = l.load_point_id
                      AND q.error_kind IS NULL AND coalesce(q.in_window, false))
           FROM load_runs l WHERE l.run_id = ? AND l.step_gaps IS NULL AND l.phase_state IS NULL""",
        [run_id],
    ).fetchall()
    filled = 0
    for dep, lp, shape, concurrency, lengths, unknown in rows:
        part = parts.get((dep, lp))
        if part is None or not part["gaps"]:
            continue
        closed = shape in shapes.names() and shapes.get(shape).closed_loop
        found = set(lengths or []) | ({None} if unknown else set())
        out = {**part, "stall_threshold_ms": None, "phase_state": None, "note": None}
        expected, note = steps.expected_for_lengths(found, closed, concurrency)
        out = steps.verdict(out, expected, note)
        cols = steps.load_run_columns(out)
        con.execute(
            f"UPDATE load_runs SET {', '.join(f'{c} = ?' for c in cols)} "
            "WHERE run_id = ? AND deployment_id = ? AND load_point_id = ?",
            [*cols.values(), run_id, dep, lp],
        )
        filled += 1
    return filled


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


# The per-request parts of point_stats (no token arrays read): v_request_stats_live, v_request_slo_counts and the
# client's TTFT/E2E of v_client_stats_live.
_POINT_STATS_PARTS = {
    "q": "SELECT * FROM v_request_stats_live WHERE {where}",
    "c": "SELECT * FROM v_request_slo_counts WHERE {where}",
    "r": """SELECT q.run_id, q.deployment_id, q.load_point_id,
           avg(q.ttft_ms) FILTER (WHERE q.first_token_ns BETWEEN l.window_start_ns AND l.window_end_ns) AS ttft_ms,
           count(*) FILTER (WHERE q.first_token_ns BETWEEN l.window_start_ns AND l.window_end_ns) AS ttft_n,
           avg(q.e2e_ms) FILTER (WHERE q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns)
                                       AND coalesce(l.window_end_ns, q.last_token_ns)) AS e2e_ms,
           count(*) FILTER (WHERE q.last_token_ns BETWEEN coalesce(l.window_start_ns, q.last_token_ns)
                                  AND coalesce(l.window_end_ns, q.last_token_ns)) AS e2e_n
    FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE q.error_kind IS NULL AND q.{where}
    GROUP BY ALL""",
}
# Every token event read once for v_itl_stats_live, v_window_steadiness_live and the client's ITL of
# v_client_stats_live (their definitions in sql/views.sql; tests/test_point_stats.py checks they agree): the events
# unnested from the requests' lists (request_ns: stored in the row, or read from the token store). A bundle whose
# requests' events are all in its chunk files has them from the compiled pass instead (resources/token_pass.py, the
# same definitions: tests/test_point_stats.py).
_TOKEN_EVENTS = """
        SELECT q.run_id, q.deployment_id, q.load_point_id, q.in_window, l.window_start_ns AS ws,
               l.window_end_ns AS we, l.run_id IS NOT NULL AS has_load_run,
               unnest(q.times) AS t,
               unnest(request_tokens(q.chunk_tokens, q.chunk_tokens_each, q.counts_file, q.events_at, q.events_n,
                                     q.times)) AS n,
               unnest(CASE WHEN len(q.times) = 0 THEN []::BIGINT[]  -- the previous event of an exact one
                           ELSE list_transform(range(1, len(q.times) + 1), lambda j: CASE WHEN j > 1
                                AND j <= coalesce(q.chunks_exact, len(q.times)) THEN q.times[j - 1] END) END)
                 AS prev
        FROM (SELECT *, request_ns(chunk_ns, events_file, events_at, events_n) AS times FROM requests
              WHERE error_kind IS NULL AND {where}) q
        LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id)"""
_TOKEN_FIGURES = """
    SELECT run_id, deployment_id, load_point_id,
           quantile_cont((t - prev) / 1e6, [0.50, 0.90, 0.95, 0.99, 0.999])
               FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_q,
           avg((t - prev) / 1e6) FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_mean_ms,
           stddev_pop((t - prev) / 1e6) FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_stdev_ms,
           count(*) FILTER (WHERE in_window AND prev IS NOT NULL) AS itl_samples,
           count(*) FILTER (WHERE has_load_run AND we > ws) AS steady_events,
           sum(n) FILTER (WHERE we > ws AND t >= ws AND t < (ws + we) / 2) AS first_half_tokens,
           sum(n) FILTER (WHERE we > ws AND t >= (ws + we) / 2 AND t <= we) AS second_half_tokens,
           avg((t - prev) / 1e6) FILTER (WHERE has_load_run AND prev IS NOT NULL AND t BETWEEN ws AND we)
               AS client_itl_ms,
           count(*) FILTER (WHERE has_load_run AND prev IS NOT NULL AND t BETWEEN ws AND we) AS client_itl_n
    FROM ev GROUP BY ALL"""
_POINT_STATS_PARTS["t"] = "WITH ev AS (" + _TOKEN_EVENTS + ")" + _TOKEN_FIGURES
_ITL_LEVELS = (0.50, 0.90, 0.95, 0.99, 0.999)


_POINT_STATS = """
WITH keys AS (SELECT run_id, deployment_id, load_point_id FROM _ps_q
              UNION SELECT run_id, deployment_id, load_point_id FROM _ps_t
                    WHERE itl_samples > 0 OR steady_events > 0 OR client_itl_n > 0
              UNION SELECT run_id, deployment_id, load_point_id FROM _ps_r)
SELECT k.run_id, coalesce(lr.source, r.source, 'unknown') AS source, k.deployment_id, k.load_point_id,
       q.run_id IS NOT NULL AS has_requests, q.* EXCLUDE (run_id, deployment_id, load_point_id),
       r.slo_ttft_ms, r.slo_tpot_ms, r.slo_e2e_ms, c.meeting_slo_completed_in_window, c.meeting_slo_in_window,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[1] END AS itl_p50_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[2] END AS itl_p90_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[3] END AS itl_p95_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[4] END AS itl_p99_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_q[5] END AS itl_p999_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_mean_ms END AS itl_mean_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_stdev_ms END AS itl_stdev_ms,
       CASE WHEN t.itl_samples > 0 THEN t.itl_samples END AS itl_samples,
       coalesce(t.steady_events > 0, false) AS has_steadiness,
       CASE WHEN t.steady_events > 0 THEN t.first_half_tokens END AS first_half_tokens,
       CASE WHEN t.steady_events > 0 THEN t.second_half_tokens END AS second_half_tokens,
       CASE WHEN t.steady_events > 0 THEN abs(t.second_half_tokens - t.first_half_tokens)
            / nullif((t.second_half_tokens + t.first_half_tokens) / 2, 0) END AS window_drift,
       x.run_id IS NOT NULL AS has_client, x.ttft_ms AS client_ttft_ms, x.ttft_n AS client_ttft_n,
       x.e2e_ms AS client_e2e_ms, x.e2e_n AS client_e2e_n,
       CASE WHEN x.run_id IS NOT NULL AND t.client_itl_n > 0 THEN t.client_itl_ms END AS client_itl_ms,
       CASE WHEN x.run_id IS NOT NULL AND t.client_itl_n > 0 THEN t.client_itl_n END AS client_itl_n
FROM keys k
LEFT JOIN _ps_q q USING (run_id, deployment_id, load_point_id)
LEFT JOIN _ps_c c USING (run_id, deployment_id, load_point_id)
LEFT JOIN _ps_t t USING (run_id, deployment_id, load_point_id)
LEFT JOIN _ps_r x USING (run_id, deployment_id, load_point_id)
LEFT JOIN runs r USING (run_id)
LEFT JOIN load_runs lr USING (run_id, deployment_id, load_point_id)
"""


def refresh_point_stats(con: duckdb.DuckDBPyConnection, run_id: str | None, events: ChunkFiles | None = None) -> int:
    """Recompute the kept per-load-point figures (point_stats) of one run (every run: None) from the requests, as
    the *_live definitions of sql/views.sql compute them, every token event read once; inside the caller's
    transaction. `events`: the run's token events come from the chunk files being ingested. Returns the rows
    written."""
    where, params = ("run_id = $run_id", {"run_id": run_id}) if run_id is not None else ("run_id IS NOT NULL", {})
    for name, sql in _POINT_STATS_PARTS.items():
        if name != "t":
            con.execute(f"CREATE OR REPLACE TEMP TABLE _ps_{name} AS " + sql.format(where=where), params)
    # token events load point by load point: the exact ITL percentiles hold a point's gaps in memory, never a run's
    points = con.execute(
        f"SELECT DISTINCT run_id, load_point_id FROM requests WHERE {where} ORDER BY ALL", params
    ).fetchall()
    one = _POINT_STATS_PARTS["t"].format(where="run_id = $run_id AND load_point_id = $lp")
    con.execute("CREATE OR REPLACE TEMP TABLE _ps_t AS " + one + " LIMIT 0", {"run_id": "", "lp": ""})
    if events is not None and run_id is not None:
        from wattbench.chunk_files import STAGING

        figures = []
        for dep, lp in events.points():
            fig = events.point_figures(dep, lp)
            if fig is not None:
                figures.append({"run_id": run_id, "deployment_id": dep, "load_point_id": lp, **fig})
        if figures:  # a row a load point (pyarrow.Table.from_pylist would import pandas for them)
            cols = list(figures[0])
            con.executemany(
                f"INSERT INTO _ps_t ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                [[f.get(c) for c in cols] for f in figures],
            )
        # the run's other deployments (loaded from another bundle) from their stored lists
        points = con.execute(
            f"SELECT DISTINCT run_id, load_point_id FROM requests WHERE {where} AND deployment_id NOT IN "
            f"(SELECT deployment_id FROM {STAGING}) ORDER BY ALL",
            params,
        ).fetchall()
    for rid, lp in points:
        con.execute("INSERT INTO _ps_t " + one, {"run_id": rid, "lp": lp})
    try:
        con.execute(f"DELETE FROM point_stats WHERE {where}", params)
        con.execute("INSERT INTO point_stats BY NAME " + _POINT_STATS)
    finally:
        for name in _POINT_STATS_PARTS:
            con.execute(f"DROP TABLE IF EXISTS _ps_{name}")
    refresh_kept_views(con, run_id)
    return con.execute(f"SELECT count(*) FROM point_stats WHERE {where}", params).fetchone()[0]


# Tables that keep a view's rows (its definition: the *_live view of sql/views.sql) and are refreshed with point_stats,
# in this order: load_points_core reads the others (and point_stats), point_figures reads load_points_core.
KEPT_VIEWS = {
    "window_gpu_stats": "v_window_gpu_live",
    "imported_request_stats": "v_imported_request_stats_live",
    "imported_itl_stats": "v_imported_itl_stats_live",
    "request_tallies": "v_request_tallies_live",
    "load_points_core": "v_load_points_core_live",
    "point_figures": "v_point_figures_live",
    "slo_capacity": "v_slo_capacity_live",
}
# The kept tables whose live view reads the run's own row (runs: SLO, prices, start time), refreshed by set_run_fields,
# and slo_capacity, which reads point_figures (its cost): a run without a capacity search has no row of it.
RUN_FIELD_TABLES = ("load_points_core", "point_figures")
_AFTER_RUN_FIELDS = (*RUN_FIELD_TABLES, "slo_capacity")
# Live views that carry their load point's source themselves
_OWN_SOURCE = {"v_load_points_core_live", "v_point_figures_live", "v_slo_capacity_live"}


def refresh_kept_views(
    con: duckdb.DuckDBPyConnection, run_id: str | None, tables: tuple[str, ...] | None = None
) -> int:
    """Recompute the tables of KEPT_VIEWS (or those named in `tables`) for one run (every run: None) from their
    *_live views, inside the caller's transaction; each row with its load point's source. Returns the rows written."""
    where, params = ("run_id = $run_id", {"run_id": run_id}) if run_id is not None else ("run_id IS NOT NULL", {})
    written = 0
    for table, live in KEPT_VIEWS.items():
        if tables is not None and table not in tables:
            continue
        con.execute(f"DELETE FROM {table} WHERE {where}", params)
        if live in _OWN_SOURCE:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {live} WHERE {where}", params)
        else:
            con.execute(
                f"INSERT INTO {table} BY NAME SELECT v.*, coalesce(l.source, 'unknown') AS source "
                f"FROM {live} v LEFT JOIN load_runs l USING (run_id, deployment_id, load_point_id) WHERE {where}",
                params,
            )
        written += con.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0]
    return written


def set_run_fields(con: duckdb.DuckDBPyConnection, run_id: str, fields: dict[str, Any]) -> None:
    """Set a run's own fields (its row in `runs`, made if there is none: plan name and file, prices, SLO, start time,
    status, ...) and refresh the kept figures that read them (RUN_FIELD_TABLES), in one transaction. Every place that
    sets them calls this (a benchmark opened, `wattbench ingest --plan`, `wattbench predict`): a plain UPDATE would
    leave load_points_core with the cost of the old prices and the goodput of the old SLO."""
    cols = table_columns(con, "runs")
    unknown = set(fields) - set(cols)
    if unknown:
        raise WarehouseError(f"table runs: unknown column(s) {', '.join(sorted(unknown))}")
    names = [c for c in fields if c != "run_id"]
    con.execute("BEGIN TRANSACTION")
    try:
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            if names:
                sets = ", ".join(f"{c} = ?" for c in names)
                con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*(fields[c] for c in names), run_id])
        else:
            con.execute(
                f"INSERT INTO runs (run_id{''.join(', ' + c for c in names)}) VALUES (?{', ?' * len(names)})",
                [run_id, *(fields[c] for c in names)],
            )
        refresh_kept_views(con, run_id, _AFTER_RUN_FIELDS)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


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
