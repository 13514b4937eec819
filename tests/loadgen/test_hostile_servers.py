"""Servers that misbehave in ways a load client must bound: an SSE line that never ends, a redirect, an https URL
naming a server that does not speak TLS.

Probed on the old client: a stream of `data: xxxx...` with no newline grew the client's buffer without bound (230 MB
in 20 s, until the request's timeout); a 302 was recorded as `no_content` ("the stream ended without a content
event"); an https URL to a plain server waited for the TLS handshake for 60 s (FastTransport, asyncio's default) or
the request's whole timeout_s (the httpx transport). Each server here is a real one on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from wattbench_agent.loadgen import LoadSpec, run_load
from wattbench_agent.loadgen.client import MAX_SSE_EVENT_BYTES, SSEParser


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[tuple[str, dict]]:
    """A loopback server that reads a request head and calls `answer(conn)` (one thread per connection)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stats = {"sent": 0, "closed_by_client": False}
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                part = conn.recv(65536)
                if not part:
                    return
                head += part
            try:
                answer(conn, stats)
            except OSError:
                stats["closed_by_client"] = True

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", stats
    finally:
        stop.set()
        thread.join(timeout=5)
        srv.close()


def endless_line(conn: socket.socket, stats: dict) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: ")
    piece = b"x" * 65536
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and stats["sent"] < 512 << 20:
        conn.sendall(piece)
        stats["sent"] += len(piece)


def redirect(conn: socket.socket, stats: dict) -> None:
    conn.sendall(
        b"HTTP/1.1 302 Found\r\nLocation: http://user:s3cr3t@elsewhere.example/v1/chat/completions\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def spec(url: str, **over) -> LoadSpec:
    return LoadSpec(url=url, model="m", concurrency=1, max_requests=1, duration_s=0, **{"timeout_s": 120, **over})


@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_an_sse_line_without_end_stops_the_request_at_a_bound(transport):
    with raw_server(endless_line) as (url, stats):
        started = time.monotonic()
        res = run_load(spec(url, transport=transport))
        took = time.monotonic() - started
    (rec,) = res.records
    assert rec["error_kind"] == "sse_event_too_long", rec
    assert f"past {MAX_SSE_EVENT_BYTES // 1024} KiB" in rec["error_text"]
    assert took < 30 and stats["sent"] < 64 << 20, (took, stats)  # stopped reading near the bound, not at timeout


def test_a_line_sent_a_byte_at_a_time_costs_linear_work():
    """The parser looks for an event's end in the new bytes only: 200,000 one-byte reads of an unended line, then
    its end, cost about as much as one read of it (they used to copy and search the whole line at every read)."""
    parser = SSEParser(chat=True)
    started = time.process_time()
    parser.feed(0, b'data: {"choices":[{"delta":{"content":"')
    for _ in range(200_000):
        parser.feed(1, b"a")
    parser.feed(2, b'"}}]}\n\n')
    spent = time.process_time() - started
    assert parser.err is None and parser.lens == [200_000] and parser.chunk_ns == [2]
    assert spent < 3, f"{spent:.1f} s of CPU for a 200 KB line read a byte at a time"


def test_a_redirect_is_reported_as_one(tmp_path):
    with raw_server(redirect) as (url, _):
        res = run_load(spec(url))
    (rec,) = res.records
    assert rec["error_kind"] == "http_3xx" and rec["http_status"] == 302, rec
    assert "redirect to http://***@elsewhere.example/v1/chat/completions" in rec["error_text"]
    assert "s3cr3t" not in rec["error_text"] and "does not follow it" in rec["error_text"]


@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_an_https_url_to_a_server_without_tls_fails_in_seconds(transport):
    with raw_server(lambda conn, stats: time.sleep(300)) as (url, _):  # accepts, reads, never answers
        started = time.monotonic()
        res = run_load(spec(url.replace("http://", "https://"), transport=transport, timeout_s=600))
        took = time.monotonic() - started
    (rec,) = res.records
    assert rec["error_kind"] == "connect_error", rec
    assert took < 45, f"{took:.0f} s to give up on a TLS handshake nobody answers"
    if transport == "fast":
        assert "does the server speak TLS there?" in rec["error_text"] and "use http://" in rec["error_text"]
