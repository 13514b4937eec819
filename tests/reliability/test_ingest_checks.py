"""Ingest takes only bundles it can trust, whole or not at all (issue 17, item 5): NaN, Infinity and negative
durations are refused with the file, the line and the reason; a row twice is refused (also by the warehouse's
natural keys); `complete: false` is said and recorded; FIFOs, devices, directories, lists and non-UTF-8 bytes
get one message instead of a hang, unbounded memory or a traceback; an IO error is not called a lock."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from pipelines.cli import main as wattbench
from tests.bundle_files import as_json_lines, line_of, table_file
from tests.test_warehouse import make_bundle
from wattbench.ingest_checks import LABELS_KEY
from wattbench.validation import table_frame, validate_table
from wattbench.warehouse import connect


def json_bundle(path: Path) -> Path:
    """make_bundle's bundle with every table as JSON lines (version 2): the checks of JSON text (the CSV tables of
    version 3 have theirs in tests/test_bundle_v3.py)."""
    return as_json_lines(make_bundle(path))


REPO = Path(__file__).resolve().parents[2]
TABLES = ("deployments", "load_runs", "requests", "gpu_samples", "energy_windows", "server_metrics", "engine_builds")


def ingest(bundle: Path, db: Path, capsys) -> tuple[int, str, str]:
    rc = wattbench(["ingest", str(bundle), "--db", str(db)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def nothing_loaded(db: Path) -> bool:
    if not db.exists():
        return True
    with connect(db, read_only=True) as con:
        return all(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] == 0 for t in TABLES)


def edit_line(path: Path, lineno: int, old: str, new: str) -> None:
    lines = path.read_text().splitlines()
    assert old in lines[lineno - 1], (old, lines[lineno - 1])
    lines[lineno - 1] = lines[lineno - 1].replace(old, new)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "table, lineno, old, new, column, expected",
    [
        ("requests", 2, '"ttft_ms": 10.0', '"ttft_ms": NaN', "ttft_ms", "finite number"),
        ("requests", 3, '"e2e_ms": 50.0', '"e2e_ms": Infinity', "e2e_ms", "finite number"),
        ("load_runs", 1, '"energy_j": 50.0', '"energy_j": 1e400', "energy_j", "finite number"),
        ("load_runs", 1, '"window_s": 2.0', '"window_s": -2.0', "window_s", ">= 0"),
        ("requests", 4, '"ttft_ms": 10.0', '"ttft_ms": -10.0', "ttft_ms", ">= 0"),
        ("gpu_samples", 7, '"power_w": 300.0', '"power_w": -300.0', "power_w", ">= 0"),
        ("load_runs", 1, '"summary": {"x": 1}', '"summary": {"x": -Infinity}', "summary", "finite number"),
    ],
)
def test_bad_values_are_refused_with_file_line_and_reason(tmp_path, capsys, table, lineno, old, new, column, expected):
    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    edit_line(bundle / f"{table}.jsonl", lineno, old, new)
    rc, out, err = ingest(bundle, db, capsys)
    assert rc == 2 and "Traceback" not in err
    assert f"{table}.jsonl:{lineno}: {column}" in err and expected in err and "nothing was loaded" in err
    assert nothing_loaded(db)


def test_utilisation_out_of_range_is_refused(tmp_path, capsys):
    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    edit_line(bundle / "gpu_samples.jsonl", 2, '"power_w": 300.0', '"power_w": 300.0, "util_gpu_pct": 140.0')
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "gpu_samples.jsonl:2: util_gpu_pct = 140.0; expected <= 100" in err
    assert nothing_loaded(db)


@pytest.mark.parametrize("table", ["gpu_samples", "server_metrics"])
def test_a_row_twice_is_refused_naming_both_lines(tmp_path, capsys, table):
    bundle, db = make_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    if table == "server_metrics":
        rows = [
            {
                "run_id": "r1",
                "source": "emulated",
                "deployment_id": "d1",
                "t_ns": 5,
                "metric": "m",
                "labels": {"le": str(le)},
                "value": 1.0,
            }
            for le in (0.1, 0.5)
        ]
        (bundle / "server_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = table_file(bundle, table)  # gpu_samples.csv (its header is line 1) or server_metrics.jsonl
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines + [lines[1]]) + "\n")  # line 2 again, at the end
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and f"{path.name}:{len(lines) + 1}: the same row as line 2" in err
    assert nothing_loaded(db)


def test_the_warehouse_itself_refuses_a_sample_twice(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        row = "('r', 'emulated', 'd', 'GPU-0', 100, 300.0)"
        con.execute(f"INSERT INTO gpu_samples (run_id, source, deployment_id, gpu_uuid, t_ns, power_w) VALUES {row}")
        with pytest.raises(duckdb.ConstraintException):
            con.execute(
                f"INSERT INTO gpu_samples (run_id, source, deployment_id, gpu_uuid, t_ns, power_w) VALUES {row}"
            )
        # a /metrics sample's key holds its labels as text (server_metrics.labels_key, which the table holds equal to
        # its labels: a row whose key is missing or is not its labels' is refused too)
        cols = "run_id, source, deployment_id, t_ns, metric, value, labels"

        def sample(labels: str, key: str | None = LABELS_KEY.format(col="m")) -> None:
            values = f"'r', 'emulated', 'd', 100, 'vllm:x_bucket', 1.0, m{', ' + key if key else ''}"
            con.execute(
                f"INSERT INTO server_metrics ({cols}{', labels_key' if key else ''}) "
                f"SELECT {values} FROM (SELECT MAP {{{labels}}} AS m)"
            )

        sample("'le': '0.1', 'a': 'b'")
        sample("'le': '0.5', 'a': 'b'")  # another bucket of the same scrape: a row of its own
        with pytest.raises(duckdb.ConstraintException, match="Duplicate key"):  # the same labels, another order
            sample("'a': 'b', 'le': '0.1'")
        with pytest.raises(duckdb.ConstraintException, match="CHECK"):
            sample("'le': '0.9'", key="'le=0.9'")
        with pytest.raises(duckdb.ConstraintException, match="NOT NULL"):
            sample("'le': '0.9'", key=None)


def test_a_warehouse_that_already_holds_a_row_twice_keeps_one(tmp_path):
    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        con.execute("DROP INDEX IF EXISTS gpu_samples_key")
    con = duckdb.connect(str(db))  # what an older wattbench could leave behind
    row = "('r', 'emulated', 'd', 'GPU-0', 100, 300.0)"
    con.execute(f"INSERT INTO gpu_samples (run_id, source, deployment_id, gpu_uuid, t_ns, power_w) VALUES {row}, {row}")
    con.close()
    with connect(db) as con:  # the schema is applied on connect: duplicates dropped, then the key
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 1
        with pytest.raises(duckdb.ConstraintException):
            con.execute(
                f"INSERT INTO gpu_samples (run_id, source, deployment_id, gpu_uuid, t_ns, power_w) VALUES {row}"
            )


def test_an_incomplete_bundle_is_loaded_said_and_recorded(tmp_path, capsys):
    bundle, db = make_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.update(complete=False, errors=[{"kind": "KeyboardInterrupt", "text": "terminated by SIGTERM"}])
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    rc, out, err = ingest(bundle, db, capsys)
    assert rc == 0 and "ingested" in out
    assert "complete=false" in err and "terminated by SIGTERM" in err and "incomplete" in err
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT status FROM runs WHERE run_id = 'r1'").fetchone()[0] == "incomplete"
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 5
    manifest["complete"] = True  # the run finished after all, and its bundle is loaded again
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert ingest(bundle, db, capsys)[0] == 0
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT status FROM runs WHERE run_id = 'r1'").fetchone()[0] == "ingested"


def run_ingest(bundle: Path, db: Path) -> subprocess.CompletedProcess:
    """`wattbench ingest` as its own process, with 1 GiB of address space more than it needs to start and a
    bound on time: the old code hung on a FIFO and read /dev/zero until memory ran out."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "ingest", str(bundle), "--db", str(db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


def test_a_fifo_in_place_of_a_table_is_refused_not_waited_on(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    path = table_file(bundle, "requests")
    path.unlink()
    os.mkfifo(path)
    r = run_ingest(bundle, tmp_path / "w.duckdb")
    assert r.returncode == 2 and f"{path.name}: not a regular file (a FIFO)" in r.stderr, r.stderr[-2000:]
    assert nothing_loaded(tmp_path / "w.duckdb")


def test_a_device_in_place_of_a_table_is_refused(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    path = table_file(bundle, "gpu_samples")
    path.unlink()
    path.symlink_to("/dev/zero")
    r = run_ingest(bundle, tmp_path / "w.duckdb")
    assert r.returncode == 2 and f"{path.name}: not a regular file (a character device)" in r.stderr, r.stderr[-2000:]


def test_a_line_without_end_is_refused_at_a_bound(tmp_path, capsys):
    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    with open(bundle / "requests.jsonl", "ab") as fh:
        fh.write(b"\0" * (17 << 20))  # 17 MiB of zeros, no newline
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "requests.jsonl:6: line longer than 16 MiB" in err
    assert nothing_loaded(db)


def test_non_utf8_bytes_in_a_table_are_named(tmp_path, capsys):
    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    with open(bundle / "requests.jsonl", "ab") as fh:
        fh.write(b'{"request_id": "\xff\xfe"}\n')
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "requests.jsonl:6: not UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "content, expected",
    [
        (b'["run_id", "source"]', "a JSON list; expected a JSON object"),
        (b'{"bundle_version": 1, "run_id": "\xff\xfe", "source": "x"}', "not UTF-8"),
        (b'"just a string"', "a JSON str; expected a JSON object"),
        (b'{"bundle_version": 1, "run_id": ["r"], "source": "emulated"}', "field 'run_id'"),
        (b'{"bundle_version": 1, "run_id": "r", "source": "emulated", "complete": "no"}', "field 'complete'"),
    ],
)
def test_a_manifest_that_is_not_an_object_is_named(tmp_path, capsys, content, expected):
    bundle = make_bundle(tmp_path / "b")
    (bundle / "manifest.json").write_bytes(content)
    rc, _, err = ingest(bundle, tmp_path / "w.duckdb", capsys)
    assert rc == 2 and "manifest.json" in err and expected in err and "Traceback" not in err


def test_a_manifest_that_is_a_directory_is_named(tmp_path, capsys):
    bundle = make_bundle(tmp_path / "b")
    (bundle / "manifest.json").unlink()
    (bundle / "manifest.json").mkdir()
    rc, _, err = ingest(bundle, tmp_path / "w.duckdb", capsys)
    assert rc == 2 and "manifest.json: not a regular file (a directory)" in err


@pytest.mark.parametrize("what", ["text file", "directory"])
def test_an_io_error_is_not_called_a_lock(tmp_path, capsys, what):
    db = tmp_path / "w.duckdb"
    if what == "directory":
        db.mkdir()
    else:
        db.write_text("this is not a database\n" * 100)
    bundle = make_bundle(tmp_path / "b")
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "locked" not in err and str(db) in err and "cannot open" in err


def test_gx_suites_name_non_finite_values_of_every_table(tmp_path):
    """Rows that reach the warehouse another way than ingest are checked again: NaN/Inf in any DOUBLE column of the
    six checked tables fails `<table>.finite` (gpu_samples: `gpu_samples.no_nan`) naming the column."""
    inserts = {
        "engine_builds": (
            "(run_id, source, build_id, model, engine, config_name, status, build_s)",
            "('r', 'emulated', 'b', 'm', 'e', 'c', 'no_build', 'NaN'::DOUBLE)",
            "build_s",
        ),
        "deployments": (
            "(run_id, source, deployment_id, model, engine, config_name, status, startup_s)",
            "('r', 'emulated', 'd', 'm', 'e', 'c', 'healthy', 'inf'::DOUBLE)",
            "startup_s",
        ),
        "load_runs": (
            "(run_id, source, deployment_id, load_point_id, workload, shape, status, window_s, completed, energy_j)",
            "('r', 'emulated', 'd', 'lp', 'w', 'concurrency', 'ok', 30.0, 5, 'NaN'::DOUBLE)",
            "energy_j",
        ),
        "requests": (
            "(run_id, source, deployment_id, load_point_id, request_id, ttft_ms, e2e_ms)",
            "('r', 'emulated', 'd', 'lp', '1', 1.0, '-inf'::DOUBLE)",
            "e2e_ms",
        ),
        "gpu_samples": (
            "(run_id, source, deployment_id, gpu_uuid, t_ns, power_w)",
            "('r', 'emulated', 'd', 'g', 1, 'NaN'::DOUBLE)",
            "power_w",
        ),
        "server_metrics": (
            "(run_id, source, deployment_id, t_ns, metric, labels, value, labels_key)",
            "('r', 'emulated', 'd', 1, 'm', MAP {}, 'inf'::DOUBLE, '[]')",
            "value",
        ),
    }
    with connect(tmp_path / "w.duckdb") as con:
        for table, (cols, values, column) in inserts.items():
            con.execute(f"INSERT INTO {table} {cols} VALUES {values}")
            result = validate_table(table, table_frame(con, table, "r"))
            rule = "gpu_samples.no_nan" if table == "gpu_samples" else f"{table}.finite"
            (bad,) = [o for o in result.errors if o.rule == rule]
            assert bad.sample == [column], (table, bad)


@pytest.mark.parametrize(
    "table, values, rule",
    [
        ("load_runs", {"window_s": -5.0}, "load_runs.window_s_positive"),
        ("load_runs", {"window_s": 0.0}, "load_runs.window_s_positive"),
        ("load_runs", {"energy_j": -1.0}, "load_runs.energy_j_nonnegative"),
        ("requests", {"ttft_ms": -1.0}, "requests.ttft_ms_nonnegative"),
        ("requests", {"e2e_ms": -1.0}, "requests.e2e_ms_nonnegative"),
        ("gpu_samples", {"util_gpu_pct": 150.0}, "gpu_samples.util_gpu_pct_in_range"),
        ("deployments", {"idle_power_w_before": -3.0}, "deployments.idle_power_w_before_nonnegative"),
    ],
)
def test_gx_suites_check_ranges(tmp_path, table, values, rule):
    """The same ranges as ingest, again in the suites: a row that reached the warehouse another way is caught."""
    import pandas as pd

    base = {
        "load_runs": {
            "deployment_id": "d",
            "load_point_id": "lp",
            "workload": "w",
            "window_s": 30.0,
            "status": "ok",
            "completed": 5,
            "shape": "concurrency",
        },
        "requests": {"deployment_id": "d", "load_point_id": "lp", "request_id": "1"},
        "gpu_samples": {"deployment_id": "d", "gpu_uuid": "g", "t_ns": 1},
        "deployments": {"deployment_id": "d", "model": "m", "engine": "e", "config_name": "c", "status": "healthy"},
    }[table]
    frame = pd.DataFrame([{"run_id": "r", "source": "emulated", **base, **values}])  # noqa: F841 (read by DuckDB)
    with connect(tmp_path / "w.duckdb") as con:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM frame")
        result = validate_table(table, table_frame(con, table, "r"))
    assert rule in {o.rule for o in result.errors}, [o.rule for o in result.errors]


@pytest.mark.parametrize("table", ["requests", "gpu_samples", "load_runs"])
@pytest.mark.parametrize(
    "line, expected",
    [("null", "a JSON NoneType; expected a JSON object"), ("[1, 2]", "a JSON list; expected a JSON object")],
)
def test_a_line_that_is_not_an_object_is_named(tmp_path, capsys, table, line, expected):
    """DuckDB reads a line of JSON null as a row of NULLs and refuses an array in its own words: either way the file
    and the line are named, and nothing is loaded."""
    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    path = bundle / f"{table}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], line, *lines[1:]]) + "\n")
    rc, _, err = ingest(bundle, db, capsys)
    assert rc != 0 and f"{table}.jsonl:2: {expected}" in err, err
    assert nothing_loaded(db)


@pytest.mark.parametrize(
    "table, lineno, old, new, expected",
    [
        ("requests", 2, '"ttft_ms": 10.0', '"ttft_ms": "NaN"', "ttft_ms = 'NaN' (a string); expected a number"),
        ("requests", 3, '"e2e_ms": 50.0', '"e2e_ms": "-5"', "e2e_ms = '-5' (a string); expected a number"),
        ("load_runs", 1, '"energy_j": 50.0', '"energy_j": "Infinity"', "energy_j = 'Infinity' (a string)"),
        ("load_runs", 1, '"completed": 5', '"completed": "5"', "completed = '5' (a string); expected a number"),
        ("gpu_samples", 2, '"power_w": 300.0', '"power_w": true', "power_w = True (a JSON bool); expected a number"),
    ],
)
def test_numbers_quoted_as_strings_are_refused_naming_file_line_field_and_value(
    tmp_path, capsys, table, lineno, old, new, expected
):
    """DuckDB reads "NaN", "-5", "Infinity" and "5" into a DOUBLE or BIGINT column without a word: such a bundle
    passed every check (the report then showed tok/J 0 and W inf). Every numeric field must be a JSON number."""
    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    edit_line(bundle / f"{table}.jsonl", lineno, old, new)
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "Traceback" not in err
    assert f"{table}.jsonl:{lineno}: {expected}" in err and "nothing was loaded" in err
    assert nothing_loaded(db)


def test_token_times_that_go_backwards_in_the_chunk_file_are_refused(tmp_path, capsys):
    """A negative inter-token gap would average into ITL p50 -4.4 ms: refused, naming the request's line."""
    import numpy as np

    from wattbench_agent.bundle import CHUNK_FILES

    bundle, db = make_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    path = bundle / CHUNK_FILES["chunk_ns"][0]
    ns = np.fromfile(path, dtype="<i8")
    ns[3:6] = [3, 1, 2]  # the second request's times
    ns.tofile(path)
    rc, _, err = ingest(bundle, db, capsys)
    line = f"{table_file(bundle, 'requests').name}:{line_of(bundle, 'requests', 1)}"  # the second request's
    assert rc == 2 and f"{line}: chunk_ns[1] = 1 is before chunk_ns[0] = 3" in err
    assert "expected token times that never go backwards" in err and nothing_loaded(db)


def test_token_times_that_go_backwards_inline_are_refused(tmp_path, capsys):
    """The same in a version-1 bundle, whose lists are inline in requests.jsonl."""
    from wattbench_agent.bundle import CHUNK_FILES

    bundle, db = json_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    rows = [json.loads(x) for x in (bundle / "requests.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row.pop("chunks")
        row.update(chunk_ns=[1, 3, 2] if i == 3 else [1, 2, 3], chunk_tokens=[1, 1, 1])
    (bundle / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, _, _ in CHUNK_FILES.values():
        (bundle / name).unlink()
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "bundle_version": 1}))
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "requests.jsonl:4: chunk_ns[2] = 2 is before chunk_ns[1] = 3" in err and nothing_loaded(db)


def test_sql_json_output_says_null_for_a_non_finite_value(tmp_path, capsys):
    """`wattbench sql --format json` raised a traceback on an Infinity; JSON has no Infinity: null."""
    db = tmp_path / "w.duckdb"
    with connect(db):
        pass
    assert (
        wattbench(
            ["sql", "SELECT 'inf'::DOUBLE AS x, 'nan'::DOUBLE AS y, 1.5 AS z", "--db", str(db), "--format", "json"]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [{"x": None, "y": None, "z": 1.5}]


def test_a_committed_version1_bundle_loads_within_the_ingest_memory(tmp_path):
    """results/h200-vllm/bundle-steady (version 1: 13,598 requests with their token times inline, 37 MB of JSON lines)
    loads within the default ingest memory on two threads. The numeric-type scan parsed each line once per numeric
    column (25 parses of every request) and ran out of DuckDB's 1 GB there; it now parses a line once for them all."""
    from wattbench.warehouse import INGEST_MEMORY, ingest_bundle
    from wattbench_agent.bundle import unpacked

    assert INGEST_MEMORY == "1GB"
    repo = Path(__file__).resolve().parents[2]
    with connect(tmp_path / "w.duckdb") as con, unpacked(repo / "results/h200-vllm/bundle-steady.tar.xz") as folder:
        con.execute("SET threads = 2")
        counts = ingest_bundle(con, folder)
        assert counts["requests"] == 13_598
        assert con.execute("SELECT count(*) FROM requests WHERE chunk_ns IS NOT NULL").fetchone()[0] > 13_000


def test_a_bundle_cut_at_a_row_boundary_is_refused_naming_the_table(tmp_path, capsys):
    """Before: a bundle whose requests file was cut at a row boundary (60 of 166 rows) while its manifest still
    counted 166 loaded as 'ingested', 106 requests short. The manifest's count of each table's rows (rewritten by the
    agent after every write) holds the files to it: one line naming the table, the count expected and found."""
    bundle, db = make_bundle(tmp_path / "b", n_requests=166), tmp_path / "w.duckdb"
    path = table_file(bundle, "requests")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: line_of(bundle, "requests", 60) - 1]))  # the header and 60 whole rows
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        f"{path}: 60 row(s) of table requests, while manifest.json counts 166 (tables.requests); expected the rows "
        "the agent wrote (a file cut short, or rows added to it?); nothing was loaded"
    ) in err
    assert nothing_loaded(db)
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "tables": {**manifest["tables"], "requests": 50}}))
    rc, _, err = ingest(bundle, db, capsys)  # a complete bundle with rows its manifest does not count
    assert rc == 2 and "60 row(s) of table requests, while manifest.json counts 50" in err and nothing_loaded(db)
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "complete": False, "tables": {"requests": 50}}))
    rc, _, err = ingest(bundle, db, capsys)  # an agent killed after writing rows, before counting them: loaded
    assert rc == 0, err
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 60
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "tables": {"requests": "166"}}))
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and "field 'tables' is {'requests': '166'}; expected an object of table names and their rows" in err


@pytest.mark.parametrize("value", ["abc", "0GB", "1GB'; CREATE TABLE pwned AS SELECT 42 AS x; SET memory_limit = '1GB"])
def test_the_ingest_memory_setting_is_a_size_and_nothing_else(tmp_path, capsys, monkeypatch, value):
    """Before: WATTBENCH_INGEST_MEMORY=abc was DuckDB's parser traceback, and a value with a quote ran the SQL after
    it (the table `pwned` was made in the warehouse). Now it is one line naming the variable; a size still works."""
    bundle, db = make_bundle(tmp_path / "b"), tmp_path / "w.duckdb"
    monkeypatch.setenv("WATTBENCH_INGEST_MEMORY", value)
    rc, _, err = ingest(bundle, db, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    expected = f"WATTBENCH_INGEST_MEMORY = {value[:80]!r}; expected a memory size greater than 0, a number and a unit"
    assert expected in err
    assert nothing_loaded(db)
    with connect(db, read_only=True) as con:
        assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'pwned'").fetchone()[0]
    monkeypatch.setenv("WATTBENCH_INGEST_MEMORY", "512 mib")
    assert ingest(bundle, db, capsys)[0] == 0


def _limited(args: list[str], file_bytes: int) -> subprocess.CompletedProcess:
    """`wattbench ARGS` in its own process that may write no file past `file_bytes` (RLIMIT_FSIZE, SIGXFSZ ignored:
    a write past it fails with EFBIG, as one on a full disk fails with ENOSPC)."""
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


@pytest.mark.parametrize("file_bytes", [64 << 10, 1 << 20])
def test_a_full_disk_is_one_line_and_loses_nothing(tmp_path, file_bytes):
    """Before: a writer's connection rewrote every view at each open, so with no room to write it failed there, a
    traceback (`Failed to commit: Could not write file ... .wal: File too large`); further on, the token store's
    copy failed with `OSError: [Errno 27] File too large` (or a full disk's ENOSPC), and DuckDB's own failure was
    hidden behind `cannot rollback - no transaction is active`. Now opening an up-to-date warehouse writes nothing,
    and a write that fails is one line naming it: nothing of the bundle stays, the warehouse's other run and its
    token file are as they were."""
    from benchmarks.synthetic import synthesize

    db = tmp_path / "w.duckdb"
    synthesize(tmp_path / "a", "a", 2000, requests_per_point=1000)
    synthesize(tmp_path / "b", "b", 2000, requests_per_point=1000, seed=1)
    assert wattbench(["ingest", str(tmp_path / "a"), "--db", str(db)]) == 0
    store = sorted(p.name for p in (tmp_path / "w.duckdb.tokens").iterdir())
    p = _limited(["ingest", str(tmp_path / "b"), "--db", str(db)], file_bytes)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-3000:]
    assert f"{db}: could not write the warehouse while ingesting {tmp_path / 'b'}: " in p.stderr
    assert "File too large" in p.stderr and "nothing of the bundle was loaded (its transaction was rolled back" in (
        p.stderr
    )
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT list(DISTINCT run_id) FROM requests").fetchone()[0] == ["a"]
    assert sorted(p.name for p in (tmp_path / "w.duckdb.tokens").iterdir()) == store
    p = _limited(["sql", "SELECT count(*) AS n FROM v_itl", "--db", str(db), "--format", "csv"], 4096)
    assert p.returncode == 0 and p.stdout.splitlines()[1] != "0", p.stderr


def test_an_interrupted_ingest_says_it_was_rolled_back(tmp_path, capsys, monkeypatch):
    """Before: Ctrl-C while DuckDB ran a query of the ingest was a `RuntimeError: Query interrupted` traceback (it had
    rolled back), and between queries `wattbench: interrupted; everything measured so far is on disk`. Now one line
    says nothing of the bundle was loaded, exit 130, and nothing of it stays: its rows, nor its token file. The
    interrupt comes during a query the ingest runs (its kept figures), from a timer, as Ctrl-C would."""
    import signal
    import threading

    from benchmarks.synthetic import synthesize
    from wattbench import warehouse

    synthesize(tmp_path / "b", "b", 2000, requests_per_point=1000)
    db = tmp_path / "w.duckdb"
    real = warehouse.refresh_point_stats

    def slow_figures(con, run_id, events=None):  # a long query of the ingest's, interrupted as Ctrl-C would
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        con.execute("SELECT count(*) FROM range(10000000000) t(i) WHERE i % 7 = 3").fetchall()
        return real(con, run_id, events=events)

    monkeypatch.setattr(warehouse, "refresh_point_stats", slow_figures)
    # Python's own SIGINT handler, as in a terminal: pytest started in the background of a non-interactive shell
    # (`nohup make test &`) inherits SIGINT ignored, and the timer's Ctrl-C was then lost (the query ran to its end)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        rc, _, err = ingest(tmp_path / "b", db, capsys)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130 and err.strip() == (
        f"wattbench: {tmp_path / 'b'}: interrupted; nothing of it was loaded (its transaction was rolled back)"
    )
    assert nothing_loaded(db) and not list((tmp_path / "w.duckdb.tokens").glob("*.bin"))
