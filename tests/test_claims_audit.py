"""The claims audit (results/claims_audit.py): its figures, recomputed from a bundle's own records, are the
warehouse's (a second implementation that agrees with the first), and the committed audit record is what the
committed bundles give (so a claim that stops matching the data is caught where it is written down)."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.filed_predictions import bundle_tables, windows_from
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import read_manifest, unpacked

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "results"))

import claims_audit  # noqa: E402

LIGHT = ROOT / "results" / "h200-vllm" / "bundle-light.tar.xz"


def test_the_recomputed_figures_are_the_warehouses():
    """Every point of a committed bundle: tok/s, W, tok/J (mean and 95% interval over the repeats of its one server
    start) and TTFT / TPOT p50 (the mean of each repeat's own, with its interval where there is one) recomputed from
    the records equal v_point_figures over the same bundle (its estimate, and its within-start spread as the
    within-start interval)."""
    with tempfile.TemporaryDirectory() as tmp, connect(Path(tmp) / "w.duckdb") as con, unpacked(LIGHT) as folder:
        run_id = read_manifest(folder)["run_id"]
        windows = windows_from(bundle_tables(folder), run_id, LIGHT.name)
        ingest_bundle(con, folder)
        rows = con.execute(
            f"SELECT * EXCLUDE (run_id) FROM ({claims_audit.WITHIN_START_FIGURES}) WHERE metric IN "
            "('output_tok_s', 'counter_w_per_gpu', 'output_tokens_per_j', 'ttft_p50_ms', 'tpot_p50_ms')"
        ).fetchall()
    data = claims_audit.Data(windows, [], [], {})
    fig = {"output_tok_s": "tok_s", "counter_w_per_gpu": "w", "output_tokens_per_j": "tok_j"}
    assert len(rows) == 4 * 5  # two engines x two points x five figures
    for engine, wl, pt, metric, est, lo, hi in rows:
        where = {"engine": engine, "workload": wl, "point": pt}
        if metric in fig:
            mine = data.fig(fig[metric], run_id, **where)
        else:
            mine = data.pct(metric[:4] + "_ms", 50, run_id, **where)
        assert mine[0] == pytest.approx(est, rel=1e-9)
        assert (mine[1] is None) == (lo is None) and (mine[2] is None) == (hi is None)
        if lo is not None:  # the warehouse's t quantile agrees to about 1e-4 on wide intervals
            assert mine[1] == pytest.approx(lo, rel=1e-3) and mine[2] == pytest.approx(hi, rel=1e-3)


@pytest.mark.slow
def test_the_committed_audit_is_what_the_committed_bundles_give():
    """results/claims_audit.md's table, made again from every committed bundle (about 90 s on 2 cores)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "results" / "claims_audit.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
