"""95% intervals on latency percentiles: a bootstrap over requests, computed once at ingest.

Throughput, power, tokens per joule and cost are one number per load run, so their intervals come from the
spread over repeats (a t interval, in SQL: sql/views.sql v_point_figures). A latency percentile is a statistic of
many requests, pooled over the point's repeats: the estimate is the percentile of the pooled requests (linear
interpolation, as numpy, DuckDB's quantile_cont and vllm bench serve compute it) and the interval a two-stage
percentile bootstrap: draw the repeats with replacement, then requests with replacement within each drawn repeat
(each repeat weighs the same). A bootstrap over requests alone would ignore run-to-run differences, and on the
H200 those dominate some figures: vLLM's TTFT p50 at 256 closed-loop streams was 803, 1,941 and 2,074 ms in three
interleaved repeats (prefill waves), while resampling only requests gave 1,446-1,601 ms. With one repeat only
requests are resampled, and the method says so.

Inter-token latency pools every gap of every request; requests, not gaps, are resampled (the gaps of one request
are not independent), each request carrying a histogram of its gaps on log-spaced bins 0.5% wide, so a resample is
one matrix product; its interval is read off the resampled histograms.

Points of more than EXACT_MAX_REQUESTS requests (an hour at 300 req/s is a million) are bootstrapped on the same
0.5% log-spaced bins, in memory and time that do not grow with the requests: the estimate is still the exact
percentile of the pooled requests; a resample draws the repeats, then from each drawn repeat its share of requests as
one multinomial draw over that repeat's histogram (the same distribution as drawing its requests one by one), so the
interval's ends are exact to within a bin (0.5%). ITL: the repeats are drawn exactly; within a drawn repeat, what a
percentile needs of its resampled requests (how many of their gaps lie below each bin edge near it) is a sum of
independent draws of one request's counts, drawn from its normal limit (flat_itl); the token times come laid flat,
from DuckDB or from a version-2 bundle's chunk files, never as a Python object per request. The method text ends
"on 0.5% bins".

Rows go to the `latency_intervals` table (sql/schema.sql), replaced per run and deployment.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BOOTSTRAP_SAMPLES = 1000
ITL_BOOTSTRAP_SAMPLES = 400  # each ITL resample is a (requests x bins) product; 400 keep ingest to seconds
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
PER_REQUEST = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2e", "e2e_ms"))
_ITL_STEP = np.log(1.005)  # histogram bins of inter-token gaps: 0.5% wide
EXACT_MAX_REQUESTS = 20_000  # a point with more requests is bootstrapped on 0.5% bins (see above)
_BOOT_BATCH = 50  # resamples per sparse product of a large point's ITL (bounds memory: batch x requests floats)


def _seed(*parts: Any) -> int:
    import zlib

    return zlib.crc32("|".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


def itl_rng(where: dict[str, str]) -> np.random.Generator:
    """The ITL interval's own draws of a large point: seeded by the point alone (not after its TTFT/TPOT/E2E draws),
    so that it can be computed apart from them (ChunkFiles.start_figures: while the lists are stored)."""
    return np.random.default_rng(
        _seed(where["run_id"], where["deployment_id"], where["workload"], where["point_label"], "itl")
    )


def two_stage_indices(groups: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """(n_boot, n) row indices: per resample, draw the groups (repeats) with replacement, then rows with
    replacement within each drawn group, the same number from each (n // groups, at least one). Rows must be
    sorted by group. One group: rows only."""
    labels, starts, counts = np.unique(groups, return_index=True, return_counts=True)
    k = len(labels)
    per = max(len(groups) // k, 1)
    drawn = rng.integers(0, k, size=(n_boot, k)) if k > 1 else np.zeros((n_boot, 1), dtype=np.int64)
    u = rng.random((n_boot, k, per))
    idx = starts[drawn][:, :, None] + np.floor(u * counts[drawn][:, :, None]).astype(np.int64)
    return idx.reshape(n_boot, k * per)


def method_text(repeats: int, n_boot: int, binned: bool = False) -> str:
    tail = "; on 0.5% bins" if binned else ""
    if repeats > 1:
        return f"two-stage bootstrap: {repeats} repeats, then requests within each; {n_boot} resamples{tail}"
    return f"bootstrap over requests (one repeat: run-to-run variation not captured); {n_boot} resamples{tail}"


def _log_edges(lo: float, hi: float) -> np.ndarray:
    lo_edge, hi_edge = max(float(lo), 1e-6), max(float(hi), 1e-6)
    return np.exp(np.arange(np.log(lo_edge) - _ITL_STEP, np.log(hi_edge) + 2 * _ITL_STEP, _ITL_STEP))


def _drawn_counts(k: int, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """(n_boot, k): how often each of k repeats is drawn in each resample (one repeat: always once)."""
    if k == 1:
        return np.ones((n_boot, 1), dtype=np.int64)
    drawn = rng.integers(0, k, size=(n_boot, k))
    return np.stack([np.bincount(row, minlength=k) for row in drawn])


def binned_percentile_intervals(
    values: np.ndarray,
    groups: np.ndarray,
    qs: dict[str, float],
    rng: np.random.Generator,
    n_boot: int = BOOTSTRAP_SAMPLES,
) -> dict[str, tuple[float, float, float]]:
    """{name: (estimate, lo, hi)} like percentile_interval for each quantile, for many values: resamples are
    multinomial draws over each repeat's histogram on 0.5% log bins (memory: repeats x bins)."""
    edges = _log_edges(values.min(), values.max())
    clipped = np.clip(values, edges[0], edges[-1])
    labels, inverse = np.unique(groups, return_inverse=True)
    k = len(labels)
    per = max(len(values) // k, 1)
    hists = np.stack([np.histogram(clipped[inverse == r], bins=edges)[0] for r in range(k)]).astype(float)
    m = _drawn_counts(k, rng, n_boot)
    boot = np.zeros((n_boot, len(edges) - 1))
    for r in range(k):
        boot += rng.multinomial(m[:, r] * per, hists[r] / hists[r].sum())
    out = {}
    for name, q in qs.items():
        lo, hi = np.quantile(_hist_quantile(boot, edges, q), [0.025, 0.975])
        out[name] = (float(np.quantile(values, q)), float(lo), float(hi))
    return out


def percentile_interval(
    values: np.ndarray, groups: np.ndarray, q: float, rng: np.random.Generator, n_boot: int = BOOTSTRAP_SAMPLES
) -> tuple[float, float, float]:
    """(estimate, lo, hi) of the q-quantile of `values`, 95% two-stage percentile-bootstrap interval."""
    estimate = float(np.quantile(values, q))
    if len(values) < 2:
        return estimate, float("nan"), float("nan")
    boot = np.quantile(values[two_stage_indices(groups, rng, n_boot)], q, axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return estimate, float(lo), float(hi)


def _hist_quantile(hists: np.ndarray, edges: np.ndarray, q: float) -> np.ndarray:
    """q-quantile of each row's histogram (bins between consecutive `edges`, linear within a bin)."""
    cum = np.cumsum(hists, axis=1)
    target = q * cum[:, -1]
    k = np.argmax(cum >= target[:, None], axis=1)
    rows = np.arange(len(k))
    before = np.where(k > 0, cum[rows, np.maximum(k - 1, 0)], 0.0)
    inside = hists[rows, k]
    frac = np.where(inside > 0, (target - before) / np.maximum(inside, 1e-12), 0.0)
    return edges[k] + frac * (edges[k + 1] - edges[k])


def itl_intervals(
    gaps: list[np.ndarray], groups: np.ndarray, rng: np.random.Generator, n_boot: int = ITL_BOOTSTRAP_SAMPLES
) -> dict[str, tuple[float, float, float]]:
    """{pXX: (estimate, lo, hi)} of the pooled inter-token gaps, resampling repeats then requests."""
    pooled = np.concatenate(gaps) if gaps else np.array([])
    if pooled.size == 0:
        return {}
    lo_edge, hi_edge = max(float(pooled.min()), 1e-6), max(float(pooled.max()), 1e-6)
    edges = np.exp(np.arange(np.log(lo_edge) - _ITL_STEP, np.log(hi_edge) + 2 * _ITL_STEP, _ITL_STEP))
    hists = np.stack([np.histogram(g, bins=edges)[0] for g in gaps]).astype(np.float32)
    idx = two_stage_indices(groups, rng, n_boot)
    counts = np.stack([np.bincount(row, minlength=len(gaps)) for row in idx]).astype(np.float32)
    boot_hists = counts @ hists
    out = {}
    for name, q in QUANTILES.items():
        estimate = float(np.quantile(pooled, q))
        if len(gaps) < 2:
            out[name] = (estimate, float("nan"), float("nan"))
            continue
        lo, hi = np.quantile(_hist_quantile(boot_hists, edges, q), [0.025, 0.975])
        out[name] = (estimate, float(lo), float(hi))
    return out


_REQUESTS = """
SELECT l.deployment_id, l.source, l.workload,
       coalesce(l.point_label, regexp_extract(l.load_point_id, '([^:#]*)(#[0-9]+)?$', 1)) AS point_label,
       coalesce(l.repeat, 1) AS repeat, q.ttft_ms, q.tpot_ms, q.e2e_ms,
       CASE WHEN len(q.chunk_ns) > 1
            THEN list_transform(range(1, least(len(q.chunk_ns), coalesce(q.chunks_exact, len(q.chunk_ns)))),
                                lambda i: (q.chunk_ns[i + 1] - q.chunk_ns[i]) / 1e6) END AS gaps
FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
WHERE q.run_id = $run_id AND q.in_window AND q.error_kind IS NULL AND l.status = 'ok'
ORDER BY 1, 2, 3, 4
"""


_LARGE_POINT_CHUNKS = """
WITH q AS (
    SELECT coalesce(l.repeat, 1) AS repeat,
           CASE WHEN q.chunks_exact IS NULL THEN q.chunk_ns ELSE list_slice(q.chunk_ns, 1, q.chunks_exact) END
               AS chunk_ns,
           row_number() OVER (ORDER BY coalesce(l.repeat, 1), q.load_point_id, q.request_id) - 1 AS req
    FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
    WHERE q.run_id = $run_id AND q.deployment_id = $deployment_id AND l.workload = $workload
      AND coalesce(l.point_label, regexp_extract(l.load_point_id, '([^:#]*)(#[0-9]+)?$', 1)) = $point_label
      AND q.in_window AND q.error_kind IS NULL AND l.status = 'ok' AND len(q.chunk_ns) > 1)
SELECT req, repeat, unnest(chunk_ns) AS t FROM q
"""


def large_point_itl(
    con,
    run_id: str,
    dep: str,
    workload: str,
    label: str,
    rng: np.random.Generator,
    n_boot: int,
    events=None,
) -> tuple[dict[str, tuple[float, float, float]], int]:
    """itl_intervals for a point of many requests: the point's chunk times arrive flat (no Python object per
    request), from DuckDB, or from `events(where, rng, n_boot)` when given (a version-2 bundle's chunk files being
    loaded: resources/chunk_files.py ChunkFiles.label_itl, None for a deployment it does not carry). `rng`:
    itl_rng(where). ({pXX: (estimate, lo, hi)}, gaps)."""
    from threadpoolctl import threadpool_limits

    where = {"run_id": run_id, "deployment_id": dep, "workload": workload, "point_label": label}
    with threadpool_limits(1, "blas"):  # small products: a BLAS thread pool on a busy machine only waits for cores
        got = events(where, rng, n_boot) if events is not None else None
        if got is not None:
            return got
        cols = con.execute(_LARGE_POINT_CHUNKS, where).fetchnumpy()
        req, repeat, t = (np.asarray(cols[c], dtype=np.int64) for c in ("req", "repeat", "t"))
        if len(req) and np.any(np.diff(req) < 0):  # rows came back out of order: a stable sort keeps each list's order
            order = np.argsort(req, kind="stable")
            req, repeat, t = req[order], repeat[order], t[order]
        return flat_itl(req, repeat, t, rng, n_boot)


def flat_itl(
    req: np.ndarray, repeat: np.ndarray, t: np.ndarray, rng: np.random.Generator, n_boot: int
) -> tuple[dict[str, tuple[float, float, float]], int]:
    """runs_itl of token times numbered per event: request k's times are the run of `t` where req == k (req sorted:
    numbered 0.. by repeat, then request)."""
    if len(req) == 0:
        return {}, 0
    first = np.flatnonzero(np.concatenate([[True], req[1:] != req[:-1]]))
    lengths = np.diff(np.append(first, len(req)))
    return runs_itl(t, lengths, np.asarray(repeat)[first], rng, n_boot)


def runs_itl(
    t: np.ndarray, lengths: np.ndarray, repeats: np.ndarray, rng: np.random.Generator, n_boot: int
) -> tuple[dict[str, tuple[float, float, float]], int]:
    """The ITL percentiles of one large point and their intervals from its token times laid flat: request k's times
    are the next lengths[k] values of `t` (int64 ns), the request of repeat repeats[k] (requests ordered by repeat).
    The estimate is the exact pooled percentile. A resample draws the repeats with replacement (exactly), and within
    each drawn repeat its requests with replacement; what a percentile needs of the requests drawn is how many of
    their gaps lie below each bin edge near it (and in all), a sum of `per` independent draws of one request's
    counts, which is drawn from its normal limit (mean and covariance of the repeat's requests' counts, times `per`:
    at least EXACT_MAX_REQUESTS / repeats requests, where the central limit theorem is exact to well within a bin).
    The gaps (integer ns) are binned once, on integer edges (a table over their floating-point exponent and leading
    bits, no logarithm); each repeat's histogram (one count per bin) places every percentile's window, and one more
    count over the gaps gives every request's counts in all the windows at once: memory and time do not grow with
    the requests beyond a few passes over their gaps."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n_req = len(lengths)
    per_req = np.maximum(lengths - 1, 0)  # each request's gaps
    n_gaps = int(per_req.sum())
    if n_gaps == 0:
        return {}, 0
    ends = np.cumsum(lengths)
    cross = ends[:-1] - 1  # the diff between a request's last event and the next one's first: not a gap
    gaps = np.delete(np.diff(t), np.unique(cross[(cross >= 0) & (cross < len(t) - 1)]))
    del t
    edges_ns = _int_edges(int(gaps.min()), int(gaps.max()))
    edges = edges_ns / 1e6  # ms, as a gap is (t - prev) / 1e6 in DuckDB and the exact path
    n_bins = len(edges) - 1
    bins = _int_bins(gaps, edges_ns)
    labels, group_of = np.unique(np.asarray(repeats), return_inverse=True)
    group_of = group_of.reshape(-1)
    k = len(labels)
    per = max(n_req // k, 1)
    # each repeat's histogram: where its percentiles lie, to a bin (a repeat's requests are consecutive, and so are
    # their gaps, unless the caller ordered them otherwise)
    if np.all(np.diff(group_of) >= 0):
        gap_ends = np.concatenate([[0], np.cumsum(per_req)])
        bounds = gap_ends[np.searchsorted(group_of, np.arange(k + 1))]
        hist = np.stack([np.bincount(bins[a:b], minlength=n_bins) for a, b in zip(bounds[:-1], bounds[1:])])
    else:
        gap_group = np.repeat(group_of.astype(np.int64) * n_bins, per_req)
        gap_group += bins
        hist = np.bincount(gap_group, minlength=k * n_bins).reshape(k, n_bins)
        del gap_group
    cum = np.cumsum(hist, axis=1)
    exact = _exact_quantiles(gaps, bins, hist.sum(axis=0), list(QUANTILES.values()))
    del gaps

    def bin_at(level: float) -> np.ndarray:  # per repeat, the bin holding its `level` quantile
        return np.minimum((cum < level * cum[:, -1:]).sum(axis=1), n_bins - 1)

    def window(q: float, margin: float) -> tuple[int, int]:
        # a resample's percentile lies between its repeats' (a mixture's quantile lies between its parts'), give or
        # take the draw of requests: the window spans every repeat's percentile, `margin` either side, a bin beyond
        b0 = int(max(bin_at(max(q - margin, 0.0)).min() - 1, 0))
        b1 = int(min(bin_at(min(q + margin, 1.0)).max() + 2, n_bins))
        return b0, b1

    m = _drawn_counts(k, rng, n_boot)  # (n_boot, k): how often each repeat is drawn
    out: dict[str, tuple[float, float, float]] = {}
    todo = dict(QUANTILES)
    if n_req < 2:
        return {name: (float(e), float("nan"), float("nan")) for name, e in zip(QUANTILES, exact)}, n_gaps
    boots: dict[str, np.ndarray] = {}
    for widen in (1.0, 5.0, None):
        # the margin: six standard errors of a percentile's level over one repeat's requests (and 0.02 at most),
        # then five times that, then everything; the check below says whether every resample fell inside
        wins = {
            name: window(q, 1.0 if widen is None else widen * min(0.02, 6 * np.sqrt(q * (1 - q) / per)))
            for name, q in todo.items()
        }
        below = _counts_below(bins, per_req, n_bins, wins.values())  # one pass over the gaps
        for name, q in list(todo.items()):
            b0, b1 = wins[name]
            width = b1 - b0
            # x[:, j]: each request's gaps in bins below b0 + j (j = 0 .. width), then all its gaps
            x = below(b0, b1)
            sums = np.zeros((n_boot, width + 2))
            for g in range(k):
                xg = x[group_of == g]
                mean, cov = xg.mean(axis=0), np.cov(xg, rowvar=False, bias=True)
                w, v = np.linalg.eigh(cov)  # a covariance is symmetric and semi-definite: its square root
                root = v * np.sqrt(np.clip(w, 0, None))
                draws = m[:, g] * per
                sums += draws[:, None] * mean + np.sqrt(draws)[:, None] * (
                    rng.standard_normal((n_boot, width + 2)) @ root.T
                )
            c = np.maximum.accumulate(np.maximum(sums[:, :-1], 0), axis=1)
            target = q * sums[:, -1]
            inside_window = (c[:, -1] >= target) & ((b0 == 0) | (c[:, 0] < target))
            if inside_window.all() or widen is None:
                j = np.argmax(c[:, 1:] >= target[:, None], axis=1)
                rows = np.arange(n_boot)
                before, after = c[rows, j], c[rows, j + 1]
                frac = np.clip(
                    np.where(after > before, (target - before) / np.maximum(after - before, 1e-12), 0.0), 0, 1
                )
                boots[name] = edges[b0 + j] + frac * (edges[b0 + j + 1] - edges[b0 + j])
                del todo[name]
        if not todo:
            break
    for name, estimate in zip(QUANTILES, exact):
        lo, hi = np.quantile(boots[name], [0.025, 0.975])
        out[name] = (float(estimate), float(lo), float(hi))
    return out, n_gaps


def _exact_quantiles(gaps_ns: np.ndarray, bins: np.ndarray, hist: np.ndarray, levels: list[float]) -> list[float]:
    """The exact percentiles of the gaps in ms (gap_ns / 1e6; linear between order statistics: lo + (hi - lo) *
    frac, as DuckDB's quantile_cont), each order statistic found in its bin of the histogram: one pass picks the
    gaps of the bins that hold one, and only those are sorted."""
    n = len(gaps_ns)
    below = np.concatenate([[0], np.cumsum(hist)])
    wanted = []
    for q in levels:
        rn = (n - 1) * q
        wanted.append((rn, int(np.floor(rn)), int(np.ceil(rn))))
    order = sorted({i for _, lo_i, hi_i in wanted for i in (lo_i, hi_i)})
    bin_of = {i: int(np.searchsorted(below, i, side="right") - 1) for i in order}  # below[b] <= i < below[b + 1]
    need = np.zeros(len(hist), dtype=bool)
    need[list(bin_of.values())] = True
    picked = np.flatnonzero(need[bins])
    values, where = gaps_ns[picked], bins[picked]
    sorted_in = {b: np.sort(values[where == b]) for b in set(bin_of.values())}

    def order_stat(i: int) -> float:
        b = bin_of[i]
        return float(sorted_in[b][i - below[b]]) / 1e6

    out = []
    for rn, lo_i, hi_i in wanted:
        lo = order_stat(lo_i)
        out.append(lo if lo_i == hi_i else lo + (order_stat(hi_i) - lo) * (rn - lo_i))
    return out


def _int_edges(lo_ns: int, hi_ns: int) -> np.ndarray:
    """The 0.5% log-spaced bin edges over [lo_ns, hi_ns] in integer ns (a bin holds the gaps g with edges[i] <= g <
    edges[i + 1]); at 1 ns and below, 1 ns."""
    ms = _log_edges(lo_ns / 1e6, hi_ns / 1e6)
    return np.ceil(ms * 1e6).astype(np.int64)


_KEEP_BITS = 12  # a table entry per 1/4096 of an octave (0.017% wide): a 0.5% bin spans about 29 of them


def _int_bins(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The bin of each integer value (edges[i] <= v < edges[i + 1]; below the first: 0, past the last: the last),
    int32, exactly as a search of `edges` would give it: a value as a double (exact below 2^53) has its exponent
    and leading mantissa bits looked up in a table of the bin of each such stretch; the few values whose stretch
    holds an edge are placed by a search."""
    n_bins = len(edges) - 1
    shift = 52 - _KEEP_BITS
    vmin, vmax = max(int(values.min()), 1), max(int(values.max()), 1)
    k_lo = int(np.array(float(vmin)).view(np.int64)) >> shift
    k_hi = int(np.array(float(vmax)).view(np.int64)) >> shift
    keys = np.arange(k_lo, k_hi + 2, dtype=np.int64)
    starts = np.ceil((keys << shift).view(np.float64)).astype(np.int64)  # the first integer of each stretch
    starts[0] = min(starts[0], int(values.min()))  # zero and below fall in the first stretch
    first = np.clip(np.searchsorted(edges, starts[:-1], side="right") - 1, 0, n_bins - 1)
    last = np.clip(np.searchsorted(edges, starts[1:] - 1, side="right") - 1, 0, n_bins - 1)
    table = first.astype(np.int32)
    mixed = first != last  # a stretch that holds an edge
    key = values.astype(np.float64).view(np.int64)
    key >>= shift
    key -= k_lo
    np.clip(key, 0, len(table) - 1, out=key)
    bins = table[key]
    fix = np.flatnonzero(mixed[key])
    if len(fix):
        bins[fix] = np.clip(np.searchsorted(edges, values[fix], side="right") - 1, 0, n_bins - 1)
    return bins


def _counts_below(bins: np.ndarray, per_req: np.ndarray, n_bins: int, windows):
    """Every request's gap counts in every window at once, from one count over the gaps (request k's gaps are the
    next per_req[k] of `bins`): each bin of a window gets a column, each stretch of bins between windows one.
    Returns below(b0, b1): (requests, b1 - b0 + 2) floats, the request's gaps in bins below b0 + j for j = 0 ..
    b1 - b0, then all its gaps."""
    n_req = len(per_req)
    inside = np.zeros(n_bins, dtype=bool)
    for b0, b1 in windows:
        inside[b0:b1] = True
    starts = inside.copy()  # a bin starts a column: a window's bin, the first bin, or the first after a window
    starts[0] = True
    starts[1:] |= inside[:-1]
    col = np.cumsum(starts) - 1
    n_cols = int(col[-1]) + 1
    slot = np.repeat(np.arange(n_req, dtype=np.int64) * n_cols, per_req)
    slot += col[bins]
    per_col = np.bincount(slot, minlength=n_req * n_cols).reshape(n_req, n_cols)
    del slot
    cum = np.cumsum(per_col, axis=1, out=per_col)  # cum[:, c]: the request's gaps in columns 0 .. c

    def below(b0: int, b1: int) -> np.ndarray:
        c = col[b0:b1]  # one column each, consecutive
        lower = cum[:, c[0] - 1 : c[0]] if c[0] > 0 else np.zeros((n_req, 1), dtype=cum.dtype)
        return np.concatenate([lower, cum[:, c[0] : c[-1] + 1], cum[:, -1:]], axis=1).astype(np.float64)

    return below


_POINT_SIZES = """
SELECT q.deployment_id, l.workload,
       coalesce(l.point_label, regexp_extract(l.load_point_id, '([^:#]*)(#[0-9]+)?$', 1)) AS point_label, count(*) AS n
FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
WHERE q.run_id = $run_id AND q.in_window AND q.error_kind IS NULL AND l.status = 'ok'
GROUP BY ALL
"""
_LARGE_POINT_REQUESTS = """
SELECT l.source, coalesce(l.repeat, 1) AS repeat, q.ttft_ms, q.tpot_ms, q.e2e_ms
FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
WHERE q.run_id = $run_id AND q.deployment_id = $deployment_id AND l.workload = $workload
  AND coalesce(l.point_label, regexp_extract(l.load_point_id, '([^:#]*)(#[0-9]+)?$', 1)) = $point_label
  AND q.in_window AND q.error_kind IS NULL AND l.status = 'ok'
ORDER BY 2
"""


def compute_large(
    con, run_id: str, dep: str, workload: str, label: str, n_boot: int = BOOTSTRAP_SAMPLES, events=None
) -> list[dict[str, Any]]:
    """latency_intervals rows of one point of more than EXACT_MAX_REQUESTS requests (binned bootstrap). `events`:
    see large_point_itl."""
    where = {"run_id": run_id, "deployment_id": dep, "workload": workload, "point_label": label}
    cols = con.execute(_LARGE_POINT_REQUESTS, where).fetchnumpy()
    rng = np.random.default_rng(_seed(run_id, dep, workload, label))
    repeat = np.asarray(cols["repeat"])
    repeats = int(len(np.unique(repeat)))
    base = {
        "run_id": run_id,
        "source": str(cols["source"][0]),
        "deployment_id": dep,
        "workload": workload,
        "point_label": label,
        "repeats": repeats,
        "method": method_text(repeats, n_boot, binned=True),
    }
    rows: list[dict[str, Any]] = []
    for name, column in PER_REQUEST:
        values = np.asarray(cols[column], dtype=float)
        ok = ~np.isnan(values)
        if not ok.any():
            continue
        for qname, (est, lo, hi) in binned_percentile_intervals(values[ok], repeat[ok], QUANTILES, rng, n_boot).items():
            rows.append(
                {
                    **base,
                    "metric": f"{name}_{qname}_ms",
                    "estimate": est,
                    "lo": _finite(lo),
                    "hi": _finite(hi),
                    "samples": int(ok.sum()),
                }
            )
    n_itl = min(n_boot, ITL_BOOTSTRAP_SAMPLES)
    itl, n_gaps = large_point_itl(con, run_id, dep, workload, label, itl_rng(where), n_itl, events)
    for qname, (est, lo, hi) in itl.items():
        rows.append(
            {
                **base,
                "metric": f"itl_{qname}_ms",
                "method": method_text(repeats, n_itl, binned=True),
                "estimate": est,
                "lo": _finite(lo),
                "hi": _finite(hi),
                "samples": n_gaps,
            }
        )
    return rows


def compute(con, run_id: str, n_boot: int = BOOTSTRAP_SAMPLES, events=None) -> list[dict[str, Any]]:
    """latency_intervals rows of one run (every point, every engine). `events`: see large_point_itl."""
    sizes = con.execute(_POINT_SIZES, {"run_id": run_id}).fetchall()
    large = [(d, w, p) for d, w, p, n in sizes if n > EXACT_MAX_REQUESTS]
    rows: list[dict[str, Any]] = []
    for dep, workload, label in sorted(large):
        rows += compute_large(con, run_id, dep, workload, label, n_boot, events)
    if len(large) == len(sizes):
        return rows
    text = _REQUESTS
    if large:  # only the small points go through pandas
        keys = ", ".join("'" + "\x1f".join(map(str, k)).replace("'", "''") + "'" for k in large)
        text = text.replace(
            "ORDER BY 1, 2, 3, 4",
            f"""AND concat_ws(chr(31), l.deployment_id, l.workload,
            coalesce(l.point_label, regexp_extract(l.load_point_id, '([^:#]*)(#[0-9]+)?$', 1))) NOT IN ({keys})
            ORDER BY 1, 2, 3, 4""",
        )
    df = con.execute(text, {"run_id": run_id}).df()
    for (dep, workload, label), g in df.groupby(["deployment_id", "workload", "point_label"], sort=True):
        rng = np.random.default_rng(_seed(run_id, dep, workload, label))
        repeats = int(g["repeat"].nunique())
        base = {
            "run_id": run_id,
            "source": g["source"].iloc[0],
            "deployment_id": dep,
            "workload": workload,
            "point_label": label,
            "repeats": repeats,
            "method": method_text(repeats, n_boot),
        }
        for name, column in PER_REQUEST:
            sub = g[g[column].notna()]
            if sub.empty:
                continue
            values, groups = sub[column].to_numpy(float), sub["repeat"].to_numpy()
            for qname, q in QUANTILES.items():
                est, lo, hi = percentile_interval(values, groups, q, rng, n_boot)
                rows.append(
                    {
                        **base,
                        "metric": f"{name}_{qname}_ms",
                        "estimate": est,
                        "lo": _finite(lo),
                        "hi": _finite(hi),
                        "samples": int(len(values)),
                    }
                )
        sub = g[g["gaps"].notna()]
        if not sub.empty:
            gaps = [np.asarray(x, dtype=float) for x in sub["gaps"]]
            n_itl = min(n_boot, ITL_BOOTSTRAP_SAMPLES)
            for qname, (est, lo, hi) in itl_intervals(gaps, sub["repeat"].to_numpy(), rng, n_itl).items():
                rows.append(
                    {
                        **base,
                        "metric": f"itl_{qname}_ms",
                        "method": method_text(repeats, n_itl),
                        "estimate": est,
                        "lo": _finite(lo),
                        "hi": _finite(hi),
                        "samples": int(sum(len(x) for x in gaps)),
                    }
                )
    return rows


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def refresh(con, run_id: str, n_boot: int = BOOTSTRAP_SAMPLES, events=None) -> int:
    """Recompute a run's latency_intervals rows (inside the caller's transaction); returns rows written. `events`:
    see large_point_itl."""
    rows = compute(con, run_id, n_boot, events)
    con.execute("DELETE FROM latency_intervals WHERE run_id = ?", [run_id])
    if rows:
        import pandas as pd

        frame = pd.DataFrame(rows)  # noqa: F841 - read by DuckDB below
        con.execute("INSERT INTO latency_intervals BY NAME SELECT * FROM frame")
    return len(rows)
