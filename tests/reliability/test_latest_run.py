"""Reports never take a run that did not finish as "latest" without saying so (issue 17, item 1: a killed run
stayed 'running', became the latest, and plain `wattbench report` showed an empty table)."""

from __future__ import annotations

import pytest

from pipelines.cli import main as wattbench
from tests.reports.synth import Deployment, simple_point, started, write_run
from wattbench.warehouse import connect


@pytest.fixture
def two_runs(tmp_path):
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "old-ok", [Deployment("vllm-like", points=[simple_point("c8", 5.0)])], started=started(0))
    write_run(db, tmp_path, "new-killed", [Deployment("vllm-like", points=[])], started=started(1))
    with connect(db) as con:  # what a run killed mid-way leaves: its row, status 'running', almost no rows
        con.execute("UPDATE runs SET status = 'running' WHERE run_id = 'new-killed'")
    return db


def test_report_shows_the_latest_finished_run_and_names_the_unfinished_one(two_runs, capsys):
    assert wattbench(["report", "--db", str(two_runs)]) == 0
    out, err = capsys.readouterr()
    assert "run old-ok" in out and "(no head-to-head rows" not in out
    assert "new-killed (running)" in err and "--run" in err


def test_sql_latest_run_is_the_finished_one_and_says_so(two_runs, capsys):
    assert (
        wattbench(["sql", "SELECT DISTINCT run_id FROM load_runs WHERE run_id = $run_id", "--db", str(two_runs)]) == 0
    )
    out, err = capsys.readouterr()
    assert "old-ok" in out and "-- run_id = old-ok" in err and "new-killed (running)" in err


def test_an_unfinished_run_is_still_shown_by_name(two_runs, capsys):
    assert wattbench(["report", "--db", str(two_runs), "--run", "new-killed"]) == 0
    out, err = capsys.readouterr()
    assert "run new-killed" in out and "note" not in err


def test_with_no_finished_run_the_newest_is_shown_and_said_to_be_partial(tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    write_run(db, tmp_path, "only", [Deployment("vllm-like", points=[simple_point("c8", 5.0)])], started=started(0))
    with connect(db) as con:
        con.execute("UPDATE runs SET status = 'interrupted' WHERE run_id = 'only'")
    assert wattbench(["report", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "run only" in out and "no run has finished yet" in err and "interrupted" in err
