"""The step decomposition the warehouse makes from the token times (wattbench/step_fill.py, the compiled pass of
wattbench/token_pass.py) equals the agent's (wattbench_agent.loadgen.steps.decompose) over the same requests: from a
version-3 bundle's chunk files, from a version-1 bundle's inline lists, and for the rows of a version-11 warehouse,
whose figures of the older definitions are made again."""

from __future__ import annotations

import json
import math

import pytest

from tests.loadgen.timelines import MS, closed_loop, hold
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import BundleWriter
from wattbench_agent.loadgen import steps

DEP = "d"


def _points() -> dict[str, tuple[int, list[dict], list[dict]]]:
    """{load point: (streams, its in-window successful requests, all its requests)} with what the decomposition must
    tell apart: prefills alone and in pairs, a delivery stall, a burst carrying a prefill, prefills of requests outside
    the window and of a failed one, and an expected stalled share above 0.3."""
    spread = closed_loop(4, 41)
    spread[5] = hold(spread[5], 22, 4)  # a delivery stall
    # held over group 1's prefill step, whose first token came out before the burst: a delivery stall too (the
    # length of its gap is the host's)
    spread[7] = hold(spread[7], 10, 3)
    pairs = closed_loop(4, 41, 2, periods=24)
    for r in pairs[::7]:  # sent outside the window: not counted, but their first tokens mark shared steps
        r["in_window"] = False
    failed = dict(pairs[3], error_kind="http_500", request_id="failed")
    # one event: a prefill, no gap (carrying its 41 tokens, as the agent splits a request's tokens over its events)
    pairs[3] = dict(pairs[3], chunk_ns=pairs[3]["chunk_ns"][:1], chunk_tokens=[41])
    busy = closed_loop(16, 41)
    out = {}
    for lp, c, recs in (("spread", 4, spread), ("pairs", 4, pairs + [failed]), ("busy", 16, busy)):
        recs = [dict(r, request_id=f"{lp}-{i}", deployment_id=DEP, load_point_id=lp) for i, r in enumerate(recs)]
        pool = [r for r in recs if r["error_kind"] is None and r["in_window"]]
        out[lp] = (c, pool, recs)
    return out


def _bundle(folder, version: int):
    points = _points()
    with BundleWriter(folder, run_id="steps", source="emulated") as w:
        w.write(
            "deployments",
            [{"deployment_id": DEP, "model": "m", "engine": "emulator", "config_name": "c", "status": "healthy"}],
        )
        w.write(
            "load_runs",
            [
                {
                    "deployment_id": DEP,
                    "load_point_id": lp,
                    "workload": "w",
                    "shape": "concurrency",
                    "concurrency": c,
                    "window_start_ns": 500 * MS,
                    "window_end_ns": 10**13,
                    "status": "ok",
                }
                for lp, (c, _, _) in points.items()
            ],
        )
        if version >= 2:
            w.write("requests", [r for _, _, recs in points.values() for r in recs])
    if version == 1:  # every list inline, as agents before version 2 wrote them
        with open(folder / "requests.jsonl", "w") as f:
            for _, _, recs in points.values():
                for r in recs:
                    f.write(json.dumps({**r, "run_id": "steps", "source": "emulated"}) + "\n")
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["bundle_version"] = 1
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return points


def _stored(con) -> dict[str, dict]:
    cols = list(steps.COLUMNS)
    rows = con.execute(f"SELECT load_point_id, {', '.join(cols)} FROM load_runs").fetchall()
    return {r[0]: dict(zip(cols, r[1:], strict=True)) for r in rows}


def _same(got: dict, points) -> None:
    assert set(got) == set(points)
    for lp, (c, pool, recs) in points.items():
        want = steps.load_run_columns(steps.decompose(pool, closed_loop=True, concurrency=c, all_records=recs))
        for col, value in want.items():
            a = got[lp][col]
            assert a == value or (isinstance(a, float) and math.isclose(a, value, rel_tol=1e-12)), (lp, col, a, value)


@pytest.mark.parametrize("version", [3, 1])
def test_the_warehouse_makes_the_agents_decomposition(tmp_path, version):
    points = _bundle(tmp_path / "b", version)
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, tmp_path / "b")
        got = _stored(con)
    _same(got, points)
    # what the timelines hold: the decomposition tells them apart
    assert got["spread"]["delivery_stalls"] == 2 and got["spread"]["phase_state"] == "spread"
    # 48 pairs, one with the failed request's prefill in its step too
    assert got["pairs"]["prefills_per_step"] == 97 / 48 and got["pairs"]["phase_state"] == "bunched"
    assert got["pairs"]["shared_prefill_fraction"] == 1.0
    assert got["busy"]["phase_state"] is None and "above 0.3" in got["busy"]["phase_note"]


def test_a_version_11_warehouse_has_its_decomposition_made_again(tmp_path):
    """Rows of the older definitions (a stalled share with delivery stalls in it, a phase from the stalled share) are
    made again from the requests at the first connection; a row without requests loses its old label, saying why."""
    points = _bundle(tmp_path / "b", 3)
    db = tmp_path / "v11.duckdb"
    with connect(db) as con:
        ingest_bundle(con, tmp_path / "b")
        new = set(steps.COLUMNS) - {"step_gaps", "decode_step_ms", "stalled_gap_fraction", "stall_ms_mean"}
        new -= {"expected_stalled_fraction", "phase_state"}
        con.execute(
            f"UPDATE load_runs SET {', '.join(f'{c} = NULL' for c in new)}, phase_state = 'bunched', "
            "stall_ms_mean = 99.0"
        )
        con.execute(
            "INSERT INTO load_runs (run_id, source, deployment_id, load_point_id, workload, shape, status, "
            "phase_state) VALUES ('old', 'emulated', 'd', 'gone', 'w', 'concurrency', 'ok', 'spread')"
        )
        con.execute("DELETE FROM schema_version")
        con.execute("INSERT INTO schema_version (version) VALUES (11)")
    with connect(db) as con:
        got = _stored(con)
    old = got.pop("gone")
    _same(got, points)
    assert old["phase_state"] is None and "not made again" in old["phase_note"]


def test_the_compiled_pass_uses_the_agents_thresholds():
    from wattbench import token_pass

    assert token_pass.STALL_FACTOR == steps.STALL_FACTOR
    assert round(steps.BURST_MS * 1e6) == token_pass.BURST_NS
