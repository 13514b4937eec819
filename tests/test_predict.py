"""`wattbench predict --plan PLAN`: the twin's figures for a configuration never measured, labelled predicted, each
with the validated error band, filed as a run with source 'predicted' that the capacity plan reads (marked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from pipelines.predict_cli import extrapolation
from resources.warehouse import connect, run_sql

PLAN = {
    "name": "predict-test",
    "model": "meta-llama/Llama-3.1-70B-Instruct",
    "gpu": "h200",
    "engines": [
        {
            "name": "vllm-fp8-tp4",
            "engine": "vllm",
            "precision": "fp8",
            "tp": 4,
            "options": {"max_num_seqs": 64, "max_model_len": 4096},
        },
        {"name": "trt-fp8-tp4", "engine": "trtllm", "precision": "fp8", "tp": 4, "options": {"max_batch_size": 64}},
        {"name": "sglang", "engine": "sglang", "precision": "fp8", "tp": 4},
    ],
    "workloads": [
        {
            "name": "steady",
            "input_tokens": 512,
            "output_tokens": 64,
            "warmup_s": 3,
            "duration_s": 6,
            "points": [{"shape": "concurrency"}],
            "sweep": {"concurrency": [4, 16]},
            "load_options": {"ramp_s": 1},
        }
    ],
    "prices": {"gpu_hour_usd": 3.5},
    "slo": {"ttft_ms": 2000, "tpot_ms": 100},
    "capacity": {"steady_qps": 2, "peak_qps": 5, "input_tokens": 512, "output_tokens": 64},
}


@pytest.fixture
def plan(tmp_path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    return path


def test_predict_files_a_predicted_run_the_capacity_plan_reads(plan, tmp_path, capsys):
    db = tmp_path / "wh.duckdb"
    assert main(["predict", "--plan", str(plan), "--db", str(db), "--run-id", "pred-1"]) == 0
    out, err = capsys.readouterr()
    assert "(predicted)" in out and "vllm-fp8-tp4" in out and "trt-fp8-tp4" in out
    assert "PREDICTED" in err and "extrapolates" in err and "TP 4" in err
    assert "sglang" not in out  # no twin for it: said so, not invented
    with connect(db, read_only=True) as con:
        assert con.execute(
            "SELECT source, plan_name, gpu_price_per_hour FROM runs WHERE run_id = 'pred-1'"
        ).fetchone() == ("predicted", "predict-test", 3.5)
        pts = con.execute(
            "SELECT engine, point_label, source, output_tok_s, ttft_p50_ms, counter_w_per_gpu, "
            "n_gpus FROM v_load_points WHERE run_id = 'pred-1' ORDER BY engine, concurrency"
        ).fetchall()
        cap = run_sql(
            con,
            "capacity_plan",
            {"run_id": "pred-1", "steady_qps": 2, "peak_qps": 5, "input_tokens": 512, "output_tokens": 64},
        )
    assert len(pts) == 4 and {p[2] for p in pts} == {"predicted"} and {p[6] for p in pts} == {4}
    for _e, _l, _s, tok_s, ttft, w, _n in pts:
        assert tok_s > 0 and ttft > 0 and 132 <= w <= 700
    by = {(p[0], p[1]): p for p in pts}
    assert by[("vllm-fp8-tp4", "c16")][3] > by[("vllm-fp8-tp4", "c4")][3]
    assert set(cap["source"]) == {"predicted"} and (cap["peak_gpus"] > 0).all()


def test_predict_band_and_domain(plan, tmp_path, capsys, monkeypatch):
    import pipelines.predict_cli as pc

    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"error_bands": {"output_tok_s": 0.08, "ttft_p50_ms": 0.21}}))
    monkeypatch.setattr(pc, "FIT_RESULTS", fit)
    assert main(["predict", "--plan", str(plan), "--no-store"]) == 0
    out = capsys.readouterr().out
    vllm_rows = [line for line in out.splitlines() if line.startswith("| vllm-fp8-tp4")]
    trt_rows = [line for line in out.splitlines() if line.startswith("| trt-fp8-tp4")]
    assert vllm_rows and all("±8%" in r and "±21%" in r for r in vllm_rows)
    assert trt_rows and all("±n/a" in r and "±8%" not in r for r in trt_rows)  # assumed factors: no band
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513) == []
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513, "online") == []
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513, "checkpoint") == []
    assert extrapolation("vllm-like", "llama-3.1-70b", "h100-sxm", 4, "bf16", 8000) == [
        "model llama-3.1-70b",
        "GPU h100-sxm",
        "TP 4",
        "8000-token prompts",
    ]


def test_shipped_band_is_the_fits_held_out_error():
    """The band `wattbench predict` prints is computed from the twin's held-out errors on real H200 points
    (benchmarks/twin_fit.py), not written by hand: every figure's band is the largest |error| of its
    leave-one-workload-out rows (from fits that never saw the point's workload) and of the final fit's rows on the
    held-out sweep (points the final fit never saw)."""
    import pipelines.predict_cli as pc

    fit = json.loads(pc.FIT_RESULTS.read_text())
    rows = [r for r in fit["held_out"] if r["protocol"] == "leave-one-workload-out"]
    sweep = [r for r in fit["held_out"] if r["protocol"] == "held-out sweep"]
    assert rows
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1.0)
        trained = fit["fits"][r["fold"]].get("trained_on", [])
        assert not any(k.split(":")[1] == r["point"].split(":")[0] for k in trained)
    final = fit["fits"]["final (all points)"].get("trained_on", [])
    assert not any(k.startswith("held-out") for k in final)
    expected = {}
    for r in rows + sweep:
        expected[r["figure"]] = max(expected.get(r["figure"], 0.0), abs(r["error"]))
    assert pc.error_bands() == pytest.approx({f: round(v, 4) for f, v in expected.items()})


def test_predict_refuses_a_plan_without_any_twin_and_files_nothing(tmp_path, capsys):
    """No engine maps to a twin: one clear line, exit 2, no run filed (no empty predicted run)."""
    plan = {**PLAN, "engines": [PLAN["engines"][2]]}  # sglang only
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    db = tmp_path / "wh.duckdb"
    assert main(["predict", "--plan", str(path), "--db", str(db), "--run-id", "pred-none"]) == 2
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("wattbench predict: no engine")]
    assert len(line) == 1 and "sglang" in line[0] and "nothing filed" in line[0]
    if db.exists():
        with connect(db, read_only=True) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_predict_a_local_model_through_its_config_json(tmp_path, capsys):
    """A plan whose model is a folder on the GPU node predicts here through twin_model (a config.json relative to
    the plan); a model folder holding a config.json works as the model itself. Parameters are stated computed."""
    from resources.plan import PlanError, load_plan

    root = Path(__file__).resolve().parents[1]
    cfg = json.loads((root / "results" / "h200-vllm" / "config.json").read_text())
    (tmp_path / "models" / "llama8b").mkdir(parents=True)
    (tmp_path / "models" / "llama8b" / "config.json").write_text(json.dumps(cfg))
    engines = [{**PLAN["engines"][0], "tp": 1, "options": {"max_num_seqs": 16}}]
    workloads = [{**PLAN["workloads"][0], "sweep": {"concurrency": [4]}}]
    base = {**PLAN, "engines": engines, "workloads": workloads, "gpu": "h200"}
    plans = {
        "twin": {**base, "model": "/tmp/not-on-this-machine", "twin_model": "models/llama8b/config.json"},
        "folder": {**base, "model": str(tmp_path / "models" / "llama8b")},
    }
    for name, plan in plans.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(plan))
        assert main(["predict", "--plan", str(path), "--no-store"]) == 0, name
        out, err = capsys.readouterr()
        assert "| vllm-fp8-tp4" in out
        assert "8.03B parameters" in err and "computed" in err
        assert "inside the validated domain" in err  # the same shapes as the fitted model
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**base, "model": "/tmp/x", "twin_model": "models/missing.json"}))
    with pytest.raises(PlanError, match="twin_model"):
        load_plan(bad)
    capsys.readouterr()
    # no twin model at all: each engine says why, and nothing is filed
    nomodel = tmp_path / "nomodel.yaml"
    nomodel.write_text(yaml.safe_dump({**base, "model": "/tmp/not-on-this-machine"}))
    assert main(["predict", "--plan", str(nomodel), "--no-store"]) == 2
    assert "unknown model '/tmp/not-on-this-machine'" in capsys.readouterr().err


def test_band_for_another_model_size_takes_the_held_out_models_error(tmp_path, monkeypatch):
    import pipelines.predict_cli as pc

    fit = tmp_path / "fit.json"
    fit.write_text(
        json.dumps(
            {
                "error_bands": {"output_tok_s": 0.08, "counter_w_per_gpu": 0.15},
                "error_bands_other_model": {"output_tok_s": 0.20, "counter_w_per_gpu": 0.05},
            }
        )
    )
    monkeypatch.setattr(pc, "FIT_RESULTS", fit)
    assert pc.error_bands() == {"output_tok_s": 0.08, "counter_w_per_gpu": 0.15}
    assert pc.error_bands(other_model=True) == {"output_tok_s": 0.20, "counter_w_per_gpu": 0.15}
    root = Path(__file__).resolve().parents[1]
    assert pc.same_model(str(root / "results" / "h200-vllm" / "config.json"))  # the 8B random model: same shapes
    assert not pc.same_model(str(root / "results" / "h200-vllm-14b" / "config.json"))
    assert not pc.same_model("llama-3.1-70b")


def test_predict_json_carries_every_figure_with_its_band(plan, capsys):
    """The JSON form is what a user files before a measurement (results/h200-vllm-sweep/predictions.json): it must
    hold the figures themselves, not only the bands."""
    assert main(["predict", "--plan", str(plan), "--no-store", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == "predicted" and out["plan"] == "predict-test" and out["run_id"] is None
    points = {(p["engine"], p["point"]): p["figures"] for p in out["points"]}
    assert set(points) == {(e, f"steady:c{c}") for e in ("vllm-fp8-tp4", "trt-fp8-tp4") for c in (4, 16)}
    vllm16 = points[("vllm-fp8-tp4", "steady:c16")]
    assert vllm16["output_tok_s"]["predicted"] > points[("vllm-fp8-tp4", "steady:c4")]["output_tok_s"]["predicted"]
    assert 132 <= vllm16["counter_w_per_gpu"]["predicted"] <= 700
    assert vllm16["output_tok_s"]["band"] == out["bands"]["output_tok_s"] > 0
    assert points[("trt-fp8-tp4", "steady:c16")]["output_tok_s"]["band"] is None  # no band validated for it
