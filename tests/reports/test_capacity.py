"""Capacity plan and hybrid topology arithmetic on hand-made numbers (sql/capacity_plan.sql, sql/hybrid_plan.sql)."""

import math

import numpy as np
import pytest

from wattbench.plan import CapacityProfile, Plan
from wattbench.report.rows import capacity_params, query_params
from wattbench.warehouse import connect, run_sql

from .synth import Deployment, emulated_interval, simple_point, write_run

PRICE, KWH, PUE = 2.0, 0.12, 1.3
PROFILE = {
    "steady_qps": 30.0,
    "peak_qps": 70.0,
    "burst_hours_per_day": 6.0,
    "input_tokens": 512,
    "output_tokens": 128,
    "elastic_gpu_hour_usd": None,
}
BURST_H = 6 * 730 / 24


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    """alpha (tp 2): 10 req/s per replica within the SLO at c8 (its c32 does 25 but misses the SLO; a long-context
    workload does 50, at other lengths); calm under bursts (p99 TTFT 50 ms). beta (tp 1): 6 req/s per replica,
    6 per GPU (best at steady state), but a 900 ms p99 TTFT under bursts. gamma: nothing within the SLO."""
    tmp = tmp_path_factory.mktemp("capacity")
    db = tmp / "w.duckdb"
    alpha = Deployment(
        "alpha",
        tp=2,
        points=[
            simple_point("c8", 10.0, energy_j=10_000.0),  # 1000 W per replica
            simple_point("c32", 25.0, ttft=3000.0),  # misses the TTFT SLO
            simple_point("gamma-r4", 4.0, ttft=50.0, workload="bursty", shape="gamma", concurrency=None, rate=4.0),
            simple_point("c64", 50.0, workload="long", input_tokens=2048, output_tokens=512),
        ],
    )
    beta = Deployment(
        "beta",
        tp=1,
        points=[
            simple_point("c16", 6.0, energy_j=4_000.0),  # 400 W per replica
            simple_point("gamma-r4", 4.0, ttft=900.0, workload="bursty", shape="gamma", concurrency=None, rate=4.0),
        ],
    )
    gamma = Deployment("gamma", tp=1, points=[simple_point("c8", 20.0, ttft=2500.0)])
    write_run(db, tmp, "cap", [alpha, beta, gamma], price=PRICE, kwh=KWH, pue=PUE)
    write_run(db, tmp, "none", [Deployment("delta", points=[simple_point("c8", 5.0, ttft=5000.0)])], price=PRICE)
    return db


def _plan(db, run_id="cap", **profile):
    with connect(db, read_only=True) as con:
        params = {"run_id": run_id, **PROFILE, **profile}
        return (
            run_sql(con, "capacity_plan", params).set_index("engine"),
            run_sql(con, "hybrid_plan", params).set_index("topology"),
        )


def test_fewest_gpus_and_monthly_cost_per_engine_config(wh):
    per, _ = _plan(wh)
    a, b = per.loc["alpha"], per.loc["beta"]
    assert a["capacity_rps_per_replica"] == pytest.approx(10.0)  # c32 misses the SLO; 'long' is at other lengths
    assert a["capacity_rps_per_gpu"] == pytest.approx(5.0)
    assert (a["steady_replicas"], a["steady_gpus"], a["peak_replicas"], a["peak_gpus"]) == (3, 6, 7, 14)
    assert a["monthly_gpu_usd"] == pytest.approx(14 * PRICE * 730)
    assert a["monthly_energy_usd"] == pytest.approx(round(7 * 1000 / 1000 * 730 * KWH * PUE, 0))
    assert (b["steady_replicas"], b["steady_gpus"], b["peak_replicas"], b["peak_gpus"]) == (5, 5, 12, 12)
    assert b["monthly_gpu_usd"] == pytest.approx(12 * PRICE * 730)
    assert a["sized_on"] == "alpha:steady:c8"
    assert a["sized_bound"] == (
        "goodput 10.0 req/s as measured (one repeat: no interval); TTFT p99 100.0 ms (worst of 1 repeat(s)) vs "
        "2000.0 ms, TPOT p99 10.0 ms (worst of 1 repeat(s)) vs 200.0 ms"
    )
    assert a["note"] == "sized on alpha:steady:c8, " + a["sized_bound"]
    assert b["burst_meets_slo"] and b["burst_ttft_p99_ms"] == pytest.approx(900.0)


def test_no_point_within_the_slo_gives_null_with_a_reason(wh):
    per, hyb = _plan(wh)
    g = per.loc["gamma"]
    assert math.isnan(g["capacity_rps_per_replica"]) and math.isnan(g["monthly_gpu_usd"])
    assert "no load point meets the p99 SLO (TTFT <= 2000.0 ms, TPOT <= 200.0 ms)" in g["note"]
    assert not any("gamma" in t for t in hyb.index)
    _, none = _plan(wh, run_id="none")
    assert list(none.index) == ["none"] and "no engine config meets the p99 SLO" in none.loc["none", "note"]


def test_lengths_nearest_the_profile_and_unrescaled_note(wh):
    per, _ = _plan(wh, input_tokens=None, output_tokens=None)  # every measured length counts
    assert per.loc["alpha", "capacity_rps_per_replica"] == pytest.approx(50.0)
    per, _ = _plan(wh, input_tokens=1800, output_tokens=400)  # nearest: the long workload
    assert per.loc["alpha", "capacity_rps_per_replica"] == pytest.approx(50.0)
    assert "measured at 2048/512 tokens in/out, profile asks 1800/400 (not rescaled)" in per.loc["alpha", "note"]


def test_hybrid_against_each_pool_alone(wh):
    _, hyb = _plan(wh)
    usd = hyb["monthly_gpu_usd"]
    # the rule: baseline = beta (6 req/s per GPU > 5), elastic = alpha (p99 TTFT under bursts 50 ms < 900 ms)
    rule = "hybrid: beta baseline + alpha elastic"
    assert "rule pick" in hyb.loc[rule, "pick"]
    assert (hyb.loc[rule, "baseline_gpus"], hyb.loc[rule, "elastic_replicas"], hyb.loc[rule, "elastic_gpus"]) == (
        5,
        4,
        8,
    )
    assert usd[rule] == pytest.approx(round((5 * 730 + 8 * BURST_H) * PRICE))  # 10220
    assert usd["beta alone, steady + elastic pools"] == pytest.approx(
        round((5 * 730 + math.ceil(40 / 6) * BURST_H) * PRICE)
    )  # 9855
    assert usd["alpha alone, steady + elastic pools"] == pytest.approx((6 * 730 + 8 * BURST_H) * PRICE)
    assert usd["hybrid: alpha baseline + beta elastic"] == pytest.approx(round((6 * 730 + 7 * BURST_H) * PRICE))
    assert usd["alpha alone, always on for the peak"] == pytest.approx(14 * 730 * PRICE)
    assert usd["beta alone, always on for the peak"] == pytest.approx(12 * 730 * PRICE)
    assert hyb.loc["alpha alone, always on for the peak", "vs_pick_pct"] == pytest.approx(
        round(100 * (14 * 730 * PRICE - 10220) / 10220, 1)
    )
    assert (
        hyb["pick"].str.contains("cheapest").sum() == 1
        and "cheapest" in hyb.loc["beta alone, steady + elastic pools", "pick"]
    )
    energy = (5 * 400 * 730 + 4 * 1000 * BURST_H) / 1000 * KWH * PUE
    assert hyb.loc[rule, "monthly_energy_usd"] == pytest.approx(round(energy))
    assert list(usd) == sorted(usd)  # cheapest first


def test_elastic_price_and_burst_hours(wh):
    _, hyb = _plan(wh, elastic_gpu_hour_usd=3.0, burst_hours_per_day=0.0)
    rule = "hybrid: beta baseline + alpha elastic"
    assert hyb.loc[rule, "monthly_gpu_usd"] == pytest.approx(5 * 730 * PRICE)  # no burst hours, nothing billed
    _, hyb = _plan(wh, elastic_gpu_hour_usd=3.0)
    assert hyb.loc[rule, "monthly_gpu_usd"] == pytest.approx(5 * 730 * PRICE + 8 * BURST_H * 3.0)


def test_profile_in_the_plan_and_parameters(wh, repo_root):
    with pytest.raises(ValueError, match="peak_qps"):
        CapacityProfile(steady_qps=10, peak_qps=5)
    profile = CapacityProfile(steady_qps=30, peak_qps=70, burst_hours_per_day=6, input_tokens=512, output_tokens=128)
    assert capacity_params(profile) == PROFILE
    assert capacity_params(None) is None
    assert Plan.model_fields["capacity"].default is None
    from wattbench.plan import load_plan

    plan, _ = load_plan(repo_root / "plans" / "default.yaml")
    assert plan.capacity is not None and plan.capacity.peak_qps >= plan.capacity.steady_qps
    text = (repo_root / "sql" / "hybrid_plan.sql").read_text()
    with connect(wh, read_only=True) as con:
        with pytest.raises(ValueError, match=r"\$peak_qps, \$steady_qps"):
            query_params(con, text, "cap")  # the synthetic run recorded no plan file
        params = query_params(con, text, "cap", {"steady_qps": "30", "peak_qps": "70", "burst_hours_per_day": "6"})
        assert params["steady_qps"] == 30 and params["input_tokens"] is None
        assert len(run_sql(con, text, params)) == 6


def test_three_repeats_with_an_outlier_size_on_the_points_lower_bound_not_the_best_repeat(tmp_path):
    """One point measured 29.2, 20.4 and 52.4 req/s in its three repeats: the plan sizes a replica on the point's
    goodput over the repeats at the conservative end of its interval (the 95% lower bound of the mean, t on the log
    scale), never on the best repeat (52.4), and says which point and which bound it used."""
    db = tmp_path / "w.duckdb"
    rps = (29.2, 20.4, 52.4)
    dep = Deployment("alpha", tp=1, points=[simple_point("c64", r, repeat=i) for i, r in enumerate(rps, 1)])
    write_run(db, tmp_path, "outlier", [dep], price=PRICE)
    per, _ = _plan(db, run_id="outlier", steady_qps=40.0, peak_qps=100.0)
    a = per.loc["alpha"]
    v = np.array(rps)
    lower = emulated_interval(list(v))[1]  # for another server start: the emulator's between-start prior
    assert a["capacity_rps_per_replica"] == pytest.approx(round(lower, 2), abs=0.006)  # 6.1 req/s
    assert a["capacity_rps_per_replica"] < min(rps) and a["capacity_rps_per_replica"] != pytest.approx(52.4)
    assert (a["steady_replicas"], a["peak_replicas"]) == (math.ceil(40 / lower), math.ceil(100 / lower))
    assert a["sized_on"] == "alpha:steady:c64"
    assert a["sized_bound"].startswith(
        f"goodput 95% lower bound {round(lower, 2)} req/s (mean {round(v.mean(), 2)} over 3 repeats)"
    )
    assert a["note"].startswith("sized on alpha:steady:c64, goodput 95% lower bound")
