"""The wattbench code location: every asset, check, resource, job, sensor and schedule, assembled in one place, and
built lazily: importing this module reads no environment variable; `defs` (a @dg.definitions function) builds the
Definitions when Dagster loads the code location, and `wattbench run` builds the same ones with its own settings
(`build_definitions(Settings(...))`) and executes their `benchmark` job, so the CLI and the UI share one code path
and a CLI run shows in the instance as `benchmark` with its partition.

Configuration is the resources' (docs/ARCHITECTURE.md, "Runs and definitions"; wattbench/settings.py names every
default and variable): the warehouse file, the plan and the run folder come from WATTBENCH_DB, WATTBENCH_PLAN and
WATTBENCH_RUNS_DIR through dg.EnvVar where they are set (resolved when a run starts, shown by name in the UI),
defaults otherwise; WATTBENCH_TARGET=kubernetes picks the
cluster launchers; WATTBENCH_GIT_URL / WATTBENCH_GIT_BRANCH link each asset's code reference to a Git host.

Assets are partitioned by (model, scenario) (assets/partitions.py); the `benchmark` job materializes one partition
per run, so a backfill over many partitions from the UI is one run per (model, scenario). A plan outside plans/
(WATTBENCH_PLAN, or `wattbench run --plan FILE`) adds its stem as a scenario of the definitions built for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_duckdb import DuckDBResource

from assets.bench import bench
from assets.builds import engine_builds
from assets.checks import stage_checks
from assets.partitions import BENCH_PARTITIONS, bench_partitions
from assets.reports import REPORT_ASSETS
from pipelines.k8s import build_cluster_benchmark_job, executor_config_from_env
from pipelines.partitions import BENCHMARK_JOB
from pipelines.schedules import build_schedules
from pipelines.sensors import DEFAULT_POLL_S, build_sensors
from resources.bench_plan import BenchPlan
from resources.engine_builder import LocalEngineBuilder
from resources.hub_watch import HubWatch
from resources.k8s import K8sAgentLauncher, K8sBuildLauncher
from wattbench import settings as names
from wattbench.settings import DEFAULT_DB, DEFAULT_PLAN, DEFAULT_RUNS_DIR, REPO_ROOT

# Every asset with its code reference (source file and line); linked to a Git host by build_definitions.
ALL_ASSETS = list(dg.with_source_code_references([engine_builds, bench, *REPORT_ASSETS]))


@dataclass(frozen=True)
class Settings:
    """What the definitions are built for. Each None field comes from its environment variable through dg.EnvVar
    when that is set (resolved at run time), else the default. `wattbench run` gives them explicitly."""

    db_path: str | None = None
    plan_path: str | None = None
    output_dir: str | None = None
    replay_bundle: str | None = None
    extra_plan: str | None = None  # a plan outside plans/: its stem becomes a scenario
    target: str | None = None  # local | kubernetes
    git_url: str | None = None
    git_branch: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            extra_plan=env.get(names.PLAN) or None,
            target=env.get(names.TARGET) or None,
            git_url=env.get(names.GIT_URL) or None,
            git_branch=env.get(names.GIT_BRANCH) or None,
            env=env,
        )

    def value(self, given: str | None, var: str, default: Path) -> Any:
        if given is not None:
            return str(given)
        return dg.EnvVar(var) if self.env.get(var) else str(default)


def make_resources(
    db_path: str | None = None, plan_path: str | None = None, settings: Settings | None = None, **plan_fields
) -> dict:
    """The resources of the code location. Locally the agent is a subprocess and engines build in the step; on a
    cluster (target kubernetes) the agent is a Pipes pod and a GPU-locked engine builds in one too."""
    settings = settings if settings is not None else Settings.from_env()
    on_cluster = settings.target == "kubernetes"
    plan_fields.setdefault("output_dir", settings.value(settings.output_dir, names.RUNS_DIR, DEFAULT_RUNS_DIR))
    if settings.replay_bundle and "replay_bundle" not in plan_fields:
        plan_fields["replay_bundle"] = settings.replay_bundle
    return {
        "warehouse": DuckDBResource(database=settings.value(db_path or settings.db_path, names.DB, DEFAULT_DB)),
        "plan": BenchPlan(
            path=settings.value(plan_path or settings.plan_path, names.PLAN, DEFAULT_PLAN), **plan_fields
        ),
        "pipes_subprocess_client": K8sAgentLauncher.from_env() if on_cluster else dg.PipesSubprocessClient(),
        "engine_builder": K8sBuildLauncher.from_env() if on_cluster else LocalEngineBuilder(),
        "hub": HubWatch.from_env(),
    }


def _assets(settings: Settings) -> list:
    assets = ALL_ASSETS
    partitions = bench_partitions(settings.extra_plan)
    if partitions is not BENCH_PARTITIONS:  # a scenario beyond plans/: every asset gets the wider partitions
        assets = list(dg.map_asset_specs(lambda spec: spec.replace_attributes(partitions_def=partitions), assets))
    if settings.git_url:  # e.g. https://github.com/ORG/wattbench
        assets = list(
            dg.link_code_references_to_git(
                assets_defs=assets,
                git_url=settings.git_url,
                git_branch=settings.git_branch or "main",
                file_path_mapping=dg.AnchorBasedFilePathMapping(
                    local_file_anchor=REPO_ROOT, file_anchor_path_in_repository=""
                ),
            )
        )
    return assets


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    """The code location's Definitions for `settings` (from the environment when None)."""
    settings = settings if settings is not None else Settings.from_env()
    env = settings.env
    benchmark_job = dg.define_asset_job(
        BENCHMARK_JOB,
        selection=dg.AssetSelection.all(),
        partitions_def=bench_partitions(settings.extra_plan),
        description="Build, deploy, load, sample, validate and report one (model, scenario) partition: the "
        "scenario's plan with the partition's model.",
    )
    return dg.Definitions(
        assets=_assets(settings),
        # One process per run: the writing steps share one DuckDB file (pool duckdb_writer, limit 1) so they run one
        # at a time anyway, and a step per subprocess would pay Dagster's and GX's import on every step.
        # cluster_benchmark keeps its own executor (a Kubernetes Job per step).
        executor=dg.in_process_executor,
        asset_checks=stage_checks,
        jobs=[benchmark_job, build_cluster_benchmark_job(executor_config_from_env(env))],
        sensors=build_sensors(int(env.get(names.HUB_POLL_S) or DEFAULT_POLL_S)),
        schedules=build_schedules(env.get(names.SCHEDULE_TZ) or "UTC"),
        resources=make_resources(settings=settings),
    )


@dg.definitions
def defs() -> dg.Definitions:
    """What `dagster dev -w workspace.yaml` (and `make ui`) loads: built from the environment when loaded."""
    return build_definitions()
