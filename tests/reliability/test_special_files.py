"""`wattbench import FILE` and `wattbench inspect FILE` given what is not a result file: a FIFO (it used to wait for
a writer for ever), a device (/dev/zero and /dev/urandom were read until memory ran out), a file over the size they
read (a sparse one: refused by its size, unread), JSON nested 200,000 deep (a RecursionError traceback). Each answer
is one line and exit 2, in its own process, within a bound of time and of address space."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], tmp: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """`wattbench ARGS` in its own process, with 4 GiB of address space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env={**os.environ, "WATTBENCH_DB": str(tmp / "w.duckdb")},
    )
    return p, time.monotonic() - start


def special(tmp: Path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp / "result.json")
        return tmp / "result.json"
    if kind == "huge":  # a sparse file past the bound: refused by its size, never read
        path = tmp / "result.json"
        with open(path, "wb") as fh:
            fh.truncate((4 << 30) + 1)
        return path
    if kind == "deep":
        path = tmp / "result.json"
        path.write_text("[" * 200_000 + "]" * 200_000 + "\n")
        return path
    return Path(kind)


@pytest.mark.parametrize(
    "kind, says",
    [
        ("fifo", "not a regular file (a FIFO); expected a JSON result file"),
        ("/dev/zero", "not a regular file (a character device); expected a JSON result file"),
        ("/dev/urandom", "not a regular file (a character device); expected a JSON result file"),
        ("huge", "4,294,967,297 bytes; expected a JSON result file of at most 1,073,741,824 bytes"),
        (
            "deep",
            "JSON nested deeper than this reader goes (Python's recursion limit, 1,000 levels); expected a result",
        ),
    ],
)
def test_import_of_what_is_not_a_result_file_is_one_line(tmp_path, kind, says):
    p, took = run(["import", str(special(tmp_path, kind))], tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert says in p.stderr and took < 30


@pytest.mark.parametrize(
    "kind, says",
    [
        ("fifo", "not a regular file (a FIFO); expected one request record a line"),
        ("/dev/zero", "not a regular file (a character device); expected one request record a line"),
        ("/dev/urandom", "not a regular file (a character device); expected one request record a line"),
        ("huge", "4,294,967,297 bytes; expected one request record a line (`wattbench load --out`) of at most"),
        ("deep", "result.json:1: JSON nested deeper than this reader goes (Python's recursion limit); expected one"),
    ],
)
def test_inspect_of_what_is_not_a_request_file_is_one_line(tmp_path, kind, says):
    p, took = run(["inspect", str(special(tmp_path, kind))], tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert says in p.stderr and took < 30
