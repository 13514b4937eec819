"""A bundle's per-token times in its two binary chunk files (version 2 and 3), from staging to the warehouse.

The agent (wattbench_agent.bundle, CHUNK_FILES) appends each request's `chunk_ns` (int64) and `chunk_tokens` (int32),
little-endian, to `requests.chunk_ns.bin` / `requests.chunk_tokens.bin`, and its row says where its events are:
`"chunks": [first event, events]` in requests.jsonl (version 2), `events_at`, `events_n` in requests.csv (version 3).
At ingest (wattbench/warehouse.py):
- DuckDB reads the requests file into a staging table, `_rq` (read_csv with the warehouse's types, or read_json);
- the times file is copied into the warehouse's token store in a thread (wattbench/token_store.Copy: hashed while
  copied, stored under its SHA-256), never parsed into lists;
- `run_pass` memory-maps both files once and runs the compiled pass (wattbench/token_pass.py) load point by load
  point over the staged references, in a thread beside DuckDB's loading of the other tables: the checks (times that go
  backwards, negative counts: the file, the line of the row and the reason), each request's one token count, and every
  per-point token figure (point_stats' and the step decomposition); references may come in any order (a file is
  mapped, not read per request);
- `load` inserts the staged rows into requests with their references (events_file, events_at, events_n; counts_file
  only where a request's counts differ, which then stores the counts file too).
Memory: a load point's events at a time (its pages of the maps are given back after it), and the pass's work arrays.
"""

from __future__ import annotations

import json
import mmap
import os
import threading
from array import array
from pathlib import Path

import numpy as np

from wattbench.ingest_checks import NATURAL_KEYS
from wattbench_agent.bundle import CHUNK_FILES, BundleError, read_rows

STAGING = "_rq"
# Threads of the compiled pass, each a load point at a time (a point's work arrays each: ~80 MB for 3 M events)
PASS_THREADS = max(1, min(2, os.cpu_count() or 1))


def chunk_paths(folder: Path, bundle_version: int = 1) -> dict[str, Path] | None:
    """{column: file} of a version-2/3 bundle folder (or any that has chunk files), None otherwise."""
    paths = {c: folder / name for c, (name, _, _) in CHUNK_FILES.items()}
    if bundle_version < 2 and not any(p.exists() or p.is_symlink() for p in paths.values()):
        return None
    return paths


class ChunkFiles:
    """The chunk files of one bundle being ingested, and the staging table of its requests."""

    def __init__(self, con, paths: dict[str, Path], requests: Path):
        from wattbench_agent.bundle import regular_file

        self.con, self.paths, self.requests = con, paths, requests
        self.staged = False  # the requests file is in the staging table
        self.copies: dict = {}  # column -> token_store.Copy
        self._pass: dict = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        sizes = {}
        present = [p.exists() or p.is_symlink() for p in paths.values()]
        if not any(present):  # no request had events: every reference must be empty
            self.paths, self.events = {}, 0
            return
        for column, path in paths.items():
            if not path.exists() and not path.is_symlink():
                raise BundleError(
                    f"{path}: missing, while {paths[_other(column)].name} is there; expected both chunk files of "
                    "a version-2 bundle (docs/CONTRACTS.md)"
                )
            sizes[column] = regular_file(path, f"the binary {column} file of a version-2 bundle").st_size
        self.events = sizes["chunk_ns"] // CHUNK_FILES["chunk_ns"][2]
        for column, size in sizes.items():
            width = CHUNK_FILES[column][2]
            if size % width:
                raise BundleError(
                    f"{paths[column]}: {size} bytes, not a whole number of {width}-byte values; expected the agent's "
                    "chunk file (cut short while written?)"
                )
        if sizes["chunk_tokens"] // CHUNK_FILES["chunk_tokens"][2] < self.events:
            self.events = sizes["chunk_tokens"] // CHUNK_FILES["chunk_tokens"][2]  # refs past it are named below

    # -------------------------------------------------------------------------------------------- storing
    def start_copy(self, folder: Path) -> None:
        """Copy the times file into the token store (a thread) while the rest of the ingest runs."""
        from wattbench.token_store import Copy

        if self.paths and "chunk_ns" not in self.copies:
            self.copies["chunk_ns"] = Copy(self.paths["chunk_ns"], folder)

    def undo(self) -> None:
        """The ingest failed: what this bundle's copies put in the store goes again."""
        for copy in self.copies.values():
            copy.undo()

    # -------------------------------------------------------------------------------------------- staging
    def stage(self, select_sql: str, params: list, csv: bool) -> None:
        """The rows of the requests file into the staging table (`seq`: the row's place in the file; `events_at`,
        `events_n`: its events in the chunk files, from version 2's `chunks` or version 3's columns)."""
        refs = "" if csv else ", chunks[1] AS events_at, chunks[2] AS events_n"
        # a row's place in the file is its rowid here (insertion order is kept; a window numbering the rows would
        # read the file on one thread)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {STAGING} AS SELECT *{refs} FROM ({select_sql})", params)
        self.staged = True
        if csv:
            bad = self.con.execute(
                f"""SELECT events_at, events_n FROM {STAGING}
                    WHERE (events_at IS NULL) <> (events_n IS NULL) OR events_at < 0 OR events_n < 0
                       OR events_at::HUGEINT + events_n > ? OR (events_at IS NOT NULL AND (chunk_ns IS NOT NULL
                                                                              OR chunk_tokens IS NOT NULL))
                    LIMIT 1""",
                [self.events],
            ).fetchone()
            if bad:
                self._refuse(
                    lambda row: (
                        (row.get("events_at") is None) != (row.get("events_n") is None)
                        or (
                            row.get("events_at") is not None
                            and (
                                row["events_at"] < 0
                                or row["events_n"] < 0
                                or row["events_at"] + row["events_n"] > self.events
                                or row.get("chunk_ns") is not None
                                or row.get("chunk_tokens") is not None
                            )
                        )
                    ),
                    f"events_at, events_n = {{value}}; expected the first event and the number of events within the "
                    f"{self.events} events of {self.paths.get('chunk_ns', Path('requests.chunk_ns.bin')).name} (and "
                    "no inline chunk_ns / chunk_tokens beside them)",
                )
            self._check_order()
            return
        bad = self.con.execute(
            f"""SELECT chunks::VARCHAR FROM {STAGING} WHERE chunks IS NOT NULL
                AND (len(chunks) <> 2 OR chunks[1] IS NULL OR chunks[2] IS NULL OR chunks[1] < 0 OR chunks[2] < 0
                     OR chunks[1]::HUGEINT + chunks[2] > ? OR chunk_ns IS NOT NULL OR chunk_tokens IS NOT NULL)
                LIMIT 1""",
            [self.events],
        ).fetchone()
        if bad:
            self._refuse(
                lambda row: (
                    row.get("chunks") is not None
                    and (
                        not (isinstance(row["chunks"], list) and len(row["chunks"]) == 2)
                        or not all(isinstance(v, int) and v >= 0 for v in row["chunks"])
                        or row["chunks"][0] + row["chunks"][1] > self.events
                        or "chunk_ns" in row
                        or "chunk_tokens" in row
                    )
                ),
                f"chunks = {{value}}; expected [first event, events] within the {self.events} events of "
                f"{self.paths.get('chunk_ns', Path('requests.chunk_ns.bin')).name} (and no inline chunk_ns / "
                "chunk_tokens beside it)",
            )
        self._check_order()

    def _check_order(self) -> None:
        """Each request's events are its own: a reference to events another row (of any deployment) has too is refused
        naming both lines, before any work is sized by the references (rows all naming one big range would each
        claim it whole). Rows may come in any order; their ranges, in the file's order of events, may not overlap."""
        bad = self.con.execute(
            f"""SELECT count(*) FROM (
                    SELECT events_at, lag(events_at::HUGEINT + events_n) OVER (ORDER BY events_at, events_n)
                               AS previous_end
                    FROM {STAGING} WHERE events_at IS NOT NULL AND events_n > 0)
                WHERE events_at < previous_end"""
        ).fetchone()[0]
        if bad:
            self._refuse_overlap()

    def _refuse_overlap(self) -> None:
        """BundleError naming a line whose events overlap another's, and that line (the slow path: only on a fault;
        8 bytes a row for each of reference, length and line)."""
        at, n, lines = array("q"), array("q"), array("q")
        for lineno, row in read_rows(self.requests):
            ref = _ref(row)
            if ref is not None and ref[1]:
                at.append(ref[0])
                n.append(ref[1])
                lines.append(lineno)
        starts, counts, where = (np.frombuffer(a, dtype=np.int64) for a in (at, n, lines))
        order = np.lexsort((counts, starts))
        ends = starts[order] + counts[order]
        clash = np.flatnonzero(starts[order][1:] < np.maximum.accumulate(ends)[:-1])
        if not len(clash):
            raise BundleError(f"{self.requests}: requests whose events overlap; nothing was loaded")
        i = int(clash[0]) + 1  # overlaps the range that reaches furthest before it
        j = int(np.argmax(ends[:i]))
        a, b = sorted((int(order[i]), int(order[j])), key=lambda k: where[k])
        csv = self.requests.name.endswith((".csv", ".csv.gz"))
        text = {
            k: f"events_at, events_n = {starts[k]}, {counts[k]}" if csv else f"chunks = [{starts[k]}, {counts[k]}]"
            for k in (a, b)
        }
        rows = {n: row for n, row in read_rows(self.requests) if n in (where[a], where[b])}
        key = NATURAL_KEYS["requests"]
        if all(rows[where[a]].get(c) == rows[where[b]].get(c) for c in key):  # a row twice: said as the key check says
            raise BundleError(
                f"{self.requests}:{int(where[b])}: the same row as line {int(where[a])} ({', '.join(key)} = "
                f"{', '.join(str(rows[where[b]].get(c)) for c in key)}); expected each row once; nothing was loaded"
            )
        raise BundleError(
            f"{self.requests}:{int(where[b])}: {text[b]}; its events overlap those of line {int(where[a])} "
            f"({text[a]}); expected each request's own events in {self.paths['chunk_ns'].name}, shared with no "
            "other request; nothing was loaded"
        )

    def inline_rows(self) -> int:
        """Rows that keep their lists in the requests file (not of two integer lists of one length)."""
        return self.con.execute(
            f"SELECT count(*) FROM {STAGING} WHERE events_at IS NULL AND chunk_ns IS NOT NULL"
        ).fetchone()[0]

    # -------------------------------------------------------------------------------------------- the pass
    def start_pass(self, run_id: str) -> None:
        """Run the compiled pass over every staged load point in a thread (what it needs of DuckDB is read here,
        before it starts: the thread touches no connection). `wait_pass` hands over its results."""
        from wattbench.token_pass import NO_BOUND

        con = self.con
        points = con.execute(
            f"""SELECT p.deployment_id, p.load_point_id, l.window_start_ns, l.window_end_ns, l.run_id IS NOT NULL
                FROM (SELECT DISTINCT deployment_id, load_point_id FROM {STAGING} WHERE events_at IS NOT NULL) p
                LEFT JOIN load_runs l ON l.run_id = $run_id AND l.deployment_id IS NOT DISTINCT FROM p.deployment_id
                                     AND l.load_point_id IS NOT DISTINCT FROM p.load_point_id
                ORDER BY ALL""",
            {"run_id": run_id},
        ).fetchall()
        refs = con.execute(
            f"""SELECT q.rowid AS seq, q.events_at AS "at", q.events_n AS n,
                       coalesce(q.chunks_exact, q.events_n) AS exact, q.error_kind IS NULL AS ok,
                       coalesce(q.in_window, false) AS in_window, p.i AS point,
                       greatest(coalesce(q.sent_ns, 0), 0) AS first_ok,
                       coalesce(q.last_token_ns, {NO_BOUND}) AS last_ok,
                       coalesce(q.completion_tokens, -1)::BIGINT AS tokens
                FROM {STAGING} q
                JOIN (SELECT *, row_number() OVER (ORDER BY deployment_id, load_point_id) - 1 AS i
                      FROM (SELECT DISTINCT deployment_id, load_point_id FROM {STAGING} WHERE events_at IS NOT NULL)) p
                  ON p.deployment_id IS NOT DISTINCT FROM q.deployment_id
                 AND p.load_point_id IS NOT DISTINCT FROM q.load_point_id
                WHERE q.events_at IS NOT NULL
                ORDER BY p.i, q.rowid"""
        ).fetchnumpy()
        refs = {k: np.asarray(v) for k, v in refs.items()}
        done: dict = {"error": None}
        stop = threading.Event()

        def work() -> None:
            try:
                done.update(self._run(points, refs, stop))
            except BaseException as exc:  # said where the results are asked for
                done["error"] = exc

        self._pass, self._stop = done, stop
        self._thread = threading.Thread(target=work, name="wattbench-token-pass", daemon=True)
        self._thread.start()

    def _run(self, points: list, refs: dict, stop: threading.Event) -> dict:
        from wattbench.token_pass import Workspace, run_point

        rows = len(refs["seq"])
        status = np.zeros(rows, np.int8)
        where = np.zeros(rows, np.int64)
        each = np.full(rows, -1, np.int32)
        figures: dict = {}
        if not self.paths or rows == 0:
            return {
                "seq": refs["seq"],
                "n": refs["n"],
                "status": status,
                "where": where,
                "each": each,
                "points": figures,
            }
        maps = {c: _mapped(p) for c, p in self.paths.items()}
        ns = maps["chunk_ns"][1].view("<i8")[: self.events]
        cnt = maps["chunk_tokens"][1].view("<i4")[: self.events]
        bounds = np.searchsorted(refs["point"], np.arange(len(points) + 1))
        todo = iter(range(len(points)))
        lock = threading.Lock()
        failed: list[BaseException] = []

        def worker() -> None:
            work = Workspace()
            try:
                while not stop.is_set() and not failed:
                    with lock:
                        i = next(todo, None)
                    if i is None:
                        return
                    dep, lp, ws, we, has_load_run = points[i]
                    lo, hi = int(bounds[i]), int(bounds[i + 1])
                    part = {k: v[lo:hi] for k, v in refs.items()}
                    per_row, fig = run_point(ns, cnt, part, (ws, we) if has_load_run else None, has_load_run, work)
                    status[lo:hi], where[lo:hi], each[lo:hi] = per_row["status"], per_row["where"], per_row["each"]
                    figures[(dep, lp)] = fig
                    for m, _ in maps.values():  # this point's pages go back: the process holds a few points' at a time
                        m.madvise(mmap.MADV_DONTNEED)
            except BaseException as exc:  # said by the thread that started the others
                failed.append(exc)

        # PASS_THREADS points at a time (the compiled pass releases the GIL): while DuckDB loads the other tables the
        # threads share the cores with it, and once DuckDB waits for the pass's results they have both
        helpers = [
            threading.Thread(target=worker, name="wattbench-token-pass", daemon=True) for _ in range(PASS_THREADS - 1)
        ]
        for t in helpers:
            t.start()
        worker()
        for t in helpers:
            t.join()
        if failed:
            raise failed[0]
        return {"seq": refs["seq"], "n": refs["n"], "status": status, "where": where, "each": each, "points": figures}

    def wait_pass(self) -> dict:
        """The pass's results (status, where, each per staged row with events, by seq; figures per point); the first
        row it found at fault refused, naming its line."""
        if self._thread is None:
            return {}
        self._thread.join()
        done = self._pass
        if done["error"] is not None:
            raise done["error"]
        bad = np.flatnonzero(done["status"])
        if len(bad):
            first = bad[np.argmin(done["seq"][bad])]  # the first in the file
            self._refuse_seq(int(done["seq"][first]), int(done["status"][first]), int(done["where"][first]))
        return done

    def point_figures(self, deployment_id: str, load_point_id: str) -> dict | None:
        """The token figures of one staged load point (warehouse._TOKEN_FIGURES' columns; None: no request of it
        has events in the chunk files)."""
        fig = self.wait_pass().get("points", {}).get((deployment_id, load_point_id))
        return None if fig is None else fig["figures"]

    def point_steps(self) -> dict:
        """{(deployment_id, load_point_id): the step decomposition's parts from the token times}."""
        return {k: v["steps"] for k, v in self.wait_pass().get("points", {}).items()}

    def points(self) -> list[tuple[str, str]]:
        """(deployment_id, load_point_id) of every load point of the staged requests."""
        return self.con.execute(f"SELECT DISTINCT deployment_id, load_point_id FROM {STAGING} ORDER BY ALL").fetchall()

    # -------------------------------------------------------------------------------------------- loading
    def load(self, uniform_sql: str) -> None:
        """Insert the staged rows into requests: a row with events in the chunk files with its references into the
        token store (and the one count they all carried), an inline row with its lists (`uniform_sql`: the
        condition that its counts are all one)."""
        import pyarrow as pa

        con = self.con
        done = self.wait_pass()
        events_file = counts_file = None
        has_refs = bool(len(done.get("seq", ())))
        if has_refs:
            events_file = self.copies["chunk_ns"].wait()
            if ((done["each"] < 0) & (done["n"] > 0)).any():  # a request whose counts differ: keep them too
                from wattbench.token_store import Copy

                folder = self.copies["chunk_ns"].folder
                self.copies["chunk_tokens"] = Copy(self.paths["chunk_tokens"], folder)
                counts_file = self.copies["chunk_tokens"].wait()
        each = pa.table(  # noqa: F841 - read by DuckDB below
            {
                "seq": _arrow(done.get("seq", np.zeros(0, np.int64)), pa.int64()),
                "each": _arrow(done.get("each", np.zeros(0, np.int32)), pa.int32(), null_below=0),
            }
        )
        con.execute(
            f"""INSERT INTO requests BY NAME
                SELECT r.* EXCLUDE (chunk_ns, chunk_tokens, events_at, events_n{self._extra()}),
                       CASE WHEN r.events_at IS NULL THEN r.chunk_ns END AS chunk_ns,
                       CASE WHEN r.events_at IS NULL AND NOT coalesce({uniform_sql}, false) THEN r.chunk_tokens END
                           AS chunk_tokens,
                       CASE WHEN r.events_at IS NULL THEN CASE WHEN {uniform_sql} THEN r.chunk_tokens[1] END
                            ELSE e.each END::INTEGER AS chunk_tokens_each,
                       r.events_at, r.events_n::INTEGER AS events_n,
                       CASE WHEN r.events_at IS NOT NULL THEN $events_file END AS events_file,
                       CASE WHEN r.events_at IS NOT NULL AND e.each IS NULL AND r.events_n > 0 THEN $counts_file END
                           AS counts_file
                FROM {STAGING} r LEFT JOIN each e ON e.seq = r.rowid""",
            {"events_file": events_file, "counts_file": counts_file},
        )

    def _extra(self) -> str:
        cols = {r[0] for r in self.con.execute(f"DESCRIBE {STAGING}").fetchall()}
        return ", chunks" if "chunks" in cols else ""

    def drop(self) -> None:
        if self._thread is not None:  # an ingest that failed: the pass stops after the point in hand
            self._stop.set()
            self._thread.join()
        for copy in self.copies.values():
            copy._thread.join()
        self.con.execute(f"DROP TABLE IF EXISTS {STAGING}")

    # -------------------------------------------------------------------------------------------- messages
    def _refuse_seq(self, seq: int, status: int, where: int) -> None:
        from wattbench.token_pass import BACKWARDS, OUTSIDE, TOKENS

        at, n, sent, last, tokens = self.con.execute(
            f"SELECT events_at, events_n, sent_ns, last_token_ns, completion_tokens FROM {STAGING} WHERE rowid = ?",
            [seq],
        ).fetchall()[0]
        if status == OUTSIDE:
            ns = np.fromfile(self.paths["chunk_ns"], dtype="<i8", count=where + 1, offset=8 * at)
            reason = (
                f"chunk_ns[{where}] = {int(ns[where])} (in {self.paths['chunk_ns'].name}) is outside the request's own "
                f"span (sent_ns = {sent}, last_token_ns = {last}); expected token times from its send (and >= 0) to "
                "its last token"
            )
        elif status == TOKENS:
            reason = (
                f"its chunk_tokens (in {self.paths['chunk_tokens'].name}) sum to {where}, while completion_tokens = "
                f"{tokens}; expected the tokens of its events to sum to its completion_tokens (a request that failed, "
                "error_kind set, keeps what arrived)"
            )
        elif status == BACKWARDS:
            ns = np.fromfile(self.paths["chunk_ns"], dtype="<i8", count=where + 1, offset=8 * at)
            reason = (
                f"chunk_ns[{where}] = {int(ns[where])} is before chunk_ns[{where - 1}] = {int(ns[where - 1])} (in "
                f"{self.paths['chunk_ns'].name}); expected token times that never go backwards (a negative "
                "inter-token gap)"
            )
        else:
            tok = np.fromfile(self.paths["chunk_tokens"], dtype="<i4", count=where + 1, offset=4 * at)
            reason = f"chunk_tokens[{where}] = {int(tok[where])} (in {self.paths['chunk_tokens'].name}); expected >= 0"
        self._refuse(lambda row: _ref(row) == [at, n], reason)

    def _refuse(self, matches, reason: str) -> None:
        """BundleError naming the first line of the requests file whose row `matches` (the slow path: only on a
        fault)."""
        for lineno, row in read_rows(self.requests):
            if matches(row):
                value = (
                    json.dumps(row.get("chunks"))
                    if "chunks" in row
                    else f"{row.get('events_at')}, {row.get('events_n')}"
                )
                raise BundleError(f"{self.requests}:{lineno}: " + reason.format(value=value) + "; nothing was loaded")
        raise BundleError(f"{self.requests}: {reason.format(value='?')}; nothing was loaded")


def _ref(row: dict) -> list | None:
    if row.get("events_at") is not None:
        return [row["events_at"], row.get("events_n")]
    return row.get("chunks")


def _arrow(values: np.ndarray, kind, null_below: int | None = None):
    """A numpy array as an Arrow array over the same memory (its values below `null_below` null), built from its
    buffers: pyarrow.array would import pandas to look at it (a quarter of a second to seconds, in every ingest)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=kind.to_pandas_dtype())
    validity = None
    if null_below is not None and (values < null_below).any():
        validity = pa.py_buffer(np.packbits(values >= null_below, bitorder="little"))
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(values)])


def _mapped(path: Path):
    """(mmap, a numpy view of its bytes) of a file, or of nothing when it is empty."""
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if not size:
            return _Empty(), np.zeros(0, np.uint8)
        m = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
    return m, np.frombuffer(m, dtype=np.uint8)


class _Empty:
    def madvise(self, *_):
        pass

    def close(self):
        pass


def _other(column: str) -> str:
    return next(c for c in CHUNK_FILES if c != column)
