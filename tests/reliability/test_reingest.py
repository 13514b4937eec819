"""Re-ingesting a run that is already complete: the same bundle again changes nothing; a bundle with other rows for
that run id (8 of its 9 points missing) is refused with one line instead of silently replacing the run's rows, and
`--replace` drops the old rows and loads the new in one transaction. The refused path and the replacing path run as
`wattbench ingest` processes, each exiting with its own code (never a signal) every time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main as wattbench
from tests.reports.synth import Deployment, simple_point, write_run
from wattbench.warehouse import connect
from wattbench_agent.bundle import BundleWriter, read_manifest

REPO = Path(__file__).resolve().parents[2]


def _points(db: Path, run_id: str = "r") -> list[str]:
    with connect(db, read_only=True) as con:
        rows = con.execute("SELECT load_point_id FROM load_runs WHERE run_id = ? ORDER BY 1", [run_id]).fetchall()
        return [r[0] for r in rows]


def _one_point_bundle(tmp: Path, full: Path) -> Path:
    """The first of the full bundle's nine load points (and its requests, deployments), under the same run id."""
    from wattbench.warehouse import ingest_bundle

    out = tmp / "one"
    manifest = read_manifest(full)
    tables = {}
    with connect(tmp / "scratch.duckdb") as con:
        ingest_bundle(con, full)
        lp = con.execute("SELECT min(load_point_id) FROM load_runs").fetchone()[0]
        for table, where in (
            ("deployments", ""),
            ("load_runs", " AND load_point_id = ?"),
            ("requests", " AND load_point_id = ?"),
        ):
            columns = "* EXCLUDE (run_id)"
            if table == "requests":  # the token times as every reader reads them (sql/views.sql request_ns, ...)
                columns = """* EXCLUDE (run_id, chunk_tokens_each, events_file, events_at, events_n, counts_file)
                             REPLACE (request_ns(chunk_ns, events_file, events_at, events_n) AS chunk_ns,
                                      request_tokens(chunk_tokens, chunk_tokens_each, counts_file, events_at,
                                                     events_n, request_ns(chunk_ns, events_file, events_at,
                                                                          events_n)) AS chunk_tokens)"""
            cur = con.execute(f"SELECT {columns} FROM {table} WHERE true{where}", [lp] if where else [])
            names = [d[0] for d in cur.description]
            rows = [{k: v for k, v in zip(names, r) if v is not None} for r in cur.fetchall()]
            tables[table] = rows
    with BundleWriter(out, run_id=manifest["run_id"], source=manifest["source"]) as w:
        for table, rows in tables.items():
            w.write(table, rows)
    return out


@pytest.fixture
def complete_run(tmp_path):
    """A complete run of nine load points (three points x three repeats), and a bundle of one of them, same run id."""
    db = tmp_path / "w.duckdb"
    points = [simple_point(f"c{c}", 5.0 + c, repeat=r) for c in (1, 2, 3) for r in (1, 2, 3)]
    write_run(db, tmp_path, "r", [Deployment("d", points=points)])
    return db, tmp_path / "bundle-r", _one_point_bundle(tmp_path, tmp_path / "bundle-r")


def test_the_same_bundle_again_changes_nothing(complete_run, capsys):
    db, full, _ = complete_run
    before = _points(db)
    assert wattbench(["ingest", str(full), "--db", str(db)]) == 0
    assert _points(db) == before and len(before) == 9


def test_other_rows_for_a_complete_run_are_refused_and_replace_swaps_them_in_one_transaction(complete_run, capsys):
    """Before: the bundle of one point replaced the run's rows (8 of 9 points deleted, the run still complete)."""
    db, _, one = complete_run
    before = _points(db)
    assert wattbench(["ingest", str(one), "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (
        "run r is already complete in the warehouse, and this bundle would change the rows of its deployment(s) d ("
        in err
    )
    assert "load_runs 9 -> 1 rows" in err and f"wattbench ingest {one} --replace" in err
    assert _points(db) == before  # nothing changed
    assert wattbench(["ingest", str(one), "--db", str(db), "--replace"]) == 0
    after = _points(db)
    assert len(after) == 1 and after[0] in before
    with connect(db, read_only=True) as con:
        status = con.execute("SELECT status FROM runs WHERE run_id = 'r'").fetchone()[0]
        kept = con.execute("SELECT count(DISTINCT load_point_id) FROM load_points_core WHERE run_id = 'r'").fetchone()
        stale = con.execute("SELECT count(*) FROM validation_results WHERE run_id = 'r'").fetchone()[0]
    assert status == "ingested" and kept == (1,) and stale == 0  # its figures are the new rows'; not yet validated


def test_the_refused_and_the_replacing_ingest_exit_cleanly_every_time(complete_run, tmp_path):
    """`wattbench ingest` on this path, 20 times, each in its own process on a fresh copy of the complete run,
    refused and replacing in turn: an exit code every time, never a signal (this path was seen to exit with SIGSEGV
    about 3 times in 10, on close; docs/RELIABILITY.md says what was found and removed)."""
    import shutil

    db, _, one = complete_run
    for i in range(20):
        copy = tmp_path / f"w{i}.duckdb"
        shutil.copy(db, copy)
        replace = ["--replace"] if i % 2 else []
        p = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "ingest", str(one), "--db", str(copy), *replace],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == (0 if replace else 2), (i, p.returncode, p.stderr[-2000:])
        assert len(_points(copy)) == (1 if replace else 9)


def _metrics_bundle(folder: Path, run_id: str, samples: int = 1300) -> Path:
    """A small bundle of one deployment 'd' and its /metrics samples, each with labels (what the re-ingest crash
    needed: rows of server_metrics, keyed by their labels, in a warehouse that holds another run's too)."""
    with BundleWriter(folder, run_id=run_id, source="emulated") as w:
        w.write(
            "deployments",
            [{"deployment_id": "d", "model": "m", "engine": "e", "config_name": "d", "status": "healthy"}],
        )
        w.write(
            "server_metrics",
            [
                {
                    "deployment_id": "d",
                    "t_ns": 10**9 * (i // 12),
                    "metric": f"vllm:m{i % 4}",
                    "labels": {"engine": "0", "model_name": "m", "le": str(i % 3)},
                    "value": float(i),
                }
                for i in range(samples)
            ],
        )
    return folder


def test_reingesting_a_run_beside_another_never_crashes(tmp_path):
    """The sequence that exited with SIGSEGV (24 of 50 here, on close) before server_metrics' unique key was an index
    on an expression: a warehouse holding two runs, and `wattbench ingest` of one of them again, in its own process,
    50 times (two at a time), each on a fresh copy of the warehouse. Every process exits 0 and the rows stay."""
    import shutil

    first, second = _metrics_bundle(tmp_path / "r1", "r1"), _metrics_bundle(tmp_path / "r2", "r2")
    base = tmp_path / "base.duckdb"
    with connect(base) as con:
        from wattbench.warehouse import ingest_bundle

        ingest_bundle(con, first)
        ingest_bundle(con, second)

    def start(i: int) -> tuple[Path, subprocess.Popen]:
        copy = tmp_path / f"w{i}.duckdb"
        shutil.copy(base, copy)
        cmd = [sys.executable, "-m", "pipelines.cli", "ingest", str(first), "--db", str(copy)]
        return copy, subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    codes = []
    for i in range(0, 50, 2):
        pair = [start(i), start(i + 1)]
        for copy, proc in pair:
            _, err = proc.communicate(timeout=120)
            codes.append(proc.returncode)
            assert proc.returncode == 0, (len(codes), proc.returncode, err[-2000:])
            copy.unlink()
    assert codes == [0] * 50
    copy, proc = start(50)
    assert proc.wait(timeout=120) == 0
    with connect(copy, read_only=True) as con:
        counts = con.execute("SELECT run_id, count(*) FROM server_metrics GROUP BY 1 ORDER BY 1").fetchall()
    assert counts == [("r1", 1300), ("r2", 1300)]
