"""Pure metric functions: everything in a LoadResult summary can be recomputed from stored `requests` rows.

Definitions follow /work/shared/MEASUREMENT.md (the `vllm bench serve` conventions):
- latency figures (TTFT, TPOT, ITL, E2E) use requests that were sent inside the window and succeeded;
- ITL pools every gap between consecutive content events of those requests (chunks, not tokens);
- output_token_throughput = tokens of successful requests whose content events arrived inside the window / window_s
  (tokens of requests sent during warm-up or finishing in the drain count for the part that fell in the window);
- request_throughput = successful requests whose last content event arrived inside the window / window_s;
- goodput = those of them that met every SLO / window_s (the same requests and the same window as request_throughput,
  so it never exceeds it; vllm bench serve's `request_goodput` likewise divides by its one duration);
- input_token_throughput = prompt tokens of successful requests sent inside the window / window_s;
  total_token_throughput = input_token_throughput + output_token_throughput (vllm bench's total token throughput,
  over the window);
- achieved_rate = requests sent inside the window / window_s;
- achieved_concurrency = time-averaged number of requests in flight inside the window (a request is in flight
  from sent_ns to sent_ns + e2e_ms; for a failed request e2e_ms is the time to failure);
- send lateness = sent_ns - scheduled_ns over requests sent inside the window;
- steps: the step decomposition of the same requests' gaps (decode step, stalls, phase; steps.py).
Percentiles are numpy's linear interpolation (as vllm bench); stdev is the population stdev (as vllm bench).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import steps

PERCENTILES = (50, 90, 95, 99, 99.9)


def _pkey(p: float) -> str:
    return "p999" if p == 99.9 else f"p{int(p)}"


def stats(values: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """p50, p90, p95, p99, p999, mean, stdev (population), min, max, count; None everywhere when empty."""
    arr = np.asarray(values, dtype=float)
    keys = [_pkey(p) for p in PERCENTILES] + ["mean", "stdev", "min", "max"]
    if arr.size == 0:
        out: dict[str, Any] = {k: None for k in keys}
        out["count"] = 0
        return out
    pct = np.percentile(arr, PERCENTILES)
    out = {_pkey(p): float(v) for p, v in zip(PERCENTILES, pct)}
    out.update(
        mean=float(arr.mean()), stdev=float(arr.std()), min=float(arr.min()), max=float(arr.max()), count=int(arr.size)
    )
    return out


def tpot_ms(e2e: float | None, ttft: float | None, n_tokens: int | None) -> float | None:
    """(E2E - TTFT) / (N - 1); None for N <= 1 or missing inputs."""
    if e2e is None or ttft is None or not n_tokens or n_tokens <= 1:
        return None
    return (e2e - ttft) / (n_tokens - 1)


def exact_chunks(r: dict) -> list:
    """The chunk times of a record whose entries are single events: inter-token gaps come from these only (past
    client.MAX_CHUNK_EVENTS the record holds one coalesced entry a second; chunks_exact says where)."""
    ch = r.get("chunk_ns") or []
    k = r.get("chunks_exact")
    return ch if k is None else ch[:k]


def distribute_tokens(n_tokens: int, chunk_chars: Sequence[int], events: Sequence[int] | None = None) -> list[int]:
    """Split `n_tokens` over content events so the split sums to n_tokens.

    Equal counts -> 1 per event (the usual case). More tokens than events -> every event gets 1, the rest go
    to events in proportion to their text length (largest remainder). Fewer tokens than events -> in proportion
    to text length, some events get 0. `events`: how many events each entry stands for (a long stream's coalesced
    tail, loadgen/client.py MAX_CHUNK_EVENTS; 1 each when None): an entry of n events counts as n of them.
    """
    k = len(chunk_chars)
    if k == 0:
        return []
    counts = [1] * k if events is None else [int(e) for e in events]
    total = sum(counts)
    if n_tokens == total:
        return counts
    if n_tokens > total:
        base = counts
        rest = n_tokens - total
    else:
        base = [0] * k
        rest = n_tokens
    weights = np.asarray([max(c, n) for c, n in zip(chunk_chars, counts)], dtype=float)
    share = weights / weights.sum() * rest
    floor = np.floor(share).astype(int)
    left = rest - int(floor.sum())
    if left:
        order = np.argsort(-(share - floor), kind="stable")[:left]
        floor[order] += 1
    return [b + int(f) for b, f in zip(base, floor)]


def request_end_ns(rec: dict) -> int | None:
    """When the request stopped being in flight: sent + e2e (for a failure: the time of the failure)."""
    sent = rec.get("sent_ns")
    if sent is None:
        return None
    if rec.get("e2e_ms") is not None:
        return int(sent + rec["e2e_ms"] * 1e6)
    if rec.get("last_token_ns") is not None:
        return int(rec["last_token_ns"])
    return int(sent)


def is_ok(rec: dict) -> bool:
    return rec.get("error_kind") is None


def summarize(
    records: Iterable[dict],
    window_start_ns: int,
    window_end_ns: int,
    *,
    slo: dict | None = None,
    closed_loop: bool = False,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """The load point's summary from its request rows (the `--json` summary, minus what only the run knows).

    `slo` (optional): {"ttft_ms": x, "tpot_ms": y, "e2e_ms": z}; adds goodput (requests/s meeting all given SLOs).
    `closed_loop`, `concurrency`: the point's shape, for the step decomposition's expected stalled share (steps.py).
    """
    recs = list(records)
    ws, we = int(window_start_ns), int(window_end_ns)
    window_s = max(we - ws, 0) / 1e9

    def sent_in_window(r: dict) -> bool:
        s = r.get("sent_ns")
        return s is not None and ws <= s <= we

    win = [r for r in recs if r.get("in_window", sent_in_window(r))]
    ok_win = [r for r in win if is_ok(r)]

    ttft = [r["ttft_ms"] for r in ok_win if r.get("ttft_ms") is not None]
    e2e = [r["e2e_ms"] for r in ok_win if r.get("e2e_ms") is not None]
    tpot = [r["tpot_ms"] for r in ok_win if r.get("tpot_ms") is not None]
    itl: list[np.ndarray] = []
    for r in ok_win:
        ch = exact_chunks(r)
        if len(ch) > 1:
            itl.append(np.diff(np.asarray(ch, dtype=np.int64)) / 1e6)
    itl_all = np.concatenate(itl) if itl else np.asarray([], dtype=float)

    # Tokens whose content events arrived inside the window (successful requests, wherever they were sent).
    out_tok_win = 0
    done_win: list[dict] = []  # successful requests whose last content event arrived in the window
    for r in recs:
        if not is_ok(r):
            continue
        ch = r.get("chunk_ns") or []
        tk = r.get("chunk_tokens") or []
        if ch:
            a = np.asarray(ch, dtype=np.int64)
            mask = (a >= ws) & (a <= we)
            if mask.any():
                t = np.asarray(tk if len(tk) == len(ch) else [1] * len(ch), dtype=np.int64)
                out_tok_win += int(t[mask].sum())
        end = r.get("last_token_ns")
        if end is not None and ws <= end <= we:
            done_win.append(r)

    # Time-averaged in-flight requests inside the window.
    busy_ns = 0
    for r in recs:
        s, e = r.get("sent_ns"), request_end_ns(r)
        if s is None or e is None:
            continue
        lo, hi = max(s, ws), min(e, we)
        if hi > lo:
            busy_ns += hi - lo
    lateness = [
        (r["sent_ns"] - r["scheduled_ns"]) / 1e6
        for r in win
        if r.get("scheduled_ns") is not None and r.get("sent_ns") is not None
    ]
    lat = stats(lateness)

    in_tok = sum(int(r.get("prompt_tokens") or 0) for r in ok_win)
    out_tok = sum(int(r.get("completion_tokens") or 0) for r in ok_win)
    errors = Counter(r.get("error_kind") for r in recs if not is_ok(r))
    sources = Counter(r.get("token_count_source") for r in ok_win if r.get("token_count_source"))

    def per_s(x: float) -> float | None:
        return x / window_s if window_s > 0 else None

    summary: dict[str, Any] = {
        "ttft_ms": stats(ttft),
        "tpot_ms": stats(tpot),
        "itl_ms": stats(itl_all),
        "steps": steps.decompose(ok_win, closed_loop=closed_loop, concurrency=concurrency, all_records=recs),
        "e2e_ms": stats(e2e),
        "request_throughput": per_s(len(done_win)),
        "output_token_throughput": per_s(out_tok_win),
        "input_token_throughput": per_s(in_tok),
        "total_token_throughput": per_s(in_tok + out_tok_win) if window_s > 0 else None,
        "achieved_rate": per_s(len(win)),
        "achieved_concurrency": per_s(busy_ns / 1e9) if window_s > 0 else None,
        "send_lateness_ms": {"p50": lat["p50"], "p99": lat["p99"], "mean": lat["mean"], "max": lat["max"]},
        "sent": len(recs),
        "sent_in_window": len(win),
        "completed": sum(1 for r in recs if is_ok(r)),
        "failed": sum(1 for r in recs if not is_ok(r)),
        "completed_in_window": len(ok_win),
        "finished_in_window": len(done_win),
        "failed_in_window": len(win) - len(ok_win),
        "output_tokens_in_window": out_tok_win,
        "input_tokens_total": in_tok,
        "output_tokens_total": out_tok,
        "mean_input_tokens": (in_tok / len(ok_win)) if ok_win else None,
        "mean_output_tokens": (out_tok / len(ok_win)) if ok_win else None,
        "errors": {str(k): v for k, v in sorted(errors.items(), key=lambda kv: str(kv[0]))},
        "token_count_source": dict(sources),
        "window_start_ns": ws,
        "window_end_ns": we,
        "window_s": window_s,
    }
    if slo:
        # goodput: requests finished in the window (throughput's set, so goodput <= throughput) meeting every bound;
        # attainment and slo_met: over the requests sent in the window (the search's verdict, one request one vote)
        good = sum(1 for r in done_win if all(meets(r, key, slo[key]) for key in SLO_KEYS if slo.get(key) is not None))
        met = {key: 0 for key in SLO_KEYS if slo.get(key) is not None}
        attained = 0
        for r in ok_win:
            ok = True
            for key in met:
                if meets(r, key, slo[key]):
                    met[key] += 1
                else:
                    ok = False
            attained += ok
        summary["goodput"] = per_s(good)
        summary["slo"] = dict(slo)
        # attainment: the share of the requests sent in the window that succeeded and met every bound (failed
        # requests count as missing it); slo_met: the share meeting each bound alone, and the share that succeeded
        n = len(win)
        summary["slo_attainment"] = attained / n if n else None
        summary["slo_met"] = {**{k: v / n for k, v in met.items()}, "no_error": len(ok_win) / n} if n else {}
    return summary


SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


def meets(rec: dict, key: str, limit: float) -> bool:
    """A successful request meets one SLO bound: its figure at or under the limit (a one-token request has no TPOT,
    and meets a TPOT bound; no TTFT or E2E misses it). sql/views.sql v_request_slo_counts counts alike."""
    value = rec.get(key)
    if value is None:
        return key == "tpot_ms"
    return value <= limit
