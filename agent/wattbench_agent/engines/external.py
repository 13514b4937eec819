"""An external OpenAI-compatible endpoint: measured, never started, built or stopped by wattbench.

The plan gives its URL (`engines: [{engine: external, url: https://host/v1}]`); the agent attaches to it
(GET /v1/models must answer), drives load and records latency and tokens. Energy is only known when the GPUs
behind it are on the agent's host (telemetry nvml), otherwise telemetry is 'none' and energy columns stay NULL.
Follows the OpenAI API's /v1/models, /v1/completions and /v1/chat/completions (streaming with usage).

Agent-side code: stdlib only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wattbench_agent.engines.base import BuildResult, EngineAdapter, EngineConfig
from wattbench_agent.engines.failures import DeployError


class ExternalAdapter(EngineAdapter):
    name = "external"
    follows_version = "openai-v1"  # the OpenAI-compatible REST API, not an engine release
    health_path = "/v1/models"
    metrics_path = None  # unknown: an external server may not expose Prometheus metrics
    source = "measured"

    def plan_problem(self, spec: dict[str, Any]) -> str | None:
        if not spec.get("url"):
            return "an external engine needs url: the OpenAI-compatible endpoint to measure"
        if spec.get("checkpoint"):
            return "checkpoint is for engines that load a model; the external engine serves whatever its url serves"
        return None

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        raise DeployError(
            "config_error",
            "an external endpoint is measured, not started: give its url in the plan "
            "and the agent attaches to it (target 'external')",
        )

    def resolved_config(self, cfg: EngineConfig) -> dict[str, Any]:
        return {
            "engine": "external",
            "model": cfg.model,
            "precision": cfg.precision,
            "tp": cfg.tp,
            "attached": True,
            **cfg.options,
        }

    def build(self, cfg: EngineConfig, workdir: Path | None) -> BuildResult:
        return BuildResult(
            status="no_build", engine_version=self.follows_version, resolved_config=self.resolved_config(cfg)
        )
