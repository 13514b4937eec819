"""`wattbench predict --plan PLAN`: the twin's figures for a configuration never measured, labelled predicted, each
with the band the measured spread gives it, filed as a run with source 'predicted' that the capacity plan reads
(marked)."""

from __future__ import annotations

import json
import math
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


def _predict_json(plan, capsys) -> dict:
    assert main(["predict", "--plan", str(plan), "--no-store", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _intervals(lo: float, hi: float) -> dict:
    from wattbench.twin.model import PREDICTED

    figs = {f: {"log_lo": lo, "log_hi": hi, "n": 40} for f in PREDICTED}
    return {"level": 0.9, "basis": "cross-validation by board", "figures": figs}


def test_predict_interval_is_the_calibrations(plan, capsys, monkeypatch):
    """A vLLM figure's interval is the calibration's (its ends as log ratios, its level); with no phase state to
    cover, the range is exactly [v exp(lo), v exp(hi)] and the band its larger relative side. A closed loop of equal
    lengths with no committed window at its stream count gives both phase states, and the interval spans both.
    TensorRT-LLM rows: no interval."""
    from wattbench_agent.emulator import calibration

    monkeypatch.setattr(calibration, "intervals", lambda profile: _intervals(-0.1, 0.2))
    every_window_spread = {"short": {"4": {"spread": 12}, "16": {"spread": 30}}}
    monkeypatch.setattr(calibration, "phase_states", lambda profile: every_window_spread)
    doc = _predict_json(plan, capsys)
    rows = {(p["engine"], p["point"]): p for p in doc["points"]}
    for point in ("steady:c4", "steady:c16"):
        fig = rows[("vllm-fp8-tp4", point)]["figures"]["output_tok_s"]
        v = fig["predicted"]
        assert fig["range"] == pytest.approx([v * math.exp(-0.1), v * math.exp(0.2)])
        assert fig["band"] == pytest.approx(math.exp(0.2) - 1) and fig["level"] == 0.9
        trt = rows[("trt-fp8-tp4", point)]["figures"]["output_tok_s"]
        assert trt["band"] is None and trt["range"] is None
    c16 = rows[("vllm-fp8-tp4", "steady:c16")]["phase_states"]
    assert c16["spread"]["share"] == 1.0 and c16["shared"]["share"] == 0.0 and not c16["band_covers_both"]
    assert c16["committed_windows"] == 30 and c16["spread"]["how"] == "the twin's simulation"
    assert main(["predict", "--plan", str(plan), "--no-store"]) == 0
    out, err = capsys.readouterr()
    vllm_rows = [line for line in out.splitlines() if line.startswith("| vllm-fp8-tp4")]
    trt_rows = [line for line in out.splitlines() if line.startswith("| trt-fp8-tp4")]
    assert vllm_rows and all("[-10%, +22%]" in r for r in vllm_rows)
    assert trt_rows and all("±n/a" in r for r in trt_rows)  # assumed factors: no interval
    assert "90% prediction interval" in err and "steady:c16: two phase states" in err
    # no committed window at these streams: the share is unknown and the interval spans both states
    monkeypatch.setattr(calibration, "phase_states", lambda profile: {})
    unknown = {(p["engine"], p["point"]): p for p in _predict_json(plan, capsys)["points"]}
    st = unknown[("vllm-fp8-tp4", "steady:c16")]["phase_states"]
    assert st["shared"]["share"] is None and st["band_covers_both"]
    fig = unknown[("vllm-fp8-tp4", "steady:c16")]["figures"]["tpot_p50_ms"]
    other = st["shared"]["figures"]["tpot_p50_ms"]
    assert other != pytest.approx(fig["predicted"])
    lo, hi = min(fig["predicted"], other), max(fig["predicted"], other)
    assert fig["range"] == pytest.approx([lo * math.exp(-0.1), hi * math.exp(0.2)])
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513) == []
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513, "online") == []
    assert extrapolation("vllm-like", "llama-3.1-8b", "h200", 1, "fp8", 513, "checkpoint") == []
    assert extrapolation("vllm-like", "llama-3.1-70b", "h100-sxm", 4, "bf16", 8000) == [
        "model llama-3.1-70b",
        "GPU h100-sxm",
        "TP 4",
        "8000-token prompts",
    ]


def test_a_filing_records_the_calibration_it_came_from(plan, tmp_path, capsys):
    """The JSON, the filed run's deployments and the bundle's manifest name the calibration: the sha256 of
    calibration.json, the bundles it was fitted on and what the held-out list kept out; the shipped intervals and
    errors by protocol come with it."""
    import hashlib

    from wattbench_agent.emulator import calibration

    sha = hashlib.sha256(calibration.PATH.read_bytes()).hexdigest()
    doc = _predict_json(plan, capsys)
    cal = doc["calibration"]
    assert cal["sha256"] == sha and cal["content_sha256"] == calibration.load()["content_sha256"]
    assert cal["fitted_on"] and not set(cal["fitted_on"]) & set(cal["excluded"]["bundles"])
    assert "gpu-choice/bundle-*.tar.xz" in cal["excluded"]["globs"]
    assert set(doc) >= {"run_id", "plan", "predicted_at", "source", "notes", "points", "held_out_errors"}
    assert set(doc["held_out_errors"]) >= {"by board", "by workload", "held-out runs", "held-out model"}
    note = next(n for n in doc["notes"] if n["engine"] == "vllm-fp8-tp4")
    assert note["level"] == 0.9 and "extrapolates" in note["interval_scope"]  # 70B on four GPUs
    db = tmp_path / "wh.duckdb"
    assert main(["predict", "--plan", str(plan), "--db", str(db), "--run-id", "pred-cal"]) == 0
    assert f"sha256 {sha}" in capsys.readouterr().err
    with connect(db, read_only=True) as con:
        filed = con.execute(
            "SELECT DISTINCT json_extract_string(config, '$.calibration.sha256') FROM deployments "
            "WHERE run_id = 'pred-cal'"
        ).fetchall()
    assert filed == [(sha,)]


def test_predict_prints_the_errors_by_protocol(plan, capsys):
    """The errors it prints are the calibration's (wattbench/twin/, written into calibration.json from the committed
    bundles), cross-validated by board and by workload and on the held-out runs, not written by hand."""
    assert main(["predict", "--plan", str(plan), "--no-store"]) == 0
    err = capsys.readouterr().err
    assert "never saw (cross-validated by board)" in err and "never saw (cross-validated by workload)" in err
    assert "never saw (held-out runs)" in err


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
        yaml.safe_dump(
            {
                **PLAN,
                "model": "llama-3.1-8b",
                "engines": engines,
                "workloads": workloads,
                "repeats": 2,
                "server_starts": 1,
            }
        )
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
