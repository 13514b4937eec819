"""GPUs per deployment on a fake 8-GPU node (the recorded H200 trace cloned to 8 GPUs, replayed by the fake NVML):
the agent assigns free GPUs or takes the plan's, pins the engine with CUDA_VISIBLE_DEVICES, reads and sums exactly
those GPUs' energy counters, and a deployment whose GPUs cannot be right is an error row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.runner import run_spec
from wattbench_agent.telemetry.fake_nvml import node_trace
from wattbench_agent.wire import AgentSpec, DeploymentSpec, LoadPointSpec

TRACE = Path(__file__).resolve().parents[1] / "telemetry" / "traces" / "h200_trace.json"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def node(fake_engines, tmp_path, monkeypatch):
    """Eight GPUs; returns their UUIDs by index."""
    trace = node_trace(json.loads(TRACE.read_text()), 8)
    path = tmp_path / "node8.json"
    path.write_text(json.dumps(trace))
    monkeypatch.setenv("WATTBENCH_FAKE_NVML", str(path))
    return [d["calls"]["nvmlDeviceGetUUID"][0][2] for d in trace["devices"]]


def deployment(name: str, tp: int, gpus=None) -> DeploymentSpec:
    cfg = EngineConfig(
        engine="vllm", model=MODEL, config_name=name, precision="bf16", tp=tp, options={"served_model_name": name}
    )
    point = LoadPointSpec(
        load_point_id=f"{name}:w:c2",
        workload="w",
        point_label="c2",
        load={
            "api": "chat",
            "shape": "concurrency",
            "concurrency": 2,
            "input_tokens": 16,
            "output_tokens": 4,
            "warmup_s": 0.0,
            "duration_s": 0.6,
            "timeout_s": 10,
        },
    )
    return DeploymentSpec(
        deployment_id=name,
        engine_config=cfg,
        gpus=gpus,
        env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
        health_timeout_s=20,
        load_points=(point,),
    )


def run(tmp_path, *deps: DeploymentSpec, log=None) -> dict[str, list[dict]]:
    spec = AgentSpec(  # no wait for quiet GPUs: the replayed recording's own matmul load is no engine's
        run_id="pin",
        out=str(tmp_path / "bundle"),
        deployments=deps,
        telemetry="nvml",
        idle_baseline_s=0.2,
        idle_quiet_s=0,
    )
    bundle = run_spec(spec, log=(log.append if log is not None else lambda m: None))
    return {
        t: [json.loads(x) for x in (bundle / f"{t}.jsonl").read_text().splitlines()]
        for t in ("deployments", "load_runs", "energy_windows")
        if (bundle / f"{t}.jsonl").exists()
    }


def test_two_deployments_side_by_side_get_free_gpus_and_count_exactly_theirs(node, fake_engines, tmp_path):
    rows = run(tmp_path, deployment("one", 1), deployment("two", 2))
    deps = {d["deployment_id"]: d for d in rows["deployments"]}
    assert deps["one"]["gpu_uuids"] == node[:1] and deps["one"]["n_gpus"] == 1
    assert deps["two"]["gpu_uuids"] == node[1:3] and deps["two"]["n_gpus"] == 2
    assert deps["one"]["config"]["round"] == deps["two"]["config"]["round"] == 1  # up together
    env = {r["argv"][r["argv"].index("--served-model-name") + 1]: r for r in fake_engines.records("vllm")}
    assert env["one"]["CUDA_VISIBLE_DEVICES"] == "0" and env["two"]["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert env["one"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["two"]["VLLM_USE_FLASHINFER_SAMPLER"] == "0"  # the plan's env reached the engine
    assert deps["two"]["config"]["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    windows = [w for w in rows["energy_windows"] if w["window_name"] == "two:w:c2"]
    assert sorted(w["gpu_uuid"] for w in windows) == node[1:3]  # its two GPUs, no others
    (lr,) = [r for r in rows["load_runs"] if r["deployment_id"] == "two"]
    assert lr["energy_j"] == pytest.approx(sum(w["energy_j"] for w in windows))
    assert {w["gpu_uuid"] for w in rows["energy_windows"] if w["deployment_id"] == "one"} == {node[0]}


def test_gpus_named_by_index_or_uuid_and_bad_names_are_error_rows(node, fake_engines, tmp_path):
    rows = run(
        tmp_path,
        deployment("by-index", 2, ("3", "5")),
        deployment("by-uuid", 1, (node[7],)),
        deployment("unknown", 1, ("GPU-not-here",)),
        deployment("too-many", 16),
    )
    deps = {d["deployment_id"]: d for d in rows["deployments"]}
    assert deps["by-index"]["gpu_uuids"] == [node[3], node[5]] and deps["by-index"]["status"] == "healthy"
    assert deps["by-uuid"]["gpu_uuids"] == [node[7]]
    env = {r["argv"][r["argv"].index("--served-model-name") + 1]: r for r in fake_engines.records("vllm")}
    assert env["by-index"]["CUDA_VISIBLE_DEVICES"] == "3,5" and env["by-uuid"]["CUDA_VISIBLE_DEVICES"] == "7"
    assert deps["unknown"]["error_kind"] == "gpu_not_found" and "GPU-not-here" in deps["unknown"]["error_text"]
    assert deps["too-many"]["error_kind"] == "gpu_mismatch" and "tp=16" in deps["too-many"]["error_text"]
    assert "unknown" not in env and "too-many" not in env  # never started


def test_deployments_that_do_not_fit_together_run_in_rounds(node, fake_engines, tmp_path):
    log: list[str] = []
    rows = run(tmp_path, deployment("a", 6), deployment("b", 4), deployment("c", 2), log=log)
    deps = {d["deployment_id"]: d for d in rows["deployments"]}
    assert (deps["a"]["config"]["round"], deps["c"]["config"]["round"], deps["b"]["config"]["round"]) == (1, 1, 2)
    assert deps["b"]["gpu_uuids"] == node[:4] and all(d["status"] == "healthy" for d in deps.values())
    assert any("2 rounds" in m for m in log)


def test_the_tensor_parallel_plan_runs_on_a_fake_four_gpu_node(fake_engines, tmp_path, monkeypatch):
    """plans/h200-vllm-tp.yaml as shipped (its load points shortened): two TP-1 replicas and TP-2 share round 1 on
    their own GPUs, TP-4 takes all four in round 2; NVLink multicast stays off in every engine's environment;
    each deployment's energy is exactly its GPUs' counters."""
    from dataclasses import replace

    from wattbench.plan import agent_spec, load_plan

    trace = node_trace(json.loads(TRACE.read_text()), 4)
    (tmp_path / "node4.json").write_text(json.dumps(trace))
    monkeypatch.setenv("WATTBENCH_FAKE_NVML", str(tmp_path / "node4.json"))
    uuids = [d["calls"]["nvmlDeviceGetUUID"][0][2] for d in trace["devices"]]
    plan, _ = load_plan(Path(__file__).resolve().parents[2] / "plans" / "h200-vllm-tp.yaml")
    spec = agent_spec(plan, "tp", tmp_path / "bundle", builds={})
    short = {
        "warmup_s": 0.0,
        "duration_s": 0.6,
        "ramp_s": 0.0,
        "concurrency": 2,
        "input_tokens": 16,
        "output_tokens": 4,
        "timeout_s": 10,
    }
    deps = tuple(
        replace(
            d, health_timeout_s=20, load_points=tuple(replace(p, load={**p.load, **short}) for p in d.load_points[:1])
        )
        for d in spec.deployments
    )
    spec = replace(spec, deployments=deps, idle_baseline_s=0.2, idle_quiet_s=0)
    bundle = run_spec(spec, log=lambda m: None)
    rows = {
        t: [json.loads(x) for x in (bundle / f"{t}.jsonl").read_text().splitlines()]
        for t in ("deployments", "load_runs", "energy_windows")
    }
    got = {d["deployment_id"]: d for d in rows["deployments"]}
    assert {k: (d["config"]["round"], d["n_gpus"], d["status"]) for k, d in got.items()} == {
        "vllm-tp1-a": (1, 1, "healthy"),
        "vllm-tp1-b": (1, 1, "healthy"),
        "vllm-tp2": (1, 2, "healthy"),
        "vllm-tp4": (2, 4, "healthy"),
    }
    assert got["vllm-tp2"]["gpu_uuids"] == uuids[2:4] and got["vllm-tp4"]["gpu_uuids"] == uuids
    env = {r["CUDA_VISIBLE_DEVICES"]: r for r in fake_engines.records("vllm")}
    assert sorted(env) == ["0", "0,1,2,3", "1", "2,3"]
    assert all(
        r["NCCL_NVLS_ENABLE"] == "0"
        and r["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        and r["NVSHMEM_DISABLE_NVLS"] == "1"
        for r in env.values()
    )
    for lr in rows["load_runs"]:
        windows = [w for w in rows["energy_windows"] if w["window_name"] == lr["load_point_id"]]
        assert sorted(w["gpu_uuid"] for w in windows) == sorted(got[lr["deployment_id"]]["gpu_uuids"])
        assert lr["energy_j"] == pytest.approx(sum(w["energy_j"] for w in windows))
