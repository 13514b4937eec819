"""The twin's filed predictions against the H200's bundles: the committed comparison is what the bundles give, and a
point filed but never measured gets no row (nothing invented)."""

import json
import shutil
from pathlib import Path

import pytest

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
    assert len(result["rows"]) == len(sweep_rows)
    for got, kept in zip(result["rows"], sweep_rows, strict=True):  # floats to the last bits of summation order
        assert got == {k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in kept.items()}
    assert not any(r["point"] == "sweep:c3" for r in result["rows"])
    for r in result["rows"]:
        assert r["meets_goal"] == (abs(r["predicted"] / r["measured"] - 1) <= r["goal"])
    assert "| tok/s (goal 10%) | 6 |" in markdown(result)


def test_every_filing_of_a_folder_is_read_and_a_folder_without_one_is_refused(tmp_path):
    """A folder whose runs used two plans files one prediction per plan (predictions.json, predictions-<x>.json):
    both filings' points count, each filing's time is kept; a folder with none says what is missing."""
    from benchmarks.filed_predictions import filed

    unit = Path("results/h200-vllm-unit")
    both = filed(unit)
    one = json.loads((unit / "predictions.json").read_text())
    other = json.loads((unit / "predictions-c32long.json").read_text())
    assert len(both["points"]) == len(one["points"]) + len(other["points"])
    assert one["predicted_at"] in both["predicted_at"] and other["predicted_at"] in both["predicted_at"]
    with pytest.raises(FileNotFoundError, match="no predictions.json"):
        filed(tmp_path)


def test_a_point_measured_once_has_no_interval_and_says_so():
    result = {
        "rows": [
            {
                "engine": "e",
                "point": "long:c32",
                "figure": "output_tok_s",
                "measured": 3580.0,
                "measured_lo": None,
                "measured_hi": None,
                "predicted": 3895.0,
                "error": 3895 / 3580 - 1,
                "goal": 0.1,
                "meets_goal": True,
            }
        ],
        "summary": {},
    }
    assert "3,580 [n/a: no interval]" in markdown(result)
