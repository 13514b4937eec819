"""95% intervals on every figure: t over repeats, two-stage bootstrap for latency percentiles, paired engine
contrasts, above-idle energy (sql/views.sql v_point_figures / v_engine_contrasts, resources/intervals.py)."""

import math

import numpy as np
import pytest

from resources import intervals
from resources.warehouse import connect, run_sql

from .synth import Deployment, Point, write_run

T975_2 = 4.303  # Student t, 0.975 quantile, 2 degrees of freedom


def _point(
    label: str, n: int, ttft: float | list[float], repeat: int | None, energy: float = 5000.0, tokens: int | None = None
) -> Point:
    ttfts = ttft if isinstance(ttft, list) else [ttft] * n
    return Point(
        workload="steady", label=label, ttft_ms=ttfts, repeat=repeat, energy_j=energy, output_tokens_in_window=tokens
    )


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    """fast and slow: three interleaved repeats of c8 each (tokens per window chosen per repeat), one repeat of c32;
    same: a twin of slow whose repeats wobble around slow's (no real difference)."""
    tmp = tmp_path_factory.mktemp("intervals")
    db = tmp / "w.duckdb"
    rng = np.random.default_rng(1)
    fast = Deployment(
        "fast",
        idle_w=(100.0, 120.0),
        points=[
            _point("c8", 100, list(rng.normal(50 * r, 5, 100)), r, tokens=t)
            for r, t in ((1, 20_000), (2, 21_000), (3, 22_000))
        ]
        + [_point("c32", 100, 80.0, None, tokens=40_000)],
    )
    slow = Deployment(
        "slow", points=[_point("c8", 100, 60.0, r, tokens=t) for r, t in ((1, 10_000), (2, 10_500), (3, 11_000))]
    )
    same = Deployment(
        "same", points=[_point("c8", 100, 60.0, r, tokens=t) for r, t in ((1, 10_400), (2, 10_100), (3, 11_100))]
    )
    write_run(db, tmp, "r", [fast, slow, same])
    return db


def _fig(con, engine, label, metric):
    return con.execute(
        "SELECT estimate, lo, hi, repeats, method FROM v_point_figures WHERE engine = ? AND "
        "point_label = ? AND metric = ?",
        [engine, label, metric],
    ).fetchone()


def test_repeat_level_figures_get_a_t_interval_over_repeats(wh):
    with connect(wh, read_only=True) as con:
        est, lo, hi, n, method = _fig(con, "fast", "c8", "output_tok_s")
        one = _fig(con, "fast", "c32", "output_tok_s")
    per_repeat = np.array([20_000, 21_000, 22_000]) / 10.0
    half = T975_2 * per_repeat.std(ddof=1) / math.sqrt(3)
    assert (est, lo, hi, n) == (
        pytest.approx(per_repeat.mean()),
        pytest.approx(per_repeat.mean() - half),
        pytest.approx(per_repeat.mean() + half),
        3,
    )
    assert method == "t interval over 3 repeats"
    assert one[0] == pytest.approx(4000.0) and one[1] is None and one[2] is None and one[4] == "one repeat: no interval"


def test_latency_percentiles_get_a_two_stage_bootstrap_that_sees_run_to_run_spread(wh):
    """fast's TTFTs sit near 50, 100 and 150 ms in its three repeats: resampling only requests would give a narrow
    interval around the pooled median (~100 ms); drawing repeats first spans most of that spread."""
    with connect(wh, read_only=True) as con:
        est, lo, hi, n, method = _fig(con, "fast", "c8", "ttft_p50_ms")
        pooled = con.execute(
            "SELECT quantile_cont(ttft_ms, 0.5) FROM requests WHERE load_point_id LIKE 'fast:steady:c8#%'"
            " AND in_window AND error_kind IS NULL"
        ).fetchone()[0]
    assert est == pytest.approx(pooled)
    assert lo < 70 and hi > 130, (lo, hi)
    assert method.startswith("two-stage bootstrap: 3 repeats")


def test_one_repeat_bootstrap_covers_the_true_quantile():
    """Requests only: 2,000 draws from an exponential of mean 100 ms; its true median is 100 ln 2."""
    rng = np.random.default_rng(7)
    values = rng.exponential(100.0, 2000)
    est, lo, hi = intervals.percentile_interval(values, np.ones(2000), 0.5, np.random.default_rng(0))
    assert lo < 100 * math.log(2) < hi and hi - lo < 15
    assert est == pytest.approx(np.quantile(values, 0.5))


def test_engine_contrasts_call_a_difference_only_when_the_interval_excludes_one(wh):
    with connect(wh, read_only=True) as con:
        c = run_sql(con, "engine_contrasts", {"run_id": "r"})
    tok = c[c["metric"] == "output_tok_s"].set_index(["engine", "other"])
    fast_slow = tok.loc[("slow", "fast")]  # rows list each pair once: engine > other
    assert fast_slow["ratio"] == pytest.approx(0.5, abs=0.01) and fast_slow["finding"] == "fast better"
    assert fast_slow["ratio_hi"] < 1
    same_slow = tok.loc[("slow", "same")]
    assert same_slow["ratio_lo"] < 1 < same_slow["ratio_hi"]
    assert same_slow["finding"] == "no significant difference"


def test_above_idle_energy_subtracts_the_deployments_idle_power(wh):
    with connect(wh, read_only=True) as con:
        v = con.execute(
            "SELECT idle_power_w, output_tokens_per_j_above_idle, above_idle_power_w, output_tokens_per_j "
            "FROM v_load_points WHERE load_point_id = 'fast:steady:c8#1'"
        ).fetchone()
        slow = con.execute(
            "SELECT idle_power_w, output_tokens_per_j_above_idle FROM v_load_points "
            "WHERE load_point_id = 'slow:steady:c8#1'"
        ).fetchone()
    assert v[0] == pytest.approx(110.0)  # mean of before (100) and after (120)
    assert v[1] == pytest.approx(20_000 / (5000.0 - 110.0 * 10.0))
    assert v[2] == pytest.approx(500.0 - 110.0) and v[3] == pytest.approx(20_000 / 5000.0)
    assert slow == (None, None)  # no idle baseline: NULL, not total energy


def test_load_points_summarises_repeats_with_their_intervals(wh):
    with connect(wh, read_only=True) as con:
        table = run_sql(con, "load_points", {"run_id": "r"}).set_index(["engine", "point_label"])
    row = table.loc[("fast", "c8")]
    assert row["repeats"] == 3 and row["output_tok_s"] == pytest.approx(2100.0, abs=0.1)
    assert row["output_tok_s_lo"] < 2100 < row["output_tok_s_hi"]
    assert row["ttft_p50_ms_lo"] < row["ttft_p50_ms"] < row["ttft_p50_ms_hi"]
    assert math.isnan(table.loc[("fast", "c32"), "output_tok_s_lo"])
