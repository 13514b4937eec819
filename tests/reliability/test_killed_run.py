"""A run killed mid-way and run again: what was measured before the kill stays on disk as a bundle that
`wattbench ingest` loads (manifest complete=false); running again keeps the partial attempt aside and
ingesting again leaves no duplicate rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.cli import main as wattbench
from tests.reliability.conftest import emulator_spec, rows
from wattbench.warehouse import connect
from wattbench_agent.bundle import read_manifest

REPO = Path(__file__).resolve().parents[2]
KEYS = {
    "load_runs": "load_point_id",
    "requests": "load_point_id, request_id",
    "energy_windows": "deployment_id, window_name, gpu_uuid",
    "deployments": "deployment_id",
    "gpu_samples": "deployment_id, gpu_uuid, t_ns",
}


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (the engine server the agent started runs in its own session)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_agent(spec: dict, tmp: Path) -> tuple[subprocess.Popen, Path]:
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    err = tmp / f"agent-{time.monotonic_ns()}.err"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DAGSTER_PIPES_CONTEXT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "wattbench_agent", "--spec", str(spec_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(err, "w"),
        text=True,
    )
    return proc, err


def wait_for_first_point(bundle: Path, proc: subprocess.Popen, err: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lr = bundle / "load_runs.jsonl"
        if lr.exists() and lr.read_text().count("\n") >= 1:
            return
        assert proc.poll() is None, f"agent exited early: {err.read_text()[-2000:]}"
        time.sleep(0.05)
    raise AssertionError(f"no load point finished within {timeout_s} s: {err.read_text()[-2000:]}")


def stop_leftovers(pids: list[int]) -> list[int]:
    """Kill (by id) the processes the killed agent left behind; returns those that were still running."""
    left = [p for p in pids if alive(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def counts(db: Path, run_id: str) -> dict[str, tuple[int, int]]:
    """rows and distinct keys per table of a run."""
    with connect(db, read_only=True) as con:
        return {
            t: con.execute(f"SELECT count(*), count(DISTINCT ({k})) FROM {t} WHERE run_id = ?", [run_id]).fetchone()
            for t, k in KEYS.items()
        }


def test_killed_run_leaves_a_loadable_bundle_and_a_rerun_duplicates_nothing(tmp_path, capsys):
    bundle, db = tmp_path / "bundle", tmp_path / "w.duckdb"
    spec = emulator_spec("r-killed", bundle, n_points=3, duration_s=1.0)
    proc, err = start_agent(spec, tmp_path)
    try:
        wait_for_first_point(bundle, proc, err)
        under = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stop_leftovers(under)  # SIGKILL cannot be caught: the engine server outlives the agent (see RELIABILITY.md)

    manifest = read_manifest(bundle)
    assert manifest["complete"] is False
    assert manifest["tables"]["load_runs"] >= 1 and manifest["tables"]["requests"] >= 1
    finished = [r["load_point_id"] for r in rows(bundle, "load_runs")]
    assert finished and len(finished) < 3

    # `wattbench ingest` loads the partial bundle
    assert wattbench(["ingest", str(bundle), "--db", str(db)]) == 0
    assert "ingested" in capsys.readouterr().out
    first = counts(db, "r-killed")
    assert first["load_runs"] == (len(finished), len(finished))
    assert first["requests"][0] == len(rows(bundle, "requests")) > 0
    assert all(n == distinct for n, distinct in first.values())

    # run again (same spec, same folder) to the end, ingest again: every key once, the earlier attempt kept
    proc, err = start_agent(spec, tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.read_text()[-2000:]
    assert "held an earlier attempt of run r-killed" in err.read_text()
    assert read_manifest(bundle)["complete"] is True
    attempt = bundle / "attempts" / "1"
    assert (
        read_manifest(attempt)["complete"] is False
        and [r["load_point_id"] for r in rows(attempt, "load_runs")] == finished
    )

    assert wattbench(["ingest", str(bundle), "--db", str(db)]) == 0
    assert wattbench(["ingest", str(bundle), "--db", str(db)]) == 0  # and once more: idempotent
    again = counts(db, "r-killed")
    assert again["load_runs"] == (3, 3) and again["deployments"] == (1, 1)
    assert all(n == distinct for n, distinct in again.values()), again
    assert again["requests"][0] == len(rows(bundle, "requests"))  # the rerun's rows, not the killed attempt's too


def test_sigterm_stops_the_engine_and_closes_the_bundle(tmp_path):
    bundle = tmp_path / "bundle"
    proc, err = start_agent(emulator_spec("r-term", bundle, n_points=3, duration_s=1.0), tmp_path)
    try:
        wait_for_first_point(bundle, proc, err)
        under = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(0.5)
    assert not stop_leftovers(under), "the engine server outlived a SIGTERMed agent"
    message = err.read_text()
    assert "interrupted (terminated" in message and f"{bundle} keeps every load point finished" in message
    assert f"wattbench ingest {bundle}" in message
    manifest = read_manifest(bundle)
    assert manifest["complete"] is False and manifest["errors"]
    (dep,) = rows(bundle, "deployments")
    assert dep["error_kind"] == "interrupted" and dep["status"] == "failed"
    with connect(tmp_path / "w.duckdb") as con:
        from wattbench.warehouse import ingest_bundle

        assert ingest_bundle(con, bundle)["load_runs"] >= 1
