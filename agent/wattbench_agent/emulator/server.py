"""The emulator's HTTP server: a small HTTP/1.1 server on asyncio protocols (no framework), so that one core
streams tens of thousands of tokens per second. The engine loop wakes once per scheduler iteration, sleeps until
the iteration's modelled end (absolute deadlines, so rounding of timers never accumulates), then writes every
sequence's new tokens straight into its connection's transport."""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import json
import math
import signal
import sys
import time
import uuid
from typing import Any

from wattbench_agent.emulator.engine import Request, Scheduler
from wattbench_agent.emulator.profiles import EMULATES, EMULATOR_VERSION, EngineSetup
from wattbench_agent.emulator.telemetry import Telemetry
from wattbench_agent.http_request import (
    IDLE_TIMEOUT_S,
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    REQUEST_TIMEOUT_S,
    BadRequest,
    parse_request,
)

_WORDS = (
    "the of and to in is that for it as with was on be by at this from are or an have not but they "
    "which one you all were her she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being under "
    "never day same another know while last might us great old year off come since against go came "
    "right used take three"
).split()
WORDS = tuple(" " + w for w in _WORDS)  # one token each
NW = len(WORDS)

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# Bounds on what one client may make the server hold (http_request.py): the request head, 64 KiB, and one request
# body: 32 bytes for each token the model takes in a prompt (max_model_len; TensorRT-LLM's max_input_len), at least
# 1 MiB and at most 16 MiB (a 128k-token prompt is under 1 MiB of JSON, so a 131072-token model takes 4 MiB).
# Bytes a client sends ahead while its request streams are not read beyond this either. A body is gathered in
# place (a bytearray), the head parsed once: a 16 MiB body arriving in 64 KiB reads used to be copied whole at
# every read (about 2 GB of copying), which stalled every other client.
BODY_BYTES_PER_TOKEN = 32
MIN_BODY_BYTES = 1 << 20
# Connections that hold a slot and do nothing: a request must arrive whole within REQUEST_TIMEOUT_S of its first
# byte (408, closed: a slowloris client sending a byte now and then), a kept-alive connection idle for
# IDLE_TIMEOUT_S is closed, and past the file-descriptor limit the connection idle longest (sending no request, or
# half a one) is closed to let a new one in.
# An error answer that closes the connection (408, 400, 500) is followed by a lingering close, as HTTP servers do:
# the write side is shut and what the client still sends is read and dropped for up to LINGER_S. Closing at once
# with unread bytes makes the kernel send a reset, and the client's kernel then drops the answer unread.
LINGER_S = 2.0
FD_HEADROOM = 64  # descriptors kept for everything but client connections
DECODE_IN_THREAD_BYTES = 256 * 1024  # a body this large is decoded by the decoder thread (a few ms of json and words)
_BUCKETS_TTFT = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_BUCKETS_ITL = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_BUCKETS_E2E = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class Histogram:
    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, v)] += n
        self.sum += v * n
        self.count += n

    def render(self, name: str, labels: str, help_: str) -> list[str]:
        out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        cum = 0
        for b, c in zip(self.buckets, self.counts):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{b}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class ApiError(Exception):
    def __init__(self, status: int, message: str, etype: str = "BadRequestError"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.etype = etype


def _int_field(body: dict[str, Any], name: str, default: int) -> int:
    """An integer field of a request body (absent or null: `default`); anything else is a 400 naming it."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {value!r:.80}")
    return value


def error_body(status: int, message: str, etype: str) -> bytes:
    return json.dumps(
        {
            "error": {"message": message, "type": etype, "param": None, "code": status},
            "object": "error",
            "message": message,
            "type": etype,
            "code": status,
        }
    ).encode()


class Stream:
    """The response side of one generation request."""

    __slots__ = (
        "conn",
        "stream",
        "chat",
        "prefix",
        "suffix",
        "rid",
        "created",
        "model",
        "usage",
        "off",
        "sent_role",
        "req",
        "prompt_tokens",
        "done_fut",
        "text_pos",
    )

    def __init__(
        self,
        conn: HttpConnection,
        stream: bool,
        chat: bool,
        rid: str,
        model: str,
        usage: bool,
        off: int,
        prompt_tokens: int,
    ):
        self.conn = conn
        self.stream = stream
        self.chat = chat
        self.rid = rid
        self.created = int(time.time())
        self.model = model
        self.usage = usage
        self.off = off
        self.sent_role = False
        self.prompt_tokens = prompt_tokens
        self.text_pos = 0
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = (
            f'data: {{"id":"{rid}","object":"{obj}","created":{self.created},"model":{json.dumps(model)},'
            '"choices":[{"index":0,'
        )
        if chat:
            self.prefix = head + '"delta":{"content":"'
            self.suffix = '"},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            self.prefix = head + '"text":"'
            self.suffix = '","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    def text(self, a: int, b: int) -> str:
        off = self.off
        return "".join([WORDS[(off + i) % NW] for i in range(a, b)])


class EmulatorServer:
    def __init__(
        self,
        st: EngineSetup,
        host: str = "127.0.0.1",
        port: int = 8000,
        seed: int = 0,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ):
        self.st = st
        self.dep = st.dep
        self.sched = Scheduler(st, seed)
        self.host = host
        self.port = port
        self.seed = seed
        self.telemetry = Telemetry(st.dep, st.hbm_used_bytes, seed=str(seed), server_start=st.server_start)
        self.model_names = {n.lower() for n in st.dep.model.names()}
        if st.options.get("served_model_name"):
            self.model_names.add(str(st.options["served_model_name"]).lower())
        self.served_name = str(st.options.get("served_model_name") or st.dep.model.id)
        self.wake: asyncio.Event | None = None
        self.labels = f'engine="0",model_name="{self.served_name}"'  # vLLM 0.25.0's labels (one engine core)
        self.h_ttft = Histogram(_BUCKETS_TTFT)
        self.h_itl = Histogram(_BUCKETS_ITL)
        self.h_tpot = Histogram(_BUCKETS_ITL)  # vLLM: the inter-token buckets
        self.h_e2e = Histogram(_BUCKETS_E2E)
        # TTFT's engine-side parts, observed as a request finishes (as vLLM does): waiting -> scheduled, scheduled ->
        # first token (sql/views.sql v_engine_ttft_split)
        self.h_queue = Histogram(_BUCKETS_E2E)
        self.h_prefill = Histogram(_BUCKETS_E2E)
        self.lag_max = 0.0
        self.events_total = 0
        self.tokens_streamed = 0
        self.started = time.time()
        self._req_counter = 0
        self.stream_interval = int(st.options.get("stream_interval") or 1)
        self.k_coalesce = 1
        self.server: asyncio.AbstractServer | None = None
        self.max_body = body_limit(st)
        self.prompt_limit = prompt_token_limit(st)
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.connections: set[HttpConnection] = set()
        self.max_connections = connection_limit()
        self.timed_out = 0  # connections closed by a timeout or to make room
        # one thread decodes large request bodies (json, prompt words), in arrival order, off the event loop
        self.decoder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="emulator-decode")

    # ------------------------------------------------------------ engine loop
    async def engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        sched, dep, tel = self.sched, self.dep, self.telemetry
        assert self.wake is not None
        deadline = loop.time()
        fe = dep.kf.frontend_event_s
        si = self.stream_interval
        emit = self._emit
        while True:
            sched.pump(loop.time())
            if not sched.has_work():
                tel.set_idle(time.perf_counter_ns())
                self.wake.clear()
                nxt = sched.next_intake()  # a request still with the (emulated) API server
                if nxt is None:
                    await self.wake.wait()
                else:
                    try:
                        await asyncio.wait_for(self.wake.wait(), max(0.0, nxt - loop.time()))
                    except TimeoutError:
                        pass
                deadline = loop.time()
                continue
            batch = sched.schedule(loop.time())
            if batch is None:
                self._reject_unschedulable()
                await asyncio.sleep(0)
                continue
            cost = dep.step(batch.load)
            now = loop.time()
            lag = now - deadline
            if lag > 0.02:  # fell behind (CPU starved): do not try to catch up with a burst of short steps
                self.lag_max = max(self.lag_max, lag)
                deadline = now
            tel.set_state(time.perf_counter_ns(), cost.power_w, cost.util_gpu, cost.util_mem, cost.clk, cost.reasons)
            deadline += cost.dt
            # several tokens per SSE event when the API server cannot keep up with the engine
            k = math.ceil(len(sched.running) * fe / cost.dt) if cost.dt > 0 else 1
            self.k_coalesce = k if k > si else si
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            n_dec = batch.load.seqs - (1 if batch.load.prefill_tokens else 0)
            if n_dec > 0:
                self.h_itl.observe(cost.dt, n_dec)
            sched.complete(batch, loop.time(), emit)

    def _reject_unschedulable(self) -> None:
        """Nothing runs and the head of the queue can never fit: fail it (both engines reject such requests)."""
        sched = self.sched
        if sched.running or not sched.waiting:
            return
        r = sched.waiting.popleft()
        s: Stream = r.sink
        if s is not None:
            s.conn.fail_request(
                s,
                ApiError(
                    400,
                    f"request of {r.prompt_len} prompt tokens + {r.target} output "
                    f"tokens does not fit in the KV cache ({sched.total_blocks} "
                    f"blocks of {sched.bs} tokens)",
                ),
            )

    def _emit(self, r: Request, n: int, done: bool) -> None:
        s: Stream = r.sink
        if s is None:
            return
        if r.generated == 1:
            self.h_ttft.observe(r.first_token_t - r.arrival)
        r.pending += n
        if done:
            self.h_e2e.observe(r.last_token_t - r.arrival)
            if r.sched_t is not None and r.first_token_t is not None:
                self.h_queue.observe(max(0.0, r.sched_t - r.ready_t))
                self.h_prefill.observe(r.first_token_t - r.sched_t)
            # vLLM's per-request TPOT: decode time over the tokens after the first (0 for one token)
            self.h_tpot.observe((r.last_token_t - r.first_token_t) / (r.generated - 1) if r.generated > 1 else 0.0)
        if not s.stream:
            if done:
                s.conn.finish_nonstream(s, r)
            return
        if r.pending >= self.k_coalesce or done:
            a = r.generated - r.pending
            chunk = s.prefix + s.text(a, r.generated)
            if done:
                suffix = s.suffix.replace('"finish_reason":null', f'"finish_reason":"{r.finish_reason}"', 1)
            else:
                suffix = s.suffix
            chunk += suffix
            if not s.sent_role and s.chat:
                chunk = (
                    s.prefix[: -len('"content":"')]
                    + '"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
                    + chunk
                )
                s.sent_role = True
            self.events_total += 1
            self.tokens_streamed += r.pending
            r.pending = 0
            if done:
                tail = []
                if s.usage:
                    obj = "chat.completion.chunk" if s.chat else "text_completion"
                    tail.append(
                        f'data: {{"id":"{s.rid}","object":"{obj}","created":{s.created},"model":'
                        f'{json.dumps(s.model)},"choices":[],"usage":{{"prompt_tokens":{r.prompt_len},'
                        f'"total_tokens":{r.prompt_len + r.generated},"completion_tokens":{r.generated}}}}}\n\n'
                    )
                tail.append("data: [DONE]\n\n")
                chunk += "".join(tail)
                s.conn.write_chunk(chunk.encode(), last=True)
            else:
                s.conn.write_chunk(chunk.encode())

    # ------------------------------------------------------------ requests
    def _prompt_too_long(self) -> ApiError:
        limit = self.prompt_limit
        if self.st.profile == "trtllm-like":
            return ApiError(400, f"Prompt length (more than {limit}) exceeds maximum input length ({limit}).")
        return ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested more than {limit} "
            "tokens in the messages. Please reduce the length of the messages or completion.",
        )

    def _words(self, text: str, toks: list[str]) -> None:
        """Append the words of `text` to `toks`, splitting no further than the model's prompt limit: a prompt past
        it is refused after work bounded by the limit, not by the text's length."""
        left = self.prompt_limit - len(toks)
        words = text.split(None, max(left, 0))
        if len(words) > left:
            raise self._prompt_too_long()
        toks += words

    def tokenize_chat(self, messages: Any) -> list[str]:
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty list")
        toks = ["<|begin_of_text|>"]
        for m in messages:
            if not isinstance(m, dict):
                raise ApiError(400, "each message must be an object")
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            toks += ["<|start_header_id|>", str(m.get("role", "user")), "<|end_header_id|>", "\n\n"]
            self._words(str(content or ""), toks)
            toks.append("<|eot_id|>")
        toks += ["<|start_header_id|>", "assistant", "<|end_header_id|>", "\n\n"]
        return toks

    def tokenize_body(self, raw: bytes) -> bytes:
        """vLLM's POST /tokenize: `prompt` (BOS + its words) or `messages` (the chat template, with the assistant's
        header unless add_generation_prompt is false): {count, max_model_len, tokens}; the ids stand in for tokens."""
        import zlib

        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise ApiError(400, f"request body is not valid JSON ({str(exc)[:120]})") from None
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        if body.get("model") is not None and str(body["model"]).lower() not in self.model_names:
            raise ApiError(404, f"The model `{body['model']}` does not exist.", "NotFoundError")
        if "messages" in body:
            toks = self.tokenize_chat(body["messages"])
            if body.get("add_generation_prompt") is False:
                toks = toks[:-4]
        elif isinstance(body.get("prompt"), str):
            toks = ["<|begin_of_text|>"] if body.get("add_special_tokens", True) else []
            self._words(body["prompt"], toks)
        else:
            raise ApiError(400, "give `prompt` (a string) or `messages`")
        ids = [zlib.crc32(t.encode()) % 128256 for t in toks]
        return json.dumps({"count": len(ids), "max_model_len": self.st.max_model_len, "tokens": ids}).encode()

    def block_hashes(self, toks: list[str]) -> list[int]:
        if not self.sched.prefix_caching:
            return []
        bs = self.sched.bs
        out = []
        h = 0
        for i in range(0, len(toks) - bs + 1, bs):
            h = hash((h, tuple(toks[i : i + bs])))
            out.append(h)
        return out

    def decode(self, raw: bytes, chat: bool) -> tuple[dict[str, Any], list[str]]:
        """A completion request's body and prompt tokens, or ApiError. Reads nothing but the body and settings fixed
        at start, so a large body is decoded in the decoder thread while the event loop serves everyone else."""
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:  # UnicodeDecodeError too
            raise ApiError(400, f"request body is not valid JSON ({str(exc)[:120]})") from None
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        model = body.get("model")
        if model is None or str(model).lower() not in self.model_names:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
        if chat:
            toks = self.tokenize_chat(body.get("messages"))
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if isinstance(prompt, list):
                if len(prompt) >= self.prompt_limit:
                    raise self._prompt_too_long()
                toks = ["<|begin_of_text|>"] + [str(t) for t in prompt]
            elif isinstance(prompt, str):
                toks = ["<|begin_of_text|>"]
                self._words(prompt, toks)
            else:
                raise ApiError(400, "prompt must be a string or a list of token ids")
        return body, toks

    def new_request(self, conn: HttpConnection, body: dict[str, Any], toks: list[str], chat: bool) -> Stream:
        model = body.get("model")
        if _int_field(body, "n", 1) != 1:
            raise ApiError(400, "the emulator serves n=1 only")
        mt = (
            body.get("max_completion_tokens")
            if chat and body.get("max_completion_tokens") is not None
            else body.get("max_tokens")
        )
        if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt < 1):
            raise ApiError(400, f"max_tokens must be at least 1, got {mt!r}.")
        min_t = _int_field(body, "min_tokens", 0)
        if min_t < 0:
            raise ApiError(400, f"min_tokens must be >= 0, got {min_t}.")
        if mt is not None and min_t > mt:
            raise ApiError(400, f"min_tokens must be less than or equal to max_tokens={mt}, got {min_t}.")
        prompt_len = len(toks)
        target, truncated, err = self.sched.validate(prompt_len, mt)
        if err:
            raise ApiError(400, err)
        self._req_counter += 1
        stream = bool(body.get("stream"))
        so = body.get("stream_options") or {}
        if not isinstance(so, dict):
            raise ApiError(400, f"stream_options must be an object, got {so!r:.80}")
        usage = bool(so.get("include_usage"))
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        s = Stream(conn, stream, chat, rid, str(model), usage, (self._req_counter * 7919 + self.seed) % NW, prompt_len)
        r = Request(rid, prompt_len, target, asyncio.get_running_loop().time(), self.block_hashes(toks), sink=s)
        r.truncated = truncated
        s.req = r
        if target <= 0:  # nothing to generate (truncated to zero): answer at once
            r.state = "finished"
            r.finish_reason = "length"
            r.first_token_t = r.last_token_t = r.arrival
            return s
        self.sched.submit(r, r.arrival)
        assert self.wake is not None
        self.wake.set()
        return s

    # ------------------------------------------------------------ other endpoints
    def models_body(self) -> bytes:
        return json.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.served_name,
                        "object": "model",
                        "created": int(self.started),
                        "owned_by": "wattbench-emulator",
                        "root": self.dep.model.hf_id,
                        "parent": None,
                        "max_model_len": self.st.max_model_len,
                        "permission": [],
                    }
                ],
            }
        ).encode()

    def metrics_body(self) -> bytes:
        """The engine's Prometheus page in vLLM 0.25.0's names, labels and HELP texts (checked against a real page
        in tests/emulator/test_server.py), then the emulator's own wattbench_emulator_* series."""
        s, L = self.sched, self.labels
        lines = []

        def g(name: str, typ: str, val: float, help_: str, extra: str = "") -> None:
            lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {typ}", f"{name}{{{L}{extra}}} {val}"])

        g("vllm:num_requests_running", "gauge", len(s.running), "Number of requests in model execution batches.")
        g("vllm:num_requests_waiting", "gauge", len(s.waiting), "Number of requests waiting to be processed.")
        g("vllm:kv_cache_usage_perc", "gauge", round(s.kv_usage(), 6), "KV-cache usage. 1 means 100 percent usage.")
        g(
            "vllm:prefix_cache_queries_total",
            "counter",
            s.prefix_queries,
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        g(
            "vllm:prefix_cache_hits_total",
            "counter",
            s.prefix_hits,
            "Prefix cache hits, in terms of number of cached tokens.",
        )
        g(
            "vllm:num_preemptions_total",
            "counter",
            s.num_preemptions,
            "Cumulative number of preemption from the engine.",
        )
        g("vllm:prompt_tokens_total", "counter", s.prompt_tokens_total, "Number of prefill tokens processed.")
        g(
            "vllm:generation_tokens_total",
            "counter",
            s.generation_tokens_total,
            "Number of generation tokens processed.",
        )
        lines += [
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason in ("stop", "length", "abort", "error", "repetition"):  # vLLM 0.25.0's finished reasons
            lines.append(
                f'vllm:request_success_total{{{L},finished_reason="{reason}"}} {s.finished_by_reason.get(reason, 0)}'
            )
        lines += self.h_ttft.render(
            "vllm:time_to_first_token_seconds", L, "Histogram of time to first token in seconds."
        )
        lines += self.h_itl.render(
            "vllm:inter_token_latency_seconds", L, "Histogram of inter-token latency in seconds."
        )
        lines += self.h_tpot.render(
            "vllm:request_time_per_output_token_seconds", L, "Histogram of time_per_output_token_seconds per request."
        )
        lines += self.h_e2e.render(
            "vllm:e2e_request_latency_seconds", L, "Histogram of e2e request latency in seconds."
        )
        lines += self.h_queue.render(
            "vllm:request_queue_time_seconds", L, "Histogram of time spent in WAITING phase for request."
        )
        lines += self.h_prefill.render(
            "vllm:request_prefill_time_seconds", L, "Histogram of time spent in PREFILL phase for request."
        )
        g(
            "wattbench_emulator_info",
            "gauge",
            1,
            "Emulated deployment (source=emulated).",
            f',profile="{self.st.profile}",gpu="{self.dep.gpu.id}",tp="{self.dep.tp}",precision="{self.dep.precision.id}",version="{EMULATOR_VERSION}"',
        )
        g("wattbench_emulator_steps_total", "counter", s.steps, "Scheduler iterations run.")
        g("wattbench_emulator_sse_events_total", "counter", self.events_total, "Content-bearing SSE events sent.")
        g(
            "wattbench_emulator_lag_seconds_max",
            "gauge",
            round(self.lag_max, 6),
            "Largest lag of the engine loop behind modelled time.",
        )
        return ("\n".join(lines) + "\n").encode()

    def telemetry_body(self) -> bytes:
        return json.dumps(self.telemetry.snapshot()).encode()

    def info_body(self) -> bytes:
        d = self.st.summary()
        d.update(
            {
                "served_model_name": self.served_name,
                "kv_usage": self.sched.kv_usage(),
                "num_preemptions": self.sched.num_preemptions,
            }
        )
        return json.dumps(d).encode()

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.server = await loop.create_server(
            lambda: HttpConnection(self), self.host, self.port, backlog=1024, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]
        self._engine_task = loop.create_task(self.engine_loop())
        self._sweep_task = loop.create_task(self.sweep_connections())

    async def sweep_connections(self) -> None:
        """Close connections that hold a slot and do nothing (see REQUEST_TIMEOUT_S)."""
        period = max(0.05, min(1.0, self.request_timeout_s / 4, self.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self.connections):
                conn.check_timeouts(now)

    def admit(self, conn: HttpConnection) -> bool:
        """Room for a new connection: past the limit, the one idle longest (not answering a request) is closed;
        False if every connection is busy answering one."""
        self.connections.add(conn)
        if len(self.connections) <= self.max_connections:
            return True
        idle = [c for c in self.connections if c is not conn and not c.busy and c.socket_open]
        if not idle:
            self.connections.discard(conn)
            return False
        oldest = min(idle, key=lambda c: c.last_active_t)
        oldest.close_idle(f"the server is at its limit of {self.max_connections} connections")
        return True

    def listening_line(self) -> str:
        d = self.dep
        return (
            f"wattbench emulator listening on http://{self.host}:{self.port} (emulated {self.st.profile}, "
            f"{d.model.id} on {d.tp}x {d.gpu.id} at {d.precision.id}; kv cache {self.st.kv_tokens} tokens; "
            "timing and telemetry from a performance model, not a GPU)"
        )


class HttpConnection(asyncio.Protocol):
    __slots__ = (
        "srv",
        "transport",
        "buf",
        "need",
        "busy",
        "keep_alive",
        "active",
        "closed",
        "paused",
        "first_byte_t",
        "last_active_t",
        "linger_until",
    )

    def __init__(self, srv: EmulatorServer):
        self.srv = srv
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()  # appended in place: a large body is not copied at every read
        self.need = 0  # bytes the request being received takes in all, once its head is read (0: not known yet)
        self.busy = False
        self.keep_alive = True
        self.active: Stream | None = None
        self.closed = False
        self.paused = False
        self.first_byte_t: float | None = None  # when the request being received began to arrive
        self.last_active_t = time.monotonic()
        self.linger_until: float | None = None  # set once an answer closed the connection (see LINGER_S)

    @property
    def socket_open(self) -> bool:
        """Its socket is still open: serving, or lingering after an answer that closed it (see LINGER_S)."""
        return not self.closed or self.linger_until is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.srv.admit(self):
            self._respond(503, error_body(503, "too many connections", "ServiceUnavailable"), close=True)
            return
        try:
            import socket

            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.srv.connections.discard(self)
        if self.active is not None and self.active.req is not None:
            self.srv.sched.abort(self.active.req)
            self.srv.sched.finished_by_reason["abort"] = self.srv.sched.finished_by_reason.get("abort", 0) + 1
        self.active = None

    def data_received(self, data: bytes) -> None:
        if self.linger_until is not None:
            return  # answered and closing: dropped (see LINGER_S)
        now = time.monotonic()
        self.last_active_t = now
        if not self.buf:
            self.first_byte_t = now
        self.buf += data
        if self.busy and len(self.buf) > MAX_HEAD_BYTES + self.srv.max_body and self.transport is not None:
            # a client sending ahead while its request streams: stop reading until the request is done
            self.transport.pause_reading()
            self.paused = True
        if not self.busy and len(self.buf) >= self.need:
            self._guarded_process()

    def check_timeouts(self, now: float) -> None:
        """Called by the server's sweep: a request that does not arrive in time, or an idle kept-alive connection,
        is closed; a lingering close ends."""
        if self.linger_until is not None:
            if now > self.linger_until and self.transport is not None:
                self.transport.close()
            return
        if self.closed or self.busy:
            return
        if self.buf and self.first_byte_t is not None and now - self.first_byte_t > self.srv.request_timeout_s:
            self.srv.timed_out += 1
            self.buf.clear()
            message = (
                f"the request did not arrive whole within {self.srv.request_timeout_s:g} s of its first byte; "
                "expected a whole request head and body"
            )
            self._respond(408, error_body(408, message, "RequestTimeout"), close=True)
        elif not self.buf and now - self.last_active_t > self.srv.idle_timeout_s:
            self.close_idle(f"idle for {self.srv.idle_timeout_s:g} s")

    def close_idle(self, why: str) -> None:
        self.srv.timed_out += 1
        if self.transport is not None and self.socket_open:
            self.transport.close()
        self.closed = True

    def _guarded_process(self) -> None:
        """_process, with anything it did not expect answered as a 500 on this connection only."""
        try:
            self._process()
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
            self._internal_error(exc)

    def _internal_error(self, exc: Exception) -> None:
        """Anything unexpected while handling a request: a 500 on this connection, which is closed."""
        print(
            f"wattbench emulator: internal error on a request ({type(exc).__name__}: {exc}); "
            "the connection is closed, the server goes on",
            file=sys.stderr,
            flush=True,
        )
        if self.active is not None and self.active.req is not None:
            self.srv.sched.abort(self.active.req)
        self.active = None
        self.busy = False
        self._respond(500, error_body(500, f"internal error: {type(exc).__name__}", "InternalServerError"), close=True)

    def _bad_request(self, status: int, message: str) -> None:
        """A request head that cannot be read: answer once and close (the next request's start is unknown)."""
        self.buf.clear()
        self.need = 0
        self._respond(status, error_body(status, message, "BadRequestError"), close=True)

    def _process(self) -> None:
        while not self.busy and not self.closed and len(self.buf) >= self.need:
            try:
                req, used = parse_request(self.buf, MAX_HEAD_BYTES, self.srv.max_body, "the emulator")
            except BadRequest as exc:
                self._bad_request(exc.status, exc.message)
                return
            if req is None:
                self.need = used  # the head is read: wait for the whole body before parsing again
                return
            del self.buf[:used]
            self.need = 0
            self.first_byte_t = time.monotonic() if self.buf else None
            self.keep_alive = req.keep_alive
            self._dispatch(req.method, req.path, req.body)

    def _dispatch(self, method: str, path: str, body: bytes) -> None:
        srv = self.srv
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                if method != "POST":
                    raise ApiError(405, "use POST", "MethodNotAllowed")
                chat = path.endswith("chat/completions")
                if len(body) > DECODE_IN_THREAD_BYTES:  # json and words of a large prompt: off the event loop
                    self.busy = True  # the connection waits for its body; the server does not
                    future = asyncio.get_running_loop().run_in_executor(srv.decoder, srv.decode, body, chat)
                    future.add_done_callback(lambda f: self._decoded(f, chat))
                    return
                self._start(*srv.decode(body, chat), chat)
                return
            if path == "/tokenize" and srv.st.profile == "vllm-like":  # vLLM serves it; trtllm-serve does not
                if method != "POST":
                    raise ApiError(405, "use POST", "MethodNotAllowed")
                self._respond(200, srv.tokenize_body(body))
                return
            if method != "GET":
                raise ApiError(
                    405 if path in ("/health", "/metrics", "/v1/models", "/emulator/telemetry") else 404,
                    f"{method} {path} is not served",
                    "NotFoundError",
                )
            if path == "/health":
                self._respond(200, b"", ctype=b"application/json")
            elif path == "/v1/models":
                self._respond(200, srv.models_body())
            elif path == "/metrics":
                self._respond(200, srv.metrics_body(), ctype=b"text/plain; version=0.0.4; charset=utf-8")
            elif path == "/emulator/telemetry":
                self._respond(200, srv.telemetry_body())
            elif path == "/emulator/info":
                self._respond(200, srv.info_body())
            elif path == "/version":
                self._respond(
                    200,
                    json.dumps(
                        {
                            "version": f"wattbench-emulator-{EMULATOR_VERSION}",
                            "emulates": EMULATES[srv.st.profile],
                            "profile": srv.st.profile,
                            "source": "emulated",
                        }
                    ).encode(),
                )
            else:
                raise ApiError(404, f"{path} not found", "NotFoundError")
        except ApiError as e:
            self.busy = False
            self.active = None
            self._respond(e.status, error_body(e.status, e.message, e.etype))

    def _start(self, data: dict[str, Any], toks: list[str], chat: bool) -> None:
        """Submit a decoded completion request and begin its answer (raises ApiError before anything is sent)."""
        s = self.srv.new_request(self, data, toks, chat)
        self.active = s
        self.busy = True
        if s.stream:
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"cache-control: no-cache\r\nx-wattbench-emulated: true\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
        if s.req.state == "finished":  # zero tokens to generate
            if s.stream:
                self._finish_empty_stream(s)
            else:
                self.finish_nonstream(s, s.req)

    def _decoded(self, future: asyncio.Future, chat: bool) -> None:
        """A large body decoded in the decoder thread: start its request, or answer its error, then read on."""
        if self.closed:
            return
        try:
            try:
                self.busy = False
                self._start(*future.result(), chat)
            except ApiError as e:
                self.busy = False
                self.active = None
                self._respond(e.status, error_body(e.status, e.message, e.etype))
        except Exception as exc:  # noqa: BLE001 - as _guarded_process: this connection only
            self._internal_error(exc)
            return
        if not self.busy:
            self._next()

    def _finish_empty_stream(self, s: Stream) -> None:
        r = s.req
        chunk = s.prefix + s.suffix.replace('"finish_reason":null', '"finish_reason":"length"', 1)
        if s.usage:
            obj = "chat.completion.chunk" if s.chat else "text_completion"
            chunk += (
                f'data: {{"id":"{s.rid}","object":"{obj}","created":{s.created},"model":{json.dumps(s.model)},'
                f'"choices":[],"usage":{{"prompt_tokens":{r.prompt_len},"total_tokens":{r.prompt_len},'
                '"completion_tokens":0}}\n\n'
            )
        self.write_chunk((chunk + "data: [DONE]\n\n").encode(), last=True)

    def _respond(self, status: int, body: bytes, ctype: bytes = b"application/json", close: bool = False) -> None:
        if self.transport is None or self.closed:
            return
        head = (
            (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n").encode()
            + b"content-type: "
            + ctype
            + b"\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\nx-wattbench-emulated: true\r\n"
        )
        if close or not self.keep_alive:
            head += b"connection: close\r\n"
        self.last_active_t = time.monotonic()  # idle from the end of its last answer
        self.transport.write(head + b"\r\n" + body)
        if close:
            self._linger()
        elif not self.keep_alive:
            self.transport.close()
            self.closed = True

    def _linger(self) -> None:
        """Shut the write side after the answer and drop what the client still sends (see LINGER_S)."""
        self.closed = True
        if self not in self.srv.connections or not self.transport.can_write_eof():
            # not admitted (the server's sweep would never end its linger): closed at once
            self.transport.close()
            return
        self.transport.write_eof()
        self.linger_until = time.monotonic() + LINGER_S
        if self.paused:
            self.transport.resume_reading()
            self.paused = False

    # called by the engine loop
    def write_chunk(self, data: bytes, last: bool = False) -> None:
        if self.closed or self.transport is None:
            return
        if last:
            self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data))
            self._done()
        else:
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def finish_nonstream(self, s: Stream, r: Request) -> None:
        text = s.text(0, r.generated)
        usage = {
            "prompt_tokens": r.prompt_len,
            "total_tokens": r.prompt_len + r.generated,
            "completion_tokens": r.generated,
        }
        if s.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": r.finish_reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": r.finish_reason, "stop_reason": None}
            obj = "text_completion"
        body = json.dumps(
            {"id": s.rid, "object": obj, "created": s.created, "model": s.model, "choices": [choice], "usage": usage}
        ).encode()
        self.srv.tokens_streamed += r.generated
        self.active = None
        self.busy = False
        self._respond(200, body)
        self._next()

    def fail_request(self, s: Stream, e: ApiError) -> None:
        self.active = None
        if s.stream:  # headers already sent: report the error in the stream, as vLLM does
            self.write_chunk(
                ("data: " + error_body(e.status, e.message, e.etype).decode() + "\n\ndata: [DONE]\n\n").encode(),
                last=True,
            )
        else:
            self.busy = False
            self._respond(e.status, error_body(e.status, e.message, e.etype))

    def _done(self) -> None:
        self.active = None
        self.busy = False
        self.last_active_t = time.monotonic()
        if not self.keep_alive:
            self.transport.close()
            self.closed = True
            return
        self._next()

    def _next(self) -> None:
        """The current request is answered: read on, and serve what the client sent ahead."""
        if self.closed:
            return
        if self.paused and self.transport is not None:
            self.transport.resume_reading()
            self.paused = False
        if self.buf:
            self._guarded_process()


def prompt_token_limit(st: EngineSetup) -> int:
    """The most prompt tokens this engine takes: max_model_len (vLLM), max_input_len (TensorRT-LLM)."""
    return int(st.options.get("max_input_len") or st.max_model_len or 131072)


def body_limit(st: EngineSetup) -> int:
    """The largest request body this engine takes: BODY_BYTES_PER_TOKEN for each prompt token it allows."""
    return max(MIN_BODY_BYTES, min(MAX_BODY_BYTES, prompt_token_limit(st) * BODY_BYTES_PER_TOKEN))


def connection_limit() -> int:
    """How many client connections fit in this process's file-descriptor limit (RLIMIT_NOFILE)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 1000
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(8, soft - FD_HEADROOM)


def serve(
    st: EngineSetup,
    host: str,
    port: int,
    seed: int = 0,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
) -> int:
    """Run the server until SIGINT/SIGTERM. Prints the listening line on stderr when ready."""
    if hasattr(signal, "SIGPIPE"):  # a client hanging up is that connection's end, never the server's (EPIPE)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        import uvloop  # type: ignore

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass

    async def main() -> None:
        srv = EmulatorServer(st, host, port, seed, request_timeout_s, idle_timeout_s)
        await srv.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        print(srv.listening_line(), file=sys.stderr, flush=True)
        await stop.wait()
        srv.server.close()

    asyncio.run(main())
    return 0
