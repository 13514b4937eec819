"""One OpenAI-compatible streaming request -> one `requests` row. Never raises for request-level failures.

Timing: `sent_ns` is the instant the request bytes were handed to the socket (FastTransport; with httpx's own
transport, just before `client.send`); content-event times are the arrival times of the bytes that completed
the event (FastTransport stamps them in `data_received`; otherwise when the body iterator yields them).
SSE scanning is cheap: events are split on blank lines with bytes.find, only `data:` payloads are JSON-decoded.

Error kinds (`error_kind`; NULL = success): http_4xx, http_5xx, rate_limited (429; Retry-After in error_text),
timeout (the request's overall timeout_s), connect_error, disconnected (connection dropped before the stream
ended), malformed_sse (a data line that is not JSON; the rest of the stream is still read and timed),
stream_error (the server sent an error object in the stream), sse_event_too_long (an SSE event grew past
MAX_SSE_EVENT_BYTES without ending: the request is stopped there), http_3xx (a redirect, with where to: POSTs are
not re-sent elsewhere, give the URL it names), protocol_error (the answer breaks HTTP/1.1 framing: a negative or
non-numeric Content-Length, a chunk size that is not hex, over 1 GiB or on a line past 4 KiB; FastTransport, whose
checks are in transport.py; with transport="httpx" h11's own refusal is `disconnected`), empty_choices (the stream
ended with no content, having sent chunks
whose `choices` was empty), no_content (the stream ended with no content event), bad_usage (the usage the server
reported is not a count: negative, not an integer, past 2^31 - 1, not an object; the figure is named in error_text,
the request's token counts are NULL), cancelled (the run was
interrupted or the drain bound hit), client_error (anything else, with its type).

Connecting (TCP, and TLS for https) may take CONNECT_TIMEOUT_S, not the request's whole timeout_s: an https URL
naming a server that does not speak TLS fails in seconds, saying so, instead of after timeout_s.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from wattbench_agent.safety import redact_url

from .metrics import distribute_tokens, tpot_ms
from .transport import ProtocolViolation, timed_stream

_perf_ns = time.perf_counter_ns
_loads = json.loads


def endpoint_url(url: str, api: str) -> str:
    u = url.rstrip("/")
    if u.endswith("/chat/completions") or u.endswith("/completions"):
        return u
    path = "/chat/completions" if api == "chat" else "/completions"
    return u + path if u.endswith("/v1") else u + "/v1" + path


def build_body(spec: Any, prompt: str, max_tokens: int, messages: list[dict] | None = None) -> dict:
    """The request body; `messages` (a conversation's history and its next user turn) instead of the one prompt."""
    body: dict[str, Any] = {"model": spec.model}
    if spec.api == "chat":
        body["messages"] = messages if messages is not None else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(max_tokens=int(max_tokens), stream=True, stream_options={"include_usage": True})
    if spec.ignore_eos:
        body["ignore_eos"] = True  # vLLM, SGLang, TensorRT-LLM (trtllm-serve) accept it
        body["min_tokens"] = int(max_tokens)  # vLLM, SGLang; ignored where unknown
    for k, v in (spec.extra_body or {}).items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return body


def _retry_after(resp: httpx.Response) -> float | None:
    v = resp.headers.get("retry-after")
    if v is None:
        return None
    try:
        return max(float(v), 0.0)
    except ValueError:
        try:
            from email.utils import parsedate_to_datetime

            return max(parsedate_to_datetime(v).timestamp() - time.time(), 0.0)
        except Exception:
            return None


# A request keeps at most MAX_CHUNK_EVENTS content events one by one (chunk_ns, chunk_tokens); after that, events
# are coalesced into one entry per TAIL_BUCKET_NS: the time of the bucket's last event, the tokens (text) of all of
# its events. The record says where that began (chunks_exact: the leading entries that are single events, None when
# every event was kept), so inter-token gaps are read from the exact part only, while TTFT, E2E, TPOT (first and last
# event exact) and tokens per window (to within a bucket) stay exact. An endless stream holds ~16k events plus one
# entry a second, never gigabytes (docs/MEASUREMENT.md).
MAX_CHUNK_EVENTS = 16_384
TAIL_BUCKET_NS = 1_000_000_000
# One SSE event (its lines up to the blank line that ends it) may hold this many bytes: engines send a few tokens
# an event; a server whose line never ends used to grow the client's buffer without bound (230 MB in 20 s).
MAX_SSE_EVENT_BYTES = 1 << 20
# An error response's body is read this far (its first 500 characters are kept); the rest is not waited for.
MAX_ERROR_BODY_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 30.0
# A token count the engine reports must be an integer the warehouse's INTEGER columns hold. Anything else (-7, 1e308,
# "4", 3.5, a usage that is not an object) is not a count: the request is `bad_usage`, its counts NULL, and nothing is
# built on them (a usage of 1e308 printed output_tok_s = -2.6e22 and made the bundle unloadable).
MAX_TOKEN_COUNT = 2**31 - 1


def usage_problem(usage: object) -> str | None:
    """Why the server's `usage` cannot be believed (one line naming the figure), or None."""
    if not isinstance(usage, dict):
        return (
            f"the server's usage = {repr(usage)[:80]}; expected an object with integer prompt_tokens and "
            "completion_tokens (this request's token counts are not kept)"
        )
    for name in ("completion_tokens", "prompt_tokens"):
        v = usage.get(name)
        if v is None:
            continue
        counts = isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= MAX_TOKEN_COUNT
        if not counts or (isinstance(v, float) and not v.is_integer()):
            return (
                f"the server's usage {name} = {repr(v)[:80]}; expected an integer from 0 to {MAX_TOKEN_COUNT:,} "
                "(this request's token counts are not kept)"
            )
    return None


class SSEParser:
    """Incremental SSE scanner for OpenAI streaming chunks; `feed(arrival_ns, bytes)`.

    Cheap path (no JSON decode) for the common content chunk: framing checked ({...}), no usage / non-null
    finish_reason / error in it, and the first `"content":` (chat) or `"text":` (completions) value read in
    place (empty string, null, or a string whose escaped length is kept). Everything else (usage, finish,
    errors, reasoning deltas, odd shapes) goes through json.loads, which also flags malformed lines.
    """

    __slots__ = (
        "buf",
        "chat",
        "key",
        "chunk_ns",
        "lens",
        "raw",
        "keep_text",
        "usage",
        "finish",
        "empty",
        "err",
        "errtxt",
        "done",
        "exact",
        "tail_counts",
        "tail_start",
        "cap",
        "overflow",
    )

    def __init__(self, chat: bool, keep_text: bool = False):
        self.buf = b""
        self.chat = chat
        self.key = b'"content":' if chat else b'"text":'
        self.chunk_ns: list[int] = []
        self.lens: list[int] = []
        self.raw: list = []  # content texts (str) when keep_text
        self.keep_text = keep_text
        self.usage = None
        self.finish = None
        self.empty = 0
        self.err = None
        self.errtxt = None
        self.done = False
        self.exact: int | None = None  # entries before the coalesced tail (None: every event kept)
        self.tail_counts: list[int] = []  # events in each tail entry
        self.tail_start = 0
        self.cap = MAX_CHUNK_EVENTS
        self.overflow = False  # an event past MAX_SSE_EVENT_BYTES: the request is stopped

    def _coalesce(self, ns: int, length: int) -> None:
        """An event past the cap: into the current one-second tail entry, or a new one."""
        if self.exact is None:
            self.exact = len(self.chunk_ns)
        if self.tail_counts and ns - self.tail_start < TAIL_BUCKET_NS:
            self.chunk_ns[-1] = ns
            self.lens[-1] += length
            self.tail_counts[-1] += 1
        else:
            self.chunk_ns.append(ns)
            self.lens.append(length)
            self.tail_counts.append(1)
            self.tail_start = ns

    def events(self) -> int:
        """Content events seen (coalesced ones included)."""
        return len(self.chunk_ns) - len(self.tail_counts) + sum(self.tail_counts)

    def _too_long(self, size: int) -> None:
        self.overflow = self.done = True
        self.buf = b""
        if self.err is None:
            self.err = "sse_event_too_long"
            self.errtxt = (
                f"an SSE event grew past {MAX_SSE_EVENT_BYTES // 1024} KiB ({size:,} bytes) without ending; expected "
                "events ending in a blank line (the request was stopped there)"
            )

    def feed(self, ns: int, data: bytes) -> None:
        if self.done:
            return
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        pending = self.buf
        if pending:
            # an event not ended yet: look for its end in the new bytes only, appending in place, so a server that
            # sends a line a byte at a time costs the client linear, not quadratic, work
            if pending[-1:] == b"\r" and data[:1] == b"\n":  # CR LF split across two reads
                del pending[-1]
            scan_from = max(len(pending) - 1, 0)
            pending += data
            if pending.find(b"\n\n", scan_from) < 0:
                if len(pending) > MAX_SSE_EVENT_BYTES:
                    self._too_long(len(pending))
                return
            buf = bytes(pending)
        else:
            buf = data
        start = 0
        find = buf.find
        key = self.key
        while True:
            i = find(b"\n\n", start)
            if i < 0:
                break
            ev = buf[start:i]
            start = i + 2
            if ev[:6] == b"data: ":
                d = ev[6:]
            elif ev[:5] == b"data:":
                d = ev[5:]
            else:
                d = None
            if d is None or b"\n" in d:
                self._general(ev, ns)
            elif d == b"[DONE]":
                self.done = True
                break
            elif d[:1] != b"{" or d[-1:] != b"}" or b'"usage":{' in d or b'"finish_reason":"' in d or b'"error"' in d:
                self._data(d, ns)
            else:
                j = d.find(key)
                if j < 0:
                    self._data(d, ns)
                    continue
                k = j + len(key)
                c = d[k : k + 1]
                while c == b" ":
                    k += 1
                    c = d[k : k + 1]
                if c == b'"':
                    if d[k + 1 : k + 2] == b'"':
                        continue  # empty content (e.g. the role chunk)
                    e = d.find(b'"', k + 1)
                    while e > 0 and d[e - 1 : e] == b"\\":
                        # count the backslashes: an even number means the quote is not escaped
                        b = e - 1
                        while d[b - 1 : b] == b"\\":
                            b -= 1
                        if (e - b) % 2 == 0:
                            break
                        e = d.find(b'"', e + 1)
                    if e < 0:
                        self._data(d, ns)
                        continue
                    if self.exact is None and len(self.chunk_ns) < self.cap:
                        self.chunk_ns.append(ns)
                        self.lens.append(e - k - 1)
                    else:
                        self._coalesce(ns, e - k - 1)
                    if self.keep_text:
                        self.raw.append(_loads(d[k : e + 1]))
                elif c != b"n":  # not null: something else, let JSON decide
                    self._data(d, ns)
        if start >= len(buf) or self.done:
            self.buf = b""
        elif len(buf) - start > MAX_SSE_EVENT_BYTES:
            self._too_long(len(buf) - start)
        else:
            self.buf = bytearray(buf[start:])

    def _general(self, ev: bytes, ns: int) -> None:
        parts = [ln[5:] for ln in ev.split(b"\n") if ln.startswith(b"data:")]
        if not parts:
            return  # comment / event: / id: / retry: only
        data = b"\n".join(p[1:] if p.startswith(b" ") else p for p in parts)
        if data == b"[DONE]":
            self.done = True
            return
        self._data(data, ns)

    def _data(self, data: bytes, ns: int) -> None:
        try:
            obj = _loads(data)
            choices = obj.get("choices")
        except Exception:
            if self.err is None:
                self.err = "malformed_sse"
                self.errtxt = "malformed SSE data line: " + data[:200].decode("utf-8", "replace")
            return
        if choices:
            c = choices[0]
            if self.chat:
                d = c.get("delta") or {}
                text = d.get("content") or d.get("reasoning_content") or d.get("reasoning")
                if text is None and "text" in c:
                    text = c.get("text")
            else:
                text = c.get("text")
                if text is None and "delta" in c:
                    text = (c.get("delta") or {}).get("content")
            if text:
                if self.exact is None and len(self.chunk_ns) < self.cap:
                    self.chunk_ns.append(ns)
                    self.lens.append(len(text))
                else:
                    self._coalesce(ns, len(text))
                if self.keep_text:
                    self.raw.append(text)
            fr = c.get("finish_reason")
            if fr is not None:
                self.finish = fr
        u = obj.get("usage")
        if u:
            self.usage = u
        elif not choices:
            if obj.get("error") is not None or obj.get("object") == "error":
                if self.err is None:
                    e = obj.get("error", obj)
                    self.err = "stream_error"
                    self.errtxt = "error event in stream: " + json.dumps(e)[:300]
            else:
                self.empty += 1


async def _read_some(resp: httpx.Response, limit: int) -> bytes:
    """Up to `limit` bytes of a response body (an error's): an endless one is not waited for."""
    out = bytearray()
    async for data in resp.aiter_raw():
        out += data
        if len(out) >= limit:
            break
    return bytes(out[:limit])


class RequestRunner:
    """Sends requests for one load point and turns each into a record (dict keyed by `requests` columns).

    With FastTransport the request goes straight to the transport (httpx.Request in, httpx.Response out; the
    AsyncClient's cookie/auth/redirect machinery is not needed here) and the SSE body is scanned inside the
    protocol's `data_received` (one task wake-up per request instead of one per read)."""

    def __init__(self, spec: Any, client: httpx.AsyncClient | None, load_point_id: str, tokenizer=None):
        self.spec = spec
        self.client = client
        self.url = httpx.URL(endpoint_url(spec.url, spec.api))
        self.lp = load_point_id
        self.tok = tokenizer
        self.headers = httpx.Headers(
            {
                "content-type": "application/json",
                "accept": "text/event-stream",
                "accept-encoding": "identity",
                "user-agent": "wattbench-loadgen",
                **(spec.headers or {}),
            }
        )
        t = float(spec.timeout_s)
        self.timeout_ext = {"connect": min(t, CONNECT_TIMEOUT_S), "read": t, "write": t, "pool": t}
        self.is_chat = spec.api == "chat"
        tr = getattr(client, "_transport", None) if client is not None else None
        from .transport import FastTransport

        self.fast = tr if isinstance(tr, FastTransport) else None

    def encode(self, prompt: str, max_tokens: int, messages: list[dict] | None = None) -> bytes:
        return json.dumps(build_body(self.spec, prompt, max_tokens, messages), separators=(",", ":")).encode()

    async def run(
        self,
        request_id: str,
        body: bytes,
        input_tokens: int,
        max_tokens: int,
        scheduled_ns: int,
        prompt: str | None = None,
        on_status: Callable[[int, float | None], None] | None = None,
        number: int | None = None,
        text_out: list[str] | None = None,
    ) -> dict:
        """One request. `number`: the request's number in its load point (x-request-id = the spec's
        request_id_prefix + it, as vllm bench serve's); `text_out`: the streamed text is appended to it (a
        conversation's next turn resends it)."""
        p = SSEParser(self.is_chat, keep_text=self.tok is not None or text_out is not None)
        headers = self.headers
        if self.spec.request_id_prefix is not None and number is not None:
            headers = headers.copy()
            headers["x-request-id"] = f"{self.spec.request_id_prefix}{number}"
        status = None
        sent_ns = None
        retry_after = None
        fail_ns = None
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                req = httpx.Request(
                    "POST", self.url, content=body, headers=headers, extensions={"timeout": self.timeout_ext}
                )
                sent_ns = _perf_ns()
                if self.fast is not None:
                    resp = await self.fast.handle_async_request(req)
                else:
                    resp = await self.client.send(req, stream=True)
                sent_ns = req.extensions.get("wattbench.sent_ns", sent_ns)
                status = resp.status_code
                try:
                    if status >= 400:
                        raw = await _read_some(resp, MAX_ERROR_BODY_BYTES)
                        retry_after = _retry_after(resp)
                        p.err = "rate_limited" if status == 429 else f"http_{status // 100}xx"
                        txt = raw[:500].decode("utf-8", "replace")
                        if status == 429:
                            txt = f"Retry-After: {resp.headers.get('retry-after')}; {txt}"
                        p.errtxt = f"HTTP {status}: {txt}"
                    elif 300 <= status < 400:
                        where = resp.headers.get("location")
                        p.err = "http_3xx"
                        p.errtxt = (
                            f"HTTP {status}: a redirect"
                            + (f" to {redact_url(where)}" if where else " without a Location")
                            + "; wattbench does not follow it (a POST is not re-sent elsewhere): give the URL it names"
                        )
                    else:
                        ts = timed_stream(resp)
                        if ts is not None:
                            fut = asyncio.get_running_loop().create_future()

                            def on_done(exc, fut=fut):
                                if not fut.done():
                                    fut.set_result(exc)

                            def on_data(ns, data, fut=fut):
                                p.feed(ns, data)
                                if p.overflow and not fut.done():  # stop reading; aclose drops the connection
                                    fut.set_result(None)

                            ts.set_consumer(on_data, on_done)
                            exc = await fut
                            if exc is not None:
                                raise exc
                        else:
                            async for data in resp.aiter_raw():
                                p.feed(_perf_ns(), data)
                                if p.overflow:
                                    break
                        if p.buf.strip() and not p.done:
                            p.feed(_perf_ns(), b"\n\n")
                finally:
                    await resp.aclose()
        except TimeoutError:
            fail_ns = _perf_ns()
            p.err, p.errtxt = "timeout", f"no complete response within timeout_s={self.spec.timeout_s}"
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            fail_ns = _perf_ns()
            p.err, p.errtxt = "connect_error", f"{type(exc).__name__}: {exc}"
        except ProtocolViolation as exc:
            fail_ns = _perf_ns()
            p.err, p.errtxt = "protocol_error", f"the response breaks HTTP/1.1 framing: {exc}"
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            fail_ns = _perf_ns()
            p.err, p.errtxt = "disconnected", f"{type(exc).__name__}: {exc}"
        except httpx.TimeoutException as exc:
            fail_ns = _perf_ns()
            p.err, p.errtxt = "timeout", f"{type(exc).__name__}: {exc}"
        except asyncio.CancelledError:
            fail_ns = _perf_ns()
            p.err, p.errtxt = "cancelled", "run interrupted or drain bound reached before the response ended"
            rec = self._record(request_id, scheduled_ns, sent_ns, fail_ns, status, p, input_tokens, max_tokens, prompt)
            raise _Cancelled(rec) from None
        except Exception as exc:  # never let one request stop the run
            fail_ns = _perf_ns()
            p.err, p.errtxt = "client_error", f"{type(exc).__name__}: {exc}"
        if on_status is not None and status is not None:
            on_status(status, retry_after)
        if p.usage is not None and p.err is None:
            problem = usage_problem(p.usage)
            if problem:
                p.err, p.errtxt = "bad_usage", problem
        if p.err is None and not p.chunk_ns:
            fail_ns = _perf_ns()
            if p.empty:
                p.err, p.errtxt = "empty_choices", f"{p.empty} chunk(s) with empty choices and no content"
            else:
                p.err, p.errtxt = "no_content", "the stream ended without a content event"
        if p.err is not None and fail_ns is None:
            fail_ns = _perf_ns()
        if text_out is not None:
            text_out.append("".join(p.raw))
        return self._record(request_id, scheduled_ns, sent_ns, fail_ns, status, p, input_tokens, max_tokens, prompt)

    def _record(
        self, request_id, scheduled_ns, sent_ns, fail_ns, status, p: SSEParser, input_tokens, max_tokens, prompt
    ) -> dict:
        lied = p.usage is not None and usage_problem(p.usage) is not None
        usage = {} if lied else (p.usage or {})
        chunk_ns = p.chunk_ns
        n_events = p.events()
        ct = usage.get("completion_tokens")
        pt = usage.get("prompt_tokens")
        if lied:  # not counted: no estimate stands in for a figure the server gave wrongly
            ct = pt = source = None
        elif ct is not None:
            ct, source = int(ct), "usage"
        elif self.tok is not None and p.raw:
            ct = len(self.tok.encode("".join(p.raw)))
            source = "tokenizer"
        else:
            ct = n_events if n_events else None
            source = "estimate"
        if pt is not None:
            pt = int(pt)
        elif not lied:
            if self.tok is not None and prompt is not None:
                pt = len(self.tok.encode(prompt))
            else:
                pt = input_tokens
        if lied:
            chunk_tokens = None
        elif source == "estimate":
            chunk_tokens = [1] * (len(chunk_ns) - len(p.tail_counts)) + p.tail_counts
        else:
            events = ([1] * (len(chunk_ns) - len(p.tail_counts)) + p.tail_counts) if p.tail_counts else None
            chunk_tokens = distribute_tokens(int(ct or 0), p.lens, events) if n_events else []
        ok = p.err is None
        ttft = e2e = None
        first = chunk_ns[0] if chunk_ns else None
        last = chunk_ns[-1] if chunk_ns else None
        if sent_ns is not None:
            if first is not None:
                ttft = (first - sent_ns) / 1e6
            if ok and last is not None:
                e2e = (last - sent_ns) / 1e6
            elif fail_ns is not None:
                e2e = (max(fail_ns, last or 0) - sent_ns) / 1e6  # failed: time to failure
        return {
            "load_point_id": self.lp,
            "request_id": request_id,
            "scheduled_ns": scheduled_ns,
            "sent_ns": sent_ns,
            "first_token_ns": first,
            "last_token_ns": last,
            "ttft_ms": ttft,
            "e2e_ms": e2e,
            "tpot_ms": tpot_ms(e2e, ttft, ct) if ok else None,
            "prompt_tokens": pt,
            "completion_tokens": ct,
            "token_count_source": source,
            "input_tokens_requested": int(input_tokens),
            "max_tokens": int(max_tokens),
            "finish_reason": p.finish,
            "http_status": status,
            "error_kind": p.err,
            "error_text": p.errtxt,
            "chunk_ns": chunk_ns,
            "chunk_tokens": chunk_tokens,
            "chunks_exact": p.exact,
            "in_window": None,  # set by the runner
        }


class _Cancelled(asyncio.CancelledError):
    """CancelledError carrying the record of the request it interrupted."""

    def __init__(self, record: dict):
        super().__init__("cancelled")
        self.record = record
