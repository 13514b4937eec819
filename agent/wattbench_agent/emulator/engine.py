"""Continuous-batching schedulers of the two engine profiles, shared by the real-time server and simulate().

vllm-like  (vLLM V1): running sequences first, then waiting ones, within max_num_seqs and a token budget of
           max_num_batched_tokens (chunked prefill); paged KV blocks allocated on demand; when blocks run out the
           most recently admitted sequence is preempted and later recomputed; prefix caching of full prompt
           blocks (refcounted, LRU-evicted).
trtllm-like (TensorRT-LLM in-flight batching, GUARANTEED_NO_EVICT): a sequence is admitted only when seats
           (max_batch_size), tokens (max_num_tokens, whole prompt in one context step unless chunked context is
           on) and KV blocks for its whole prompt + output are free; never preempts. Requests that do not fit
           wait in the application-layer queue. prompt + max_tokens > max_seq_len is truncated silently.

Both sit behind an API server (Frontend): one serial process that takes in each new request (intake_s: HTTP,
chat template, tokenisation) and finishes each completed one (finish_s), in arrival order; a request reaches the
scheduler only when the API server has taken it in. With the scheduler running one step ahead of the GPU (vLLM
--async-scheduling, TensorRT-LLM's overlap scheduler: host_overlap > 0), a request that reaches the scheduler while
a step runs joins the step after the next one.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from wattbench_agent.emulator.perf import StepLoad
from wattbench_agent.emulator.profiles import EngineSetup


class Request:
    __slots__ = (
        "rid",
        "prompt_len",
        "target",
        "max_tokens",
        "arrival",
        "block_hashes",
        "num_computed",
        "generated",
        "nblocks",
        "cached_blocks",
        "state",
        "finish_reason",
        "aborted",
        "sink",
        "first_token_t",
        "last_token_t",
        "preemptions",
        "seq_no",
        "truncated",
        "pending",
        "stride",
        "meta",
        "reserved",
        "hit_tokens",
        "ready_t",
        "sched_t",
    )

    def __init__(
        self,
        rid: str,
        prompt_len: int,
        max_tokens: int,
        arrival: float = 0.0,
        block_hashes: list[int] | None = None,
        sink: Any = None,
        meta: Any = None,
    ):
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.target = max_tokens  # tokens it will generate (truncation may lower it)
        self.arrival = arrival
        self.block_hashes = block_hashes or []
        self.num_computed = 0
        self.generated = 0
        self.nblocks = 0  # KV blocks held (including cached_blocks)
        self.cached_blocks: list[int] = []  # prefix-cache block hashes it holds a reference to
        self.state = "new"  # waiting | running | finished
        self.finish_reason: str | None = None
        self.aborted = False
        self.sink = sink
        self.first_token_t: float | None = None
        self.last_token_t: float | None = None
        self.preemptions = 0
        self.seq_no = 0
        self.truncated = False
        self.pending = 0  # tokens produced but not yet streamed (SSE coalescing)
        self.stride = 1
        self.meta = meta
        self.reserved = 0
        self.hit_tokens = 0
        self.ready_t = arrival  # when the API server handed it to the scheduler
        self.sched_t: float | None = None  # when the scheduler first put it in a batch (vLLM's scheduled event)


class Frontend:
    """The API server in front of the engine, as one serial process: it finishes completed requests (finish_s each)
    as their last outputs come back, and takes new requests in (intake_s each) in arrival order whenever it is not
    busy. Output streaming itself is modelled by SSE coalescing (frontend_event_s), not here."""

    __slots__ = ("intake_s", "finish_s", "latency_s", "queue", "free_t", "rng", "_next")

    def __init__(self, intake_s: float, finish_s: float, latency_s: float = 0.0, seed: int = 0):
        self.intake_s = intake_s
        self.finish_s = finish_s
        self.latency_s = latency_s
        self.queue: deque[Request] = deque()
        self.free_t = 0.0  # when the API server is next free
        # intake times vary request to request (uniform 0.5-1.5 x intake_s, seeded): two runs of the same closed
        # loop fall out of lockstep differently, as repeats on a real engine do
        self.rng = random.Random(seed)
        self._next = self._draw()

    def _draw(self) -> float:
        return self.intake_s * (0.5 + self.rng.random())

    @property
    def active(self) -> bool:
        return self.intake_s > 0.0 or self.finish_s > 0.0 or self.latency_s > 0.0

    def finished(self, now: float, n: int) -> None:
        if n and self.finish_s > 0.0:
            self.free_t = (self.free_t if self.free_t > now else now) + n * self.finish_s

    def release(self, now: float) -> list[Request]:
        """Requests whose intake completed by `now`, each with its ready_t."""
        out = []
        q = self.queue
        while q:
            r = q[0]
            t = r.arrival + self.latency_s
            done = (self.free_t if self.free_t > t else t) + self._next
            if done > now:
                break
            self.free_t = done
            r.ready_t = done
            out.append(q.popleft())
            self._next = self._draw()
        return out

    def next_ready(self) -> float | None:
        if not self.queue:
            return None
        t = self.queue[0].arrival + self.latency_s
        return (self.free_t if self.free_t > t else t) + self._next


class Batch:
    __slots__ = ("items", "load")

    def __init__(self) -> None:
        self.items: list[tuple[Request, int]] = []
        self.load = StepLoad()


class Scheduler:
    def __init__(self, st: EngineSetup, seed: int = 0):
        self.st = st
        self.profile = st.profile
        o = st.options
        self.bs = st.block_size
        self.total_blocks = st.kv_blocks
        self.free_blocks = st.kv_blocks  # neither used nor cached
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._seq = 0
        # prefix cache: hash -> refcount; evictable (refcount 0) kept in LRU order
        self.prefix_caching = bool(o.get("enable_prefix_caching", False))
        self.cache_ref: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()
        if self.profile == "trtllm-like":
            self.max_seqs = int(o["max_batch_size"])
            self.token_budget = int(o["max_num_tokens"])
            self.chunked = bool(o["enable_chunked_context"])
            self.no_evict = o["scheduler_policy"] == "guaranteed_no_evict"
        else:
            self.max_seqs = int(o["max_num_seqs"])
            self.token_budget = int(o["max_num_batched_tokens"])
            self.chunked = True
            self.no_evict = False
        # counters (Prometheus)
        self.num_preemptions = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.finished_by_reason: dict[str, int] = {}
        self.steps = 0
        self._aborts = 0  # aborts not yet swept from the running list
        kf = st.dep.kf
        self.frontend = Frontend(kf.intake_s, kf.finish_s, kf.intake_latency_s, seed)
        self.run_ahead = kf.host_overlap > 0.0  # the next step is scheduled while this one runs
        self.last_sched_t = -1.0  # when the step now running (or the last one) was scheduled
        self.last_end_t = -1.0  # when the last step ended
        self._sched_stamp: float | None = None  # the scheduled time of requests admitted by this schedule() call

    # ------------------------------------------------------------ admission
    def validate(self, prompt_len: int, max_tokens: int | None) -> tuple[int, bool, str | None]:
        """(tokens to generate, truncated?, error text or None) for a new request."""
        o = self.st.options
        if self.profile == "trtllm-like":
            if prompt_len > int(o["max_input_len"]):
                return (
                    0,
                    False,
                    (
                        f"Prompt length ({prompt_len}) exceeds maximum input length "
                        f"({o['max_input_len']}). Set log level to info and check TRTGptModel logs for "
                        "how maximum input length is set"
                    ),
                )
            room = int(o["max_seq_len"]) - prompt_len
            mt = room if max_tokens is None else max_tokens
            if mt > room:  # the seed's warning: silently truncated to max_seq_len
                return max(room, 0), True, None
            return mt, False, None
        mml = self.st.max_model_len
        room = mml - prompt_len
        if max_tokens is None:
            max_tokens = room
        if prompt_len + max_tokens > mml or room <= 0:
            return (
                0,
                False,
                (
                    f"This model's maximum context length is {mml} tokens. However, you requested "
                    f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in "
                    "the completion). Please reduce the length of the messages or completion."
                ),
            )
        return max_tokens, False, None

    def submit(self, r: Request, now: float) -> None:
        """A new request at the API server (r.arrival = now): queued for intake, or straight to the scheduler."""
        if self.frontend.active:
            r.state = "intake"
            self.frontend.queue.append(r)
        else:
            r.ready_t = now
            self.add(r)

    def pump(self, now: float) -> None:
        """Hand the requests the API server has taken in by `now` to the scheduler."""
        if self.frontend.queue:
            for r in self.frontend.release(now):
                self.add(r)

    def next_intake(self) -> float | None:
        """When the API server next hands a request over (None: nothing queued there)."""
        return self.frontend.next_ready()

    def add(self, r: Request) -> None:
        r.state = "waiting"
        self._seq += 1
        r.seq_no = self._seq
        if r.target <= 0:
            r.target = 0
        self.waiting.append(r)

    def abort(self, r: Request) -> None:
        r.aborted = True
        self._aborts += 1

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks - len(self.evictable)

    def kv_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    # ------------------------------------------------------------ blocks
    def _available(self) -> int:
        return self.free_blocks + len(self.evictable)

    def _take(self, n: int) -> None:
        take_free = min(n, self.free_blocks)
        self.free_blocks -= take_free
        n -= take_free
        for _ in range(n):  # evict least recently used cached blocks
            h, _ = self.evictable.popitem(last=False)
            del self.cache_ref[h]

    def _release(self, r: Request, cache_prompt: bool) -> None:
        """Give back a sequence's blocks; its full prompt blocks stay in the prefix cache when enabled."""
        n_cached = len(r.cached_blocks)
        for h in r.cached_blocks:
            c = self.cache_ref[h] - 1
            self.cache_ref[h] = c
            if c == 0:
                self.evictable[h] = None
        r.cached_blocks = []
        own = r.nblocks - n_cached
        if cache_prompt and self.prefix_caching and r.block_hashes:
            full_computed = min(len(r.block_hashes), min(r.num_computed, r.prompt_len) // self.bs)
            for h in r.block_hashes[n_cached:full_computed]:
                if own <= 0:
                    break
                if h in self.cache_ref:
                    continue
                self.cache_ref[h] = 0
                self.evictable[h] = None
                own -= 1
        self.free_blocks += max(own, 0)
        r.nblocks = 0
        r.reserved = 0

    def _prefix_lookup(self, r: Request) -> None:
        if not (self.prefix_caching and r.block_hashes) or r.num_computed:
            return
        self.prefix_queries += r.prompt_len
        hits: list[int] = []
        max_blocks = (r.prompt_len - 1) // self.bs  # at least one token is computed
        for h in r.block_hashes[:max_blocks]:
            if h in self.cache_ref:
                hits.append(h)
            else:
                break
        for h in hits:
            c = self.cache_ref[h]
            if c == 0:
                self.evictable.pop(h, None)
            self.cache_ref[h] = c + 1
        r.cached_blocks = hits
        r.nblocks = len(hits)
        r.num_computed = len(hits) * self.bs
        r.hit_tokens = r.num_computed
        self.prefix_hits += r.num_computed

    def _preempt(self, r: Request) -> None:
        self._release(r, cache_prompt=True)
        r.num_computed = 0
        r.state = "waiting"
        r.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(r)

    # ------------------------------------------------------------ one iteration
    def schedule(self, now: float | None = None) -> Batch | None:
        """The next step's batch. `now` (engine time) enables the API server's intake and the scheduler's run-ahead
        lag; without it every waiting request is eligible."""
        lag = (0.0, -1.0)  # requests that reached the scheduler in (lo, hi] wait one more step
        if now is not None:
            self.pump(now)
            if self.run_ahead:
                # running ahead, the step starting now was scheduled when the previous one started: a request that
                # reached the scheduler while that step ran joins the step after this one; one that came while the
                # engine sat idle is scheduled at once
                lag = (self.last_sched_t, self.last_end_t)
        # vLLM stamps a request scheduled when the batch holding it is formed: running ahead, while the step before
        # it still runs (when that one was scheduled), unless the engine sat idle
        busy = self.run_ahead and now is not None and self.last_sched_t >= 0.0 and self.last_end_t >= now
        self._sched_stamp = self.last_sched_t if busy else now
        sched = self._schedule_trt if self.profile == "trtllm-like" else self._schedule_vllm
        b = sched(lag)
        if not b.items and lag[1] >= lag[0] and self.waiting:
            self._sched_stamp = now
            b = sched()  # nothing else to run: the engine idles, and then schedules the request at once
        if now is not None and b.items:
            self.last_sched_t = now
        return b if b.items else None

    def _add_item(self, b: Batch, r: Request, q: int) -> None:
        b.items.append((r, q))
        ld = b.load
        c = r.num_computed
        ld.tokens += q
        ld.seqs += 1
        ld.kv_read += c
        ld.attn_work += q * (c + (q + 1) * 0.5)
        if c + q >= r.prompt_len + r.generated:
            ld.sampled += 1
        if q > 1:
            ld.prefill_tokens += q

    def _drop_aborted(self, cache_prompt: bool) -> list:
        """Release the requests whose clients went away; returns the running list without them."""
        if self._aborts:
            self._aborts = 0
            if any(r.aborted for r in self.running):
                for r in [r for r in self.running if r.aborted]:
                    self._release(r, cache_prompt=cache_prompt)
                self.running = [r for r in self.running if not r.aborted]
        return self.running

    def _schedule_vllm(self, lag: tuple[float, float] = (0.0, -1.0)) -> Batch:
        b = Batch()
        bs = self.bs
        budget = self.token_budget
        running = self._drop_aborted(cache_prompt=True)
        preempted = False
        i = 0
        items = b.items
        ld = b.load
        # the hot loop (every running sequence, every step): _add_item inlined into local sums
        tokens = seqs = sampled = prefill = 0
        kv_read = 0
        attn = 0.0
        while i < len(running) and budget > 0:
            r = running[i]
            c = r.num_computed
            need = r.prompt_len + r.generated - c
            q = need if need < budget else budget
            new_blocks = -(-(c + q) // bs) - r.nblocks
            if new_blocks > 0:
                ok = True
                while new_blocks > self.free_blocks + len(self.evictable):
                    victim = running.pop()  # lowest priority: admitted last
                    self._preempt(victim)
                    preempted = True
                    if victim is r:
                        ok = False
                        break
                if not ok:
                    break
                self._take(new_blocks)
                r.nblocks += new_blocks
            items.append((r, q))
            tokens += q
            seqs += 1
            kv_read += c
            if q == 1:
                attn += c + 1.0
            else:
                attn += q * (c + (q + 1) * 0.5)
                prefill += q
            if q == need:
                sampled += 1
            budget -= q
            i += 1
        ld.tokens += tokens
        ld.seqs += seqs
        ld.sampled += sampled
        ld.kv_read += kv_read
        ld.attn_work += attn
        ld.prefill_tokens += prefill
        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < self.max_seqs:
                r = waiting[0]
                if r.aborted:
                    waiting.popleft()
                    continue
                if lag[0] < r.ready_t <= lag[1]:
                    break
                self._prefix_lookup(r)
                need = r.prompt_len + r.generated - r.num_computed
                q = need if need < budget else budget
                new_blocks = -(-(r.num_computed + q) // bs) - r.nblocks
                if new_blocks > self._available():
                    break
                waiting.popleft()
                self._take(new_blocks)
                r.nblocks += new_blocks
                r.state = "running"
                if r.sched_t is None:
                    r.sched_t = self._sched_stamp
                running.append(r)
                self._add_item(b, r, q)
                budget -= q
        return b

    def _schedule_trt(self, lag: tuple[float, float] = (0.0, -1.0)) -> Batch:
        b = Batch()
        bs = self.bs
        budget = self.token_budget
        running = self._drop_aborted(cache_prompt=False)
        # generation requests first (one token each), then context chunks of already admitted requests
        for r in running:
            need = r.prompt_len + r.generated - r.num_computed
            if need == 1:
                self._add_item(b, r, 1)
                budget -= 1
        for r in running:
            need = r.prompt_len + r.generated - r.num_computed
            if need > 1 and budget > 0:
                q = min(need, budget)
                self._add_item(b, r, q)
                budget -= q
        waiting = self.waiting
        while waiting and len(running) < self.max_seqs and budget > 0:
            r = waiting[0]
            if r.aborted:
                waiting.popleft()
                continue
            if lag[0] < r.ready_t <= lag[1]:
                break
            need = r.prompt_len - r.num_computed
            if need > budget and not self.chunked:
                break
            total = r.prompt_len + r.target
            reserve = -(-total // bs) if self.no_evict else -(-(r.prompt_len + 1) // bs)
            if reserve > self.free_blocks:
                break
            waiting.popleft()
            self.free_blocks -= reserve
            r.nblocks = r.reserved = reserve
            r.state = "running"
            if r.sched_t is None:
                r.sched_t = self._sched_stamp
            running.append(r)
            q = min(need, budget)
            self._add_item(b, r, q)
            budget -= q
        return b

    def complete(self, b: Batch, now: float, emit: Callable[[Request, int, bool], None] | None = None) -> int:
        """Apply a finished iteration: advance every scheduled sequence; returns tokens generated.

        `emit(req, new_tokens, finished)` is called for every sequence that produced a token or finished.
        """
        self.steps += 1
        self.last_end_t = now
        produced = 0
        finished_any = False
        bs = self.bs
        trt = self.profile == "trtllm-like"
        trt_grow = trt and not self.no_evict
        for r, q in b.items:
            if r.aborted:
                continue
            c = r.num_computed + q
            r.num_computed = c
            g = r.generated
            if c >= r.prompt_len + g:
                if g == 0 and r.first_token_t is None:
                    r.first_token_t = now
                    self.prompt_tokens_total += r.prompt_len
                g += 1
                r.generated = g
                produced += 1
                r.last_token_t = now
                done = g >= r.target
                if trt_grow and not done:
                    need = -(-(r.prompt_len + r.generated + 1) // bs)
                    if need > r.nblocks:
                        take = min(need - r.nblocks, self.free_blocks)
                        self.free_blocks -= take
                        r.nblocks += take
                if done:
                    r.state = "finished"
                    r.finish_reason = "length"
                    finished_any = True
                    self.finished_by_reason["length"] = self.finished_by_reason.get("length", 0) + 1
                if emit is not None:
                    emit(r, 1, done)
        self.generation_tokens_total += produced
        if finished_any:
            keep = []
            n_fin = 0
            for r in self.running:
                if r.state == "finished":
                    self._release(r, cache_prompt=True)
                    n_fin += 1
                else:
                    keep.append(r)
            self.running = keep
            self.frontend.finished(now, n_fin)
        return produced
