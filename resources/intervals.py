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


def _seed(*parts: Any) -> int:
    import zlib

    return zlib.crc32("|".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


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


def method_text(repeats: int, n_boot: int) -> str:
    if repeats > 1:
        return f"two-stage bootstrap: {repeats} repeats, then requests within each; {n_boot} resamples"
    return f"bootstrap over requests (one repeat: run-to-run variation not captured); {n_boot} resamples"


def percentile_interval(values: np.ndarray, groups: np.ndarray, q: float, rng: np.random.Generator,
                        n_boot: int = BOOTSTRAP_SAMPLES) -> tuple[float, float, float]:
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


def itl_intervals(gaps: list[np.ndarray], groups: np.ndarray, rng: np.random.Generator,
                  n_boot: int = ITL_BOOTSTRAP_SAMPLES) -> dict[str, tuple[float, float, float]]:
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
            THEN list_transform(range(1, len(q.chunk_ns)), lambda i: (q.chunk_ns[i + 1] - q.chunk_ns[i]) / 1e6) END AS gaps
FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id)
WHERE q.run_id = $run_id AND q.in_window AND q.error_kind IS NULL AND l.status = 'ok'
ORDER BY 1, 2, 3, 4
"""


def compute(con, run_id: str, n_boot: int = BOOTSTRAP_SAMPLES) -> list[dict[str, Any]]:
    """latency_intervals rows of one run (every point, every engine)."""
    df = con.execute(_REQUESTS, {"run_id": run_id}).df()
    rows: list[dict[str, Any]] = []
    for (dep, workload, label), g in df.groupby(["deployment_id", "workload", "point_label"], sort=True):
        rng = np.random.default_rng(_seed(run_id, dep, workload, label))
        repeats = int(g["repeat"].nunique())
        base = {"run_id": run_id, "source": g["source"].iloc[0], "deployment_id": dep, "workload": workload,
                "point_label": label,
                "repeats": repeats, "method": method_text(repeats, n_boot)}
        for name, column in PER_REQUEST:
            sub = g[g[column].notna()]
            if sub.empty:
                continue
            values, groups = sub[column].to_numpy(float), sub["repeat"].to_numpy()
            for qname, q in QUANTILES.items():
                est, lo, hi = percentile_interval(values, groups, q, rng, n_boot)
                rows.append({**base, "metric": f"{name}_{qname}_ms", "estimate": est, "lo": _finite(lo),
                             "hi": _finite(hi), "samples": int(len(values))})
        sub = g[g["gaps"].notna()]
        if not sub.empty:
            gaps = [np.asarray(x, dtype=float) for x in sub["gaps"]]
            n_itl = min(n_boot, ITL_BOOTSTRAP_SAMPLES)
            for qname, (est, lo, hi) in itl_intervals(gaps, sub["repeat"].to_numpy(), rng, n_itl).items():
                rows.append({**base, "metric": f"itl_{qname}_ms", "method": method_text(repeats, n_itl),
                             "estimate": est, "lo": _finite(lo),
                             "hi": _finite(hi), "samples": int(sum(len(x) for x in gaps))})
    return rows


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def refresh(con, run_id: str, n_boot: int = BOOTSTRAP_SAMPLES) -> int:
    """Recompute a run's latency_intervals rows (inside the caller's transaction); returns rows written."""
    rows = compute(con, run_id, n_boot)
    con.execute("DELETE FROM latency_intervals WHERE run_id = ?", [run_id])
    if rows:
        import pandas as pd

        frame = pd.DataFrame(rows)  # noqa: F841 - read by DuckDB below
        con.execute("INSERT INTO latency_intervals BY NAME SELECT * FROM frame")
    return len(rows)
