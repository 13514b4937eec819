"""Engine builds on a cluster: the TensorRT-LLM build pod (validated against the kubernetes client's API models), the
builder resource the environment picks, and the build agent run for real through Dagster Pipes - as a local
process in place of the pod - building with the fake convert/quantize/trtllm-build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_duckdb import DuckDBResource
from dagster_k8s.pipes import build_pod_body
from kubernetes import client as k8s

from assets.builds import engine_builds
from pipelines.cli import main as wattbench
from pipelines.partitions import bench_partition, ensure_models
from resources.bench_plan import BenchPlan
from resources.engine_builder import LocalEngineBuilder
from resources.k8s import K8sAgentLauncher, K8sBuildLauncher
from tests.engines.test_kubernetes import roundtrip
from wattbench.warehouse import connect
from wattbench_agent.deploy.kubernetes import BUILD_AGENT_COMMAND, K8sTarget, build_pod, to_dicts
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.build_agent import BUILD_SPEC_ENV, build_spec, result_from_messages, run_builds
from wattbench_agent.engines.build_cache import tree_digest
from wattbench_agent.engines.registry import adapter_for

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_PLAN = REPO_ROOT / "tests" / "data" / "smoke_plan.yaml"
H100_LOCK_TP2 = {
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "compute_capability": "9.0",
    "sm": "sm90",
    "driver": "550.54.15",
    "engine_version": "0.18.2",
    "tp": 2,
}
TRT_OPTIONS = {"max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048, "max_num_tokens": 4096}


def trt_cfg(tp: int = 2, **options) -> EngineConfig:
    return EngineConfig(
        engine="trtllm",
        model="meta-llama/Llama-3.1-8B-Instruct",
        config_name="trt-fp8",
        precision="fp8",
        tp=tp,
        options={**TRT_OPTIONS, **options},
    )


def trtllm_builds(fake_engines) -> list[list[str]]:
    return [c for c in fake_engines.calls("trtllm-build") if "--help" not in c]


# ----------------------------------------------------------------------------------------------- the pod
def test_build_pod_spec_validates_against_the_api_models():
    launcher = K8sBuildLauncher(
        image="registry/wattbench-build:1",
        namespace="bench",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        models_pvc="models",
        bundle_pvc="wattbench-data",
    )
    cfg = trt_cfg(tp=4)
    request = launcher.pod_request(cfg, "run-1", Path("/data/runs/run-1/builds"))
    assert request["namespace"] == "bench"
    pod = build_pod_body(
        pod_name="dagster-run-1-engine-builds",
        image=request["image"],
        command=request["command"],
        env_vars={"DAGSTER_PIPES_CONTEXT": "x"},
        base_pod_meta=request["base_pod_meta"],
        base_pod_spec=request["base_pod_spec"],
    )
    roundtrip(k8s.ApiClient().sanitize_for_serialization(pod), "V1Pod")
    (c,) = pod.spec.containers
    assert c.image == "registry/wattbench-build:1"
    assert c.command == ["python3", "-m", "wattbench_agent.engines.build_agent"]
    assert c.resources.limits["nvidia.com/gpu"] == "4" and c.resources.requests["nvidia.com/gpu"] == "4"  # = tp
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert any(t.key == "nvidia.com/gpu" for t in pod.spec.tolerations)
    assert pod.spec.restart_policy == "Never"
    claims = {v.name: v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
    mounts = {m.name: m.mount_path for m in c.volume_mounts}
    assert claims == {"models": "models", "bundles": "wattbench-data"}
    assert (mounts["models"], mounts["bundles"]) == ("/models", "/data")
    # the cache the build writes is on the models PVC, where the agent pod's engines are looked up too
    env = {e.name: e.value for e in c.env if e.value is not None}
    assert env["WATTBENCH_ENGINE_CACHE"] == "/models/engine_cache"
    assert env["DAGSTER_PIPES_CONTEXT"] == "x"
    assert pod.metadata.labels["wattbench/build-id"] == cfg.build_id()
    assert pod.metadata.labels["wattbench/run-id"] == "run-1"
    # the extras carry the config, which comes back with the same content address
    spec = request["extras"]["build_spec"]
    assert spec == {"configs": [asdict(cfg)], "workdir": "/data/runs/run-1/builds", "engines_dir": "/models/engines"}
    assert EngineConfig(**json.loads(json.dumps(spec["configs"][0]))).build_id() == cfg.build_id()


def test_build_pod_without_volumes_writes_nothing_it_cannot_reach():
    request = K8sBuildLauncher().pod_request(trt_cfg(tp=1), "run-2", Path("/data/runs/run-2/builds"))
    assert request["extras"]["build_spec"]["workdir"] is None  # the run folder is not mounted in the pod
    assert request["extras"]["build_spec"]["engines_dir"] is None
    spec = roundtrip(request["base_pod_spec"], "V1PodSpec")
    assert spec.node_selector is None and [v.name for v in spec.volumes] == ["dshm", "home"]  # both emptyDirs
    assert spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"


def test_deploy_dry_run_prints_the_build_pod_before_the_deployment(capsys, monkeypatch):
    monkeypatch.setenv("WATTBENCH_BUILD_IMAGE", "registry/wattbench-build:2")
    rc = wattbench(
        [
            "deploy",
            "--engine",
            "trtllm",
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--tp",
            "2",
            "--precision",
            "fp8",
            "--target",
            "kubernetes",
            "--dry-run",
            "--namespace",
            "ns1",
            "--gpu-product",
            "NVIDIA-H100-80GB-HBM3",
            "--models-pvc",
            "models",
        ]
    )
    assert rc == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Pod", "Deployment", "Service"]
    pod = roundtrip(docs[0], "V1Pod")
    deployment = roundtrip(docs[1], "V1Deployment")
    (c,) = pod.spec.containers
    assert c.image == "registry/wattbench-build:2" and c.command == [
        "python3",
        "-m",
        "wattbench_agent.engines.build_agent",
    ]
    assert c.resources.limits["nvidia.com/gpu"] == "2"
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod.metadata.namespace == "ns1" and pod.spec.restart_policy == "Never"
    assert {m.mount_path for m in c.volume_mounts} == {"/dev/shm", "/home/wattbench", "/models"}
    spec = json.loads(next(e.value for e in c.env if e.name == BUILD_SPEC_ENV))
    (built,) = spec["configs"]
    build_id = deployment.metadata.labels["wattbench/build-id"]
    assert EngineConfig(**built).build_id() == build_id  # the pod builds what the Deployment serves
    serve = deployment.spec.template.spec.containers[0].command
    assert serve[:2] == ["trtllm-serve", f"{spec['engines_dir']}/{build_id}"]  # where the agent links the engine


@pytest.mark.parametrize("argv", [["--engine", "vllm"], ["--engine", "trtllm", "--artifact-path", "/models/mine"]])
def test_deploy_dry_run_has_no_build_pod_without_a_gpu_build(capsys, argv):
    assert wattbench(["deploy", *argv, "--model", "m", "--target", "kubernetes", "--dry-run"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["Deployment", "Service"]


def test_build_pod_manifest_standalone():
    pod = build_pod(trt_cfg(tp=8), K8sTarget(models_pvc="models"), image="img:1")
    d = to_dicts([pod])[0]
    roundtrip(d, "V1Pod")
    assert d["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert len(d["metadata"]["labels"]["wattbench/build-id"]) <= 63


# ----------------------------------------------------------------------------------------------- resource choice
def test_only_gpu_locked_builds_leave_the_step():
    assert adapter_for("trtllm").builds_on_gpu
    for engine in ("vllm", "sglang", "emulator", "external"):
        assert not adapter_for(engine).builds_on_gpu, engine


def test_the_environment_picks_the_builder(monkeypatch):
    from pipelines.definitions import make_resources

    for key in ("WATTBENCH_TARGET", "WATTBENCH_BUILD_IMAGE", "WATTBENCH_AGENT_IMAGE", "WATTBENCH_MODELS_PVC"):
        monkeypatch.delenv(key, raising=False)
    local = make_resources()
    assert type(local["engine_builder"]) is LocalEngineBuilder
    assert type(local["pipes_subprocess_client"]) is dg.PipesSubprocessClient

    monkeypatch.setenv("WATTBENCH_TARGET", "kubernetes")
    monkeypatch.setenv("WATTBENCH_AGENT_IMAGE", "registry/agent:1")
    monkeypatch.setenv("WATTBENCH_GPU_PRODUCT", "NVIDIA-H200")
    monkeypatch.setenv("WATTBENCH_MODELS_PVC", "models")
    cluster = make_resources()
    builder = cluster["engine_builder"]
    assert type(builder) is K8sBuildLauncher and type(cluster["pipes_subprocess_client"]) is K8sAgentLauncher
    assert builder.image == "registry/agent:1"  # the agent's image unless a build image is given
    assert (builder.gpu_product, builder.models_pvc) == ("NVIDIA-H200", "models")

    monkeypatch.setenv("WATTBENCH_BUILD_IMAGE", "registry/build:1")
    cluster = make_resources()
    assert cluster["engine_builder"].image == "registry/build:1"
    assert cluster["pipes_subprocess_client"].image == "registry/agent:1"


# ----------------------------------------------------------------------------------------------- the agent, for real
def here(command: list[str]) -> list[str]:
    """A pod command with the image's python3 replaced by this interpreter (the one with dagster-pipes)."""
    assert command[0] == "python3"
    return [sys.executable, *command[1:]]


class SubprocessBuildLauncher(K8sBuildLauncher):
    """K8sBuildLauncher with the pod swapped for a local process: the pod's own command and extras, through Pipes."""

    command_override: list[str] | None = None

    def launch(self, context, request):
        client = dg.PipesSubprocessClient(cwd=str(REPO_ROOT))
        return client.run(
            context=context, command=here(self.command_override or request["command"]), extras=request["extras"]
        )


def _materialize_builds(
    tmp: Path, launcher: K8sBuildLauncher
) -> tuple[dg.ExecuteInProcessResult, dict[str, dict], list[str]]:
    """engine_builds of a plan with a TensorRT-LLM, a vLLM and an emulated engine: the result, its rows by config
    name, and the run's log messages."""
    plan = yaml.safe_load(SMOKE_PLAN.read_text())
    plan["engines"] = [
        {"name": "trt-fp8", "engine": "trtllm", "precision": "fp8", "tp": 2, "options": TRT_OPTIONS},
        {"name": "vllm-bf16", "engine": "vllm", "precision": "bf16", "tp": 1},
        {"name": "trtllm-like", "engine": "emulator", "profile": "trtllm-like", "precision": "fp8", "tp": 1},
    ]
    plan_path = tmp / "plan" / "default.yaml"
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_text(yaml.safe_dump(plan))
    instance = dg.DagsterInstance.ephemeral()
    ensure_models(instance, ["llama-3.1-8b"])
    db = tmp / "w.duckdb"
    result = dg.materialize(
        [engine_builds],
        instance=instance,
        partition_key=bench_partition("llama-3.1-8b", "default"),
        resources={
            "warehouse": DuckDBResource(database=str(db)),
            "engine_builder": launcher,
            "plan": BenchPlan(path=str(plan_path), output_dir=str(tmp / "runs")),
        },
    )
    with connect(db, read_only=True) as con:
        rows = con.execute("SELECT * FROM engine_builds WHERE run_id = ?", [result.run_id]).df().to_dict("records")
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    return result, {r["config_name"]: r for r in rows}, logs


def test_build_runs_in_the_agent_through_pipes_then_hits_the_cache(fake_engines, tmp_path):
    launcher = SubprocessBuildLauncher(bundle_pvc="wattbench-data")  # bundle PVC: build logs go to the run folder
    first, rows, logs = _materialize_builds(tmp_path, launcher)
    assert first.success
    trt = rows["trt-fp8"]
    assert trt["status"] == "built", trt["error_text"]
    assert json.loads(trt["hardware_lock"]) == H100_LOCK_TP2
    assert trt["engine_version"] == "0.18.2" and trt["build_s"] >= 0.2  # FAKE_BUILD_S
    engine_dir = Path(json.loads(trt["config"])["engine_dir"])
    assert engine_dir.is_relative_to(fake_engines.cache)  # built into the shared cache
    assert (trt["artifact_sha256"], trt["artifact_bytes"]) == tree_digest(engine_dir)
    # 'no build' and the emulator's modelled build stay in the step: the agent saw only the TensorRT-LLM config
    assert (rows["vllm-bf16"]["status"], rows["trtllm-like"]["status"]) == ("no_build", "built")
    agent_lines = [m for m in logs if m.startswith("build ") and "(" in m.split(":")[0]]
    assert agent_lines == [f"build trt-fp8 ({trt['build_id']}): trtllm llama-3.1-8b fp8 tp=2"]
    assert len(trtllm_builds(fake_engines)) == 1 and len(fake_engines.calls("quantize.py")) == 1
    assert list((tmp_path / "runs" / first.run_id / "builds").glob("trt-fp8.*.build.log"))
    # the agent's progress reached the Dagster run log through Pipes
    assert any("build trt-fp8: built in" in m for m in logs), logs

    second, rows, _ = _materialize_builds(tmp_path, launcher)
    assert second.success
    again = rows["trt-fp8"]
    assert again["status"] == "cached"
    assert (again["artifact_sha256"], again["build_s"], again["hardware_lock"]) == (
        trt["artifact_sha256"],
        trt["build_s"],
        trt["hardware_lock"],
    )
    assert len(trtllm_builds(fake_engines)) == 1  # not rebuilt


def test_a_failed_build_in_the_pod_is_a_failed_row(fake_engines, tmp_path):
    fake_engines.set(FAKE_ENGINE_FAIL_BUILD="1")
    result, rows, logs = _materialize_builds(tmp_path, SubprocessBuildLauncher())
    assert result.success  # failures are data
    assert any(m.startswith("build trt-fp8: failed (build_failed): ") for m in logs), logs  # the agent's verdict
    trt = rows["trt-fp8"]
    assert (trt["status"], trt["error_kind"]) == ("failed", "build_failed")
    assert "trtllm-build exited with 1" in trt["error_text"] and "Engine building failed" in trt["error_text"]
    assert rows["vllm-bf16"]["status"] == "no_build"  # the plan's other builds go on


@pytest.mark.parametrize(
    "command, text",
    [
        (["python3", "-c", "raise SystemExit(3)"], "the build pod failed (DagsterPipesExecutionError"),
        (["python3", "-c", "pass"], "the build pod exited without reporting a result"),
    ],
)
def test_a_build_pod_that_dies_or_says_nothing_is_a_failed_row(fake_engines, tmp_path, command, text):
    result, rows, _ = _materialize_builds(tmp_path, SubprocessBuildLauncher(command_override=command))
    assert result.success
    trt = rows["trt-fp8"]
    assert (trt["status"], trt["error_kind"]) == ("failed", "build_failed") and text in trt["error_text"]
    assert json.loads(trt["config"])["precision"] == "fp8"
    assert trtllm_builds(fake_engines) == []


def test_build_agent_standalone_reads_the_spec_from_the_env_and_links_the_engine(fake_engines, tmp_path):
    """What the dry run's build pod runs: spec in $WATTBENCH_BUILD_SPEC, JSON lines out, engine linked by build_id."""
    cfg = trt_cfg()
    engines_dir = tmp_path / "models" / "engines"
    env = {**os.environ, BUILD_SPEC_ENV: json.dumps(build_spec([cfg], engines_dir=engines_dir))}

    def run() -> dict:
        proc = subprocess.run(
            here(BUILD_AGENT_COMMAND), env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = result_from_messages(cfg, [run()])
    assert first.status == "built" and first.hardware_lock == H100_LOCK_TP2
    link = engines_dir / cfg.build_id()
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == Path(first.artifact_path).resolve()
    assert (link / "wattbench_lock.json").is_file()
    second = result_from_messages(cfg, [run()])
    assert second.status == "cached" and second.artifact_sha256 == first.artifact_sha256
    assert link.resolve() == Path(first.artifact_path).resolve()


def test_a_build_that_raises_is_reported_as_failed_and_the_rest_go_on(fake_engines):
    broken = EngineConfig(engine="no-such-engine", model="m", config_name="broken")
    reported, logs = [], []
    run_builds(build_spec([broken, trt_cfg()]), log=logs.append, report=reported.append)
    failed = result_from_messages(broken, reported)
    assert (failed.status, failed.error_kind) == ("failed", "build_failed")
    assert "unknown engine 'no-such-engine'" in failed.error_text
    assert result_from_messages(trt_cfg(), reported).status == "built"
    assert result_from_messages(trt_cfg(tp=4), reported) is None  # not in the spec, not reported


def test_a_path_that_cannot_be_linked_does_not_fail_the_build(fake_engines, tmp_path):
    cfg = trt_cfg()
    taken = tmp_path / "engines" / cfg.build_id()
    (taken / "someone-elses-engine").mkdir(parents=True)
    reported, logs = [], []
    run_builds(build_spec([cfg], engines_dir=tmp_path / "engines"), log=logs.append, report=reported.append)
    assert result_from_messages(cfg, reported).status == "built"
    assert any(m.startswith(f"could not link {cfg.build_id()}") for m in logs), logs
    assert not taken.is_symlink()


def test_build_agent_imports_no_dagster_core_duckdb_or_gx():
    code = (
        "import sys, dagster_pipes, wattbench_agent.engines.build_agent; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'duckdb', 'great_expectations'}); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
