"""The interval of a figure over server starts, in Python: the same model and arithmetic as sql/views.sql
v_point_figures_live (tests/test_intervals.py holds them equal), for what cannot run in the warehouse: `wattbench
load`'s figures at a search's capacity (loadgen/energy.py: one server, within one start), and the coverage benchmark
(benchmarks/interval_coverage.py), which scores it on committed runs and simulations and writes the between-start
prior the view borrows (v_between_start_prior). In the agent, which imports no DuckDB, so that both sides share it.

The model, on the log scale (the delta method, x / m): a repeat's value = the mean + its server start's offset (sd b,
between starts) + its own noise (sd w, within a start). The interval holds another start's mean of as many repeats:
m x exp(+- t x sqrt(b^2 (1 + 1/S) + w^2 (1/N + 1/n))). docs/MEASUREMENT.md, "Server starts".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Student's t, 0.975 quantile, by degrees of freedom: sql/views.sql t975, the same table.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: float | None) -> float | None:
    """t(0.975, df) as sql/views.sql's t975 gives it (df floored to an integer; None below 1)."""
    if df is None or df < 1:
        return None
    df = int(df)
    if df <= 30:
        return _T975[df - 1]
    if df <= 40:
        return 2.021
    if df <= 60:
        return 2.000
    if df <= 120:
        return 1.980
    return 1.960


@dataclass(frozen=True)
class Interval:
    estimate: float | None
    lo: float | None
    hi: float | None
    scope: str  # starts | starts+prior | prior | one_start (sql/views.sql's interval_scope)
    between_sd: float | None  # b on the log scale (absolute for linear)
    within_sd: float | None

    def holds(self, value: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= value <= self.hi


def _var(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    mu = sum(xs) / len(xs)
    return sum((x - mu) ** 2 for x in xs) / (len(xs) - 1)


def interval(
    starts: list[list[float]], scale: str = "log", prior_sd: float | None = None, prior_df: int = 0
) -> Interval:
    """The 95% interval of a figure whose repeats are grouped by server start (`starts`: each start's values), scale
    'log' (positive figures) or 'linear'; the between-start prior (sd of ln between starts, its df) pooled in where
    given. As sql/views.sql v_point_figures_live computes it."""
    groups = [[float(x) for x in g] for g in starts if g]
    xs = [x for g in groups for x in g]
    k, s_n = len(xs), len(groups)
    if k == 0:
        return Interval(None, None, None, "one_start", None, None)
    m = sum(xs) / k
    ssw = sum(_var(g) * (len(g) - 1) for g in groups)
    df_w = sum(len(g) - 1 for g in groups)
    var_means = _var([sum(g) / len(g) for g in groups])
    inv_n = sum(1.0 / len(g) for g in groups) / s_n
    n_bar = k / s_n
    rel = 1.0 if scale == "linear" else (1.0 / (m * m) if m else math.inf)
    w2_raw = ssw / df_w if df_w > 0 else None
    w2 = (w2_raw or 0.0) * rel
    b2_own = max(var_means - (w2_raw or 0.0) * inv_n, 0.0) * rel
    df_b = max(s_n - 1, 0)
    pdf = prior_df if (scale != "linear" and prior_sd is not None) else 0
    b2 = (df_b * b2_own + pdf * (prior_sd or 0.0) ** 2) / (df_b + pdf) if df_b + pdf > 0 else None
    scope = "starts+prior" if df_b and pdf else "starts" if df_b else "prior" if pdf else "one_start"
    if k < 2 or (scale != "linear" and not m > 0):
        return Interval(m, None, None, scope, math.sqrt(b2) if b2 is not None else None, math.sqrt(w2))
    if scope == "one_start":
        se2, df_t = w2 / k, k - 1
    else:
        a = b2 * (1 + 1.0 / s_n)
        c = w2 * (1.0 / k + 1.0 / n_bar)
        se2 = a + c
        den = a * a / (df_b + pdf) + (c * c / df_w if df_w > 0 else 0.0)
        df_t = 1000 if se2 == 0 else math.floor(se2 * se2 / den) if den else None
    t = t975(min(df_t, 1000) if df_t is not None else None)
    if t is None:
        return Interval(m, None, None, scope, math.sqrt(b2) if b2 is not None else None, math.sqrt(w2))
    half = t * math.sqrt(se2)
    lo, hi = (m - half, m + half) if scale == "linear" else (m * math.exp(-half), m * math.exp(half))
    return Interval(m, lo, hi, scope, math.sqrt(b2) if b2 is not None else None, math.sqrt(w2))


def between_start_sd(starts: list[list[float]]) -> tuple[float | None, int]:
    """The between-start sd of ln(figure) that a set of whole starts (runs) shows, less what their repeats' own noise
    explains, and its degrees of freedom (starts - 1): the prior's estimate (benchmarks/interval_coverage.py)."""
    groups = [[math.log(x) for x in g if x > 0] for g in starts]
    groups = [g for g in groups if g]
    if len(groups) < 2:
        return None, 0
    means = [sum(g) / len(g) for g in groups]
    within = [_var(g) / len(g) for g in groups if len(g) > 1]
    b2 = max(_var(means) - (sum(within) / len(within) if within else 0.0), 0.0)
    return math.sqrt(b2), len(groups) - 1
