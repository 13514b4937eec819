"""Shared machinery of the fake engine executables (stdlib only; any python3 runs them).

Each fake parses exactly the documented flags of the engine it stands for with argparse (an unknown flag or a bad
choice exits 2, as argparse does), appends {"prog", "argv"} to $FAKE_ENGINE_ARGV_LOG, and the serve commands run a
tiny OpenAI-compatible server: /health, /v1/models, /v1/completions, /v1/chat/completions (stream with a usage chunk,
and non-stream), /metrics (Prometheus text with the engine's metric names).

Scenarios, by environment variable. A value of "1" applies to every fake; otherwise it is a comma-separated list
and applies when one item equals the program name (vllm, sglang, trtllm-serve, trtllm-build, ...) or any argv item:
    FAKE_ENGINE_FAIL_BUILD    trtllm-build fails with a traceback, exit 1
                              (FAKE_ENGINE_FAIL_CONVERT: the checkpoint step)
    FAKE_ENGINE_OOM           print "torch.OutOfMemoryError: CUDA out of memory" at start, exit 1
    FAKE_ENGINE_HANG          never listen (health never answers -> health_timeout)
    FAKE_ENGINE_CRASH_AFTER   N: die (exit 1, CUDA error in the log) after answering N completion requests
    FAKE_ENGINE_TRUNCATE      answer half the completion tokens asked for, finish_reason 'length'
GPU: FAKE_GPU_NAME, FAKE_GPU_CC (compute capability), FAKE_GPU_DRIVER, FAKE_NO_GPU=1 (nvidia-smi fails).
Timing: FAKE_TTFT_MS (default 5), FAKE_ITL_MS (default 1), FAKE_BUILD_S (default 0.2).
Versions: FAKE_TRTLLM_VERSION, FAKE_VLLM_VERSION (0.11 or later: vLLM 0.25.0's start and metric names),
FAKE_SGLANG_VERSION.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TRTLLM_VERSION = os.environ.get("FAKE_TRTLLM_VERSION", "0.18.2")
VLLM_VERSION = os.environ.get("FAKE_VLLM_VERSION", "0.10.1.1")
SGLANG_VERSION = os.environ.get("FAKE_SGLANG_VERSION", "0.5.0")


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:3] if x.isdigit())


# the environment a test may check reached the engine: the plan's env map and NVLink-multicast switches
_RECORDED_ENV = (
    "VLLM_USE_FLASHINFER_SAMPLER",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


def record(prog: str, argv: list[str]) -> None:
    path = os.environ.get("FAKE_ENGINE_ARGV_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(
                json.dumps(
                    {
                        "prog": prog,
                        "argv": argv,
                        "pid": os.getpid(),
                        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER"),
                        **{k: os.environ.get(k) for k in _RECORDED_ENV},
                    }
                )
                + "\n"
            )


def scenario(name: str, prog: str, argv: list[str]) -> str | None:
    """The scenario's value when it applies to this process, else None."""
    value = os.environ.get(name)
    if not value:
        return None
    if name == "FAKE_ENGINE_CRASH_AFTER":
        n, _, scope = value.partition(":")  # "N" or "N:scope,scope"
        if not scope or any(s == prog or s in argv for s in scope.split(",")):
            return n
        return None
    if value in ("1", "all", "true"):
        return value
    return value if any(s == prog or s in argv for s in value.split(",")) else None


def start_failures(prog: str, argv: list[str]) -> None:
    """The start-up scenarios shared by every server: OOM and hang."""
    print(f"INFO {prog}: loading weights", flush=True)
    if scenario("FAKE_ENGINE_OOM", prog, argv):
        print('Traceback (most recent call last):\n  File "worker.py", line 1, in load_model', flush=True)
        print(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.10 GiB of which 1.05 GiB is free.",
            flush=True,
        )
        sys.exit(1)
    if scenario("FAKE_ENGINE_HANG", prog, argv):
        print(f"INFO {prog}: capturing CUDA graphs ...", flush=True)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        while True:
            time.sleep(1)


class FakeServer:
    def __init__(
        self,
        prog: str,
        argv: list[str],
        model_names: list[str],
        metrics: str | None,
        max_seq_len: int | None = None,
        health_paths=("/health",),
    ):
        self.prog, self.argv = prog, argv
        self.model_names = model_names
        self.metrics = metrics  # "vllm" | "sglang" | None (no /metrics)
        self.max_seq_len = max_seq_len
        self.health_paths = health_paths
        self.truncate = bool(scenario("FAKE_ENGINE_TRUNCATE", prog, argv))
        crash = scenario("FAKE_ENGINE_CRASH_AFTER", prog, argv)
        self.crash_after = int(crash) if crash else None
        self.ttft = float(os.environ.get("FAKE_TTFT_MS", "5")) / 1000
        self.itl = float(os.environ.get("FAKE_ITL_MS", "1")) / 1000
        self.lock = threading.Lock()
        self.done = 0
        self.running = 0
        self.prompt_total = 0
        self.gen_total = 0

    # ------------------------------------------------------------------ requests
    def plan(self, body: dict, chat: bool) -> tuple[int, int, str]:
        """(prompt tokens, completion tokens, finish_reason) for a request: one word = one token."""
        if chat:
            text = " ".join(
                m.get("content", "")
                if isinstance(m.get("content"), str)
                else " ".join(p.get("text", "") for p in m.get("content") or [])
                for m in body.get("messages", [])
            )
        else:
            p = body.get("prompt", "")
            text = p if isinstance(p, str) else " ".join(map(str, p))
        prompt = len(text.split())
        asked = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        out, finish = asked, "length"
        if self.max_seq_len is not None and prompt + asked > self.max_seq_len:
            out = max(0, self.max_seq_len - prompt)  # TensorRT-LLM: cut at max_seq_len, silently
        if self.truncate:
            out = max(1, asked // 2)
        return prompt, out, finish

    def finished_one(self) -> None:
        with self.lock:
            self.done += 1
            crash = self.crash_after is not None and self.done >= self.crash_after
        if crash:

            def die():
                time.sleep(0.05)
                print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
                print(f"{self.prog}: engine core died unexpectedly", flush=True)
                os._exit(1)

            threading.Thread(target=die, daemon=True).start()

    def metrics_text(self) -> str:
        p = self.metrics
        if p == "vllm":  # KV-cache usage: vLLM 0.10's name, or the one 0.11 and later serve alone
            kv = "vllm:kv_cache_usage_perc" if version_tuple(VLLM_VERSION) >= (0, 11) else "vllm:gpu_cache_usage_perc"
            names = (
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                kv,
                "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total",
            )
        else:
            names = (
                "sglang:num_running_reqs",
                "sglang:num_queue_reqs",
                "sglang:token_usage",
                "sglang:prompt_tokens_total",
                "sglang:generation_tokens_total",
            )
        label = f'{{model_name="{self.model_names[0]}"}}'
        values = (self.running, 0, min(1.0, self.running / 64), self.prompt_total, self.gen_total)
        lines = []
        for n, v in zip(names, values):
            lines += [f"# TYPE {n} {'counter' if n.endswith('_total') else 'gauge'}", f"{n}{label} {float(v)}"]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ serving
    def serve(self, host: str, port: int) -> int:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?")[0]
                if path in server.health_paths:
                    return self._send(200, b"")
                if path == "/v1/models":
                    data = [{"id": m, "object": "model", "owned_by": server.prog} for m in server.model_names]
                    return self._send(200, json.dumps({"object": "list", "data": data}).encode())
                if path == "/metrics" and server.metrics:
                    return self._send(200, server.metrics_text().encode(), "text/plain; version=0.0.4")
                # where each engine says its version: vLLM's /version, SGLang's /get_server_info (TensorRT-LLM only
                # logs it at start)
                if path == "/version" and server.prog == "vllm":
                    return self._send(200, json.dumps({"version": VLLM_VERSION}).encode())
                if path == "/get_server_info" and server.prog == "sglang":
                    return self._send(200, json.dumps({"version": SGLANG_VERSION, "tp_size": 1}).encode())
                return self._send(404, b'{"detail":"Not Found"}')

            def _chunk(self, obj) -> None:
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def do_POST(self):
                path = self.path.split("?")[0]
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    return self._send(400, b'{"error":"bad json"}')
                if path not in ("/v1/chat/completions", "/v1/completions"):
                    return self._send(404, b'{"detail":"Not Found"}')
                chat = path == "/v1/chat/completions"
                prompt, n_out, finish = server.plan(body, chat)
                with server.lock:
                    server.running += 1
                    server.prompt_total += prompt
                try:
                    usage = {"prompt_tokens": prompt, "completion_tokens": n_out, "total_tokens": prompt + n_out}
                    base = {"id": "cmpl-fake", "created": int(time.time()), "model": body.get("model")}
                    if not body.get("stream"):
                        time.sleep(server.ttft + server.itl * n_out)
                        text = " tok" * n_out
                        choice = (
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                            if chat
                            else {"index": 0, "text": text, "finish_reason": finish}
                        )
                        obj = "chat.completion" if chat else "text_completion"
                        return self._send(
                            200, json.dumps({**base, "object": obj, "choices": [choice], "usage": usage}).encode()
                        )
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    obj = "chat.completion.chunk" if chat else "text_completion"

                    def ch(content=None, fr=None, role=None):
                        if chat:
                            delta = {}
                            if role:
                                delta["role"] = role
                            if content is not None:
                                delta["content"] = content
                            return {
                                **base,
                                "object": obj,
                                "choices": [{"index": 0, "delta": delta, "finish_reason": fr}],
                            }
                        return {
                            **base,
                            "object": obj,
                            "choices": [{"index": 0, "text": content or "", "finish_reason": fr}],
                        }

                    if chat:
                        self._chunk(ch("", role="assistant"))
                    time.sleep(server.ttft)
                    for i in range(n_out):
                        if i:
                            time.sleep(server.itl)
                        self._chunk(ch(" tok"))
                    self._chunk(ch(None if chat else "", fr=finish))
                    if (body.get("stream_options") or {}).get("include_usage"):
                        self._chunk({**base, "object": obj, "choices": [], "usage": usage})
                    self._chunk(b"[DONE]")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with server.lock:
                        server.running -= 1
                        server.gen_total += n_out
                    server.finished_one()

        ThreadingHTTPServer.daemon_threads = True
        ThreadingHTTPServer.allow_reuse_address = True
        try:
            httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            print(
                f"ERROR: [Errno 98] error while attempting to bind on address ({host!r}, {port}): "
                f"address already in use ({exc})",
                flush=True,
            )
            return 1

        def stop(*_):
            print(f"INFO {self.prog}: shutting down", flush=True)
            threading.Thread(target=httpd.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
        httpd.serve_forever(poll_interval=0.05)
        return 0
