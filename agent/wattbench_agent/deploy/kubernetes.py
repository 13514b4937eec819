"""Kubernetes deployment target: an engine as a Deployment + Service, and the pod specs of the bench agent and of
the TensorRT-LLM build pod.

Built as the `kubernetes` client's API models (V1Deployment, V1Service, V1PodSpec, ...), so a manifest that does not
fit the API fails here, not in the cluster; `to_yaml` dumps them through ApiClient.sanitize_for_serialization.

    wattbench deploy --engine vllm --model meta-llama/Llama-3.1-8B-Instruct --tp 8 --target kubernetes --dry-run

What every engine pod gets:
- `nvidia.com/gpu` requests = limits = tp (the NVIDIA device plugin's extended resource), and the toleration for the
  `nvidia.com/gpu` taint GPU node pools usually carry;
- a node selector on `nvidia.com/gpu.product` (GPU feature discovery's label, e.g. NVIDIA-H100-80GB-HBM3) when a
  GPU product is given, so an engine lands on the GPU type it was benchmarked - or, for TensorRT-LLM, built - for;
- the adapter's serve command, a readiness probe on its health path (SGLang: /health_generate) and a startup probe
  with a long failure budget, since loading weights and capturing CUDA graphs take minutes;
- /dev/shm as an in-memory emptyDir (NCCL and the engines' worker processes need more than the 64 MiB default);
- optionally a models PersistentVolumeClaim at /models (Hugging Face cache, TensorRT-LLM engines under
  /models/engines/<build_id>) and HF_TOKEN from a Secret;
- no privileges (every pod: the engine Deployment, the agent pod, the build pod): a non-root user (uid/gid 1000,
  fsGroup 1000 so the PVCs are writable; the engine images default to root), the RuntimeDefault seccomp profile,
  no privilege escalation, every capability dropped, no service-account token mounted (nothing in these pods
  talks to the Kubernetes API), and a writable HOME on an emptyDir (caches of vLLM, Triton, FlashInfer). The root
  file system stays writable: the engines write compile caches under /tmp and their own paths.

A TensorRT-LLM engine is compiled for the GPU it runs on, so it is built in a pod of its own on a node of that GPU
kind (`build_pod_spec`, `build_pod`): `python3 -m wattbench_agent.engines.build_agent` with GPUs = tp, building into the
engine cache on the models PVC (/models/engine_cache) that the serving pods mount too.

Agent-side code: uses only the `kubernetes` client's models and pyyaml (no cluster access, no Dagster).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from wattbench_agent.engines.base import EngineAdapter, EngineConfig
from wattbench_agent.engines.build_agent import BUILD_SPEC_ENV, build_spec
from wattbench_agent.engines.registry import adapter_for

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MODELS_MOUNT = "/models"
ENGINES_DIR = f"{MODELS_MOUNT}/engines"  # where a serving pod expects engine <build_id>
ENGINE_CACHE_DIR = f"{MODELS_MOUNT}/engine_cache"  # the content-addressed build cache (build_cache.py)
DEFAULT_AGENT_IMAGE = "wattbench-agent:latest"
BUILD_AGENT_COMMAND = ["python3", "-m", "wattbench_agent.engines.build_agent"]


def build_image_from_env() -> str:
    """The build pod's image: $WATTBENCH_BUILD_IMAGE, else the agent's ($WATTBENCH_AGENT_IMAGE), which holds the
    engines and wattbench's agent side already."""
    return os.environ.get("WATTBENCH_BUILD_IMAGE") or os.environ.get("WATTBENCH_AGENT_IMAGE") or DEFAULT_AGENT_IMAGE


@dataclass
class K8sTarget:
    """Where and how engines run on the cluster."""

    namespace: str = "wattbench"
    image: str | None = None  # default: the engine adapter's image
    gpu_product: str | None = None  # node selector nvidia.com/gpu.product
    node_selector: dict[str, str] = field(default_factory=dict)
    port: int = 8000
    shm_size: str = "16Gi"
    models_pvc: str | None = None  # PVC mounted at /models
    hf_token_secret: str | None = None  # Secret with key HF_TOKEN
    service_type: str = "ClusterIP"
    startup_timeout_s: int = 1800  # startup probe budget (weights load + CUDA graphs)
    cpu: str | None = None  # e.g. "16"
    memory: str | None = None  # e.g. "128Gi"
    image_pull_policy: str = "IfNotPresent"
    labels: dict[str, str] = field(default_factory=dict)
    run_as_user: int = 1000  # never root: runAsNonRoot refuses uid 0
    run_as_group: int = 1000

    def image_for(self, engine: str) -> str:
        return self.image or adapter_for(engine).image


def resource_name(cfg: EngineConfig) -> str:
    """A DNS-1035 label (lowercase, digits, '-', starts with a letter, at most 63 chars) for a deployment."""
    raw = f"wb-{cfg.engine}-{cfg.config_name}"
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)
    if len(name) > 52:
        name = name[:52].rstrip("-")
    return f"{name}-{cfg.build_id()[:8]}"


def _labels(cfg: EngineConfig, target: K8sTarget) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "wattbench-engine",
        "app.kubernetes.io/part-of": "wattbench",
        "wattbench/engine": cfg.engine,
        "wattbench/deployment": resource_name(cfg),
        "wattbench/build-id": cfg.build_id(),
        **target.labels,
    }


def _gpu_resources(n_gpus: int, target: K8sTarget) -> k8s.V1ResourceRequirements:
    amounts: dict[str, str] = {GPU_RESOURCE: str(n_gpus)}
    if target.cpu:
        amounts["cpu"] = target.cpu
    if target.memory:
        amounts["memory"] = target.memory
    return k8s.V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts))


HOME_DIR = "/home/wattbench"  # HOME of the non-root user: an emptyDir (engine caches)


def _pod_security(target: K8sTarget) -> k8s.V1PodSecurityContext:
    """Every wattbench pod: a non-root user, fsGroup so volumes are writable to it, the runtime's seccomp profile."""
    if target.run_as_user == 0 or target.run_as_group == 0:
        raise ValueError("run_as_user and run_as_group must not be 0: wattbench's pods run as a non-root user")
    return k8s.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=target.run_as_user,
        run_as_group=target.run_as_group,
        fs_group=target.run_as_group,
        seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
    )


def _container_security() -> k8s.V1SecurityContext:
    return k8s.V1SecurityContext(
        allow_privilege_escalation=False, privileged=False, capabilities=k8s.V1Capabilities(drop=["ALL"])
    )


def _volumes(target: K8sTarget) -> tuple[list[k8s.V1Volume], list[k8s.V1VolumeMount]]:
    volumes = [
        k8s.V1Volume(name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=target.shm_size)),
        k8s.V1Volume(name="home", empty_dir=k8s.V1EmptyDirVolumeSource()),
    ]
    mounts = [
        k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
        k8s.V1VolumeMount(name="home", mount_path=HOME_DIR),
    ]
    if target.models_pvc:
        volumes.append(
            k8s.V1Volume(
                name="models",
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name=target.models_pvc),
            )
        )
        mounts.append(k8s.V1VolumeMount(name="models", mount_path=MODELS_MOUNT))
    return volumes, mounts


def _env(target: K8sTarget) -> list[k8s.V1EnvVar]:
    env = [k8s.V1EnvVar(name="HOME", value=HOME_DIR)]
    if target.models_pvc:
        env.append(k8s.V1EnvVar(name="HF_HOME", value=f"{MODELS_MOUNT}/hf"))
        env.append(k8s.V1EnvVar(name="WATTBENCH_ENGINE_CACHE", value=ENGINE_CACHE_DIR))
    if target.hf_token_secret:
        env.append(
            k8s.V1EnvVar(
                name="HF_TOKEN",
                value_from=k8s.V1EnvVarSource(
                    secret_key_ref=k8s.V1SecretKeySelector(name=target.hf_token_secret, key="HF_TOKEN", optional=True)
                ),
            )
        )
    return env


def _scheduling(target: K8sTarget) -> tuple[dict[str, str] | None, list[k8s.V1Toleration]]:
    selector = dict(target.node_selector)
    if target.gpu_product:
        selector[GPU_PRODUCT_LABEL] = target.gpu_product
    tolerations = [k8s.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")]
    return selector or None, tolerations


def engine_artifact_path(cfg: EngineConfig, artifact_path: str | None = None) -> str | None:
    """Where a compiled engine is inside the pod: given, or /models/engines/<build_id> for an engine that builds a
    GPU-locked artifact (TensorRT-LLM)."""
    if artifact_path:
        return artifact_path
    if adapter_for(cfg.engine).builds_on_gpu:
        return cfg.options.get("engine_dir") or f"{ENGINES_DIR}/{cfg.build_id()}"
    return None


def engine_container(
    cfg: EngineConfig, target: K8sTarget, adapter: EngineAdapter | None = None, artifact_path: str | None = None
) -> k8s.V1Container:
    adapter = adapter or adapter_for(cfg.engine)
    command = adapter.serve_command(cfg, "0.0.0.0", target.port, engine_artifact_path(cfg, artifact_path))
    _, mounts = _volumes(target)
    ready_path = getattr(adapter, "readiness_path", None) or adapter.health_path
    period = 10
    return k8s.V1Container(
        name="engine",
        image=target.image_for(cfg.engine),
        image_pull_policy=target.image_pull_policy,
        command=command,
        ports=[k8s.V1ContainerPort(name="http", container_port=target.port, protocol="TCP")],
        env=_env(target),
        resources=_gpu_resources(cfg.tp, target),
        volume_mounts=mounts,
        security_context=_container_security(),
        startup_probe=k8s.V1Probe(
            http_get=k8s.V1HTTPGetAction(path=adapter.health_path, port="http"),
            period_seconds=period,
            timeout_seconds=5,
            failure_threshold=max(1, -(-target.startup_timeout_s // period)),
        ),
        readiness_probe=k8s.V1Probe(
            http_get=k8s.V1HTTPGetAction(path=ready_path, port="http"),
            period_seconds=period,
            timeout_seconds=30 if ready_path != adapter.health_path else 5,
            failure_threshold=3,
        ),
        liveness_probe=k8s.V1Probe(
            http_get=k8s.V1HTTPGetAction(path=adapter.health_path, port="http"),
            period_seconds=30,
            timeout_seconds=10,
            failure_threshold=6,
        ),
    )


def build_manifests(cfg: EngineConfig, target: K8sTarget | None = None, artifact_path: str | None = None) -> list[Any]:
    """[V1Deployment, V1Service] that serve one engine config on the cluster."""
    target = target or K8sTarget()
    if cfg.engine == "external":
        raise ValueError("an external endpoint is measured, not deployed")
    adapter = adapter_for(cfg.engine)
    name, labels = resource_name(cfg), _labels(cfg, target)
    volumes, _ = _volumes(target)
    node_selector, tolerations = _scheduling(target)
    selector = {"wattbench/deployment": name}
    pod = k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(
            labels=labels,
            annotations={"wattbench/engine-version": adapter.follows_version, "wattbench/model": cfg.model},
        ),
        spec=k8s.V1PodSpec(
            containers=[engine_container(cfg, target, adapter, artifact_path)],
            volumes=volumes,
            node_selector=node_selector,
            tolerations=tolerations,
            restart_policy="Always",
            termination_grace_period_seconds=60,
            security_context=_pod_security(target),
            automount_service_account_token=False,
        ),
    )
    deployment = k8s.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=k8s.V1ObjectMeta(name=name, namespace=target.namespace, labels=labels),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels=selector),
            template=pod,
            strategy=k8s.V1DeploymentStrategy(type="Recreate"),
        ),  # GPUs: never two at once
    )
    service = k8s.V1Service(
        api_version="v1",
        kind="Service",
        metadata=k8s.V1ObjectMeta(name=name, namespace=target.namespace, labels=labels),
        spec=k8s.V1ServiceSpec(
            type=target.service_type,
            selector=selector,
            ports=[k8s.V1ServicePort(name="http", port=target.port, target_port="http", protocol="TCP")],
        ),
    )
    return [deployment, service]


def _gpu_pod_spec(
    n_gpus: int,
    target: K8sTarget,
    service_account: str | None = None,
    bundle_pvc: str | None = None,
    bundle_mount: str = "/data",
) -> k8s.V1PodSpec:
    """A run-to-completion pod with `n_gpus` GPUs, /dev/shm, the node selector and the models volume (what the
    agent and the build pod share); `bundle_pvc` mounted at `bundle_mount` when given. Its one container is named
    as PipesK8sClient expects, which sets the image and command."""
    volumes, mounts = _volumes(target)
    if bundle_pvc:
        volumes.append(
            k8s.V1Volume(
                name="bundles", persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name=bundle_pvc)
            )
        )
        mounts.append(k8s.V1VolumeMount(name="bundles", mount_path=bundle_mount))
    node_selector, tolerations = _scheduling(target)
    container = k8s.V1Container(
        name="dagster-pipes-execution",
        resources=_gpu_resources(n_gpus, target),
        volume_mounts=mounts,
        env=_env(target),
        image_pull_policy=target.image_pull_policy,
        security_context=_container_security(),
    )
    return k8s.V1PodSpec(
        containers=[container],
        volumes=volumes,
        node_selector=node_selector,
        tolerations=tolerations,
        restart_policy="Never",
        service_account_name=service_account,
        security_context=_pod_security(target),
        automount_service_account_token=False,
    )


def agent_pod_spec(
    n_gpus: int,
    target: K8sTarget | None = None,
    service_account: str | None = None,
    bundle_pvc: str | None = None,
    bundle_mount: str = "/data",
) -> dict[str, Any]:
    """The base pod spec (as a dict, the shape PipesK8sClient's base_pod_spec takes) of the bench agent's pod.

    The agent starts each engine as a local process inside this pod (the image must hold the engine and
    wattbench's agent side), so the pod gets the GPUs, /dev/shm, the node selector and the models volume; the
    bundle is written to `bundle_pvc` mounted at `bundle_mount`, where the Dagster step reads and ingests it.
    """
    spec = _gpu_pod_spec(n_gpus, target or K8sTarget(), service_account, bundle_pvc, bundle_mount)
    return k8s.ApiClient().sanitize_for_serialization(spec)


def build_pod_labels(cfg: EngineConfig) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "wattbench-build",
        "app.kubernetes.io/part-of": "wattbench",
        "wattbench/engine": cfg.engine,
        "wattbench/build-id": cfg.build_id(),
    }


def build_pod_spec(
    cfg: EngineConfig,
    target: K8sTarget | None = None,
    service_account: str | None = None,
    bundle_pvc: str | None = None,
    bundle_mount: str = "/data",
) -> dict[str, Any]:
    """The base pod spec (PipesK8sClient's base_pod_spec) of the pod that builds one engine config: GPUs = tp
    (trtllm-build --workers tp), on the node selector's GPU kind, with the models PVC at /models where
    WATTBENCH_ENGINE_CACHE points, so the engine lands in the cache the serving pods read. Build logs go to the
    run folder on `bundle_pvc` when given."""
    spec = _gpu_pod_spec(cfg.tp, target or K8sTarget(), service_account, bundle_pvc, bundle_mount)
    return k8s.ApiClient().sanitize_for_serialization(spec)


def build_pod(
    cfg: EngineConfig, target: K8sTarget | None = None, image: str | None = None, service_account: str | None = None
) -> k8s.V1Pod:
    """The build pod of one config as a standalone manifest (`wattbench deploy --target kubernetes --dry-run`): the
    pod the cluster job starts through Pipes, with the build spec in $WATTBENCH_BUILD_SPEC instead of the Pipes
    extras. With a models PVC the agent also links /models/engines/<build_id> to the built engine, the path the
    Deployment's trtllm-serve is given (until the pod has succeeded, that container fails to start and restarts)."""
    target = target or K8sTarget()
    spec = _gpu_pod_spec(cfg.tp, target, service_account)
    (container,) = spec.containers
    container.name, container.image = "build", image or build_image_from_env()
    container.command = list(BUILD_AGENT_COMMAND)
    build = build_spec([cfg], engines_dir=ENGINES_DIR if target.models_pvc else None)
    container.env = [*(container.env or []), k8s.V1EnvVar(name=BUILD_SPEC_ENV, value=json.dumps(build))]
    metadata = k8s.V1ObjectMeta(
        name=f"{resource_name(cfg)}-build",
        namespace=target.namespace,
        labels={**build_pod_labels(cfg), **target.labels},
        annotations={"wattbench/engine-version": adapter_for(cfg.engine).follows_version, "wattbench/model": cfg.model},
    )
    return k8s.V1Pod(api_version="v1", kind="Pod", metadata=metadata, spec=spec)


def to_dicts(objects: list[Any]) -> list[dict[str, Any]]:
    api = k8s.ApiClient()
    return [api.sanitize_for_serialization(o) for o in objects]


def to_yaml(objects: list[Any]) -> str:
    import yaml

    return yaml.safe_dump_all(to_dicts(objects), sort_keys=False, default_flow_style=False)
