"""Running the benchmark on Kubernetes: the `cluster_benchmark` job on dagster-k8s' k8s_job_executor, and the bench
agent as a Pipes pod through dagster_k8s.PipesK8sClient.

Each Dagster step runs in its own Kubernetes Job (k8s_job_executor). The `bench` step launches the bench agent as a
pod with the GPUs (`K8sAgentLauncher.run`, the same call shape as the local `PipesSubprocessClient.run` in
assets/bench.py): the pod runs `python3 -m resources.agent`, reads its spec from the Pipes extras, starts each engine
as a local process inside the pod, and writes the result bundle to a PersistentVolumeClaim that the step pods mount
at the same path, so the step ingests it as it does locally.

Settings come from the environment (the environment picks resource instances, not if-statements in assets):
    WATTBENCH_AGENT_IMAGE      image with the engine(s) and wattbench's agent side (required to run)
    WATTBENCH_K8S_NAMESPACE    namespace of step jobs and the agent pod (default: wattbench)
    WATTBENCH_GPU_PRODUCT      node selector nvidia.com/gpu.product, e.g. NVIDIA-H100-80GB-HBM3
    WATTBENCH_AGENT_GPUS       GPUs of the agent pod (default: the largest tp in the spec)
    WATTBENCH_BUNDLE_PVC       PVC holding run folders (bundles), mounted at WATTBENCH_DATA_MOUNT (default /data)
    WATTBENCH_MODELS_PVC       PVC with models / engines, mounted at /models in the agent pod
    WATTBENCH_K8S_SERVICE_ACCOUNT
    WATTBENCH_ORCHESTRATOR_IMAGE  image of the step pods (default: the code location's)

Nothing here talks to a cluster until a run starts: the job, the resource and the client all construct without one.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg
from dagster_k8s import PipesK8sClient, k8s_job_executor

from resources.deploy.kubernetes import K8sTarget, agent_pod_spec

AGENT_COMMAND = ["python3", "-m", "resources.agent"]


class K8sAgentLauncher(dg.ConfigurableResource):
    """Launches the bench agent as a Pipes pod (dagster_k8s.PipesK8sClient)."""

    image: str = "wattbench-agent:latest"
    namespace: str = "wattbench"
    gpu_product: str | None = None
    gpus: int | None = None
    shm_size: str = "16Gi"
    bundle_pvc: str | None = None
    data_mount: str = "/data"
    models_pvc: str | None = None
    service_account: str | None = None
    load_incluster_config: bool | None = None
    kubeconfig_file: str | None = None
    poll_interval_s: float = 10.0

    @classmethod
    def from_env(cls) -> "K8sAgentLauncher":
        env = os.environ.get
        return cls(
            image=env("WATTBENCH_AGENT_IMAGE", "wattbench-agent:latest"),
            namespace=env("WATTBENCH_K8S_NAMESPACE", "wattbench"),
            gpu_product=env("WATTBENCH_GPU_PRODUCT") or None,
            gpus=int(env("WATTBENCH_AGENT_GPUS")) if env("WATTBENCH_AGENT_GPUS") else None,
            bundle_pvc=env("WATTBENCH_BUNDLE_PVC") or None,
            data_mount=env("WATTBENCH_DATA_MOUNT", "/data"),
            models_pvc=env("WATTBENCH_MODELS_PVC") or None,
            service_account=env("WATTBENCH_K8S_SERVICE_ACCOUNT") or None,
        )

    def target(self) -> K8sTarget:
        return K8sTarget(namespace=self.namespace, image=self.image, gpu_product=self.gpu_product,
                         shm_size=self.shm_size, models_pvc=self.models_pvc)

    def gpus_for(self, spec: dict[str, Any]) -> int:
        if self.gpus:
            return self.gpus
        tps = [int(d.get("engine_config", {}).get("tp") or 1) for d in spec.get("deployments", [])
               if d.get("target", "local") != "external"]
        return max(tps, default=0)

    def pod_request(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Everything PipesK8sClient.run gets besides the context: image, command, namespace, pod spec, extras."""
        return {
            "image": self.image,
            "command": list(AGENT_COMMAND),
            "namespace": self.namespace,
            "base_pod_meta": {"labels": {"app.kubernetes.io/name": "wattbench-agent",
                                         "wattbench/run-id": str(spec.get("run_id", ""))[:63]}},
            "base_pod_spec": agent_pod_spec(self.gpus_for(spec), self.target(), self.service_account,
                                            self.bundle_pvc, self.data_mount),
            "extras": {"spec": spec},
        }

    def client(self) -> PipesK8sClient:
        return PipesK8sClient(load_incluster_config=self.load_incluster_config, kubeconfig_file=self.kubeconfig_file,
                              poll_interval=self.poll_interval_s)

    def run(self, *, context, extras: dict[str, Any], command: Any = None) -> dg.PipesClientCompletedInvocation:
        """Same call shape as PipesSubprocessClient.run(command=..., context=..., extras={"spec": ...}); the
        local `command` (the orchestrator's interpreter) is replaced by the pod's."""
        request = self.pod_request(extras["spec"])
        request["extras"] = {**extras, **request["extras"]}
        return self.client().run(context=context, **request)


def executor_config_from_env() -> dict[str, Any]:
    """k8s_job_executor config: namespace, and the bundle PVC mounted in every step pod at the data mount."""
    cfg: dict[str, Any] = {"job_namespace": os.environ.get("WATTBENCH_K8S_NAMESPACE", "wattbench")}
    if os.environ.get("WATTBENCH_ORCHESTRATOR_IMAGE"):  # else: the image of the run's launcher (code location)
        cfg["job_image"] = os.environ["WATTBENCH_ORCHESTRATOR_IMAGE"]
    pvc = os.environ.get("WATTBENCH_BUNDLE_PVC")
    if pvc:
        cfg["volumes"] = [{"name": "bundles", "persistentVolumeClaim": {"claimName": pvc}}]
        cfg["volume_mounts"] = [{"name": "bundles", "mountPath": os.environ.get("WATTBENCH_DATA_MOUNT", "/data")}]
    if os.environ.get("WATTBENCH_K8S_SERVICE_ACCOUNT"):
        cfg["service_account_name"] = os.environ["WATTBENCH_K8S_SERVICE_ACCOUNT"]
    return cfg


cluster_executor = k8s_job_executor.configured(executor_config_from_env(), name="wattbench_k8s_job_executor")

cluster_benchmark_job = dg.define_asset_job(
    "cluster_benchmark",
    selection=dg.AssetSelection.all(),
    executor_def=cluster_executor,
    description="The whole plan on Kubernetes: each step in its own Job; the bench agent as a GPU pod via Pipes.",
    tags={"wattbench/target": "kubernetes"},
)
