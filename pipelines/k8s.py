"""Running the benchmark on Kubernetes: the `cluster_benchmark` job on dagster-k8s' k8s_job_executor. Each Dagster
step runs in its own Kubernetes Job; the bench agent and the TensorRT-LLM engine builds run as Pipes pods through
the cluster's resources (resources/k8s.py: K8sAgentLauncher, K8sBuildLauncher), which the definitions pick with
WATTBENCH_TARGET=kubernetes.

Settings come from the environment (the environment picks resource instances, not if-statements in assets;
wattbench/settings.py names every variable):
    WATTBENCH_AGENT_IMAGE      image with the engine(s) and wattbench's agent side (required to run)
    WATTBENCH_BUILD_IMAGE      image of the TensorRT-LLM build pods (default: WATTBENCH_AGENT_IMAGE)
    WATTBENCH_K8S_NAMESPACE    namespace of step jobs and the agent pod (default: wattbench)
    WATTBENCH_GPU_PRODUCT      node selector nvidia.com/gpu.product, e.g. NVIDIA-H100-80GB-HBM3
    WATTBENCH_AGENT_GPUS       GPUs of the agent pod (default: the largest tp in the spec)
    WATTBENCH_BUNDLE_PVC       PVC holding run folders (bundles), mounted at WATTBENCH_DATA_MOUNT (default /data)
    WATTBENCH_MODELS_PVC       PVC with models / engines, mounted at /models in the agent and build pods (the engine
                               cache, /models/engine_cache, lives there: build pods write it, the agent reads it)
    WATTBENCH_K8S_SERVICE_ACCOUNT
    WATTBENCH_ORCHESTRATOR_IMAGE  image of the step pods (default: the code location's)

Nothing here talks to a cluster until a run starts: the job and the executor construct without one.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg
from dagster_k8s import k8s_job_executor

from wattbench import settings


def executor_config_from_env(env: Any = None) -> dict[str, Any]:
    """k8s_job_executor config from `env` (a mapping; os.environ when None, read when called): namespace, and the
    bundle PVC mounted in every step pod at the data mount."""
    env = os.environ if env is None else env
    cfg: dict[str, Any] = {"job_namespace": env.get(settings.K8S_NAMESPACE, settings.DEFAULT_K8S_NAMESPACE)}
    if env.get(settings.ORCHESTRATOR_IMAGE):  # else: the image of the run's launcher (code location)
        cfg["job_image"] = env[settings.ORCHESTRATOR_IMAGE]
    pvc = env.get(settings.BUNDLE_PVC)
    if pvc:
        cfg["volumes"] = [{"name": "bundles", "persistentVolumeClaim": {"claimName": pvc}}]
        mount = env.get(settings.DATA_MOUNT, settings.DEFAULT_DATA_MOUNT)
        cfg["volume_mounts"] = [{"name": "bundles", "mountPath": mount}]
    if env.get(settings.K8S_SERVICE_ACCOUNT):
        cfg["service_account_name"] = env[settings.K8S_SERVICE_ACCOUNT]
    return cfg


def build_cluster_benchmark_job(executor_config: dict[str, Any] | None = None) -> dg.UnresolvedAssetJobDefinition:
    """The `cluster_benchmark` job on k8s_job_executor configured with `executor_config` (the defaults when None;
    the definitions pass executor_config_from_env())."""
    executor = k8s_job_executor.configured(
        executor_config or {"job_namespace": settings.DEFAULT_K8S_NAMESPACE}, name="wattbench_k8s_job_executor"
    )
    return dg.define_asset_job(
        "cluster_benchmark",
        selection=dg.AssetSelection.all(),
        executor_def=executor,
        description="The whole plan on Kubernetes: each step in its own Job; the bench agent as a GPU pod via Pipes.",
        tags={"wattbench/target": "kubernetes"},
    )


cluster_benchmark_job = build_cluster_benchmark_job()
