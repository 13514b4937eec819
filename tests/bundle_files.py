"""A bundle's table files as tests read and edit them, whatever format the agent wrote: version 3's CSV tables
(requests.csv, gpu_samples.csv) or JSON lines. Rows are read through the agent's own reader
(wattbench_agent.bundle.read_rows) and written back in the file's own format, so a test that spoils one value of a
bundle says what it spoils, not how a file of one version is laid out."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from wattbench.warehouse import table_files
from wattbench_agent.bundle import csv_field, read_rows


class Raw(str):
    """A field written into the file as it is: a value the agent's writer would refuse (a quoted number, a word where
    a number goes), written as another writer would."""


def table_file(bundle: Path, table: str) -> Path:
    """The file holding `table` in the bundle (<table>.csv or <table>.jsonl)."""
    return table_files(Path(bundle))[table]


def read_table(bundle: Path, table: str) -> list[dict[str, Any]]:
    """Every row of the table, as the agent's reader reads it (a CSV table's empty fields as None); [] where the bundle
    has no file for it."""
    path = table_files(Path(bundle)).get(table)
    return [] if path is None else [row for _, row in read_rows(path)]


def line_of(bundle: Path, table: str, index: int) -> int:
    """The line of the file where row `index` (0-based) begins, as the agent's reader counts them (after a CSV table's
    header, and past the line breaks inside quoted fields of the rows before)."""
    path = table_file(bundle, table)
    if path.suffix != ".csv":
        return index + 1
    with open(path, newline="", encoding="utf-8") as fh:  # the values as text: a spoilt one is still a row
        reader = csv.reader(fh)
        next(reader, None)
        line = reader.line_num + 1
        for i, _ in enumerate(reader):
            if i == index:
                return line
            line = reader.line_num + 1
    raise IndexError(f"{table}: no row {index}")


def write_table(bundle: Path, table: str, rows: list[dict[str, Any]]) -> Path:
    """The table's file rewritten with `rows`, in its own format (a CSV table's header: its columns, then any other key
    a row has, in the order met), and the manifest's count of its rows with it (ingest holds the files to it). A
    non-finite float is written as Python spells it (nan, inf: what another writer might write), a Raw value as it
    is. Returns the file."""
    path = table_file(bundle, table)
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as fh:
            header = fh.readline().rstrip("\r\n").split(",")
        for row in rows:
            header += [k for k in row if k not in header]
        lines = [",".join(header)] + [",".join(_csv(row.get(c)) for c in header) for row in rows]
    else:
        lines = ["{" + ", ".join(f"{json.dumps(k)}: {_json(v)}" for k, v in row.items()) + "}" for row in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    manifest_path = Path(bundle) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if isinstance(manifest.get("tables"), dict):
        manifest["tables"][table] = len(rows)
        manifest_path.write_text(json.dumps(manifest))
    return path


def _csv(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return csv_field(value)


def _json(value: Any) -> str:
    return str(value) if isinstance(value, Raw) else json.dumps(value)


def as_json_lines(bundle: Path) -> Path:
    """The bundle rewritten as a version-2 bundle (every table JSON lines; a request's events in the chunk files named
    by its `chunks`), for the checks of JSON text: the same rows, read through the agent's reader."""
    bundle = Path(bundle)
    for table, path in table_files(bundle).items():
        if path.suffix != ".csv":
            continue
        rows = []
        for row in read_table(bundle, table):
            row = {k: v for k, v in row.items() if v is not None}
            if "events_at" in row:
                row["chunks"] = [row.pop("events_at"), row.pop("events_n")]
            rows.append(row)
        (bundle / f"{table}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        path.unlink()
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "bundle_version": 2}))
    return bundle
