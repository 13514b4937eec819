"""What engines that load checkpoints directly (vLLM, SGLang) share: no build step, a served model name,
startup phases read from their logs. Agent-side code: stdlib only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from resources.engines.base import BuildResult, EngineAdapter, EngineConfig


def parse_phases(text: str, patterns: Iterable[tuple[str, re.Pattern]]) -> dict[str, float]:
    """Seconds per startup phase, from the first log line each pattern matches."""
    out: dict[str, float] = {}
    for key, pattern in patterns:
        if key in out:
            continue
        m = pattern.search(text)
        if m:
            out[key] = float(m.group(1))
    return out


class CheckpointEngineAdapter(EngineAdapter):
    """Base of adapters whose engines have no build step; subclasses set `phases` and `resolved_config`."""

    phases: tuple[tuple[str, re.Pattern], ...] = ()

    def build(self, cfg: EngineConfig, workdir: Path | None) -> BuildResult:
        resolved = self.resolved_config(cfg)
        if "config_error" in resolved:
            return BuildResult(status="failed", error_kind="config_error", error_text=resolved["config_error"],
                               engine_version=self.follows_version, resolved_config=resolved)
        return BuildResult(status="no_build", engine_version=self.follows_version, resolved_config=resolved)

    def served_model_name(self, cfg: EngineConfig) -> str:
        opts = {str(k).replace("-", "_"): v for k, v in cfg.options.items()}
        return str(opts.get("served_model_name") or cfg.model)

    def startup_phases(self, log_text: str) -> dict[str, float]:
        """Seconds spent loading weights, capturing CUDA graphs and initialising, from the server's log."""
        return parse_phases(log_text, self.phases)
