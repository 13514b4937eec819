"""Shared helpers for the reliability tests: a tiny misbehaving OpenAI-compatible server, bundle readers,
and an emulator agent spec small enough for two shared cores."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from tests.bundle_files import read_table
from wattbench_agent.engines.base import EngineConfig

# One behaviour per chat request, in this order, cycling. Everything but "ok" is something a broken server does.
BEHAVIOURS = ("ok", "http_500", "garbage", "drop_before_reply", "drop_mid_stream", "not_json", "ok")


def _sse(obj) -> bytes:
    data = b"data: " + json.dumps(obj).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(content: str | None = None, finish: str | None = None) -> dict:
    delta = {"content": content} if content is not None else {}
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                part = self.request.recv(65536)
                if not part:
                    return
                head += part
            header, _, body = head.partition(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = next(
                (int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")), 0
            )
            while len(body) < length:
                body += self.request.recv(65536)
            self.server.owner.respond(self.request, path, body)
        except OSError:
            pass


class MisbehavingServer:
    """A loopback server whose /v1/models answers and whose chat completions cycle through BEHAVIOURS."""

    def __init__(self, behaviours=BEHAVIOURS):
        self.behaviours = behaviours
        self.count = 0
        self.seen: list[str] = []
        self._lock = threading.Lock()
        self._srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self._srv.daemon_threads = True
        self._srv.owner = self
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"

    def respond(self, sock: socket.socket, path: str, body: bytes) -> None:
        if path.startswith("/v1/models") or path.startswith("/health"):
            payload = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
            return
        with self._lock:
            mode = self.behaviours[self.count % len(self.behaviours)]
            self.count += 1
            self.seen.append(mode)
        req = json.loads(body or b"{}")
        n = int(req.get("max_tokens") or 4)
        stream_head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n"
        )
        if mode == "http_500":
            payload = b'{"error": {"message": "internal error", "type": "server_error"}}'
            sock.sendall(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close"
                b"\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
        elif mode == "garbage":
            sock.sendall(b"\x00\xff\xfeTHIS IS NOT HTTP\r\n\x07\x07\r\n\r\n")
        elif mode == "drop_before_reply":
            sock.shutdown(socket.SHUT_RDWR)
        elif mode == "drop_mid_stream":
            sock.sendall(stream_head + _sse(_chunk(" tok")) + _sse(_chunk(" tok")))
            sock.shutdown(socket.SHUT_RDWR)
        elif mode == "not_json":
            bad = b"data: {this is not json\n\n"
            sock.sendall(
                stream_head
                + b"%x\r\n%s\r\n" % (len(bad), bad)
                + _sse(_chunk(" tok"))
                + _sse(_chunk(None, "stop"))
                + b"0\r\n\r\n"
            )
        else:  # ok: n content events, a finish chunk, a usage chunk, [DONE]
            out = stream_head + b"".join(_sse(_chunk(" tok")) for _ in range(n)) + _sse(_chunk(None, "length"))
            out += _sse(
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "model": "m",
                    "choices": [],
                    "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n},
                }
            )
            done = b"data: [DONE]\n\n"
            sock.sendall(out + b"%x\r\n%s\r\n" % (len(done), done) + b"0\r\n\r\n")

    @contextmanager
    def running(self) -> Iterator[MisbehavingServer]:
        thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._srv.shutdown()
            self._srv.server_close()
            thread.join(timeout=5)


def external_deployment(name: str, url: str, n_requests: int = 4) -> dict:
    """A deployment of an already running server (target external) with one small closed-loop point."""
    cfg = EngineConfig(engine="external", model="m", config_name=name, precision="bf16", tp=1)
    point = {
        "load_point_id": f"{name}:w:c2",
        "workload": "w",
        "spec": {
            "api": "chat",
            "shape": "concurrency",
            "concurrency": 2,
            "input_tokens": 8,
            "output_tokens": 4,
            "warmup_s": 0.0,
            "duration_s": 10.0,
            "max_requests": n_requests,
            "timeout_s": 5,
            # the servers here count every request they get: none before t0 to size prompts (loadgen/prompt_length.py)
            "calibrate_prompts": False,
        },
    }
    return {
        "deployment_id": name,
        "build_id": cfg.build_id(),
        "engine_config": asdict(cfg),
        "target": "external",
        "url": url,
        "telemetry": "none",
        "idle_baseline_s": 0,
        "health_timeout_s": 5,
        "load_points": [point],
    }


def rows(bundle: Path, table: str) -> list[dict]:
    return read_table(Path(bundle), table)  # whatever format the agent wrote it in


def emulator_spec(run_id: str, out: Path, n_points: int = 3, duration_s: float = 1.0) -> dict:
    """An agent spec: one emulated vllm-like deployment (1 GPU, emulated telemetry) with `n_points` short points."""
    cfg = EngineConfig(
        engine="emulator",
        profile="vllm-like",
        model="llama-3.1-8b",
        gpu="h100-sxm",
        config_name="vllm-like",
        precision="fp8",
        tp=1,
    )
    points = [
        {
            "load_point_id": f"emu:steady:c{2 * (i + 1)}",
            "workload": "steady",
            "spec": {
                "api": "chat",
                "shape": "concurrency",
                "concurrency": 2 * (i + 1),
                "input_tokens": 64,
                "output_tokens": 16,
                "warmup_s": 0.2,
                "duration_s": duration_s,
                "timeout_s": 30,
            },
        }
        for i in range(n_points)
    ]
    return {
        "run_id": run_id,
        "source": "emulated",
        "plan_name": "reliability",
        "out": str(out),
        "deployments": [
            {
                "deployment_id": "emu",
                "build_id": cfg.build_id(),
                "engine_config": asdict(cfg),
                "target": "local",
                "telemetry": "auto",
                "idle_baseline_s": 0.3,
                "health_timeout_s": 30,
                "sampler_hz": 10,
                "load_points": points,
            }
        ],
    }
