"""Version-2 and -3 bundles (per-token times in binary chunk files, wattbench/chunk_files.py, kept in the token store
beside the warehouse and read by the compiled pass): the same run written as a version-1 bundle (every list inline in
JSON), a version-2 and a version-3 bundle (requests.csv) loads the same rows and the same figures; a fault in the
chunk files is refused naming the file, the line and the reason, and leaves nothing behind."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.synthetic import synthesize
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import CHUNK_FILES, BundleError, BundleWriter, read_manifest

# every request's fields, its token times and counts as lists, whichever way they are stored
REQUESTS = """SELECT * EXCLUDE (chunk_ns, chunk_tokens, chunk_tokens_each, events_file, events_at, events_n,
                                counts_file),
                     request_ns(chunk_ns, events_file, events_at, events_n) AS times,
                     request_tokens(chunk_tokens, chunk_tokens_each, counts_file, events_at, events_n,
                                    request_ns(chunk_ns, events_file, events_at, events_n)) AS tokens
              FROM requests ORDER BY ALL"""


def _load(db, folder) -> dict[str, list]:
    with connect(db) as con:
        ingest_bundle(con, folder)
        out = {  # point_figures without run_at: each bundle's manifest has its own clock anchor
            t: con.execute(
                f"SELECT * {'EXCLUDE (run_at)' if t == 'point_figures' else ''} FROM {t} ORDER BY ALL"
            ).fetchall()
            for t in ("point_stats", "point_figures")
        }
        out["requests"] = con.execute(REQUESTS).fetchall()
        return out


def _close(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12)
    return a == b


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One synthetic run (6 load points, 3 repeats a label, 1,000 requests each) as version 1, 2 and 3."""
    tmp = tmp_path_factory.mktemp("v2")
    for version in (1, 2, 3):
        synthesize(tmp / f"v{version}", "same", 6000, requests_per_point=1000, bundle_version=version)
    return {v: _load(tmp / f"{v}.duckdb", tmp / v) for v in ("v1", "v2", "v3")}, tmp


def test_the_agent_writes_version_3_with_csv_and_chunk_files(tmp_path):
    from wattbench_agent.bundle import read_rows

    with BundleWriter(tmp_path / "b", run_id="r", source="emulated") as w:
        w.write(
            "requests",
            [
                {"load_point_id": "a", "request_id": "1", "chunk_ns": [5, 9, 12], "chunk_tokens": [1, 1, 2]},
                {"load_point_id": "a", "request_id": "2", "chunk_ns": [1.5], "chunk_tokens": [1]},  # stays inline
                {"load_point_id": "a", "request_id": "3", "chunk_ns": [20], "chunk_tokens": [4], "error_text": 'a"\n'},
            ],
        )
    assert read_manifest(tmp_path / "b")["bundle_version"] == 3
    rows = [row for _, row in read_rows(tmp_path / "b" / "requests.csv")]
    assert [(r["events_at"], r["events_n"]) for r in rows] == [(0, 3), (None, None), (3, 1)]
    assert rows[1]["chunk_ns"] == [1.5] and rows[0]["chunk_ns"] is None and rows[2]["error_text"] == 'a"\n'
    ns = np.fromfile(tmp_path / "b" / CHUNK_FILES["chunk_ns"][0], dtype="<i8")
    tokens = np.fromfile(tmp_path / "b" / CHUNK_FILES["chunk_tokens"][0], dtype="<i4")
    assert ns.tolist() == [5, 9, 12, 20] and tokens.tolist() == [1, 1, 2, 4]


def test_an_appended_version_2_bundle_stays_version_2(tmp_path):
    folder = tmp_path / "b"
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", [{"load_point_id": "a", "request_id": "1", "chunk_ns": [5], "chunk_tokens": [1]}])
    (folder / "requests.csv").unlink()
    (folder / "requests.jsonl").write_text(json.dumps({"load_point_id": "a", "request_id": "0"}) + "\n")
    with BundleWriter(folder, run_id="r", source="emulated", previous="append") as w:
        w.write("requests", [{"load_point_id": "a", "request_id": "2", "chunk_ns": [7], "chunk_tokens": [1]}])
    assert read_manifest(folder)["bundle_version"] == 2
    assert json.loads((folder / "requests.jsonl").read_text().splitlines()[1])["chunks"] == [1, 1]


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_version_1_2_and_3_of_one_run_load_the_same_rows_and_figures(both, version):
    loaded, _ = both
    assert len(loaded["v1"]["requests"]) == 6000
    assert loaded["v1"]["requests"] == loaded[version]["requests"]
    # percentiles and counts to the bit; a mean or deviation of millions of gaps to its summation order
    for table in ("point_stats", "point_figures"):
        for a, b in zip(loaded["v1"][table], loaded[version][table], strict=True):
            assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (table, a, b)


@pytest.mark.parametrize("version", [1, 3])
def test_equal_token_counts_are_stored_as_one_number_and_read_back_as_the_list(tmp_path, version):
    """A request whose events all carried one count keeps that count (chunk_tokens_each) and no list, whichever
    bundle version carried it; any other keeps its list; event_tokens gives every request's list back as sent."""
    rows = [
        {"load_point_id": "a", "request_id": "1", "chunk_ns": [5, 9, 12], "chunk_tokens": [1, 1, 2]},
        {"load_point_id": "a", "request_id": "2", "chunk_ns": [20, 30], "chunk_tokens": [1, 1]},
        {"load_point_id": "a", "request_id": "3", "chunk_ns": [40], "chunk_tokens": [4]},
        {"load_point_id": "a", "request_id": "4", "chunk_ns": [], "chunk_tokens": [], "error_kind": "http"},
        {"load_point_id": "a", "request_id": "5", "chunk_ns": [50, 60], "chunk_tokens": [0, 0]},
    ]
    folder = tmp_path / "b"
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", [{**r, "deployment_id": "d"} for r in rows])
    if version == 1:  # the same rows inline, as agents before version 2 wrote them
        (folder / "requests.csv").unlink()
        (folder / "requests.jsonl").write_text(
            "".join(json.dumps({**r, "deployment_id": "d", "source": "emulated"}) + "\n" for r in rows)
        )
        for name, _, _ in CHUNK_FILES.values():
            (folder / name).unlink()
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps({**manifest, "bundle_version": 1}))
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, folder)
        stored = con.execute(
            "SELECT request_id, chunk_tokens_each, request_tokens(chunk_tokens, chunk_tokens_each, counts_file, "
            "events_at, events_n, request_ns(chunk_ns, events_file, events_at, events_n)), "
            "chunk_tokens IS NOT NULL OR counts_file IS NOT NULL FROM requests ORDER BY request_id"
        ).fetchall()
    assert stored == [
        ("1", None, [1, 1, 2], True),  # a list of its own (inline, or the counts file kept too)
        ("2", 1, [1, 1], False),
        ("3", 4, [4], False),
        ("4", None, [], version == 1),
        ("5", 0, [0, 0], False),
    ]


@pytest.mark.parametrize("column", ["chunk_tokens_each", "events_file"])
def test_a_bundle_naming_a_computed_column_is_refused(tmp_path, column):
    folder = tmp_path / "b"
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", [{"deployment_id": "d", "load_point_id": "a", "request_id": "1", "chunk_ns": [5]}])
    (folder / "requests.csv").unlink()
    row = {"deployment_id": "d", "load_point_id": "a", "request_id": "1", "chunk_ns": [5], column: 1}
    (folder / "requests.jsonl").write_text(json.dumps(row) + "\n")
    with (
        pytest.raises(BundleError, match=rf"requests\.jsonl:1: .*{column}"),
        connect(tmp_path / "w.duckdb") as con,
    ):
        ingest_bundle(con, folder)


def test_a_negative_token_count_said_by_every_event_inline_is_refused_naming_its_line(tmp_path):
    folder = tmp_path / "b"
    row = {"deployment_id": "d", "load_point_id": "a", "request_id": "1", "chunk_ns": [5, 6], "chunk_tokens": [-2, -2]}
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", [{**row, "chunk_ns": [5.5]}])  # stays inline
    (folder / "requests.csv").unlink()
    (folder / "requests.jsonl").write_text(json.dumps({**row, "source": "emulated"}) + "\n")
    with pytest.raises(BundleError, match=r"requests\.jsonl:1: .*chunk_tokens"), connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, folder)


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_a_negative_token_count_in_the_chunk_file_is_refused_naming_its_line(both, tmp_path):
    _, tmp = both
    folder = _copy(tmp / "v2", tmp_path / "neg")
    rows = (folder / "requests.jsonl").read_text().splitlines()
    at, n = json.loads(rows[41])["chunks"]
    tokens = np.fromfile(folder / CHUNK_FILES["chunk_tokens"][0], dtype="<i4")
    tokens[at + 2] = -3
    tokens.tofile(folder / CHUNK_FILES["chunk_tokens"][0])
    with pytest.raises(BundleError, match=r"requests\.jsonl:42: chunk_tokens\[2\] = -3 .*expected >= 0"):
        _load(tmp_path / "w.duckdb", folder)
    with connect(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0  # nothing of the bundle stayed


def test_a_reference_past_the_chunk_files_is_refused_naming_its_line(both, tmp_path):
    _, tmp = both
    folder = _copy(tmp / "v2", tmp_path / "past")
    ns = folder / CHUNK_FILES["chunk_ns"][0]
    with open(ns, "r+b") as fh:  # the last request's events cut off, as a copy cut short would leave them
        fh.truncate(ns.stat().st_size - 8 * 200)
    tok = folder / CHUNK_FILES["chunk_tokens"][0]
    with open(tok, "r+b") as fh:
        fh.truncate(tok.stat().st_size - 4 * 200)
    events = ns.stat().st_size // 8
    refs = [json.loads(line)["chunks"] for line in (folder / "requests.jsonl").read_text().splitlines()]
    first = next(i for i, (at, n) in enumerate(refs, 1) if at + n > events)
    with pytest.raises(BundleError, match=rf"requests\.jsonl:{first}: chunks = \[\d+, 128\]; expected .* within"):
        _load(tmp_path / "w.duckdb", folder)


def test_a_chunk_file_cut_mid_value_or_missing_is_named(both, tmp_path):
    _, tmp = both
    folder = _copy(tmp / "v2", tmp_path / "cut")
    ns = folder / CHUNK_FILES["chunk_ns"][0]
    with open(ns, "r+b") as fh:
        fh.truncate(ns.stat().st_size - 3)
    with pytest.raises(BundleError, match=r"requests\.chunk_ns\.bin: \d+ bytes, not a whole number of 8-byte values"):
        _load(tmp_path / "w.duckdb", folder)
    (folder / CHUNK_FILES["chunk_tokens"][0]).unlink()
    with pytest.raises(BundleError, match=r"requests\.chunk_tokens\.bin: missing"):
        _load(tmp_path / "w.duckdb", folder)


def test_a_fault_in_the_compiled_pass_fails_the_ingest_keeping_nothing(both, tmp_path, monkeypatch):
    """The compiled pass runs in a thread while DuckDB loads the other tables: a failure there is the ingest's
    failure, the transaction keeps nothing of the bundle and the token store keeps no file of it."""
    from wattbench import token_pass

    _, tmp = both

    def fails(*args, **kwargs):
        raise MemoryError("point figures")

    monkeypatch.setattr(token_pass, "run_point", fails)
    with pytest.raises(MemoryError, match="point figures"):
        _load(tmp_path / "w.duckdb", tmp / "v3")
    with connect(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM point_stats").fetchone()[0] == 0
    assert not list((tmp_path / "w.duckdb.tokens").glob("*"))


def test_rows_in_any_order_pointing_anywhere_get_their_own_events(both, tmp_path):
    """Requests whose references do not follow the files (rows in another order, every copy of a point pointing at
    the same events) read each its own events: the same rows and figures as the bundle as written."""
    loaded, tmp = both
    folder = _copy(tmp / "v3", tmp_path / "shuffled")
    lines = (folder / "requests.csv").read_text().splitlines(keepends=True)
    body = lines[1:]
    order = np.random.default_rng(5).permutation(len(body))
    (folder / "requests.csv").write_text(lines[0] + "".join(body[i] for i in order))
    shuffled = _load(tmp_path / "w.duckdb", folder)
    assert shuffled["requests"] == loaded["v3"]["requests"]
    for a, b in zip(shuffled["point_stats"], loaded["v3"]["point_stats"], strict=True):
        assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (a, b)


def test_the_same_bundle_twice_stores_its_token_times_once_and_a_replaced_run_leaves_none(both, tmp_path):
    _, tmp = both
    db = tmp_path / "w.duckdb"
    _load(db, tmp / "v3")
    _load(db, tmp / "v3")
    store = list((tmp_path / "w.duckdb.tokens").glob("*.bin"))
    assert len(store) == 1 and store[0].read_bytes() == (tmp / "v3" / CHUNK_FILES["chunk_ns"][0]).read_bytes()
    with connect(db) as con:
        con.execute("DELETE FROM requests")
        from wattbench.token_store import collect

        assert collect(con) == 1
    assert not list((tmp_path / "w.duckdb.tokens").glob("*.bin"))


# ------------------------------------------------------------------------------------------------ reconciled with rows
def _two_deployments(folder, tokens: int = 32):
    """Two deployments of 20 requests, each `tokens` events of one token 3-6 ms apart, as a version-3 bundle. Returns
    (folder, rows)."""
    rows = []
    for d in ("a", "b"):
        for i in range(20):
            sent = 10**9 * (1 + i)
            times = [sent + 10**6 * (50 + 3 * k + (k * i) % 4) for k in range(tokens)]
            rows.append(
                {
                    "deployment_id": d,
                    "load_point_id": f"{d}:w:c1",
                    "request_id": str(i),
                    "sent_ns": sent,
                    "first_token_ns": times[0],
                    "last_token_ns": times[-1],
                    "completion_tokens": tokens,
                    "chunk_ns": times,
                    "chunk_tokens": [1] * tokens,
                    "in_window": True,
                }
            )
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", rows)
    return folder, rows


def _inline(folder, rows):
    """The bundle's requests rewritten inline in requests.jsonl, as version 1."""
    (folder / "requests.csv").unlink()
    for name, _, _ in CHUNK_FILES.values():
        (folder / name).unlink()
    (folder / "requests.jsonl").write_text("".join(json.dumps({**r, "source": "emulated"}) + "\n" for r in rows))
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "bundle_version": 1}))


@pytest.mark.parametrize("json_lines", [False, True])
def test_a_row_naming_another_rows_events_is_refused_naming_both_lines(tmp_path, json_lines):
    """Before: a request of deployment b pointing at the events of one of deployment a was loaded, and its point's ITL
    read the other's gaps. Now the two lines are named (version 3's events_at/events_n, version 2's chunks)."""
    from tests.bundle_files import as_json_lines, line_of, read_table, write_table

    folder, _ = _two_deployments(tmp_path / "b")
    table = read_table(folder, "requests")
    theirs, mine = 5, 20 + 3  # a's sixth request, b's fourth
    table[mine] = {**table[mine], "events_at": table[theirs]["events_at"], "events_n": table[theirs]["events_n"]}
    write_table(folder, "requests", table)
    if json_lines:
        as_json_lines(folder)
    at, n = table[theirs]["events_at"], table[theirs]["events_n"]
    ref = rf"chunks = \[{at}, {n}\]" if json_lines else rf"events_at, events_n = {at}, {n}"
    name = "requests.jsonl" if json_lines else "requests.csv"
    with pytest.raises(
        BundleError,
        match=rf"{name}:{line_of(folder, 'requests', mine)}: {ref}; its events overlap those of line "
        rf"{line_of(folder, 'requests', theirs)} \({ref}\); expected each request's own events in "
        r"requests\.chunk_ns\.bin, shared with no other request; nothing was loaded",
    ):
        _load(tmp_path / "w.duckdb", folder)
    with connect(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0


@pytest.mark.parametrize("inline", [False, True])
def test_token_times_outside_their_request_are_refused(tmp_path, inline):
    """Before: a token time of -2^62 in a request sent at 8 s was taken (and times from -5e18 to 5e18, whose gap
    wraps past int64, ended the ingest with DuckDB's INT64 overflow traceback). A time before the request was sent (or
    below 0), or after its last token, is named."""
    folder, rows = _two_deployments(tmp_path / "b")
    if not inline:
        ns = np.fromfile(folder / CHUNK_FILES["chunk_ns"][0], dtype="<i8")
        ns[32 * 7] = -(2**62)  # the first event of a's eighth request
        ns.tofile(folder / CHUNK_FILES["chunk_ns"][0])
        what = r"chunk_ns\[0\] = -4611686018427387904 \(in requests\.chunk_ns\.bin\) is outside"
    else:
        rows[7]["chunk_ns"][0] = -(2**62)
        _inline(folder, rows)
        what = r"chunk_ns\[0\] = -4611686018427387904 is outside"
    from tests.bundle_files import line_of

    with pytest.raises(
        BundleError,
        match=rf":{line_of(folder, 'requests', 7)}: {what} the request's own span \(sent_ns = 8000000000, "
        r"last_token_ns = \d+\); expected token times from its send \(and >= 0\) to its last token",
    ):
        _load(tmp_path / "w.duckdb", folder)


@pytest.mark.parametrize("inline", [False, True])
def test_token_counts_that_do_not_add_up_to_the_completion_tokens_are_refused(tmp_path, inline):
    """Before: a request of 32 completion tokens whose events carried 2^31 - 1 tokens was taken (and its point's
    throughput counted them). A request that succeeded has its events' tokens sum to its completion_tokens; a failed
    one keeps what arrived."""
    folder, rows = _two_deployments(tmp_path / "b")
    rows[25]["chunk_tokens"][31] = 2**31 - 1
    rows[26]["error_kind"], rows[26]["chunk_tokens"][0] = "disconnected", 3  # failed: its counts are what arrived
    (folder / "requests.csv").unlink()
    for name, _, _ in CHUNK_FILES.values():
        (folder / name).unlink()
    (folder / "manifest.json").unlink()
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", rows)
    if inline:
        _inline(folder, rows)
    from tests.bundle_files import line_of

    where = "" if inline else r" \(in requests\.chunk_tokens\.bin\)"
    with pytest.raises(
        BundleError,
        match=rf":{line_of(folder, 'requests', 25)}: (its )?chunk_tokens{where} sum to 2147483678, while "
        r"completion_tokens = 32; expected the tokens of its events to sum to its completion_tokens \(a request "
        r"that failed, error_kind set, keeps what arrived\); nothing was loaded",
    ):
        _load(tmp_path / "w.duckdb", folder)
    rows[25]["chunk_tokens"][31] = 1
    (folder / "manifest.json").unlink()
    for p in folder.glob("requests*"):
        p.unlink()
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", rows)
    if inline:
        _inline(folder, rows)
    assert len(_load(tmp_path / "w.duckdb", folder)["requests"]) == 40


def test_rows_all_naming_one_range_are_refused_before_any_work_is_sized(tmp_path):
    """The issue's bundle: 166 rows naming one range of 2M events. Before, the pass sized its work by the sum of the
    references (332M events): a MemoryError traceback under 4 GiB of address space (6.1 GB of RSS for 100 rows of 1M
    events, loaded). Now refused in SQL before the pass, naming two lines: in its own process, bounded in time and
    address space."""
    import resource
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.bundle_files import read_table, write_table

    folder, events, t0 = tmp_path / "b", 2_000_000, 10**9
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write(
            "requests",
            [
                {
                    "deployment_id": "d",
                    "load_point_id": "d:w:c1",
                    "request_id": "0",
                    "sent_ns": t0,
                    "last_token_ns": t0 + events,
                    "completion_tokens": events,
                    "chunk_ns": list(range(t0 + 1, t0 + events + 1)),
                    "chunk_tokens": [1] * events,
                    "in_window": True,
                }
            ],
        )
    one = read_table(folder, "requests")[0]
    write_table(folder, "requests", [{**one, "request_id": str(i)} for i in range(166)])

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(folder), "--db", str(tmp_path / "w.duckdb")],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-2000:]
    assert "requests.csv:3: events_at, events_n = 0, 2000000; its events overlap those of line 2" in p.stderr
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("again", [["--replace"], []])
def test_a_damaged_token_file_is_named_at_query_time_and_written_whole_by_ingesting_again(tmp_path, capsys, again):
    """Before: a store file cut short made every query of token times fail with numpy's 'could not broadcast', and
    ingesting the bundle again (--replace too) kept the damaged file, trusted by its name. Now a query names the file
    and what to do, and ingesting the bundle again checks the file it would reuse (size, then hash) and writes it
    whole."""
    from pipelines.cli import main

    folder, _ = _two_deployments(tmp_path / "b")
    db = tmp_path / "w.duckdb"
    assert main(["ingest", str(folder), "--db", str(db)]) == 0
    capsys.readouterr()
    query = ["sql", "SELECT count(*), round(median(itl_ms), 3) FROM v_itl", "--db", str(db), "--format", "csv"]
    assert main(query) == 0
    good = capsys.readouterr().out
    (stored,) = (tmp_path / "w.duckdb.tokens").glob("*.bin")
    whole = stored.read_bytes()
    stored.write_bytes(whole[: len(whole) // 2])
    assert main(query) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (
        f"{stored}: 640 values, while a request names values 640 to 671 of it; the token store's file is damaged "
        "(cut short?): ingesting the bundle of its run again (wattbench ingest BUNDLE, or with --replace) writes it "
        "whole again"
    ) in err
    assert main(["ingest", str(folder), "--db", str(db), *again]) == 0
    assert stored.read_bytes() == whole
    capsys.readouterr()
    assert main(query) == 0 and capsys.readouterr().out == good


def test_a_reference_near_the_int64_limit_is_named_not_an_overflow(tmp_path):
    """Before: events_at = 2^63 - 10 made DuckDB's sum of the reference overflow: an OutOfRangeException traceback."""
    from tests.bundle_files import line_of, read_table, write_table

    folder, _ = _two_deployments(tmp_path / "b")
    table = read_table(folder, "requests")
    table[4]["events_at"] = 2**63 - 10
    write_table(folder, "requests", table)
    with pytest.raises(
        BundleError,
        match=rf"requests\.csv:{line_of(folder, 'requests', 4)}: events_at, events_n = 9223372036854775798, 32; "
        r"expected the first event and the number of events within the 1280 events of requests\.chunk_ns\.bin",
    ):
        _load(tmp_path / "w.duckdb", folder)
