"""`wattbench load --save-result`: a result file with `vllm bench serve`'s keys, so scripts that read vLLM's
result JSON read ours.

Key names, units and layout follow vLLM's vllm/benchmarks/serve.py (its `result_json`): seconds for `duration`
and for the per-request lists (`ttfts`, `itls`, `latencies`, `start_times`), milliseconds for the statistics
(`mean_ttft_ms`, `median_ttft_ms`, `std_ttft_ms`, `p99_ttft_ms`, ...; `--percentile-metrics` picks the metrics,
`--metric-percentiles` the percentiles, both as in vLLM). Statistics are numpy's (linear percentiles,
population stdev), as vLLM's.

What differs, and is written down in the file under "wattbench": the figures are wattbench's, over its
steady-state window (docs/MEASUREMENT.md): latencies over the successful requests sent inside the window,
throughputs over the window. vLLM's identities hold over that window: `duration` is the window, `completed` the
successful requests that ended inside it, `request_throughput` = completed / duration, `request_goodput` = those of
them meeting the SLOs / duration (so it never exceeds the throughput), `output_throughput` = total_output_tokens
(the tokens that arrived in the window) / duration; the window's edges are in the file on the clock of
`start_times`, so `wattbench import` of the file gives back the same figures. With `--num-prompts` and no
`--duration` the window is the whole run, from the first send to the last answer, which is vLLM's `duration`, and
every completion is in it. A value that was not measured is null, where vLLM writes 0.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wattbench_agent.safety import mask_map, redact_url

# vLLM's metric names -> the record field (ms) they are computed from (itl: gaps between content events).
METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": None, "e2el": "e2e_ms"}
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM: ttft,tpot,itl; e2el too, a superset
DEFAULT_PERCENTILES = (99.0,)


class ResultArgError(ValueError):
    pass


def parse_goodput(pairs: Iterable[str]) -> dict[str, float]:
    """vLLM's `--goodput ttft:500 tpot:50 e2el:2000` (milliseconds) -> wattbench's SLO dict
    {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 2000}."""
    out: dict[str, float] = {}
    for pair in pairs:
        for item in str(pair).replace(",", " ").split():
            name, sep, value = item.partition(":")
            if not sep or name not in ("ttft", "tpot", "e2el"):
                raise ResultArgError(
                    f"--goodput {item!r}: expected KEY:MILLISECONDS with KEY one of ttft, tpot, "
                    "e2el (e.g. ttft:500 tpot:50)"
                )
            try:
                ms = float(value)
            except ValueError:
                raise ResultArgError(f"--goodput {item!r}: {value!r} is not a number of milliseconds") from None
            if ms < 0:
                raise ResultArgError(f"--goodput {item!r}: milliseconds must be >= 0")
            out[{"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}[name]] = ms
    return out


def parse_percentile_metrics(text: str | None) -> tuple[str, ...]:
    if not text:
        return DEFAULT_PERCENTILE_METRICS
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in METRICS]
    if bad:
        raise ResultArgError(
            f"--percentile-metrics: unknown metric(s) {', '.join(bad)}; expected a comma list of {', '.join(METRICS)}"
        )
    return names


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    if not text:
        return DEFAULT_PERCENTILES
    try:
        ps = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ResultArgError(
            f"--metric-percentiles {text!r}: expected a comma list of numbers, e.g. 50,90,99"
        ) from None
    if not ps or any(not 0 < p <= 100 for p in ps):
        raise ResultArgError(f"--metric-percentiles {text!r}: percentiles must be in (0, 100]")
    return ps


def p_word(p: float) -> str:
    """vLLM's key spelling: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


def metric_values(records: list[dict], metric: str) -> list[float]:
    """Per-request values (ms) of one of vLLM's metrics over the successful in-window requests (itl: pooled gaps)."""
    from .metrics import exact_chunks

    ok = [r for r in records if r.get("in_window") and r.get("error_kind") is None]
    if metric == "itl":
        out: list[float] = []
        for r in ok:
            ch = exact_chunks(r)
            out.extend((b - a) / 1e6 for a, b in zip(ch, ch[1:]))
        return out
    key = METRICS[metric]
    return [float(r[key]) for r in ok if r.get(key) is not None]


def _stat_block(name: str, values: list[float], percentiles: tuple[float, ...]) -> dict[str, Any]:
    import numpy as np  # here and .metrics in the callers: `wattbench load --help` imports neither

    if not values:
        d: dict[str, Any] = {f"mean_{name}_ms": None, f"median_{name}_ms": None, f"std_{name}_ms": None}
        d.update({f"p{p_word(p)}_{name}_ms": None for p in percentiles})
        return d
    a = np.asarray(values, dtype=float)
    d = {f"mean_{name}_ms": float(a.mean()), f"median_{name}_ms": float(np.median(a)), f"std_{name}_ms": float(a.std())}
    d.update({f"p{p_word(p)}_{name}_ms": float(np.percentile(a, p)) for p in percentiles})
    return d


def _peaks(records: list[dict]) -> tuple[float | None, int | None]:
    """vLLM's max_output_tokens_per_s (tokens in 1-s buckets from the first send) and max_concurrent_requests
    (sweep over [sent, sent + e2e) of the successful requests)."""
    ok = [
        r
        for r in records
        if r.get("error_kind") is None and r.get("sent_ns") is not None and r.get("e2e_ms") is not None
    ]
    if not ok:
        return None, None
    t0 = min(r["sent_ns"] for r in ok)
    buckets: dict[int, int] = {}
    events: list[tuple[int, int]] = []
    for r in ok:
        ch, tk = r.get("chunk_ns") or [], r.get("chunk_tokens") or []
        if len(tk) != len(ch):
            tk = [1] * len(ch)
        for t, n in zip(ch, tk):
            b = int((t - t0) // 1_000_000_000)
            buckets[b] = buckets.get(b, 0) + int(n)
        end = r["sent_ns"] + int(r["e2e_ms"] * 1e6)
        events += [(r["sent_ns"], 1), (end, -1)]
    events.sort()
    cur = peak = 0
    for _t, d in events:
        cur += d
        peak = max(peak, cur)
    return float(max(buckets.values())) if buckets else None, peak


def result_json(
    res,
    *,
    model_id: str,
    label: str | None = None,
    num_prompts: int | None = None,
    tokenizer_id: str | None = None,
    percentile_metrics: tuple[str, ...] = DEFAULT_PERCENTILE_METRICS,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    goodput: dict | None = None,
    detailed: bool = False,
    metadata: dict | None = None,
    now: _dt.datetime | None = None,
) -> dict:
    """vLLM's result dict for one load point (`res`: a loadgen LoadResult)."""
    from .metrics import exact_chunks

    spec, s, recs = res.spec, res.summary, res.records
    backend = "openai-chat" if spec.api == "chat" else "openai"
    rate = "inf" if spec.load_shape.closed_loop or not spec.rate else float(spec.rate)
    max_conc = spec.concurrency
    peak_tok_s, peak_conc = _peaks(recs)
    out: dict[str, Any] = {
        "date": (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": tokenizer_id,
        "num_prompts": num_prompts,
    }
    out.update(mask_map(metadata or {}))  # a --metadata token=... is not written in clear
    out.update(
        {
            "request_rate": rate,
            "burstiness": spec.param("burstiness") or 1.0,  # vLLM's 1 (Poisson) for a shape without one
            "max_concurrency": max_conc,
            **(
                {k: spec.param(k) for k in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")}
                if spec.shape == "ramp"
                else {}
            ),
            "duration": s.get("window_s"),
            "completed": s.get("finished_in_window"),
            "failed": s.get("failed"),
            "total_input_tokens": s.get("input_tokens_total"),
            "total_output_tokens": s.get("output_tokens_in_window"),
            "request_throughput": s.get("request_throughput"),
            "request_goodput": s.get("goodput") if goodput else None,
            "output_throughput": s.get("output_token_throughput"),
            "total_token_throughput": s.get("total_token_throughput"),
            "max_output_tokens_per_s": peak_tok_s,
            "max_concurrent_requests": peak_conc,
            "rtfx": None,  # vLLM's inverse real-time factor of audio runs: none for text (vLLM writes 0.0)
        }
    )
    if detailed:
        order = sorted(recs, key=lambda r: (r.get("sent_ns") is None, r.get("sent_ns") or 0))
        out.update(
            {
                "input_lens": [r.get("prompt_tokens") for r in order],
                "output_lens": [
                    int(r.get("completion_tokens") or 0) if r.get("error_kind") is None else 0 for r in order
                ],
                "ttfts": [r["ttft_ms"] / 1e3 if r.get("ttft_ms") is not None else None for r in order],
                "itls": [[(b - a) / 1e9 for a, b in zip(exact_chunks(r), exact_chunks(r)[1:])] for r in order],
                "latencies": [r["e2e_ms"] / 1e3 if r.get("e2e_ms") is not None else None for r in order],
                "start_times": [r["sent_ns"] / 1e9 if r.get("sent_ns") is not None else None for r in order],
                "generated_texts": [None for _ in order],  # wattbench does not keep the text
                "errors": [r.get("error_text") or "" if r.get("error_kind") else "" for r in order],
            }
        )
    for name in percentile_metrics:
        out.update(_stat_block(name, metric_values(recs, name), percentiles))
    out["wattbench"] = {
        "definitions": "docs/MEASUREMENT.md: latency statistics over the successful requests sent inside the "
        "steady-state window; throughputs and goodput over the window (duration = window_s): completed = successful "
        "requests that ended inside it, total_output_tokens = the tokens that arrived inside it",
        "load_point_id": s.get("load_point_id"),
        "shape": spec.shape,
        "api": spec.api,
        "url": redact_url(spec.url),
        "warmup_s": spec.warmup_s,
        "window_s": s.get("window_s"),
        "window_start_s": res.window_start_ns / 1e9,  # on the clock of start_times
        "window_end_s": res.window_end_ns / 1e9,
        "drain_s": s.get("drain_s"),
        "sent": s.get("sent"),
        "completed_all": s.get("completed"),
        "completed_in_window": s.get("completed_in_window"),
        "achieved_rate": s.get("achieved_rate"),
        "achieved_concurrency": s.get("achieved_concurrency"),
        "errors": s.get("errors"),
        "slo": s.get("slo"),
        "fail_fast": s.get("fail_fast"),
        # --telemetry / prices: the window's energy and cost figures (loadgen/energy.py); `wattbench import` reads them
        "energy": s.get("energy"),
        "prompt_length": s.get("prompt_length"),
    }
    return _finite(out)


def _finite(x):
    """JSON has no NaN/Infinity: non-finite floats become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def result_filename(
    result: dict, label: str | None, result_dir: str | None, result_filename: str | None, suffix: str | None = None
) -> Path:
    """vLLM's naming: {label}-{request_rate}qps[-concurrency{N}]-{model basename}-{date}.json, or --result-filename;
    under --result-dir. `suffix` (sweeps) goes before .json."""
    if result_filename:
        name = result_filename
    else:
        conc = f"-concurrency{result['max_concurrency']}" if result.get("max_concurrency") is not None else ""
        model = str(result.get("model_id") or "model").split("/")[-1]
        rate = f"{result['request_rate']}qps"
        if result.get("ramp_up_strategy"):  # vLLM's ramp naming
            ramp = (result["ramp_up_strategy"], result["ramp_up_start_rps"], result["ramp_up_end_rps"])
            rate = "ramp-up-{}-{:g}qps-{:g}qps".format(*ramp)
        name = f"{label or 'wattbench'}-{rate}{conc}-{model}-{result['date']}.json"
    p = Path(name)
    if suffix:
        p = p.with_name(f"{p.stem}-{suffix}{p.suffix or '.json'}")
    return Path(result_dir) / p if result_dir else p
