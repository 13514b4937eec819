"""What a bundle's table files must be before any of their rows stays in the warehouse.

`warehouse.ingest_bundle` loads each table file with DuckDB (read_json, the columns and types of sql/schema.sql),
inside the ingest's one transaction, and runs these rules on the rows just loaded, in SQL (`suspect_rows`,
`scan_lines`): no Python touches a row of a good bundle, so a million requests load in seconds. Where DuckDB
refuses a file or a rule finds a row, the file is read again line by line (`check_table_file`, the slow path, run
only then) for the message: the file, the line and the reason; the transaction is rolled back, so nothing of the
bundle stays. The whole bundle is refused when:
- a table file is not a regular file (a FIFO would be waited on forever, /dev/zero read until memory runs out), or a
  line is longer than MAX_LINE_BYTES, not UTF-8, not a JSON object, or names a column the table does not have;
- a value of a numeric column (or an element of a numeric list) is not a JSON number: a quoted "5", "NaN", "-5" or
  "Infinity", a boolean, an object (DuckDB would otherwise convert a quoted number, NaN and Infinity included);
- a value anywhere in a row is NaN or +-Infinity (`NaN`, `Infinity`, or a number too large for a double, like 1e400):
  a value not measured is null, never a non-finite number;
- a value that reaches a figure is out of its range (RANGES: durations, counts, energies, powers and token counts
  are >= 0; utilisation is 0-100 %; an HTTP status is 100-599), a window ends before it starts, or a request's
  token times go backwards (LIST_ORDERED: an inter-token gap below zero);
- a row's natural key (NATURAL_KEYS) appears twice in one file (the lines of both are named).

A table file may be gzip-compressed (`<table>.jsonl.gz`): DuckDB reads it as it is. A version-3 table file is CSV
(`<table>.csv`: a header naming its columns, DuckDB reading its values as the table's types): the same rules, the
same one-line messages (`check_csv_file`: the line, the field and its value), a header naming an unknown column
refused at its line 1 (`csv_header`).

The same rules run again, after ingest, as Great Expectations suites (wattbench/validation.py), and the warehouse's
natural keys (`ensure_natural_keys`, unique indexes where a table has no primary key) refuse a row twice whatever
writes it. `row_problem` is the one definition of a well-formed row: bundles (line by line) and `wattbench import`
(wattbench/importers: every row an import would write) both ask it, so a row either path refuses names the file,
where in it (line, or load point and request), the field and the value.
"""

from __future__ import annotations

import json
import math
from array import array
from pathlib import Path
from typing import Any

from wattbench_agent.bundle import BundleError, regular_file

MAX_LINE_BYTES = 16 << 20  # one row: a request with thousands of chunk timestamps is well under 1 MiB

_NONNEG = (0, None)
# (min, max) of each column that reaches a figure; null is always allowed (not measured).
RANGES: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "engine_builds": {"tp": (1, None), "build_s": _NONNEG, "artifact_bytes": _NONNEG},
    "deployments": {
        "tp": (1, None),
        "n_gpus": _NONNEG,
        "startup_s": _NONNEG,
        "hbm_used_mib": _NONNEG,
        "hbm_total_mib": _NONNEG,
        "idle_power_w_before": _NONNEG,
        "idle_power_w_after": _NONNEG,
        "idle_settle_s_before": _NONNEG,
        "idle_settle_s_after": _NONNEG,
        "power_limit_w": _NONNEG,
        "sampler_hz": _NONNEG,
        "sampler_cpu_share": _NONNEG,
        "sampler_call_ms": _NONNEG,
        "cpu_logical": (1, None),
        "cpu_usable": _NONNEG,
        "cpu_mhz": _NONNEG,
        "cpu_max_mhz": _NONNEG,
    },
    "load_runs": {  # what was measured first, so that a fault in it is named rather than a figure derived from it
        "completed": _NONNEG,
        "failed": _NONNEG,
        "sent": _NONNEG,
        "window_s": _NONNEG,
        "repeat": (1, None),
        "concurrency": _NONNEG,
        "rate": _NONNEG,
        "burstiness": _NONNEG,
        "input_tokens": _NONNEG,
        "output_tokens": _NONNEG,
        "warmup_s": _NONNEG,
        "duration_s": _NONNEG,
        "drain_s": _NONNEG,
        "achieved_rate": _NONNEG,
        "achieved_concurrency": _NONNEG,
        "output_tokens_in_window": _NONNEG,
        "energy_j": _NONNEG,
        "energy_trace_j": _NONNEG,
        "energy_crosscheck_j": _NONNEG,
        "idle_power_w": _NONNEG,
        "step_gaps": _NONNEG,
        "decode_step_ms": _NONNEG,
        "stalled_gap_fraction": (0, 1),
        "stall_ms_mean": _NONNEG,
        "gpu_stalls": _NONNEG,
        "delivery_stalls": _NONNEG,
        "delivery_stalled_fraction": (0, 1),
        "delivery_stall_ms_mean": _NONNEG,
        "prefills": _NONNEG,
        "prefill_steps": _NONNEG,
        "prefills_per_step": (1, None),
        "prefills_per_step_se": _NONNEG,
        "shared_prefill_fraction": (0, 1),
        "expected_stalled_fraction": (0, 1),
        "host_load_1m": _NONNEG,
        "host_busy_cpus": _NONNEG,
        "host_steal_share": (0, 1),
        "engine_cpu_s": _NONNEG,
    },
    "requests": {
        "ttft_ms": _NONNEG,
        "e2e_ms": _NONNEG,
        "tpot_ms": _NONNEG,
        "prompt_tokens": _NONNEG,
        "completion_tokens": _NONNEG,
        "chunk_tokens_each": _NONNEG,  # computed at ingest from chunk_tokens (a negative one is named by its list)
        "input_tokens_requested": _NONNEG,
        "max_tokens": _NONNEG,
        "http_status": (100, 599),
    },
    "gpu_samples": {
        "power_w": _NONNEG,
        "power_avg_w": _NONNEG,
        "energy_mj": _NONNEG,
        "hbm_used_mib": _NONNEG,
        "hbm_total_mib": _NONNEG,
        "util_gpu_pct": (0, 100),
        "util_mem_pct": (0, 100),
        "sm_clock_mhz": _NONNEG,
        "mem_clock_mhz": _NONNEG,
        "temp_c": (-100, 200),
        "hbm_temp_c": (-100, 200),
        "power_limit_w": _NONNEG,
        "clock_event_reasons": _NONNEG,
    },
    "energy_windows": {"energy_start_mj": _NONNEG, "energy_end_mj": _NONNEG, "energy_j": _NONNEG},
    "server_metrics": {},
    "searches": {
        "attainment": (0, 1),
        "capacity": _NONNEG,
        "capacity_lo": _NONNEG,
        "capacity_hi": _NONNEG,
        "binding_share": (0, 1),
        "probes": _NONNEG,
        "window_s": _NONNEG,
        "time_s": _NONNEG,
    },
}
# Columns whose list elements are counts (tokens per streamed event).
LIST_RANGES = {"requests": {"chunk_tokens": _NONNEG}}
# Lists that never go backwards: a request's token arrival times (a negative gap would be a negative ITL).
LIST_ORDERED = {"requests": ("chunk_ns",)}
# SQL types whose values must be JSON numbers (a list of them: the type with [] after it).
NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
NUMERIC_TYPES += ("FLOAT", "REAL", "DOUBLE")


def numeric_columns(types: dict[str, str]) -> dict[str, bool]:
    """{column: is_list} of the columns whose values (or list elements) must be numbers, from a table's SQL types."""
    out = {}
    for column, sql_type in types.items():
        base = sql_type[:-2] if sql_type.endswith("[]") else sql_type
        if base in NUMERIC_TYPES or base.startswith("DECIMAL"):
            out[column] = sql_type.endswith("[]")
    return out


# (start, end): a window that ends before it starts has a negative duration.
ORDERED = {"load_runs": [("window_start_ns", "window_end_ns")], "energy_windows": [("start_ns", "end_ns")]}
# What makes a row of a bundle table itself (run_id is the bundle's). gpu_samples and server_metrics have no primary
# key in the schema; ensure_natural_keys gives them a unique index on these.
NATURAL_KEYS = {
    "engine_builds": ("build_id",),
    "deployments": ("deployment_id",),
    "load_runs": ("load_point_id",),
    "requests": ("load_point_id", "request_id"),
    "gpu_samples": ("deployment_id", "gpu_uuid", "t_ns"),
    "energy_windows": ("deployment_id", "window_name", "gpu_uuid"),
    "server_metrics": ("deployment_id", "t_ns", "metric", "labels"),
    "searches": ("search_id",),
}
# A /metrics sample's labels as text, the same whatever order they came in ('' for none): server_metrics.labels_key,
# which ingest writes beside the MAP (a MAP cannot be an index key) and the table's CHECK holds equal to it
# (sql/schema.sql spells the same expression). The key is a stored column, not an index on this expression: DuckDB
# 2.0.1 evaluates an index's expression when its checkpoint on close moves rows, after the connection that bound it
# is gone, and list_sort then reads freed memory (SIGSEGV on re-ingest; docs/RELIABILITY.md section 11).
LABELS_KEY = "coalesce(list_sort(map_entries({col}))::VARCHAR, '')"
# Unique indexes of the tables the schema gives no primary key: on plain columns only (see LABELS_KEY).
UNIQUE_INDEXES = {
    "gpu_samples_key": ("gpu_samples", "run_id, deployment_id, gpu_uuid, t_ns"),
    "server_metrics_key": ("server_metrics", "run_id, deployment_id, t_ns, metric, labels_key"),
    "validation_results_key": ("validation_results", "run_id, check_name, table_name, expectation"),
}


class _NotFinite(ValueError):
    pass


def _reject_constant(name: str) -> float:
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _nonfinite_paths(value: Any, path: str) -> list[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nonfinite_paths(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nonfinite_paths(v, f"{path}[{i}]")]
    return []


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _range_problem(value: Any, bounds: tuple[float | None, float | None]) -> str | None:
    lo, hi = bounds
    if not _number(value):
        return None  # a wrong type is DuckDB's to name (expected values of the types in sql/schema.sql)
    if lo is not None and value < lo:
        return f"expected >= {lo:g}"
    if hi is not None and value > hi:
        return f"expected <= {hi:g}"
    return None


def _key(row: dict[str, Any], columns: tuple[str, ...]) -> tuple | None:
    out = []
    for c in columns:
        v = row.get(c)
        if isinstance(v, dict):
            v = tuple(sorted((str(k), str(x)) for k, x in v.items()))
        elif isinstance(v, list):
            v = tuple(map(str, v))
        out.append(v)
    return tuple(out)


def _type_problem(column: str, value: Any) -> str | None:
    """A value that must be a number and is not one, or is not finite (rows of imports: JSON parsing refused NaN
    already for bundles)."""
    if value is None:
        return None
    if not _number(value):
        kind = "a string" if isinstance(value, str) else f"a JSON {type(value).__name__}"
        return f"{column} = {value!r} ({kind}); expected a number, or null where not measured"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{column} = {value}; expected a finite number, or null where not measured"
    return None


def row_problem(
    table: str, row: dict[str, Any], allowed: set[str] | None = None, types: dict[str, str] | None = None
) -> str | None:
    """What is wrong with one row of a table (None when it is well-formed): unknown columns (with `allowed`), a value
    of a numeric column that is not a finite number (with `types`: the table's SQL types), a value out of its range,
    a window that ends before it starts, token times that go backwards. The message names the field and the value."""
    if allowed is not None:
        unknown = set(row) - allowed
        if unknown:
            names = ", ".join(sorted(unknown))
            return f"unknown column(s) {names}; expected columns of table {table} in sql/schema.sql"
    numeric = numeric_columns(types or {})
    ranged = [c for c in RANGES.get(table, {}) if c in numeric]  # in RANGES' order: what was measured first
    for column in ranged + [c for c in numeric if c not in ranged]:
        is_list, value = numeric[column], row.get(column)
        if is_list and isinstance(value, list):
            for i, v in enumerate(value):
                problem = _type_problem(f"{column}[{i}]", v)
                if problem:
                    return problem
        elif is_list and value is not None:
            return f"{column} = {value!r}; expected a list of numbers"
        elif not is_list:
            problem = _type_problem(column, value)
            if problem:
                return problem
    for column, bounds in RANGES.get(table, {}).items():
        problem = _range_problem(row.get(column), bounds)
        if problem:
            return f"{column} = {row[column]!r}; {problem}"
    for column, bounds in LIST_RANGES.get(table, {}).items():
        values = row.get(column)
        if isinstance(values, list):
            for i, v in enumerate(values):
                problem = _range_problem(v, bounds)
                if problem:
                    return f"{column}[{i}] = {v!r}; {problem}"
    for start, end in ORDERED.get(table, []):
        a, b = row.get(start), row.get(end)
        if _number(a) and _number(b) and b < a:
            return f"{end} = {b} is before {start} = {a}; expected a window that ends after it starts"
    for column in LIST_ORDERED.get(table, ()):
        values = row.get(column)
        if isinstance(values, list):
            for i in range(1, len(values)):
                a, b = values[i - 1], values[i]
                if _number(a) and _number(b) and b < a:
                    return (
                        f"{column}[{i}] = {b} is before {column}[{i - 1}] = {a}; expected token times that never go "
                        "backwards (a negative inter-token gap)"
                    )
    return _token_problem(row) if table == "requests" else None


def _token_problem(row: dict[str, Any]) -> str | None:
    """A request's token times and counts against the row's own figures (wattbench/token_pass.py checks the same of
    times in a bundle's chunk files): every time within the request's span, from its send (and >= 0: times that
    never go backwards from there have gaps that cannot wrap) to its last token, and, for a request that succeeded,
    its events' tokens summing to its completion_tokens (a failed one keeps what arrived; error_kind says why)."""
    times, counts = row.get("chunk_ns"), row.get("chunk_tokens")
    if isinstance(times, list) and times and all(_number(t) for t in times):
        sent, last = row.get("sent_ns"), row.get("last_token_ns")
        lo = max(sent, 0) if _number(sent) else 0
        for i, t in enumerate(times):
            if t < lo or (_number(last) and t > last):
                return (
                    f"chunk_ns[{i}] = {t} is outside the request's own span (sent_ns = {sent}, last_token_ns = {last})"
                    "; expected token times from its send (and >= 0) to its last token"
                )
    tokens = row.get("completion_tokens")
    if (
        row.get("error_kind") is None
        and _number(tokens)
        and isinstance(times, list)
        and times
        and isinstance(counts, list)
        and counts
        and all(_number(c) for c in counts)
        and sum(counts) != tokens
    ):
        return (
            f"chunk_tokens sum to {sum(counts)}, while completion_tokens = {tokens}; expected the tokens of its events "
            "to sum to its completion_tokens (a request that failed, error_kind set, keeps what arrived)"
        )
    return None


def check_table_file(path: Path, table: str, allowed: set[str], types: dict[str, str] | None = None) -> int:
    """Every line of one table file; returns the number of rows. BundleError naming the first problem (and how many
    lines have one) otherwise. `types`: the table's SQL types (numeric columns must hold JSON numbers)."""
    if path.name.endswith((".csv", ".csv.gz")):
        return check_csv_file(path, table, allowed, types or {})
    regular_file(path, f"a JSON-lines file of table {table}")
    key_columns = NATURAL_KEYS.get(table)
    hashes: array = array("Q")  # 8 bytes a row: a file of millions of samples stays small in memory
    lines: array = array("Q")
    first: str | None = None
    problems = rows = 0
    with _open(path) as fh:
        lineno = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                problems += 1
                first = first or (
                    f"{path}:{lineno}: line longer than {MAX_LINE_BYTES >> 20} MiB; expected one JSON row per line"
                )
                break  # where the next line starts is unknown
            if not raw.strip():
                continue
            row, problem = _parse(raw)
            if problem is None:
                problem = row_problem(table, row, allowed, types)
            if problem:
                problems += 1
                first = first or f"{path}:{lineno}: {problem}"
                continue
            rows += 1
            if key_columns:
                hashes.append(hash(_key(row, key_columns)) & 0xFFFFFFFFFFFFFFFF)
                lines.append(lineno)
    if first is None and key_columns and len(hashes) > 1:
        first = _first_duplicate(path, key_columns, hashes, lines)
        problems += first is not None
    if first:
        more = f" ({problems} line(s) of this file have a problem)" if problems > 1 else ""
        raise BundleError(f"{first}{more}; nothing was loaded")
    return rows


def csv_header(path: Path, table: str, allowed: set[str]) -> list[str]:
    """The columns a CSV table file's header names ([] for an empty file); BundleError naming line 1 where one is not
    a column of the table, or is named twice."""
    import csv

    with _open_text(path) as fh:
        header = next(csv.reader(fh), None)
    if header is None:
        return []
    unknown = sorted({c for c in header if c not in allowed})
    twice = sorted({c for c in header if header.count(c) > 1})
    if unknown or twice:
        what = f"unknown column(s) {', '.join(unknown)}" if unknown else f"column(s) named twice: {', '.join(twice)}"
        raise BundleError(
            f"{path}:1: {what}; expected a header of columns of table {table} in sql/schema.sql; nothing was loaded"
        )
    return header


_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")


def _csv_value(column: str, text: str, sql_type: str) -> tuple[Any, str | None]:
    """A CSV field as the value DuckDB reads for its column's type, or what is wrong with it (the field, its value and
    what was expected)."""
    if text == "":
        return None, None
    base = sql_type[:-2] if sql_type.endswith("[]") else sql_type
    if sql_type.endswith("[]") or sql_type == "JSON" or sql_type.startswith(("MAP", "STRUCT")):
        try:
            return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float), None
        except _NotFinite:
            return None, f"{column} = {text!r}; expected finite numbers, or null where not measured"
        except ValueError:
            if base == "VARCHAR" or sql_type == "JSON":
                return text, None
            return None, f"{column} = {text!r}; expected a list as JSON text ([1, 2, ...])"
    if base in _INTEGER_TYPES:
        try:
            return int(text), None
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                value = None
            if value is not None and math.isfinite(value) and value == int(value):
                return int(value), None
            return None, f"{column} = {text!r}; expected an integer ({sql_type}), or an empty field where not measured"
    if base in ("DOUBLE", "FLOAT", "REAL") or base.startswith("DECIMAL"):
        try:
            value = float(text)
        except ValueError:
            return None, f"{column} = {text!r}; expected a number, or an empty field where not measured"
        if not math.isfinite(value):
            return None, f"{column} = {text}; expected a finite number, or an empty field where not measured"
        return value, None
    if base == "BOOLEAN":
        if text.lower() in ("true", "false"):
            return text.lower() == "true", None
        return None, f"{column} = {text!r}; expected true or false"
    return text, None


def check_csv_file(path: Path, table: str, allowed: set[str], types: dict[str, str]) -> int:
    """check_table_file for a CSV table file (version 3): every record's fields as its columns' types, then the same
    rules (row_problem) and the same natural keys; BundleError naming the first problem's line (where its record
    starts), field and value."""
    import csv

    regular_file(path, f"a CSV file of table {table}")
    header = csv_header(path, table, allowed)
    col_types = {**types, "events_at": "BIGINT", "events_n": "BIGINT"}
    key_columns = NATURAL_KEYS.get(table)
    seen: dict[tuple, int] = {}
    first: str | None = None
    problems = rows = 0
    with _open_text(path) as fh:
        reader = csv.reader(fh, strict=True)
        next(reader, None)
        line = reader.line_num + 1
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                problems += 1
                first = first or f"{path}:{line}: not valid CSV ({exc}); expected one row per record"
                break
            problem = None
            if len(fields) != len(header):
                problem = f"{len(fields)} fields; expected {len(header)}, one for each column of the header"
            row: dict[str, Any] = {}
            if problem is None:
                for column, text in zip(header, fields):
                    row[column], problem = _csv_value(column, text, col_types.get(column, "VARCHAR"))
                    if problem:
                        break
            if problem is None:
                problem = row_problem(table, {k: v for k, v in row.items() if v is not None}, allowed, None)
            if problem:
                problems += 1
                first = first or f"{path}:{line}: {problem}"
            else:
                rows += 1
                if key_columns and first is None:
                    key = _key(row, key_columns)
                    if key in seen:
                        first = (
                            f"{path}:{line}: the same row as line {seen[key]} ({', '.join(key_columns)} = "
                            f"{', '.join(map(str, key))}); expected each row once"
                        )
                        problems += 1
                    else:
                        seen[key] = line
            line = reader.line_num + 1
    if first:
        more = f" ({problems} line(s) of this file have a problem)" if problems > 1 else ""
        raise BundleError(f"{first}{more}; nothing was loaded")
    return rows


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return open(path, newline="", encoding="utf-8")


def _parse(raw: bytes) -> tuple[Any, str | None]:
    """One line as a JSON object, or what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); expected UTF-8 JSON"
    try:
        row = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NotFinite:
        where = ", ".join(p.split(".", 1)[-1] for p in _nonfinite_paths(json.loads(text), "row")) or "a value"
        return None, (
            f"{where} is not a finite number (NaN or Infinity); expected a finite number, or null where not measured"
        )
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at column {exc.colno}); expected one JSON row per line"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}; expected a JSON object (one row)"
    return row, None


def _first_duplicate(path: Path, key_columns: tuple[str, ...], hashes: array, lines: array) -> str | None:
    """The first line whose natural key an earlier line has, named with that line (hash hits are confirmed)."""
    import numpy as np

    h = np.frombuffer(hashes, dtype=np.uint64)
    sorted_h = np.sort(h)
    suspects = set(sorted_h[1:][sorted_h[1:] == sorted_h[:-1]].tolist())
    if not suspects:
        return None
    wanted = {int(n) for n, v in zip(lines, hashes) if v in suspects}
    keys: dict[tuple, int] = {}
    with _open(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno not in wanted:
                continue
            key = _key(json.loads(raw), key_columns)
            if key in keys:
                return (
                    f"{path}:{lineno}: the same row as line {keys[key]} ({', '.join(key_columns)} = "
                    f"{', '.join(map(str, key))}); expected each row once"
                )
            keys[key] = lineno
    return None


def _open(path: Path):
    if path.name.endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")


def _double(sql_type: str) -> bool:
    return sql_type in ("DOUBLE", "FLOAT", "REAL")


def suspect_rows(table: str, columns: dict[str, str]) -> str:
    """A SQL condition true for a row any rule here would refuse (non-finite, out of range, a window that ends
    before it starts). Over JSON columns it is wider than the rules (a string that spells Infinity): a hit only
    sends the file to `check_table_file`, which decides."""
    terms = []
    for c, t in columns.items():
        if _double(t):
            terms.append(f"NOT isfinite({c})")
        elif t in ("DOUBLE[]", "FLOAT[]"):
            terms.append(f"list_bool_or(list_transform({c}, lambda v: NOT isfinite(v)))")
        elif t == "JSON":
            terms.append(f"regexp_matches({c}::VARCHAR, '(?i)(^|[^a-z])(nan|inf)')")
    for c, (lo, hi) in RANGES.get(table, {}).items():
        if c not in columns:
            continue
        if lo is not None:
            terms.append(f"{c} < {lo!r}")
        if hi is not None:
            terms.append(f"{c} > {hi!r}")
    for c, (lo, hi) in LIST_RANGES.get(table, {}).items():
        if c not in columns:
            continue
        if lo is not None:
            terms.append(f"list_min({c}) < {lo!r}")
        if hi is not None:
            terms.append(f"list_max({c}) > {hi!r}")
    for start, end in ORDERED.get(table, []):
        terms.append(f"{end} < {start}")
    for c in LIST_ORDERED.get(table, ()):
        if c in columns:
            terms.append(f"list_bool_or(list_transform(range(1, len({c})), lambda i: {c}[i + 1] < {c}[i]))")
    if table == "requests" and {"chunk_ns", "sent_ns", "last_token_ns", "completion_tokens"} <= set(columns):
        terms += _TOKEN_TERMS  # _token_problem, in SQL (a uniform count is kept as chunk_tokens_each)
    return " OR ".join(f"coalesce({t}, false)" for t in terms) or "false"


_TOKEN_TERMS = [
    "list_min(chunk_ns) < greatest(coalesce(sent_ns, 0), 0)",
    "list_max(chunk_ns) > last_token_ns",
    "error_kind IS NULL AND len(chunk_ns) > 0 AND coalesce(list_sum(chunk_tokens), "
    "chunk_tokens_each::BIGINT * len(chunk_ns)) <> completion_tokens",
]


_JSON_NUMBER = "'BIGINT', 'UBIGINT', 'DOUBLE'"


def scan_lines(
    con, path: Path, allowed: set[str], ids: tuple[str, ...] = (), numeric: dict[str, bool] | None = None
) -> tuple[bool, dict[str, list]]:
    """One pass of DuckDB over a table file: whether a line names a column the table does not have (DuckDB reads a
    file with named columns and would drop an unknown one silently), is JSON null (which it would read as a row of
    NULLs), or holds something else than a JSON number in a numeric column (`numeric`: {column: is_list}; DuckDB
    would convert a quoted "5", "NaN" or "Infinity"), and the distinct values of the `ids` columns (what rows of the
    warehouse the file replaces). A line that is another non-object (an array, a number, a string) is refused by that
    read itself."""
    known = "[" + ", ".join("'" + c.replace("'", "''") + "'" for c in sorted(allowed)) + "]"
    distinct = "".join(f", list(DISTINCT json->>'{c}') FILTER (WHERE json->>'{c}' IS NOT NULL)" for c in ids)
    typed, scalars = [], []
    for c, is_list in (numeric or {}).items():
        if c not in allowed:
            continue
        key = '"' + c.replace("'", "''") + '"'
        if is_list:
            typed.append(
                f"json_type(json, '$.{key}') NOT IN ('ARRAY', 'NULL') OR list_bool_or(list_transform("
                f"json_extract(json, '$.{key}[*]'), lambda x: json_type(x) NOT IN ({_JSON_NUMBER})))"
            )
        else:
            scalars.append(f"'$.{key}'")
    if scalars:  # one parse of the line for every scalar column (a parse per column held ~1 GB for 37 MB of requests)
        typed.append(
            f"list_bool_or(list_transform(json_type(json, [{', '.join(scalars)}]), "
            f"lambda t: coalesce(t NOT IN ({_JSON_NUMBER}, 'NULL'), false)))"
        )
    wrong_type = " OR ".join(f"coalesce({t}, false)" for t in typed) or "false"
    # json_keys is [] for JSON null (and for {}, which the line-by-line check then lets through, as read_json does)
    row = con.execute(
        f"SELECT count(*) FILTER (WHERE coalesce(NOT list_has_all({known}, keys) OR len(keys) = 0, true) "
        f"OR ({wrong_type})){distinct} FROM (SELECT json, json_keys(json) AS keys "
        "FROM read_json_objects(?, format='newline_delimited'))",
        [str(path)],
    ).fetchone()
    return bool(row[0]), {c: sorted(row[1 + i] or []) for i, c in enumerate(ids)}


def check_bundle_files(files: dict[str, Path], columns: dict[str, dict[str, str]]) -> dict[str, int]:
    """Check every table file of a bundle before anything is loaded; rows per table."""
    return {table: check_table_file(path, table, set(columns[table]), columns[table]) for table, path in files.items()}


def ensure_natural_keys(con) -> int:
    """Unique indexes for the tables without a primary key. A warehouse an older wattbench filled may hold a row
    twice: the copies beyond the first are dropped before the index is made. Returns the rows dropped."""
    import duckdb

    dropped = 0
    for name, (table, key) in UNIQUE_INDEXES.items():
        try:
            con.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {name} ON {table} ({key})")
        except duckdb.ConstraintException:
            before = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            con.execute(f"DELETE FROM {table} WHERE rowid NOT IN (SELECT min(rowid) FROM {table} GROUP BY {key})")
            dropped += before - con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            con.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {name} ON {table} ({key})")
    return dropped


def counts_problem(folder: Path, manifest: dict[str, Any], files: dict[str, Path], found: dict[str, int]) -> str | None:
    """The rows loaded of each table against the rows the manifest counts (`tables`, rewritten by the agent after
    every write): a file with fewer rows lost some (cut at a row boundary, which no other check sees), and a complete
    bundle's file with more has rows the agent did not write. An incomplete bundle's file may be ahead of its manifest
    (rows written just before the agent was killed). Only the tables the manifest counts are held to it (a writer
    before the counts counts none). None when they agree."""
    stated = manifest.get("tables")
    if not isinstance(stated, dict):
        return None
    for table, expected in stated.items():
        rows = found.get(table, 0)
        if rows < expected or (rows > expected and manifest.get("complete")):
            where = files.get(table, folder / f"{table}.*")
            return (
                f"{where}: {rows} row(s) of table {table}, while manifest.json counts {expected} (tables.{table}); "
                "expected the rows the agent wrote (a file cut short, or rows added to it?); nothing was loaded"
            )
    return None


def run_status(manifest: dict[str, Any]) -> str:
    """A run's status from its bundle alone: 'ingested' (complete) or 'incomplete' (the agent stopped early)."""
    return "ingested" if manifest.get("complete") else "incomplete"


def mark_run(con, run_id: str, manifest: dict[str, Any]) -> None:
    """An existing run's row says whether the bundle just loaded was complete (a run Dagster is still running, or
    one already finished, keeps its status unless the bundle is incomplete)."""
    if manifest.get("complete"):
        con.execute("UPDATE runs SET status = 'ingested' WHERE run_id = ? AND status = 'incomplete'", [run_id])
    else:
        con.execute(
            "UPDATE runs SET status = 'incomplete' WHERE run_id = ? AND (status IS NULL OR status IN "
            "('running', 'ingested', 'complete', 'succeeded'))",
            [run_id],
        )


def incomplete_note(folder: Path, manifest: dict[str, Any]) -> str | None:
    """What `wattbench ingest` says about a bundle whose manifest says complete=false (None when complete)."""
    if manifest.get("complete"):
        return None
    errors = "; ".join(f"{e.get('kind')}: {e.get('text')}" for e in manifest.get("errors", []) if isinstance(e, dict))[
        :500
    ]
    return (
        f"{folder}: its manifest says complete=false: the agent stopped before the end"
        + (f" ({errors})" if errors else "")
        + f"; every load point it finished is loaded, and run "
        f"{manifest['run_id']} is marked 'incomplete' (reports say so when they show it)"
    )
