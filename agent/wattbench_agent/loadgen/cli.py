"""`wattbench load`: the load generator on its own (same code path as the load_runs asset: run_load)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .spec import LoadSpec, LoadSpecError


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "load", help="drive an OpenAI-compatible server with load and measure it",
        description="Drive an OpenAI-compatible streaming server: fixed concurrency, Poisson/gamma rate, surge, or "
                    "trace replay. Per-request records go to --out (JSONL, flushed as they complete).")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--api", choices=("chat", "completions"), default="chat")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--concurrency", help="closed-loop streams; a comma list sweeps (e.g. 8,16,32)")
    g.add_argument("--rate", help="open-loop requests/s (Poisson; gamma with --burstiness); a comma list sweeps")
    g.add_argument("--trace", help="replay a JSONL/CSV trace (timestamp, prompt or input_tokens, output_tokens)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape k: 1 = Poisson, <1 burstier")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight for --rate/--trace")
    p.add_argument("--surge-factor", type=float, help="with --rate: multiply the rate by this ...")
    p.add_argument("--surge-start", type=float, default=0.0, help="... from this many seconds after start ...")
    p.add_argument("--surge-duration", type=float, default=0.0, help="... for this many seconds")
    p.add_argument("--trace-time-scale", type=float, default=1.0)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--dataset", help="ShareGPT-format JSON/JSONL for prompts")
    p.add_argument("--shared-prefix-tokens", type=int, default=0)
    p.add_argument("--tokenizer", help="tokenizer.json path or HF name (optional)")
    p.add_argument("--warmup", type=float, default=0.0, help="seconds of warm-up before the window")
    p.add_argument("--ramp", type=float, default=0.0,
                   help="--concurrency: start the streams evenly over this many seconds (keep it within --warmup)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of steady-state window (0 with --trace: whole trace)")
    p.add_argument("--max-requests", type=int)
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos/min_tokens")
    p.add_argument("--extra-body", help="JSON object merged into every request body")
    p.add_argument("--header", action="append", default=[], help="extra HTTP header 'Name: value' (repeatable)")
    p.add_argument("--transport", choices=("fast", "httpx"), default="fast")
    p.add_argument("--workers", type=int, help="client processes (default: automatic)")
    p.add_argument("--load-point-id")
    p.add_argument("--out", help="per-request JSONL (appended, flushed per record)")
    p.add_argument("--json", action="store_true", help="print a final one-line JSON summary on stdout")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=main)


def _spec(a, **over) -> LoadSpec:
    headers = {}
    for h in a.header:
        k, _, v = h.partition(":")
        headers[k.strip()] = v.strip()
    d = dict(url=a.url, model=a.model, api=a.api, input_tokens=a.input_tokens, output_tokens=a.output_tokens,
             warmup_s=a.warmup, ramp_s=a.ramp, duration_s=a.duration, max_requests=a.max_requests, timeout_s=a.timeout,
             seed=a.seed, ignore_eos=not a.no_ignore_eos, extra_body=json.loads(a.extra_body) if a.extra_body else {},
             headers=headers, transport=a.transport, dataset_path=a.dataset, shared_prefix_tokens=a.shared_prefix_tokens,
             tokenizer=a.tokenizer, load_point_id=a.load_point_id, burstiness=a.burstiness,
             trace_time_scale=a.trace_time_scale)
    if a.trace:
        d.update(shape="trace", trace_path=a.trace, concurrency=a.max_concurrency)
        if a.duration == 10.0 and "--duration" not in sys.argv:
            d["duration_s"] = 0.0
    elif a.rate:
        shape = "surge" if a.surge_factor else ("gamma" if a.burstiness != 1.0 else "poisson")
        d.update(shape=shape, concurrency=a.max_concurrency, surge_factor=a.surge_factor or 1.0,
                 surge_start_s=a.surge_start, surge_duration_s=a.surge_duration)
    else:
        d.update(shape="concurrency")
    d.update(over)
    return LoadSpec.from_dict(d)


def _fmt(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def summary_table(s: dict) -> str:
    rows = [f"load point {s.get('load_point_id')}  ({s.get('shape')}, {s.get('api')}, {s.get('workload')})",
            f"  window {s['window_s']:.2f} s (warm-up {s.get('warmup_s', 0):g} s, drain {s.get('drain_s', 0):.2f} s)   "
            f"sent {s['sent']}  completed {s['completed']}  failed {s['failed']}",
            f"  {'metric':<10} {'p50':>9} {'p90':>9} {'p99':>9} {'mean':>9} {'stdev':>9}"]
    for k, label in (("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms")):
        m = s[k]
        rows.append(f"  {label:<10} {_fmt(m['p50']):>9} {_fmt(m['p90']):>9} {_fmt(m['p99']):>9} "
                    f"{_fmt(m['mean']):>9} {_fmt(m['stdev']):>9}")
    req = s.get("requested_rate")
    rows += [f"  request throughput  {_fmt(s['request_throughput'])} req/s   output tokens {_fmt(s['output_token_throughput'], 1)} tok/s",
             f"  achieved rate {_fmt(s['achieved_rate'])} req/s" + (f" (requested {req:g})" if req else "") +
             f"   achieved concurrency {_fmt(s['achieved_concurrency'])}" +
             (f" (requested {s['requested_concurrency']})" if s.get("requested_concurrency") else ""),
             f"  send lateness p50 {_fmt(s['send_lateness_ms']['p50'], 3)} ms  p99 {_fmt(s['send_lateness_ms']['p99'], 3)} ms"]
    if s.get("errors"):
        rows.append("  errors: " + ", ".join(f"{k} {v}" for k, v in s["errors"].items()))
    return "\n".join(rows)


def main(a) -> int:
    from .runner import run_load
    try:
        if a.concurrency is not None:
            values, key = [int(v) for v in _floats(a.concurrency)], "concurrency"
        elif a.rate is not None:
            values, key = _floats(a.rate), "rate"
        else:
            values, key = [None], None
        specs = [_spec(a, **({key: v} if key else {}),
                       **({"load_point_id": f"{a.load_point_id}-{key[0]}{v:g}"} if a.load_point_id and len(values) > 1 else {}))
                 for v in values]
    except (LoadSpecError, ValueError) as exc:
        print(f"wattbench load: {exc}", file=sys.stderr)
        return 2
    summaries = []
    for spec in specs:
        try:
            res = run_load(spec, out=Path(a.out) if a.out else None, progress=not a.no_progress and sys.stderr.isatty() or
                           (not a.no_progress and not a.json), workers=a.workers)
        except (LoadSpecError, ValueError) as exc:
            print(f"wattbench load: {exc}", file=sys.stderr)
            return 2
        print(summary_table(res.summary), file=sys.stderr if a.json else sys.stdout, flush=True)
        summaries.append(res.summary)
    if a.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else {"sweep": summaries}, separators=(",", ":")))
    return 0 if all(s["completed"] for s in summaries) else 1
