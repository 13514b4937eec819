"""The warehouse's schema: sql/schema.sql and sql/views.sql applied to a connection, older warehouses migrated to
this version (their kept figures filled for the columns a version added), and the version recorded.
"""

from __future__ import annotations

import hashlib
import re

from wattbench.ingest_checks import LABELS_KEY, ensure_natural_keys
from wattbench.point_stats import (
    AFTER_RUN_FIELDS,
    fill_shape_traits,
    refresh_kept_views,
    refresh_point_stats,
)
from wattbench.queries import SQL_DIR, WarehouseError, duckdb, table_columns
from wattbench.step_fill import clear_old_labels, fill_steps

# 7: step decomposition, host facts, GPU clocks per window (sql/schema.sql migration block); 8: point figures over
# repeats on the log scale, latency intervals from them (sql/views.sql), the idle windows' wait for quiet GPUs;
# 9: SLO capacity searches, energy per request (sql/schema.sql migration block);
# 10: per-token times in the token store beside the warehouse (requests.events_file, ...; wattbench/token_store.py);
# 11: the load shape's traits in load_runs (closed_loop, bursty: fill_shape_traits); 12: server starts (load_runs,
# searches, deployments) and intervals over them (sql/views.sql), refilled for every run; 13: the step
# decomposition's prefills from first tokens and delivery stalls apart, every load run's made again (step_fill.py);
# 14: server_metrics.labels_key, the unique key's plain column (an index on an expression crashed DuckDB at checkpoint)
SCHEMA_VERSION = 14

# Prometheus label text ({a="b",le="0.1"}) -> MAP: how version-1 warehouses and bundles stored labels.
LABELS_TEXT_TO_MAP = (
    "CASE WHEN {col} IS NULL THEN NULL ELSE map("
    "regexp_extract_all({col}, '([a-zA-Z_][a-zA-Z0-9_]*)=\"', 1), "
    'regexp_extract_all({col}, \'="((?:[^"\\\\]|\\\\.)*)"\', 1)) END'
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
            + LABELS_TEXT_TO_MAP.format(col="labels")
        )
    if table_columns(con, "point_stats").get("longest_context_tokens") == "INTEGER":  # a sum past 2^31 overflowed
        con.execute("ALTER TABLE point_stats ALTER longest_context_tokens SET DATA TYPE BIGINT")
    if "labels_key" not in table_columns(con, "server_metrics"):  # before version 14
        _rebuild_server_metrics(con)
    _make_views(con)
    ensure_natural_keys(con)  # unique indexes where a table has no primary key (resources/ingest_checks.py)
    current = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    if current is not None and current < 3:  # version 3 keeps per-load-point figures: fill them for every run
        refresh_point_stats(con, None)
    elif current is not None and current < 4:  # version 4 keeps the GPU trace's and imported points' figures
        refresh_kept_views(con, None)
    elif current is not None and current < 5:  # version 5 keeps load runs' and points' figures, request tallies
        refresh_kept_views(con, None, ("request_tallies", *AFTER_RUN_FIELDS, "window_gpu_stats"))
    elif current is not None and current < 7:  # version 7 keeps GPU clocks, temperatures, throttling per window
        refresh_kept_views(con, None, ("window_gpu_stats", *AFTER_RUN_FIELDS))
    elif current is not None and current < 9:  # 8: figures by one definition; 9: energy per request, slo_capacity
        refresh_kept_views(con, None, AFTER_RUN_FIELDS)
    if current is not None and current < 11:  # 11: the shape's traits in load_runs, for every run
        fill_shape_traits(con, None)
    if current is not None and current < 13:  # 13: every load run's step decomposition by this version's definitions
        fill_steps(con, None)
        clear_old_labels(con)
    if current is not None and 9 <= current < 12:  # 12: intervals over server starts (every run had one start)
        refresh_kept_views(con, None, AFTER_RUN_FIELDS)
    if current is None or current < SCHEMA_VERSION:  # new, or migrated by schema.sql's migration block
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION])
    elif current > SCHEMA_VERSION:
        raise WarehouseError(
            f"warehouse schema version {current} is newer than this wattbench's {SCHEMA_VERSION}; upgrade wattbench"
        )
    return SCHEMA_VERSION


def _make_views(con: duckdb.DuckDBPyConnection) -> None:
    """sql/views.sql's views and macros, made again only when it (or sql/schema.sql, whose tables they read) changed
    since they were last made here, or one of them is missing: opening a warehouse otherwise writes nothing (a full
    disk used to fail every connection here, and every open rewrote them all)."""
    text = (SQL_DIR / "views.sql").read_text()
    digest = hashlib.sha256(((SQL_DIR / "schema.sql").read_text() + "\0" + text).encode()).hexdigest()
    names = set(re.findall(r"CREATE OR REPLACE (?:VIEW|MACRO) (\w+)", text))
    made = con.execute("SELECT sha256 FROM views_made").fetchall()
    if made == [(digest,)]:
        present = {
            r[0]
            for r in con.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION SELECT function_name FROM "
                "duckdb_functions() WHERE function_type IN ('macro', 'table_macro') AND NOT internal"
            ).fetchall()
        }
        if names <= present:
            return
    con.execute(text)
    con.execute("DELETE FROM views_made")
    con.execute("INSERT INTO views_made VALUES (?)", [digest])


def _rebuild_server_metrics(con: duckdb.DuckDBPyConnection) -> None:
    """Version 14: server_metrics made again as sql/schema.sql declares it (labels_key NOT NULL, held to its labels by a
    CHECK, which DuckDB adds to a new table only), its rows copied with their key, in one transaction. The old unique
    index on an expression goes with the old table; ensure_natural_keys makes the new one on plain columns (keeping
    one copy of a sample with no labels stored twice, which the old index let through)."""
    statements = con.extract_statements((SQL_DIR / "schema.sql").read_text())
    create = next(s.query for s in statements if "CREATE TABLE IF NOT EXISTS server_metrics (" in s.query)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DROP INDEX IF EXISTS server_metrics_key")
        con.execute("ALTER TABLE server_metrics RENAME TO server_metrics_before_14")
        con.execute(create)
        con.execute(
            "INSERT INTO server_metrics BY NAME SELECT *, "
            f"{LABELS_KEY.format(col='labels')} AS labels_key FROM server_metrics_before_14"
        )
        con.execute("DROP TABLE server_metrics_before_14")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
