"""Servers that misbehave in ways a load client must bound: an SSE line that never ends, a redirect, an https URL
naming a server that does not speak TLS.

Probed on the old client: a stream of `data: xxxx...` with no newline grew the client's buffer without bound (230 MB
in 20 s, until the request's timeout); a 302 was recorded as `no_content` ("the stream ended without a content
event"); an https URL to a plain server waited for the TLS handshake for 60 s (FastTransport, asyncio's default) or
the request's whole timeout_s (the httpx transport). Each server here is a real one on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from wattbench_agent.loadgen import LoadSpec, run_load
from wattbench_agent.loadgen.client import MAX_SSE_EVENT_BYTES, SSEParser

from .conftest import ROOT


@contextmanager
def raw_server(answer: Callable[[socket.socket, dict], None]) -> Iterator[tuple[str, dict]]:
    """A loopback server that reads a request (head and Content-Length body), calls `answer(conn, stats)` and closes
    with a lingering close (one thread per connection)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stats = {"sent": 0, "closed_by_client": False}
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                part = conn.recv(65536)
                if not part:
                    return
                data += part
            # the whole request is read before the answer: a socket closed with request bytes unread sends a TCP
            # reset, and the client's kernel may then drop the answer unread ("disconnected" instead of what the
            # test is about)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length:
                part = conn.recv(65536)
                if not part:
                    return
                body += part
            try:
                answer(conn, stats)
            except OSError:
                stats["closed_by_client"] = True
                return
            linger(conn)

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


def linger(conn: socket.socket, seconds: float = 2.0) -> None:
    """A lingering close, as HTTP servers do: shut the write side (the client reads the end of the answer), then
    drop what the client still sends until it closes or `seconds` pass, so the close sends no reset."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(seconds)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and conn.recv(65536):
            pass
    except OSError:
        pass


def endless(start: bytes, filler: bytes, seconds: float) -> Callable[[socket.socket, dict], None]:
    """An answer that sends `start`, then `filler` 64 KiB at a time for `seconds` or up to 512 MiB, counting what it
    sent in stats["sent"]."""

    def answer(conn: socket.socket, stats: dict) -> None:
        conn.sendall(start)
        piece = filler * 65536
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and stats["sent"] < 512 << 20:
            conn.sendall(piece)
            stats["sent"] += len(piece)

    return answer


# an SSE line that never ends
endless_line = endless(
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: ", b"x", seconds=60
)


def redirect(conn: socket.socket, stats: dict) -> None:
    conn.sendall(
        b"HTTP/1.1 302 Found\r\nLocation: http://user:s3cr3t@elsewhere.example/v1/chat/completions\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def spec(url: str, **over) -> LoadSpec:
    """One request to a hostile server; no prompt-length calibration before it (its requests would meet the same
    server first: loadgen/prompt_length.py bounds them apart, tests/loadgen/test_prompt_length.py)."""
    return LoadSpec(
        url=url,
        model="m",
        concurrency=1,
        duration_s=0,
        **{"max_requests": 1, "timeout_s": 120, "calibrate_prompts": False, **over},
    )


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


# --- HTTP/1.1 framing a server may break (FastTransport; loadgen/transport.py): probed on the old client, a chunk
# size of -6 moved the parser backwards, an endless loop on the event loop at 100% CPU that neither the request's
# timeout nor Ctrl-C could end; a chunk-size line without end grew the buffer (+166 MB in 20 s), each read copying it
# whole (11 s of CPU in 10 s); a 103 Early Hints head was taken for the answer (every request `no_content`); a
# Content-Length of -10 cut the body and the request counted as a success.


def _event(text: str) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"%s"},"finish_reason":null}]}\n\n' % text.encode()


SSE_BODY = _event(" a") * 4 + b"data: [DONE]\n\n"


def chunked(first_line: bytes) -> Callable[[socket.socket, dict], None]:
    """A chunked event stream whose first chunk-size line is `first_line` (no CRLF: it may never end)."""

    def answer(conn: socket.socket, stats: dict) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(first_line)
        time.sleep(30)

    return answer


# a chunk-size line that never ends
endless_chunk_size_line = endless(
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n1", b"0", seconds=30
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "line, says",
    [
        (b"-6\r\nabcdef\r\n", "chunk size '-6'; expected hex digits"),
        (b"zz\r\n", "chunk size 'zz'; expected hex digits"),
        (b"+10\r\n", "chunk size '+10'; expected hex digits"),
        (b"ffffffffffffffffffff\r\nabc", "over 1,073,741,824 bytes"),
        (b"1" + b"0" * 5000, "a chunk-size line longer than 4,096 bytes"),
    ],
)
def test_a_bad_chunk_size_ends_the_request_as_a_protocol_error(line, says):
    with raw_server(chunked(line)) as (url, _):
        started, cpu = time.monotonic(), time.process_time()
        res = run_load(spec(url, timeout_s=20))
        took, cpu = time.monotonic() - started, time.process_time() - cpu
    (rec,) = res.records
    assert rec["error_kind"] == "protocol_error", rec
    assert says in rec["error_text"] and "breaks HTTP/1.1 framing" in rec["error_text"], rec["error_text"]
    assert took < 10 and cpu < 5, (took, cpu)  # refused on arrival, not at the 20 s timeout


@pytest.mark.timeout(90)
def test_a_chunk_size_line_without_end_is_refused_at_a_bound():
    with raw_server(endless_chunk_size_line) as (url, stats):
        started = time.monotonic()
        res = run_load(spec(url, timeout_s=60))
        took = time.monotonic() - started
    (rec,) = res.records
    assert rec["error_kind"] == "protocol_error" and "longer than 4,096 bytes" in rec["error_text"], rec
    assert took < 10 and stats["sent"] < 64 << 20, (took, stats)


def trickle(conn: socket.socket, stats: dict) -> None:
    """A valid chunked event stream that never ends: an SSE comment every 0.1 s."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    conn.sendall(b"%x\r\n%s\r\n" % (len(_event(" a")), _event(" a")))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn.sendall(b"4\r\n: .\n\r\n")
        time.sleep(0.1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_the_timeout_bounds_a_request_in_total_not_per_read(transport):
    with raw_server(trickle) as (url, _):
        started = time.monotonic()
        res = run_load(spec(url, transport=transport, timeout_s=2))
        took = time.monotonic() - started
    (rec,) = res.records
    assert rec["error_kind"] == "timeout" and rec["ttft_ms"] is not None, rec
    assert 1.9 < took < 8, took


def early_hints(conn: socket.socket, stats: dict) -> None:
    # raw_server answers one request per connection, so the 200 says Connection: close; without it the client may
    # send its second request on this connection before the close arrives and read "disconnected" (a race of the
    # test server, not of the 1xx handling under test)
    conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
        % len(SSE_BODY)
    )
    conn.sendall(SSE_BODY)


@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_interim_1xx_heads_are_skipped(transport):
    with raw_server(early_hints) as (url, _):
        res = run_load(spec(url, transport=transport, max_requests=2))
    assert [r["error_kind"] for r in res.records] == [None, None], [
        (r["error_kind"], r["error_text"]) for r in res.records
    ]
    assert all(r["http_status"] == 200 and len(r["chunk_ns"]) == 4 for r in res.records)


@pytest.mark.parametrize("length", [b"-10", b"12abc", b"+5", b"1_0", b""])
def test_a_content_length_that_is_not_a_count_is_a_protocol_error(length):
    def answer(conn: socket.socket, stats: dict) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %s\r\n\r\n" % length)
        conn.sendall(SSE_BODY)

    with raw_server(answer) as (url, _):
        res = run_load(spec(url))
    (rec,) = res.records
    assert rec["error_kind"] == "protocol_error", rec  # it used to cut the body and count the request a success
    assert f"Content-Length {length.decode()!r}; expected a whole number of bytes" in rec["error_text"]


def test_two_content_lengths_that_disagree_are_a_protocol_error():
    def answer(conn: socket.socket, stats: dict) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Length: 3\r\n\r\n%s" % (len(SSE_BODY), SSE_BODY)
        )

    with raw_server(answer) as (url, _):
        res = run_load(spec(url))
    (rec,) = res.records
    assert rec["error_kind"] == "protocol_error" and "two Content-Lengths" in rec["error_text"], rec


# --- Model discovery (`wattbench load` without --model: GET /v1/models; wattbench_agent/fetch.py). Probed on the old
# client: a gzip body that unpacks to 1 GiB was decoded whole (6 MB -> 6 GB in the report: MemoryError), a body sent
# a byte at a time never ended (the timeout was per read), JSON nested 200,000 deep was a RecursionError traceback.


def _json_answer(body: bytes, encoding: str | None = None) -> Callable[[socket.socket, dict], None]:
    def answer(conn: socket.socket, stats: dict) -> None:
        enc = b"Content-Encoding: %s\r\n" % encoding.encode() if encoding else b""
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n" % (enc, len(body))
        )
        conn.sendall(body)

    return answer


def gzip_bomb(unpacked: int) -> bytes:
    """A gzip body of `unpacked` zero bytes (1 GiB packs to 4.5 MB)."""
    import zlib

    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    zeros = b"\0" * (16 << 20)
    return b"".join([c.compress(zeros) for _ in range(unpacked // len(zeros))] + [c.flush()])


def load_without_model(url: str) -> tuple[subprocess.CompletedProcess, float]:
    """`wattbench load` asking the server for its model; (the finished process, wall seconds)."""
    started = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "load", "--url", url, "--num-prompts", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    return p, time.monotonic() - started


@pytest.mark.timeout(120)
def test_a_compressed_model_list_is_refused_past_its_decoded_bound():
    with raw_server(_json_answer(gzip_bomb(1 << 30), "gzip")) as (url, _):
        p, took = load_without_model(url)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()  # one line, no traceback
    assert "the answer is over 4,194,304 bytes once decompressed; expected a small document" in line
    assert "/v1/models" in line and "give --model" in line
    assert took < 30, took


def test_model_discovery_holds_little_memory_against_a_gzip_bomb():
    from wattbench_agent.loadgen.endpoint import EndpointError, server_models

    with raw_server(_json_answer(gzip_bomb(1 << 30), "gzip")) as (url, _):
        tracemalloc.start()
        try:
            with pytest.raises(EndpointError, match="over 4,194,304 bytes once decompressed"):
                server_models(url)
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MiB held to refuse a 1 GiB body"


def test_a_model_list_sent_a_byte_at_a_time_ends_at_its_total_timeout():
    from wattbench_agent.loadgen.endpoint import EndpointError, server_models

    body = b'{"data": [{"id": "m"}]}' + b" " * 100

    def slow(conn: socket.socket, stats: dict) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        for b in body:
            conn.sendall(bytes([b]))
            time.sleep(0.25)

    with raw_server(slow) as (url, _):
        started = time.monotonic()
        with pytest.raises(EndpointError, match=r"no complete answer within 2 s; check --url, or give --model"):
            server_models(url, timeout_s=2)
        took = time.monotonic() - started
    assert took < 4, took  # each read came within the timeout: a per-read timeout never ended it (31 s here)


def test_a_model_list_nested_past_the_recursion_limit_is_one_line():
    depth = 200_000
    with raw_server(_json_answer(b'{"data": ' + b"[" * depth + b"]" * depth + b"}")) as (url, _):
        p, _took = load_without_model(url)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "answered JSON nested deeper than" in line and "give --model" in line, line


def test_a_model_list_in_an_encoding_not_asked_for_is_one_line():
    from wattbench_agent.loadgen.endpoint import EndpointError, server_models

    with (
        raw_server(_json_answer(b"\x00" * 64, "br")) as (url, _),
        pytest.raises(EndpointError, match=r"Content-Encoding 'br'; expected identity, gzip or deflate"),
    ):
        server_models(url)
