"""A loopback OpenAI-compatible streaming server with known timing, for tests and the fidelity benchmark.

    python -m wattbench_agent.loadgen.testserver --port 0 --ttft-ms 50 --itl-ms 10 --tokens 64

prints `LISTENING <port>` when ready. Raw asyncio.Protocol HTTP/1.1 (keep-alive, chunked SSE) on uvloop, so
the server's own cost per event is a few microseconds. Content event k of a request is written at
recv + ttft + k * itl (scheduled, not drifting); the server records, per request, what it actually did:
the instant the request was complete (recv_ns), the writes of the first and last content events, so
`GET /stats` gives the server-observed TTFT and request time (recv -> last content write) and the pooled
gaps between content writes. `POST /reset` clears them. `--stall-every K --stall-ms S`: every K-th content event
(k = K, 2K, ...) comes S ms late and so do the ones after it (a step that carried another request's prefill, as
the step decomposition sees it: loadgen/steps.py). `--hold-every K --hold-events H`: the last H content events of
every K (k mod K >= K - H) are written together at the time of the last of them (a host that held the tokens the
engine made and delivered them at once: a delivery stall to the step decomposition).

Shape of a stream (like vLLM): a role chunk with empty content at once, then the content chunks, a final
chunk with finish_reason, a usage chunk (choices: []), `data: [DONE]`.
Tokens: `--tokens N` forces N output tokens; 0 (default) uses the request's max_tokens.
Fault injection, by model name `mode:<kind>` or header `x-test-mode`, or the server default `--mode`:
ok, http_400, http_500, 429 (Retry-After: 0), hang (role chunk then silence), hang_head (no response),
drop (close mid-stream), malformed (one non-JSON data line), empty_choices (no content, choices []),
no_usage, multi (2 tokens per chunk), stream_error, mix (cycles through all of these except hang*).
A server of known capacity: `--slots N` generates at most N streams at once; a request beyond them waits, in order of
arrival, for a slot (its TTFT includes the wait), so past N / (TTFT + tokens x ITL) requests/s its queue grows
without bound. `--die-after N`: the process exits at once when request N + 1 arrives (a server that fails mid-run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

from wattbench_agent.http_request import BadRequest, parse_request

_ns = time.perf_counter_ns
MIX = (
    "ok",
    "http_500",
    "429",
    "drop",
    "malformed",
    "empty_choices",
    "ok",
    "no_usage",
    "http_400",
    "stream_error",
    "multi",
    "ok",
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Server:
    def __init__(
        self,
        ttft_ms: float,
        itl_ms: float,
        tokens: int,
        mode: str = "ok",
        stall_every: int = 0,
        stall_ms: float = 0,
        slots: int = 0,
        die_after: int = 0,
        hold_every: int = 0,
        hold_events: int = 0,
    ):
        self.hold_every = int(hold_every)
        self.hold_events = int(hold_events)
        self.slots = int(slots)  # 0: no limit
        self.die_after = int(die_after)
        self.active = 0
        self.waiting: list = []  # (conn, start) waiting for a slot, in arrival order
        self.ttft_ns = int(ttft_ms * 1e6)
        self.itl_ns = int(itl_ms * 1e6)
        self.stall_every = int(stall_every)
        self.stall_ns = int(stall_ms * 1e6)
        self.tokens = tokens
        self.mode = mode
        self.records: list[tuple] = []  # (recv_ns, first_ns, last_ns, n_events, mode)
        self.gaps_us: list[int] = []
        self.count = 0
        self._cache: dict = {}

    def held_until(self, k: int) -> int:
        """The event whose scheduled time content event k is written at: the last of its hold group, else itself."""
        if self.hold_every and k % self.hold_every >= self.hold_every - self.hold_events:
            return k - k % self.hold_every + self.hold_every - 1
        return k

    def release(self) -> None:
        """A stream ended: its slot goes to the request that has waited longest."""
        self.active -= 1
        while self.waiting and self.active < self.slots:
            conn, start = self.waiting.pop(0)
            if not conn.closed:
                self.active += 1
                conn.slot = True
                start()

    def frames(self, model: str, chat: bool):
        key = (model, chat)
        f = self._cache.get(key)
        if f is None:
            base = {"id": "cmpl-0123456789abcdef0123456789abcdef", "created": 1700000000, "model": model}
            if chat:
                obj = "chat.completion.chunk"

                def ch(delta, fr=None):
                    return {
                        **base,
                        "object": obj,
                        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr}],
                    }

                role = _sse(ch({"role": "assistant", "content": ""}))
                tok = _sse(ch({"content": " tok"}))
                tok2 = _sse(ch({"content": " tok tok"}))
                fin = _sse(ch({}, "length"))
            else:
                obj = "text_completion"

                def ch(text, fr=None):
                    return {
                        **base,
                        "object": obj,
                        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": fr}],
                    }

                role = b""
                tok = _sse(ch(" tok"))
                tok2 = _sse(ch(" tok tok"))
                fin = _sse(ch("", "length"))
            empty = _sse({**base, "object": obj, "choices": []})
            f = {"role": role, "tok": tok, "tok2": tok2, "fin": fin, "empty": empty, "base": base, "obj": obj}
            self._cache[key] = f
        return f

    def stats(self) -> dict:
        recs = self.records
        return {
            "count": len(recs),
            "requests": [
                {
                    "recv_ns": r[0],
                    "first_ns": r[1],
                    "last_ns": r[2],
                    "n": r[3],
                    "mode": r[4],
                    "ttft_ms": (r[1] - r[0]) / 1e6 if r[1] else None,
                    "req_ms": (r[2] - r[0]) / 1e6 if r[2] else None,
                }
                for r in recs
            ],
            "gaps_us": self.gaps_us,
        }


HEAD_OK = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


class Conn(asyncio.Protocol):
    def __init__(self, srv: Server):
        self.srv = srv
        self.buf = b""
        self.tr = None
        self.busy = False
        self.closed = False
        self.handles: list = []
        self.slot = False  # holds one of the server's --slots

    def connection_made(self, tr):
        self.tr = tr

    def connection_lost(self, exc):
        self.closed = True
        for h in self.handles:
            h.cancel()
        self.free_slot()

    def free_slot(self) -> None:
        if self.slot:
            self.slot = False
            self.srv.release()

    def data_received(self, data: bytes):
        recv = _ns()
        self.buf += data
        while not self.busy:
            try:
                req, used = parse_request(self.buf, what="the test server")
            except BadRequest as exc:
                self.buf = b""
                self.simple(exc.status, {"error": exc.message}, "connection: close\r\n")
                self.tr.close()
                return
            if req is None:
                return
            self.buf = self.buf[used:]
            self.handle(req.method, req.target, req.headers, req.body, recv)

    def simple(self, status: int, obj, extra: str = "") -> None:
        payload = json.dumps(obj).encode()
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            411: "Length Required",
            413: "Payload Too Large",
            429: "Too Many Requests",
            431: "Request Header Fields Too Large",
            500: "Internal Server Error",
        }.get(status, "X")
        self.tr.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{extra}"
            f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )

    def handle(self, method, path, hdrs, body, recv):
        srv = self.srv
        if path.startswith("/stats"):
            return self.simple(200, srv.stats())
        if path.startswith("/reset"):
            srv.records.clear()
            srv.gaps_us.clear()
            srv.count = 0
            return self.simple(200, {"ok": True})
        if path.startswith("/health"):
            return self.simple(200, {"ok": True})
        if path.startswith("/v1/models"):
            return self.simple(200, {"object": "list", "data": [{"id": "model", "object": "model"}]})
        if not (path.endswith("/chat/completions") or path.endswith("/completions")):
            return self.simple(404, {"error": {"message": f"no route {path}"}})
        try:
            req = json.loads(body)
        except ValueError:
            return self.simple(400, {"error": {"message": "body is not JSON"}})
        chat = path.endswith("/chat/completions")
        model = str(req.get("model", "model"))
        mode = hdrs.get("x-test-mode") or (model[5:] if model.startswith("mode:") else srv.mode)
        if mode == "mix":
            mode = MIX[srv.count % len(MIX)]
        srv.count += 1
        if srv.die_after and srv.count > srv.die_after:
            os._exit(3)  # the server fails: every connection drops, new ones are refused
        n = srv.tokens or int(req.get("max_tokens") or 16)
        if mode == "http_400":
            return self.simple(400, {"error": {"message": "bad request (injected)", "type": "BadRequestError"}})
        if mode == "http_500":
            return self.simple(500, {"error": {"message": "internal error (injected)"}})
        if mode == "429":
            return self.simple(429, {"error": {"message": "rate limited (injected)"}}, "retry-after: 0\r\n")
        if mode == "hang_head":
            return
        fr = srv.frames(model, chat)
        if not req.get("stream"):
            text = " tok" * n
            ch = {"index": 0, "finish_reason": "length"}
            if chat:
                ch["message"] = {"role": "assistant", "content": text}
            else:
                ch["text"] = text
            return self.simple(
                200,
                {
                    **fr["base"],
                    "object": "chat.completion" if chat else "text_completion",
                    "choices": [ch],
                    "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                },
            )
        self.busy = True
        self.tr.write(HEAD_OK + fr["role"])
        rec = [recv, 0, 0, 0, mode]
        srv.records.append(rec)
        if mode == "hang":
            return
        loop = asyncio.get_running_loop()
        if srv.slots and srv.active >= srv.slots:  # every slot busy: wait for one (the schedule starts then)
            srv.waiting.append((self, lambda: self.stream(fr, req, body, mode, n, rec, loop, _ns())))
            return
        if srv.slots:
            srv.active += 1
            self.slot = True
        self.stream(fr, req, body, mode, n, rec, loop, recv)

    def stream(self, fr, req, body, mode, n, rec, loop, begin_ns):
        """The content events, from `begin_ns` (when the request arrived, or got its slot) on."""
        srv = self.srv
        # loop.time() is in seconds of the loop's monotonic clock; map our ns schedule onto it
        lt0 = loop.time() - (_ns() - begin_ns) / 1e9
        per = 2 if mode == "multi" else 1
        n_events = (n + per - 1) // per
        if mode == "empty_choices":
            n_events = 3
        prompt_tokens = max(1, len(body) // 8)
        state = {"k": 0, "prev": 0}
        tok = fr["tok2"] if mode == "multi" else fr["tok"]

        def emit():
            if self.closed:
                return
            k = state["k"]
            now = _ns()
            if mode == "empty_choices":
                self.tr.write(fr["empty"])
            elif mode == "malformed" and k == 1:
                self.tr.write(_chunk(b"data: {this is not json\n\n") + tok)
            else:
                self.tr.write(tok)
            if mode != "empty_choices":
                if k == 0:
                    rec[1] = now
                else:
                    srv.gaps_us.append((now - state["prev"]) // 1000)
                rec[2] = now
                rec[3] = k + 1
            state["prev"] = now
            state["k"] = k + 1
            if mode == "drop" and k == 2:
                self.tr.abort()
                return
            if mode == "stream_error" and k == 1:
                self.tr.write(_sse({"error": {"message": "engine died (injected)", "code": 500}}))
                return self.finish(fr, 0, 0, False)
            if k + 1 >= n_events:
                return self.finish(fr, prompt_tokens, n, mode not in ("no_usage", "empty_choices"))
            j = srv.held_until(k + 1)
            stalls = j // srv.stall_every if srv.stall_every else 0  # stalled events up to event j
            at = srv.ttft_ns + j * srv.itl_ns + stalls * srv.stall_ns
            self.handles = [loop.call_at(lt0 + at / 1e9, emit)]

        self.handles = [loop.call_at(lt0 + srv.ttft_ns / 1e9, emit)]

    def finish(self, fr, prompt_tokens, n, usage: bool):
        out = fr["fin"]
        if usage:
            out += _sse(
                {
                    **fr["base"],
                    "object": fr["obj"],
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n,
                        "total_tokens": prompt_tokens + n,
                    },
                }
            )
        out += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.tr.write(out)
        self.busy = False
        self.handles = []
        self.free_slot()
        if self.buf:
            self.data_received(b"")


def serve(
    host: str,
    port: int,
    ttft_ms: float,
    itl_ms: float,
    tokens: int,
    mode: str,
    ready=None,
    stall_every: int = 0,
    stall_ms: float = 0.0,
    slots: int = 0,
    die_after: int = 0,
    hold_every: int = 0,
    hold_events: int = 0,
) -> None:
    try:
        import uvloop  # type: ignore

        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    srv = Server(ttft_ms, itl_ms, tokens, mode, stall_every, stall_ms, slots, die_after, hold_every, hold_events)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = loop.run_until_complete(loop.create_server(lambda: Conn(srv), sock=sock, backlog=4096))
    port = server.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    if ready is not None:
        ready(port)
    try:
        loop.add_signal_handler(signal.SIGTERM, loop.stop)
    except (NotImplementedError, RuntimeError):
        pass
    try:
        loop.run_forever()
    finally:
        server.close()


@contextmanager
def server_process(
    ttft_ms: float = 50,
    itl_ms: float = 10,
    tokens: int = 0,
    mode: str = "ok",
    nice: int = 0,
    stall_every: int = 0,
    stall_ms: float = 0.0,
    slots: int = 0,
    die_after: int = 0,
    hold_every: int = 0,
    hold_events: int = 0,
):
    """Start the server in its own process; yields its base URL ('http://127.0.0.1:PORT')."""
    cmd = [
        sys.executable,
        "-m",
        "wattbench_agent.loadgen.testserver",
        "--port",
        "0",
        "--ttft-ms",
        str(ttft_ms),
        "--itl-ms",
        str(itl_ms),
        "--tokens",
        str(tokens),
        "--mode",
        mode,
        "--stall-every",
        str(stall_every),
        "--stall-ms",
        str(stall_ms),
        "--slots",
        str(slots),
        "--die-after",
        str(die_after),
        "--hold-every",
        str(hold_every),
        "--hold-events",
        str(hold_events),
    ]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, cwd=root, env=env, preexec_fn=(lambda: os.nice(nice)) if nice else None
    )
    try:
        line = proc.stdout.readline()
        if not line.startswith("LISTENING"):
            raise RuntimeError(f"test server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get_stats(url: str) -> dict:
    with urllib.request.urlopen(url.rstrip("/") + "/stats", timeout=30) as r:
        return json.loads(r.read())


def reset(url: str) -> None:
    urllib.request.urlopen(
        urllib.request.Request(url.rstrip("/") + "/reset", method="POST", data=b""), timeout=30
    ).read()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ttft-ms", type=float, default=50)
    ap.add_argument("--itl-ms", type=float, default=10)
    ap.add_argument("--tokens", type=int, default=0)
    ap.add_argument("--mode", default="ok")
    ap.add_argument("--stall-every", type=int, default=0, help="every K-th content event comes --stall-ms late")
    ap.add_argument("--stall-ms", type=float, default=0.0)
    ap.add_argument("--slots", type=int, default=0, help="streams generated at once; the rest wait (0: no limit)")
    ap.add_argument("--die-after", type=int, default=0, help="exit when request N + 1 arrives (0: never)")
    ap.add_argument("--hold-every", type=int, default=0, help="of every K content events, hold the last --hold-events")
    ap.add_argument("--hold-events", type=int, default=0, help="and write them at once, at the time of the last")
    a = ap.parse_args(argv)
    serve(
        a.host,
        a.port,
        a.ttft_ms,
        a.itl_ms,
        a.tokens,
        a.mode,
        stall_every=a.stall_every,
        stall_ms=a.stall_ms,
        slots=a.slots,
        die_after=a.die_after,
        hold_every=a.hold_every,
        hold_events=a.hold_events,
    )


if __name__ == "__main__":
    main()
