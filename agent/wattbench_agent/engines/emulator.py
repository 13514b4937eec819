"""The built-in emulator as an engine: `engine: emulator` in a plan, served by `wattbench emulate`
(agent/wattbench_agent/emulator). Its build and version come from the emulator package, imported where they are
asked for (a plan's validation does not load the emulator's models). Agent-side code: stdlib only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from wattbench_agent.engines.base import BuildResult, EngineAdapter, EngineConfig


class EmulatorAdapter(EngineAdapter):
    """The built-in emulator, served by `wattbench emulate` (agent/wattbench_agent/emulator)."""

    name = "emulator"
    follows_version = "wattbench"
    source = "emulated"
    version_path = "/version"
    image = "wattbench:latest"

    def plan_problem(self, spec: dict[str, Any]) -> str | None:
        if not spec.get("profile"):
            return "an emulator engine needs profile: trtllm-like or vllm-like"
        if spec.get("checkpoint"):
            return "checkpoint is for engines that load a model; the emulator engine runs the plan's model shape"
        return None

    @property
    def checked_versions(self) -> tuple[str, ...]:
        from wattbench_agent.emulator.profiles import EMULATOR_VERSION

        return (f"wattbench-emulator-{EMULATOR_VERSION}",)

    def build(self, cfg: EngineConfig, workdir: Path) -> BuildResult:
        from wattbench_agent.emulator import emulated_build

        return emulated_build(cfg)

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "wattbench_agent",
            "emulate",
            "--profile",
            cfg.profile or "vllm-like",
            "--model",
            cfg.model,
            "--gpu",
            cfg.gpu,
            "--tp",
            str(cfg.tp),
            "--precision",
            cfg.precision,
            "--host",
            host,
            "--port",
            str(port),
        ]
        for key, value in sorted(cfg.options.items()):
            cmd += ["--config", f"{key}={value}"]
        return cmd
