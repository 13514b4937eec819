"""run_load: one load point, synchronous for the caller, its own event loop inside (uvloop when installed)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from wattbench_agent.safety import redact_url

from . import metrics, replay, shapes, steps
from .client import RequestRunner, _Cancelled, endpoint_url
from .spec import LoadSpec
from .transport import FastTransport
from .workload import Workload, length_dists, load_tokenizer

_perf_ns = time.perf_counter_ns
PREFETCH_MAX = 20000
PREFETCH_BYTES = 256 << 20
# Fail fast: when the first FAIL_FAST_N requests of a run all fail the same way (same error kind and HTTP status)
# and none succeeded, sending stops and in-flight requests get FAIL_FAST_DRAIN_S to finish. Timeouts, 429s and
# cancellations never count: they say "slow" or "later", not "misconfigured". Any success, or a failure of
# another kind, turns it off for the rest of the run (a mixed failure rate goes on as before).
FAIL_FAST_N = 8
FAIL_FAST_DRAIN_S = 1.0
_FAIL_FAST_IGNORED = ("timeout", "rate_limited", "cancelled")
UNTIL_SENT_S = 86400.0  # duration_s 0: send until every request is sent (bounded by a day), window to the last end


class _FailFast:
    """Watches the first records of a run; `see(rec)` returns True once, when the run should stop."""

    def __init__(self, enabled: bool, url: str):
        self.active = enabled
        self.url = url
        self.sig: tuple | None = None
        self.n = 0
        self.first: dict | None = None
        self.fired = False

    def see(self, rec: dict) -> bool:
        if not self.active:
            return False
        kind = rec.get("error_kind")
        sig = (kind, rec.get("http_status"))
        if kind is None or kind in _FAIL_FAST_IGNORED or (self.sig is not None and sig != self.sig):
            self.active = False
            return False
        if self.sig is None:
            self.sig, self.first = sig, rec
        self.n += 1
        if self.n >= FAIL_FAST_N:
            self.active = False
            self.fired = True
            return True
        return False

    def info(self) -> dict | None:
        if not self.fired:
            return None
        text = " ".join(str(self.first.get("error_text") or "").split())
        url = redact_url(self.url)  # the summary is written and shown: no user:password@
        return {
            "requests": self.n,
            "url": url,
            "error_kind": self.sig[0],
            "http_status": self.sig[1],
            "error_text": text,
            "message": f"stopped: the first {self.n} requests to {url} all failed the same way "
            f"({self.sig[0]}): {text[:400]}",
        }


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
    return shapes.label(vars(spec))


def default_workload(spec: LoadSpec) -> str:
    named = shapes.get(spec.shape).workload_name(vars(spec))
    if named:
        return named
    if spec.dataset_path:
        return f"sharegpt:{Path(spec.dataset_path).name}"
    in_dist, out_dist = length_dists(spec)
    i = "dist" if in_dist else spec.input_tokens
    o = "dist" if out_dist else spec.output_tokens
    pre = f"-prefix{spec.shared_prefix_tokens}" if spec.shared_prefix_tokens else ""
    return f"synthetic-in{i}-out{o}{pre}"


@dataclass
class LoadResult:
    spec: LoadSpec
    records: list[dict]
    summary: dict
    window_start_ns: int
    window_end_ns: int
    t0_ns: int = 0
    send_end_ns: int = 0
    drain_s: float = 0.0
    status: str = "ok"
    error_kind: str | None = None
    error_text: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def window_s(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9

    def load_run_row(self) -> dict[str, Any]:
        """The `load_runs` columns the load generator knows (no run_id, source, deployment_id, energy)."""
        s, sp = self.summary, self.spec
        return {
            "load_point_id": s.get("load_point_id"),
            "workload": s.get("workload"),
            "shape": sp.shape,
            "api": sp.api,
            "concurrency": sp.concurrency,
            "rate": sp.rate,
            "burstiness": sp.burstiness if "burstiness" in shapes.get(sp.shape).fields else None,
            # requested lengths; NULL where the dataset decides them (each request's are in `requests`)
            "input_tokens": None if sp.dataset_path else sp.input_tokens,
            "output_tokens": None if (sp.output_tokens_dist or {}).get("kind") == "dataset" else sp.output_tokens,
            "warmup_s": sp.warmup_s,
            "duration_s": s.get("duration_s", sp.duration_s),
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "window_s": self.window_s,
            "drain_s": self.drain_s,
            "achieved_rate": s.get("achieved_rate"),
            "achieved_concurrency": s.get("achieved_concurrency"),
            "send_lateness_p50_ms": (s.get("send_lateness_ms") or {}).get("p50"),
            "send_lateness_p99_ms": (s.get("send_lateness_ms") or {}).get("p99"),
            "sent": s.get("sent"),
            "completed": s.get("completed"),
            "failed": s.get("failed"),
            "output_tokens_in_window": s.get("output_tokens_in_window"),
            **steps.load_run_columns(s.get("steps")),
            "status": self.status,
            "error_kind": self.error_kind,
            "error_text": self.error_text,
            "summary": s,
        }


class _Sink:
    """Collects records; appends each to the JSONL file and flushes it as it completes."""

    def __init__(
        self, out: str | Path | IO | None, on_record: Callable[[dict], None] | None, fail_fast: _FailFast | None = None
    ):
        self.records: list[dict] = []
        self.fail_fast = fail_fast or _FailFast(False, "")
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
                    cb()
                except Exception as exc:  # recorded, never fatal
                    self.errors[name] = f"{type(exc).__name__}: {exc}"


class _Progress:
    def __init__(self, total_s: float, enabled: bool, stream=None, max_requests: int | None = None):
        self.total_s = max(total_s, 1e-9)
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.max_requests = max_requests if total_s >= UNTIL_SENT_S else None  # "until sent": count requests

    def show(self, elapsed_s: float, sink: _Sink, inflight: int, phase: str) -> None:
        if not self.enabled:
            return
        n = sink.done + sink.failed
        frac = min(n / self.max_requests if self.max_requests else elapsed_s / self.total_s, 1.0)
        width = 28
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        total = (
            f"{n}/{self.max_requests} requests, {elapsed_s:6.1f} s"
            if self.max_requests
            else f"{elapsed_s:6.1f}/{self.total_s:.0f} s"
        )
        self.stream.write(
            f"\r[{bar}] {total} {phase:<7} done {sink.done:>7} failed {sink.failed:>5} in flight {inflight:>5} "
        )
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _new_loop():
    try:
        import uvloop  # type: ignore

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()


async def _main(ctx: dict) -> dict:
    spec: LoadSpec = ctx["spec"]
    sink: _Sink = ctx["sink"]
    items = ctx["items"]
    workload: Workload = ctx["workload"]
    offsets = ctx["offsets"]
    stop_event: threading.Event | None = ctx["stop_event"]
    loop = asyncio.get_running_loop()

    if spec.transport == "fast":
        transport = FastTransport(verify=ctx["verify"])
    else:
        transport = httpx.AsyncHTTPTransport(
            verify=ctx["verify"], limits=httpx.Limits(max_connections=None, max_keepalive_connections=None), retries=0
        )
    client = httpx.AsyncClient(transport=transport, timeout=spec.timeout_s, follow_redirects=False)
    runner = RequestRunner(spec, client, ctx["lp"], ctx["tokenizer"])
    pre = spec.concurrency if spec.concurrency else min(64, max(1, len(offsets) if offsets is not None else 0))
    if isinstance(transport, FastTransport) and pre:
        try:
            await transport.warm(str(runner.url), min(pre, 2048), timeout=min(spec.timeout_s, 10.0))
        except Exception:
            pass

    warm_ns, dur_ns = int(spec.warmup_s * 1e9), int(ctx["duration_s"] * 1e9)
    t0_fn = ctx.get("t0_fn")
    t0 = await t0_fn() if t0_fn is not None else _perf_ns()
    ws, we = t0 + warm_ns, t0 + warm_ns + dur_ns
    send_end = we
    sink.ws, sink.we = ws, we
    edges = _Edges(ws, we, ctx["on_window_start"], ctx["on_window_end"])
    if ctx.get("edges", True):
        edges.start()
    tasks: set[asyncio.Task] = set()
    state = {"next": 0, "stop": False, "inflight": 0, "send_done_ns": None, "fail_fast": False}

    ff_evt = asyncio.Event()

    def fail_fast() -> None:  # the first requests all failed the same way: stop sending, short drain
        state["stop"] = state["fail_fast"] = True
        ff_evt.set()

    sink.on_fail_fast = fail_fast
    gone = getattr(sink, "gone", None)
    if gone is not None:  # the server stopped answering: stop as fail fast stops (called from the watcher's thread)
        gone.on_gone = lambda: loop.call_soon_threadsafe(fail_fast)
    wk, nw = ctx.get("worker", 0), ctx.get("n_workers", 1)
    max_req = _share(spec.max_requests, wk, nw)
    n_items = len(items)

    def item(i: int):
        if i < n_items:
            return items[i]
        it = workload.item(i * nw + wk)
        return (
            runner.encode(it.prompt, it.output_tokens),
            it.input_tokens,
            it.output_tokens,
            it.prompt if ctx["tokenizer"] is not None else None,
        )

    async def one(i: int, scheduled: int, on_status=None) -> None:
        body, n_in, n_out, prompt = item(i)
        state["inflight"] += 1
        try:
            rec = await runner.run(f"{i * nw + wk:07d}", body, n_in, n_out, scheduled, prompt, on_status)
        except _Cancelled as exc:
            sink.put(exc.record)
            raise
        finally:
            state["inflight"] -= 1
        sink.put(rec)

    def should_stop(now: int) -> bool:
        return state["stop"] or now >= send_end or (stop_event is not None and stop_event.is_set())

    async def stream(k: int) -> None:
        scheduled = t0
        if spec.ramp_s > 0 and spec.concurrency:
            # stream k of this worker is stream k*nw+wk overall: starts spread evenly over ramp_s
            scheduled = t0 + int(spec.ramp_s * 1e9 * (k * nw + wk) / spec.concurrency)
            delay = (scheduled - _perf_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
        wait_s = [0.0]

        def on_status(status: int, retry_after: float | None) -> None:
            if status == 429 and spec.honor_retry_after:
                wait_s[0] = min(retry_after if retry_after is not None else 1.0, 5.0)

        while True:
            if should_stop(_perf_ns()):
                return
            i = state["next"]
            if max_req is not None and i >= max_req:
                return
            state["next"] = i + 1
            await one(i, scheduled, on_status)
            if wait_s[0]:
                await asyncio.sleep(wait_s[0])
                wait_s[0] = 0.0
            scheduled = _perf_ns()

    async def open_loop() -> None:
        cap = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        for i, off in enumerate(offsets):
            target = t0 + int(off * 1e9)
            d = target - _perf_ns()
            while d > 100_000_000 and not state["stop"]:  # long gaps in slices, so that a stop is seen soon
                await asyncio.sleep(0.1)
                d = target - _perf_ns()
            if d > 0 and not state["stop"]:
                await asyncio.sleep(d / 1e9)
            if should_stop(target):
                break
            if cap is not None:
                await cap.acquire()
            state["next"] = i + 1
            t = loop.create_task(one(i, target))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            if cap is not None:
                t.add_done_callback(lambda _t: cap.release())

    async def show_progress() -> None:
        while True:
            now = _perf_ns()
            ctx["progress"].show(
                (now - t0) / 1e9,
                sink,
                state["inflight"],
                "warmup" if now < ws else ("steady" if now < send_end else "drain"),
            )
            await asyncio.sleep(0.5)

    async def watch_stop() -> None:
        ff_thread_evt = ctx.get("fail_fast_event")
        while not stop_event.is_set():
            if ff_thread_evt is not None and ff_thread_evt.is_set():  # the parent process saw it (workers)
                fail_fast()
                return
            await asyncio.sleep(0.05)
        state["stop"] = True
        state["stopped_ns"] = _perf_ns()  # a stop asked for ends the window now, not when the drain ends
        if state["stopped_ns"] < we:
            edges.fire_now(max(state["stopped_ns"], ws))

    abort_event = ctx.get("abort_event")
    main_task = asyncio.current_task()

    async def watch_abort() -> None:
        while not abort_event.is_set():
            await asyncio.sleep(0.05)
        main_task.cancel()

    aux = []
    if abort_event is not None:
        aux.append(loop.create_task(watch_abort()))
    if ctx["progress"].enabled:
        aux.append(loop.create_task(show_progress()))
    if stop_event is not None:
        aux.append(loop.create_task(watch_stop()))
    interrupted = False
    drain_start = drain_end = None
    try:
        if shapes.get(spec.shape).closed_loop:
            senders = [loop.create_task(stream(k)) for k in range(_share(spec.concurrency, wk, nw))]
            for t in senders:
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            all_sent = asyncio.ensure_future(asyncio.gather(*senders, return_exceptions=True))
            ff_wait = loop.create_task(ff_evt.wait())
            await asyncio.wait([all_sent, ff_wait], return_when=asyncio.FIRST_COMPLETED)
            ff_wait.cancel()
            if not all_sent.done():  # fail fast: the streams still waiting on a request drain below
                all_sent.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
        else:
            await open_loop()
        drain_start = min(_perf_ns(), send_end) if not state["stop"] else _perf_ns()
        # drain: in-flight requests end by their own timeout; the bound below is a safety net
        pending = [t for t in tasks if not t.done()]
        if pending:
            bound = FAIL_FAST_DRAIN_S if state["fail_fast"] else spec.timeout_s + 1.0
            _done, still = await asyncio.wait(pending, timeout=bound)
            for t in still:
                t.cancel()
            if still:
                await asyncio.gather(*still, return_exceptions=True)
        drain_end = _perf_ns()
    except asyncio.CancelledError:
        interrupted = True
        state["stop"] = True  # no stream starts another request, whatever an await below it did with the cancel
        every = list(tasks)
        pending = [t for t in every if not t.done()]
        while pending:  # a cancel an await swallowed is sent again
            for t in pending:
                t.cancel()
            _done, still = await asyncio.wait(pending, timeout=0.5)
            pending = list(still)
        await asyncio.gather(*every, return_exceptions=True)  # all done: collects their outcomes
        drain_end = _perf_ns()
    finally:
        for t in aux:
            t.cancel()
        now = min(_perf_ns(), state.get("stopped_ns") or math.inf)
        if now < we:  # sending stopped early (max_requests, trace exhausted, stop): the window ends here
            we = max(now, ws)
            edges.fire_now(we)
            sink.we = we
        if interrupted:
            edges.abort = True
            edges.fire_now()
        if edges.is_alive():
            edges.join(timeout=5.0)
        try:
            await client.aclose()
        except Exception:
            pass
        ctx["progress"].show((_perf_ns() - t0) / 1e9, sink, 0, "done")
        ctx["progress"].finish()
    if interrupted:
        raise asyncio.CancelledError()
    if drain_start is None:
        drain_start = drain_end
    return {
        "t0": t0,
        "ws": ws,
        "we": we,
        "send_end": min(send_end, drain_start),
        "drain_s": max(drain_end - drain_start, 0) / 1e9,
        "edges_called": dict(edges.called),
        "edge_errors": dict(edges.errors),
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
    load = spec.concurrency if shapes.get(spec.shape).closed_loop else (spec.concurrency or (spec.rate or 0))
    cpus = os.cpu_count() or 1
    return 1 if (load or 0) <= 256 or cpus < 2 else 2


def _prepare(spec: LoadSpec, tok, lp: str, wk: int, nw: int) -> dict:
    """Schedule and pre-encoded request bodies for worker wk of nw (global request index = local * nw + wk)."""
    trace_rows = shapes.get(spec.shape).request_rows(vars(spec))
    duration_s = effective_duration(spec)
    horizon = spec.warmup_s + duration_s
    shape = shapes.get(spec.shape)
    # until every request is sent: the schedule of exactly max_requests (or the whole trace), not a day of arrivals
    until_sent = math.inf if duration_s >= UNTIL_SENT_S else horizon
    offsets = None if shape.closed_loop else shape.offsets(vars(spec), until_sent, spec.seed)
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
    for i in range(expected):
        it = workload.item(i * nw + wk)
        body = rr.encode(it.prompt, it.output_tokens)
        nbytes += len(body)
        items.append((body, it.input_tokens, it.output_tokens, it.prompt if tok is not None else None))
        if nbytes > PREFETCH_BYTES:
            break
    return dict(
        spec=spec,
        items=items,
        workload=workload,
        offsets=offsets,
        lp=lp,
        tokenizer=tok,
        duration_s=duration_s,
        worker=wk,
        n_workers=nw,
    )


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
    ctx = _prepare(spec, tok, cfg["lp"], cfg["wk"], cfg["nw"])
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
    ctx.update(
        sink=_PipeSink(out),
        stop_event=stop_evt,
        abort_event=abort_evt,
        fail_fast_event=ff_evt,
        on_window_start=None,
        on_window_end=None,
        progress=_Progress(1.0, False),
        verify=cfg.get("verify", True),
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
    prog = _Progress(spec.warmup_s + max(duration_s, 0), progress, max_requests=spec.max_requests)
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
    }
    return _result(spec, sink, lp, duration_s, res, slo)


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
    tok = tokenizer if tokenizer is not None else (load_tokenizer(spec.tokenizer) if spec.tokenizer else None)
    lp = spec.load_point_id or default_load_point_id(spec)
    n_workers = _auto_workers(spec, workers)
    sink = _Sink(out, on_record, _FailFast(spec.fail_fast, endpoint_url(spec.url, spec.api)))
    if n_workers > 1:
        return replay.noted(
            sink,
            _run_multi(
                spec, n_workers, sink, lp, tok, progress, on_window_start, on_window_end, stop_event, verify, slo
            ),
        )
    ctx = _prepare(spec, tok, lp, 0, 1)
    ctx.update(
        sink=sink,
        stop_event=stop_event,
        on_window_start=on_window_start,
        on_window_end=on_window_end,
        progress=_Progress(spec.warmup_s + ctx["duration_s"], progress, max_requests=spec.max_requests),
        verify=verify,
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
        if in_loop:
            box: dict[str, Any] = {}

            def target():
                try:
                    box["res"] = go()
                except BaseException as exc:  # noqa: BLE001
                    box["exc"] = exc

            th = threading.Thread(target=target, name="wattbench-loadgen", daemon=True)
            th.start()
            th.join()
            if "exc" in box:
                raise box["exc"]
            res = box["res"]
        else:
            res = go()
    except asyncio.CancelledError:
        sink.close()
        raise KeyboardInterrupt("load run interrupted") from None
    finally:
        sink.close()

    return replay.noted(sink, _result(spec, sink, lp, ctx["duration_s"], res, slo))


def _result(spec: LoadSpec, sink: _Sink, lp: str, duration_s: float, res: dict, slo: dict | None) -> LoadResult:
    closed = shapes.get(spec.shape).closed_loop
    summary = metrics.summarize(
        sink.records, res["ws"], res["we"], slo=slo, closed_loop=closed, concurrency=spec.concurrency
    )
    status, ek, et = "ok", None, None
    if summary["sent"] and not summary["completed"]:
        status = "failed"
        errs = summary["errors"]
        ek = max(errs, key=errs.get) if errs else "no_requests"
        et = next((r["error_text"] for r in sink.records if r["error_kind"] == ek), None)
    elif not summary["sent"]:
        status, ek, et = "failed", "no_requests", "no request was sent"
    ff = sink.fail_fast.info()
    if ff is not None:
        summary["fail_fast"] = ff
        if not summary["completed"]:
            status, ek, et = "failed", ff["error_kind"], ff["message"]
    gone = sink.gone.info()
    if gone is not None:  # a broken window: the point is not a measurement, whatever completed before
        summary["server_gone"] = gone
        status, ek, et = "failed", "server_gone", gone["message"]
    summary.update(
        load_point_id=lp,
        workload=spec.workload or default_workload(spec),
        shape=spec.shape,
        api=spec.api,
        requested_rate=spec.rate if not shapes.get(spec.shape).closed_loop else None,
        requested_concurrency=spec.concurrency,
        burstiness=spec.burstiness,
        warmup_s=spec.warmup_s,
        drain_s=res["drain_s"],
        duration_s=duration_s if duration_s < UNTIL_SENT_S else summary["window_s"],
        send_s=(res["send_end"] - res["t0"]) / 1e9,
        transport=spec.transport,
        workers=res.get("workers", 1),
        window_edge_lateness_ms={
            k: (v - (res["ws"] if k == "start" else res["we"])) / 1e6 for k, v in res["edges_called"].items()
        },
    )
    if res["edge_errors"]:
        summary["window_callback_errors"] = res["edge_errors"]
    return LoadResult(
        spec=spec,
        records=sink.records,
        summary=summary,
        window_start_ns=res["ws"],
        window_end_ns=res["we"],
        t0_ns=res["t0"],
        send_end_ns=res["send_end"],
        drain_s=res["drain_s"],
        status=status,
        error_kind=ek,
        error_text=et,
        extra={"replay": {"load_point_id": lp, "duration_s": duration_s, "res": res, "slo": slo}},
    )


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
