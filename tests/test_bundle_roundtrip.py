"""Bundles: what goes in comes out of DuckDB unchanged (property-based), and a full disk loses nothing written."""

import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wattbench_agent.bundle as bundle_mod
from tests.bundle_files import line_of, read_table, write_table
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import BundleError, BundleWriter

finite = st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e12, max_value=1e12)
duration = st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=0, max_value=1e12)
maybe = lambda s: st.none() | s  # noqa: E731
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


def _tokens_add_up(row: dict) -> dict:
    """A request that succeeded and has events: its events' tokens sum to its completion tokens (ingest refuses a row
    whose do not: wattbench/ingest_checks._token_problem). An error kind '' too: tests/bundle_files reads a CSV
    table's empty string back as null, so a table rewritten by a test says the request succeeded."""
    if not row["error_kind"] and row["chunk_ns"] and row["chunk_tokens"] and row["completion_tokens"] is not None:
        return {**row, "completion_tokens": sum(row["chunk_tokens"])}
    return row


request_rows = st.lists(
    st.fixed_dictionaries(
        {
            "ttft_ms": maybe(duration),
            "e2e_ms": maybe(duration),
            "tpot_ms": maybe(duration),
            "prompt_tokens": maybe(st.integers(0, 2**31 - 1)),
            "completion_tokens": maybe(st.integers(0, 2**31 - 1)),
            "finish_reason": maybe(text),
            "error_kind": maybe(text),
            "error_text": maybe(text),
            "http_status": maybe(st.integers(100, 599)),
            "chunk_ns": maybe(st.lists(st.integers(0, 2**62), max_size=8).map(sorted)),  # token times go forward
            "chunk_tokens": maybe(st.lists(st.integers(0, 1000), max_size=8)),
            "in_window": maybe(st.booleans()),
        }
    ).map(_tokens_add_up),
    min_size=1,
    max_size=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=request_rows)
def test_requests_round_trip(tmp_path_factory, rows):
    tmp = tmp_path_factory.mktemp("rt")
    with BundleWriter(tmp / "b", run_id="r", source="emulated") as w:
        w.write(
            "requests",
            [{**r, "deployment_id": "d", "load_point_id": "lp", "request_id": str(i)} for i, r in enumerate(rows)],
        )
    with connect(tmp / "w.duckdb") as con:
        ingest_bundle(con, tmp / "b")
        ingest_bundle(con, tmp / "b")  # idempotent
        cur = con.execute(  # token times and counts as every reader reads them (sql/views.sql request_ns, ...)
            """SELECT * REPLACE (request_ns(chunk_ns, events_file, events_at, events_n) AS chunk_ns,
                                 request_tokens(chunk_tokens, chunk_tokens_each, counts_file, events_at, events_n,
                                                request_ns(chunk_ns, events_file, events_at, events_n)) AS chunk_tokens)
               FROM requests ORDER BY CAST(request_id AS INTEGER)"""
        )
        names = [d[0] for d in cur.description]
        got = [dict(zip(names, r)) for r in cur.fetchall()]
    assert len(got) == len(rows)
    for i, row in enumerate(rows):
        back = got[i]
        for key, value in row.items():
            have = back[key]
            if value is None:
                assert have is None, key
            elif isinstance(value, float):
                assert have == pytest.approx(value, rel=1e-12, abs=1e-9), key
            elif isinstance(value, list):
                assert list(have) == value, key
            else:
                assert have == value, key


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=request_rows,
    bad_at=st.integers(0, 19),
    column=st.sampled_from(["ttft_ms", "e2e_ms", "tpot_ms"]),
    # strictly negative: Hypothesis turns `filter(lambda v: v < 0)` into a bound that admits -0.0, which is zero
    value=st.floats(min_value=-1e12, max_value=-1e-9) | st.sampled_from([float("nan"), float("inf"), float("-inf")]),
)
def test_a_negative_or_non_finite_duration_is_refused_whole(tmp_path_factory, rows, bad_at, column, value):
    """Ingest takes the rows whole or not at all: one negative or non-finite duration anywhere is named by its
    line, and nothing of the bundle is loaded."""
    tmp = tmp_path_factory.mktemp("bad")
    bad_at = bad_at % len(rows)
    with BundleWriter(tmp / "b", run_id="r", source="emulated") as w:
        w.write(
            "requests",
            [{**r, "deployment_id": "d", "load_point_id": "lp", "request_id": str(i)} for i, r in enumerate(rows)],
        )
    table = read_table(tmp / "b", "requests")
    table[bad_at][column] = value  # written as other writers spell it (nan, inf in CSV; NaN, Infinity in JSON)
    path = write_table(tmp / "b", "requests", table)
    with connect(tmp / "w.duckdb") as con:
        with pytest.raises(BundleError, match=rf"{path.name}:{line_of(tmp / 'b', 'requests', bad_at)}: {column}"):
            ingest_bundle(con, tmp / "b")
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0


def test_disk_full_keeps_what_was_written(tmp_path, monkeypatch):
    real_fsync = bundle_mod.os.fsync
    calls = {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] == 5:  # the third write's data (each write fsyncs data, then the manifest)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    w = BundleWriter(tmp_path / "b", run_id="r", source="emulated")
    monkeypatch.setattr(bundle_mod.os, "fsync", fsync)
    row = {"deployment_id": "d", "gpu_uuid": "g", "power_w": 1.0}
    w.write("gpu_samples", [{**row, "t_ns": 1}])
    w.write("gpu_samples", [{**row, "t_ns": 2}])
    with pytest.raises(BundleError, match=r"No space left on device.*2 row\(s\) already written are intact"):
        w.write("gpu_samples", [{**row, "t_ns": 3}, {**row, "t_ns": 4}])
    monkeypatch.setattr(bundle_mod.os, "fsync", real_fsync)
    w.close(complete=False)
    assert [row["t_ns"] for row in read_table(tmp_path / "b", "gpu_samples")] == [1, 2]
    with connect(tmp_path / "w.duckdb") as con:
        assert ingest_bundle(con, tmp_path / "b")["gpu_samples"] == 2
