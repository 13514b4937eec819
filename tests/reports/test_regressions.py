"""Regression detection across runs (sql/regressions.sql, sql/compare_runs.sql) and `wattbench report --compare`."""

import pytest

from pipelines.cli import main
from wattbench.warehouse import connect, run_sql

from .synth import Deployment, simple_point, started, write_run

# throughput history of the same point: within +-1.5% run to run, then a planted 20% drop, then a 3% dip
STEADY = [100.0, 101.5, 99.0, 100.5]


def _run(db, tmp, run_id, i, rps, name="alpha", ttft=100.0):
    write_run(
        db,
        tmp,
        run_id,
        [Deployment(name, points=[simple_point("c8", rps, window_s=10.0, ttft=ttft, output_tokens=8)])],
        started=started(i),
    )


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regress")
    db = tmp / "w.duckdb"
    for i, rps in enumerate(STEADY):
        _run(db, tmp, f"h{i}", i, rps)
    _run(db, tmp, "drop", 10, 80.0)  # 20% below the last run
    _run(db, tmp, "dip", 11, 97.5)  # 3% below the last run: noise
    # a noisy point (+-15% run to run): a 20% drop is inside its band
    for i, rps in enumerate([100.0, 85.0, 115.0, 100.0]):
        _run(db, tmp, f"n{i}", 20 + i, rps, name="noisy")
    _run(db, tmp, "noisy-drop", 30, 80.0, name="noisy")
    return db


def _flags(db, run_id):
    with connect(db, read_only=True) as con:
        return run_sql(con, "regressions", {"run_id": run_id}).set_index("metric")


def test_planted_drop_is_flagged_against_the_previous_run(wh):
    r = _flags(wh, "drop")
    row = r.loc["output_tok_s"]
    assert row["previous_run_id"] == "h3" and row["flag"] == "REGRESSION"
    assert row["change_pct"] == pytest.approx(round(100 * (80 - 100.5) / 100.5, 1))
    assert row["band_pct"] == pytest.approx(5.0)  # 3 x 1.4826 x MAD 0.75% = 3.3%: the 5% floor rules
    assert row["history_runs"] == 4 and row["band_from"] == "run history"  # one repeat: no interval
    assert r.loc["goodput_requests_s", "flag"] == "REGRESSION"
    assert r.loc["usd_per_1m_output_tokens", "flag"] == "REGRESSION"  # cost went up: lower is better
    assert r.loc["ttft_p50_ms", "flag"] == "within noise"


def test_small_change_is_noise_and_first_run_has_no_baseline(wh):
    r = _flags(wh, "dip")
    assert r.loc["output_tok_s", "previous_run_id"] == "drop"
    assert r.loc["output_tok_s", "flag"] == "improvement"  # 80 -> 97.5 is back up; the drop did not widen the band
    assert r.loc["output_tok_s", "band_pct"] == pytest.approx(5.0)
    assert set(_flags(wh, "h0")["flag"]) == {"no baseline"}
    r = _flags(wh, "h2")
    assert r.loc["output_tok_s", "flag"] == "within noise"  # 101.5 -> 99: -2.5%


def test_noise_band_grows_with_measured_noise(wh):
    row = _flags(wh, "noisy-drop").loc["output_tok_s"]
    # history 100, 85, 115, 100: median 100, median absolute deviation 7.5 -> noise 1.4826 x 7.5%
    assert row["band_pct"] == pytest.approx(round(100 * 3 * 1.4826 * 7.5 / 100, 1))
    assert row["flag"] == "within noise"  # -20% < 33.4%


def test_runs_that_failed_validation_are_no_baseline(wh, tmp_path):
    db = tmp_path / "w.duckdb"
    _run(db, tmp_path, "a", 0, 100.0)
    _run(db, tmp_path, "bad", 1, 50.0)
    _run(db, tmp_path, "b", 2, 99.0)
    with connect(db) as con:
        con.execute(
            "INSERT INTO validation_results (run_id, check_name, table_name, expectation, severity, success) "
            "VALUES ('bad', 'gx_load_runs', 'load_runs', 'x', 'error', false)"
        )
    r = _flags(db, "b")
    assert r.loc["output_tok_s", "previous_run_id"] == "a" and r.loc["output_tok_s", "flag"] == "within noise"


def test_compare_cli_prints_side_by_side_with_deltas_and_flags(wh, capsys):
    assert main(["report", "--db", str(wh), "--compare", "h3", "drop"]) == 0
    out = capsys.readouterr().out
    assert "A = run h3" in out and "B = run drop" in out
    line = next(row for row in out.splitlines() if "output_tok_s" in row)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "alpha steady:c8" and cells[3:] == ["804", "640", "-20.4%", "±5.0%", "REGRESSION"]
    assert "regression(s)" in out and "Rule: change = (B - A) / |A|" in out
    assert main(["report", "--db", str(wh), "--compare", "h3", "drop", "--fail-on-regression"]) == 1
    assert main(["report", "--db", str(wh), "--compare", "h3", "h2", "--fail-on-regression"]) == 0
    capsys.readouterr()
    assert main(["report", "--db", str(wh), "--compare", "h", "drop"]) == 2  # ambiguous prefix
    assert "ambiguous" in capsys.readouterr().err
    assert main(["report", "--db", str(wh), "--compare", "nope", "drop"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_regressions_cli(wh, capsys):
    assert main(["report", "--db", str(wh), "--run", "drop", "--regressions", "--only-flagged"]) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "within noise" not in out


def test_with_repeats_the_band_comes_from_the_intervals(tmp_path):
    """Three repeats per run: a drop whose interval still overlaps the baseline's is noise, one whose interval
    clears it is a regression, whatever the (absent) run history says."""
    from .synth import Point

    db = tmp_path / "w.duckdb"

    def run(run_id, i, tokens):
        points = [
            Point(
                workload="steady",
                label="c8",
                ttft_ms=[100.0] * 50,
                repeat=r,
                output_tokens=8,
                output_tokens_in_window=t,
            )
            for r, t in enumerate(tokens, 1)
        ]
        write_run(db, tmp_path, run_id, [Deployment("alpha", points=points)], started=started(i))

    run("base", 0, (10_000, 10_400, 9_600))  # 1000 tok/s, its interval for another server start ~ +-11%
    run("wobble", 1, (9_700, 10_100, 9_300))  # 970: inside
    run("drop", 2, (6_000, 6_100, 5_900))  # 600: clear of 970's interval (for another start, the prior in it)
    wobble = _flags(db, "wobble").loc["output_tok_s"]
    assert wobble["band_from"] == "repeat intervals" and wobble["flag"] == "within noise"
    assert wobble["repeats"] == 3 and wobble["band_pct"] > 5.0  # the t interval of 3 repeats is wide
    drop = _flags(db, "drop").loc["output_tok_s"]
    assert drop["previous_run_id"] == "wobble" and drop["flag"] == "REGRESSION"
