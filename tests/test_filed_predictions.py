"""The twin's filed predictions against the H200's bundles: the committed comparison is what the bundles give, and a
point filed but never measured gets no row (nothing invented)."""

import json
import shutil
from pathlib import Path

from benchmarks.filed_predictions import compare, markdown

SWEEP = Path("results/h200-vllm-sweep")
PLAN = Path("plans/h200-vllm-sweep.yaml")


def test_committed_comparison_is_what_the_bundles_give(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    shutil.copy(SWEEP / "bundle-sweep.tar.xz", folder)
    filed = json.loads((SWEEP / "predictions.json").read_text())
    filed["points"].append({**filed["points"][0], "point": "sweep:c3"})  # filed, never measured
    (folder / "predictions.json").write_text(json.dumps(filed))
    result = compare(folder, PLAN)
    committed = json.loads((SWEEP / "comparison.json").read_text())
    sweep_rows = [r for r in committed["rows"] if r["point"].startswith("sweep:")]
    assert result["rows"] == sweep_rows
    assert not any(r["point"] == "sweep:c3" for r in result["rows"])
    for r in result["rows"]:
        assert r["meets_goal"] == (abs(r["predicted"] / r["measured"] - 1) <= r["goal"])
    assert "| tok/s (goal 10%) | 6 |" in markdown(result)
