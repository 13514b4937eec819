"""Intervals over server starts (sql/views.sql v_point_figures_live, agent/wattbench_agent/intervals.py): the
warehouse's arithmetic equals the Python mirror the coverage benchmark scores, the scope says what each interval
describes, a prior is borrowed only where one is written for the engine, and a one-start figure without a prior never
sizes a fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.synth import Deployment, Point, write_run
from wattbench.warehouse import connect
from wattbench_agent.intervals import between_start_sd, interval, t975

TOKS = {1: [2400.0, 2460.0, 2380.0], 2: [2250.0, 2290.0, 2270.0]}  # output tok/s by server start, 10 s windows


def _points(starts: dict[int, list[float]]) -> list[Point]:
    pts, repeat = [], 0
    for start, values in starts.items():
        for tok_s in values:
            repeat += 1
            pts.append(
                Point(
                    workload="steady",
                    label="c16",
                    ttft_ms=[100.0] * 40,
                    concurrency=16,
                    output_tokens_in_window=int(tok_s * 10),
                    repeat=repeat,
                    extra={"server_start": start},
                )
            )
    return pts


def _figure(db: Path, run_id: str, metric: str = "output_tok_s") -> dict:
    with connect(db, read_only=True) as con:
        cur = con.execute(
            "SELECT estimate, lo, hi, interval_scope, starts, method FROM point_figures "
            "WHERE run_id = ? AND metric = ?",
            [run_id, metric],
        )
        return dict(zip([c[0] for c in cur.description], cur.fetchone()))


def _prior(db: Path, engine: str, metric: str) -> tuple[float | None, int]:
    with connect(db, read_only=True) as con:
        row = con.execute(
            "SELECT sd_log, df FROM v_between_start_prior WHERE (engine_kind = ? OR (engine_kind = 'emulator' AND "
            "? LIKE 'emulator:%')) AND (metric = ? OR metric IS NULL) ORDER BY metric IS NULL LIMIT 1",
            [engine, engine, metric],
        ).fetchone()
    return (row[0], row[1]) if row else (None, 0)


@pytest.mark.parametrize(
    ("engine", "starts", "scope"),
    [
        ("vllm", {1: TOKS[1]}, "prior"),  # one start, vLLM's prior from the committed runs
        ("vllm", TOKS, "starts+prior"),
        ("trtllm", {1: TOKS[1]}, "one_start"),  # no prior written for it: within one start
        ("trtllm", TOKS, "starts"),
        ("emulator:vllm-like", TOKS, "starts+prior"),  # the emulator's own spread
    ],
)
def test_sql_matches_python(tmp_path: Path, engine: str, starts: dict, scope: str) -> None:
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "r1", [Deployment("e", engine=engine, points=_points(starts))])
    got = _figure(db, "r1")
    sd, df = _prior(db, engine, "output_tok_s")
    want = interval(list(starts.values()), prior_sd=sd, prior_df=df if sd is not None else 0)
    assert got["interval_scope"] == want.scope == scope
    assert got["starts"] == len(starts)
    assert got["estimate"] == pytest.approx(want.estimate, rel=1e-9)
    assert got["lo"] == pytest.approx(want.lo, rel=1e-9) and got["hi"] == pytest.approx(want.hi, rel=1e-9)
    assert ("another server start" in got["method"]) == (scope != "one_start")
    if scope == "one_start":
        assert got["method"].startswith("within one server start")


def test_two_starts_widen_what_one_start_hides(tmp_path: Path) -> None:
    """The second start's mean lies outside the first start's own interval; the interval over both holds both means."""
    one = interval([TOKS[1]])
    assert not one.holds(sum(TOKS[2]) / 3)
    both = interval(list(TOKS.values()))
    assert both.holds(sum(TOKS[1]) / 3) and both.holds(sum(TOKS[2]) / 3)


def test_one_start_sizes_no_fleet(tmp_path: Path) -> None:
    """A run of one start of an engine with no prior: its points meet the SLO, yet the capacity plan sizes nothing and
    says why; the same run with two starts is sized."""
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "one", [Deployment("e", engine="trtllm", points=_points({1: TOKS[1]}))])
    write_run(db, tmp_path, "two", [Deployment("e", engine="trtllm", points=_points(TOKS))])
    with connect(db, read_only=True) as con:
        one = con.execute("SELECT goodput_per_replica, note FROM capacity_plan('one', 10, 20, NULL, NULL)").fetchone()
        two = con.execute("SELECT goodput_per_replica, note FROM capacity_plan('two', 10, 20, NULL, NULL)").fetchone()
    assert one[0] is None and "within one server start" in one[1]
    assert two[0] is not None and two[0] > 0


def test_t_table_and_prior_estimate() -> None:
    assert t975(1) == 12.706 and t975(8) == 2.306 and t975(0) is None and t975(5000) == 1.96
    sd, df = between_start_sd([[100.0, 101.0], [110.0, 111.0], [90.0, 91.0]])
    assert df == 2 and 0.08 < sd < 0.11


def test_t_two_sided_p_is_students(tmp_path: Path) -> None:
    """sql/views.sql t_two_sided_p (the contrasts' p-values, closed forms of the integer-df CDF) equals scipy's."""
    from scipy import stats

    with connect(tmp_path / "w.duckdb") as con:
        for t, df in [(2.776, 4), (12.706, 1), (1.0, 3), (0.5, 2.9), (3.0, 10), (1.96, 1000), (0.0, 5), (8.0, 200)]:
            got = con.execute("SELECT t_two_sided_p(?, ?)", [t, df]).fetchone()[0]
            assert got == pytest.approx(2 * stats.t.sf(abs(t), int(df)), rel=1e-9, abs=1e-15), (t, df)
        assert con.execute("SELECT t_two_sided_p(NULL, 3), t_two_sided_p(1.0, 0.5)").fetchone() == (None, None)
