"""A version-2 bundle's per-token times: two binary files beside requests.jsonl, read by numpy, never parsed.

The agent (wattbench_agent.bundle, CHUNK_FILES) appends each request's `chunk_ns` (int64) and `chunk_tokens` (int32),
little-endian, to `requests.chunk_ns.bin` / `requests.chunk_tokens.bin` and writes `"chunks": [first event, events]`
in its row of requests.jsonl. At ingest (resources/warehouse.py):
- DuckDB reads requests.jsonl (now a few hundred bytes a row) into a staging table, `_rq`;
- `ChunkFiles.load` reads the events in batches of rows (numpy reads the files as they are: no JSON, no Python object
  per value), checks them (a reference outside the files, a negative token count, token times that go backwards: the
  file, the line of the row and the reason) and inserts the rows into `requests` with their lists (Arrow lists over
  the numpy arrays, which DuckDB reads without a copy per value);
- the per-load-point token figures (warehouse.point_token_figures) read the events from the files again, laid flat
  (`point_events`), instead of unnesting the lists just stored, and they do it in a thread while DuckDB stores the
  lists (`start_figures`: the insert keeps one core busy, the figures the other); warehouse.refresh_point_stats takes
  them over (`point_figures`).
Memory is bounded by BATCH_EVENTS (the batch being inserted), by one load point's events in the thread and by DuckDB's
limit meanwhile (warehouse.OVERLAP_MEMORY).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from wattbench_agent.bundle import CHUNK_FILES, BundleError

BATCH_EVENTS = 8 << 20  # events per insert batch: 8 M events are 96 MB of arrays
STAGING = "_rq"


def chunk_paths(folder: Path, bundle_version: int = 1) -> dict[str, Path] | None:
    """{column: file} of a version-2 bundle folder (or any that has chunk files), None otherwise."""
    paths = {c: folder / name for c, (name, _, _) in CHUNK_FILES.items()}
    if bundle_version < 2 and not any(p.exists() or p.is_symlink() for p in paths.values()):
        return None
    return paths


class ChunkFiles:
    """The chunk files of one bundle being ingested, and the staging table of its requests."""

    def __init__(self, con, paths: dict[str, Path], jsonl: Path):
        from wattbench_agent.bundle import regular_file

        self.con, self.paths, self.jsonl = con, paths, jsonl
        self.staged = False  # requests.jsonl is in the staging table
        self._thread: threading.Thread | None = None  # start_figures
        self._figures: dict = {}
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

    # -------------------------------------------------------------------------------------------- reading
    def gather(self, at: np.ndarray, n: np.ndarray, tokens: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """(chunk_ns, chunk_tokens) of the rows whose events are [at, at + n), laid flat in the rows' order (tokens
        False: chunk_ns only, None for the tokens). Rows whose events follow one another are read as one stretch of
        the files; only the stretches are read (a load point's repeats lie far apart in the files)."""
        total = int(n.sum())
        if total == 0 or not self.paths:
            return np.zeros(0, np.int64), np.zeros(0, np.int32) if tokens else None
        has = n > 0
        at_, n_ = at[has], n[has]
        # a stretch starts where a row's events do not follow the previous row's
        starts = np.flatnonzero(np.concatenate([[True], at_[1:] != at_[:-1] + n_[:-1]]))
        if len(starts) > 1 and np.any(np.diff(at_) < 0):  # rows in another order than the files': read them in the
            order = np.argsort(at_, kind="stable")  # files' order, then lay them out in the rows'
            ns, tok = self.gather(at_[order], n_[order], tokens)
            place = np.empty(len(order), np.int64)
            place[order] = np.cumsum(n_[order]) - n_[order]  # where each row's events lie in what was read
            idx = np.repeat(place - (np.cumsum(n_) - n_), n_) + np.arange(total)
            return ns[idx], tok[idx] if tokens else None
        ends = np.concatenate([starts[1:], [len(at_)]])
        first = at_[starts]
        count = (at_[ends - 1] + n_[ends - 1]) - first
        if len(starts) == 1:
            a, c = int(first[0]), int(count[0])
            return self._read("chunk_ns", a, c), self._read("chunk_tokens", a, c) if tokens else None
        ns, tok = np.empty(total, np.int64), np.empty(total, np.int32) if tokens else None
        pos = 0
        for a, c in zip(first.tolist(), count.tolist()):
            ns[pos : pos + c] = self._read("chunk_ns", a, c)
            if tok is not None:
                tok[pos : pos + c] = self._read("chunk_tokens", a, c)
            pos += c
        return ns, tok

    def _read(self, column: str, first: int, count: int) -> np.ndarray:
        _, code, width = CHUNK_FILES[column]
        dtype = np.dtype("<i8" if code == "q" else "<i4")
        return np.fromfile(self.paths[column], dtype=dtype, count=count, offset=first * width).astype(
            dtype.newbyteorder("="), copy=False
        )

    # -------------------------------------------------------------------------------------------- loading
    def stage(self, read_json_sql: str, params: list) -> None:
        """The rows of requests.jsonl into the staging table (`seq`: the row's place in the file)."""
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {STAGING} AS SELECT row_number() OVER () AS seq, * FROM ({read_json_sql})",
            params,
        )
        self.staged = True
        bad = self.con.execute(
            f"""SELECT chunks::VARCHAR FROM {STAGING} WHERE chunks IS NOT NULL
                AND (len(chunks) <> 2 OR chunks[1] IS NULL OR chunks[2] IS NULL OR chunks[1] < 0 OR chunks[2] < 0
                     OR chunks[1] + chunks[2] > ? OR chunk_ns IS NOT NULL OR chunk_tokens IS NOT NULL) LIMIT 1""",
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
                f"{self.paths['chunk_ns'].name} (and no inline chunk_ns / chunk_tokens beside it)",
            )

    def inline_rows(self) -> int:
        """Rows that keep their lists in the JSON (not of two integer lists of one length)."""
        return self.con.execute(
            f"SELECT count(*) FROM {STAGING} WHERE chunks IS NULL AND chunk_ns IS NOT NULL"
        ).fetchone()[0]

    def load(self) -> None:
        """Insert the staged rows into requests, each with its lists from the chunk files, in batches."""
        import pyarrow as pa

        con = self.con
        con.execute(f"INSERT INTO requests BY NAME SELECT * EXCLUDE (seq, chunks) FROM {STAGING} WHERE chunks IS NULL")
        refs = con.execute(
            f"SELECT seq, chunks[1] AS at, chunks[2] AS n FROM {STAGING} WHERE chunks IS NOT NULL ORDER BY seq"
        ).fetchnumpy()
        seq, at, n = (np.asarray(refs[c], dtype=np.int64) for c in ("seq", "at", "n"))
        cum = np.cumsum(n)
        start = 0
        while start < len(seq):
            stop = max(
                int(np.searchsorted(cum, (cum[start - 1] if start else 0) + BATCH_EVENTS, side="right")), start + 1
            )
            ns, tok = self.gather(at[start:stop], n[start:stop])
            if len(tok) and tok.min() < 0:
                first = int(np.argmax(tok < 0))
                row = int(np.searchsorted(np.cumsum(n[start:stop]), first, side="right"))
                self._refuse_seq(
                    int(seq[start + row]),
                    f"chunk_tokens[{first - int((np.cumsum(n[start:stop]) - n[start:stop])[row])}] = {int(tok[first])} "
                    f"(in {self.paths['chunk_tokens'].name}); expected >= 0",
                )
            offsets = np.zeros(stop - start + 1, dtype=np.int64)
            np.cumsum(n[start:stop], out=offsets[1:])
            back = np.diff(ns) < 0  # a gap below zero, within a request (not across two)
            across = offsets[1:-1] - 1
            back[across[(across >= 0) & (across < len(back))]] = False
            if back.any():
                first = int(np.argmax(back)) + 1
                row = int(np.searchsorted(offsets, first, side="right")) - 1
                i = first - int(offsets[row])
                self._refuse_seq(
                    int(seq[start + row]),
                    f"chunk_ns[{i}] = {int(ns[first])} is before chunk_ns[{i - 1}] = {int(ns[first - 1])} (in "
                    f"{self.paths['chunk_ns'].name}); expected token times that never go backwards (a negative "
                    "inter-token gap)",
                )
            tokens, each = _token_lists(tok, n[start:stop], offsets)
            batch = pa.table(  # noqa: F841 - read by DuckDB below
                {
                    "seq": seq[start:stop],
                    "chunk_ns": pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(ns)),
                    "chunk_tokens": tokens,
                    "chunk_tokens_each": each,
                }
            )
            con.execute(
                f"""INSERT INTO requests BY NAME
                    SELECT r.* EXCLUDE (seq, chunks, chunk_ns, chunk_tokens, chunk_tokens_each),
                           b.chunk_ns, b.chunk_tokens, b.chunk_tokens_each
                    FROM {STAGING} r JOIN batch b USING (seq)
                    WHERE r.seq BETWEEN {int(seq[start])} AND {int(seq[stop - 1])}"""
            )
            start = stop

    # -------------------------------------------------------------------------------------------- flat events
    def points(self) -> list[tuple[str, str]]:
        """(deployment_id, load_point_id) of every load point of the staged requests."""
        return self.con.execute(f"SELECT DISTINCT deployment_id, load_point_id FROM {STAGING} ORDER BY ALL").fetchall()

    def point_events(self, run_id: str, deployment_id: str, load_point_id: str) -> dict | None:
        """The token events of one load point's successful requests, laid flat as sql/views.sql's unnest lays them,
        as numpy arrays (t, n, in_window and prev_ok per event; ws, we, has_load_run of the point), for
        warehouse.point_token_figures. None when the point has no event."""
        return self._events_of(self._point_refs(run_id, deployment_id, load_point_id))

    def _point_refs(self, run_id: str, deployment_id: str, load_point_id: str) -> dict:
        """What point_events reads of DuckDB: the point's rows' references into the files, and its window."""
        rows = self.con.execute(
            f"""SELECT q.chunks[1] AS at, q.chunks[2] AS n, q.chunks_exact AS exact,
                       coalesce(q.in_window, false) AS in_window
                FROM {STAGING} q
                WHERE q.error_kind IS NULL AND q.chunks IS NOT NULL AND q.deployment_id = $dep
                  AND q.load_point_id = $lp
                ORDER BY q.seq""",
            {"dep": deployment_id, "lp": load_point_id},
        ).fetchnumpy()
        window = self.con.execute(
            "SELECT window_start_ns, window_end_ns FROM load_runs WHERE run_id = ? AND deployment_id = ? "
            "AND load_point_id = ?",
            [run_id, deployment_id, load_point_id],
        ).fetchone()
        return {**rows, "window": window}

    def _events_of(self, refs: dict) -> dict | None:
        """point_events from _point_refs (numpy and the files only: no connection)."""
        n = np.asarray(refs["n"], dtype=np.int64)
        if not n.sum():
            return None
        window = refs["window"]
        t, tok = self.gather(np.asarray(refs["at"], dtype=np.int64), n)
        starts = np.cumsum(n) - n
        pos = np.arange(len(t)) - np.repeat(starts, n) + 1  # 1-based place of each event in its request
        prev_ok = (pos > 1) & (pos <= np.repeat(_filled(refs["exact"], n), n))  # the previous event of an exact one
        return {
            "t": t,
            "n": tok,
            "in_window": np.repeat(np.asarray(refs["in_window"], dtype=bool), n),
            "prev_ok": prev_ok,
            "has_load_run": window is not None,
            "ws": None if window is None else window[0],
            "we": None if window is None else window[1],
        }

    # -------------------------------------------------------------------------------------------- figures, in a thread
    def start_figures(self, run_id: str) -> None:
        """Start computing, in a thread, the token figures of every staged load point (warehouse.point_token_figures)
        from the chunk files, while DuckDB stores the lists: DuckDB's insert of lists keeps one core busy and numpy
        the other. What the thread needs of DuckDB (the staged rows' references, the load points' windows) is read
        here, before it starts: the thread touches no connection. point_figures hands its results over (the same
        values as computed on the spot: the same code)."""
        points = [(dep, lp, self._point_refs(run_id, dep, lp)) for dep, lp in self.points()]
        done: dict = {"points": {}, "error": None}
        stop = threading.Event()

        def work() -> None:
            from resources.warehouse import point_token_figures

            try:
                for dep, lp, refs in points:
                    if stop.is_set():
                        return
                    ev = self._events_of(refs)
                    done["points"][(dep, lp)] = None if ev is None else point_token_figures(ev)
            except BaseException as exc:  # said where the results are asked for
                done["error"] = exc

        self._figures, self._stop = done, stop
        self._thread = threading.Thread(target=work, name="wattbench-token-figures", daemon=True)
        self._thread.start()

    def _wait(self) -> dict | None:
        if self._thread is None:
            return None
        self._thread.join()
        if self._figures["error"] is not None:
            raise self._figures["error"]
        return self._figures

    def point_figures(self, run_id: str, deployment_id: str, load_point_id: str) -> dict | None:
        """warehouse.point_token_figures of one staged load point (None: no event), from the thread when it
        computed them."""
        from resources.warehouse import point_token_figures

        done = self._wait()
        if done is not None and (deployment_id, load_point_id) in done["points"]:
            return done["points"][(deployment_id, load_point_id)]
        ev = self.point_events(run_id, deployment_id, load_point_id)
        return None if ev is None else point_token_figures(ev)

    def drop(self) -> None:
        if self._thread is not None:  # an ingest that failed: the thread stops after the figure in hand
            self._stop.set()
            self._thread.join()
        self.con.execute(f"DROP TABLE IF EXISTS {STAGING}")

    # -------------------------------------------------------------------------------------------- messages
    def _refuse_seq(self, seq: int, reason: str) -> None:
        ref = self.con.execute(f"SELECT chunks FROM {STAGING} WHERE seq = ?", [seq]).fetchone()[0]
        self._refuse(lambda row: row.get("chunks") == list(ref), reason)

    def _refuse(self, matches, reason: str) -> None:
        """BundleError naming the first line of requests.jsonl whose row `matches` (the slow path: only on a fault)."""
        from resources.ingest_checks import _open

        with _open(self.jsonl) as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    row = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(row, dict) and matches(row):
                    raise BundleError(
                        f"{self.jsonl}:{lineno}: "
                        + reason.format(value=json.dumps(row.get("chunks")))
                        + "; nothing was loaded"
                    )
        raise BundleError(f"{self.jsonl}: {reason.format(value='?')}; nothing was loaded")


def _token_lists(tok: np.ndarray, n: np.ndarray, offsets: np.ndarray):
    """(chunk_tokens, chunk_tokens_each) of a batch of rows, as Arrow arrays: a row whose events all carried one count
    has that count in chunk_tokens_each and a NULL list (storing a list of 128 ones per request was a third of the
    lists' cost: results/token_storage.json), any other row its list and NULL (sql/views.sql event_tokens reads both).
    A row without events keeps its empty list."""
    import pyarrow as pa

    has = n > 0
    lo = np.zeros(len(n), dtype=np.int32)
    hi = np.full(len(n), -1, dtype=np.int32)
    if has.any():
        first = offsets[:-1][has]
        lo[has] = np.minimum.reduceat(tok, first)
        hi[has] = np.maximum.reduceat(tok, first)
    uniform = has & (lo == hi)
    kept = ~uniform
    kept_n = np.where(kept, n, 0)
    kept_offsets = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(kept_n, out=kept_offsets[1:])
    values = tok if kept.all() else tok[np.repeat(kept, n)]
    tokens = pa.LargeListArray.from_arrays(
        pa.array(kept_offsets), pa.array(values, type=pa.int32()), mask=pa.array(uniform)
    )
    each = pa.array(lo, type=pa.int32(), mask=kept)
    return tokens, each


def _other(column: str) -> str:
    return next(c for c in CHUNK_FILES if c != column)


def _filled(values, n: np.ndarray) -> np.ndarray:
    """chunks_exact per row, its events' count where NULL (every event is one)."""
    data = np.asarray(np.ma.getdata(values), dtype=np.int64)
    if np.ma.isMaskedArray(values):
        data = np.where(np.ma.getmaskarray(values), n, data)
    return data
