"""Dagster table metadata. For the warehouse tables the stage assets write: `dagster/table_name` and
`dagster/column_schema`, from the DuckDB table itself (columns, types, NOT NULL, primary key) and the comments in
sql/schema.sql (the one written next to each column, else a COMMENT ON the column), so the Dagster UI shows each
asset's columns with what they mean and their units. For a report's table: its rows (frame_metadata)."""

from __future__ import annotations

import functools
import re
from typing import Any

import dagster as dg

from wattbench.warehouse import SQL_DIR

_CREATE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)\s*\((.*?)\n\);", re.S)
_COLUMN = re.compile(
    r"^\s{2,}(\w+)\s+([A-Z][A-Z0-9_\[\](), ]*?)\s*(?:NOT NULL|PRIMARY KEY|DEFAULT [^,-]+|,|\s)*"
    r"(?:--\s*(.*))?$"
)
_ALTER = re.compile(r"^ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+) [^;]+;\s*(?:--\s*(.*))?$", re.M)


# What sql/schema.sql says once in its header rather than beside each column.
COMMON = {
    "run_id": "the Dagster run (or imported run) the row belongs to",
    "source": "emulated (wattbench's built-in emulator), measured (real engine and GPU telemetry) or imported:<tool>",
    "deployment_id": "the engine server of the run the row belongs to",
}
# Units by column-name suffix, for columns without a comment of their own.
UNITS = (
    ("_ns", "ns, CLOCK_MONOTONIC of the measuring host"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_w", "W"),
    ("_j", "J"),
    ("_mj", "mJ"),
    ("_mib", "MiB"),
    ("_mhz", "MHz"),
    ("_c", "degrees C"),
    ("_hz", "Hz"),
    ("_usd", "$"),
    ("_per_hour", "$ per GPU-hour"),
    ("_per_kwh", "$ per kWh"),
    ("_bytes", "bytes"),
    ("_pct", "%"),
    ("_tokens", "tokens"),
)


def describe(table: str, column: str) -> str | None:
    """A column's description: its comment in sql/schema.sql, else what the schema says of every table, else its
    unit read from its name; None when none of those says anything."""
    comment = schema_comments().get(table, {}).get(column) or COMMON.get(column)
    unit = next((u for suffix, u in UNITS if column.endswith(suffix)), None)
    if comment and unit and unit.split(",")[0] not in comment:
        return f"{comment} (unit: {unit})"
    return comment or (f"unit: {unit}" if unit else None)


@functools.lru_cache(maxsize=1)
def schema_comments() -> dict[str, dict[str, str]]:
    """{table: {column: the comment written beside it in sql/schema.sql}}; a comment that ends a line and goes on
    as a comment-only line is joined."""
    text = (SQL_DIR / "schema.sql").read_text(encoding="utf-8")
    out: dict[str, dict[str, str]] = {}
    for table, body in _CREATE.findall(text):
        cols: dict[str, str] = {}
        last = None
        for line in body.splitlines():
            stripped = line.strip()
            if stripped.startswith("--"):
                if last is not None and last in cols:  # a comment-only line goes on with the column above
                    cols[last] = f"{cols[last]} {stripped.lstrip('-').strip()}"
                continue
            if stripped.upper().startswith(("PRIMARY KEY", "UNIQUE", "FOREIGN KEY", "CHECK")):
                last = None
                continue
            m = _COLUMN.match(line)
            if not m:
                last = None
                continue
            last = m.group(1)
            if m.group(3):
                cols[last] = m.group(3).strip()
        out[table] = cols
    for table, column, comment in _ALTER.findall(text):
        if comment:
            out.setdefault(table, {}).setdefault(column, comment.strip())
    return out


def column_schema(con, table: str) -> dg.TableSchema:
    """The table's columns as DuckDB has them (name, type, NOT NULL, primary key), described by sql/schema.sql."""
    rows = con.execute(
        "SELECT column_name, data_type, is_nullable, comment FROM duckdb_columns() "
        "WHERE table_name = ? AND schema_name = current_schema() AND database_name = current_database() "
        "ORDER BY column_index",
        [table],
    ).fetchall()
    keys = con.execute(
        "SELECT constraint_column_names FROM duckdb_constraints() "
        "WHERE table_name = ? AND constraint_type = 'PRIMARY KEY' "
        "AND schema_name = current_schema() AND database_name = current_database()",
        [table],
    ).fetchall()
    primary = [c for (names,) in keys for c in names]
    columns = []
    for name, dtype, nullable, comment in rows:
        other = ["part of the primary key"] if name in primary and len(primary) > 1 else []
        columns.append(
            dg.TableColumn(
                name=name,
                type=str(dtype),
                description=comment or describe(table, name),
                constraints=dg.TableColumnConstraints(nullable=bool(nullable), unique=primary == [name], other=other),
            )
        )
    constraints = dg.TableConstraints(other=[f"PRIMARY KEY ({', '.join(primary)})"]) if primary else None
    return dg.TableSchema(columns=columns, constraints=constraints)


def table_metadata(con, table: str) -> dict[str, Any]:
    """`dagster/table_name` (<database>.<schema>.<table>) and `dagster/column_schema` of a warehouse table."""
    database, schema = con.execute("SELECT current_database(), current_schema()").fetchone()
    return {
        "dagster/table_name": dg.MetadataValue.text(f"{database}.{schema}.{table}"),
        "dagster/column_schema": dg.MetadataValue.table_schema(column_schema(con, table)),
    }


def frame_metadata(df: Any) -> dg.MetadataValue:
    """A report's DataFrame as Dagster table metadata (MetadataValue.table): every column as a string column
    except plain numbers; NULL for missing values."""
    import pandas as pd  # a report asset's frame; the stage assets above need no pandas

    if df.empty:
        return dg.MetadataValue.table(records=[], schema=dg.TableSchema(columns=[]))
    df = df.reset_index() if df.index.name else df
    cols = []
    for name in df.columns:
        kind = (
            "int"
            if pd.api.types.is_integer_dtype(df[name])
            else "float"
            if pd.api.types.is_float_dtype(df[name])
            else "bool"
            if pd.api.types.is_bool_dtype(df[name])
            else "string"
        )
        cols.append(dg.TableColumn(str(name), kind))
    records = []
    for row in df.itertuples(index=False):
        rec = {}
        for col, v in zip(cols, row):
            if v is None or (isinstance(v, float) and v != v):
                rec[col.name] = None
            elif col.type == "int":
                rec[col.name] = int(v)
            elif col.type == "float":
                rec[col.name] = float(v)
            elif col.type == "bool":
                rec[col.name] = bool(v)
            else:
                rec[col.name] = str(v)
        records.append(dg.TableRecord(rec))
    return dg.MetadataValue.table(records=records, schema=dg.TableSchema(columns=cols))
