"""Result bundles: what the bench agent writes on the GPU node and `wattbench ingest` loads into DuckDB.

A bundle is a folder holding one JSON-lines file per warehouse table (`<table>.jsonl`, columns as in
sql/schema.sql) and a `manifest.json`. Rows are appended and flushed as they are measured, so an
interrupted run leaves everything measured so far on disk; the manifest is rewritten atomically after
every table flush and says whether the run finished (`complete`).

Version 2: a request's per-token times are not JSON. `chunk_ns` (int64) and `chunk_tokens` (int32) go, little-endian,
to two binary files beside requests.jsonl (CHUNK_FILES), appended in step, and the request's row says where its events
are: `"chunks": [first event, events]` (an index into both files). An hour at 300 req/s is 128 M such values: as JSON
they were 3 GB to write here and to parse at ingest; as binary they are 1.5 GB that numpy reads as it is. A row whose
lists are not that (a missing chunk_tokens, lengths that differ, a non-integer) keeps them inline, as version 1 did.

Version 3: the requests' scalar fields and the GPU samples are CSV (`requests.csv`, `gpu_samples.csv`: CSV_TABLES):
a header naming the columns, then one line a row, every value written by its type (a string always quoted, so that
"" is an empty string and an empty field is null; true/false; numbers as Python writes them; an inline list as JSON
text), which DuckDB reads in parallel with the warehouse's declared types instead of parsing JSON. Where a request's
events are in the chunk files its row says `events_at` (first event) and `events_n` (events).

Stdlib only: this module runs inside engine images next to the agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import socket
import stat
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from wattbench_agent import procs

BUNDLE_VERSION = 3
READS = (1, 2, 3)  # bundle versions this code ingests: 1 has every list inline in requests.jsonl, 2 JSON requests
MANIFEST = "manifest.json"
# Version 2: each request's per-token times, beside requests.jsonl: column -> (file, array typecode, bytes an event).
CHUNK_FILES = {
    "chunk_ns": ("requests.chunk_ns.bin", "q", 8),
    "chunk_tokens": ("requests.chunk_tokens.bin", "i", 4),
}
# Version 3: tables written as CSV, each with its columns (the warehouse's, sql/schema.sql, less what ingest computes)
# and the kind of value each holds (what `read_rows` turns a field back into). tests/test_bundle_v3.py keeps them
# equal to the schema.
CSV_TABLES = {
    "requests": (
        ("run_id", "str"),
        ("source", "str"),
        ("deployment_id", "str"),
        ("load_point_id", "str"),
        ("request_id", "str"),
        ("scheduled_ns", "int"),
        ("sent_ns", "int"),
        ("first_token_ns", "int"),
        ("last_token_ns", "int"),
        ("ttft_ms", "float"),
        ("e2e_ms", "float"),
        ("tpot_ms", "float"),
        ("prompt_tokens", "int"),
        ("completion_tokens", "int"),
        ("token_count_source", "str"),
        ("input_tokens_requested", "int"),
        ("max_tokens", "int"),
        ("finish_reason", "str"),
        ("http_status", "int"),
        ("error_kind", "str"),
        ("error_text", "str"),
        ("chunks_exact", "int"),
        ("in_window", "bool"),
        ("events_at", "int"),  # the request's first event in the chunk files
        ("events_n", "int"),  # its events there
        ("chunk_ns", "list"),  # inline, where the lists could not go to the chunk files
        ("chunk_tokens", "list"),
    ),
    "gpu_samples": (  # telemetry.sources.SAMPLE_COLUMNS and who they are
        ("run_id", "str"),
        ("source", "str"),
        ("deployment_id", "str"),
        ("gpu_uuid", "str"),
        ("gpu_index", "int"),
        ("t_ns", "int"),
        ("power_w", "float"),
        ("power_avg_w", "float"),
        ("energy_mj", "float"),
        ("hbm_used_mib", "float"),
        ("hbm_total_mib", "float"),
        ("util_gpu_pct", "float"),
        ("util_mem_pct", "float"),
        ("sm_clock_mhz", "float"),
        ("mem_clock_mhz", "float"),
        ("temp_c", "float"),
        ("hbm_temp_c", "float"),
        ("power_limit_w", "float"),
        ("clock_event_reasons", "int"),
        ("clock_events", "str"),
    ),
}
# Tables a bundle may carry, in the order ingest loads them.
BUNDLE_TABLES = (
    "engine_builds",
    "deployments",
    "load_runs",
    "requests",
    "gpu_samples",
    "energy_windows",
    "server_metrics",
    "searches",
)


class BundleError(Exception):
    """A bundle on disk is missing, unreadable or not of a version this code reads."""


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class BundleWriter:
    """Append-only writer of one bundle. Thread-safe; every `write` is flushed to disk before it returns."""

    def __init__(
        self, path: str | os.PathLike, run_id: str, source: str, previous: str = "set_aside", **manifest_extra: Any
    ):
        """`previous`: what to do with an earlier attempt of the same run in this folder (a run killed and run
        again): "set_aside" (default) moves it to `attempts/<n>/`, where it stays a loadable bundle, and starts
        afresh, so the folder never holds a row twice; "append" continues it."""
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.source = source
        self._lock = threading.Lock()
        self._files: dict[str, Any] = {}
        self._rows: dict[str, int] = {}
        self._events = 0  # events in the chunk files (version 2), the index the next request's first event gets
        self.set_aside: Path | None = None
        existing = self.path / MANIFEST
        if existing.exists():
            old = read_manifest(self.path)
            if old.get("run_id") != run_id:
                raise BundleError(
                    f"{self.path}: holds run {old.get('run_id')!r}, refusing to mix in run {run_id!r}; "
                    "use an empty folder"
                )
            if previous == "append":
                self._rows = dict(old.get("tables", {}))
                self._events = self._chunk_events_on_disk()
            else:
                self.set_aside = set_aside_attempt(self.path)
        self.manifest: dict[str, Any] = {
            "bundle_version": BUNDLE_VERSION,
            "run_id": run_id,
            "source": source,
            "host": socket.gethostname(),
            "created_unix_ns": time.time_ns(),
            "clock_anchor_mono_ns": time.perf_counter_ns(),
            "clock_anchor_unix_ns": time.time_ns(),
            "complete": False,
            "errors": [],
            # the writing process (the agent), for the reaper of a run whose process is gone (wattbench_agent.procs)
            "processes": {"agent": procs.identity()},
            **manifest_extra,
        }
        if self.set_aside is not None:
            self.manifest["earlier_attempt"] = str(self.set_aside)
        # an earlier attempt continued ("append") keeps the layout it was written in: JSON tables, version 2
        self._csv = not any((self.path / f"{t}.jsonl").exists() for t in CSV_TABLES)
        if not self._csv:
            self.manifest["bundle_version"] = 2
        self._write_manifest()

    def write(self, table: str, rows: Iterable[dict[str, Any]]) -> int:
        """Append rows to a table file; run_id and source are filled in where absent."""
        if table not in BUNDLE_TABLES:
            raise BundleError(f"unknown bundle table {table!r}; expected one of {', '.join(BUNDLE_TABLES)}")
        lines = []
        chunks: dict[str, array] = {c: array(code) for c, (_, code, _) in CHUNK_FILES.items()}
        refs = 0  # rows whose events went to the chunk files (their files exist even when all are empty)
        csv_columns = CSV_TABLES.get(table) if self._csv else None
        name = f"{table}.csv" if csv_columns else f"{table}.jsonl"
        for row in rows:
            row = dict(row)
            row.setdefault("run_id", self.run_id)
            row.setdefault("source", self.source)
            if table == "requests":
                refs += self._chunk_ref(row, chunks)
            try:
                if csv_columns:
                    lines.append(csv_line(row, csv_columns))
                else:
                    lines.append(json.dumps(row, default=_json_default, allow_nan=False) + "\n")
            except ValueError as exc:
                bad = sorted(k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v))
                if csv_columns and not bad:
                    raise BundleError(f"{self.path / name}: row {len(lines) + 1} of this write: {exc}") from None
                raise BundleError(
                    f"{self.path / name}: row {len(lines) + 1} of this write has NaN/Inf in "
                    f"{', '.join(bad) or 'a nested value'}; expected a finite number, or null where not measured"
                ) from None
        if not lines:
            return 0
        data = "".join(lines).encode("utf-8")
        with self._lock:
            if csv_columns and not self._rows.get(table) and not (self.path / name).exists():
                data = (",".join(c for c, _ in csv_columns) + "\n").encode() + data  # the header, once
            # the events first, then the rows that point at them: a row on disk always has its events
            parts = [(CHUNK_FILES[c][0], _little_endian(a)) for c, a in chunks.items() if refs]
            parts.append((name, data))
            handles = []
            for name, _ in parts:
                fh = self._files.get(name)
                if fh is None:
                    fh = open(self.path / name, "ab")
                    self._files[name] = fh
                handles.append((fh, fh.tell()))
            try:
                for (fh, _), (_, payload) in zip(handles, parts):
                    fh.write(payload)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                # Disk full (or gone): cut the files back to their last whole row so what is on disk stays loadable.
                for fh, offset in handles:
                    try:
                        fh.truncate(offset)
                        fh.seek(offset)
                    except OSError:
                        pass
                raise BundleError(
                    f"{self.path / name}: could not write {len(lines)} row(s) ({exc.strerror or exc}); "
                    f"the {self._rows.get(table, 0)} row(s) already written are intact and can be ingested"
                ) from exc
            self._rows[table] = self._rows.get(table, 0) + len(lines)
            self._events += len(chunks["chunk_ns"])
            try:
                self._write_manifest()
            except OSError:
                pass  # the previous manifest stays in place (atomic replace); rows are counted on the next write
        return len(lines)

    def _chunk_ref(self, row: dict[str, Any], chunks: dict[str, array]) -> bool:
        """Move a request's chunk_ns / chunk_tokens into this write's chunk arrays and leave `chunks` in the row (the
        lists stay inline when they are not two lists of integers of one length). Whether they moved."""
        ns, tokens = row.get("chunk_ns"), row.get("chunk_tokens")
        if not (isinstance(ns, list) and isinstance(tokens, list) and len(ns) == len(tokens)):
            return False
        at = self._events + len(chunks["chunk_ns"])
        try:
            a, b = array("q", ns), array("i", tokens)
        except (TypeError, OverflowError):
            return False  # a float, None, a string, a number too large: inline, where ingest names it as in version 1
        chunks["chunk_ns"].extend(a)
        chunks["chunk_tokens"].extend(b)
        del row["chunk_ns"], row["chunk_tokens"]
        if self._csv:
            row["events_at"], row["events_n"] = at, len(ns)
        else:
            row["chunks"] = [at, len(ns)]
        return True

    def _chunk_events_on_disk(self) -> int:
        """Events in this folder's chunk files (an appended bundle continues them); files cut short by a crash
        between the two writes are cut back to the events both hold."""
        sizes = [
            (self.path / name, (self.path / name).stat().st_size // width if (self.path / name).exists() else 0, width)
            for name, _, width in CHUNK_FILES.values()
        ]
        events = min(n for _, n, _ in sizes)
        for path, _, width in sizes:
            if path.exists() and path.stat().st_size != events * width:
                os.truncate(path, events * width)
        return events

    def note_error(self, kind: str, text: str) -> None:
        with self._lock:
            self.manifest["errors"].append({"kind": kind, "text": text, "unix_ns": time.time_ns()})
            self._write_manifest()

    def update_manifest(self, **fields: Any) -> None:
        with self._lock:
            self.manifest.update(fields)
            self._write_manifest()

    def close(self, complete: bool = True) -> None:
        with self._lock:
            for fh in self._files.values():
                fh.close()
            self._files.clear()
            self.manifest["complete"] = complete
            self.manifest["closed_unix_ns"] = time.time_ns()
            try:
                self._write_manifest()
            except OSError:
                pass  # disk full: the last manifest written stays, and says complete=false

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            self.manifest["errors"].append({"kind": type(exc).__name__, "text": str(exc), "unix_ns": time.time_ns()})
        self.close(complete=exc is None)

    def _write_manifest(self) -> None:
        self.manifest["tables"] = dict(self._rows)
        tmp = self.path / (MANIFEST + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.manifest, fh, indent=2, default=_json_default)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path / MANIFEST)


def csv_field(value: Any) -> str:
    """One value as a version-3 CSV field: null empty, a string always quoted (its quotes doubled), true/false, a
    number as Python writes it (finite only), a list or object as JSON text (quoted)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # numpy's float64 too (a float subclass whose repr is np.float64(...) in numpy 2)
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number")
        return float.__repr__(value)
    if isinstance(value, str):
        return '"' + value.replace('"', '""') + '"'
    if hasattr(value, "item"):  # numpy scalars
        return csv_field(value.item())
    text = json.dumps(value, default=_json_default, allow_nan=False)
    return '"' + text.replace('"', '""') + '"'


def csv_line(row: dict[str, Any], columns: tuple[tuple[str, str], ...]) -> str:
    """A row as a line of a version-3 CSV table file (its columns in the header's order). A key the table's CSV
    columns do not have is an error (ValueError): the row would lose it."""
    names = {c for c, _ in columns}
    unknown = [k for k in row if k not in names]
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(sorted(unknown))}; expected some of {', '.join(sorted(names))}")
    return ",".join(csv_field(row.get(c)) for c, _ in columns) + "\n"


def _csv_value(text: str, kind: str) -> Any:
    if text == "":
        return None
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            return float(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text.lower() == "true"
    if kind == "list":
        return json.loads(text)
    return text


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, row) of a table file: JSON lines (`<table>.jsonl`), or a version-3 CSV table (`<table>.csv`, its values
    turned back into their kinds; an empty string reads as null). BundleError naming the line where one is not a
    row."""
    import csv
    import gzip

    def text(path: Path):
        if path.name.endswith(".gz"):
            return gzip.open(path, "rt", newline="", encoding="utf-8")
        return open(path, newline="", encoding="utf-8")

    if path.name.endswith((".csv", ".csv.gz")):
        kinds = {c: k for cols in CSV_TABLES.values() for c, k in cols}
        with text(path) as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                return
            line = reader.line_num + 1
            for fields in reader:
                if len(fields) != len(header):
                    raise BundleError(f"{path}:{line}: {len(fields)} fields; expected {len(header)} (the header's)")
                yield line, {c: _csv_value(v, kinds.get(c, "str")) for c, v in zip(header, fields)}
                line = reader.line_num + 1
        return
    with text(path) as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError as exc:
                raise BundleError(f"{path}:{number}: not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise BundleError(f"{path}:{number}: a JSON {type(row).__name__}; expected a JSON object (one row)")
            yield number, row


def _little_endian(values: array) -> bytes:
    if sys.byteorder == "big":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def set_aside_attempt(path: str | os.PathLike) -> Path | None:
    """Move a bundle's files (manifest, tables, chunk files, logs) into `attempts/<n>/` inside it; returns that
    folder."""
    folder = Path(path)
    chunk_names = {name for name, _, _ in CHUNK_FILES.values()}
    names = [
        p
        for p in folder.iterdir()
        if p.name == MANIFEST or p.suffix in (".jsonl", ".csv") or p.name in chunk_names or p.name == "logs"
    ]
    if not names:
        return None
    attempts = folder / "attempts"
    attempts.mkdir(exist_ok=True)
    n = 1 + max((int(p.name) for p in attempts.iterdir() if p.name.isdigit()), default=0)
    dest = attempts / str(n)
    dest.mkdir()
    for p in names:
        os.replace(p, dest / p.name)
    return dest


MAX_MANIFEST_BYTES = 1 << 20  # a manifest is a few KiB; more is not a manifest


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words (for messages)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def regular_file(path: Path, what: str) -> os.stat_result:
    """The stat of `path` (links followed) if it is a regular file; BundleError otherwise. Reading a FIFO would wait
    forever and a device like /dev/zero would never end."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise BundleError(f"{path}: missing; expected {what}") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot be read ({exc.strerror or exc}); expected {what}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"{path}: not a regular file ({file_kind(st.st_mode)}); expected {what}")
    return st


def open_regular(path: Path, what: str, max_bytes: int):
    """`path` opened for reading (binary) if it is a regular file of at most `max_bytes`; BundleError naming what it is
    otherwise. Opened without waiting (a FIFO opens at once, and is refused) and checked on the descriptor read, so the
    path cannot be swapped between the check and the read; a reader that must stay within the bound reads at most
    max_bytes + 1 (read_regular)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BundleError(f"{path}: missing; expected {what}") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: not a regular file (a directory); expected {what}") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot be read ({exc.strerror or exc}); expected {what}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path}: not a regular file ({file_kind(st.st_mode)}); expected {what}")
        if st.st_size > max_bytes:
            raise BundleError(f"{path}: {st.st_size:,} bytes; expected {what} of at most {max_bytes:,} bytes")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (open_regular); one that grew past it is refused too."""
    with open_regular(path, what, max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BundleError(f"{path}: over {max_bytes:,} bytes; expected {what} of at most {max_bytes:,} bytes")
    return data


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    folder = Path(path)
    manifest_path = folder / MANIFEST
    if not manifest_path.exists() and not manifest_path.is_symlink():
        raise BundleError(f"{folder}: no {MANIFEST}; expected a wattbench result bundle folder")
    st = regular_file(manifest_path, "the bundle's JSON manifest")
    if st.st_size > MAX_MANIFEST_BYTES:
        raise BundleError(
            f"{manifest_path}: {st.st_size} bytes; expected a JSON manifest of at most {MAX_MANIFEST_BYTES >> 10} KiB"
        )
    raw = manifest_path.read_bytes()[: MAX_MANIFEST_BYTES + 1]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(
            f"{manifest_path}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); expected a JSON manifest"
        ) from None
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{manifest_path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(manifest, dict):
        raise BundleError(
            f"{manifest_path}: a JSON {type(manifest).__name__}; expected a JSON object of manifest "
            "fields (bundle_version, run_id, source, complete, ...)"
        )
    version = manifest.get("bundle_version")
    if version not in READS or not isinstance(version, int) or isinstance(version, bool):
        raise BundleError(
            f"{manifest_path}: bundle_version {manifest.get('bundle_version')!r}; this wattbench reads "
            + " and ".join(map(str, READS))
            + (" (upgrade wattbench)" if isinstance(version, int) and not isinstance(version, bool) else "")
        )
    for key in ("run_id", "source"):
        if not manifest.get(key) or not isinstance(manifest[key], str):
            raise BundleError(
                f"{manifest_path}: field {key!r} is {manifest.get(key)!r:.80}; expected a non-empty string"
            )
    if not isinstance(manifest.get("complete", False), bool):
        raise BundleError(f"{manifest_path}: field 'complete' is {manifest['complete']!r:.80}; expected true or false")
    if not isinstance(manifest.get("errors", []), list):
        raise BundleError(f"{manifest_path}: field 'errors' is {manifest['errors']!r:.80}; expected a list")
    tables = manifest.get("tables", {})  # rows per table: ingest holds the files to them
    if not isinstance(tables, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**63 for n in tables.values()
    ):
        raise BundleError(
            f"{manifest_path}: field 'tables' is {tables!r:.80}; expected an object of table names and their rows "
            "(integers >= 0)"
        )
    # the fields ingest stores (runs.host, runs.clock_anchor_*): of their types, or absent
    host = manifest.get("host")
    if host is not None and not isinstance(host, str):
        raise BundleError(f"{manifest_path}: field 'host' is {host!r:.80}; expected a string (the host's name)")
    for key in ("clock_anchor_mono_ns", "clock_anchor_unix_ns", "created_unix_ns", "closed_unix_ns"):
        value = manifest.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63):
            raise BundleError(
                f"{manifest_path}: field {key!r} is {value!r:.80}; expected an integer count of nanoseconds, "
                "0 to 2^63 - 1"
            )
    return manifest


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")
GiB = 1024**3


@dataclasses.dataclass(frozen=True)
class ArchiveLimits:
    """What an archive may unpack to. The defaults hold a one-hour, 1M-request bundle with room to spare (about
    4 GB with per-token times inline, version 1; xz packs real bundles 8-30 to 1) and refuse a bomb early: the
    limits are checked on each member's header, before its bytes are written. `wattbench ingest --max-unpacked-gb
    / --max-members / --max-ratio` raise them."""

    max_bytes: int = 16 * GiB  # unpacked, all members
    max_members: int = 10_000
    max_ratio: float = 200.0  # unpacked bytes per archive byte ...
    ratio_floor_bytes: int = 256 * 1024**2  # ... once more than this is unpacked (a small bundle may pack tighter)

    def check(self, path: Path, archive_bytes: int, members: int, unpacked_bytes: int, name: str) -> None:
        def refuse(what: str, flag: str) -> None:
            raise BundleError(
                f"{path}: refused at member {members} ({name[:120]}): {what}; nothing was loaded (if the archive is "
                f"genuine, raise the limit: wattbench ingest {flag})"
            )

        if members > self.max_members:
            refuse(f"more than {self.max_members:,} members (a bundle has a few dozen files)", "--max-members N")
        if unpacked_bytes > self.max_bytes:
            gib = self.max_bytes / GiB
            refuse(
                f"it would unpack to more than {gib:.4g} GiB (a one-hour, 1M-request bundle is about 4 GB)",
                f"--max-unpacked-gb {2 * gib:.4g}",
            )
        if unpacked_bytes > max(self.ratio_floor_bytes, self.max_ratio * archive_bytes):
            refuse(
                f"its {archive_bytes:,} bytes would unpack to at least {unpacked_bytes:,} "
                f"({unpacked_bytes / archive_bytes:,.0f} to 1, over the limit of {self.max_ratio:g}; real bundles "
                "pack 8-30 to 1): an archive bomb?",
                f"--max-ratio {2 * self.max_ratio:g}",
            )


def _checked_members(tar: Any, path: Path, limits: ArchiveLimits) -> Iterator[Any]:
    """The archive's members, read one header at a time; refused (BundleError) as soon as one would cross a limit,
    before its bytes are unpacked."""
    archive_bytes = max(path.stat().st_size, 1)
    total = 0
    for n, member in enumerate(tar, start=1):
        if member.issparse():
            raise BundleError(f"{path}: member {member.name[:120]} is a sparse file; expected plain files")
        total += max(member.size, 0) if member.isfile() else 0
        limits.check(path, archive_bytes, n, total, member.name)
        yield member


@contextlib.contextmanager
def unpacked(path: str | os.PathLike, limits: ArchiveLimits | None = None) -> Iterator[Path]:
    """A bundle folder for `path`: the folder itself, or an archive of one (a .tar.xz as results/ keeps them)
    unpacked into a temporary folder for as long as the block runs. The archive must hold exactly one bundle
    (one manifest.json); members outside it (absolute paths, '..') are refused, and so is an archive that would
    unpack beyond `limits` (ArchiveLimits: total size, member count, compression ratio), before it does. A
    truncated or corrupt archive is one BundleError naming it."""
    import lzma
    import tarfile
    import tempfile
    import zlib

    path = Path(path)
    if not (path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)):
        yield path
        return
    limits = limits or ArchiveLimits()
    with tempfile.TemporaryDirectory(prefix="wattbench-bundle-") as tmp:
        try:
            with tarfile.open(path, "r|*") as tar:  # a stream: each header is checked before its member is written
                tar.extractall(tmp, members=_checked_members(tar, path, limits), filter="data")
        except (EOFError, tarfile.ReadError) as exc:
            if not isinstance(exc, EOFError) and "unexpected end of data" not in str(exc):
                raise BundleError(
                    f"{path}: not a readable bundle archive ({type(exc).__name__}: {exc}); expected a tar archive "
                    "of a bundle folder"
                ) from None
            raise BundleError(
                f"{path}: the archive is cut short (its compressed stream ends before its end marker: a copy or "
                "download that did not finish?); expected a whole tar archive of a bundle folder"
            ) from None
        except (tarfile.TarError, OSError, zlib.error, lzma.LZMAError) as exc:
            raise BundleError(
                f"{path}: not a readable bundle archive ({type(exc).__name__}: {exc}); expected a tar archive of a "
                "bundle folder"
            ) from None
        manifests = sorted(Path(tmp).rglob(MANIFEST))
        manifests = [m for m in manifests if "attempts" not in m.relative_to(tmp).parts]
        if len(manifests) != 1:
            raise BundleError(f"{path}: holds {len(manifests)} bundles (manifest.json files); expected one")
        yield manifests[0].parent
