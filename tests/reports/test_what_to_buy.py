"""What to buy: one traffic profile sized on runs of different GPU kinds and prices (sql/what_to_buy.sql, `wattbench
report --buy`), on hand-made numbers."""

import pytest

from pipelines.cli import main as cli
from wattbench.warehouse import connect, run_sql

from .synth import Deployment, simple_point, write_run

PROFILE = {"steady_qps": 30.0, "peak_qps": 70.0, "input_tokens": 512, "output_tokens": 128}


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    """h100 run ($2/GPU-h): alpha tp 2 at 10 req/s per replica (1000 W). h200 run ($3.5/GPU-h): alpha tp 2 at
    18 req/s (1200 W), and beta whose only point misses the SLO."""
    tmp = tmp_path_factory.mktemp("buy")
    db = tmp / "w.duckdb"
    write_run(
        db,
        tmp,
        "r-h100",
        [Deployment("alpha", tp=2, points=[simple_point("c8", 10.0, energy_j=10_000.0)])],
        gpu="NVIDIA H100 80GB HBM3",
        price=2.0,
    )
    write_run(
        db,
        tmp,
        "r-h200",
        [
            Deployment("alpha", tp=2, points=[simple_point("c8", 18.0, energy_j=12_000.0)]),
            Deployment("beta", tp=1, points=[simple_point("c8", 30.0, ttft=5000.0)]),
        ],
        gpu="NVIDIA H200",
        price=3.5,
    )
    return db


def test_every_config_of_every_run_ranked_by_monthly_cost(wh):
    with connect(wh, read_only=True) as con:
        df = run_sql(con, "what_to_buy", {"runs": ["r-h100", "r-h200"], **PROFILE})
    assert list(df["rank"]) == [1, 2, 3]
    h200, h100, beta = (df.iloc[i] for i in range(3))
    # h200: ceil(70 / 18) = 4 replicas x 2 GPUs = 8 GPUs x $3.5 x 730 h = $20,440 (+ 4 x 1.2 kW x 730 h x $0.12 x 1.3)
    assert (h200["gpu_name"], h200["engine"], h200["peak_gpus"]) == ("NVIDIA H200", "alpha", 8)
    assert h200["monthly_gpu_usd"] == pytest.approx(8 * 3.5 * 730)
    assert h200["monthly_total_usd"] == pytest.approx(round(8 * 3.5 * 730 + 4 * 1.2 * 730 * 0.12 * 1.3, 0))
    # h100: ceil(70 / 10) = 7 replicas x 2 = 14 GPUs x $2 x 730 h = $20,440 as well, but more energy: ranks second
    assert (h100["gpu_name"], h100["peak_gpus"]) == ("NVIDIA H100 80GB HBM3", 14)
    assert h100["monthly_gpu_usd"] == pytest.approx(14 * 2.0 * 730)
    assert h100["monthly_total_usd"] > h200["monthly_total_usd"]
    # nothing within the SLO: last, NULL, with the reason
    assert beta["engine"] == "beta" and beta["monthly_total_usd"] != beta["monthly_total_usd"]  # NaN
    assert "no load point meets the p99 SLO" in beta["note"]


def test_report_buy_cli_defaults_to_the_latest_run_of_each_gpu_kind(wh, capsys):
    assert (
        cli(
            [
                "report",
                "--buy",
                "--db",
                str(wh),
                "--steady-qps",
                "30",
                "--peak-qps",
                "70",
                "--input-tokens",
                "512",
                "--output-tokens",
                "128",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "r-h100" in out and "r-h200" in out and "NVIDIA H200" in out
    assert out.index("NVIDIA H200 ") < out.index("NVIDIA H100 80GB HBM3")  # cheapest first


def test_report_buy_cli_names_an_unknown_run(wh, capsys):
    assert cli(["report", "--buy", "r-h100", "nope", "--db", str(wh), "--steady-qps", "1", "--peak-qps", "2"]) == 2
    assert "nope" in capsys.readouterr().err


def test_report_capacity_cli_shares_the_profile_handling(wh, capsys):
    assert (
        cli(["report", "--capacity", "--run", "r-h100", "--db", str(wh), "--steady-qps", "30", "--peak-qps", "70"]) == 0
    )
    assert "Capacity plan, run r-h100: steady 30 req/s, peak 70 req/s" in capsys.readouterr().out
    assert (
        cli(["report", "--capacity", "--run", "r-h100", "--db", str(wh), "--steady-qps", "30", "--peak-qps", "20"]) == 2
    )
    assert "--peak-qps (20) must be >= --steady-qps (30)" in capsys.readouterr().err


def _started(label: str, rates: dict[int, list[float]]):
    """A point's repeats over server starts, each at its goodput (req/s)."""
    pts, repeat = [], 0
    for start, values in rates.items():
        for rps in values:
            repeat += 1
            pts.append(simple_point(label, rps, repeat=repeat, extra={"server_start": start}))
    return pts


@pytest.mark.parametrize(
    ("other", "verdict"),
    [
        ({1: [10.0, 10.2], 2: [9.8, 10.1]}, "cheapest: a clear winner"),  # half the capacity: intervals apart
        ({1: [19.0, 19.6], 2: [20.4, 20.0]}, "no clear winner"),  # the same capacity at the same price: overlap
    ],
)
def test_buy_says_when_there_is_no_clear_winner(tmp_path, other, verdict):
    """Each cost carries the interval of the capacity it rests on; the cheapest wins clearly only where its interval
    ends below every other's."""
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "a", [Deployment("e", points=_started("c8", {1: [20.0, 20.4], 2: [19.6, 20.2]}))])
    write_run(db, tmp_path, "b", [Deployment("e", points=_started("c8", other))], gpu="other")
    with connect(db, read_only=True) as con:
        df = run_sql(con, "what_to_buy", {"runs": ["a", "b"], **PROFILE})
    first = df.iloc[0]
    assert first["run_id"] == "a" or verdict == "no clear winner"
    assert first["verdict"].startswith(verdict)
    for _, row in df.iterrows():
        assert row["monthly_total_usd_lo"] <= row["monthly_total_usd_estimate"] <= row["monthly_total_usd"]
