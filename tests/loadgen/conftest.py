"""Real loopback servers (agent/wattbench_agent/loadgen/testserver.py, each in its own process) for the load
generator tests."""

import re
from pathlib import Path

import pytest

from wattbench_agent.loadgen.testserver import server_process

ROOT = Path(__file__).resolve().parents[2]


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
