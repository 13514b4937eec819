"""The agent's other small GETs from servers it does not control (wattbench_agent/fetch.py): an engine's version,
its /metrics page. Probed on the old agent: httpx read the whole body into memory, decompressed whole (a 6 MB gzip
body unpacked to 6 GB), with a timeout per read only (a byte every 2 s never ended)."""

from __future__ import annotations

import socket
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.loadgen.test_hostile_servers import raw_server
from wattbench_agent.engines.vllm import VllmAdapter
from wattbench_agent.metrics_scrape import MetricsScraper


@contextmanager
def answering(head: bytes, body: bytes, per_byte_s: float = 0.0) -> Iterator[str]:
    """A loopback server that answers every request with `head` + `body` (a byte at a time when per_byte_s)."""

    def answer(conn: socket.socket, stats: dict) -> None:
        conn.sendall(head)
        if not per_byte_s:
            conn.sendall(body)
            return
        for b in body:
            conn.sendall(bytes([b]))  # raises once the client has closed: the thread ends
            time.sleep(per_byte_s)

    with raw_server(answer) as (url, _):
        yield url


def _gzip_zeros(n: int) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    zeros = b"\0" * (16 << 20)
    return b"".join([c.compress(zeros) for _ in range(n // len(zeros))] + [c.flush()])


def _head(body: bytes, encoding: bytes = b"") -> bytes:
    enc = b"Content-Encoding: %s\r\n" % encoding if encoding else b""
    return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n" % (enc, len(body))


@pytest.mark.timeout(120)  # the old agent parsed the 128 MiB page for minutes
def test_a_metrics_page_that_unpacks_past_its_bound_is_a_failed_scrape_not_a_crash():
    body = _gzip_zeros(128 << 20)
    rows: list = []
    writer = type("W", (), {"write": lambda self, table, r: rows.extend(r)})()
    with answering(_head(body, b"gzip"), body) as url:
        scraper = MetricsScraper(url + "/metrics", writer, "d")
        tracemalloc.start()
        try:
            assert scraper.scrape_once() == 0
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert scraper.failures == 1 and "over 33,554,432 bytes once decompressed" in scraper.last_error
    assert peak < 80 << 20, f"{peak / 2**20:.0f} MiB held to refuse a 128 MiB page"  # the bound is 32 MiB
    assert rows == []


def test_a_version_sent_a_byte_at_a_time_is_given_up_at_its_total_timeout():
    body = b'{"version": "0.25.0"}' + b" " * 64
    with answering(_head(body), body, per_byte_s=0.2) as url:
        started = time.monotonic()
        version, where = VllmAdapter().detect_version(url, "vLLM API server version 0.11.0")
        took = time.monotonic() - started
    assert (version, where) == ("0.11.0", "log")  # the endpoint gave up on, the log read instead
    assert took < 5, f"{took:.1f} s (3 s in total is the bound; each read came in time, so httpx waited 17 s)"


@pytest.mark.parametrize("body", [b'{"version": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_a_version_nested_past_the_recursion_limit_falls_back_to_the_log(body):
    with answering(_head(body), body) as url:
        assert VllmAdapter().detect_version(url, "vLLM API server version 0.11.0") == ("0.11.0", "log")
