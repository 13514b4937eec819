"""The cluster's resources: the bench agent and the TensorRT-LLM engine builds as Pipes pods through
dagster_k8s.PipesK8sClient (the `cluster_benchmark` job and its executor: pipelines/k8s.py).

`K8sAgentLauncher.run` has the same call shape as the local `PipesSubprocessClient.run` in assets/bench.py: the pod
runs `python3 -m wattbench_agent`, reads its spec from the Pipes extras, starts each engine as a local process inside
the pod, and writes the result bundle to a PersistentVolumeClaim that the step pods mount at the same path, so the
step ingests it as it does locally.

A TensorRT-LLM engine is locked to the GPU it is compiled on, and the `engine_builds` step runs in a GPU-less step
pod. So `K8sBuildLauncher.build` starts, per engine that builds on a GPU (`adapter.builds_on_gpu`), a build pod with
GPUs = tp on the target GPU kind: `python3 -m wattbench_agent.engines.build_agent` gets the config in the Pipes
extras, builds into the engine cache on the models PVC (or finds it there) and reports the BuildResult back as a
custom message; the step writes the row. 'no build' engines (vLLM, SGLang, emulator, external) stay in the step.

Their settings come from the environment (wattbench/settings.py names the variables; docs/ENGINES.md describes
them). Nothing here talks to a cluster until a run starts: the resources and the client construct without one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext
from dagster_k8s import PipesK8sClient

from resources.engine_builder import LocalEngineBuilder
from wattbench import settings
from wattbench_agent.deploy.kubernetes import (
    BUILD_AGENT_COMMAND,
    DEFAULT_AGENT_IMAGE,
    ENGINES_DIR,
    K8sTarget,
    agent_pod_spec,
    build_image_from_env,
    build_pod_labels,
    build_pod_spec,
)
from wattbench_agent.engines.base import BuildResult, EngineAdapter, EngineConfig
from wattbench_agent.engines.build_agent import BUILD_SPEC_EXTRA, build_spec, result_from_messages
from wattbench_agent.engines.registry import adapter_for

AGENT_COMMAND = ["python3", "-m", "wattbench_agent"]


class K8sPodLauncher(dg.ConfigurableResource):
    """What wattbench's Pipes pods (bench agent, engine builds) share: where they run and what they mount."""

    image: str = DEFAULT_AGENT_IMAGE
    namespace: str = "wattbench"
    gpu_product: str | None = None
    shm_size: str = "16Gi"
    bundle_pvc: str | None = None
    data_mount: str = "/data"
    models_pvc: str | None = None
    service_account: str | None = None
    load_incluster_config: bool | None = None
    kubeconfig_file: str | None = None
    poll_interval_s: float = 10.0

    @staticmethod
    def settings_from_env() -> dict[str, Any]:
        env = os.environ.get
        return {
            "image": env(settings.AGENT_IMAGE, DEFAULT_AGENT_IMAGE),
            "namespace": env(settings.K8S_NAMESPACE, settings.DEFAULT_K8S_NAMESPACE),
            "gpu_product": env(settings.GPU_PRODUCT) or None,
            "bundle_pvc": env(settings.BUNDLE_PVC) or None,
            "data_mount": env(settings.DATA_MOUNT, settings.DEFAULT_DATA_MOUNT),
            "models_pvc": env(settings.MODELS_PVC) or None,
            "service_account": env(settings.K8S_SERVICE_ACCOUNT) or None,
        }

    def target(self) -> K8sTarget:
        return K8sTarget(
            namespace=self.namespace,
            image=self.image,
            gpu_product=self.gpu_product,
            shm_size=self.shm_size,
            models_pvc=self.models_pvc,
        )

    def client(self) -> PipesK8sClient:
        return PipesK8sClient(
            load_incluster_config=self.load_incluster_config,
            kubeconfig_file=self.kubeconfig_file,
            poll_interval=self.poll_interval_s,
        )


class K8sAgentLauncher(K8sPodLauncher):
    """Launches the bench agent as a Pipes pod (dagster_k8s.PipesK8sClient)."""

    gpus: int | None = None

    @classmethod
    def from_env(cls) -> K8sAgentLauncher:
        gpus = os.environ.get(settings.AGENT_GPUS)
        return cls(**cls.settings_from_env(), gpus=int(gpus) if gpus else None)

    def gpus_for(self, spec: dict[str, Any]) -> int:
        if self.gpus:
            return self.gpus
        tps = [
            int(d.get("engine_config", {}).get("tp") or 1)
            for d in spec.get("deployments", [])
            if d.get("target", "local") != "external"
        ]
        return max(tps, default=0)

    def pod_request(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Everything PipesK8sClient.run gets besides the context: image, command, namespace, pod spec, extras."""
        return {
            "image": self.image,
            "command": list(AGENT_COMMAND),
            "namespace": self.namespace,
            "base_pod_meta": {
                "labels": {
                    "app.kubernetes.io/name": "wattbench-agent",
                    "wattbench/run-id": str(spec.get("run_id", ""))[:63],
                }
            },
            "base_pod_spec": agent_pod_spec(
                self.gpus_for(spec), self.target(), self.service_account, self.bundle_pvc, self.data_mount
            ),
            "extras": {"spec": spec},
        }

    def run(self, *, context, extras: dict[str, Any], command: Any = None) -> dg.PipesClientCompletedInvocation:
        """Same call shape as PipesSubprocessClient.run(command=..., context=..., extras={"spec": ...}); the
        local `command` (the orchestrator's interpreter) is replaced by the pod's."""
        request = self.pod_request(extras["spec"])
        request["extras"] = {**extras, **request["extras"]}
        return self.client().run(context=context, **request)


class K8sBuildLauncher(K8sPodLauncher, LocalEngineBuilder):
    """The cluster's engine builder: an engine compiled for its GPU is built in a Pipes pod on that GPU kind (one
    pod per config, GPUs = its tp); every other engine is resolved in the step, as LocalEngineBuilder does."""

    @classmethod
    def from_env(cls) -> K8sBuildLauncher:
        return cls(**{**cls.settings_from_env(), "image": build_image_from_env()})

    def pod_request(self, cfg: EngineConfig, run_id: str, workdir: Path | None) -> dict[str, Any]:
        """Everything PipesK8sClient.run gets besides the context: image, command, namespace, pod spec, extras."""
        # Build logs go to the run folder only where the build pod sees it (the bundle PVC, mounted at one path in
        # every pod); engines are linked at /models/engines/<build_id> for Deployments only with the models PVC.
        spec = build_spec(
            [cfg], workdir=workdir if self.bundle_pvc else None, engines_dir=ENGINES_DIR if self.models_pvc else None
        )
        return {
            "image": self.image,
            "command": list(BUILD_AGENT_COMMAND),
            "namespace": self.namespace,
            "base_pod_meta": {"labels": {**build_pod_labels(cfg), "wattbench/run-id": run_id[:63]}},
            "base_pod_spec": build_pod_spec(cfg, self.target(), self.service_account, self.bundle_pvc, self.data_mount),
            "extras": {BUILD_SPEC_EXTRA: spec},
        }

    def launch(self, context: AssetExecutionContext, request: dict[str, Any]) -> dg.PipesClientCompletedInvocation:
        return self.client().run(context=context, **request)

    def build(self, context: AssetExecutionContext, cfg: EngineConfig, workdir: Path) -> BuildResult:
        adapter = adapter_for(cfg.engine)
        if not adapter.builds_on_gpu:  # 'no build' or modelled: nothing for a GPU to do
            return super().build(context, cfg, workdir)
        if not self.models_pvc:
            context.log.warning(
                f"build {cfg.config_name}: no WATTBENCH_MODELS_PVC, so the engine stays in the build "
                "pod's own disk and is gone with it; the bench agent will find it 'not_built'"
            )
        request = self.pod_request(cfg, context.run_id, workdir)
        context.log.info(
            f"build {cfg.config_name} in a pod: image {self.image}, {cfg.tp} GPU(s), "
            f"node selector {self.gpu_product or 'none'}"
        )
        try:
            invocation = self.launch(context, request)
        except Exception as exc:  # noqa: BLE001 - the pod could not start or died: a failed row, the plan goes on
            return self._pod_failure(adapter, cfg, f"the build pod failed ({type(exc).__name__}: {exc})")
        return result_from_messages(cfg, invocation.get_custom_messages()) or self._pod_failure(
            adapter, cfg, "the build pod exited without reporting a result"
        )

    @staticmethod
    def _pod_failure(adapter: EngineAdapter, cfg: EngineConfig, text: str) -> BuildResult:
        # An engine the pod finished before it died is in the cache: the next run's build is a hit.
        return BuildResult(
            status="failed",
            error_kind="build_failed",
            error_text=text,
            engine_version=adapter.follows_version,
            resolved_config=adapter.resolved_config(cfg),
        )
