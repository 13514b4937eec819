"""Version-2 bundles (per-token times in binary chunk files, resources/chunk_files.py): the same run written as a
version-1 bundle (every list inline in JSON) and as a version-2 bundle loads the same rows and the same figures; a
fault in the chunk files is refused naming the file, the line and the reason."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.synthetic import synthesize
from resources.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import CHUNK_FILES, BundleError, BundleWriter, read_manifest


def _load(db, folder) -> dict[str, list]:
    with connect(db) as con:
        ingest_bundle(con, folder)
        return {  # point_figures without run_at: each bundle's manifest has its own clock anchor
            t: con.execute(
                f"SELECT * {'EXCLUDE (run_at)' if t == 'point_figures' else ''} FROM {t} ORDER BY ALL"
            ).fetchall()
            for t in ("requests", "point_stats", "point_figures")
        }


def _close(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12)
    return a == b


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One synthetic run (6 load points, 3 repeats a label, 1,000 requests each) as version 1 and as version 2."""
    tmp = tmp_path_factory.mktemp("v2")
    for version in (1, 2):
        synthesize(tmp / f"v{version}", "same", 6000, requests_per_point=1000, bundle_version=version)
    return {v: _load(tmp / f"{v}.duckdb", tmp / v) for v in ("v1", "v2")}, tmp


def test_the_agent_writes_version_2_with_chunk_files(tmp_path):
    with BundleWriter(tmp_path / "b", run_id="r", source="emulated") as w:
        w.write(
            "requests",
            [
                {"load_point_id": "a", "request_id": "1", "chunk_ns": [5, 9, 12], "chunk_tokens": [1, 1, 2]},
                {"load_point_id": "a", "request_id": "2", "chunk_ns": [1.5], "chunk_tokens": [1]},  # stays inline
                {"load_point_id": "a", "request_id": "3", "chunk_ns": [20], "chunk_tokens": [4]},
            ],
        )
    assert read_manifest(tmp_path / "b")["bundle_version"] == 2
    rows = [json.loads(line) for line in (tmp_path / "b" / "requests.jsonl").read_text().splitlines()]
    assert [r.get("chunks") for r in rows] == [[0, 3], None, [3, 1]]
    assert rows[1]["chunk_ns"] == [1.5] and "chunk_ns" not in rows[0]
    ns = np.fromfile(tmp_path / "b" / CHUNK_FILES["chunk_ns"][0], dtype="<i8")
    tokens = np.fromfile(tmp_path / "b" / CHUNK_FILES["chunk_tokens"][0], dtype="<i4")
    assert ns.tolist() == [5, 9, 12, 20] and tokens.tolist() == [1, 1, 2, 4]


def test_version_1_and_2_of_one_run_load_the_same_rows_and_figures(both):
    loaded, _ = both
    assert len(loaded["v1"]["requests"]) == 6000
    assert loaded["v1"]["requests"] == loaded["v2"]["requests"]
    # percentiles and counts to the bit; a mean or deviation of millions of gaps to its summation order
    for table in ("point_stats", "point_figures"):
        for a, b in zip(loaded["v1"][table], loaded["v2"][table], strict=True):
            assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (table, a, b)


@pytest.mark.parametrize("version", [1, 2])
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
            "SELECT request_id, chunk_tokens, chunk_tokens_each, "
            "event_tokens(chunk_tokens, chunk_tokens_each, chunk_ns) FROM requests ORDER BY request_id"
        ).fetchall()
    assert stored == [
        ("1", [1, 1, 2], None, [1, 1, 2]),
        ("2", None, 1, [1, 1]),
        ("3", None, 4, [4]),
        ("4", [], None, []),
        ("5", None, 0, [0, 0]),
    ]


def test_a_bundle_naming_the_computed_token_count_is_refused(tmp_path):
    folder = tmp_path / "b"
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", [{"deployment_id": "d", "load_point_id": "a", "request_id": "1", "chunk_ns": [5]}])
    lines = (folder / "requests.jsonl").read_text().splitlines()
    row = {**json.loads(lines[0]), "chunk_tokens_each": 1}
    (folder / "requests.jsonl").write_text(json.dumps(row) + "\n")
    with (
        pytest.raises(BundleError, match=r"requests\.jsonl:1: .*chunk_tokens_each"),
        connect(tmp_path / "w.duckdb") as con,
    ):
        ingest_bundle(con, folder)


def test_a_negative_token_count_said_by_every_event_inline_is_refused_naming_its_line(tmp_path):
    folder = tmp_path / "b"
    row = {"deployment_id": "d", "load_point_id": "a", "request_id": "1", "chunk_ns": [5, 6], "chunk_tokens": [-2, -2]}
    with BundleWriter(folder, run_id="r", source="emulated") as w:
        w.write("requests", [{**row, "chunk_ns": [5.5]}])  # stays inline
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


def test_a_fault_in_the_figures_computed_beside_the_lists_fails_the_ingest_keeping_nothing(both, tmp_path, monkeypatch):
    """The token figures run in a thread while DuckDB stores the lists (ChunkFiles.start_figures): a failure there is
    the ingest's failure, and the transaction keeps nothing of the bundle."""
    from resources import warehouse

    _, tmp = both

    def fails(ev):
        raise MemoryError("point figures")

    monkeypatch.setattr(warehouse, "point_token_figures", fails)
    with pytest.raises(MemoryError, match="point figures"):
        _load(tmp_path / "w.duckdb", tmp / "v2")
    with connect(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM point_stats").fetchone()[0] == 0


def test_rows_read_out_of_the_files_order_get_their_own_events(both, tmp_path):
    """ChunkFiles.gather: rows asked for in another order than the files' (a label's repeats, requests by id) get
    each its own events, as a direct read of each row's range gives them."""
    from resources.chunk_files import ChunkFiles, chunk_paths

    _, tmp = both
    folder = tmp / "v2"
    refs = np.array([json.loads(line)["chunks"] for line in (folder / "requests.jsonl").read_text().splitlines()])
    order = np.random.default_rng(5).permutation(len(refs))[:500]
    at, n = refs[order, 0].astype(np.int64), refs[order, 1].astype(np.int64)
    cf = ChunkFiles(None, chunk_paths(folder, 2), folder / "requests.jsonl")
    ns, tok = cf.gather(at, n)
    all_ns = np.fromfile(folder / CHUNK_FILES["chunk_ns"][0], dtype="<i8")
    all_tok = np.fromfile(folder / CHUNK_FILES["chunk_tokens"][0], dtype="<i4")
    assert np.array_equal(ns, np.concatenate([all_ns[a : a + k] for a, k in zip(at, n)]))
    assert np.array_equal(tok, np.concatenate([all_tok[a : a + k] for a, k in zip(at, n)]))
