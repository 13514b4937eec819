"""The warehouse's query interface: the .sql files in sql/ run on a DuckDB connection, and the one error the
warehouse raises. Imported by every module of the warehouse (connection, schema, point statistics, ingest), it imports
none of them.
"""

from __future__ import annotations

import re
from typing import Any

try:  # DuckDB's engine alone, 0.015 s to import; the `duckdb` package around it takes 0.1 s more (see connect)
    import _duckdb as duckdb
except ImportError:  # an older duckdb, whose engine is not a top-level module: the package
    import duckdb

from wattbench.settings import REPO_ROOT

SQL_DIR = REPO_ROOT / "sql"


class WarehouseError(RuntimeError):
    """The warehouse cannot do what was asked; the message says what, where and what was expected."""


def sql_text(name: str) -> str:
    """The text of sql/<name>.sql: the report queries that `wattbench sql` and the report assets share."""
    path = SQL_DIR / (name if name.endswith(".sql") else f"{name}.sql")
    if not path.exists():
        known = ", ".join(
            sorted(p.stem for p in SQL_DIR.glob("*.sql") if p.stem not in ("schema", "views", "derive_deployment_hbm"))
        )
        raise WarehouseError(f"no query {path.name} in {SQL_DIR}; known queries: {known}")
    return path.read_text()


# A named query may name the columns `wattbench sql NAME` shows by default (`--all`: every one): a comment line
# "-- shown by default: a, b, c" in its file, continued on comment lines that start with "--   ".
_SHOWN = re.compile(r"^-- shown by default:(.*(?:\n--   .*)*)", re.MULTILINE)


def default_columns(text: str) -> list[str] | None:
    """The columns a named query shows by default, in its file's order (None: every column)."""
    m = _SHOWN.search(text)
    if not m:
        return None
    names = m.group(1).replace("\n--", " ").replace("\n", " ")
    return [c.strip() for c in names.split(",") if c.strip()] or None


def execute_sql(con: duckdb.DuckDBPyConnection, name_or_sql: str, params: dict[str, Any] | None = None):
    """Run a named query from sql/ (or literal SQL); returns the connection with its result pending."""
    text = sql_text(name_or_sql) if re.fullmatch(r"[\w\-]+(\.sql)?", name_or_sql.strip()) else name_or_sql
    # Named parameters ($run_id) that the query does not use are dropped, so callers can pass a superset.
    used = {k: v for k, v in (params or {}).items() if f"${k}" in text}
    try:
        return con.execute(text, used) if used else con.execute(text)
    except duckdb.CatalogException as exc:
        if "token_times" not in str(exc) and "token_counts" not in str(exc):
            raise
    from wattbench import token_store  # a query that reads token times, on a connection without the functions yet

    token_store.register(con)
    return con.execute(text, used) if used else con.execute(text)


def run_sql(con: duckdb.DuckDBPyConnection, name_or_sql: str, params: dict[str, Any] | None = None):
    """Run a named query from sql/ (or literal SQL) and return a pandas DataFrame."""
    return execute_sql(con, name_or_sql, params).df()


def query_rows(
    con: duckdb.DuckDBPyConnection, name_or_sql: str, params: dict[str, Any] | None = None
) -> tuple[list[str], list[tuple]]:
    """Run a named query from sql/ (or literal SQL): (column names, rows as tuples), without pandas (the CLI's
    read-only commands answer without importing it)."""
    cursor = execute_sql(con, name_or_sql, params)
    columns = [d[0] for d in cursor.description or []]
    return columns, cursor.fetchall()


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    return {row[0]: row[1] for row in con.execute(f"DESCRIBE {table}").fetchall()}
