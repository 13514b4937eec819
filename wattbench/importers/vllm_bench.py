"""`vllm bench serve --save-result` result JSON (one object; or one per line with --append-result: each a load point).

Key names, units and meaning from vLLM's vllm/benchmarks/serve.py (`result_json`): `duration` (s), `completed`,
`failed`, `total_input_tokens`, `total_output_tokens`, `request_throughput`, `request_goodput` (null without
--goodput), `output_throughput`, `total_token_throughput`, `request_rate` (a number or "inf"), `burstiness`,
`max_concurrency`, and per metric of --percentile-metrics (ttft, tpot, itl, e2el) `mean_/median_/std_<m>_ms` and
`p<P>_<m>_ms` for each --metric-percentiles P. With --save-detailed, per request: `input_lens`, `output_lens`,
`ttfts` (s), `itls` (lists of s), `start_times` (s, time.perf_counter() of the vLLM host), `errors` ("" when
it succeeded); newer versions also keep `latencies` (s). vLLM computes its statistics with numpy over every
request of the run (std is the population stdev), as wattbench does over its window.

Mapping: ttft -> ttft_ms, tpot -> tpot_ms (vLLM's TPOT is (latency - TTFT) / (output tokens - 1), as
wattbench's), itl -> itl_ms (gaps between content chunks, pooled), e2el -> e2e_ms; median -> p50, p99.9 ->
p999. Per-request rows: TTFT, E2E (latency, else TTFT + the sum of the ITLs, as vLLM's own timeline plot),
TPOT, token counts, and chunk arrival times rebuilt from the start time, TTFT and ITLs on vLLM's clock.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any

from wattbench.importers.imported import (
    ImportedPoint,
    ImportedRun,
    ImportFileError,
    energy_facts,
    file_sha256,
    point_label,
)

TOOL = "vllm"
EXPECTED = "vllm bench serve: a JSON object with duration, completed, request_throughput and model_id (--save-result)"
_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
_PCTS = {"p50": "50", "p90": "90", "p95": "95", "p99": "99", "p999": "99.9"}


def _is_result(d: Any) -> bool:
    return (
        isinstance(d, dict)
        and {"duration", "completed", "request_throughput"} <= set(d)
        and ("model_id" in d or "backend" in d or "endpoint_type" in d)
    )


def detect(path: Path, data: Any) -> bool:
    if isinstance(data, list):
        return bool(data) and all(_is_result(d) for d in data)
    return _is_result(data)


def _num(d: dict, key: str, path: Path, i: int) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, str) and v.lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ImportFileError(f"{path}: result {i + 1}: {key} is {v!r}; expected a number")
    return float(v)


def _stats(d: dict) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for m, key in _METRICS.items():
        if f"mean_{m}_ms" not in d and f"median_{m}_ms" not in d:
            continue
        block: dict[str, float | None] = {"mean": d.get(f"mean_{m}_ms"), "stdev": d.get(f"std_{m}_ms")}
        for k, p in _PCTS.items():
            block[k] = d.get(f"p{p}_{m}_ms")
        if block["p50"] is None:
            block["p50"] = d.get(f"median_{m}_ms")
        out[key] = block
    return out


def _window_ns(d: dict) -> tuple[int, int] | None:
    """The window a `wattbench load --save-result` file measured over ("wattbench": window_start_s, window_end_s on
    the clock of start_times), in ns; None for vLLM's own files (their window is the whole run)."""
    wb = d.get("wattbench")
    if not isinstance(wb, dict):
        return None
    a, b = wb.get("window_start_s"), wb.get("window_end_s")
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (a, b))
    return (round(a * 1e9), round(b * 1e9)) if ok and b >= a else None


def _requests(d: dict, path: Path, i: int) -> list[dict]:
    ttfts = d.get("ttfts")
    if not isinstance(ttfts, list):
        return []
    n = len(ttfts)

    def col(name: str) -> list:
        v = d.get(name)
        if v is None:
            return [None] * n
        if not isinstance(v, list) or len(v) != n:
            raise ImportFileError(
                f"{path}: result {i + 1}: {name} has {len(v) if isinstance(v, list) else '?'} "
                f"entries, ttfts {n}; expected one per request"
            )
        return v

    ins, outs, itls, lats, starts, errs = (
        col(c) for c in ("input_lens", "output_lens", "itls", "latencies", "start_times", "errors")
    )
    _check_requests(path, i, ttfts, ins, outs, itls, lats, starts)
    window = _window_ns(d)
    rows = []
    for k in range(n):
        err = errs[k]
        ok = not err
        ttft_s = ttfts[k] if ok else None
        gaps = itls[k] if isinstance(itls[k], list) else []
        e2e_s = lats[k] if lats[k] is not None else ((ttft_s + sum(gaps)) if ttft_s is not None else None)
        n_out = outs[k]
        sent = round(starts[k] * 1e9) if starts[k] is not None else None
        chunk_ns = None
        if ok and sent is not None and ttft_s is not None:
            t = sent + round(ttft_s * 1e9)
            chunk_ns = [t]
            for g in gaps:
                t += round(g * 1e9)
                chunk_ns.append(t)
        ttft_ms = ttft_s * 1e3 if ttft_s is not None else None
        e2e_ms = e2e_s * 1e3 if e2e_s is not None else None
        rows.append(
            {
                "request_id": f"{k:07d}",
                "sent_ns": sent,
                "ttft_ms": ttft_ms,
                "e2e_ms": e2e_ms if ok else None,
                "tpot_ms": (e2e_ms - ttft_ms) / (n_out - 1)
                if ok and e2e_ms is not None and ttft_ms is not None and n_out and n_out > 1
                else None,
                "first_token_ns": chunk_ns[0] if chunk_ns else None,
                "last_token_ns": chunk_ns[-1] if chunk_ns else None,
                "prompt_tokens": ins[k],
                "completion_tokens": n_out if ok else None,
                "chunk_ns": chunk_ns,
                "error_kind": None if ok else "imported_error",
                "error_text": str(err)[:500] if not ok else None,
                # sent inside the window the file measured over (its own: wattbench load), else the whole run
                "in_window": window is None or (sent is not None and window[0] <= sent <= window[1]),
            }
        )
    return rows


# What a request's fields may be: token counts fit the warehouse's INTEGER columns; times are seconds on the vLLM host's
# perf_counter clock (start_times) and durations (ttfts, itls, latencies), bounded so that every rebuilt token time fits
# in int64 nanoseconds (4e9 s of clock, a request of at most 1e6 s: 11.6 days)
_MAX_COUNT = 2**31 - 1
_MAX_CLOCK_S = 4e9
_MAX_DURATION_S = 1e6


def _check_requests(path: Path, i: int, ttfts, ins, outs, itls, lats, starts) -> None:
    """Every per-request value a number within its bound (ImportFileError naming the result, the request, the field
    and its value; nothing is imported): a count as a string, 2^40 tokens or a time of 1e300 s was a traceback."""

    def bad(k: int, name: str, value: Any, expected: str) -> ImportFileError:
        return ImportFileError(
            f"{path}: result {i + 1}, request {k}: {name} = {value!r:.60}; expected {expected}; nothing was imported"
        )

    def number(k, name, value, hi, integer=False):
        if value is None:
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or abs(value) > hi or (integer and value != int(value)):  # below 0: the ingest rules name it
            kind = f"an integer up to {hi:,}" if integer else f"a number of seconds no larger than {hi:g}"
            raise bad(k, name, value, f"{kind}, or null")

    for k in range(len(ttfts)):
        number(k, "input_lens", ins[k], _MAX_COUNT, integer=True)
        number(k, "output_lens", outs[k], _MAX_COUNT, integer=True)
        number(k, "start_times", starts[k], _MAX_CLOCK_S)
        for name, value in (("ttfts", ttfts[k]), ("latencies", lats[k])):
            number(k, name, value, _MAX_DURATION_S)
        if itls[k] is not None and not isinstance(itls[k], list):
            raise bad(k, "itls", itls[k], "a list of the request's inter-token gaps in seconds, or null")
        gaps = itls[k] or []
        for g in gaps:
            number(k, "itls", g, _MAX_DURATION_S)
        if sum(abs(g) for g in gaps) > _MAX_DURATION_S:
            raise bad(
                k, "itls", f"{len(gaps)} gaps summing to {sum(gaps):g} s", f"a request of at most {_MAX_DURATION_S:g} s"
            )


def _point(d: dict, path: Path, i: int) -> ImportedPoint:
    duration = _num(d, "duration", path, i)
    if not duration or duration <= 0 or math.isinf(duration):
        raise ImportFileError(f"{path}: result {i + 1}: duration is {d.get('duration')!r}; expected seconds > 0")
    completed = int(d.get("completed") or 0)
    failed = int(d.get("failed") or 0)
    rate = _num(d, "request_rate", path, i)
    burst = _num(d, "burstiness", path, i)
    max_conc = d.get("max_concurrency")
    if rate is None or math.isinf(rate):
        shape, conc, rate_v = "concurrency", int(max_conc or d.get("num_prompts") or completed + failed), None
    else:
        shape = "poisson" if burst in (None, 1.0) else "gamma"
        conc, rate_v = (int(max_conc) if max_conc else None), rate
    mean_in = d["total_input_tokens"] / completed if completed and d.get("total_input_tokens") is not None else None
    mean_out = d["total_output_tokens"] / completed if completed and d.get("total_output_tokens") is not None else None
    workload = (
        f"vllm-bench-in{round(mean_in)}-out{round(mean_out)}"
        if mean_in is not None and mean_out is not None
        else "vllm-bench"
    )
    figures = {
        k: d.get(k)
        for k in (
            "request_throughput",
            "request_goodput",
            "output_throughput",
            "total_token_throughput",
            "max_output_tokens_per_s",
            "max_concurrent_requests",
            "total_input_tokens",
            "total_output_tokens",
            "num_prompts",
            "label",
            "date",
        )
        if k in d
    }
    wb = d.get("wattbench") if isinstance(d.get("wattbench"), dict) else {}
    window = _window_ns(d)
    sent = wb.get("sent") if isinstance(wb.get("sent"), int) and not isinstance(wb.get("sent"), bool) else None
    energy = wb.get("energy") if isinstance(wb.get("energy"), dict) else {}  # wattbench load --telemetry's
    return ImportedPoint(
        energy_j=energy.get("energy_j"),
        energy_trace_j=energy.get("energy_trace_j"),
        point_label=point_label(shape, conc, rate_v, burst),
        workload=workload,
        shape=shape,
        window_s=duration,
        window_start_ns=window[0] if window else None,
        window_end_ns=window[1] if window else None,
        sent=sent if sent is not None else completed + failed,
        completed=completed,
        failed=failed,
        output_tokens_total=int(d["total_output_tokens"]) if d.get("total_output_tokens") is not None else None,
        api="chat" if "chat" in str(d.get("backend") or d.get("endpoint_type") or "") else "completions",
        concurrency=conc,
        rate=rate_v,
        burstiness=burst if shape == "gamma" else None,
        input_tokens=round(mean_in) if mean_in is not None else None,
        output_tokens=round(mean_out) if mean_out is not None else None,
        warmup_s=0.0,
        stats=_stats(d),
        goodput=d.get("request_goodput"),
        figures=figures,
        requests=_requests(d, path, i),
    )


def _date(d: dict) -> _dt.datetime | None:
    try:
        return _dt.datetime.strptime(str(d.get("date")), "%Y%m%d-%H%M%S")
    except ValueError:
        return None


def read(path: Path, data: Any) -> ImportedRun:
    results = data if isinstance(data, list) else [data]
    points = [_point(d, path, i) for i, d in enumerate(results)]
    seen: dict[str, int] = {}
    for p in points:  # --append-result of the same point twice: keep both, numbered
        seen[p.point_label] = seen.get(p.point_label, 0) + 1
        if seen[p.point_label] > 1:
            p.point_label = f"{p.point_label}#{seen[p.point_label]}"
    first = results[0]
    model = first.get("model_id") or first.get("model") or "unknown"
    started = _date(first)
    slo = {}
    wb = first.get("wattbench") if isinstance(first.get("wattbench"), dict) else {}
    if isinstance(wb.get("slo"), dict):  # `wattbench load --goodput`: the SLOs its goodput counted against
        slo = {k: float(v) for k, v in wb["slo"].items() if k in ("ttft_ms", "tpot_ms", "e2e_ms") and v is not None}
    notes = []
    if not any(p.requests for p in points):
        notes.append("no per-request rows (the file was saved without --save-detailed): every figure is vLLM's own")
    meta = {
        k: v
        for k, v in first.items()
        if not isinstance(v, (list, dict))
        and k not in {"duration", "completed", "failed"}
        and not k.startswith(("mean_", "median_", "std_", "p"))
    }
    telemetry, prices = energy_facts(wb.get("energy"))
    return ImportedRun(
        telemetry=telemetry,
        prices=prices,
        tool=TOOL,
        tool_version=first.get("vllm_version") or first.get("version"),
        path=path,
        sha256=file_sha256([path]),
        model=str(model),
        points=points,
        started_at=started,
        config={"result": meta},
        slo=slo,
        notes=notes,
    )
