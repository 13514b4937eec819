"""The soak test's client: N connections over S seconds against an emulator, mixing good requests with hostile
ones, at most C open at once. Prints one JSON line: counts per kind and outcome, and the unexpected outcomes.

    python -m tests.emulator.soak_client --port 8000 --model llama-3.1-8b --connections 2000 --seconds 60

Each kind says what it sends and what answer it expects (None: the client hangs up, no answer is judged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import struct
import time
from collections import Counter


def body(model: str, **extra) -> bytes:
    return json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "soak " * 20}], "max_tokens": 16, **extra}
    ).encode()


def post(path: str, payload: bytes, headers: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n{headers}"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def kinds(model: str) -> dict[str, tuple[bytes, int | None, str]]:
    """kind -> (bytes sent, expected status or None, what the client does after sending)."""
    chat = "/v1/chat/completions"
    return {
        "good_stream": (post(chat, body(model, stream=True, stream_options={"include_usage": True})), 200, "read"),
        "good_nonstream": (
            post("/v1/completions", json.dumps({"model": model, "prompt": "soak " * 30, "max_tokens": 8}).encode()),
            200,
            "read",
        ),
        "metrics": (b"GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n", 200, "read"),
        # minus the head's length plus 4: the length that made the old parser loop forever
        "negative_length": (b"GET /health HTTP/1.1\r\nContent-Length: -45\r\n\r\n", 400, "read"),
        "letters_length": (f"POST {chat} HTTP/1.1\r\nContent-Length: abc\r\n\r\n".encode(), 400, "read"),
        "huge_length": (f"POST {chat} HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n".encode(), 413, "read"),
        "garbage": (bytes(random.Random(7).randrange(256) for _ in range(300)) + b"\r\n\r\n", 400, "read"),
        "n_abc": (post(chat, body(model, n="abc")), 400, "read"),
        "bad_json": (post(chat, b'{"model": "x", "messages": [}'), 400, "read"),
        "head_too_large": (b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * 70_000, 431, "read"),
        "hang_up_mid_stream": (post(chat, body(model, stream=True, max_tokens=2000, ignore_eos=True)), None, "reset"),
        "pipelined_then_close": (b"GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n" * 10, None, "close"),
        "truncated_body": (post(chat, body(model))[:-10], None, "close"),
        "slowloris": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\nContent-Le", None, "linger"),
    }


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    """The whole body of a response: Content-Length bytes, or chunks up to the last one."""
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])}
    if b"content-length" in headers:
        return await reader.readexactly(int(headers[b"content-length"]))
    out = b""
    while not out.endswith(b"0\r\n\r\n"):
        part = await reader.read(65536)
        if not part:
            raise asyncio.IncompleteReadError(out, None)
        out += part
    return out


async def one(port: int, kind: str, spec: tuple[bytes, int | None, str], timeout_s: float) -> tuple[str, str]:
    data, expected, then = spec
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout_s)
    except (TimeoutError, OSError) as exc:
        return kind, f"connect failed: {type(exc).__name__}"
    try:
        writer.write(data)
        await writer.drain()
        if then == "read":
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
            status = int(head.split(b" ", 2)[1])
            if status != expected:
                return kind, f"status {status}, expected {expected}"
            await asyncio.wait_for(read_body(reader, head), timeout_s)
            return kind, "ok"
        if then == "reset":
            await asyncio.wait_for(reader.read(200), timeout_s)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif then == "linger":
            await asyncio.sleep(1.5)
        return kind, "ok"
    except ConnectionResetError:
        # a head over the limit may still be arriving when the server answers 431 and closes: refused either way
        return kind, "ok" if kind == "head_too_large" else "ConnectionResetError"
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
        return kind, f"{type(exc).__name__}"
    finally:
        writer.close()


async def main_async(port: int, model: str, n: int, seconds: float, concurrency: int, timeout_s: float) -> dict:
    spec = kinds(model)
    names = sorted(spec)
    sem = asyncio.Semaphore(concurrency)
    outcomes: Counter = Counter()
    problems: Counter = Counter()
    started = time.monotonic()

    async def launch(i: int) -> None:
        # spread the starts evenly over the duration
        await asyncio.sleep(max(0.0, started + i * seconds / n - time.monotonic()))
        async with sem:
            kind, outcome = await one(port, names[i % len(names)], spec[names[i % len(names)]], timeout_s)
        outcomes[kind] += 1
        if outcome != "ok":
            problems[f"{kind}: {outcome}"] += 1

    await asyncio.gather(*(launch(i) for i in range(n)))
    return {
        "connections": sum(outcomes.values()),
        "by_kind": dict(outcomes),
        "problems": dict(problems),
        "elapsed_s": round(time.monotonic() - started, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=20.0)
    a = ap.parse_args()
    print(
        json.dumps(asyncio.run(main_async(a.port, a.model, a.connections, a.seconds, a.concurrency, a.timeout))),
        flush=True,
    )


if __name__ == "__main__":
    main()
