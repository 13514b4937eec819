"""Load generator fidelity: client-induced error against a loopback server with known timing.

    python -m benchmarks.loadgen_fidelity [--streams 32,128,512] [--duration 8] [--warmup 2]

A streaming server (agent/wattbench_agent/loadgen/testserver.py, its own process, uvloop) with true TTFT 50 ms,
ITL 10 ms and 64 output tokens records what it observed per request: TTFT (request complete -> first content write),
request time (-> last content write) and the gaps between content writes. Two clients run against it in the
same run, one after the other, closed loop at N streams:
  - wattbench: wattbench_agent.loadgen.run_load (httpx + wattbench's FastTransport, uvloop);
  - aiohttp-vllm: a `vllm bench serve`-style client (aiohttp ClientSession, TCPConnector(limit=0),
    `async for line in response.content`, json.loads per line, perf_counter stamps), on uvloop too.
Reported per client: TTFT error p50/p99 = client TTFT quantile - server TTFT quantile (same window),
ITL error p50 = client ITL p50 - server gap p50, achieved/ideal rate = client completions per second in the
window / (N / server mean request time). Results: results/loadgen_fidelity.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from wattbench_agent.loadgen import LoadSpec, run_load, summarize
from wattbench_agent.loadgen.testserver import get_stats, reset, server_process

TTFT_MS, ITL_MS, TOKENS = 50.0, 10.0, 64
BARS = {128: {"ttft_p50": 5.0, "itl_p50": 1.0, "rate": 0.97}, 512: {"ttft_p50": 30.0, "rate": 0.93}}


# ------------------------------------------------------------------------------ the baseline client
async def _aiohttp_run(url: str, streams: int, warmup_s: float, duration_s: float, timeout_s: float = 60.0):
    import aiohttp

    api = url.rstrip("/") + "/v1/chat/completions"
    records: list[dict] = []
    connector = aiohttp.TCPConnector(
        limit=0,
        limit_per_host=0,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
    )
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector, trust_env=True
    ) as session:
        t0 = time.perf_counter_ns()
        end = t0 + int((warmup_s + duration_s) * 1e9)
        counter = [0]

        async def one():
            i = counter[0]
            counter[0] += 1
            payload = {
                "model": "model",
                "messages": [{"role": "user", "content": f"request {i} " + "word " * 32}],
                "max_tokens": TOKENS,
                "stream": True,
                "stream_options": {"include_usage": True},
                "ignore_eos": True,
            }
            chunk_ns = []
            st = time.perf_counter_ns()
            err = None
            n_out = None
            try:
                async with session.post(url=api, json=payload, headers={"Content-Type": "application/json"}) as r:
                    if r.status != 200:
                        err = f"http {r.status}"
                    else:
                        async for chunk_bytes in r.content:
                            chunk_bytes = chunk_bytes.strip()
                            if not chunk_bytes:
                                continue
                            chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                            if chunk != "[DONE]":
                                ts = time.perf_counter_ns()
                                data = json.loads(chunk)
                                if choices := data.get("choices"):
                                    if choices[0]["delta"].get("content"):
                                        chunk_ns.append(ts)
                                elif usage := data.get("usage"):
                                    n_out = usage.get("completion_tokens")
            except Exception as exc:  # noqa: BLE001
                err = repr(exc)
            ok = err is None and bool(chunk_ns)
            records.append(
                {
                    "sent_ns": st,
                    "scheduled_ns": st,
                    "error_kind": None if ok else "error",
                    "ttft_ms": (chunk_ns[0] - st) / 1e6 if chunk_ns else None,
                    "e2e_ms": (chunk_ns[-1] - st) / 1e6 if chunk_ns else None,
                    "last_token_ns": chunk_ns[-1] if chunk_ns else None,
                    "completion_tokens": n_out,
                    "chunk_ns": chunk_ns,
                    "chunk_tokens": [1] * len(chunk_ns),
                    "tpot_ms": None,
                }
            )

        async def worker():
            while time.perf_counter_ns() < end:
                await one()

        await asyncio.gather(*[worker() for _ in range(streams)])
    ws = t0 + int(warmup_s * 1e9)
    we = ws + int(duration_s * 1e9)
    for r in records:
        r["in_window"] = ws <= r["sent_ns"] <= we
    return records, ws, we


def run_aiohttp(url, streams, warmup_s, duration_s):
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as r:
        records, ws, we = r.run(_aiohttp_run(url, streams, warmup_s, duration_s))
    return summarize(records, ws, we), ws, we


def run_wattbench(url, streams, warmup_s, duration_s, workers=None):
    spec = LoadSpec(
        url=url,
        model="model",
        api="chat",
        shape="concurrency",
        concurrency=streams,
        input_tokens=32,
        output_tokens=TOKENS,
        warmup_s=warmup_s,
        duration_s=duration_s,
        timeout_s=60,
    )
    res = run_load(spec, workers=workers)
    return res.summary, res.window_start_ns, res.window_end_ns


# ------------------------------------------------------------------------------ server side + errors
def _server_view(url: str, ws: int, we: int) -> dict:
    st = get_stats(url)
    reqs = [r for r in st["requests"] if ws <= r["recv_ns"] <= we and r["req_ms"] is not None]
    ttft = np.asarray([r["ttft_ms"] for r in reqs])
    req = np.asarray([r["req_ms"] for r in reqs])
    gaps = np.asarray(st["gaps_us"], dtype=float) / 1e3
    return {
        "n": len(reqs),
        "ttft_p50": float(np.percentile(ttft, 50)) if len(ttft) else None,
        "ttft_p99": float(np.percentile(ttft, 99)) if len(ttft) else None,
        "req_mean_ms": float(req.mean()) if len(req) else None,
        "itl_p50": float(np.percentile(gaps, 50)) if len(gaps) else None,
        "itl_mean": float(gaps.mean()) if len(gaps) else None,
    }


def measure(url: str, client: str, streams: int, warmup_s: float, duration_s: float) -> dict:
    reset(url)
    if client.startswith("wattbench"):
        workers = int(client.split("-w")[1]) if "-w" in client else None
        summary, ws, we = run_wattbench(url, streams, warmup_s, duration_s, workers)
    else:
        summary, ws, we = run_aiohttp(url, streams, warmup_s, duration_s)
    sv = _server_view(url, ws, we)
    ideal = streams / (sv["req_mean_ms"] / 1e3) if sv["req_mean_ms"] else None
    # closed loop: all streams start together, so completions come in waves of N every request time and a
    # count of completions in a short window is quantised; output tokens arrive smoothly, so the achieved
    # request rate is taken as output tokens in the window / tokens per request / window (the completion
    # count is reported too).
    rate = summary["output_token_throughput"] / TOKENS
    row = {
        "streams": streams,
        "client": client,
        "client_ttft_p50_ms": summary["ttft_ms"]["p50"],
        "client_ttft_p99_ms": summary["ttft_ms"]["p99"],
        "client_itl_p50_ms": summary["itl_ms"]["p50"],
        "server_ttft_p50_ms": sv["ttft_p50"],
        "server_ttft_p99_ms": sv["ttft_p99"],
        "server_itl_p50_ms": sv["itl_p50"],
        "server_itl_mean_ms": sv["itl_mean"],
        "server_request_mean_ms": sv["req_mean_ms"],
        "ttft_err_p50_ms": summary["ttft_ms"]["p50"] - sv["ttft_p50"],
        "ttft_err_p99_ms": summary["ttft_ms"]["p99"] - sv["ttft_p99"],
        "itl_err_p50_ms": summary["itl_ms"]["p50"] - sv["itl_p50"],
        "achieved_rate_per_s": rate,
        "ideal_rate_per_s": ideal,
        "rate_ratio": (rate / ideal) if (rate and ideal) else None,
        "completions_per_s": summary["request_throughput"],
        "send_lateness_p50_ms": summary["send_lateness_ms"]["p50"],
        "send_lateness_p99_ms": summary["send_lateness_ms"]["p99"],
        "workers": summary.get("workers"),
        "completed": summary["completed"],
        "failed": summary["failed"],
        "window_s": summary["window_s"],
    }
    return row


def verdicts(rows: list[dict]) -> list[dict]:
    out = []
    by = {(r["streams"], r["client"]): r for r in rows}
    for n, bar in BARS.items():
        w = by.get((n, "wattbench"))
        if not w:
            continue
        if "ttft_p50" in bar:
            out.append(
                {
                    "bar": f"{n} streams TTFT err p50 <= {bar['ttft_p50']} ms",
                    "value": w["ttft_err_p50_ms"],
                    "met": w["ttft_err_p50_ms"] <= bar["ttft_p50"],
                }
            )
        if "itl_p50" in bar:
            out.append(
                {
                    "bar": f"{n} streams ITL err p50 <= {bar['itl_p50']} ms",
                    "value": w["itl_err_p50_ms"],
                    "met": w["itl_err_p50_ms"] <= bar["itl_p50"],
                }
            )
        out.append(
            {
                "bar": f"{n} streams rate >= {bar['rate']:.0%} of ideal",
                "value": w["rate_ratio"],
                "met": (w["rate_ratio"] or 0) >= bar["rate"],
            }
        )
    for n in sorted({r["streams"] for r in rows}):
        w, b = by.get((n, "wattbench")), by.get((n, "aiohttp-vllm"))
        if w and b:
            ok = (
                w["ttft_err_p50_ms"] <= b["ttft_err_p50_ms"] + 0.5
                and (w["rate_ratio"] or 0) >= (b["rate_ratio"] or 0) - 0.005
            )
            out.append(
                {
                    "bar": f"{n} streams not worse than aiohttp-vllm (TTFT err p50 within 0.5 ms, rate within 0.5 pt)",
                    "value": [w["ttft_err_p50_ms"], b["ttft_err_p50_ms"], w["rate_ratio"], b["rate_ratio"]],
                    "met": ok,
                }
            )
    return out


def table(rows: list[dict]) -> str:
    head = (
        f"{'streams':>7} | {'client':<13} | {'TTFT err p50/p99 ms':>20} | {'ITL err p50 ms':>14} | "
        f"{'achieved/ideal rate':>26}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['streams']:>7} | {r['client']:<13} | {r['ttft_err_p50_ms']:>+8.2f} / {r['ttft_err_p99_ms']:>+8.2f} | "
            f"{r['itl_err_p50_ms']:>+14.3f} | {r['rate_ratio']:>6.1%} "
            f"({r['achieved_rate_per_s']:.0f}/{r['ideal_rate_per_s']:.0f} /s)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.loadgen_fidelity", description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="32,128,512")
    ap.add_argument("--clients", default="wattbench,aiohttp-vllm")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--out", default="results/loadgen_fidelity.json")
    a = ap.parse_args(argv)
    streams = [int(s) for s in a.streams.split(",") if s]
    clients = [c for c in a.clients.split(",") if c]
    rows = []
    with server_process(TTFT_MS, ITL_MS, TOKENS) as url:
        for n in streams:
            for c in clients:
                row = measure(url, c, n, a.warmup, a.duration)
                rows.append(row)
                print(
                    f"  {n:>4} streams {c:<13} TTFT err p50 {row['ttft_err_p50_ms']:+.2f} ms, "
                    f"p99 {row['ttft_err_p99_ms']:+.2f} ms, "
                    f"ITL err p50 {row['itl_err_p50_ms']:+.3f} ms, rate {row['rate_ratio']:.1%}",
                    file=sys.stderr,
                    flush=True,
                )
    print(
        f"Load generator fidelity ({_dt.datetime.now().isoformat(timespec='seconds')}, {os.cpu_count()} CPUs; "
        f"server: TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, {TOKENS} tokens)"
    )
    print(table(rows))
    v = verdicts(rows)
    for x in v:
        print(f"  [{'met' if x['met'] else 'MISSED'}] {x['bar']}: {x['value']}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "date": _dt.datetime.now().isoformat(timespec="seconds"),
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "server": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "tokens": TOKENS},
                "warmup_s": a.warmup,
                "duration_s": a.duration,
                "rows": rows,
                "bars": v,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
