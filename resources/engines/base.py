"""The one interface every serving engine is driven through.

An adapter knows an engine's documented command line (and the engine version it follows), whether it has a
build step, and where its health and metrics endpoints are. It does not start processes itself: the
deployment targets in resources/deploy do, so that the same adapter serves a local process and a Kubernetes
pod. Agent-side code: stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EngineConfig:
    """What the plan says about one engine deployment of one model."""

    engine: str  # trtllm | vllm | sglang | transformers | external | emulator
    model: str  # model id (Hub name, local path, or the emulator's spec name)
    config_name: str
    precision: str = "fp16"
    tp: int = 1
    gpu: str = "h100-sxm"
    profile: str | None = None  # emulator profile: trtllm-like | vllm-like
    options: dict[str, Any] = field(default_factory=dict)  # engine-specific knobs, as the plan gives them

    def build_id(self) -> str:
        """Content address of everything that shapes a build: an unchanged config is never rebuilt."""
        blob = json.dumps(asdict(self), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class BuildResult:
    """One engine_builds row (see sql/schema.sql)."""

    status: str  # built | cached | no_build | failed
    build_s: float | None = None
    artifact_sha256: str | None = None
    artifact_bytes: int | None = None
    artifact_path: str | None = None
    engine_version: str | None = None
    hardware_lock: dict[str, Any] | None = None
    resolved_config: dict[str, Any] = field(default_factory=dict)
    error_kind: str | None = None
    error_text: str | None = None


class EngineAdapter:
    """Base class; subclasses fill in the engine's own command line."""

    name: str = "base"
    follows_version: str = ""  # the engine release whose documented CLI this adapter follows
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"
    source: str = "measured"
    # Whether the server accepts vLLM's ignore_eos / min_tokens request fields (some reject unknown fields).
    accepts_ignore_eos: bool = True

    # Whether build() compiles an artifact locked to the GPU it runs on (a TensorRT-LLM engine): on a cluster such
    # a build runs in a build pod on a node of the target GPU kind, not in the GPU-less step pod.
    builds_on_gpu: bool = False

    def build(self, cfg: EngineConfig, workdir: Path) -> BuildResult:
        return BuildResult(status="no_build", resolved_config=self.resolved_config(cfg))

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        raise NotImplementedError

    def resolved_config(self, cfg: EngineConfig) -> dict[str, Any]:
        return {"engine": cfg.engine, "model": cfg.model, "precision": cfg.precision, "tp": cfg.tp, **cfg.options}

    def served_model_name(self, cfg: EngineConfig) -> str:
        return cfg.model


class EmulatorAdapter(EngineAdapter):
    """The built-in emulator, served by `wattbench emulate` (resources/engines/emulator)."""

    name = "emulator"
    follows_version = "wattbench"
    source = "emulated"

    def build(self, cfg: EngineConfig, workdir: Path) -> BuildResult:
        from resources.engines.emulator import emulated_build

        return emulated_build(cfg)

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        cmd = [
            sys.executable, "-m", "pipelines.cli", "emulate",
            "--profile", cfg.profile or "vllm-like",
            "--model", cfg.model,
            "--gpu", cfg.gpu,
            "--tp", str(cfg.tp),
            "--precision", cfg.precision,
            "--host", host,
            "--port", str(port),
        ]
        for key, value in sorted(cfg.options.items()):
            cmd += ["--config", f"{key}={value}"]
        return cmd


def adapter_for(engine: str) -> EngineAdapter:
    """The adapter registered for an engine name."""
    from resources.engines import registry

    try:
        return registry.ADAPTERS[engine]()
    except KeyError:
        known = ", ".join(sorted(registry.ADAPTERS))
        raise ValueError(f"unknown engine {engine!r}; expected one of {known}") from None
