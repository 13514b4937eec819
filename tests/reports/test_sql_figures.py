"""Report figures recomputed from the rows they come from, on small synthetic warehouses."""

import numpy as np
import pytest

from wattbench.report.render import pivot_head_to_head
from wattbench.warehouse import connect, run_sql

from .synth import Deployment, Point, simple_point, ttfts, write_run


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figures")
    db = tmp / "w.duckdb"
    a = Deployment(
        "alpha",
        engine="emulator:trtllm-like",
        tp=2,
        build_status="built",
        build_s=321.0,
        hardware_lock={"gpu_name": "H100", "driver": "550"},
        points=[
            Point(
                "steady",
                "c8",
                ttft_ms=ttfts(120, 100, 50, seed=1),
                tpot_ms=list(np.linspace(5, 15, 120)),
                energy_j=8000.0,
                energy_trace_j=8100.0,
                errors=["timeout", "timeout", "http_503"],
                power_w=[300.0, 450.0, 600.0, 650.0],
                clock_events=["none", "none", "sw_power_cap", "hw_thermal_slowdown"],
            ),
            Point("steady", "c32", ttft_ms=ttfts(200, 2500, 100, seed=2), energy_j=9000.0),  # misses the TTFT SLO
            Point(
                "bursty",
                "gamma-r6-b0.25",
                ttft_ms=ttfts(60, 300, 200, seed=3),
                shape="gamma",
                concurrency=None,
                rate=6.0,
            ),
            Point("bursty", "poisson-r4", ttft_ms=[5000.0] * 40, shape="poisson", concurrency=None, rate=4.0),
        ],
    )
    b = Deployment("beta", points=[simple_point("c8", 9.0, energy_j=4000.0)])
    c = Deployment(
        "gamma", status="failed", error_kind="oom", error_text="CUDA out of memory while loading", startup_s=None
    )
    write_run(db, tmp, "r1", [a, b, c], price=2.0, kwh=0.10, pue=1.5)
    return db


def test_load_point_figures_match_their_rows(wh):
    with connect(wh, read_only=True) as con:
        v = (
            con.execute("SELECT * FROM v_load_points WHERE run_id = 'r1' AND load_point_id = 'alpha:steady:c8'")
            .df()
            .iloc[0]
        )
        req = con.execute(
            "SELECT ttft_ms, tpot_ms, request_ns(chunk_ns, events_file, events_at, events_n) AS chunk_ns "
            "FROM requests WHERE load_point_id = 'alpha:steady:c8' AND error_kind IS NULL"  # wherever they are kept
        ).df()
        table = run_sql(con, "load_runs", {"run_id": "r1"})
    tokens, window, energy = 120 * 128, 10.0, 8000.0
    assert v["output_tok_s"] == pytest.approx(tokens / window)
    assert v["requests_s"] == pytest.approx(120 / window)
    assert v["goodput_requests_s"] == pytest.approx(120 / window)  # all meet TTFT <= 2000, TPOT <= 200
    assert v["failed_requests"] == 3
    for q, col in ((0.5, "ttft_p50_ms"), (0.9, "ttft_p90_ms"), (0.99, "ttft_p99_ms"), (0.999, "ttft_p999_ms")):
        assert v[col] == pytest.approx(np.quantile(req["ttft_ms"], q))  # quantile_cont = linear interpolation
    assert v["tpot_p99_ms"] == pytest.approx(np.quantile(req["tpot_ms"], 0.99))
    assert v["ttft_mean_ms"] == pytest.approx(req["ttft_ms"].mean())
    assert v["ttft_stdev_ms"] == pytest.approx(req["ttft_ms"].std(ddof=0))  # population, as vllm bench serve
    gaps = np.concatenate([np.diff(np.array(c)) / 1e6 for c in req["chunk_ns"]])
    assert v["itl_p50_ms"] == pytest.approx(np.quantile(gaps, 0.5))
    assert v["itl_p99_ms"] == pytest.approx(np.quantile(gaps, 0.99))
    assert v["output_tokens_per_j"] == pytest.approx(tokens / energy)
    assert v["j_per_output_token"] == pytest.approx(energy / tokens)
    assert v["counter_w_per_gpu"] == pytest.approx(energy / window / 2)
    assert v["energy_trace_gap"] == pytest.approx(100 / 8000)
    assert v["trace_mean_w_per_gpu"] == pytest.approx(np.mean([300, 450, 600, 650]))
    assert v["trace_peak_w_per_gpu"] == pytest.approx(650)
    assert v["power_capped_share"] == pytest.approx(0.25)
    assert v["thermal_capped_share"] == pytest.approx(0.25)
    assert v["capped_share"] == pytest.approx(0.5)
    assert v["usd_per_1m_output_tokens"] == pytest.approx(2.0 * 2 / (tokens / window * 3600) * 1e6)
    assert v["energy_usd_per_1m_output_tokens"] == pytest.approx(energy / tokens * 1e6 / 3.6e6 * 0.10 * 1.5)
    assert bool(v["meets_slo_p99"])
    assert v["point_label"] == "c8"
    row = table[table["load_point_id"] == "alpha:steady:c8"].iloc[0]
    assert row["output_tok_s"] == pytest.approx(round(tokens / window, 1))
    assert {
        "ttft_p90_ms",
        "tpot_p99_ms",
        "itl_p99_ms",
        "e2e_p99_ms",
        "counter_w_per_gpu",
        "trace_peak_w_per_gpu",
        "peak_hbm_gib_per_gpu",
        "power_capped_share",
        "thermal_capped_share",
        "usd_per_1m_output_tokens",
        "energy_usd_per_1m_output_tokens",
        "goodput_requests_s",
    } <= set(table.columns)
    assert len(table) == 5  # the failed deployment has no load point


def test_goodput_counts_only_requests_meeting_every_slo(wh):
    with connect(wh, read_only=True) as con:
        v = con.execute(
            "SELECT goodput_requests_s, meets_slo_p99 FROM v_load_points WHERE load_point_id = 'alpha:steady:c32'"
        ).fetchone()
        n_ok = con.execute(
            "SELECT count(*) FROM requests WHERE load_point_id = 'alpha:steady:c32' AND ttft_ms <= 2000 "
            "AND tpot_ms <= 200"
        ).fetchone()[0]
    assert v[0] == pytest.approx(n_ok / 10.0) and n_ok == 0
    assert v[1] is False


def test_head_to_head_cells_name_their_origin(wh):
    with connect(wh, read_only=True) as con:
        long = run_sql(con, "head_to_head", {"run_id": "r1"})
        peak = con.execute(
            "SELECT engine, max(output_tok_s), arg_max(load_point_id, output_tok_s) FROM v_load_points "
            "WHERE run_id = 'r1' GROUP BY engine"
        ).fetchall()
    assert set(long["run_id"]) == {"r1"}
    cell = lambda fig, eng: long[(long["figure"] == fig) & (long["engine"] == eng)].iloc[0]  # noqa: E731
    for engine, value, lp in peak:
        c = cell("peak output throughput", engine)
        # one repeat: the value and why it has no interval; the origin is workload:point
        assert (
            c["value"] == f"{round(value, 1)} (one repeat: no interval)" and c["load_point_id"] == lp.split(":", 1)[1]
        )
    # surge row: the worst p99 TTFT over gamma/surge points only (the poisson point's 5000 ms is not a surge)
    surge = cell("p99 TTFT under a surge (worst gamma/surge point)", "alpha")
    assert surge["load_point_id"] == "bursty:gamma-r6-b0.25" and float(surge["value"].split()[0]) < 600
    assert surge["value"].endswith("(one repeat: no interval)")  # one repeat: run-to-run spread not measured, said so
    assert (
        cell("p99 TTFT under a surge (worst gamma/surge point)", "beta")["note"] == "no gamma/surge load point measured"
    )
    # at SLO: alpha's c32 misses the SLO, so its best tokens per joule cannot come from there
    assert cell("tokens per joule at SLO (best)", "alpha")["load_point_id"] != "steady:c32"
    assert cell("tokens per joule at SLO (best)", "gamma")["note"] == "no load point meets the p99 SLO"
    assert cell("build time", "alpha")["value"] == "321.0 (built)"
    assert cell("build time", "beta")["value"] == "no build step"
    assert cell("hardware-locked artifact", "alpha")["value"] == "yes: H100, driver 550"
    fail = cell("behaviour on failure", "alpha")["value"]
    assert fail.startswith("3 of 423 requests failed (timeout x2, http_503 x1)")
    assert cell("behaviour on failure", "gamma")["value"].startswith("did not start: oom: CUDA out of memory")
    assert cell("longest context served", "beta")["value"] == str(512 + 128)

    table = pivot_head_to_head(long)
    assert list(table.columns) == ["alpha", "beta", "gamma"]
    assert (
        table.loc["peak output throughput (tok/s)", "beta"] == "1152.0 (one repeat: no interval) @ steady:c8"
    )  # 90 requests x 128 tokens / 10 s
    assert table.loc["startup to healthy (s)", "gamma"] == "NULL (did not become healthy)"
    assert table.loc["tokens per joule at SLO (best) (tok/J)", "gamma"] == "NULL (no load point meets the p99 SLO)"
