"""The wattbench code location: every asset, check, resource, job, sensor and schedule, assembled explicitly in one
place.

Assets are partitioned by (model, scenario) (assets/partitions.py); the `benchmark` job materializes one partition
per run, so a backfill over many partitions from the UI is one run per (model, scenario). Code references: each
asset links to its source file and line (and to the file on a Git host when $WATTBENCH_GIT_URL is set).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from dagster_duckdb import DuckDBResource

from assets.bench import bench
from assets.builds import LocalEngineBuilder, engine_builds
from assets.checks import stage_checks
from assets.partitions import BENCH_PARTITIONS
from assets.reports import REPORT_ASSETS
from pipelines.k8s import K8sAgentLauncher, K8sBuildLauncher, cluster_benchmark_job
from pipelines.partitions import BENCHMARK_JOB
from pipelines.schedules import SCHEDULES
from pipelines.sensors import SENSORS, HubWatch
from resources.bench_plan import BenchPlan, output_dir_from_env, plan_path_from_env
from resources.warehouse import default_db_path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _with_code_references(assets: list) -> list:
    assets = dg.with_source_code_references(assets)
    git_url = os.environ.get("WATTBENCH_GIT_URL")  # e.g. https://github.com/ORG/wattbench
    if git_url:
        assets = dg.link_code_references_to_git(
            assets_defs=assets, git_url=git_url, git_branch=os.environ.get("WATTBENCH_GIT_BRANCH", "main"),
            file_path_mapping=dg.AnchorBasedFilePathMapping(
                local_file_anchor=REPO_ROOT, file_anchor_path_in_repository=""),
        )
    return list(assets)


ALL_ASSETS = _with_code_references([engine_builds, bench, *REPORT_ASSETS])

benchmark_job = dg.define_asset_job(
    BENCHMARK_JOB,
    selection=dg.AssetSelection.all(),
    partitions_def=BENCH_PARTITIONS,
    description="Build, deploy, load, sample, validate and report one (model, scenario) partition: the scenario's "
                "plan with the partition's model.",
)


def make_resources(db_path: str | None = None, plan_path: str | None = None, **plan_fields) -> dict:
    """The environment picks the resources: locally the agent is a subprocess and engines build in the step, on a
    cluster (WATTBENCH_TARGET=kubernetes) the agent is a Pipes pod and a GPU-locked engine builds in one too."""
    on_cluster = os.environ.get("WATTBENCH_TARGET") == "kubernetes"
    plan_fields.setdefault("output_dir", output_dir_from_env())
    return {
        "warehouse": DuckDBResource(database=str(db_path or default_db_path())),
        "plan": BenchPlan(path=plan_path or plan_path_from_env(), **plan_fields),
        "pipes_subprocess_client": K8sAgentLauncher.from_env() if on_cluster else dg.PipesSubprocessClient(),
        "engine_builder": K8sBuildLauncher.from_env() if on_cluster else LocalEngineBuilder(),
        "hub": HubWatch.from_env(),
    }


defs = dg.Definitions(
    assets=ALL_ASSETS,
    # One process per run: the writing steps share one DuckDB file (pool duckdb_writer, limit 1) so they run one
    # at a time anyway, and a step per subprocess would pay Dagster's and GX's import on every step.
    # cluster_benchmark keeps its own executor (a Kubernetes Job per step).
    executor=dg.in_process_executor,
    asset_checks=stage_checks,
    jobs=[benchmark_job, cluster_benchmark_job],
    sensors=SENSORS,
    schedules=SCHEDULES,
    resources=make_resources(),
)
