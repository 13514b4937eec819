"""`FastTransport`: an httpx transport for many concurrent streaming HTTP/1.1 requests from one event loop.

Why: httpx's own transport (httpcore + h11, pure Python) costs tens of microseconds per SSE event and its
connection pool does work proportional to the number of connections on every request; past a few dozen
streams on a small host the client, not the server, sets the pace (see docs/LOADGEN.md for the profile).
This transport keeps httpx's API (Client, Request, Response, exceptions) and replaces the wire layer with
an asyncio.Protocol: incremental HTTP/1.1 response parsing (status line, headers, chunked or
Content-Length bodies) in `data_received`, an O(1) LIFO pool of keep-alive connections per origin, and an
arrival timestamp (perf_counter_ns, taken first thing in `data_received`) on every body piece, so SSE
event times are the times the bytes reached the process, not the time a coroutine got round to them.

Extensions: the request's `extensions["wattbench.sent_ns"]` is set to the instant the request bytes were
handed to the socket; `response.stream` (unwrapped via `timed_stream(response)`) has `aiter_timed()`
yielding (arrival_ns, bytes). Timeouts: connect and pool come from the httpx timeout; read applies to the
response head; the body is bounded by the caller's overall deadline (wattbench wraps each request in one).
TLS works (https URLs); HTTP/2 is not spoken (use transport="httpx" with http2 for that).

What a server sends is bounded before it is believed (`ProtocolViolation`, which the client records as
`protocol_error`): interim 1xx heads (103 Early Hints) are skipped; a Content-Length must be digits (no sign) and
agree with any other; a chunk size must be hex digits naming at most MAX_CHUNK_BYTES, its line (with extensions) at
most MAX_CHUNK_LINE_BYTES; trailers at most MAX_HEAD_BYTES. A size of `-6` used to move the parser backwards (an
endless loop on the event loop: no timeout or Ctrl-C could end it), and a size line without end grew the buffer
without bound.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator

import httpx

_perf_ns = time.perf_counter_ns

_H_HEAD, _H_BODY_CL, _H_BODY_CHUNK, _H_BODY_EOF, _H_DONE = range(5)
# A server that speaks TLS completes a handshake in milliseconds; one that does not (a plain HTTP server behind an
# https URL) never answers it: fail after this, not after the request's whole timeout.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# A response head (and a chunked body's trailers) may hold this many bytes.
MAX_HEAD_BYTES = 65536
# A chunk-size line is a few hex digits and perhaps an extension; one chunk may announce at most 1 GiB (engines send
# a few events a chunk): past either the answer is not HTTP/1.1 a client can follow.
MAX_CHUNK_LINE_BYTES = 4096
MAX_CHUNK_BYTES = 1 << 30
_HEX = frozenset(b"0123456789abcdefABCDEF")


class ProtocolViolation(httpx.RemoteProtocolError):
    """The server's answer breaks HTTP/1.1 framing (a negative or non-numeric Content-Length, a bad chunk size):
    the request ends with this error (`protocol_error`) and the connection is dropped."""


def _content_length(value: bytes) -> int:
    if not value or not value.isdigit() or len(value) > 18:  # isdigit on bytes: ASCII digits only, no sign or space
        raise ProtocolViolation(
            f"Content-Length {value[:40].decode('latin-1')!r}; expected a whole number of bytes (digits only, >= 0)"
        )
    return int(value)


def _chunk_size_problem(line: bytes) -> str:
    return f"chunk size {line[:40].decode('latin-1')!r}; expected hex digits (a chunk's length in bytes, >= 0)"


def _chunk_size(line: bytes) -> int:
    digits = line.split(b";", 1)[0].strip(b" \t")
    if not digits or not _HEX.issuperset(digits):
        raise ProtocolViolation(_chunk_size_problem(line))
    size = int(digits[-17:], 16) if len(digits.lstrip(b"0")) <= 16 else MAX_CHUNK_BYTES + 1
    if size > MAX_CHUNK_BYTES:
        raise ProtocolViolation(
            f"chunk size {digits[:40].decode('latin-1')} (hex) is over {MAX_CHUNK_BYTES:,} bytes; expected at most "
            "1 GiB a chunk"
        )
    return size


def _interim(head: bytes) -> bool:
    """An informational (1xx) head other than 101: the real answer follows it on the same connection."""
    status = head[9:12]
    return head[:7] == b"HTTP/1." and status[:1] == b"1" and status != b"101" and head[12:13] in (b" ", b"\r", b"")


class _Body(httpx.AsyncByteStream):
    __slots__ = ("_q", "_waiter", "_done", "_exc", "_conn", "_consumer", "_on_done")

    def __init__(self, conn: _Conn):
        self._q: deque = deque()
        self._waiter: asyncio.Future | None = None
        self._done = False
        self._exc: BaseException | None = None
        self._conn = conn
        self._consumer = None
        self._on_done = None

    def set_consumer(self, on_data, on_done) -> None:
        """Deliver (arrival_ns, bytes) straight from `data_received` to `on_data` (no task wake-up per read);
        `on_done(exc_or_None)` when the body ends. Queued data is delivered first."""
        self._consumer = on_data
        self._on_done = on_done
        q = self._q
        while q:
            ns, data = q.popleft()
            on_data(ns, data)
        if self._done:
            on_done(self._exc)

    # called by the protocol
    def _push(self, ns: int, data: bytes) -> None:
        c = self._consumer
        if c is not None:
            c(ns, data)
            return
        self._q.append((ns, data))
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _finish(self, exc: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        if exc is not None and self._exc is None:
            self._exc = exc
        if self._on_done is not None:
            self._on_done(self._exc)
            return
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def aiter_timed(self) -> AsyncIterator[tuple[int, bytes]]:
        q = self._q
        while True:
            if q:
                # hand over everything that is queued in one go
                while q:
                    yield q.popleft()
                continue
            if self._done:
                if self._exc is not None:
                    raise self._exc
                return
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for _ns, data in self.aiter_timed():
            yield data

    async def aclose(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            if not self._done:
                conn._abort()  # unread body: the connection cannot be reused


class _Conn(asyncio.Protocol):
    def __init__(self, pool: FastTransport, key: tuple):
        self.pool = pool
        self.key = key
        self.tr: asyncio.Transport | None = None
        self.closed = False
        self.state = _H_DONE
        self.buf = b""
        self.head_fut: asyncio.Future | None = None
        self.body: _Body | None = None
        self.remaining = 0  # Content-Length left, or bytes left in the current chunk (+2 for CRLF)
        self.chunk_phase = 0  # 0: want size line, 1: in data, 2: want trailer end
        self.keep_alive = True
        self.got_bytes = False

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.tr = transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        err = httpx.RemoteProtocolError("server closed the connection" + (f": {exc}" if exc else ""))
        if self.head_fut is not None and not self.head_fut.done():
            self.head_fut.set_exception(err)
        if self.state == _H_BODY_EOF and self.body is not None:
            self.state = _H_DONE
            self.body._finish()
        elif self.state in (_H_BODY_CL, _H_BODY_CHUNK) and self.body is not None:
            self.state = _H_DONE
            self.body._finish(httpx.RemoteProtocolError("peer closed connection without sending complete message body"))
        self.pool._forget(self)

    def data_received(self, data: bytes) -> None:
        ns = _perf_ns()
        self.got_bytes = True
        st = self.state
        if st == _H_HEAD:
            buf = self.buf + data if self.buf else data
            while True:
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        self._fail_head(httpx.RemoteProtocolError("response head too large"))
                    self.buf = buf
                    return
                if not _interim(buf[:i]):
                    break
                buf = buf[i + 4 :]  # 103 Early Hints and the like: the answer is the head after it
            self.buf = b""
            try:
                self._parse_head(buf[:i])
            except ProtocolViolation as exc:
                self._fail_head(exc)
                return
            except Exception as exc:  # malformed head
                self._fail_head(httpx.RemoteProtocolError(f"malformed response head: {exc}"))
                return
            data = buf[i + 4 :]
            st = self.state
            if not data:
                if st == _H_BODY_CL and self.remaining == 0:
                    self._body_done()
                return
        if st == _H_BODY_CHUNK:
            self._feed_chunked(ns, data)
        elif st == _H_BODY_CL:
            n = len(data)
            if n >= self.remaining:
                piece = data[: self.remaining] if n > self.remaining else data
                if piece:
                    self.body._push(ns, piece)
                self._body_done()
            else:
                self.remaining -= n
                self.body._push(ns, data)
        elif st == _H_BODY_EOF:
            self.body._push(ns, data)
        # bytes after a complete response (or unsolicited) are ignored

    def eof_received(self):
        return False

    # -- parsing
    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if not parts[0].startswith(b"HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        headers = []
        chunked = False
        length = None
        conn_close = parts[0] == b"HTTP/1.0"
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            k = k.strip()
            v = v.strip()
            headers.append((k, v))
            lk = k.lower()
            if lk == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            elif lk == b"content-length":
                n = _content_length(v)
                if length is not None and n != length:
                    raise ProtocolViolation(f"two Content-Lengths ({length} and {n}); expected one")
                length = n
            elif lk == b"connection":
                lv = v.lower()
                if b"close" in lv:
                    conn_close = True
                elif b"keep-alive" in lv:
                    conn_close = False
        self.keep_alive = not conn_close
        self.body = _Body(self)
        if chunked:
            self.state = _H_BODY_CHUNK
            self.chunk_phase = 0
        elif length is not None:
            self.state = _H_BODY_CL
            self.remaining = length
        elif status in (204, 304) or 100 <= status < 200:
            self.state = _H_BODY_CL
            self.remaining = 0
        else:
            self.state = _H_BODY_EOF
            self.keep_alive = False
        fut = self.head_fut
        self.head_fut = None
        if fut is not None and not fut.done():
            fut.set_result((status, headers, self.body))

    def _feed_chunked(self, ns: int, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        self.buf = b""
        pos = 0
        n = len(buf)
        out = []
        while pos < n:
            ph = self.chunk_phase
            if ph == 1:  # chunk data followed by CRLF; `remaining` counts both
                rem = self.remaining
                take = rem if rem <= n - pos else n - pos
                payload = min(take, rem - 2) if rem > 2 else 0
                if payload > 0:
                    out.append(buf[pos : pos + payload])
                self.remaining = rem - take
                pos += take
                if self.remaining == 0:
                    self.chunk_phase = 0
            elif ph == 0:  # size line
                j = buf.find(b"\r\n", pos)
                if j < 0 or j - pos > MAX_CHUNK_LINE_BYTES:
                    if n - pos > MAX_CHUNK_LINE_BYTES:
                        why = f"a chunk-size line longer than {MAX_CHUNK_LINE_BYTES:,} bytes; expected hex digits"
                        self._body_failed(out, ns, why)
                        return
                    self.buf = buf[pos:]
                    break
                line = buf[pos:j]
                try:
                    # the usual line (a few hex digits) in two C calls; anything else is checked in full
                    size = int(line, 16) if len(line) <= 8 and line.isalnum() else _chunk_size(line)
                except ValueError:
                    size = -1
                except ProtocolViolation as exc:
                    self._body_failed(out, ns, str(exc))
                    return
                if size < 0:
                    self._body_failed(out, ns, _chunk_size_problem(line))
                    return
                pos = j + 2
                if size == 0:
                    self.chunk_phase = 2
                else:
                    self.remaining = size + 2
                    self.chunk_phase = 1
            else:  # trailers until an empty line
                j = buf.find(b"\r\n", pos)
                if j < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        self._body_failed(out, ns, f"trailers longer than {MAX_HEAD_BYTES:,} bytes")
                        return
                    self.buf = buf[pos:]
                    break
                line_empty = j == pos
                pos = j + 2
                if line_empty:
                    if out:
                        self._push_joined(ns, out)
                        out = []
                    self._body_done()
                    return
        if out:
            self._push_joined(ns, out)

    def _body_failed(self, out: list, ns: int, why: str) -> None:
        """The body breaks chunked framing: what arrived before is delivered, then the request ends with the error
        and the connection is dropped (its bytes cannot be trusted to frame another response)."""
        if out:
            self._push_joined(ns, out)
        self.state = _H_DONE
        body = self.body
        self.body = None
        if body is not None:
            body._finish(ProtocolViolation(why))
            body._conn = None
        self._abort()

    def _push_joined(self, ns: int, out: list) -> None:
        piece = out[0] if len(out) == 1 else b"".join(out)
        if piece:
            self.body._push(ns, piece)

    def _body_done(self) -> None:
        self.state = _H_DONE
        body = self.body
        self.body = None
        if body is not None:
            body._finish()
            body._conn = None
        if self.keep_alive and not self.closed:
            self.pool._release(self)
        else:
            self._abort()

    def _fail_head(self, exc: BaseException) -> None:
        fut = self.head_fut
        self.head_fut = None
        if fut is not None and not fut.done():
            fut.set_exception(exc)
        self._abort()

    def _abort(self) -> None:
        self.closed = True
        if self.tr is not None:
            self.tr.abort()
        self.pool._forget(self)

    # -- request
    def send(self, raw: bytes, fut: asyncio.Future) -> int:
        self.state = _H_HEAD
        self.head_fut = fut
        self.got_bytes = False
        self.buf = b""
        ns = _perf_ns()
        self.tr.write(raw)
        return ns


class FastTransport(httpx.AsyncBaseTransport):
    """See the module docstring. `max_connections` None = unlimited (the load generator bounds concurrency)."""

    def __init__(self, verify: bool | ssl.SSLContext = True, max_connections: int | None = None):
        self._idle: dict[tuple, list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._ssl = verify if isinstance(verify, ssl.SSLContext) else None
        self._verify = verify
        self._sem = asyncio.Semaphore(max_connections) if max_connections else None

    def _ssl_ctx(self):
        if self._ssl is None:
            ctx = ssl.create_default_context()
            if not self._verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        return self._ssl

    def _release(self, conn: _Conn) -> None:
        self._idle.setdefault(conn.key, []).append(conn)

    def _forget(self, conn: _Conn) -> None:
        self._all.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, key: tuple, timeout: float | None) -> _Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls = scheme == "https"
        try:
            coro = loop.create_connection(
                lambda: _Conn(self, key),
                host,
                port,
                ssl=self._ssl_ctx() if tls else None,
                server_hostname=host if tls else None,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls else None,
            )
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when a cancel lands just as the
            # awaited future completes, swallowing the cancel (a Ctrl-C then never stopped that stream)
            async with asyncio.timeout(timeout or None):
                _tr, conn = await coro
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out after {timeout:g} s") from None
        except OSError as exc:
            if tls and ("handshake" in str(exc).lower() or isinstance(exc, ssl.SSLError)):
                raise httpx.ConnectError(
                    f"TLS with {host}:{port} failed ({exc}); the URL says https: does the server speak TLS there? "
                    "(a plain HTTP server never answers a TLS handshake: use http://)"
                ) from exc
            raise httpx.ConnectError(f"connect to {host}:{port}: {exc}") from exc
        self._all.add(conn)
        return conn

    async def warm(self, url: str, n: int, timeout: float | None = 10.0) -> int:
        """Open up to n idle keep-alive connections to url's origin ahead of time; returns how many opened."""
        u = httpx.URL(url)
        key = (u.scheme, u.host, u.port or (443 if u.scheme == "https" else 80))
        have = len(self._idle.get(key, ()))
        made = 0
        batch = 64
        for start in range(have, n, batch):
            conns = await asyncio.gather(
                *[self._connect(key, timeout) for _ in range(min(batch, n - start))], return_exceptions=True
            )
            for c in conns:
                if isinstance(c, _Conn):
                    self._release(c)
                    made += 1
        return made

    @staticmethod
    def _encode(request: httpx.Request, body: bytes) -> bytes:
        url = request.url
        target = url.raw_path or b"/"
        lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
        has_len = False
        for k, v in request.headers.raw:
            lk = k.lower()
            if lk == b"content-length":
                has_len = True
            elif lk == b"transfer-encoding":
                continue
            lines.append(k + b": " + v)
        if not has_len and (body or request.method in ("POST", "PUT", "PATCH")):
            lines.append(b"Content-Length: " + str(len(body)).encode())
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
        key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = b"".join([c async for c in request.stream])
        raw = self._encode(request, body)
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            idle = self._idle.get(key)
            conn = None
            while idle:
                c = idle.pop()
                if not c.closed:
                    conn = c
                    break
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, timeouts.get("connect"))
            fut = loop.create_future()
            sent_ns = conn.send(raw, fut)
            request.extensions["wattbench.sent_ns"] = sent_ns
            read_to = timeouts.get("read")
            try:
                async with asyncio.timeout(read_to or None):  # not wait_for: see _connect
                    status, headers, body_stream = await fut
            except TimeoutError:
                conn._abort()
                raise httpx.ReadTimeout("no response head within the read timeout", request=request) from None
            except httpx.RemoteProtocolError:
                if reused and not conn.got_bytes and attempt == 0:
                    continue  # a stale keep-alive connection: retry once on a fresh one
                raise
            except BaseException:
                conn._abort()
                raise
            return httpx.Response(
                status, headers=headers, stream=body_stream, request=request, extensions={"http_version": b"HTTP/1.1"}
            )
        raise httpx.RemoteProtocolError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn._abort()
        self._idle.clear()


def timed_stream(response: httpx.Response):
    """The FastTransport body under an httpx response (or None when another transport made it)."""
    s = response.stream
    for _ in range(3):
        if isinstance(s, _Body):
            return s
        s = getattr(s, "_stream", None)
    return None
