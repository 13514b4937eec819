"""Version-2 bundles (per-token times in binary chunk files, resources/chunk_files.py): the same run written as a
version-1 bundle (every list inline in JSON) and as a version-2 bundle loads the same rows and the same figures; a
fault in the chunk files is refused naming the file, the line and the reason; and the large-point ITL interval
(normal limit of each repeat's request draw) agrees with the exact bootstrap over requests."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.synthetic import synthesize
from resources import intervals
from resources.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import CHUNK_FILES, BundleError, BundleWriter, read_manifest


def _load(db, folder) -> dict[str, list]:
    with connect(db) as con:
        ingest_bundle(con, folder)
        return {
            t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
            for t in ("requests", "point_stats", "latency_intervals")
        }


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12)
    return a == b


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One synthetic run (6 load points, 3 repeats a label, 1,000 requests each) as version 1 and as version 2, with
    large-point intervals from 1,000 requests on (the path an hour-long point takes)."""
    tmp = tmp_path_factory.mktemp("v2")
    mp = pytest.MonkeyPatch()
    mp.setattr(intervals, "EXACT_MAX_REQUESTS", 1000)
    try:
        for version in (1, 2):
            synthesize(tmp / f"v{version}", "same", 6000, requests_per_point=1000, bundle_version=version)
        yield {v: _load(tmp / f"{v}.duckdb", tmp / v) for v in ("v1", "v2")}, tmp
    finally:
        mp.undo()


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
    assert loaded["v1"]["latency_intervals"] == loaded["v2"]["latency_intervals"]
    assert any(r[-1].endswith("on 0.5% bins") for r in loaded["v2"]["latency_intervals"])  # the large-point path ran
    # percentiles and counts to the bit; a mean or deviation of millions of gaps to its summation order
    for a, b in zip(loaded["v1"]["point_stats"], loaded["v2"]["point_stats"], strict=True):
        assert all(_close(x, y) for x, y in zip(a, b, strict=True)), (a, b)


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


def test_the_normal_limit_itl_interval_agrees_with_the_exact_bootstrap():
    """6,000 requests of one repeat whose typical gap differs from request to request and whose gaps vary within a
    request: the large-point interval (flat_itl: each resample's request sums drawn from their normal limit) and the
    exact bootstrap over requests (itl_intervals, whole histograms) agree within 2% (their draws differ: with several
    repeats, which repeats are drawn dominates and both draw them alike)."""
    rng = np.random.default_rng(7)
    gaps, groups = [], []
    for _ in range(6000):
        gaps.append(20.0 * rng.lognormal(0, 0.15) * rng.lognormal(0, 0.3, size=int(rng.integers(20, 60))))
        groups.append(1)
    exact = intervals.itl_intervals(gaps, np.asarray(groups), np.random.default_rng(1), n_boot=1000)
    t = np.concatenate([np.concatenate([[0], np.cumsum(np.round(g * 1e6).astype(np.int64))]) for g in gaps])
    req = np.repeat(np.arange(len(gaps)), [len(g) + 1 for g in gaps])
    repeat = np.repeat(np.asarray(groups), [len(g) + 1 for g in gaps])
    limit, n_gaps = intervals.flat_itl(req, repeat, t, np.random.default_rng(2), 1000)
    assert n_gaps == sum(len(g) for g in gaps)
    for name, (est, lo, hi) in exact.items():
        e2, lo2, hi2 = limit[name]
        assert e2 == pytest.approx(est, rel=1e-6)
        assert lo2 == pytest.approx(lo, rel=0.02) and hi2 == pytest.approx(hi, rel=0.02), (name, exact, limit)
        assert lo2 < e2 < hi2


def test_the_counts_of_every_window_from_one_pass_equal_each_requests_counts():
    """intervals._counts_below: every request's gaps below each bin edge of each window, from one count over the
    gaps (each request's gaps consecutive), equal the counts taken request by request."""
    rng = np.random.default_rng(3)
    n_req, n_bins = 300, 80
    gap_req = np.sort(rng.integers(0, n_req, 20_000))
    bins = rng.integers(0, n_bins, len(gap_req)).astype(np.int32)
    windows = [(5, 17), (12, 30), (50, 51), (70, 80)]
    below = intervals._counts_below(bins, np.bincount(gap_req, minlength=n_req), n_bins, windows)
    for b0, b1 in windows:
        want = np.array(
            [[np.sum(bins[gap_req == r] < b) for b in range(b0, b1 + 1)] + [np.sum(gap_req == r)] for r in range(n_req)]
        )
        assert np.array_equal(below(b0, b1), want), (b0, b1)


def test_gaps_are_binned_as_a_search_of_the_edges_places_them():
    """intervals._int_bins (a table over each value's exponent and leading bits, a search only where a stretch holds
    an edge) gives every value the bin a search of the integer edges gives it: values on an edge, one either side,
    zero, 1 ns, and gaps spread over six decades."""
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.integers(0, 10, 1000), np.exp(rng.uniform(0, np.log(5e9), 200_000)).astype(np.int64)])
    edges = intervals._int_edges(int(values.min()), int(values.max()))
    assert np.all(np.diff(edges) >= 0) and edges[0] <= max(values.min(), 1) and edges[-1] > values.max()
    values = np.concatenate([values, edges[1:-1], edges[1:-1] - 1, edges[1:-1] + 1, [0, 1]])
    bins = intervals._int_bins(values, edges)
    want = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    assert np.array_equal(bins, want)


def test_the_exact_percentiles_from_their_bins_are_duckdbs():
    """The large-point ITL estimate (each order statistic found in its bin) equals DuckDB's quantile_cont over the
    same gaps, (t - prev) / 1e6, to the bit."""
    import duckdb

    rng = np.random.default_rng(12)
    lengths = rng.integers(1, 40, 3000)
    t = np.concatenate([np.cumsum(rng.integers(1_000, 90_000_000, k)) for k in lengths]).astype(np.int64)
    est, n_gaps = intervals.runs_itl(t, lengths, np.repeat([1, 2, 3], 1000), np.random.default_rng(1), 50)
    starts = np.cumsum(lengths) - lengths
    gaps = np.concatenate([np.diff(t[a : a + k]) for a, k in zip(starts, lengths)])
    assert n_gaps == len(gaps)
    con = duckdb.connect()
    con.execute("CREATE TABLE g AS SELECT unnest(?::BIGINT[]) AS d", [gaps.tolist()])
    want = con.execute("SELECT quantile_cont(d / 1e6, [0.5, 0.9, 0.99]) FROM g").fetchone()[0]
    assert [est[k][0] for k in ("p50", "p90", "p99")] == want


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


def test_a_run_of_large_and_small_points_keeps_the_intervals_of_both(both, tmp_path, monkeypatch):
    """One label shrunk below the exact bootstrap's limit, the others above it: every label keeps its rows."""
    import shutil

    _, tmp = both
    shutil.copy(tmp / "v2.duckdb", tmp_path / "w.duckdb")
    with connect(tmp_path / "w.duckdb") as con:
        labels = con.execute("SELECT DISTINCT deployment_id, point_label FROM latency_intervals").fetchall()
        dep, label = labels[0]
        con.execute(
            "DELETE FROM requests WHERE deployment_id = ? AND load_point_id IN (SELECT load_point_id FROM load_runs "
            "WHERE point_label = ?) AND request_id::INTEGER % 2 = 0",
            [dep, label],
        )
        small = con.execute(
            "SELECT count(*) FROM requests q JOIN load_runs l USING (run_id, deployment_id, load_point_id) "
            "WHERE q.deployment_id = ? AND l.point_label = ? AND q.in_window AND q.error_kind IS NULL",
            [dep, label],
        ).fetchone()[0]
        monkeypatch.setattr(intervals, "EXACT_MAX_REQUESTS", small + 1)
        intervals.refresh(con, "same", n_boot=50)
        methods = dict(
            ((d, p), m)
            for d, p, m in con.execute(
                "SELECT deployment_id, point_label, any_value(method) FROM latency_intervals GROUP BY ALL"
            ).fetchall()
        )
    assert set(methods) == set(labels)
    assert not methods[(dep, label)].endswith("on 0.5% bins")
    assert sum(m.endswith("on 0.5% bins") for m in methods.values()) == len(labels) - 1
