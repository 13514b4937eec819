"""A bundle archive unpacks within bounds, or not at all, and a damaged one gets one line.

Probed on the old code: a 320 KB .tar.xz unpacked to 2.2 GB in the temporary folder before ingest looked at it (any
size, any number of members); a truncated .tar.xz or .tgz ended in an EOFError traceback. Now each member's header
is checked before its bytes are written (total size, member count, compression ratio; `wattbench ingest
--max-unpacked-gb / --max-members / --max-ratio` raise the limits), and a cut or corrupt archive is one message."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipelines.cli import main as wattbench
from tests.test_warehouse import make_bundle
from wattbench.warehouse import connect

REPO = Path(__file__).resolve().parents[2]


class Zeros(io.RawIOBase):
    """`n` zero bytes, read without holding them."""

    def __init__(self, n: int):
        self.n = n

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        k = min(len(buffer), self.n)
        buffer[:k] = bytes(k)
        self.n -= k
        return k


def bomb(path: Path, size: int, mode: str = "w:gz") -> Path:
    """A bundle archive: a manifest, then a table of `size` zero bytes (packs about 1000 to 1)."""
    with tarfile.open(path, mode) as tar:
        manifest = json.dumps({"bundle_version": 2, "run_id": "bomb", "source": "measured", "complete": True}).encode()
        info = tarfile.TarInfo("bundle/manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        info = tarfile.TarInfo("bundle/requests.jsonl")
        info.size = size
        tar.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))
    return path


def archive_of(bundle: Path, path: Path, extra_members: int = 0) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(bundle, arcname="bundle")
        for i in range(extra_members):
            info = tarfile.TarInfo(f"bundle/logs/extra-{i}.log")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return path


def ingest_process(archive: Path, db: Path, *flags: str, max_file_bytes: int = 64 << 20, tmp: Path | None = None):
    """`wattbench ingest` as its own process that may write no file over `max_file_bytes` (the kernel stops it
    with SIGXFSZ otherwise): an archive refused early never gets to write its big member."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(archive), "--db", str(db), *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
        env={**os.environ, **({"TMPDIR": str(tmp)} if tmp else {})},
    )


def test_an_archive_bomb_is_refused_before_it_is_unpacked(tmp_path):
    archive = bomb(tmp_path / "bomb.tgz", 300 << 20)
    assert archive.stat().st_size < 1 << 20  # 300 MiB of table in well under 1 MiB
    unpack_here = tmp_path / "tmp"
    unpack_here.mkdir()
    r = ingest_process(archive, tmp_path / "w.duckdb", tmp=unpack_here)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])  # -SIGXFSZ: it tried to write the 300 MiB
    assert "refused at member 2 (bundle/requests.jsonl)" in r.stderr and "an archive bomb?" in r.stderr, r.stderr
    assert "--max-ratio 400" in r.stderr and "Traceback" not in r.stderr
    assert list(unpack_here.iterdir()) == []


def test_the_limits_are_flags(tmp_path, capsys):
    bundle = make_bundle(tmp_path / "b")
    archive = archive_of(bundle, tmp_path / "b.tgz", extra_members=30)
    db = tmp_path / "w.duckdb"
    assert wattbench(["ingest", str(archive), "--db", str(db), "--max-members", "20"]) == 2
    err = capsys.readouterr().err
    assert "refused at member 21" in err and "more than 20 members" in err and "--max-members N" in err
    assert wattbench(["ingest", str(archive), "--db", str(db), "--max-unpacked-gb", "0.000001"]) == 2
    err = capsys.readouterr().err
    assert "would unpack to more than 1e-06 GiB" in err and "--max-unpacked-gb 2e-06" in err
    assert not db.exists() or connect(db, read_only=True).execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    assert wattbench(["ingest", str(archive), "--db", str(db)]) == 0  # within the defaults
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 5


def test_a_big_archive_within_a_raised_ratio_is_unpacked(tmp_path):
    """The same kind of archive, smaller than the ratio's floor, or with the ratio raised: unpacked (and then
    refused by ingest for what it holds, zeros that are not JSON lines)."""
    archive = bomb(tmp_path / "zeros.tgz", 300 << 20)
    r = ingest_process(archive, tmp_path / "w.duckdb", "--max-ratio", "100000", max_file_bytes=1 << 30)
    assert r.returncode == 2 and "archive bomb" not in r.stderr and "requests.jsonl" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("mode, suffix", [("w:xz", ".tar.xz"), ("w:gz", ".tgz"), ("w:bz2", ".tar.bz2"), ("w", ".tar")])
def test_a_truncated_archive_is_one_line(tmp_path, capsys, mode, suffix):
    bundle = make_bundle(tmp_path / "b", n_requests=400)
    whole = tmp_path / f"whole{suffix}"
    with tarfile.open(whole, mode) as tar:
        tar.add(bundle, arcname="bundle")
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3])
    assert wattbench(["ingest", str(cut), "--db", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cut{suffix}: the archive is cut short" in err or "not a readable bundle archive" in err, err


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage" * 100, b"not an archive at all\n" * 100])
def test_a_corrupt_archive_is_one_line(tmp_path, capsys, content):
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(content)
    assert wattbench(["ingest", str(archive), "--db", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.tar.gz: not a readable bundle archive" in err, err
