"""run_load: one load point, synchronous for the caller, its own event loop inside (uvloop when installed)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from . import prelude, replay, shapes
from .client import RequestRunner, _Cancelled, endpoint_url
from .progress import Progress
from .result import UNTIL_SENT_S, FailFast, LoadResult, point_result
from .spec import LoadSpec
from .transport import FastTransport
from .workload import Workload, load_tokenizer

_perf_ns = time.perf_counter_ns
PREFETCH_MAX = 20000
PREFETCH_BYTES = 256 << 20

# How long in-flight requests get to finish once sending stops early (fail fast, see result.py, or server gone).
FAIL_FAST_DRAIN_S = 1.0


# Server gone: connection-level failures (refused, reset) with no success since the first of them, for
# SERVER_GONE_GRACE_S, and a new TCP connection to the server refused too: the endpoint stopped answering (its
# process died, its pod went away). Sending stops, in-flight requests get FAIL_FAST_DRAIN_S, the point is `failed`
# with error kind `server_gone`, and every request already completed is kept. Within about 2 s of the first failure.
SERVER_GONE_GRACE_S = 0.75
_CONNECTION_FAILURES = ("connect_error", "disconnected")


class _ServerGone:
    """Watches records for connection-level failures; a thread of its own probes the server once they have lasted
    SERVER_GONE_GRACE_S with no success, and calls `on_gone()` (from that thread) when it does not answer."""

    def __init__(self, url: str):
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.url = url
        self.address = (parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))
        self.on_gone: Callable[[], None] | None = None
        self.fired = False
        self.ok = 0
        self.failures = 0
        self.first_bad: float | None = None  # time.monotonic() of the first connection failure since a success
        self.first_rec: dict | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def see(self, rec: dict) -> None:
        kind = rec.get("error_kind")
        with self._lock:
            if kind is None:
                self.ok += 1
                self.first_bad = self.first_rec = None
                return
            if kind not in _CONNECTION_FAILURES or self.fired:
                return
            self.failures += 1
            if self.first_bad is None:
                self.first_bad, self.first_rec = time.monotonic(), rec
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="wattbench-server-gone", daemon=True)
                self._thread.start()

    def _answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(self.address, timeout=0.25):
                return True
        except OSError:
            return False

    def _watch(self) -> None:
        while not self._closed.wait(0.05):
            with self._lock:
                first = self.first_bad
            if first is None or time.monotonic() - first < SERVER_GONE_GRACE_S:
                continue
            if self._answers():  # it takes connections: slow or failing, not gone
                with self._lock:
                    if self.first_bad == first:
                        self.first_bad = time.monotonic()
                continue
            with self._lock:
                if self.first_bad is None:  # a request succeeded meanwhile
                    continue
                self.fired = True
            if self.on_gone is not None:
                try:
                    self.on_gone()
                except RuntimeError:  # the run ended meanwhile (its event loop is closed): nothing left to stop
                    pass
            return

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def info(self) -> dict | None:
        if not self.fired:
            return None
        rec = self.first_rec or {}
        text = " ".join(str(rec.get("error_text") or "").split())[:300]
        return {
            "url": self.url,
            "successful_requests": self.ok,
            "connection_failures": self.failures,
            "grace_s": SERVER_GONE_GRACE_S,
            "error_kind": rec.get("error_kind"),
            "error_text": text,
            "message": f"stopped: the server at {self.url} stopped answering ({rec.get('error_kind')}: {text}; "
            f"no request succeeded for {SERVER_GONE_GRACE_S:g} s and a new connection was refused); "
            f"the {self.ok} request(s) completed before are kept",
        }


def effective_duration(spec: LoadSpec) -> float:
    """The length of sending after warm-up: duration_s. Duration 0 (with max_requests, or a trace's whole schedule)
    is a finite set of requests, measured as `vllm bench serve` measures --num-prompts: sending lasts until every
    request is sent (UNTIL_SENT_S bounds it), and the window runs from the first send until the last request has
    ended (its `benchmark_duration`), so every completion is in it."""
    duration_s = float(spec.duration_s)
    return duration_s if duration_s > 0 else UNTIL_SENT_S


def _share(n: int | None, w: int, nw: int) -> int | None:
    """Worker w's share of n items dealt round robin over nw workers."""
    if n is None:
        return None
    return (n - w + nw - 1) // nw if n > w else 0


def default_load_point_id(spec: LoadSpec) -> str:
    return shapes.label(spec.point())


class _Sink:
    """Collects records; appends each to the JSONL file and flushes it as it completes."""

    def __init__(
        self, out: str | Path | IO | None, on_record: Callable[[dict], None] | None, fail_fast: FailFast | None = None
    ):
        self.records: list[dict] = []
        self.fail_fast = fail_fast or FailFast(False, "")
        self.on_fail_fast: Callable[[], None] | None = None
        self.gone = _ServerGone(self.fail_fast.url or "http://127.0.0.1")
        self._own = False
        self._f = None
        self.path: Path | None = None  # the file the records go to, and the bytes of it this point's records take
        self.span = [0, 0]
        if out is not None:
            if hasattr(out, "write"):
                self._f = out
            else:
                p = Path(out)
                p.parent.mkdir(parents=True, exist_ok=True)
                self._f = p.open("a", encoding="utf-8")
                self._own = True
                self.path, self.span = p, [os.fstat(self._f.fileno()).st_size] * 2
        self.on_record = on_record
        self.ws = 0
        self.we = 0
        self.done = 0
        self.failed = 0

    def put(self, rec: dict) -> None:
        s = rec.get("sent_ns")
        rec["in_window"] = bool(s is not None and self.ws <= s <= self.we)
        self.records.append(rec)
        if rec["error_kind"] is None:
            self.done += 1
        else:
            self.failed += 1
        if self._f is not None:
            self._f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            self._f.flush()
        if self.fail_fast.see(rec) and self.on_fail_fast is not None:
            self.on_fail_fast()
        self.gone.see(rec)
        if self.on_record is not None:
            try:
                self.on_record(rec)
            except Exception:
                pass

    def close(self) -> None:
        self.gone.close()
        if self._f is not None:
            try:
                self._f.flush()
                os.fsync(self._f.fileno())
            except (OSError, ValueError, AttributeError):
                pass
            if self._own:
                if not self._f.closed:
                    self.span[1] = os.fstat(self._f.fileno()).st_size
                self._f.close()


class _Edges(threading.Thread):
    """Calls on_window_start / on_window_end at their instants from a thread of its own, so a slow
    callback (an NVML energy read takes ~3.5 ms) never stalls the event loop that timestamps the streams."""

    def __init__(self, start_ns: int, end_ns: int, on_start, on_end):
        super().__init__(name="wattbench-window-edges", daemon=True)
        self.start_ns, self.end_ns = start_ns, end_ns
        self.cbs = (on_start, on_end)
        self.now_evt = threading.Event()  # fire the pending edge(s) now
        self.abort = False
        self.called: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        self.values: dict[str, Any] = {}  # what each callback returned (on_window_end: the window's energy reading)

    def _wait_until(self, ns: int) -> None:
        while not self.now_evt.is_set():
            d = ns - _perf_ns()
            if d <= 0:
                return
            self.now_evt.wait(min(d / 1e9, 0.25))

    def fire_now(self, end_ns: int | None = None) -> None:
        if end_ns is not None:
            self.end_ns = min(self.end_ns, end_ns)
        self.now_evt.set()

    def run(self) -> None:
        for name, ns, cb in (("start", self.start_ns, self.cbs[0]), ("end", None, self.cbs[1])):
            self._wait_until(ns if ns is not None else self.end_ns)
            if self.abort:
                return
            self.called[name] = _perf_ns()
            if cb is not None:
                try:
                    self.values[name] = cb()
                except Exception as exc:  # recorded, never fatal
                    self.errors[name] = f"{type(exc).__name__}: {exc}"


def _energy(edges: _Edges) -> dict[str, Any]:
    """The window's energy reading, where on_window_end returned one (a dict: loadgen/energy.py's Meter): kept with
    the point (its summary's `energy`, its points line), so a saved run is summarised again with it."""
    value = edges.values.get("end")
    return {"energy": value} if isinstance(value, dict) else {}


def _new_loop():
    try:
        import uvloop  # type: ignore

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()


@dataclass(frozen=True)
class Prepared:
    """One worker's share of a load point, made before the clock starts (`_prepare`): its schedule and the first
    requests' bodies, encoded ahead so that sending does no encoding."""

    spec: LoadSpec
    shape: shapes.Shape  # the registered shape spec.shape names: its `closed_loop` trait picks the driver
    items: list  # (body, input_tokens, output_tokens, prompt or None) of this worker's first requests, in order
    workload: Workload  # the requests after those, made as they are needed
    offsets: Any  # open loop: this worker's send offsets (s from t0, numpy); closed loop: None
    lp: str  # the load point id
    tokenizer: Any
    duration_s: float
    worker: int = 0  # this worker's index: its requests are the global ones local * n_workers + worker
    n_workers: int = 1
    # open loop over a duration, its schedule cut by neither max_requests nor an end of its own (a trace): the window
    # is the scheduled span, whenever the last arrival fell in it (sending waits for the window's end)
    fills_window: bool = False


@dataclass(frozen=True)
class RunContext:
    """What one process's event loop runs a load point with: its share (`Prepared`), where records go, and how it
    is told to stop. In-process runs (`run_load`) call the window callbacks here; workers leave them to the parent."""

    prepared: Prepared
    sink: Any  # _Sink (in process) | _PipeSink (a worker: records go to the parent)
    progress: Progress
    verify: Any = True  # TLS verification, as httpx takes it
    stop_event: threading.Event | None = None  # set: stop sending, end the window now, drain
    abort_event: threading.Event | None = None  # set: cancel everything (a worker's Ctrl-C, sent by the parent)
    fail_fast_event: threading.Event | None = None  # set: the parent saw the first requests all fail (workers)
    on_window_start: Callable[[], Any] | None = None
    on_window_end: Callable[[], Any] | None = None
    t0_fn: Callable[[], Awaitable[int]] | None = None  # a worker waits for the parent's shared t0
    edges: bool = True  # call on_window_start / on_window_end at the window's instants


async def _main(ctx: RunContext) -> dict:
    """Send one worker's share of a load point on this event loop and drain it: the window's instants and the drain."""
    return await _LoadRun(ctx, asyncio.get_running_loop()).run()


class _LoadRun:
    """One event loop's load run: the state its senders share (next request, in flight, stop, fail fast), the
    closed-loop and open-loop drivers (picked by the shape's `closed_loop` trait), the drain and the clean-up."""

    def __init__(self, ctx: RunContext, loop: asyncio.AbstractEventLoop):
        p = ctx.prepared
        self.ctx, self.spec, self.sink, self.loop = ctx, p.spec, ctx.sink, loop
        self.items, self.workload, self.tokenizer = p.items, p.workload, p.tokenizer
        self.wk, self.nw = p.worker, p.n_workers
        self.max_req = _share(self.spec.max_requests, self.wk, self.nw)
        self.tasks: set[asyncio.Task] = set()
        self.next = 0  # the next request's local index
        self.inflight = 0
        self.stop = self.failed_fast = False
        self.stopped_ns: int | None = None  # when a stop was asked for: the window ends there
        self.ff_evt = asyncio.Event()

    # ------------------------------------------------------------------ setup
    async def _connect(self) -> None:
        spec, ctx = self.spec, self.ctx
        if spec.transport == "fast":
            transport = FastTransport(verify=ctx.verify)
        else:
            transport = httpx.AsyncHTTPTransport(
                verify=ctx.verify, limits=httpx.Limits(max_connections=None, max_keepalive_connections=None), retries=0
            )
        self.client = httpx.AsyncClient(transport=transport, timeout=spec.timeout_s, follow_redirects=False)
        self.runner = RequestRunner(spec, self.client, ctx.prepared.lp, self.tokenizer)
        offsets = ctx.prepared.offsets
        pre = spec.concurrency if spec.concurrency else min(64, max(1, len(offsets) if offsets is not None else 0))
        if isinstance(transport, FastTransport) and pre:
            try:
                await transport.warm(str(self.runner.url), min(pre, 2048), timeout=min(spec.timeout_s, 10.0))
            except Exception:
                pass

    async def _start_clock(self) -> None:
        ctx = self.ctx
        warm_ns, dur_ns = int(self.spec.warmup_s * 1e9), int(ctx.prepared.duration_s * 1e9)
        self.t0 = await ctx.t0_fn() if ctx.t0_fn is not None else _perf_ns()
        self.ws, self.we = self.t0 + warm_ns, self.t0 + warm_ns + dur_ns
        self.send_end = self.we
        self.sink.ws, self.sink.we = self.ws, self.we
        self.edges = _Edges(self.ws, self.we, ctx.on_window_start, ctx.on_window_end)
        if ctx.edges:
            self.edges.start()
        self.sink.on_fail_fast = self.fail_fast
        gone = getattr(self.sink, "gone", None)
        if gone is not None:  # the server stopped answering: stop as fail fast stops (called from the watcher's thread)
            gone.on_gone = lambda: self.loop.call_soon_threadsafe(self.fail_fast)

    def fail_fast(self) -> None:  # the first requests all failed the same way: stop sending, short drain
        self.stop = self.failed_fast = True
        self.ff_evt.set()

    # ------------------------------------------------------------------ one request
    def item(self, i: int):
        if i < len(self.items):
            return self.items[i]
        it = self.workload.item(i * self.nw + self.wk)
        return (
            self.runner.encode(it.prompt, it.output_tokens),
            it.input_tokens,
            it.output_tokens,
            it.prompt if self.tokenizer is not None else None,
        )

    async def one(self, i: int, scheduled: int, on_status=None) -> None:
        if self.workload.conversations:
            await self.converse(i, scheduled, on_status)
            return
        body, n_in, n_out, prompt = self.item(i)
        g = i * self.nw + self.wk
        await self._send(f"{g:07d}", body, n_in, n_out, scheduled, prompt, on_status, g)

    async def _send(self, rid, body, n_in, n_out, scheduled, prompt, on_status, number, text_out=None) -> dict:
        self.inflight += 1
        try:
            rec = await self.runner.run(rid, body, n_in, n_out, scheduled, prompt, on_status, number, text_out)
        except _Cancelled as exc:
            self.sink.put(exc.record)
            raise
        finally:
            self.inflight -= 1
        self.sink.put(rec)
        return rec

    async def converse(self, i: int, scheduled: int, on_status=None) -> None:
        """Conversation i (a multi-turn workload: an arrival or a stream's turn starts one): each turn goes out
        after the last one's answer and its think time, the history resent with the text the server streamed, as a
        chat client does (AIPerf's and guidellm's multi-turn); a failed turn ends the conversation, and no turn
        starts once sending has ended."""
        g = i * self.nw + self.wk
        conv = self.workload.conversation(g)
        history: list[dict] = []
        for t, (text, n_out) in enumerate(conv.turns):
            if t:
                delay = conv.delays_s[t - 1] if t - 1 < len(conv.delays_s) else 0.0
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.should_stop(_perf_ns()):
                    return
                scheduled = _perf_ns()
            history.append({"role": "user", "content": text})
            n_in = conv.input_tokens + sum(len(m["content"].split()) for m in history[1:])
            reply: list[str] = []
            body = self.runner.encode(text, n_out, history)
            rec = await self._send(f"{g:07d}-{t}", body, n_in, n_out, scheduled, None, on_status, f"{g}-{t}", reply)
            if rec["error_kind"] is not None:
                return
            history.append({"role": "assistant", "content": reply[0] if reply else ""})

    def should_stop(self, now: int) -> bool:
        stop_event = self.ctx.stop_event
        return self.stop or now >= self.send_end or (stop_event is not None and stop_event.is_set())

    def _track(self, t: asyncio.Task) -> asyncio.Task:
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    # ------------------------------------------------------------------ drivers
    async def stream(self, k: int) -> None:
        """Closed loop: stream k of this worker sends its next request when the last one ends."""
        spec, nw, wk = self.spec, self.nw, self.wk
        scheduled = self.t0
        if spec.ramp_s > 0 and spec.concurrency:
            # stream k of this worker is stream k*nw+wk overall: starts spread evenly over ramp_s
            scheduled = self.t0 + int(spec.ramp_s * 1e9 * (k * nw + wk) / spec.concurrency)
            delay = (scheduled - _perf_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
        wait_s = [0.0]

        def on_status(status: int, retry_after: float | None) -> None:
            if status == 429 and spec.honor_retry_after:
                wait_s[0] = min(retry_after if retry_after is not None else 1.0, 5.0)

        while True:
            if self.should_stop(_perf_ns()):
                return
            i = self.next
            if self.max_req is not None and i >= self.max_req:
                return
            self.next = i + 1
            await self.one(i, scheduled, on_status)
            if wait_s[0]:
                await asyncio.sleep(wait_s[0])
                wait_s[0] = 0.0
            scheduled = _perf_ns()

    async def closed_loop(self) -> None:
        senders = [
            self._track(self.loop.create_task(self.stream(k)))
            for k in range(_share(self.spec.concurrency, self.wk, self.nw))
        ]
        all_sent = asyncio.ensure_future(asyncio.gather(*senders, return_exceptions=True))
        ff_wait = self.loop.create_task(self.ff_evt.wait())
        await asyncio.wait([all_sent, ff_wait], return_when=asyncio.FIRST_COMPLETED)
        ff_wait.cancel()
        if not all_sent.done():  # fail fast: the streams still waiting on a request drain below
            all_sent.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)

    async def open_loop(self) -> None:
        """Open loop: request i goes out at t0 + offsets[i], whatever is in flight (up to concurrency, if given)."""
        cap = asyncio.Semaphore(self.spec.concurrency) if self.spec.concurrency else None
        for i, off in enumerate(self.ctx.prepared.offsets):
            target = self.t0 + int(off * 1e9)
            d = target - _perf_ns()
            while d > 100_000_000 and not self.stop:  # long gaps in slices, so that a stop is seen soon
                await asyncio.sleep(0.1)
                d = target - _perf_ns()
            if d > 0 and not self.stop:
                await asyncio.sleep(d / 1e9)
            if self.should_stop(target):
                break
            if cap is not None:
                await cap.acquire()
            self.next = i + 1
            t = self._track(self.loop.create_task(self.one(i, target)))
            if cap is not None:
                t.add_done_callback(lambda _t: cap.release())
        else:
            if self.ctx.prepared.fills_window:
                await self._until_send_end()

    async def _until_send_end(self) -> None:
        """Open loop: the schedule ran out before the window's end (no arrival fell after the last one): sending
        lasts to the window's end, so the window is the span scheduled, not the span to the last answer."""
        while not self.stop:
            d = self.send_end - _perf_ns()
            if d <= 0 or (self.ctx.stop_event is not None and self.ctx.stop_event.is_set()):
                return
            await asyncio.sleep(min(d / 1e9, 0.1))

    # ------------------------------------------------------------------ watchers
    async def show_progress(self) -> None:
        while True:
            now = _perf_ns()
            phase = "warmup" if now < self.ws else ("steady" if now < self.send_end else "drain")
            self.ctx.progress.show((now - self.t0) / 1e9, self.sink, self.inflight, phase)
            await asyncio.sleep(0.5)

    async def watch_stop(self) -> None:
        stop_event, ff_thread_evt = self.ctx.stop_event, self.ctx.fail_fast_event
        while not stop_event.is_set():
            if ff_thread_evt is not None and ff_thread_evt.is_set():  # the parent process saw it (workers)
                self.fail_fast()
                return
            await asyncio.sleep(0.05)
        self.stop = True
        self.stopped_ns = _perf_ns()  # a stop asked for ends the window now, not when the drain ends
        if self.stopped_ns < self.we:
            self.edges.fire_now(max(self.stopped_ns, self.ws))

    async def watch_abort(self, main_task: asyncio.Task) -> None:
        while not self.ctx.abort_event.is_set():
            await asyncio.sleep(0.05)
        main_task.cancel()

    def _watchers(self) -> list[asyncio.Task]:
        ctx, aux = self.ctx, []
        if ctx.abort_event is not None:
            aux.append(self.loop.create_task(self.watch_abort(asyncio.current_task())))
        if ctx.progress.enabled:
            aux.append(self.loop.create_task(self.show_progress()))
        if ctx.stop_event is not None:
            aux.append(self.loop.create_task(self.watch_stop()))
        return aux

    # ------------------------------------------------------------------ the run
    async def _drain(self) -> None:
        """In-flight requests end by their own timeout; the bound here is a safety net."""
        pending = [t for t in self.tasks if not t.done()]
        if pending:
            bound = FAIL_FAST_DRAIN_S if self.failed_fast else self.spec.timeout_s + 1.0
            _done, still = await asyncio.wait(pending, timeout=bound)
            for t in still:
                t.cancel()
            if still:
                await asyncio.gather(*still, return_exceptions=True)

    async def _cancel_all(self) -> None:
        self.stop = True  # no stream starts another request, whatever an await below it did with the cancel
        every = list(self.tasks)
        pending = [t for t in every if not t.done()]
        while pending:  # a cancel an await swallowed is sent again
            for t in pending:
                t.cancel()
            _done, still = await asyncio.wait(pending, timeout=0.5)
            pending = list(still)
        await asyncio.gather(*every, return_exceptions=True)  # all done: collects their outcomes

    async def _close(self, aux: list[asyncio.Task], interrupted: bool) -> None:
        for t in aux:
            t.cancel()
        now = min(_perf_ns(), self.stopped_ns or math.inf)
        if now < self.we:  # sending stopped early (max_requests, trace exhausted, stop): the window ends here
            self.we = max(now, self.ws)
            self.edges.fire_now(self.we)
            self.sink.we = self.we
        if interrupted:
            self.edges.abort = True
            self.edges.fire_now()
        if self.edges.is_alive():
            self.edges.join(timeout=5.0)
        try:
            await self.client.aclose()
        except Exception:
            pass
        self.ctx.progress.show((_perf_ns() - self.t0) / 1e9, self.sink, 0, "done")
        self.ctx.progress.finish()

    async def run(self) -> dict:
        await self._connect()
        await self._start_clock()
        aux = self._watchers()
        send = self.closed_loop if self.ctx.prepared.shape.closed_loop else self.open_loop
        interrupted = False
        drain_start = drain_end = None
        try:
            await send()
            drain_start = min(_perf_ns(), self.send_end) if not self.stop else _perf_ns()
            await self._drain()
            drain_end = _perf_ns()
        except asyncio.CancelledError:
            interrupted = True
            await self._cancel_all()
            drain_end = _perf_ns()
        finally:
            await self._close(aux, interrupted)
        if interrupted:
            raise asyncio.CancelledError()
        if drain_start is None:
            drain_start = drain_end
        return {
            "t0": self.t0,
            "ws": self.ws,
            "we": self.we,
            "send_end": min(self.send_end, drain_start),
            "drain_s": max(drain_end - drain_start, 0) / 1e9,
            "edges_called": dict(self.edges.called),
            "edge_errors": dict(self.edges.errors),
            **_energy(self.edges),
        }


def _auto_workers(spec: LoadSpec, workers: int | None) -> int:
    """Client processes. Explicit `workers` wins. Automatic: one process up to 256 streams (or an expected
    in-flight count of 256 for open-loop shapes, rate x 1 s), else 2 (each process gets its own share of the CPU
    scheduler; see docs/LOADGEN.md for the measurements behind this)."""
    if workers is not None:
        return max(1, int(workers))
    env = os.environ.get("WATTBENCH_LOADGEN_WORKERS")
    if env:
        return max(1, int(env))
    if spec.transport != "fast":
        return 1
    load = spec.concurrency if spec.load_shape.closed_loop else (spec.concurrency or (spec.rate or 0))
    cpus = os.cpu_count() or 1
    return 1 if (load or 0) <= 256 or cpus < 2 else 2


def _prepare(spec: LoadSpec, tok, lp: str, wk: int, nw: int) -> Prepared:
    """Schedule and pre-encoded request bodies for worker wk of nw (global request index = local * nw + wk)."""
    shape = spec.load_shape
    trace_rows = shape.request_rows(spec.point())
    duration_s = effective_duration(spec)
    horizon = spec.warmup_s + duration_s
    # until every request is sent: the schedule of exactly max_requests (or the whole trace), not a day of arrivals
    until_sent = math.inf if duration_s >= UNTIL_SENT_S else horizon
    offsets = None if shape.closed_loop else shape.offsets(spec.point(), until_sent, spec.seed)
    fills = (
        offsets is not None
        and math.isfinite(until_sent)
        and not shape.ends_by_itself
        and (spec.max_requests is None or len(offsets) < spec.max_requests)
    )
    if offsets is not None:
        offsets = offsets[wk::nw]
        expected = len(offsets)
    else:
        conc = _share(spec.concurrency, wk, nw)
        expected = int(conc * max(horizon, 1.0) * 2) + conc
        if spec.max_requests is not None:
            expected = min(expected, _share(spec.max_requests, wk, nw))
    expected = min(expected, PREFETCH_MAX)
    workload = Workload(spec, tok, n_hint=max(expected * nw, 1), trace_rows=trace_rows)
    rr = RequestRunner(spec, None, lp, tok)  # body encoding only
    items = []
    nbytes = 0
    for i in range(0 if workload.conversations else expected):  # a conversation's turns are made as it goes
        it = workload.item(i * nw + wk)
        body = rr.encode(it.prompt, it.output_tokens)
        nbytes += len(body)
        items.append((body, it.input_tokens, it.output_tokens, it.prompt if tok is not None else None))
        if nbytes > PREFETCH_BYTES:
            break
    return Prepared(spec, shape, items, workload, offsets, lp, tok, duration_s, wk, nw, fills)


class _PipeSink:
    """Worker side: every record goes to the parent at once, one JSON line on stdout (the parent writes and
    flushes it to the JSONL file)."""

    def __init__(self, stream):
        self.stream = stream
        self.ws = self.we = 0
        self.done = self.failed = 0
        self.records: list = []

    def put(self, rec: dict) -> None:
        s = rec.get("sent_ns")
        rec["in_window"] = bool(s is not None and self.ws <= s <= self.we)
        if rec["error_kind"] is None:
            self.done += 1
        else:
            self.failed += 1
        self.stream.write('{"rec":' + json.dumps(rec, separators=(",", ":")) + "}\n")
        self.stream.flush()


def _worker_main() -> int:
    """`python -m wattbench_agent.loadgen.worker`: config on stdin (one JSON line), then the t0 line, then
    optionally `stop` / `abort` lines; records and a final result on stdout as JSON lines."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it sends `abort` on Ctrl-C
    out = sys.stdout
    cfg = json.loads(sys.stdin.readline())
    spec = LoadSpec.from_dict(cfg["spec"])
    tok = load_tokenizer(spec.tokenizer) if spec.tokenizer else None
    prepared = _prepare(spec, tok, cfg["lp"], cfg["wk"], cfg["nw"])
    t0_box: dict = {}
    t0_evt, stop_evt, abort_evt, ff_evt = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def reader():
        for line in sys.stdin:
            line = line.strip()
            if line == "stop":
                stop_evt.set()
            elif line == "abort":
                abort_evt.set()
            elif line == "failfast":
                ff_evt.set()
            elif line.isdigit():
                t0_box["t0"] = int(line)
                t0_evt.set()
        abort_evt.set()  # parent went away

    async def t0_fn() -> int:
        out.write('{"ready":true}\n')
        out.flush()
        while not t0_evt.is_set():
            if abort_evt.is_set():  # interrupted before the start (the abort watcher runs only once started)
                raise asyncio.CancelledError
            await asyncio.sleep(0.002)
        t0 = t0_box["t0"]
        d = t0 - _perf_ns()
        if d > 0:
            await asyncio.sleep(d / 1e9)
        return t0

    threading.Thread(target=reader, daemon=True).start()
    ctx = RunContext(
        prepared,
        sink=_PipeSink(out),
        progress=Progress(1.0, False),
        verify=cfg.get("verify", True),
        stop_event=stop_evt,
        abort_event=abort_evt,
        fail_fast_event=ff_evt,
        t0_fn=t0_fn,
        edges=False,
    )
    res = None
    try:
        with asyncio.Runner(loop_factory=_new_loop) as r:
            res = r.run(_main(ctx))
    except asyncio.CancelledError:
        pass
    out.write(json.dumps({"done": res}) + "\n")
    out.flush()
    return 0


def _run_multi(
    spec: LoadSpec,
    nw: int,
    sink: _Sink,
    lp: str,
    tok,
    progress: bool,
    on_window_start,
    on_window_end,
    stop_event,
    verify,
    slo,
) -> LoadResult:
    """Workers in their own processes (`python -m wattbench_agent.loadgen.worker`), started together on a
    shared CLOCK_MONOTONIC t0 (perf_counter_ns is system-wide on Linux); the window callbacks run here, in the
    parent, at the window instants; records stream back as JSON lines and are written and flushed here."""
    import selectors
    import subprocess

    if tok is not None and not spec.tokenizer:
        raise ValueError("workers > 1 needs the tokenizer as spec.tokenizer (a name or path), not an object")
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    procs = []
    for wk in range(nw):
        p = subprocess.Popen(
            [sys.executable, "-m", "wattbench_agent.loadgen.worker"],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        p.stdin.write(json.dumps({"spec": spec.to_dict(), "lp": lp, "wk": wk, "nw": nw, "verify": verify}) + "\n")
        p.stdin.flush()
        procs.append(p)
    sel = selectors.DefaultSelector()
    for wk, p in enumerate(procs):
        os.set_blocking(p.stdout.fileno(), False)
        sel.register(p.stdout, selectors.EVENT_READ, wk)
    bufs = [""] * nw
    duration_s = effective_duration(spec)
    ready, results = 0, {}
    edges = None
    prog = Progress(spec.warmup_s + max(duration_s, 0), progress, max_requests=spec.max_requests)
    t0 = None
    interrupted = False
    stop_sent = False
    last_show = 0
    open_n = nw

    def send_all(line: str) -> None:
        for p in procs:
            try:
                p.stdin.write(line + "\n")
                p.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass

    sink.on_fail_fast = lambda: send_all("failfast")
    gone_sent = False

    def handle(wk: int, line: str) -> None:
        nonlocal ready, t0, edges
        if line.startswith('{"rec":'):
            sink.put(json.loads(line)["rec"])
            return
        msg = json.loads(line)
        if msg.get("ready"):
            ready += 1
            if ready == nw and t0 is None:
                t0 = _perf_ns() + 20_000_000
                ws = t0 + int(spec.warmup_s * 1e9)
                sink.ws, sink.we = ws, ws + int(duration_s * 1e9)
                if duration_s > 0:
                    edges = _Edges(sink.ws, sink.we, on_window_start, on_window_end)
                    edges.start()
                send_all(str(t0))
        elif "done" in msg:
            results[wk] = msg["done"]

    try:
        while open_n:
            try:
                for key, _ in sel.select(timeout=0.25):
                    wk = key.data
                    chunk = key.fileobj.read()
                    if not chunk:
                        if chunk == "" or chunk is None and procs[wk].poll() is not None:
                            sel.unregister(key.fileobj)
                            open_n -= 1
                        continue
                    data = bufs[wk] + chunk
                    lines = data.split("\n")
                    bufs[wk] = lines.pop()
                    for line in lines:
                        if line:
                            handle(wk, line)
                if stop_event is not None and stop_event.is_set() and not stop_sent:
                    stop_sent = True
                    send_all("stop")
                    if edges is not None and edges.is_alive():  # the workers end their window now too
                        edges.fire_now(max(_perf_ns(), sink.ws))
                if sink.gone.fired and not gone_sent:  # the server stopped answering: the workers stop
                    gone_sent = True
                    send_all("failfast")
                now = _perf_ns()
                if t0 is not None and now - last_show > 5e8:
                    last_show = now
                    prog.show(max(now - t0, 0) / 1e9, sink, 0, "run")
            except KeyboardInterrupt:
                if interrupted:
                    break
                interrupted = True
                send_all("abort")
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        prog.finish()
        if edges is not None and edges.is_alive():
            if interrupted:
                edges.abort = True
            edges.fire_now(_perf_ns())
            edges.join(timeout=5.0)
        sink.close()
    if interrupted:
        raise KeyboardInterrupt("load run interrupted")
    good = [r for r in results.values() if r]
    if not good:
        raise RuntimeError(f"load generator workers failed (exit codes {[p.returncode for p in procs]})")
    res = {
        "t0": min(r["t0"] for r in good),
        "ws": min(r["ws"] for r in good),
        "we": max(r["we"] for r in good),
        "send_end": max(r["send_end"] for r in good),
        "drain_s": max(r["drain_s"] for r in good),
        "edges_called": dict(edges.called) if edges else {},
        "edge_errors": dict(edges.errors) if edges else {},
        "workers": nw,
        **(_energy(edges) if edges else {}),
    }
    return point_result(spec, sink, lp, duration_s, res, slo)


def run_load(
    spec: LoadSpec,
    out: str | Path | IO | None = None,
    progress: bool = False,
    on_window_start: Callable[[], Any] | None = None,
    on_window_end: Callable[[], Any] | None = None,
    *,
    tokenizer=None,
    stop_event: threading.Event | None = None,
    on_record: Callable[[dict], None] | None = None,
    verify: bool = True,
    slo: dict | None = None,
    workers: int | None = None,
) -> LoadResult:
    """Run one load point; see docs/CONTRACTS.md section 2 and docs/LOADGEN.md.

    Synchronous: runs its own event loop (uvloop when installed), in a new thread when the calling thread
    already runs one. Records are appended to `out` (JSONL) and flushed as they complete; on Ctrl-C the
    in-flight requests are recorded as `cancelled`, everything is flushed, and KeyboardInterrupt propagates.
    Optional: `tokenizer` (object with encode/decode), `stop_event` (set it to stop sending and drain),
    `on_record(rec)` per completed record, `verify` (TLS), `slo` ({ttft_ms, tpot_ms, e2e_ms} -> goodput),
    `workers` (client processes; None = automatic, see `_auto_workers`).
    """
    if isinstance(spec, dict):
        spec = LoadSpec.from_dict(spec)
    spec.validate()
    tok = (
        tokenizer
        if tokenizer is not None
        else (load_tokenizer(spec.tokenizer, spec.tokenizer_options) if spec.tokenizer else None)
    )
    spec, before = prelude.run(spec, tok, verify)  # ready check, prompt length calibration, warm-up requests
    lp = spec.load_point_id or default_load_point_id(spec)
    n_workers = _auto_workers(spec, workers)
    sink = _Sink(out, on_record, FailFast(spec.fail_fast, endpoint_url(spec.url, spec.api)))
    if n_workers > 1:
        res = _run_multi(spec, n_workers, sink, lp, tok, progress, on_window_start, on_window_end, stop_event, verify,
                         slo)  # fmt: skip
        res.summary.update(before)  # what was done before t0, as point_result adds it in one process
        res.extra["replay"]["res"]["prelude"] = before
        return replay.noted(sink, res)
    prepared = _prepare(spec, tok, lp, 0, 1)
    ctx = RunContext(
        prepared,
        sink=sink,
        progress=Progress(spec.warmup_s + prepared.duration_s, progress, max_requests=spec.max_requests),
        verify=verify,
        stop_event=stop_event,
        on_window_start=on_window_start,
        on_window_end=on_window_end,
    )

    def go() -> dict:
        with asyncio.Runner(loop_factory=_new_loop) as r:
            return r.run(_main(ctx))

    try:
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False
        res = prelude.call_in_thread(go, "wattbench-loadgen") if in_loop else go()
    except asyncio.CancelledError:
        sink.close()
        raise KeyboardInterrupt("load run interrupted") from None
    finally:
        sink.close()

    res["prelude"] = before
    return replay.noted(sink, point_result(spec, sink, lp, prepared.duration_s, res, slo))


def run_sweep(spec: LoadSpec, param: str, values, out=None, progress: bool = False, **kw) -> list[LoadResult]:
    """One load point per value of `param` ('concurrency' or 'rate'); load_point_id gets the value appended."""
    if param not in ("concurrency", "rate"):
        raise ValueError("sweeps are over 'concurrency' or 'rate'")
    results = []
    for v in values:
        base = spec.load_point_id or None
        sp = spec.replace(**{param: v}, load_point_id=(f"{base}-{param[0]}{v:g}" if base else None))
        results.append(run_load(sp, out=out, progress=progress, **kw))
    return results
