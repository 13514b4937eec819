"""Every token figure of a load point in one compiled pass over its requests' token times (numba).

The token times stay in the files the agent wrote (wattbench/token_store.py keeps them beside the warehouse); a load
point's requests point into them (first event, events). `point_pass` walks those events once, request by request, in
the requests' order, and gives:
- per request: whether its times go backwards, a count is negative, a time lies outside the request's own span (before
  its send or 0, after its last token: another request's events, or times past the clock's range, whose gaps would
  wrap), or its counts do not sum to its completion tokens (a request that succeeded; the ingest checks), and the one
  token count all its events carried (requests.chunk_tokens_each), if they did;
- per load point: the figures of point_stats that read token times (sql/views.sql v_itl_stats_live,
  v_window_steadiness_live, the client's ITL of v_client_stats_live; warehouse._TOKEN_FIGURES is the same in SQL),
  and the step decomposition (wattbench_agent.loadgen.steps: decode step, the stalls of each kind, the prefills
  sharing a step from the first tokens' clusters).
Exact percentiles without a sort: the values are binned on their leading bits (a bin is 1/256 of an octave wide),
the bins holding each wanted rank are found from the counts, and only their values are sorted. Percentiles and counts
are DuckDB's quantile_cont to the bit; means and deviations use compensated sums (equal to DuckDB's to its summation
order, 1e-12 relative).

Why numba (docs/CONTRACTS.md, "Where the per-token times live"): the same pass in numpy took ~17 s of CPU for 1M
requests (about 20 array passes a point, each allocating), DuckDB's aggregates over the events laid flat about 1 s a
point; compiled, one pass reads each event once (results/ingest_profile.md). The kernels are cached on disk
(cache=True): a process loads them in a fraction of a second; the first use after an install compiles them (seconds).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LEVELS = np.array([0.50, 0.90, 0.95, 0.99, 0.999])  # v_itl_stats_live's percentiles
STALL_FACTOR = 1.5  # wattbench_agent.loadgen.steps.STALL_FACTOR (a test keeps them equal)
BURST_NS = 500_000  # wattbench_agent.loadgen.steps.BURST_MS, in ns (a test keeps them equal)
SHIFT = 44  # a bin: a non-negative double's bits >> 44 (sign, exponent, 8 bits of mantissa)
BINS = 1 << 19

# per-request status codes (OUTSIDE: `where` is the event; TOKENS: `where` is the events' token sum)
OK, BACKWARDS, NEGATIVE, OUTSIDE, TOKENS = 0, 1, 2, 3, 4
NO_BOUND = np.iinfo(np.int64).max  # a request's last_token_ns not given

# indexes of point_pass's float results
F_ITL_Q = 0  # 5 values
F_ITL_MEAN, F_ITL_STDEV, F_CLIENT_SUM, F_STEP, F_STALL_MEAN, F_DELIVERY_MEAN = 5, 6, 7, 8, 9, 10
# indexes of its integer results (I_STALLED: the GPU stalls)
I_ITL_N, I_STEADY, I_FIRST, I_SECOND, I_FIRST_ANY, I_SECOND_ANY, I_CLIENT_N, I_STEP_GAPS, I_STALLED = range(9)
I_MULTI, I_DELIVERY, I_PREFILLS, I_PREFILL_STEPS, I_SIZE_SUM, I_SIZE_SQUARES, I_SHARED = range(9, 16)


@njit(cache=True, nogil=True)
def _select(vals, wts, m, total, ranks, hist, mark, out):
    """out[k] = the value at 0-based position ranks[k] (ranks ascending) of the first m values, each counted wts[i]
    times (wts of length 0: once), in ascending order: one pass bins them, one more gathers the bins that hold a
    wanted rank, whose values alone are sorted."""
    bits = vals.view(np.int64)
    hist[:] = 0
    weighted = len(wts) > 0
    for i in range(m):
        hist[bits[i] >> SHIFT] += wts[i] if weighted else 1
    nr = len(ranks)
    rank_bin = np.empty(nr, np.int64)
    bin_start = np.empty(nr, np.int64)  # the weight before the bin
    acc = 0
    b = 0
    for k in range(nr):
        while acc + hist[b] <= ranks[k]:
            acc += hist[b]
            b += 1
        rank_bin[k] = b
        bin_start[k] = acc
    # the wanted bins' values, gathered in one pass (a few thousand values each); mark: all False between calls
    size = 0
    for k in range(nr):
        if not mark[rank_bin[k]]:
            mark[rank_bin[k]] = True
            size += hist[rank_bin[k]] if not weighted else 0
    if weighted:
        for i in range(m):
            if mark[bits[i] >> SHIFT]:
                size += 1
    v = np.empty(size)
    w = np.empty(size, np.int64)
    vb = np.empty(size, np.int64)
    j = 0
    for i in range(m):
        x = bits[i] >> SHIFT
        if mark[x]:
            v[j] = vals[i]
            w[j] = wts[i] if weighted else 1
            vb[j] = x
            j += 1
    for k in range(nr):
        mark[rank_bin[k]] = False
    order = np.argsort(v, kind="mergesort")  # by value: a bin's values are in one stretch of it, in bin order
    for k in range(nr):
        pos = 0
        for jj in range(size):
            if vb[order[jj]] < rank_bin[k]:
                continue
            pos += w[order[jj]]
            if bin_start[k] + pos > ranks[k]:
                out[k] = v[order[jj]]
                break


@njit(cache=True)
def _neumaier(vals, m):
    s = 0.0
    c = 0.0
    for i in range(m):
        x = vals[i]
        t = s + x
        if abs(s) >= abs(x):
            c += (s - t) + x
        else:
            c += (x - t) + s
        s = t
    return s + c


@njit(cache=True, nogil=True)
def _check_request(ns, cnt, a, k_n, ok, first_ok, last_ok, tokens):
    """One request's events (k_n of them from a): (status, where, the one count they all carried or -1)."""
    if k_n == 0:
        return OK, 0, -1
    c0 = cnt[a]
    same = True
    prev_t = ns[a]
    total = 0
    for k in range(k_n):
        c = cnt[a + k]
        t = ns[a + k]
        if c < 0:
            return NEGATIVE, k, -1
        if t < prev_t:
            return BACKWARDS, k, -1
        if t < first_ok or t > last_ok:  # times that never go backwards, from >= 0: their gaps cannot wrap
            return OUTSIDE, k, -1
        same = same and c == c0
        total += c
        prev_t = t
    if ok and tokens >= 0 and total != tokens:
        return TOKENS, total, -1
    return OK, 0, c0 if same else -1


@njit(cache=True, nogil=True)
def point_pass(
    ns,
    cnt,
    at,
    n,
    exact,
    ok,
    inw,
    first_ok,
    last_ok,
    tokens,
    ws,
    we,
    has_window,
    has_load_run,
    status,
    where,
    each,
    gap,
    ptok,
    pw,
    hist,
    mark,
):
    """One load point (or any set of requests): status/where/each per request (filled), and (floats, ints) of the
    point's figures. ns/cnt: the times and counts files as arrays; at, n, exact: each request's first event, events
    and exact events; ok: succeeded; inw: sent in the window; first_ok, last_ok: the span its times must lie in (its
    send, never below 0, and its last token); tokens: its completion tokens (-1: not given). gap, ptok, pw: work
    arrays of at least the point's events; hist: BINS counts."""
    f = np.full(11, np.nan)
    iv = np.zeros(16, np.int64)
    firsts = np.full(len(at), -1, np.int64)  # each request's first token (ns), -1: none
    mid = (ws + we) / 2.0
    windowed = has_window and we > ws
    m = 0  # ITL gaps
    q = 0  # step gaps (per event, weighted by its tokens)
    client = 0.0
    client_c = 0.0
    for r in range(len(at)):
        a = at[r]
        k_n = n[r]
        status[r], where[r], each[r] = _check_request(ns, cnt, a, k_n, ok[r], first_ok[r], last_ok[r], tokens[r])
        ex = exact[r]
        if status[r] == OK:  # every request's first token marks a prefill, in the window or not, failed or not
            for k in range(min(k_n, ex)):
                if cnt[a + k] > 0:
                    firsts[r] = ns[a + k]
                    break
        if status[r] != OK or not ok[r]:
            continue
        last_kept = -1  # the step decomposition's previous token-carrying event (exact part only)
        for k in range(k_n):
            t = ns[a + k]
            c = cnt[a + k]
            if has_load_run and windowed:
                iv[I_STEADY] += 1
            if windowed:  # as DuckDB compares: BIGINT with BIGINT, BIGINT with the DOUBLE middle
                tf = float(t)
                if t >= ws and tf < mid:
                    iv[I_FIRST] += c
                    iv[I_FIRST_ANY] = 1
                if tf >= mid and t <= we:
                    iv[I_SECOND] += c
                    iv[I_SECOND_ANY] = 1
            prev_ok = k >= 1 and k < ex
            if prev_ok:
                g = (t - ns[a + k - 1]) / 1e6
                if inw[r]:
                    gap[m] = g
                    m += 1
                if has_load_run and has_window and t >= ws and t <= we:
                    y = g - client_c  # Kahan: the client's mean over millions of gaps
                    s = client + y
                    client_c = (s - client) - y
                    client = s
                    iv[I_CLIENT_N] += 1
            if inw[r] and k < ex and c > 0:
                if last_kept >= 0:
                    ptok[q] = ((t - ns[a + last_kept]) / 1e6) / c
                    pw[q] = c
                    q += 1
                last_kept = k
    iv[I_ITL_N] = m
    f[F_CLIENT_SUM] = client
    if m > 0:
        ranks = np.empty(10, np.int64)
        rn = (m - 1) * LEVELS
        for i in range(5):
            ranks[2 * i] = int(np.floor(rn[i]))
            ranks[2 * i + 1] = int(np.ceil(rn[i]))
        sel = np.empty(10)
        _select(gap, np.empty(0, np.int64), m, m, ranks, hist, mark, sel)
        for i in range(5):
            lo, hi = sel[2 * i], sel[2 * i + 1]
            f[F_ITL_Q + i] = lo if ranks[2 * i] == ranks[2 * i + 1] else lo + (hi - lo) * (rn[i] - ranks[2 * i])
        mean = _neumaier(gap, m) / m
        f[F_ITL_MEAN] = mean
        for i in range(m):
            gap[i] = (gap[i] - mean) * (gap[i] - mean)
        f[F_ITL_STDEV] = np.sqrt(_neumaier(gap, m) / m)
    if q > 0:
        total = 0
        multi = 0
        for i in range(q):
            total += pw[i]
            if pw[i] > 1:
                multi += pw[i]
        iv[I_STEP_GAPS] = total
        iv[I_MULTI] = multi
        two = np.array([(total - 1) // 2, total // 2], np.int64)
        med = np.empty(2)
        _select(ptok, pw, q, total, two, hist, mark, med)
        step = med[0] if total % 2 == 1 else (med[0] + med[1]) / 2.0
        f[F_STEP] = step
        every = np.sort(firsts[firsts >= 0])
        _stall_kinds(ns, cnt, at, n, exact, ok, inw, status, firsts, every, STALL_FACTOR * step, f, iv)
    _prefill_figures(firsts, ok, inw, status, iv)
    return f, iv


@njit(cache=True, nogil=True)
def _stall_kinds(ns, cnt, at, n, exact, ok, inw, status, firsts, every, threshold, f, iv):
    """The pool's stalls (gaps per token above `threshold`) split into GPU and delivery stalls as
    wattbench_agent.loadgen.steps.classify_stalls splits them: iv[I_STALLED], f[F_STALL_MEAN] (GPU), iv[I_DELIVERY],
    f[F_DELIVERY_MEAN]. every: the point's first tokens, sorted."""
    sums = np.zeros(2)
    comp = np.zeros(2)
    counts = np.zeros(2, np.int64)
    for r in range(len(at)):
        if status[r] != OK or not ok[r] or not inw[r]:
            continue
        a = at[r]
        lim = min(n[r], exact[r])
        last_kept = -1
        for k in range(lim):
            c = cnt[a + k]
            if c <= 0:
                continue
            t = ns[a + k]
            if last_kept >= 0:
                per_token = ((t - ns[a + last_kept]) / 1e6) / c
                if per_token > threshold:
                    last = t
                    events = 1
                    for j in range(k + 1, lim):  # the burst: events within BURST_NS of this one
                        if cnt[a + j] <= 0:
                            continue
                        if ns[a + j] - t > BURST_NS:
                            break
                        last = ns[a + j]
                        events += 1
                    others = np.searchsorted(every, last + BURST_NS, side="right") - np.searchsorted(
                        every, t - BURST_NS
                    )
                    if t - BURST_NS <= firsts[r] <= last + BURST_NS:
                        others -= 1  # its own first token is no other's prefill
                    kind = 1 if events >= 2 and others == 0 else 0
                    counts[kind] += c
                    y = per_token * c - comp[kind]  # Kahan
                    s2 = sums[kind] + y
                    comp[kind] = (s2 - sums[kind]) - y
                    sums[kind] = s2
            last_kept = k
    iv[I_STALLED] = counts[0]
    iv[I_DELIVERY] = counts[1]
    if counts[0] > 0:
        f[F_STALL_MEAN] = sums[0] / counts[0]
    if counts[1] > 0:
        f[F_DELIVERY_MEAN] = sums[1] / counts[1]


@njit(cache=True, nogil=True)
def _prefill_figures(firsts, ok, inw, status, iv):
    """The pool's prefills among the clusters of every first token (wattbench_agent.loadgen.steps.prefill_clusters):
    iv[I_PREFILLS], iv[I_PREFILL_STEPS], the held clusters' sizes summed (I_SIZE_SUM) and squared (I_SIZE_SQUARES),
    the pool's prefills in a cluster of two or more (I_SHARED)."""
    every = np.sort(firsts[firsts >= 0])
    if len(every) == 0:
        return
    cluster = np.zeros(len(every), np.int64)
    for i in range(1, len(every)):
        cluster[i] = cluster[i - 1] + (1 if every[i] - every[i - 1] > BURST_NS else 0)
    sizes = np.zeros(cluster[-1] + 1, np.int64)
    for i in range(len(every)):
        sizes[cluster[i]] += 1
    held = np.zeros(len(sizes), np.bool_)
    for r in range(len(firsts)):
        if status[r] != OK or not ok[r] or not inw[r] or firsts[r] < 0:
            continue
        c = cluster[np.searchsorted(every, firsts[r])]
        iv[I_PREFILLS] += 1
        if sizes[c] > 1:
            iv[I_SHARED] += 1
        if not held[c]:
            held[c] = True
            iv[I_PREFILL_STEPS] += 1
            iv[I_SIZE_SUM] += sizes[c]
            iv[I_SIZE_SQUARES] += sizes[c] * sizes[c]


class Workspace:
    """point_pass's work arrays, grown to the largest point seen (a point's events, three arrays of them)."""

    def __init__(self) -> None:
        self.size = 0
        self.gap, self.ptok, self.pw = np.empty(0), np.empty(0), np.empty(0, np.int64)  # a point with no events
        self.hist = np.zeros(BINS, np.int64)
        self.mark = np.zeros(BINS, np.bool_)

    def arrays(self, events: int):
        if events > self.size:
            self.size = max(events, 1)
            self.gap = np.empty(self.size)
            self.ptok = np.empty(self.size)
            self.pw = np.empty(self.size, np.int64)
        return self.gap, self.ptok, self.pw, self.hist, self.mark


def run_point(ns, cnt, refs: dict, window, has_load_run: bool, work: Workspace) -> tuple[dict, dict]:
    """point_pass over one load point's requests (refs: arrays at, n, exact, ok, in_window, and where its rows are
    checked, first_ok, last_ok, tokens), as Python values:
    (per-request arrays status, where, each), (the point's figures, as warehouse.point_token_figures names them, and
    the step decomposition's raw parts)."""
    at = np.ascontiguousarray(refs["at"], dtype=np.int64)
    n = np.ascontiguousarray(refs["n"], dtype=np.int64)
    rows = len(at)
    status = np.empty(rows, np.int8)
    where = np.empty(rows, np.int64)
    each = np.empty(rows, np.int32)
    ws, we = (None, None) if window is None else window
    has_window = ws is not None and we is not None
    gap, ptok, pw, hist, mark = work.arrays(int(n.sum()))
    f, iv = point_pass(
        ns,
        cnt,
        at,
        n,
        np.ascontiguousarray(refs["exact"], dtype=np.int64),
        np.ascontiguousarray(refs["ok"], dtype=np.bool_),
        np.ascontiguousarray(refs["in_window"], dtype=np.bool_),
        # a request's span and completion tokens: not held to them where not given (rows the warehouse keeps)
        np.ascontiguousarray(refs.get("first_ok", np.full(rows, np.iinfo(np.int64).min)), dtype=np.int64),
        np.ascontiguousarray(refs.get("last_ok", np.full(rows, NO_BOUND)), dtype=np.int64),
        np.ascontiguousarray(refs.get("tokens", np.full(rows, -1)), dtype=np.int64),
        int(ws) if has_window else 0,
        int(we) if has_window else 0,
        has_window,
        bool(has_load_run),
        status,
        where,
        each,
        gap,
        ptok,
        pw,
        hist,
        mark,
    )
    figures = {
        "itl_samples": int(iv[I_ITL_N]),
        "itl_q": [float(x) for x in f[F_ITL_Q : F_ITL_Q + 5]] if iv[I_ITL_N] else None,
        "itl_mean_ms": float(f[F_ITL_MEAN]) if iv[I_ITL_N] else None,
        "itl_stdev_ms": float(f[F_ITL_STDEV]) if iv[I_ITL_N] else None,
        "steady_events": int(iv[I_STEADY]),
        "first_half_tokens": int(iv[I_FIRST]) if iv[I_FIRST_ANY] else None,
        "second_half_tokens": int(iv[I_SECOND]) if iv[I_SECOND_ANY] else None,
        "client_itl_n": int(iv[I_CLIENT_N]) if has_load_run and has_window else 0,
        "client_itl_ms": float(f[F_CLIENT_SUM]) / int(iv[I_CLIENT_N])
        if has_load_run and has_window and iv[I_CLIENT_N]
        else None,
    }
    steps = {
        "gaps": int(iv[I_STEP_GAPS]),
        "decode_step_ms": float(f[F_STEP]) if iv[I_STEP_GAPS] else None,
        "stalled_gap_fraction": int(iv[I_STALLED]) / int(iv[I_STEP_GAPS]) if iv[I_STEP_GAPS] else None,
        "stall_ms_mean": float(f[F_STALL_MEAN]) if iv[I_STALLED] else None,
        "gpu_stalls": int(iv[I_STALLED]) if iv[I_STEP_GAPS] else None,
        "delivery_stalls": int(iv[I_DELIVERY]) if iv[I_STEP_GAPS] else None,
        "delivery_stalled_fraction": int(iv[I_DELIVERY]) / int(iv[I_STEP_GAPS]) if iv[I_STEP_GAPS] else None,
        "delivery_stall_ms_mean": float(f[F_DELIVERY_MEAN]) if iv[I_DELIVERY] else None,
        "multi_token_gap_fraction": int(iv[I_MULTI]) / int(iv[I_STEP_GAPS]) if iv[I_STEP_GAPS] else None,
        **prefill_figures(int(iv[I_PREFILLS]), int(iv[I_PREFILL_STEPS]), int(iv[I_SIZE_SUM]), int(iv[I_SIZE_SQUARES])),
        "shared_prefill_fraction": int(iv[I_SHARED]) / int(iv[I_PREFILLS]) if iv[I_PREFILLS] else None,
    }
    return {"status": status, "where": where, "each": each}, {"figures": figures, "steps": steps}


def prefill_figures(prefills: int, steps: int, size_sum: int, size_squares: int) -> dict:
    """prefills, prefill_steps, prefills_per_step and its standard error from the held clusters' sizes summed and
    squared (integers: exact)."""
    out = {"prefills": prefills, "prefill_steps": steps, "prefills_per_step": None, "prefills_per_step_se": None}
    if steps:
        out["prefills_per_step"] = size_sum / steps
    if steps > 1:
        out["prefills_per_step_se"] = math.sqrt(
            max(0.0, (size_squares - size_sum * size_sum / steps) / (steps - 1)) / steps
        )
    return out
