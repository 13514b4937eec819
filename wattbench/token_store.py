"""Where the per-token times live once ingested: the agent's binary files, kept beside the warehouse, by content.

A bundle's `requests.chunk_ns.bin` (int64 times) and `requests.chunk_tokens.bin` (int32 counts) are copied, as they
are, into `<warehouse>.tokens/` under the SHA-256 of their bytes (`<sha256>.bin`); a request row names its file and
its place in it (requests.events_file, events_at, events_n; counts_file where its events did not all carry one
count, requests.chunk_tokens_each). The same file ingested twice is stored once; a file no row names any more (a run
replaced or deleted) is removed after the transaction that dropped its last row commits (`collect`).

Reading them: every connection wattbench opens gets two SQL functions, `token_times(file, at, n)` (BIGINT[]) and
`token_counts(file, at, n)` (INTEGER[]), which read a request's events from the files (a memory map each, opened
once a connection); sql/views.sql's `request_ns` / `request_tokens` give every request's lists whichever way it is
stored. They reach no file but the store's, named by a SHA-256: `wattbench sql`'s sandbox (no file access from
SQL) keeps them. A DuckDB client other than wattbench does not have them: the views that read token times then say
that the function does not exist.

Copying runs in a thread beside the rest of the ingest (`Copy`): copied by the kernel (copy_file_range), fsynced, the
copy's bytes read back and hashed (hashing releases the GIL), then renamed to its hash: a crash leaves at most
a partial file under a temporary name, which `collect` removes. A file already in the store under that hash is
trusted only once its size and then its own hash agree (a file cut short or changed in place would otherwise be kept,
and every query of its token times fail): the fresh copy takes the place of one that does not, so ingesting its
bundle again writes it whole. A reader that finds a file holding fewer events than a request names says which file
and how to write it again (`DamagedTokenFile`), never a numpy broadcasting error.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path

BLOCK = 16 << 20
_ID = re.compile(r"[0-9a-f]{64}")
_MEMORY_STORES: dict[int, str] = {}  # an in-memory warehouse's store: a temporary folder for the process's life


def folder_of(con) -> Path:
    """The token store of the warehouse `con` is open on: `<database file>.tokens`."""
    rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    path = rows[0][0] if rows else None
    if not path or path == ":memory:":
        key = id(con)
        if key not in _MEMORY_STORES:
            _MEMORY_STORES[key] = tempfile.mkdtemp(prefix="wattbench-tokens-")
        return Path(_MEMORY_STORES[key])
    return Path(str(path) + ".tokens")


class DamagedTokenFile(ValueError):
    """A file of the store is not what its rows name (cut short, or not of whole values): the message names it and
    how to write it again."""


def _damaged(path: Path, what: str) -> DamagedTokenFile:
    return DamagedTokenFile(
        f"{path}: {what}; the token store's file is damaged (cut short?): ingesting the bundle of its run again "
        "(wattbench ingest BUNDLE, or with --replace) writes it whole again"
    )


def register(con) -> None:
    """token_times / token_counts on this connection (idempotent)."""
    folder = folder_of(con)
    maps: dict[str, object] = {}

    def column(dtype: str):
        def read(files, at, n):
            import numpy as np
            import pyarrow as pa

            names = files.to_pylist()
            first = np.asarray(at.to_numpy(zero_copy_only=False), dtype=np.int64)
            count = np.asarray(n.to_numpy(zero_copy_only=False), dtype=np.int64)
            offsets = np.zeros(len(count) + 1, dtype=np.int64)
            np.cumsum(count, out=offsets[1:])
            values = np.empty(int(offsets[-1]), dtype=dtype)
            for i, name in enumerate(names):
                if count[i]:
                    events = _map(folder, maps, name, dtype)
                    if first[i] < 0 or first[i] + count[i] > len(events):
                        raise _damaged(
                            folder / f"{name}.bin",
                            f"{len(events)} values, while a request names values {first[i]} to "
                            f"{first[i] + count[i] - 1} of it",
                        )
                    values[offsets[i] : offsets[i + 1]] = events[first[i] : first[i] + count[i]]
            arrow = pa.int64() if dtype == "<i8" else pa.int32()
            return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, type=arrow))

        return read

    for name, dtype, sql_type in (("token_times", "<i8", "BIGINT[]"), ("token_counts", "<i4", "INTEGER[]")):
        try:
            con.remove_function(name)
        except Exception:  # noqa: BLE001 - not registered yet
            pass
        con.create_function(name, column(dtype), ["VARCHAR", "BIGINT", "BIGINT"], sql_type, type="arrow")


def _map(folder: Path, maps: dict, name: str, dtype: str):
    """The store's file `name` as an array of `dtype`, memory-mapped once a connection."""
    import numpy as np

    got = maps.get((name, dtype))
    if got is None:
        if not isinstance(name, str) or not _ID.fullmatch(name):
            raise ValueError(f"token file {name!r}: expected the SHA-256 name of a file of the token store")
        path = folder / f"{name}.bin"
        if not path.exists():
            raise FileNotFoundError(
                f"{path}: missing; the warehouse's per-token times are kept in {folder} beside it (moved or deleted?)"
            )
        size = path.stat().st_size
        if size % np.dtype(dtype).itemsize:
            raise _damaged(path, f"{size} bytes, not a whole number of {np.dtype(dtype).itemsize}-byte values")
        got = (
            np.memmap(path, dtype=dtype, mode="r", shape=(size // np.dtype(dtype).itemsize,))
            if size
            else np.zeros(0, dtype)
        )
        maps[(name, dtype)] = got
    return got


class Copy:
    """A file copied into the store in a thread: `id` (its SHA-256) once `wait` returns."""

    def __init__(self, source: Path, folder: Path):
        self.source, self.folder = source, folder
        self.id: str | None = None
        self.created = False  # the file was not in the store before (removed again if the ingest fails)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="wattbench-token-copy", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=self.folder)
            try:
                os.fchmod(fd, 0o644)  # readable as the warehouse file is (mkstemp makes it private)
                with open(self.source, "rb") as src, os.fdopen(fd, "wb") as dst:
                    _copy(src.fileno(), dst.fileno())
                    dst.flush()
                    os.fsync(dst.fileno())
                _hash(tmp, digest)  # the bytes stored, read back (from the page cache)
                self.id = digest.hexdigest()
                final = self.folder / f"{self.id}.bin"
                existed = final.exists()
                if existed and _intact(final, os.stat(tmp).st_size, self.id):
                    os.unlink(tmp)
                else:  # new, or a damaged file of this name made whole again (kept if the ingest fails)
                    os.replace(tmp, final)
                    self.created = not existed
                    _fsync_dir(self.folder)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        except BaseException as exc:  # said by wait()
            self.error = exc

    def wait(self) -> str:
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.id is not None
        return self.id

    def undo(self) -> None:
        """The ingest failed: the file goes again if this copy put it there."""
        self._thread.join()
        if self.created and self.id:
            (self.folder / f"{self.id}.bin").unlink(missing_ok=True)


def _copy(src: int, dst: int) -> None:
    """The whole of file `src` into `dst` by the kernel (copy_file_range: no pass through Python's buffers), or by
    blocks where the kernel or the filesystem cannot."""
    size = os.fstat(src).st_size
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(src, dst, size - done)
            if n == 0:
                break
            done += n
    except OSError:
        pass
    if done < size:
        os.lseek(src, done, os.SEEK_SET)
        os.lseek(dst, done, os.SEEK_SET)
        while block := os.read(src, BLOCK):
            os.write(dst, block)


def _hash(path: str, digest) -> None:
    """SHA-256 of a file's bytes, read BLOCK at a time into one buffer (a memory map would count the whole file in the
    process's resident memory)."""
    buffer = bytearray(BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            digest.update(view[:n])


def _intact(path: Path, size: int, sha256: str) -> bool:
    """Whether a file of the store still holds the bytes its name says: its size first, then its hash."""
    try:
        if path.stat().st_size != size:
            return False
        digest = hashlib.sha256()
        _hash(str(path), digest)
    except OSError:
        return False
    return digest.hexdigest() == sha256


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def collect(con) -> int:
    """Remove the store's files that no request names (and partial copies): after a commit. Returns files removed."""
    folder = folder_of(con)
    if not folder.is_dir():
        return 0
    named = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT events_file FROM requests WHERE events_file IS NOT NULL "
            "UNION SELECT DISTINCT counts_file FROM requests WHERE counts_file IS NOT NULL"
        ).fetchall()
    }
    removed = 0
    for path in folder.iterdir():
        if path.name.startswith(".incoming-") or (path.suffix == ".bin" and path.stem not in named):
            path.unlink(missing_ok=True)
            removed += 1
    return removed
