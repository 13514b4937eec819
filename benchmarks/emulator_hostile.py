"""Does a client sending the largest prompts it can stall the emulator for everyone else? (run: python -m
benchmarks.emulator_hostile [--against GIT_REF])

A well-behaved 4-stream closed-loop load (wattbench's own load generator, 128 tokens in, 16 out) runs against one
emulator for `--seconds` three times: alone, while two other clients send 16 MiB chat prompts in a loop, and while
they send 3.9 MB ones (under the 4 MiB limit of a 131,072-token model). Reported: the well-behaved load's TTFT p50
and p90 (ms) and how many hostile requests were sent. With `--against REF` the same runs are made against the
emulator of that git revision (its agent package unpacked from `git archive`), in the same invocation, side by side.
Results: results/emulator_hostile.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "llama-3.1-8b"


def start(agent_path: Path | None) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if agent_path is not None:
        env["PYTHONPATH"] = str(agent_path)  # ahead of the installed (editable) agent
    proc = subprocess.Popen(
        [sys.executable, "-m", "wattbench_agent", "emulate", "--model", MODEL, "--port", "0"],
        cwd=agent_path or ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", proc.stderr.readline())
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain it
            return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError("the emulator did not start")


def hostile(port: int, megabytes: float, stop: threading.Event, counts: list[int]) -> None:
    text = "hello " * int(megabytes * 2**20 / 6)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}).encode()
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    while not stop.is_set():
        with socket.create_connection(("127.0.0.1", port)) as sock:
            try:
                sock.sendall(head + body)
                sock.recv(65536)
            except OSError:
                pass  # refused from the head (413): the server closed the connection
        counts[0] += 1


def measure(port: int, seconds: float, megabytes: float | None) -> dict:
    from wattbench_agent.loadgen import LoadSpec, run_load

    stop, counts, threads = threading.Event(), [0], []
    if megabytes:
        threads = [threading.Thread(target=hostile, args=(port, megabytes, stop, counts)) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
    try:
        spec = LoadSpec(
            url=f"http://127.0.0.1:{port}",
            model=MODEL,
            concurrency=4,
            input_tokens=128,
            output_tokens=16,
            duration_s=seconds,
            timeout_s=120,
        )
        s = run_load(spec, progress=False).summary
    finally:
        stop.set()
        for t in threads:
            t.join()
    return {"ttft_p50_ms": s["ttft_ms"]["p50"], "ttft_p90_ms": s["ttft_ms"]["p90"], "hostile_requests": counts[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--against", help="also measure the emulator of this git revision (e.g. the one before a fix)")
    ap.add_argument("--out", default=str(ROOT / "results" / "emulator_hostile"))
    args = ap.parse_args(argv)
    servers: list[tuple[str, Path | None]] = [("this tree", None)]
    tmp = None
    if args.against:
        tmp = tempfile.TemporaryDirectory(prefix="wattbench-bench-")
        archive = subprocess.run(["git", "archive", args.against, "agent"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp.name], input=archive.stdout, check=True)
        servers.insert(0, (args.against, Path(tmp.name) / "agent"))
    rows = []
    for name, path in servers:
        proc, port = start(path)
        try:
            for case, mb in (("alone", None), ("two clients sending 16 MiB prompts", 15.5), ("... 3.9 MB", 3.9)):
                r = measure(port, args.seconds, mb)
                rows.append({"emulator": name, "case": case, **r})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    if tmp is not None:
        tmp.cleanup()
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# A client sending the largest prompts it can, and everyone else (python -m benchmarks.emulator_hostile)",
        "",
        f"4-stream load ({MODEL}, 128 in / 16 out), {args.seconds:g} s a case, on this machine "
        f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end).",
        "",
        "| emulator | case | TTFT p50 ms | TTFT p90 ms | hostile requests sent |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['emulator']} | {r['case']} | {r['ttft_p50_ms']:.1f} | {r['ttft_p90_ms']:.1f} | {r['hostile_requests']} |"
        for r in rows
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
