"""Real loopback servers (agent/wattbench_agent/loadgen/testserver.py, each in its own process) for the load
generator tests."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wattbench_agent.loadgen.testserver import server_process

ROOT = Path(__file__).resolve().parents[2]


def load_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """`wattbench load ARGS` in this process: (exit status, stdout, stderr)."""
    from pipelines.cli import main

    try:
        rc = main(["load", *args])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def wattbench_load(*args: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """`wattbench load ARGS` in a process of its own from the checkout, its output captured (env: set over this
    process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "load", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture(scope="session")
def server():
    """TTFT 50 ms, ITL 10 ms, output length = max_tokens."""
    with server_process(ttft_ms=50, itl_ms=10, tokens=0) as url:
        yield url


@pytest.fixture(scope="session")
def fast_server():
    """TTFT 5 ms, ITL 2 ms: for tests that only need traffic."""
    with server_process(ttft_ms=5, itl_ms=2, tokens=0) as url:
        yield url


def table_columns(table: str) -> list[str]:
    sql = (ROOT / "sql" / "schema.sql").read_text()
    body = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\);", sql, re.S).group(1)
    cols = []
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("--") or line.startswith("PRIMARY KEY"):
            continue
        cols.append(line.split()[0])
    return cols
