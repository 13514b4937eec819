"""`python3 -m wattbench_agent.engines.build_agent`: build engines on the GPU node they will serve on.

A TensorRT-LLM engine is locked to the GPU it was compiled on (agent/wattbench_agent/engines/build_cache.py), so on a
cluster the `engine_builds` step does not build in its own, GPU-less pod: it starts this agent in a build pod on a node
of the target GPU kind (pipelines/k8s.py, K8sBuildLauncher) and writes the engine_builds rows from what the agent
reports.

The build spec, `build_spec()`'s shape:

    {"configs": [EngineConfig as a dict, ...], "workdir": folder for build logs | None,
     "engines_dir": folder in which to link <build_id> -> the engine | None}

comes in the Pipes extras ("build_spec") when Dagster launches the agent, else from `--spec FILE` or
$WATTBENCH_BUILD_SPEC (the pod `wattbench deploy --target kubernetes --dry-run` prints). For each config the agent
runs the adapter's build - a cache hit returns at once - and reports `result_message()`: the BuildResult's fields,
through Pipes as a custom message, or as a JSON line on stdout. A build that fails, or raises, is reported as a
'failed' result with its error kind and text (failures are data); the agent itself exits 0.

Agent-side code: stdlib, dagster-pipes and wattbench's engine code; never Dagster core, DuckDB or GX.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from wattbench_agent.engines.base import BuildResult, EngineConfig
from wattbench_agent.engines.registry import adapter_for

BUILD_SPEC_ENV = "WATTBENCH_BUILD_SPEC"
BUILD_SPEC_EXTRA = "build_spec"

Log = Callable[[str], None]
Report = Callable[[dict[str, Any]], None]


def build_spec(
    configs: Iterable[EngineConfig],
    workdir: str | os.PathLike | None = None,
    engines_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    return {
        "configs": [asdict(cfg) for cfg in configs],
        "workdir": str(workdir) if workdir else None,
        "engines_dir": str(engines_dir) if engines_dir else None,
    }


def result_message(cfg: EngineConfig, result: BuildResult) -> dict[str, Any]:
    """What the agent reports for one config (JSON-serialisable)."""
    return {"build_id": cfg.build_id(), "config_name": cfg.config_name, "build_result": asdict(result)}


def result_from_messages(cfg: EngineConfig, messages: Iterable[Any]) -> BuildResult | None:
    """The BuildResult the agent reported for `cfg` among its messages, or None when it reported none."""
    for message in messages:
        if isinstance(message, dict) and message.get("build_id") == cfg.build_id() and "build_result" in message:
            return BuildResult(**message["build_result"])
    return None


def build_one(cfg: EngineConfig, workdir: Path | None) -> BuildResult:
    """The adapter's build; an exception is a failed result, so the spec's other builds go on."""
    adapter = None
    try:
        adapter = adapter_for(cfg.engine)
        return adapter.build(cfg, workdir)
    except Exception as exc:  # noqa: BLE001 - any crash of one build is that build's row
        tail = "".join(traceback.format_exception(exc))[-3000:]
        return BuildResult(
            status="failed",
            error_kind="build_failed",
            error_text=f"the build raised:\n{tail}",
            engine_version=adapter.follows_version if adapter else None,
            resolved_config={
                "engine": cfg.engine,
                "model": cfg.model,
                "precision": cfg.precision,
                "tp": cfg.tp,
                **cfg.options,
            },
        )


def link_engine(engines_dir: Path, cfg: EngineConfig, result: BuildResult) -> Path | None:
    """Point <engines_dir>/<build_id> at the engine in the cache (a relative link, so it resolves wherever the
    volume is mounted): the path a Kubernetes Deployment's trtllm-serve is given. Replaced atomically."""
    if result.status not in ("built", "cached") or not result.artifact_path or result.resolved_config.get("prebuilt"):
        return None
    link = Path(engines_dir) / cfg.build_id()
    link.parent.mkdir(parents=True, exist_ok=True)
    staged = link.with_name(f".{link.name}.{os.getpid()}")
    staged.unlink(missing_ok=True)
    staged.symlink_to(os.path.relpath(result.artifact_path, link.parent))
    os.replace(staged, link)
    return link


def describe(result: BuildResult) -> str:
    if result.status == "failed":
        last_line = ((result.error_text or "").strip().splitlines() or [""])[-1]
        return f"failed ({result.error_kind}): {last_line}"
    if result.status in ("built", "cached"):
        lock = result.hardware_lock or {}
        return (
            f"{result.status} in {result.build_s} s, sha256 {(result.artifact_sha256 or '')[:12]}, "
            f"{result.artifact_bytes} bytes, for {lock.get('gpu_name')} ({lock.get('sm')}), "
            f"TensorRT-LLM {result.engine_version}: {result.artifact_path}"
        )
    return result.status


def run_builds(spec: dict[str, Any], log: Log, report: Report) -> list[BuildResult]:
    """Build every config of the spec, in order, reporting each result as soon as it is known."""
    workdir = Path(spec["workdir"]) if spec.get("workdir") else None
    results = []
    for raw in spec["configs"]:
        cfg = EngineConfig(**raw)
        log(f"build {cfg.config_name} ({cfg.build_id()}): {cfg.engine} {cfg.model} {cfg.precision} tp={cfg.tp}")
        result = build_one(cfg, workdir)
        if spec.get("engines_dir"):
            try:
                link = link_engine(Path(spec["engines_dir"]), cfg, result)
            except OSError as exc:  # the engine is built and cached all the same; only the convenience path is missing
                log(f"could not link {cfg.build_id()} in {spec['engines_dir']}: {exc}")
            else:
                if link:
                    log(f"linked {link} -> {result.artifact_path}")
        log(f"build {cfg.config_name}: {describe(result)}")
        report(result_message(cfg, result))
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, open_dagster_pipes

    if os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR):
        with open_dagster_pipes() as pipes:
            run_builds(pipes.get_extra(BUILD_SPEC_EXTRA), log=pipes.log.info, report=pipes.report_custom_message)
        return 0
    parser = argparse.ArgumentParser(
        prog="python3 -m wattbench_agent.engines.build_agent",
        description=f"Build engines from a build spec (--spec FILE or ${BUILD_SPEC_ENV});"
        " one JSON line per result on stdout.",
    )
    parser.add_argument("--spec", help="build spec JSON file")
    args = parser.parse_args(argv)
    if args.spec:
        spec = json.loads(Path(args.spec).read_text())
    elif os.environ.get(BUILD_SPEC_ENV):
        spec = json.loads(os.environ[BUILD_SPEC_ENV])
    else:
        parser.error(f"no build spec: give --spec FILE or set ${BUILD_SPEC_ENV}")
    run_builds(
        spec,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        report=lambda message: print(json.dumps(message), flush=True),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
