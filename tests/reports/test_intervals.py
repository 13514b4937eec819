"""95% intervals on every figure, one definition (sql/views.sql v_point_figures_live / v_engine_contrasts): the mean
of the repeats with a t interval on the log scale (positive figures), costs from price / mean throughput, latency
percentiles from each repeat's own percentile, paired engine contrasts with the interval their verdict rests on,
above-idle energy."""

import math

import numpy as np
import pytest

from wattbench.warehouse import connect, run_sql

from .synth import Deployment, Point, emulated_interval, write_run

T975_2 = 4.303  # Student t, 0.975 quantile, 2 degrees of freedom
PRICE = 2.0  # $ per GPU-hour (write_run's default), one GPU per deployment


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
    same: a twin of slow whose repeats wobble around slow's (no real difference); bursty: three repeats far apart
    (the spread of a few short windows of bursty arrivals), where a t interval on the raw scale reaches below zero."""
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
        + [_point("c32", 100, 80.0, None, tokens=40_000)]
        + [_point("g", n, 60.0, r, tokens=t) for r, n, t in ((1, 30, 16_800), (2, 21, 7_900), (3, 36, 19_500))],
    )
    slow = Deployment(
        "slow",
        points=[
            _point("c8", 100, list(rng.normal(60, 3, 100)), r, tokens=t)
            for r, t in ((1, 10_000), (2, 10_500), (3, 11_000))
        ],
    )
    same = Deployment(
        "same",
        points=[
            _point("c8", 100, list(rng.normal(60, 3, 100)), r, tokens=t)
            for r, t in ((1, 10_400), (2, 10_100), (3, 11_100))
        ],
    )
    write_run(db, tmp, "r", [fast, slow, same], price=PRICE)
    return db


def _fig(con, engine, label, metric):
    return con.execute(
        "SELECT estimate, lo, hi, repeats, method FROM v_point_figures WHERE engine = ? AND "
        "point_label = ? AND metric = ?",
        [engine, label, metric],
    ).fetchone()


def _log_t(values):
    """The definition for one server start of an emulated engine: mean m, 95% interval m x exp(-+ t x sqrt(2 b^2 +
    2 w^2 / k)), w = s / m the repeats' spread, b the emulator's between-start prior (synth.emulated_interval)."""
    return emulated_interval([float(v) for v in values])


def test_repeat_level_figures_get_a_t_interval_on_the_log_scale(wh):
    with connect(wh, read_only=True) as con:
        est, lo, hi, n, method = _fig(con, "fast", "c8", "output_tok_s")
        one = _fig(con, "fast", "c32", "output_tok_s")
    m, want_lo, want_hi = _log_t(np.array([20_000, 21_000, 22_000]) / 10.0)
    assert (est, lo, hi, n) == (pytest.approx(m), pytest.approx(want_lo), pytest.approx(want_hi), 3)
    assert method.startswith("another server start or machine: 95% interval over 3 repeats of one start")
    assert one[0] == pytest.approx(4000.0) and one[1] is None and one[2] is None and one[4] == "one repeat: no interval"


def test_positive_figures_keep_positive_bounds_where_a_raw_t_interval_goes_negative(wh):
    """Three bursty repeats of 1,680, 790 and 1,950 tok/s: mean +- t x s / sqrt(3) reaches below zero (-29.7 tok/s),
    and so did the $ per 1M computed from it; on the log scale every bound stays positive and holds the mean."""
    per_repeat = np.array([16_800, 7_900, 19_500]) / 10.0
    raw_lo = per_repeat.mean() - T975_2 * per_repeat.std(ddof=1) / math.sqrt(3)
    assert raw_lo < 0  # what a t interval on the raw scale gives here
    with connect(wh, read_only=True) as con:
        tok = _fig(con, "fast", "g", "output_tok_s")
        usd = _fig(con, "fast", "g", "usd_per_1m_output_tokens")
        good = _fig(con, "fast", "g", "goodput_requests_s")
        joule = _fig(con, "fast", "g", "output_tokens_per_j")
    for est, lo, hi, *_ in (tok, usd, good, joule):
        assert 0 < lo < est < hi
    assert tok[:3] == pytest.approx(_log_t(per_repeat))


def test_cost_per_token_comes_from_price_over_mean_throughput(wh):
    """$ per 1M = price x GPUs / (mean tok/s x 3600) x 1e6, not the mean of per-repeat costs; its bounds are the
    throughput's bounds mapped through the same formula."""
    per_repeat = np.array([16_800, 7_900, 19_500]) / 10.0
    cost = lambda tok_s: PRICE * 1 / (tok_s * 3600) * 1e6  # noqa: E731
    with connect(wh, read_only=True) as con:
        est, lo, hi, _, method = _fig(con, "fast", "g", "usd_per_1m_output_tokens")
        _, tok_lo, tok_hi, *_ = _fig(con, "fast", "g", "output_tok_s")
    assert est == pytest.approx(cost(per_repeat.mean()))
    assert est != pytest.approx(np.mean([cost(x) for x in per_repeat]), rel=1e-3)  # the mean of reciprocals
    assert (lo, hi) == (pytest.approx(cost(tok_hi)), pytest.approx(cost(tok_lo)))
    assert method.endswith("price over the mean of its denominator")


def test_latency_percentiles_summarise_each_repeats_own_percentile(wh):
    """fast's TTFTs sit near 50, 100 and 150 ms in its three repeats: the estimate is the mean of the three repeats'
    medians, its interval the same t interval on the log scale, so run-to-run spread is in it."""
    with connect(wh, read_only=True) as con:
        est, lo, hi, n, method = _fig(con, "fast", "c8", "ttft_p50_ms")
        medians = [
            r[0]
            for r in con.execute(
                "SELECT quantile_cont(ttft_ms, 0.5) FROM requests WHERE load_point_id LIKE 'fast:steady:c8#%'"
                " AND in_window AND error_kind IS NULL GROUP BY load_point_id ORDER BY load_point_id"
            ).fetchall()
        ]
    assert (est, lo, hi) == tuple(pytest.approx(x) for x in _log_t(medians))
    assert lo < 60 and hi > 140, (lo, hi)
    assert method.startswith("another server start or machine: 95% interval over 3 repeats of one start")


def test_a_percentile_with_too_few_requests_per_repeat_gets_no_interval_and_says_why(wh):
    """100 requests a repeat: enough for the p50 (20) and the p90 (100), not for the p99 (1,000: ten beyond it)."""
    with connect(wh, read_only=True) as con:
        p90 = _fig(con, "fast", "c8", "ttft_p90_ms")
        p99 = _fig(con, "fast", "c8", "ttft_p99_ms")
    assert p90[1] is not None and p90[2] is not None
    assert p99[1] is None and p99[2] is None
    assert p99[4] == "no interval: 100 samples in a repeat, the p99 needs 1000"


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


def test_every_latency_finding_shows_the_interval_it_was_decided_on(wh):
    """A latency percentile's contrast is the paired ratio of the repeats' own percentiles with its interval, and the
    finding follows from that interval alone; where there is none, the row says it was not tested."""
    with connect(wh, read_only=True) as con:
        c = run_sql(con, "engine_contrasts", {"run_id": "r"})
    lat = c[c["metric"].str.endswith("_ms")]
    tested = lat[~lat["finding"].str.contains("not tested")]
    assert len(tested) and tested["ratio_lo"].notna().all() and tested["ratio_hi"].notna().all()
    for _, r in tested.iterrows():
        excludes_one = r["ratio_lo"] > 1 or r["ratio_hi"] < 1
        assert (r["finding"] != "no significant difference") == excludes_one, r.to_dict()
    ttft = lat[lat["metric"] == "ttft_p50_ms"].set_index(["engine", "other"]).loc[("slow", "fast")]
    assert ttft["ratio_lo"] < 1 < ttft["ratio_hi"] and ttft["finding"] == "no significant difference"  # 60 vs 50-150
    untested = lat[lat["finding"].str.contains("not tested")]
    assert (untested["metric"].str.contains("p99")).all() and untested["ratio_lo"].isna().all()


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
