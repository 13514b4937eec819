"""`wattbench predict --plan PLAN`: the twin's figures for a configuration never measured, labelled predicted, each
with the band the measured spread gives it, filed as a run with source 'predicted' that the capacity plan reads
(marked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from wattbench.twin.predict import extrapolation
from wattbench.warehouse import connect, run_sql

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


def _spread(host_us: tuple[float, float, float], decode: tuple[float, float]) -> dict:
    p05, p50, p95 = (x * 1e-6 for x in host_us)
    return {
        "eager_layer_s": {"p05": p05, "p50": p50, "p95": p95},
        "decode_step_ratio": {"p05": decode[0], "p50": 1.0, "p95": decode[1]},
    }


def _predict_json(plan, capsys) -> dict:
    assert main(["predict", "--plan", str(plan), "--no-store", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_band_is_the_measured_spread(plan, tmp_path, capsys, monkeypatch):
    """A vLLM figure's band is how far it moves when the host's launch time of a prefill step and the decode step sit at
    the ends of their measured spread (the emulator's calibration.json): no spread, no band width; a wider spread, a
    wider band; a slower host moves a closed loop of 16 streams more than one of 4. TensorRT-LLM rows: no band."""
    from wattbench_agent.emulator import calibration

    def bands(doc, engine, figure):
        return {p["point"]: p["figures"][figure]["band"] for p in doc["points"] if p["engine"] == engine}

    from wattbench_agent.emulator import FACTORS

    median = FACTORS["vllm-like"].eager_layer_s * 1e6  # the twin runs at the spread's median
    monkeypatch.setattr(calibration, "spread", lambda profile: _spread((median,) * 3, (1.0, 1.0)))
    flat = _predict_json(plan, capsys)
    assert set(bands(flat, "vllm-fp8-tp4", "output_tok_s").values()) == {0.0}
    assert set(bands(flat, "trt-fp8-tp4", "output_tok_s").values()) == {None}
    monkeypatch.setattr(calibration, "spread", lambda profile: _spread((300, median, 900), (0.97, 1.03)))
    wide = _predict_json(plan, capsys)
    tok = bands(wide, "vllm-fp8-tp4", "output_tok_s")
    assert all(b > 0 for b in tok.values()) and tok["steady:c16"] > tok["steady:c4"]
    row = next(p for p in wide["points"] if p["engine"] == "vllm-fp8-tp4" and p["point"] == "steady:c16")
    fig = row["figures"]["output_tok_s"]
    assert fig["range"] == pytest.approx([fig["predicted"] * (1 - fig["band"]), fig["predicted"] * (1 + fig["band"])])
    assert main(["predict", "--plan", str(plan), "--no-store"]) == 0
    out = capsys.readouterr().out
    vllm_rows = [line for line in out.splitlines() if line.startswith("| vllm-fp8-tp4")]
    trt_rows = [line for line in out.splitlines() if line.startswith("| trt-fp8-tp4")]
    assert vllm_rows and all("±n/a" not in r and "%" in r for r in vllm_rows)
    assert trt_rows and all("±n/a" in r for r in trt_rows)  # assumed factors: no band
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513) == []
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513, "online") == []
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513, "checkpoint") == []
    assert extrapolation("vllm-like", "llama-3.1-70b", "h100-sxm", 4, "bf16", 8000) == [
        "model llama-3.1-70b",
        "GPU h100-sxm",
        "TP 4",
        "8000-token prompts",
    ]


def test_shipped_spread_and_held_out_errors_come_from_the_calibration(plan, capsys):
    """The spread a prediction carries and the held-out errors it prints are the calibration's (wattbench/twin/,
    written into calibration.json from the committed bundles), not written by hand: the launch time's quantiles are
    those of the measured windows it lists (results/twin/), and predict prints the held-out errors by board."""
    import numpy as np

    from wattbench_agent.emulator import calibration

    root = Path(__file__).resolve().parents[1]
    cal = json.loads(calibration.PATH.read_text())
    host = cal["spread"]["vllm-like"]["eager_layer_s"]
    rows = json.loads((root / "results" / "twin" / "calibration.json").read_text())["host_windows"]
    per_layer = [w["eager_layer_s"] for w in rows]
    assert host["n"] == len(per_layer) and host["p50"] == pytest.approx(float(np.median(per_layer)), rel=1e-5)
    assert host["p05"] == pytest.approx(float(np.percentile(per_layer, 5)), rel=1e-5)
    assert cal["profiles"]["vllm-like"]["eager_layer_s"] == pytest.approx(host["p50"], rel=1e-5)
    assert main(["predict", "--plan", str(plan), "--no-store"]) == 0
    err = capsys.readouterr().err
    assert "never saw (by board)" in err and "never saw (by workload)" in err


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
    from wattbench.plan import PlanError, load_plan

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


def test_same_model_compares_shapes():
    import wattbench.twin.predict as pc

    root = Path(__file__).resolve().parents[1]
    assert pc.same_model(str(root / "results" / "h200-vllm" / "config.json"))  # the 8B random model: same shapes
    assert not pc.same_model(str(root / "results" / "h200-vllm-14b" / "config.json"))


def test_predict_sends_each_repeat_the_requests_the_agent_will_send(tmp_path, capsys):
    """A filed prediction describes the run's own requests: each point and repeat is simulated with the seed the agent
    gives it (runner.point_seed through wattbench.plan.agent_spec), so every predicted request has the lengths the
    load generator prepares for it (spread lengths: a different seed would draw different ones), and the repeats
    differ as the run's will."""
    from wattbench.plan import agent_spec, load_plan
    from wattbench_agent.loadgen import LoadSpec
    from wattbench_agent.loadgen.runner import _prepare
    from wattbench_agent.runner import point_seed

    engines = [{**PLAN["engines"][0], "tp": 1, "precision": "bf16", "options": {"max_num_seqs": 16}}]
    workloads = [
        {**PLAN["workloads"][0], "sweep": {"concurrency": [4]}, "random_range_ratio": 0.5, "duration_s": 4},
    ]
    path = tmp_path / "plan.yaml"
    path.write_text(
        yaml.safe_dump({**PLAN, "model": "llama-3.1-8b", "engines": engines, "workloads": workloads, "repeats": 2})
    )
    db = tmp_path / "wh.duckdb"
    assert main(["predict", "--plan", str(path), "--db", str(db), "--run-id", "pred-seed"]) == 0
    capsys.readouterr()
    plan, _ = load_plan(path)
    points = agent_spec(plan, "pred-seed", tmp_path / "out", {}).deployments[0].load_points
    assert len(points) == 2
    with connect(db, read_only=True) as con:
        for point in points:
            rows = con.execute(
                "SELECT request_id, prompt_tokens, max_tokens FROM requests WHERE run_id = 'pred-seed' "
                "AND load_point_id = ?",
                [point.load_point_id],
            ).fetchall()
            spec = LoadSpec.from_dict({**point.load, "seed": point_seed(point)})
            prepared = _prepare(spec, None, point.load_point_id, 0, 1).workload
            assert len(rows) > 8
            for rid, prompt, out in rows:
                assert (prompt, out) == prepared.lengths(int(rid.split("-")[1]) - 1), (point.load_point_id, rid)
