"""Where an engine is built: the `engine_builder` resource, picked by the environment (pipelines/definitions.py).
LocalEngineBuilder builds in the step's own process (locally the step runs on the GPU machine); on a cluster
resources/k8s.py's K8sBuildLauncher sends each engine compiled for its GPU to a build pod on a node of that GPU kind."""

from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from wattbench_agent.engines.base import BuildResult, EngineConfig
from wattbench_agent.engines.registry import adapter_for


class LocalEngineBuilder(dg.ConfigurableResource):
    """Builds engines in the step's own process: right where the step runs on the machine that will serve them."""

    def build(self, context: AssetExecutionContext, cfg: EngineConfig, workdir: Path) -> BuildResult:
        return adapter_for(cfg.engine).build(cfg, workdir)
