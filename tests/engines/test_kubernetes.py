"""Kubernetes manifests validated against the kubernetes client's API models; the cluster job and Pipes pod."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client as k8s

from pipelines.cli import main as wattbench
from wattbench_agent.deploy.kubernetes import K8sTarget, agent_pod_spec, build_manifests, to_dicts
from wattbench_agent.engines.base import EngineConfig


class _Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj)


def roundtrip(d: dict, model: str):
    """Deserialize into the client's model (required fields and types checked) and serialize back: identical."""
    api = k8s.ApiClient()
    obj = api.deserialize(_Resp(d), model)
    assert api.sanitize_for_serialization(obj) == d
    return obj


def cfg(engine="vllm", tp=8, precision="bf16", **options) -> EngineConfig:
    return EngineConfig(
        engine=engine,
        model="meta-llama/Llama-3.1-8B-Instruct",
        config_name="Big Config_1",
        precision=precision,
        tp=tp,
        options=options,
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_manifests_validate_against_the_api_models(engine):
    target = K8sTarget(
        namespace="bench", gpu_product="NVIDIA-H100-80GB-HBM3", models_pvc="models", hf_token_secret="hf"
    )
    deployment, service = to_dicts(build_manifests(cfg(engine), target))
    dep = roundtrip(deployment, "V1Deployment")
    svc = roundtrip(service, "V1Service")
    pod = dep.spec.template.spec
    (c,) = pod.containers
    assert c.resources.limits["nvidia.com/gpu"] == "8" and c.resources.requests["nvidia.com/gpu"] == "8"
    assert pod.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    shm = next(v for v in pod.volumes if v.name == "dshm")
    assert shm.empty_dir.medium == "Memory"
    assert any(m.mount_path == "/dev/shm" for m in c.volume_mounts)
    ready = {"vllm": "/health", "sglang": "/health_generate", "trtllm": "/health"}[engine]
    assert c.readiness_probe.http_get.path == ready and c.readiness_probe.http_get.port == "http"
    assert c.command[0] in ("vllm", "python3", "trtllm-serve") and "0.0.0.0" in c.command
    assert dep.metadata.name == svc.metadata.name and len(dep.metadata.name) <= 63
    assert svc.spec.selector == dep.spec.selector.match_labels
    assert dep.spec.selector.match_labels.items() <= dep.spec.template.metadata.labels.items()
    assert {e.name for e in c.env} == {"HOME", "HF_HOME", "WATTBENCH_ENGINE_CACHE", "HF_TOKEN"}


def test_deploy_dry_run_prints_yaml(capsys):
    rc = wattbench(
        [
            "deploy",
            "--engine",
            "vllm",
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--tp",
            "8",
            "--target",
            "kubernetes",
            "--dry-run",
            "--image",
            "registry/vllm:1",
            "--namespace",
            "ns1",
            "--gpu-product",
            "NVIDIA-H100-80GB-HBM3",
            "--precision",
            "fp8",
            "--option",
            "max_model_len=4096",
        ]
    )
    assert rc == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    roundtrip(docs[0], "V1Deployment")
    roundtrip(docs[1], "V1Service")
    c = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "registry/vllm:1" and docs[0]["metadata"]["namespace"] == "ns1"
    assert c["command"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert c["command"][c["command"].index("--quantization") + 1] == "fp8"
    assert c["command"][c["command"].index("--max-model-len") + 1] == "4096"


def test_deploy_local_dry_run_prints_the_command(capsys):
    assert wattbench(["deploy", "--engine", "sglang", "--model", "m", "--tp", "2", "--dry-run", "--port", "9000"]) == 0
    assert capsys.readouterr().out.strip() == (
        "python3 -m sglang.launch_server --model-path m --host 127.0.0.1 "
        "--port 9000 --tp-size 2 --dtype bfloat16 --enable-metrics"
    )


def test_agent_pod_and_cluster_job_construct_without_a_cluster():
    from dagster_k8s.pipes import build_pod_body

    from pipelines.k8s import cluster_benchmark_job
    from resources.k8s import AGENT_COMMAND, K8sAgentLauncher

    spec = {
        "run_id": "run-1",
        "out": "/data/runs/run-1/bundle",
        "deployments": [
            {"deployment_id": "a", "engine_config": {"tp": 2}, "target": "local"},
            {"deployment_id": "b", "engine_config": {"tp": 4}, "target": "local"},
        ],
    }
    launcher = K8sAgentLauncher(
        image="registry/wattbench-agent:1",
        namespace="bench",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        bundle_pvc="wattbench-data",
    )
    request = launcher.pod_request(spec)
    assert request["extras"] == {"spec": spec} and request["command"] == AGENT_COMMAND
    assert request["namespace"] == "bench"
    pod = build_pod_body(
        pod_name="dagster-run-1-bench",
        image=request["image"],
        command=request["command"],
        env_vars={"DAGSTER_PIPES_CONTEXT": "x"},
        base_pod_meta=request["base_pod_meta"],
        base_pod_spec=request["base_pod_spec"],
    )
    d = k8s.ApiClient().sanitize_for_serialization(pod)
    roundtrip(d, "V1Pod")
    (c,) = pod.spec.containers
    assert c.command == ["python3", "-m", "wattbench_agent"] and c.image == "registry/wattbench-agent:1"
    assert c.resources.limits["nvidia.com/gpu"] == "4"  # the largest tp in the spec
    assert {m.mount_path for m in c.volume_mounts} == {"/dev/shm", "/home/wattbench", "/data"}
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod.spec.restart_policy == "Never"
    assert type(launcher.client()).__name__ == "PipesK8sClient"
    assert cluster_benchmark_job.name == "cluster_benchmark"
    assert cluster_benchmark_job.executor_def.name == "wattbench_k8s_job_executor"


def test_cluster_job_resolves_with_the_assets():
    import dagster as dg

    from pipelines.definitions import ALL_ASSETS, make_resources
    from pipelines.k8s import cluster_benchmark_job

    defs = dg.Definitions(assets=ALL_ASSETS, jobs=[cluster_benchmark_job], resources=make_resources())
    job = defs.get_job_def("cluster_benchmark")
    assert job.executor_def.name == "wattbench_k8s_job_executor"


def test_agent_pod_spec_is_a_valid_pod_spec():
    roundtrip(agent_pod_spec(8, K8sTarget(models_pvc="m")), "V1PodSpec")
