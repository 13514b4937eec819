"""Version-3 bundles: requests and GPU samples as CSV read by DuckDB with the warehouse's types, the per-token times
kept in the token store beside the warehouse (wattbench/token_store.py) and read through `wattbench sql`'s sandbox, a
bad row named by file, line, field and value as in JSON, the step decomposition made from the token times where a
bundle has none."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from benchmarks.synthetic import synthesize
from wattbench.connection import execute_sql
from wattbench.warehouse import connect, ingest_bundle, table_columns
from wattbench_agent.bundle import CSV_TABLES, BundleError, BundleWriter, read_rows

KIND = {"str": ("VARCHAR",), "int": ("BIGINT", "INTEGER"), "float": ("DOUBLE",), "bool": ("BOOLEAN",)}


def test_the_agents_csv_columns_are_the_warehouses(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        for table, columns in CSV_TABLES.items():
            types = table_columns(con, table)
            computed = {"chunk_tokens_each", "events_file", "counts_file"}
            assert {c for c, _ in columns} == set(types) - computed, table
            for column, kind in columns:
                if kind != "list":
                    assert types[column] in KIND[kind], (table, column, types[column], kind)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("v3") / "b"
    synthesize(folder, "v3", 3000, requests_per_point=1000)
    return folder


def _with_line(folder: Path, dest: Path, line: int, column: str, text: str) -> Path:
    """A copy of the bundle whose requests.csv has `text` as `column`'s field on `line` (as written, unquoted)."""
    import shutil

    shutil.copytree(folder, dest)
    lines = (dest / "requests.csv").read_text().splitlines(keepends=True)
    header = [c.strip('"') for c in lines[0].strip().split(",")]
    fields = lines[line - 1].rstrip("\n").split(",")
    fields[header.index(column)] = text
    lines[line - 1] = ",".join(fields) + "\n"
    (dest / "requests.csv").write_text("".join(lines))
    return dest


@pytest.mark.parametrize(
    "column, text, message",
    [
        ("ttft_ms", "nan", r"ttft_ms = nan; expected a finite number"),
        ("e2e_ms", "1e400", r"e2e_ms = 1e400; expected a finite number"),
        ("prompt_tokens", "many", r"prompt_tokens = 'many'; expected an integer"),
        ("tpot_ms", "-5.0", r"tpot_ms = -5.0; expected >= 0"),
        ("http_status", "700", r"http_status = 700; expected <= 599"),
        ("in_window", "maybe", r"in_window = 'maybe'; expected true or false"),
    ],
)
def test_a_bad_field_is_named_by_its_line_field_and_value(bundle, tmp_path, column, text, message):
    folder = _with_line(bundle, tmp_path / "bad", 42, column, text)
    with pytest.raises(BundleError, match=r"requests\.csv:42: " + message), connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, folder)
    with connect(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    assert not list((tmp_path / "w.duckdb.tokens").glob("*.bin"))  # nothing of it stayed in the token store


def test_an_unknown_column_in_the_header_and_a_row_twice_are_named(bundle, tmp_path):
    import shutil

    folder = shutil.copytree(bundle, tmp_path / "unknown")
    text = (folder / "requests.csv").read_text()
    (folder / "requests.csv").write_text(text.replace('"error_text"', '"error_txt"', 1))
    with (
        pytest.raises(BundleError, match=r"requests\.csv:1: unknown column\(s\) error_txt"),
        connect(tmp_path / "w.duckdb") as con,
    ):
        ingest_bundle(con, folder)
    folder = shutil.copytree(bundle, tmp_path / "twice")
    lines = (folder / "requests.csv").read_text().splitlines(keepends=True)
    (folder / "requests.csv").write_text("".join(lines + [lines[5]]))
    with (
        pytest.raises(BundleError, match=rf"requests\.csv:{len(lines) + 1}: the same row as line 6"),
        connect(tmp_path / "w2.duckdb") as con,
    ):
        ingest_bundle(con, folder)


def test_the_sql_sandbox_reaches_the_token_times_and_no_other_file(bundle, tmp_path):
    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        ingest_bundle(con, bundle)
        direct = con.execute("SELECT count(*), sum(itl_ms) FROM v_itl").fetchone()
    # as `wattbench sql` runs a query (execute_sql: the token store's functions registered when a query needs them)
    with connect(db, read_only=True, sandbox=True) as con:
        assert execute_sql(con, "SELECT count(*), sum(itl_ms) FROM v_itl").fetchone() == direct
        assert direct[0] > 0
        with pytest.raises(Exception, match="(?i)permission|disabled|external"):
            execute_sql(con, "SELECT * FROM read_csv('/etc/hostname')").fetchall()
        with pytest.raises(Exception, match="SHA-256"):
            execute_sql(con, "SELECT token_times('../../etc/hostname', 0, 1)").fetchall()
    # a function of the store named first, not through a view
    with connect(db, read_only=True, sandbox=True) as con, pytest.raises(Exception, match="SHA-256"):
        execute_sql(con, "SELECT token_times('../../etc/hostname', 0, 1)").fetchall()


def test_the_step_decomposition_is_made_from_the_token_times_as_the_agent_makes_it(bundle, tmp_path):
    """Synthetic load_runs rows carry no step decomposition: ingest fills it from the compiled pass, equal to
    wattbench_agent.loadgen.steps.decompose over the same requests (every column of it; tests/test_step_fill.py
    has timelines with shared prefills and delivery stalls)."""
    import numpy as np

    from wattbench_agent.bundle import CHUNK_FILES
    from wattbench_agent.loadgen import steps

    cols = list(steps.COLUMNS)
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, bundle)
        stored = {
            r[0]: r[1:]
            for r in con.execute(
                f"SELECT load_point_id, shape, concurrency, {', '.join(cols)} FROM load_runs"
            ).fetchall()
        }
    ns = np.fromfile(bundle / CHUNK_FILES["chunk_ns"][0], dtype="<i8")
    tok = np.fromfile(bundle / CHUNK_FILES["chunk_tokens"][0], dtype="<i4")
    by_point: dict[str, list] = {}
    for _, row in read_rows(bundle / "requests.csv"):
        a, n = row["events_at"], row["events_n"]
        if a is not None:
            row["chunk_ns"], row["chunk_tokens"] = ns[a : a + n].tolist(), tok[a : a + n].tolist()
        by_point.setdefault(row["load_point_id"], []).append(row)
    assert stored and set(stored) == set(by_point)
    for lp, recs in by_point.items():
        shape, concurrency, *got = stored[lp]
        pool = [r for r in recs if r["error_kind"] is None and r["in_window"]]
        want = steps.decompose(pool, closed_loop=shape == "concurrency", concurrency=concurrency, all_records=recs)
        expected = list(steps.load_run_columns(want).values())
        for a, b in zip(got, expected, strict=True):
            assert (a == b) or (isinstance(a, float) and math.isclose(a, b, rel_tol=1e-12)), (lp, got, expected)


def test_the_agent_refuses_a_field_its_csv_has_no_column_for(tmp_path):
    with (
        BundleWriter(tmp_path / "b", run_id="r", source="emulated") as w,
        pytest.raises(BundleError, match=re.escape("unknown column(s) colour")),
    ):
        w.write("requests", [{"load_point_id": "a", "request_id": "1", "colour": "red"}])


def test_numpy_numbers_are_written_as_numbers(tmp_path):
    """numpy's float64 is a float whose repr is `np.float64(...)` (numpy 2): the CSV field is the number."""
    import numpy as np

    row = {"deployment_id": "d", "load_point_id": "lp", "request_id": "1", "ttft_ms": np.float64(202.5)}
    with BundleWriter(tmp_path / "b", run_id="r", source="emulated") as w:
        w.write("requests", [{**row, "prompt_tokens": np.int64(7), "in_window": np.bool_(True)}])
    ((_, back),) = read_rows(tmp_path / "b" / "requests.csv")
    assert (back["ttft_ms"], back["prompt_tokens"], back["in_window"]) == (202.5, 7, True)
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, tmp_path / "b")
        assert con.execute("SELECT ttft_ms, prompt_tokens FROM requests").fetchall() == [(202.5, 7)]
