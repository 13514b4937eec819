"""`wattbench sql` is read-only for everything, not only its main database (issue 17, item 2): it writes no file,
attaches no other database, installs and loads no extension, reaches no network, and cannot turn that off."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipelines.cli import main as wattbench
from wattbench.warehouse import connect


@pytest.fixture
def warehouse(tmp_path) -> Path:
    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        con.execute("INSERT INTO runs (run_id, source, status) VALUES ('r1', 'emulated', 'succeeded')")
        con.execute(
            "INSERT INTO requests (run_id, source, deployment_id, load_point_id, request_id, ttft_ms) "
            "VALUES ('r1', 'emulated', 'd', 'lp', '1', 12.5), ('r1', 'emulated', 'd', 'lp', '2', 13.5)"
        )
    return db


def sql(db: Path, query: str, capsys) -> tuple[int, str, str]:
    rc = wattbench(["sql", query, "--db", str(db)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def n_requests(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM requests").fetchone()[0]
    finally:
        con.close()


def test_reading_still_works(warehouse, capsys):
    rc, out, err = sql(warehouse, "SELECT request_id, ttft_ms FROM requests ORDER BY request_id", capsys)
    assert rc == 0, err
    assert "12.5" in out and "13.5" in out


def test_copy_to_a_file_is_refused_and_the_file_is_untouched(warehouse, tmp_path, capsys):
    victim = tmp_path / "bundle" / "requests.jsonl"
    victim.parent.mkdir()
    victim.write_text('{"request_id": "1"}\n')
    rc, _, err = sql(warehouse, f"COPY (SELECT 'overwritten' AS x) TO '{victim}'", capsys)
    assert rc == 2
    assert "read-only" in err and str(victim) in err and "--format csv" in err
    assert victim.read_text() == '{"request_id": "1"}\n'


def test_attaching_a_warehouse_read_write_and_deleting_is_refused(warehouse, tmp_path, capsys):
    other = tmp_path / "other.duckdb"
    with connect(other) as con:
        con.execute(
            "INSERT INTO requests (run_id, source, deployment_id, load_point_id, request_id) "
            "VALUES ('r9', 'emulated', 'd', 'lp', '1')"
        )
    for target in (other, warehouse):
        rc, _, err = sql(warehouse, f"ATTACH '{target}' AS w (READ_WRITE); DELETE FROM w.requests", capsys)
        assert rc == 2 and "read-only" in err
    assert n_requests(other) == 1 and n_requests(warehouse) == 2


@pytest.mark.parametrize(
    "query",
    [
        "INSTALL httpfs",
        "LOAD httpfs",
        "SELECT * FROM read_csv('https://example.com/x.csv')",
        "SELECT * FROM read_text('/etc/hostname')",
        "EXPORT DATABASE '{tmp}/export'",
    ],
)
def test_extensions_network_and_other_files_are_out_of_reach(warehouse, tmp_path, capsys, query):
    rc, _, err = sql(warehouse, query.format(tmp=tmp_path), capsys)
    assert rc == 2 and "read-only" in err
    assert "download" not in err.lower() and "http://" not in err  # refused before any network access
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize(
    "query",
    ["SET enable_external_access = true", "SET lock_configuration = false", "SET log_query_path = '{tmp}/q.log'"],
)
def test_the_sandbox_cannot_be_switched_off(warehouse, tmp_path, capsys, query):
    rc, _, err = sql(warehouse, query.format(tmp=tmp_path), capsys)
    assert rc == 2 and "locked" in err
    assert not (tmp_path / "q.log").exists()


def test_writing_the_warehouse_itself_is_refused(warehouse, capsys):
    rc, _, err = sql(warehouse, "DELETE FROM requests", capsys)
    assert rc == 2 and "read-only" in err
    assert n_requests(warehouse) == 2


def test_a_parameter_that_is_not_finite_is_refused(warehouse, capsys):
    rc = wattbench(["sql", "SELECT $x::DOUBLE AS x", "--db", str(warehouse), "--param", "x=inf"])
    err = capsys.readouterr().err
    assert rc == 2 and "--param x" in err and "finite" in err


@pytest.mark.parametrize("given", ["foo", "=3", "a b=3"])
def test_a_parameter_not_named_is_one_line(warehouse, capsys, given):
    """Before: `--param foo` said `dictionary update sequence element #0 has length 1; 2 is required`."""
    rc = wattbench(["sql", "SELECT $x AS x", "--db", str(warehouse), "--param", given])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == f"wattbench: --param {given!r}: expected NAME=VALUE (a parameter's name, '=', its value)"
