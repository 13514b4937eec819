"""How fast the emulator process streams (run: python -m benchmarks.emulator_speed).

Starts the real server process pinned to one core (os.sched_setaffinity), drives it with a lean raw-asyncio
HTTP client (closed loop, N concurrent streaming requests), and reports streamed output tokens per second (from the
servers' usage chunks) and the server's CPU time (from /proc). The profile is one fast enough to ask for that
throughput: Llama-3.1-8B on 8xH200 at fp8. The emulator only limits a run when its CPU share approaches 100%
while the modelled rate is higher than the streamed rate; both are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from wattbench_agent.metrics_scrape import parse_prometheus

ROOT = Path(__file__).resolve().parents[1]
TARGET_TOK_S = 50_000  # issue 14: the twin (prefill budget, API server) must not fall below 50k on 2 cores


def _cpu_s(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


async def _worker(host: str, port: int, body: bytes, stop_at: float, stats: dict) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    req = (
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    usage_re = re.compile(rb'"completion_tokens":(\d+)')
    try:
        while time.perf_counter() < stop_at:
            writer.write(req)
            buf = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                buf += data
                if buf.endswith(b"0\r\n\r\n") and b"[DONE]" in buf:
                    break
                if len(buf) > 4096 and b"[DONE]" not in buf[-64:]:
                    stats["events"] += buf.count(b"\ndata: ") + (1 if buf.startswith(b"data: ") else 0)
                    buf = buf[-512:]  # keep the tail: usage lives in the last events
            m = usage_re.search(buf)
            if m:
                stats["tokens"] += int(m.group(1))
            stats["requests"] += 1
            stats["last_done"] = time.perf_counter()
    finally:
        writer.close()


async def _drive(host: str, port: int, concurrency: int, duration_s: float, max_tokens: int) -> dict:
    body = json.dumps(
        {
            "model": "llama-3.1-8b",
            "prompt": "benchmark the emulator please",
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    stats = {"tokens": 0, "requests": 0, "events": 0, "last_done": 0.0}
    t0 = time.perf_counter()
    await asyncio.gather(*[_worker(host, port, body, t0 + duration_s, stats) for _ in range(concurrency)])
    stats["wall_s"] = stats["last_done"] - t0
    return stats


def run(
    concurrency: int = 256,
    duration_s: float = 10.0,
    max_tokens: int = 256,
    core: int | None = None,
    profile: str = "vllm-like",
    extra: list[str] | None = None,
) -> dict:
    ncpu = os.cpu_count() or 1
    server_core = core if core is not None else 0
    cmd = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "emulate",
        "--profile",
        profile,
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--precision",
        "fp8",
        "--port",
        "0",
        "--config",
        f"{'max_num_seqs' if profile == 'vllm-like' else 'max_batch_size'}={concurrency}",
        *(extra or []),
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.sched_setaffinity(0, {server_core})
    )
    try:
        seen = []  # `wattbench emulate` prints what it emulates first, then where it listens
        m = None
        while m is None and len(seen) < 20:
            line = proc.stderr.readline()
            if not line:  # the process ended without listening
                break
            seen.append(line)
            m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if not m:
            proc.kill()
            raise RuntimeError("emulator did not start: " + "".join(seen))
        host, port = m.group(1), int(m.group(2))
        if ncpu > 1:  # the client on the other cores
            os.sched_setaffinity(0, set(range(ncpu)) - {server_core})
        cpu0 = _cpu_s(proc.pid)
        try:
            import uvloop  # type: ignore

            uvloop.install()
        except ImportError:
            pass
        stats = asyncio.run(_drive(host, port, concurrency, duration_s, max_tokens))
        cpu1 = _cpu_s(proc.pid)
        import httpx

        metrics = httpx.get(f"http://{host}:{port}/metrics").text
        lag = next((v for n, _, v in parse_prometheus(metrics) if n == "wattbench_emulator_lag_seconds_max"), None)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    wall = stats["wall_s"]
    cpu = cpu1 - cpu0
    return {
        "source": "emulated",
        "profile": f"{profile} llama-3.1-8b 8x h200 fp8",
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "server_core": server_core,
        "requests": stats["requests"],
        "streamed_tokens": stats["tokens"],
        "wall_s": wall,
        "tok_s": stats["tokens"] / wall if wall else 0.0,
        "server_cpu_s": cpu,
        "server_cpu_share": cpu / wall if wall else None,
        "tok_per_server_cpu_s": stats["tokens"] / cpu if cpu else None,
        "engine_lag_max_s": lag,
        "target_tok_s": TARGET_TOK_S,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.emulator_speed")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument(
        "--max-tokens",
        default="256,1024",
        help="output tokens per request, one run each (comma-separated); the target is judged on the last: "
        "requests long enough that the modelled API server's per-request work (intake, finish) does not bind",
    )
    ap.add_argument("--core", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "results"))
    args = ap.parse_args(argv)
    runs = [run(args.concurrency, args.duration, int(n), args.core) for n in str(args.max_tokens).split(",")]
    for r in runs:
        print(
            f"emulator speed ({r['profile']}, {r['max_tokens']} tokens per request, server pinned to core "
            f"{r['server_core']}): {r['tok_s']:,.0f} streamed tokens/s over {r['wall_s']:.1f} s, {r['requests']} "
            f"requests; server CPU {r['server_cpu_s']:.2f} s ({100 * (r['server_cpu_share'] or 0):.0f}% of one core), "
            f"{(r['tok_per_server_cpu_s'] or 0):,.0f} tokens per server CPU-second"
            + (
                " (the server below 90% of its core: the modelled engine, not the process, sets this rate)"
                if (r["server_cpu_share"] or 0) < 0.9
                else ""
            )
        )
    judged = runs[-1]
    met = judged["tok_s"] >= TARGET_TOK_S
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "emulator_speed.json").write_text(json.dumps({**judged, "target_met": met, "runs": runs}, indent=2))
    print(
        f"target {TARGET_TOK_S:,} streamed tok/s ({judged['max_tokens']} tokens per request): "
        f"{'met' if met else 'NOT met (a miss, reported)'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
