"""Do wattbench's numbers agree with NVIDIA AIPerf's? Both clients measure the same emulated engine, one after the
other, at the same load (closed-loop streams, or Poisson arrivals at a rate), prompt and output lengths; the
emulator's own Prometheus histograms say what the server saw.

    python -m benchmarks.peer_aiperf [--concurrency 8,32] [--rates 6] [--duration 30] [--out results/peer_aiperf.json]

AIPerf (pinned below) lives in its own virtualenv, .venv-peers/aiperf-<version>, created on first use with pip
(it pulls ~1.2 GB, among it transformers; its pins clash with wattbench's). It needs a tokenizer: it gets the
word-level one of `wattbench make-tiny-model`, so that one AIPerf token is one emulator token (the emulator counts
one word per token). Both clients send streaming chat requests with ignore_eos and min_tokens, so every request
produces exactly the asked output length.

Metric names differ, definitions match (docs/MEASUREMENT.md): AIPerf's inter_token_latency is per-request
(E2E - TTFT) / (output tokens - 1), wattbench's TPOT; AIPerf's request_latency is E2E. AIPerf's throughputs are
over its whole profiling phase, wattbench's over its steady-state window.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import httpx

from wattbench_agent.deploy.local import start_server
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.registry import adapter_for
from wattbench_agent.metrics_scrape import parse_prometheus

ROOT = Path(__file__).resolve().parents[1]
AIPERF_VERSION = "0.13.0"
PEER_VENV = ROOT / ".venv-peers" / f"aiperf-{AIPERF_VERSION}"
# A deployment slow enough per token (~17 ms at low batch) that client overhead on a 2-core machine is small.
# Prefix caching off: AIPerf's synthetic prompts share prefixes (38% of prompt blocks hit the cache at 32 streams,
# against 0% for wattbench's), which would compare two workloads instead of two clients.
ENGINE = EngineConfig(
    engine="emulator",
    profile="vllm-like",
    model="llama-3-70b",
    gpu="h100-sxm",
    tp=4,
    precision="bf16",
    config_name="peer",
    options={"enable_prefix_caching": False},
)
MODEL = ENGINE.model
INPUT_TOKENS, OUTPUT_TOKENS = 512, 128
# (wattbench summary key, AIPerf metric tag, label)
METRICS = [
    ("ttft_ms", "time_to_first_token", "TTFT (ms)"),
    ("tpot_ms", "inter_token_latency", "TPOT (ms)"),
    ("e2e_ms", "request_latency", "E2E (ms)"),
]


def ramp_s(warmup_s: float) -> float:
    """Both clients start their streams over the same ramp: closed-loop streams of fixed lengths started together
    stay in lockstep, and every TTFT then includes an N-way prefill (seen here: 218 ms against 50 ms at 8 streams)."""
    return min(2.0, warmup_s)


def ensure_aiperf() -> Path:
    exe = PEER_VENV / "bin" / "aiperf"
    if exe.exists():
        return exe
    print(f"creating {PEER_VENV} with aiperf=={AIPERF_VERSION} (once; ~1.2 GB)", file=sys.stderr, flush=True)
    PEER_VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run([str(PEER_VENV / "bin" / "pip"), "install", "-q", f"aiperf=={AIPERF_VERSION}"], check=True)
    return exe


def make_tokenizer(folder: Path) -> Path:
    """The word-level tokenizer of make-tiny-model, saved with the peer venv's transformers."""
    code = (
        "import sys; from wattbench_agent.engines.tiny_model import build_tokenizer; "
        "build_tokenizer(32000).save_pretrained(sys.argv[1])"
    )
    subprocess.run(
        [str(PEER_VENV / "bin" / "python"), "-c", code, str(folder)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "agent"), "TRANSFORMERS_VERBOSITY": "error"},
    )
    return folder


class Emulator:
    """The emulated engine, started the way the bench agent starts it (its adapter's command, start_server)."""

    def __enter__(self) -> Emulator:
        self.log = Path(tempfile.mkstemp(prefix="wattbench-peer-emulator-", suffix=".log")[1])
        self.server, _ = start_server(
            lambda port: adapter_for("emulator").serve_command(ENGINE, "127.0.0.1", port),
            log_path=self.log,
            health_timeout_s=60,
        )
        self.url = self.server.url
        return self

    def server_view(self) -> dict[str, float]:
        """Mean TTFT, E2E and output tokens per request as the server saw them (all requests so far)."""
        samples: dict[str, float] = {}
        for name, _labels, value in parse_prometheus(httpx.get(f"{self.url}/metrics", timeout=10).text):
            samples.setdefault(name, value)

        def value(name: str) -> float:
            return samples.get(name, float("nan"))

        n = value("vllm:e2e_request_latency_seconds_count")
        return {
            "requests": n,
            "ttft_mean_ms": 1e3
            * value("vllm:time_to_first_token_seconds_sum")
            / value("vllm:time_to_first_token_seconds_count"),
            "e2e_mean_ms": 1e3 * value("vllm:e2e_request_latency_seconds_sum") / n,
            "generation_tokens": value("vllm:generation_tokens_total"),
            "prompt_tokens_per_request": value("vllm:prompt_tokens_total") / n,
            "prefix_cache_hit_rate": value("vllm:prefix_cache_hits_total")
            / max(value("vllm:prefix_cache_queries_total"), 1.0),
        }

    def __exit__(self, *exc) -> None:
        self.server.stop()
        self.log.unlink(missing_ok=True)


def load_label(load: dict) -> str:
    return f"{load['concurrency']} streams" if "concurrency" in load else f"{load['rate']:g} req/s Poisson"


def run_wattbench(url: str, load: dict, warmup_s: float, duration_s: float) -> dict:
    from wattbench_agent.loadgen.runner import run_load
    from wattbench_agent.loadgen.spec import LoadSpec

    shape = (
        {"shape": "concurrency", "concurrency": load["concurrency"], "ramp_s": ramp_s(warmup_s)}
        if "concurrency" in load
        else {"shape": "poisson", "rate": load["rate"]}
    )
    spec = LoadSpec(
        url=url,
        model=MODEL,
        api="chat",
        input_tokens=INPUT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        warmup_s=warmup_s,
        duration_s=duration_s,
        **shape,
    )
    res = run_load(spec)
    s = res.summary
    out = {key: s[key] for key, _, _ in METRICS}
    out["output_token_throughput"] = s["output_token_throughput"]
    out["window_s"] = res.window_s
    # AIPerf's definition on the same records: tokens of the requests sent in the window over first send to last
    # response (so the drain after the window, with fewer streams running, is in the denominator)
    sent = [r for r in res.records if r.get("in_window") and r.get("last_token_ns") and r.get("completion_tokens")]
    span_s = (max(r["last_token_ns"] for r in sent) - min(r["sent_ns"] for r in sent)) / 1e9
    out["output_token_throughput_aiperf_definition"] = sum(r["completion_tokens"] for r in sent) / span_s
    out["request_throughput"] = s["request_throughput"]
    out["sent_rate"] = s["achieved_rate"]  # requests sent per second of the window
    out["completed"] = s["completed"]
    out["failed"] = s["failed"]
    return out


def run_aiperf(
    exe: Path, tokenizer: Path, url: str, load: dict, warmup_s: float, duration_s: float, artifacts: Path
) -> dict:
    shape = (
        [
            "--concurrency",
            str(load["concurrency"]),
            "--concurrency-ramp-duration",
            str(ramp_s(warmup_s)),
            "--warmup-concurrency-ramp-duration",
            str(ramp_s(warmup_s)),
        ]
        if "concurrency" in load
        else ["--request-rate", str(load["rate"]), "--arrival-pattern", "poisson"]
    )
    cmd = [
        str(exe),
        "profile",
        "--model",
        MODEL,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--tokenizer",
        str(tokenizer),
        "--use-server-token-count",
        *shape,
        "--warmup-duration",
        str(warmup_s),
        "--benchmark-duration",
        str(duration_s),
        "--benchmark-grace-period",
        "30",
        "--prompt-input-tokens-mean",
        str(INPUT_TOKENS),
        "--prompt-input-tokens-stddev",
        "0",
        "--prompt-output-tokens-mean",
        str(OUTPUT_TOKENS),
        "--prompt-output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        f"min_tokens:{OUTPUT_TOKENS}",
        "--random-seed",
        "0",
        "--output-artifact-dir",
        str(artifacts),
        "--ui-type",
        "none",
    ]
    artifacts.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        cmd,
        cwd=artifacts,
        capture_output=True,
        text=True,
        timeout=600,
        # not HF_HUB_OFFLINE: aiperf 0.13's offline path looks a local folder up in the Hub cache
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
    )
    exports = list(artifacts.rglob("profile_export_aiperf.json"))
    if proc.returncode != 0 or not exports:
        raise RuntimeError(f"aiperf failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-3000:]}")
    data = json.loads(exports[0].read_text())
    records = data.get("records", data)

    def metric(tag: str) -> dict:
        m = records.get(tag) or {}
        return {"p50": m.get("p50"), "p90": m.get("p90"), "p99": m.get("p99"), "mean": m.get("avg")}

    out = {key: metric(tag) for key, tag, _ in METRICS}
    out["output_token_throughput"] = (records.get("output_token_throughput") or {}).get("avg")
    out["output_token_throughput_aiperf_definition"] = out["output_token_throughput"]
    out["window_s"] = ((records.get("benchmark_duration") or {}).get("avg") or float("nan")) / (
        1.0 if (records.get("benchmark_duration") or {}).get("unit") == "sec" else 1e9
    )
    out["request_throughput"] = (records.get("request_throughput") or {}).get("avg")
    # every request of the profiling phase is sent within --benchmark-duration (the grace period only drains)
    out["sent_rate"] = ((records.get("request_count") or {}).get("avg") or 0) / duration_s
    out["completed"] = (records.get("request_count") or {}).get("avg")
    out["failed"] = (records.get("error_request_count") or {}).get("avg", 0)
    return out


def measure(
    client: str, load: dict, warmup_s: float, duration_s: float, exe: Path | None, tokenizer: Path | None, tmp: Path
) -> dict:
    with Emulator() as emu:
        t0 = time.monotonic()
        if client == "wattbench":
            res = run_wattbench(emu.url, load, warmup_s, duration_s)
        else:
            res = run_aiperf(
                exe,
                tokenizer,
                emu.url,
                load,
                warmup_s,
                duration_s,
                tmp / f"aiperf-{load_label(load).replace(' ', '-').replace('/', '')}",
            )
        res["server"] = emu.server_view()
        res["wall_s"] = time.monotonic() - t0
    # what the client adds to TTFT: its mean over the requests it measured against the server's mean over every
    # request it served (warm-up included: the server has no phases); the same for both clients
    res["client_ttft_error_ms"] = res["ttft_ms"]["mean"] - res["server"]["ttft_mean_ms"]
    res.update(client=client, load=load_label(load), **load)
    return res


def table(rows: list[dict]) -> str:
    lines = [
        "| load | client | TTFT p50 / p99 (ms) | TPOT p50 (ms) | E2E p50 (ms) | output tok/s "
        "(own / AIPerf's definition) | req/s | "
        "TTFT mean: client / server (ms) | client-induced TTFT (ms) | prompt tokens / request |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        sv = r["server"]
        lines.append(
            f"| {r['load']} | {r['client']} | {r['ttft_ms']['p50']:.1f} / {r['ttft_ms']['p99']:.1f} | "
            f"{r['tpot_ms']['p50']:.2f} | {r['e2e_ms']['p50']:.0f} | {r['output_token_throughput']:,.0f} / "
            f"{r['output_token_throughput_aiperf_definition']:,.0f} | "
            f"{r['request_throughput']:.2f} | {r['ttft_ms']['mean']:.1f} / {sv['ttft_mean_ms']:.1f} | "
            f"{r['client_ttft_error_ms']:+.2f} | {sv['prompt_tokens_per_request']:.0f} |"
        )
    return "\n".join(lines)


def agreement(rows: list[dict]) -> list[dict]:
    """wattbench against AIPerf per load: relative difference of each headline figure."""
    out = []
    by = {(r["client"], r["load"]): r for r in rows}
    for c in dict.fromkeys(r["load"] for r in rows):
        w, a = by.get(("wattbench", c)), by.get(("aiperf", c))
        if not (w and a):
            continue
        diffs = {f"{key}_p50": 100 * (w[key]["p50"] / a[key]["p50"] - 1) for key, _, _ in METRICS}
        for key in ("output_token_throughput", "output_token_throughput_aiperf_definition", "request_throughput"):
            diffs[key] = 100 * (w[key] / a[key] - 1)
        out.append({"load": c, "wattbench_vs_aiperf_pct": diffs})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.peer_aiperf", description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="8,32", help="closed-loop stream counts, comma-separated")
    ap.add_argument("--rates", default="6", help="Poisson arrival rates (req/s), comma-separated; '' for none")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--out", default=str(ROOT / "results" / "peer_aiperf.json"))
    args = ap.parse_args(argv)
    try:
        exe = ensure_aiperf()
    except (subprocess.CalledProcessError, OSError) as exc:
        print(
            f"peer_aiperf: skipped, AIPerf could not be installed into {PEER_VENV} ({exc}); it needs PyPI",
            file=sys.stderr,
        )
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="wattbench-aiperf-") as tmpdir:
        tmp = Path(tmpdir)
        tokenizer = make_tokenizer(tmp / "tokenizer")
        loads = [{"concurrency": int(x)} for x in args.concurrency.split(",") if x.strip()] + [
            {"rate": float(x)} for x in args.rates.split(",") if x.strip()
        ]
        for load in loads:
            for client in ("wattbench", "aiperf"):
                print(f"peer_aiperf: {client} at {load_label(load)} ...", file=sys.stderr, flush=True)
                rows.append(measure(client, load, args.warmup, args.duration, exe, tokenizer, tmp))
    agree = agreement(rows)
    out = {
        "source": "emulated engine, measured clients",
        "engine": asdict(ENGINE),
        "aiperf": AIPERF_VERSION,
        "input_tokens": INPUT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "rows": rows,
        "agreement": agree,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
    }
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(table(rows))
    for a in agree:
        print(
            f"{a['load']}, wattbench vs AIPerf: "
            + ", ".join(f"{k} {v:+.1f}%" for k, v in a["wattbench_vs_aiperf_pct"].items())
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
