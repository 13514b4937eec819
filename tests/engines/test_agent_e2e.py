"""The bench agent end to end against the fake engines: failures are rows, and the rest of the spec goes on."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from tests.bundle_files import read_table
from tests.engines.conftest import A100, H100
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.failures import classify_truncation, mark_truncations
from wattbench_agent.engines.trtllm import TrtllmAdapter
from wattbench_agent.runner import run_spec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def point(dep: str, n: int = 1, output_tokens: int = 8, input_tokens: int = 16) -> list[dict]:
    return [
        {
            "load_point_id": f"{dep}:w:c2:{i}",
            "workload": "w",
            "spec": {
                "api": "chat",
                "shape": "concurrency",
                "concurrency": 2,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "warmup_s": 0.0,
                "duration_s": 0.8,
                "timeout_s": 10,
            },
        }
        for i in range(n)
    ]


def dep(name: str, cfg: EngineConfig, points: list[dict], **extra) -> dict:
    return {
        "deployment_id": name,
        "build_id": cfg.build_id(),
        "engine_config": asdict(cfg),
        "target": "local",
        "telemetry": "none",
        "idle_baseline_s": 0,
        "health_timeout_s": 20,
        "load_points": points,
        **extra,
    }


def rows(bundle: Path, table: str) -> list[dict]:
    return read_table(bundle, table)  # whatever format the agent wrote it in


def test_failures_are_rows_and_later_deployments_still_run(fake_engines, tmp_path):
    trt = EngineConfig(
        engine="trtllm",
        model=MODEL,
        config_name="trt",
        precision="fp8",
        tp=1,
        options={"max_batch_size": 8, "max_input_len": 16, "max_seq_len": 20, "max_num_tokens": 256},
    )
    trt_a100 = EngineConfig(engine="trtllm", model=MODEL, config_name="trt-a100", precision="fp16", tp=1)
    assert TrtllmAdapter().build(trt, None).status == "built"
    fake_engines.gpu(A100)
    assert TrtllmAdapter().build(trt_a100, None).status == "built"  # an A100-only engine
    fake_engines.gpu(H100)

    def vllm(name: str, **opts) -> EngineConfig:
        return EngineConfig(
            engine="vllm",
            model=MODEL,
            config_name=name,
            precision="bf16",
            tp=1,
            options={"served_model_name": name, **opts},
        )

    sglang = EngineConfig(engine="sglang", model=MODEL, config_name="sg", precision="bf16", tp=1)
    fake_engines.set(FAKE_ENGINE_OOM="oom-case", FAKE_ENGINE_HANG="sglang", FAKE_ENGINE_CRASH_AFTER="3:crash-case")
    spec = {
        "run_id": "r-fake",
        "source": "measured",
        "plan_name": "fake",
        "out": str(tmp_path / "bundle"),
        "deployments": [
            dep("oom", vllm("oom-case"), point("oom")),
            dep("hang", sglang, point("hang"), health_timeout_s=1.5),
            dep("crash", vllm("crash-case"), point("crash", n=2)),
            dep("hw", trt_a100, point("hw")),
            dep("trt", trt, point("trt", output_tokens=8, input_tokens=16)),
            dep("ok", vllm("ok-case", max_num_seqs=16, enable_prefix_caching=True), point("ok")),
        ],
    }
    logs: list[str] = []
    bundle = run_spec(spec, log=logs.append)

    deployments = {r["deployment_id"]: r for r in rows(bundle, "deployments")}
    assert set(deployments) == {"oom", "hang", "crash", "hw", "trt", "ok"}
    assert deployments["oom"]["error_kind"] == "oom_at_start"
    assert "OutOfMemoryError" in deployments["oom"]["error_text"]
    assert deployments["hang"]["error_kind"] == "health_timeout"
    assert deployments["crash"]["error_kind"] == "server_crash" and deployments["crash"]["status"] == "failed"
    assert "illegal memory access" in deployments["crash"]["error_text"]
    assert deployments["hw"]["error_kind"] == "hardware_mismatch"
    assert "cannot run on NVIDIA H100 80GB HBM3 (sm90)" in deployments["hw"]["error_text"]
    for ok in ("trt", "ok"):
        assert deployments[ok]["status"] == "healthy", deployments[ok]
        assert deployments[ok]["startup_s"] > 0 and Path(deployments[ok]["log_path"]).is_file()
    assert deployments["ok"]["engine_version"] == "0.10.1.1" and deployments["trt"]["engine_version"] == "0.18.2"

    load_runs = {r["load_point_id"]: r for r in rows(bundle, "load_runs")}
    assert load_runs["ok:w:c2:0"]["status"] == "ok" and load_runs["ok:w:c2:0"]["completed"] > 0
    assert "crash:w:c2:1" not in load_runs  # the point after the crash is skipped, not run against a dead server
    assert not any(k.startswith(("oom:", "hang:", "hw:")) for k in load_runs)
    metrics = {r["metric"] for r in rows(bundle, "server_metrics") if r["deployment_id"] == "ok"}
    assert "vllm:num_requests_running" in metrics

    # silent truncation: the TensorRT-LLM engine was built with max_seq_len 20 < 16 + 8
    # the agent marks each silently truncated request with its kind, and counts them on the load point
    requests = [r for r in rows(bundle, "requests") if r["deployment_id"] == "trt" and r.get("http_status") == 200]
    assert requests and all(r["finish_reason"] == "length" for r in requests)
    assert {r["error_kind"] for r in requests} == {"truncated_output"}
    assert {classify_truncation(r) for r in requests} == {"truncated_output"}
    assert load_runs["trt:w:c2:0"]["summary"]["truncations"]["truncated_output"] == len(requests)
    ok_requests = [r for r in rows(bundle, "requests") if r["deployment_id"] == "ok" and r.get("error_kind") is None]
    assert ok_requests and {classify_truncation(r) for r in ok_requests} == {None}
    fresh = [{**r, "error_kind": None, "error_text": None} for r in requests]
    counts = mark_truncations(fresh)
    assert counts["truncated_output"] == len(requests) and fresh[0]["error_kind"] == "truncated_output"

    # the documented flags reached the servers
    (serve,) = fake_engines.calls("trtllm-serve")
    assert serve[serve.index("--max_seq_len") + 1] == "20"
    ok_argv = [a for a in fake_engines.calls("vllm") if "ok-case" in a][0]
    assert "--enable-prefix-caching" in ok_argv and ok_argv[ok_argv.index("--max-num-seqs") + 1] == "16"


def test_truncate_scenario_and_sglang_serves(fake_engines, tmp_path):
    fake_engines.set(FAKE_ENGINE_TRUNCATE="sglang")
    sglang = EngineConfig(
        engine="sglang", model=MODEL, config_name="sg", precision="fp8", tp=1, options={"max_model_len": 4096}
    )
    spec = {
        "run_id": "r2",
        "source": "measured",
        "out": str(tmp_path / "b2"),
        "deployments": [dep("sg", sglang, point("sg"))],
    }
    bundle = run_spec(spec, log=lambda m: None)
    (row,) = rows(bundle, "deployments")
    assert row["status"] == "healthy" and row["engine_version"] == "0.5.0"
    assert row["engine_version_source"] == "/get_server_info" and row["version_checked"] is True
    requests = [r for r in rows(bundle, "requests") if r.get("http_status") == 200]
    assert requests and {r["error_kind"] for r in requests} == {"truncated_output"}
    assert {classify_truncation(r) for r in requests} == {"truncated_output"}
    assert any(r["metric"].startswith("sglang:") for r in rows(bundle, "server_metrics"))
    (argv,) = fake_engines.calls("sglang")
    assert argv[argv.index("--quantization") + 1] == "fp8" and "--enable-metrics" in argv
    assert argv[argv.index("--context-length") + 1] == "4096"


def test_vllm_025_without_flashinfer_fails_with_its_cause_and_starts_with_the_plan_env(fake_engines, tmp_path):
    """The fake vllm as 0.25 starts: its sampler really imports flashinfer (absent here) unless the engine's env says
    VLLM_USE_FLASHINFER_SAMPLER=0, as on the H200 node. The failed deployment names the module and the fix; the
    one with the plan's env starts, says its version, and gives every startup phase."""
    fake_engines.set(FAKE_VLLM_VERSION="0.25.0", VLLM_USE_FLASHINFER_SAMPLER=None)

    def vllm(name: str) -> EngineConfig:
        return EngineConfig(
            engine="vllm", model=MODEL, config_name=name, precision="bf16", tp=1, options={"served_model_name": name}
        )

    spec = {
        "run_id": "r-025",
        "source": "measured",
        "out": str(tmp_path / "b025"),
        "deployments": [
            dep("nofi", vllm("nofi"), point("nofi")),
            dep("ok", vllm("ok"), point("ok"), env={"VLLM_USE_FLASHINFER_SAMPLER": "0"}),
        ],
    }
    logs: list[str] = []
    bundle = run_spec(spec, log=logs.append)
    deployments = {r["deployment_id"]: r for r in rows(bundle, "deployments")}

    failed = deployments["nofi"]
    assert (failed["status"], failed["error_kind"]) == ("failed", "start_failed")
    first, second, *rest = failed["error_text"].splitlines()
    assert first == (
        "server exited with code 1 before it was healthy: ModuleNotFoundError: No module named 'flashinfer'"
    )
    assert second.startswith("hint: ") and "VLLM_USE_FLASHINFER_SAMPLER=0" in second
    assert "Engine core initialization failed" in "\n".join(rest)  # the log tail is kept too
    assert any("FAILED to start (start_failed)" in m and "flashinfer" in m for m in logs)
    assert not any(r["deployment_id"] == "nofi" for r in rows(bundle, "load_runs"))

    ok = deployments["ok"]
    assert ok["status"] == "healthy" and ok["config"]["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    assert (ok["engine_version"], ok["engine_version_source"], ok["version_checked"]) == ("0.25.0", "/version", True)
    assert ok["config"]["startup_phases"] == {
        "weights_load_s": 0.051,
        "weights_read_s": 0.02,
        "compile_s": 0.03,
        "cuda_graph_capture_s": 0.0,
        "engine_init_s": 0.08,
    }
    (run,) = rows(bundle, "load_runs")
    assert run["status"] == "ok" and run["completed"] > 0
    metrics = {r["metric"] for r in rows(bundle, "server_metrics") if r["deployment_id"] == "ok"}
    assert "vllm:kv_cache_usage_perc" in metrics and "vllm:gpu_cache_usage_perc" not in metrics
