"""SLO capacity in the warehouse: the table slo_capacity (v_slo_capacity_live) and energy per request on a hand-made
warehouse whose numbers are chosen here (synth.py: a bundle with a search's probes and its `searches` row, ingested),
the capacity plan sized from it on its conservative bound; and the asset slo_capacity in a real Dagster
materialization of a plan with a capacity search on the emulator."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from wattbench.warehouse import connect, run_sql, set_run_fields

from .synth import Deployment, Point, emulated_interval, simple_point, write_run

IDLE = (150.0, 170.0)  # alpha's idle power before and after: 160 W
N_AT = (80, 84, 88)  # alpha's requests in each 10 s window at 8 streams (its three repeats)
E_AT = (6000.0, 6300.0, 6100.0)  # and the energy of each window, J


def _probe(label, n, energy, repeat, probe, phase, verdict, concurrency, ttft=100.0):
    return Point(
        "cap",
        label,
        ttft_ms=[ttft] * n,
        concurrency=concurrency,
        output_tokens=16,
        energy_j=energy,
        repeat=repeat,
        extra={"search_id": "alpha:cap", "probe": probe, "probe_phase": phase, "probe_verdict": verdict},
    )


def _search_row(**kw):
    row = {
        "search_id": "alpha:cap",
        "workload": "cap",
        "over": "concurrency",
        "unit": "streams",
        "shape": "concurrency",
        "slo_ttft_ms": 500.0,
        "slo_tpot_ms": 50.0,
        "attainment": 0.99,
        "status": "found",
        "capacity": 8.0,
        "capacity_lo": 7.0,
        "capacity_hi": 9.0,
        "at_point_label": "c8",
        "repeats_at_capacity": 3,
        "binding": "ttft_ms",
        "binding_share": 0.9,
        "binding_load": 16.0,
        "probes": 8,
        "window_s": 80.0,
        "time_s": 95.0,
        "tolerance": 0.25,
        "answer": "capacity 8 streams [7, 9]",
        "search": {"over": "concurrency"},
        "probe_verdicts": [],
    }
    return {**row, **kw}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slo")
    db = tmp / "w.duckdb"
    probes = [
        _probe("c4", 40, 4000.0, None, 1, "bracket", "meets", 4),
        _probe("c8", N_AT[0], E_AT[0], 1, 2, "bracket", "meets", 8),
        _probe("c16", 100, 7000.0, None, 3, "bracket", "misses", 16, ttft=900.0),
        _probe("c6", 60, 5000.0, 1, 4, "repeat", "meets", 6),
        _probe("c8", N_AT[1], E_AT[1], 2, 5, "repeat", "meets", 8),
        _probe("c6", 61, 5050.0, 2, 6, "repeat", "meets", 6),
        _probe("c8", N_AT[2], E_AT[2], 3, 7, "repeat", "meets", 8),
        _probe("c6", 62, 5100.0, 3, 8, "repeat", "meets", 6),
    ]
    alpha = Deployment("alpha", tp=2, idle_w=IDLE, points=probes, searches=[_search_row()])
    beta = Deployment(
        "beta",
        points=[simple_point("c8", 5.0, output_tokens=16, energy_j=None)],  # no energy reading
        searches=[
            _search_row(
                search_id="beta:cap", status="none", capacity=None, capacity_lo=None, capacity_hi=None,
                at_point_label=None, repeats_at_capacity=0, answer="no load meets the SLO",
            )
        ],
    )  # fmt: skip
    write_run(db, tmp, "r1", [alpha, beta])
    return db


def _t_interval(values):
    """The mean and its interval for another server start (one start here, the emulator's prior: tests/reports/
    synth.py emulated_interval, the arithmetic of sql/views.sql)."""
    return emulated_interval(values)


def test_slo_capacity_carries_the_figures_at_the_capacity_over_its_repeats(warehouse):
    with connect(warehouse, read_only=True) as con:
        row = run_sql(con, "SELECT * FROM slo_capacity WHERE search_id = 'alpha:cap'").iloc[0]
    assert (row["capacity"], row["capacity_lo"], row["capacity_hi"]) == (8.0, 7.0, 9.0)
    assert row["capacity_per_gpu"] == 4.0 and row["unit"] == "streams" and row["n_gpus"] == 2
    assert row["binding"] == "ttft_ms" and row["probes"] == 8 and row["window_s"] == 80.0
    tok = _t_interval([n * 16 / 10.0 for n in N_AT])
    assert (row["output_tok_s"], row["output_tok_s_lo"], row["output_tok_s_hi"]) == pytest.approx(tok)
    jreq = _t_interval([e / n for e, n in zip(E_AT, N_AT)])
    assert (row["j_per_request"], row["j_per_request_lo"], row["j_per_request_hi"]) == pytest.approx(jreq)
    above = _t_interval([(e - 160.0 * 10.0) / n for e, n in zip(E_AT, N_AT)])
    assert row["j_per_request_above_idle"] == pytest.approx(above[0])
    assert row["mean_power_w"] == pytest.approx(_t_interval([e / 10.0 for e in E_AT])[0])
    usd = 2.0 * 2 / (tok[0] * 3600) * 1e6  # the price over the mean throughput, not a mean of reciprocals
    assert row["usd_per_1m_output_tokens"] == pytest.approx(usd)
    tpj = _t_interval([n * 16 / e for e, n in zip(E_AT, N_AT)])
    assert row["output_tokens_per_j"] == pytest.approx(tpj[0])
    assert row["input_tokens"] == 512 and row["output_tokens"] == 16 and row["note"] is None


def test_no_load_meeting_the_slo_has_no_figures_and_says_why(warehouse):
    with connect(warehouse, read_only=True) as con:
        row = run_sql(con, "SELECT * FROM slo_capacity WHERE search_id = 'beta:cap'").iloc[0]
    assert row["capacity"] is None or math.isnan(row["capacity"])
    assert math.isnan(row["output_tok_s"]) and row["note"].startswith("no load meets the SLO")


def test_energy_per_request_at_every_point_total_and_above_idle(warehouse):
    with connect(warehouse, read_only=True) as con:
        pts = run_sql(con, "SELECT * FROM v_load_points ORDER BY load_point_id").set_index("load_point_id")
    c8 = pts.loc["alpha:cap:c8#2"]
    assert c8["j_per_request"] == pytest.approx(E_AT[1] / N_AT[1])
    assert c8["j_per_request_above_idle"] == pytest.approx((E_AT[1] - 160.0 * 10.0) / N_AT[1])
    assert c8["j_per_output_token"] == pytest.approx(E_AT[1] / (N_AT[1] * 16))
    assert c8["probe"] == 5 and c8["probe_phase"] == "repeat" and c8["probe_verdict"] == "meets"
    assert c8["search_id"] == "alpha:cap" and c8["energy_note"] is None
    beta = pts.loc["beta:steady:c8"]
    assert math.isnan(beta["j_per_request"]) and beta["search_id"] is None
    assert beta["energy_note"].startswith("no energy: the counter gave no reading for this window")


def test_the_capacity_plan_sizes_from_the_search_on_its_conservative_bound(warehouse):
    params = {"run_id": "r1", "steady_qps": 20, "peak_qps": 50, "input_tokens": 512, "output_tokens": 16}
    with connect(warehouse, read_only=True) as con:
        cap = run_sql(con, "capacity_plan", params).set_index("engine")
        good = run_sql(con, "SELECT goodput_requests_s_lo FROM slo_capacity WHERE search_id = 'alpha:cap'")
    lo = float(good.iloc[0, 0])
    sized = lo * 7.0 / 8.0  # the goodput's lower bound, scaled by capacity_lo / capacity
    assert lo == pytest.approx(_t_interval([n / 10.0 for n in N_AT])[1])
    assert cap.loc["alpha", "capacity_rps_per_replica"] == pytest.approx(round(sized, 2))
    assert cap.loc["alpha", "peak_replicas"] == math.ceil(50 / sized)
    assert cap.loc["alpha", "sized_on"].startswith("SLO capacity search alpha:cap: 8 streams [7, 9] at c8")
    assert not str(cap.loc["beta", "sized_on"]).startswith("SLO capacity search")  # its search found none


def test_a_search_under_a_looser_slo_than_the_runs_does_not_size(warehouse, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    params = {"run_id": "r1", "steady_qps": 20, "peak_qps": 50, "input_tokens": 512, "output_tokens": 16}
    with connect(db) as con:
        set_run_fields(con, "r1", {"slo_ttft_ms": 300.0})  # the run asks for 300 ms; the search met 500 ms
        cap = run_sql(con, "capacity_plan", params).set_index("engine")
    assert not str(cap.loc["alpha", "sized_on"]).startswith("SLO capacity search")


def test_slo_capacity_follows_the_runs_prices(warehouse, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    with connect(db) as con:
        before = con.execute("SELECT usd_per_1m_output_tokens FROM slo_capacity WHERE search_id = 'alpha:cap'")
        before = before.fetchone()[0]
        set_run_fields(con, "r1", {"gpu_price_per_hour": 4.0})
        after = con.execute("SELECT usd_per_1m_output_tokens FROM slo_capacity WHERE search_id = 'alpha:cap'")
        assert after.fetchone()[0] == pytest.approx(2 * before)


# ------------------------------------------------------------------------------------------- a real materialization
SEARCH_PLAN = {
    "name": "search-smoke",
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "engines": [{"name": "trtllm-like", "engine": "emulator", "profile": "trtllm-like", "precision": "fp8", "tp": 1}],
    "workloads": [
        {
            "name": "interactive",
            "input_tokens": 128,
            "output_tokens": 16,
            "warmup_s": 0.3,
            "duration_s": 1.0,
            "search": {"over": "concurrency", "start": 4, "tolerance": 0.5, "repeats": 3, "max_probes": 10,
                       "slo": {"ttft_ms": 60, "tpot_ms": 50}},
        }
    ],
    "prices": {"gpu_hour_usd": 2.5},
    "slo": {"ttft_ms": 2000, "tpot_ms": 200},
    "capacity": {"steady_qps": 20, "peak_qps": 50, "input_tokens": 128, "output_tokens": 16},
    "validation": {"severity": {"load_runs.min_energy_window": "warn"}},
    "idle_baseline_s": 0.3,
    "health_timeout_s": 30,
}  # fmt: skip


@pytest.mark.slow
def test_a_plan_with_a_search_materializes_slo_capacity_through_dagster(tmp_path):
    from assets.checks import stage_checks
    from pipelines.definitions import ALL_ASSETS, make_resources
    from pipelines.partitions import bench_partition, ensure_models

    (tmp_path / "plan").mkdir()
    plan = tmp_path / "plan" / "default.yaml"
    plan.write_text(yaml.safe_dump(SEARCH_PLAN))
    db = tmp_path / "w.duckdb"
    instance = dg.DagsterInstance.ephemeral()
    ensure_models(instance, ["llama-3.1-8b"])
    result = dg.materialize(
        [*ALL_ASSETS, *stage_checks],
        resources=make_resources(db_path=str(db), plan_path=str(plan), output_dir=str(tmp_path / "runs")),
        instance=instance,
        partition_key=bench_partition("llama-3.1-8b", "default"),
        raise_on_error=False,
    )
    assert result.success
    events = {e.asset_key.to_user_string(): e for e in result.get_asset_materialization_events()}
    meta = events["slo_capacity"].materialization.metadata
    assert meta["searches"].value == 2 and "frontiers" in meta and "answers" in meta  # one a server start
    with connect(db, read_only=True) as con:
        row = run_sql(
            con,
            "SELECT * FROM slo_capacity WHERE run_id = $r AND search_id = 'trtllm-like:interactive'",
            {"r": result.run_id},
        ).iloc[0]
        probes = con.execute(
            "SELECT count(*), count(DISTINCT probe), min(probe_verdict IS NOT NULL) FROM load_runs "
            "WHERE run_id = ? AND search_id = 'trtllm-like:interactive'",
            [result.run_id],
        ).fetchone()
        cap = run_sql(
            con,
            "capacity_plan",
            {"run_id": result.run_id, "steady_qps": 20, "peak_qps": 50, "input_tokens": 128, "output_tokens": 16},
        )
    assert row["status"] in ("found", "at_least") and row["capacity"] >= 1 and row["unit"] == "streams"
    assert row["capacity_lo"] <= row["capacity"] and (
        row["capacity_hi"] is None or row["capacity"] <= row["capacity_hi"]
    )
    assert probes[0] == probes[1] == row["probes"] and probes[2]
    assert row["repeats_at_capacity"] >= 3 and row["output_tok_s_lo"] <= row["output_tok_s"] <= row["output_tok_s_hi"]
    assert row["j_per_request"] > 0 and row["mean_power_w"] > 0 and row["usd_per_1m_output_tokens"] > 0
    assert cap["sized_on"].iloc[0].startswith("SLO capacity search trtllm-like:interactive")
    html = next((tmp_path / "runs").glob("*/report.html")).read_text()
    assert "<h2>SLO capacity</h2>" in html or "SLO capacity</h2>" in html
    assert str(Path(plan).name) == "default.yaml"


def test_head_to_head_takes_no_figure_from_a_search_probe(warehouse):
    """alpha measured only its capacity search: the head-to-head picks no 'best' point among the probes (its single
    windows at c4 and c16 would otherwise be 'peak' and 'best goodput'); beta's plain point is still read."""
    with connect(warehouse, read_only=True) as con:
        h2h = run_sql(con, "head_to_head", {"run_id": "r1"})
    alpha = h2h[(h2h["engine"] == "alpha") & ~h2h["figure"].str.startswith("longest context")]  # a fact of requests
    assert alpha["load_point_id"].isna().all(), alpha[["figure", "load_point_id"]]
    beta = h2h[h2h["engine"] == "beta"]
    assert beta["load_point_id"].notna().any()


def test_a_search_at_other_lengths_than_the_profiles_nearest_points_does_not_size(tmp_path):
    """gamma measured a plain point at the profile's 512/128 and searched at 512/16: the plan sizes on the point at the
    profile's lengths (the search answered for other requests), and on the search when the profile asks 512/16."""
    probes = [
        Point(
            "cap", label, ttft_ms=[100.0] * n, concurrency=c, output_tokens=16, energy_j=4000.0, repeat=r,
            extra={"search_id": "gamma:cap", "probe": k, "probe_phase": "repeat", "probe_verdict": "meets"},
        )
        for k, (label, n, c, r) in enumerate([("c8", 80, 8, 1), ("c8", 82, 8, 2), ("c8", 84, 8, 3)], start=1)
    ]  # fmt: skip
    plain = simple_point("c4", 3.0, output_tokens=128, energy_j=3000.0)
    gamma = Deployment("gamma", points=[plain, *probes], searches=[_search_row(search_id="gamma:cap")])
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "r1", [gamma])
    with connect(db, read_only=True) as con:
        far = run_sql(con, "capacity_plan", {"run_id": "r1", "steady_qps": 1, "peak_qps": 2, "input_tokens": 512,
                                              "output_tokens": 128}).set_index("engine")  # fmt: skip
        near = run_sql(con, "capacity_plan", {"run_id": "r1", "steady_qps": 1, "peak_qps": 2, "input_tokens": 512,
                                               "output_tokens": 16}).set_index("engine")  # fmt: skip
    assert far.loc["gamma", "sized_on"] == "gamma:steady:c4"
    assert near.loc["gamma", "sized_on"].startswith("SLO capacity search gamma:cap")


def test_engine_contrasts_leave_out_a_search_probe_measured_once(tmp_path):
    """Two engines whose searches both probed c16 once: no contrast row for that chance pair (the search's own
    comparison is slo_capacity), while a plan point measured once still says 'one repeat: not tested'. Repeated
    probes at the same load (the capacity's repeats) are no round either: each engine's search ran on its own, not
    interleaved with the other's, so they are not paired."""
    deps = []
    for name, tok in (("alpha", 1.0), ("beta", 1.3)):
        probes = [_probe("c16", 100, 7000.0 * tok, None, 1, "bracket", "misses", 16, ttft=900.0)]
        probes += [_probe("c8", 80 + r, 6000.0 * tok + r, r, 1 + r, "repeat", "meets", 8) for r in (1, 2, 3)]
        for p in probes:
            p.extra = {**p.extra, "search_id": f"{name}:cap"}
        plain = simple_point("c4", 5.0, output_tokens=16, energy_j=3000.0 * tok)
        deps.append(Deployment(name, points=[*probes, plain], searches=[_search_row(search_id=f"{name}:cap")]))
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "r1", deps)
    with connect(db, read_only=True) as con:
        c = run_sql(con, "engine_contrasts", {"run_id": "r1"})
    assert not ((c["workload"] == "cap") & (c["point_label"] == "c16")).any(), c[["workload", "point_label"]]
    assert not (c["workload"] == "cap").any()
    once = c[(c["workload"] == "steady") & (c["point_label"] == "c4")]
    assert len(once) and (once["finding"] == "one repeat: not tested").all()


def test_the_runs_terminal_summary_shows_each_capacity(warehouse):
    """Issue 39 item 4: `wattbench run`'s summary left the SLO capacity out. It prints, per engine config and search,
    the capacity with its interval, the bound that binds and where, and tok/J and $ per 1M at it with intervals."""
    from wattbench.report.rows import slo_capacity_text

    with connect(warehouse, read_only=True) as con:
        text = slo_capacity_text(con, "r1")
    alpha = next(line for line in text.splitlines() if line.startswith("| alpha"))
    tpj = _t_interval([n * 16 / e for e, n in zip(E_AT, N_AT)])
    assert "| 8 [7, 9] streams" in alpha and "TTFT at 16 (90.0% met)" in alpha
    assert f"{tpj[0]:.3g} [{tpj[1]:.3g}, {tpj[2]:.3g}]" in alpha
    beta = next(line for line in text.splitlines() if line.startswith("| beta"))
    assert "none (no load meets the SLO" in beta
