"""The twin's filed predictions against the H200's bundles: the committed comparison is what the bundles give, and a
point filed but never measured gets no row (nothing invented)."""

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.filed_predictions import compare, criteria_markdown, markdown, score_criteria, score_part

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
    assert [n for n in result["not_measured"] if "sweep:c3" in n] == [f"{filed['points'][0]['engine']} sweep:c3"]
    for r in result["rows"]:
        assert r["meets_goal"] == (abs(r["predicted"] / r["measured"] - 1) <= r["goal"])
        assert r["verdict"] == ("holds" if r["meets_goal"] else "fails")
    text = markdown(result)
    assert "| tok/s (goal 10%) | 6 |" in text
    assert f"Not measured ({len(result['not_measured'])} filed): " in text and "sweep:c3" in text
    verdicts = {line.rsplit("|", 2)[-2].strip() for line in text.splitlines() if line.startswith("| vllm-")}
    assert verdicts == {"holds", "fails"}  # the filed words' verdicts, never yes/no


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


STEPS = Path("results/h200-vllm-steps")


def test_the_steps_predictions_are_scored_by_their_filed_words():
    """P1-P5 were filed in words (predictions.md) before the first GPU's run; criteria.json quotes them and says
    what their numbers check. A prediction whose measured part misses its filed number fails, whatever the reason;
    one whose second GPU never ran is not measured. (The run's README first scored P1 'holds' and P5 'half'.)"""
    scored = {p["id"]: p for p in score_criteria(STEPS, Path("plans/h200-vllm-steps.yaml"))}
    committed = json.loads((STEPS / "comparison.json").read_text())["criteria"]
    assert [p["id"] for p in committed] == list(scored) and all(scored[p["id"]] == p for p in committed)
    p1 = {part["what"]: part for part in scored["P1"]["parts"]}
    assert scored["P1"]["verdict"] == "fails"
    assert p1["fp8 fixed16 d within 3.6-3.8 ms, each GPU"]["verdict"] == "fails"  # fp8's fastest repeat: under 3.6
    assert "fails, d 3.583-3.778 ms" in p1["fp8 fixed16 d within 3.6-3.8 ms, each GPU"]["measured"]
    assert "largest 2.98% from their mean" in p1["fp8: every repeat's d within 2% of the mean"]["measured"]
    assert p1["bf16 fixed16 d within 5.0-5.4 ms, each GPU"]["verdict"] == "not measured"  # holds on gpu1 only
    assert scored["P3"]["verdict"] == "fails"
    assert scored["P5"]["verdict"] == "fails"
    assert "gpu_throttled in 22 of 24 windows" in scored["P5"]["parts"][1]["measured"]
    assert scored["P2"]["verdict"] == scored["P4"]["verdict"] == "not measured"
    assert all(scored[q]["verdict"] == "not measured" for q in ("Q1", "Q2", "Q3", "Q4", "Q5"))
    text = criteria_markdown(list(scored.values()))
    assert "| **P1: fails** |" in text and "half" not in text


def test_a_quote_not_in_the_filed_words_is_refused(tmp_path):
    """A transcription that drifts from what was filed cannot be scored: one line naming the prediction and the
    file, before any bundle is read."""
    folder = tmp_path / "steps"
    folder.mkdir()
    shutil.copy(STEPS / "predictions.md", folder)
    doc = json.loads((STEPS / "criteria.json").read_text())
    doc["predictions"][0]["filed"] = doc["predictions"][0]["filed"].replace("3.6-3.8 ms", "3.5-3.8 ms")
    (folder / "criteria.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"P1's quote is not in .*predictions.md; expected the filed words verbatim"):
        score_criteria(folder, Path("plans/h200-vllm-steps.yaml"))


def _windows(gpu_d: dict[str, list[float]]) -> dict[str, list[dict]]:
    return {g: [{"precision": "fp8", "d": d, "host": {}} for d in ds] for g, ds in gpu_d.items()}


def test_a_part_holds_only_where_every_gpu_it_names_was_measured():
    """'on each GPU': one GPU outside the range fails the part; every measured one inside but one GPU never run is
    'not measured'; 'on at least one GPU' holds on one, and fails only when every GPU was measured; GPUs compared
    need both."""
    part = {"what": "d in range", "check": "range", "figure": "d", "gpus": ["gpu1", "gpu2"], "lo": 3.6, "hi": 3.8}
    assert score_part(part, _windows({"gpu1": [3.65, 3.7]}))["verdict"] == "not measured"
    assert score_part(part, _windows({"gpu1": [3.58, 3.7]}))["verdict"] == "fails"
    assert score_part(part, _windows({"gpu1": [3.65], "gpu2": [3.7]}))["verdict"] == "holds"
    anyone = {**part, "mode": "any"}
    assert score_part(anyone, _windows({"gpu1": [3.5]}))["verdict"] == "not measured"
    assert score_part(anyone, _windows({"gpu1": [3.5], "gpu2": [3.9]}))["verdict"] == "fails"
    assert score_part(anyone, _windows({"gpu1": [3.5], "gpu2": [3.7]}))["verdict"] == "holds"
    across = {"what": "means within 3%", "mode": "across", "figure": "d", "gpus": ["gpu1", "gpu2"], "hi": 0.03}
    assert score_part(across, _windows({"gpu1": [3.6]}))["verdict"] == "not measured"
    assert score_part(across, _windows({"gpu1": [3.6], "gpu2": [3.8]}))["verdict"] == "fails"
