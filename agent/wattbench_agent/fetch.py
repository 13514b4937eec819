"""Small GETs from a server wattbench does not control: a model list, a version, a health answer, a /metrics page.

Every one is bounded, whatever the server sends:
- in time, in total: `timeout_s` covers connecting, the head and the whole body (httpx's own timeout is per read, so
  a body sent a byte every 2 s never ended);
- in size, decoded: at most `max_bytes` of body after any gzip or deflate is undone, decompressed piece by piece
  (a 6 MB gzip body that unpacks to 6 GB was decoded whole: MemoryError); other encodings are refused;
- in nesting: JSON deeper than the interpreter's recursion limit (about 1,000 levels) is one line, not a
  RecursionError traceback.
A breach is a `FetchError` whose message says what, where (the URL, credentials masked) and what was expected.
`status(url)` reads the head only, for the checks that need nothing else.

Agent-side code: httpx and the standard library.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from wattbench_agent.safety import redact_url

# A model list, a version or a health answer is a few KB (a router listing hundreds of models, under 1 MB).
MAX_JSON_BYTES = 4 << 20
# vLLM's /metrics page is 100-300 KB; a server with many adapters and histograms, a few MB.
MAX_METRICS_BYTES = 32 << 20


class FetchError(Exception):
    """A GET that could not be answered within its bounds; the message is one line."""


@dataclass
class Answer:
    url: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return parse_json(self.body, self.url)


def parse_json(body: bytes | str, where: str) -> Any:
    """JSON of a bounded body; ValueError (one line) for what is not JSON or nests past the recursion limit."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError(
            f"{redact_url(where)} answered JSON nested deeper than {sys.getrecursionlimit():,} levels; expected a "
            "flat document"
        ) from None


def _decoder(encoding: str | None, where: str):
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)
    if enc == "deflate":
        return zlib.decompressobj()
    raise FetchError(f"GET {where}: Content-Encoding {enc[:40]!r}; expected identity, gzip or deflate")


async def _read(resp: httpx.Response, where: str, max_bytes: int) -> bytes:
    """The body, decoded, refused once past `max_bytes`: never more than max_bytes + one piece in memory."""
    d = _decoder(resp.headers.get("content-encoding"), where)
    out = bytearray()
    async for raw in resp.aiter_raw():
        try:
            out += d.decompress(raw, max_bytes - len(out) + 1) if d is not None else raw
        except zlib.error as exc:
            raise FetchError(f"GET {where}: the body is not valid {resp.headers['content-encoding']} ({exc})") from None
        if len(out) > max_bytes:
            raise FetchError(
                f"GET {where}: the answer is over {max_bytes:,} bytes"
                + (" once decompressed" if d is not None else "")
                + "; expected a small document"
            )
    return bytes(out)


_TLS: list[ssl.SSLContext] = []


def _tls() -> ssl.SSLContext:
    """httpx's default TLS context, made once (20 ms a client otherwise: a health poll every 0.1 s makes many)."""
    if not _TLS:
        _TLS.append(httpx.create_ssl_context())
    return _TLS[0]


async def _get(url: str, headers: dict, timeout_s: float, max_bytes: int | None) -> Answer:
    where = redact_url(url) or url
    try:
        client = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False, verify=_tls())
        async with (
            asyncio.timeout(timeout_s),
            client as c,
            c.stream("GET", url, headers={"accept-encoding": "gzip, deflate", **headers}) as resp,
        ):
            body = await _read(resp, where, max_bytes) if max_bytes is not None else b""
            return Answer(url, resp.status_code, dict(resp.headers), body)
    except TimeoutError:
        raise FetchError(f"GET {where}: no complete answer within {timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"GET {where}: {type(exc).__name__}: {exc}") from None


def _run(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:  # called from inside an event loop: run on a thread of its own
        return pool.submit(asyncio.run, coro).result()


def get(url: str, headers: dict | None = None, timeout_s: float = 10.0, max_bytes: int = MAX_JSON_BYTES) -> Answer:
    """GET `url` within `timeout_s` in total and `max_bytes` decoded (FetchError otherwise), any status."""
    return _run(_get(url, dict(headers or {}), timeout_s, max_bytes))


def status(url: str, headers: dict | None = None, timeout_s: float = 5.0) -> int:
    """The HTTP status of GET `url`, its body unread (FetchError when there is no head within `timeout_s`)."""
    return _run(_get(url, dict(headers or {}), timeout_s, None)).status
