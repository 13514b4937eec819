"""The one interface every serving engine is driven through.

An adapter knows an engine's documented command line (and the engine version it follows), whether it has a
build step, and where its health and metrics endpoints are. It does not start processes itself: the
deployment targets in agent/wattbench_agent/deploy do, so that the same adapter serves a local process and a Kubernetes
pod. Agent-side code: stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import re
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
    # Releases this adapter's flags, log lines and /metrics names were checked against (contract tests, or a run
    # on real hardware). A deployment reporting another version still runs; its row says version_checked=false
    # and validation warns.
    checked_versions: tuple[str, ...] = ()
    # Where the running server says its version: an HTTP path answering {"version": ...}, and log-line patterns
    # whose first group is the version, tried in order.
    version_path: str | None = None
    version_patterns: tuple[re.Pattern, ...] = ()
    # Start failures this engine is known for: (pattern over the failure's text, what to do about it). The first
    # that matches is added to the deployment row's error text.
    start_failure_hints: tuple[tuple[re.Pattern, str], ...] = ()
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"
    source: str = "measured"
    # Whether the server accepts vLLM's ignore_eos / min_tokens request fields (some reject unknown fields).
    accepts_ignore_eos: bool = True

    # Whether build() compiles an artifact locked to the GPU it runs on (a TensorRT-LLM engine): on a cluster such
    # a build runs in a build pod on a node of the target GPU kind, not in the GPU-less step pod.
    builds_on_gpu: bool = False
    # The container image that carries this engine at the version the adapter follows (Kubernetes target; the
    # plan's or CLI's image= overrides it).
    image: str = "wattbench:latest"

    def plan_problem(self, spec: dict[str, Any]) -> str | None:
        """What a plan's engine entry (its fields as a dict: engine, profile, url, precision, tp, options, ...)
        lacks for this engine, in one line; None when it can run. Plan validation asks every engine's adapter."""
        return None

    def build(self, cfg: EngineConfig, workdir: Path) -> BuildResult:
        return BuildResult(status="no_build", resolved_config=self.resolved_config(cfg))

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        raise NotImplementedError

    def resolved_config(self, cfg: EngineConfig) -> dict[str, Any]:
        return {"engine": cfg.engine, "model": cfg.model, "precision": cfg.precision, "tp": cfg.tp, **cfg.options}

    def served_model_name(self, cfg: EngineConfig) -> str:
        return cfg.model

    def detect_version(self, url: str | None, log_text: str = "") -> tuple[str | None, str]:
        """(version, where it was read) from the running engine: its version endpoint, else its log; (None,
        'unknown') when neither says."""
        if url and self.version_path:
            from wattbench_agent.fetch import FetchError, get

            try:  # bounded in time, size and nesting: the engine may be anyone's
                resp = get(url.rstrip("/") + self.version_path, timeout_s=3.0)
                if resp.status == 200:
                    version = resp.json().get("version")
                    if version:
                        return str(version)[:200], self.version_path
            except (FetchError, ValueError, AttributeError):
                pass
        for pattern in self.version_patterns:
            m = pattern.search(log_text)
            if m:
                return m.group(1), "log"
        return None, "unknown"

    def start_failure_hint(self, text: str) -> str | None:
        """What to do about a start failure whose text (cause line and log tail) this engine is known for."""
        for pattern, hint in self.start_failure_hints:
            if pattern.search(text):
                return hint
        return None

    def version_checked(self, version: str | None) -> bool | None:
        """Whether the adapter was checked against this version (None when the version is unknown)."""
        if version is None:
            return None
        return version in self.checked_versions
