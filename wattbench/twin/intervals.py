"""The twin's prediction intervals: sized from its cross-validated errors, with their coverage checked.

Per figure, the log ratio measured / predicted over the points of the cross-validation by board (each point
predicted by a calibration that never saw its board: the case of a buyer's own machine) gives the interval's ends:
split conformal quantiles at LEVEL (the floor((n + 1)(1 - LEVEL)/2)-th smallest and the ceil((n + 1)(1 + LEVEL)/2)-th
smallest of the n ratios), so a predicted value v carries [v exp(lo), v exp(hi)]. Where a closed loop of equal
lengths can lock into either phase state and the other state's share is at least 1 - LEVEL (or unknown), the interval
also spans that state's value with the same ends (states.py).

Coverage is checked without the points it is sized on: for each fold of a cross-validation protocol, the interval
sized from the other folds' errors against that fold's points (so a board's points are never inside an interval
sized from their own errors); the held-out runs and the held-out model against the interval sized from every
cross-validated point.
"""

from __future__ import annotations

import math
from typing import Any

from wattbench.twin.evaluate import BY_BOARD, CROSS_VALIDATED, LEVEL

BASIS = BY_BOARD


def log_ratio(r: dict[str, Any]) -> float:
    return math.log(r["measured"] / r["predicted"])


def conformal(ratios: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """The split conformal ends of a two-sided interval at `level` over `ratios` (None: too few for that level)."""
    xs = sorted(ratios)
    n = len(xs)
    # the ranks, kept from a float's last bit (20 x 0.05 is 0.9999999999999998)
    lo_k = math.floor((n + 1) * (1 - level) / 2 + 1e-9)
    hi_k = math.ceil((n + 1) * (1 + level) / 2 - 1e-9)
    if lo_k < 1 or hi_k > n:
        return None
    return xs[lo_k - 1], xs[hi_k - 1]


def size(rows: list[dict[str, Any]], figures, level: float = LEVEL, basis: str = BASIS) -> dict[str, Any]:
    """The intervals a prediction carries, per figure, from the basis protocol's rows."""
    out: dict[str, Any] = {}
    for f in figures:
        ratios = [log_ratio(r) for r in rows if r["protocol"] == basis and r["figure"] == f]
        ends = conformal(ratios, level)
        if ends:
            out[f] = {
                "log_lo": ends[0],
                "log_hi": ends[1],
                "lo": math.exp(ends[0]) - 1.0,
                "hi": math.exp(ends[1]) - 1.0,
                "n": len(ratios),
            }
    return {"level": level, "basis": f"cross-validation {basis}", "figures": out}


def span(predicted: float, ends: dict[str, float], other: float | None = None, both: bool = False):
    """[low, high] of a predicted value's interval; with `both`, the other phase state's interval joined to it."""
    lo, hi = predicted * math.exp(ends["log_lo"]), predicted * math.exp(ends["log_hi"])
    if both and other is not None:
        lo, hi = min(lo, other * math.exp(ends["log_lo"])), max(hi, other * math.exp(ends["log_hi"]))
    return lo, hi


def inside(r: dict[str, Any], ends: dict[str, float] | None) -> bool | None:
    if not ends:
        return None
    lo, hi = span(r["predicted"], ends, r.get("other_state"), r.get("band_covers_both", False))
    return lo <= r["measured"] <= hi


def mark(rows: list[dict[str, Any]], figures, level: float = LEVEL) -> list[dict[str, Any]]:
    """Every row with `inside`: its interval sized without its own fold (cross-validation) or from every
    cross-validated point (held-out runs, held-out model, in sample)."""
    final = size(rows, figures, level)["figures"]
    cache: dict[tuple[str, str, str], dict | None] = {}
    out = []
    for r in rows:
        if r["protocol"] in CROSS_VALIDATED:
            key = (r["protocol"], r["fold"], r["figure"])
            if key not in cache:
                ratios = [
                    log_ratio(x)
                    for x in rows
                    if x["protocol"] == r["protocol"] and x["fold"] != r["fold"] and x["figure"] == r["figure"]
                ]
                ends = conformal(ratios, level)
                cache[key] = {"log_lo": ends[0], "log_hi": ends[1]} if ends else None
            ends = cache[key]
        else:
            ends = final.get(r["figure"])
        out.append({**r, "inside": inside(r, ends)})
    return out


def coverage(rows: list[dict[str, Any]], figures) -> dict[str, dict[str, dict[str, Any]]]:
    """Per protocol and figure: points, inside the interval, and the share (rows marked by mark())."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for proto in sorted({r["protocol"] for r in rows}):
        for f in figures:
            fr = [r for r in rows if r["protocol"] == proto and r["figure"] == f and r["inside"] is not None]
            if fr:
                n_in = sum(r["inside"] for r in fr)
                out.setdefault(proto, {})[f] = {"n": len(fr), "inside": n_in, "share": n_in / len(fr)}
    return out
