"""Reading HTTP/1.1 requests off a byte buffer: the one request parser of wattbench's own servers (the emulator's
OpenAI-compatible server and the load generator's test server), stdlib only.

`parse_request(buf)` returns (request, bytes consumed) once a whole request (head and Content-Length body) is in
`buf`; while more bytes are needed, (None, 0) before the head is complete and (None, n) after it, n being the bytes
the whole request takes (so a server can wait for them without parsing the head again); and raises `BadRequest`
(status, message) for a head that cannot be read: the caller answers once and closes, since the next request's
start is unknown. `buf` may be a bytearray (a server appending to it in place: no copy per packet).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
# A request must arrive whole within this many seconds of its first byte; a kept-alive connection idle this long is
# closed (the emulator's defaults; `wattbench emulate --request-timeout / --idle-timeout`).
REQUEST_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 60.0


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class HttpRequest:
    method: str
    target: str  # as sent, query string included
    version: str  # HTTP/1.0 | HTTP/1.1
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        return not (conn == "close" or (self.version == "HTTP/1.0" and conn != "keep-alive"))


def content_length(values: list[str]) -> tuple[int | None, str | None]:
    """The body length a request head declares (RFC 9110: 1*DIGIT; repeated only with one value), or an error."""
    if not values:
        return 0, None
    if len(set(values)) > 1:
        return None, f"Content-Length given {len(values)} times with different values ({', '.join(values)[:80]})"
    text = values[0]
    if not text.isascii() or not text.isdigit():
        return None, f"Content-Length {text[:40]!r} is not a non-negative integer"
    return int(text), None


def parse_request(
    buf: bytes | bytearray, max_head: int = MAX_HEAD_BYTES, max_body: int = MAX_BODY_BYTES, what: str = "the server"
) -> tuple[HttpRequest | None, int]:
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        if len(buf) > max_head:
            raise BadRequest(431, f"request head over {max_head // 1024} KiB")
        return None, 0
    if i > max_head:
        raise BadRequest(431, f"request head over {max_head // 1024} KiB")
    lines = buf[:i].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise BadRequest(400, f"bad request line {lines[0][:80]!r}; expected 'METHOD /path HTTP/1.1'")
    method, target, version = parts
    headers: dict[str, str] = {}
    lengths: list[str] = []
    for ln in lines[1:]:
        k, sep, v = ln.partition(":")
        if not sep:
            raise BadRequest(400, f"bad header line {ln[:80]!r}; expected 'Name: value'")
        k, v = k.strip().lower(), v.strip()
        if k == "content-length":
            lengths.append(v)
        headers[k] = v
    if headers.get("transfer-encoding", "").lower() == "chunked":
        raise BadRequest(411, "chunked request bodies are not supported; send Content-Length")
    n, problem = content_length(lengths)
    if problem is not None:
        raise BadRequest(400, f"{problem}; expected the body's length in bytes")
    if n > max_body:
        limit = f"{max_body // 2**20} MiB" if max_body >= 2**20 else f"{max_body} bytes"
        raise BadRequest(413, f"request body of {n} bytes is over {what}'s limit of {limit}")
    end = i + 4 + n
    if len(buf) < end:
        return None, end
    return HttpRequest(method, target, version, headers, bytes(buf[i + 4 : end])), end
