"""What engines that load checkpoints directly (vLLM, SGLang) share: no build step, a served model name,
startup phases read from their logs. Agent-side code: stdlib only."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wattbench_agent.engines.base import BuildResult, EngineAdapter, EngineConfig
from wattbench_agent.engines.failures import DeployError
from wattbench_agent.engines.options import Flag, OptionError, normalise


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
    """Base of adapters whose engines have no build step. Subclasses set their option table, precision map and
    log phases, write `serve_command` from `serve_options`, and may add to `resolved_config` via `_resolved_extra`."""

    phases: tuple[tuple[str, re.Pattern], ...] = ()
    option_table: dict[str, Flag] = {}
    precisions: dict[str, tuple[str, str | None]] = {}  # precision -> (dtype, quantization)
    aliases: dict[str, str] | None = None

    def options(self, cfg: EngineConfig) -> dict[str, Any]:
        """The plan's options as this engine's flags want them, with dtype/quantization from the precision."""
        if cfg.precision not in self.precisions:
            raise OptionError(
                f"{self.name}: precision {cfg.precision!r} not supported; expected one of {', '.join(self.precisions)}"
            )
        opts = normalise(cfg.options, self.option_table, self.name, self.aliases)
        dtype, quant = self.precisions[cfg.precision]
        opts.setdefault("dtype", dtype)
        if quant:
            opts.setdefault("quantization", quant)
        return opts

    def serve_options(self, cfg: EngineConfig, artifact_path: str | None) -> dict[str, Any]:
        """`options`, with a bad option turned into a config_error start failure and the served model name kept."""
        try:
            opts = self.options(cfg)
        except OptionError as exc:
            raise DeployError("config_error", str(exc)) from None
        if artifact_path and artifact_path != cfg.model and not opts.get("served_model_name"):
            opts["served_model_name"] = cfg.model  # requests keep naming the model as the plan does
        return opts

    def resolved_config(self, cfg: EngineConfig) -> dict[str, Any]:
        base = {
            "engine": self.name,
            "model": cfg.model,
            "precision": cfg.precision,
            "tp": cfg.tp,
            "follows_version": self.follows_version,
        }
        try:
            opts = self.options(cfg)
        except OptionError as exc:
            return {**base, **cfg.options, "config_error": str(exc)}
        return {**base, **self._resolved_extra(cfg, opts)}

    def _resolved_extra(self, cfg: EngineConfig, opts: dict[str, Any]) -> dict[str, Any]:
        return opts

    def build(self, cfg: EngineConfig, workdir: Path | None) -> BuildResult:
        resolved = self.resolved_config(cfg)
        if "config_error" in resolved:
            return BuildResult(
                status="failed",
                error_kind="config_error",
                error_text=resolved["config_error"],
                engine_version=self.follows_version,
                resolved_config=resolved,
            )
        return BuildResult(status="no_build", engine_version=self.follows_version, resolved_config=resolved)

    def served_model_name(self, cfg: EngineConfig) -> str:
        opts = {str(k).replace("-", "_"): v for k, v in cfg.options.items()}
        return str(opts.get("served_model_name") or cfg.model)

    def startup_phases(self, log_text: str) -> dict[str, float]:
        """Seconds spent loading weights, capturing CUDA graphs and initialising, from the server's log."""
        return parse_phases(log_text, self.phases)
