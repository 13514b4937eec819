"""Scalar functions the warehouse's views call that DuckDB does not have: Student's t two-sided p-value, for the
engine contrasts' multiple-comparison control (sql/views.sql v_engine_contrasts, Benjamini-Hochberg). Pure Python
(math only), registered on a connection by `register` (wattbench/schema.apply_schema and the query runner when a
query first needs it, as the token store's functions are)."""

from __future__ import annotations

import math

NAMES = ("t_two_sided_p",)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float | None, df: float | None) -> float | None:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (df may be fractional); None where undefined."""
    if t is None or df is None or not df > 0 or math.isnan(t) or math.isnan(df):
        return None
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def register(con) -> None:
    """The functions of NAMES on this connection (idempotent)."""
    for name in NAMES:
        try:
            con.remove_function(name)
        except Exception:  # noqa: BLE001 - not registered yet
            pass
    con.create_function(
        "t_two_sided_p", t_two_sided_p, ["DOUBLE", "DOUBLE"], "DOUBLE", null_handling="special", side_effects=False
    )
