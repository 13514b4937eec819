"""The wattbench code location: every asset, check, resource and job, assembled explicitly in one place."""

from __future__ import annotations

import os

import dagster as dg
from dagster_duckdb import DuckDBResource

from assets.bench import bench
from assets.builds import engine_builds
from assets.checks import stage_checks
from assets.reports import REPORT_ASSETS
from pipelines.k8s import K8sAgentLauncher, cluster_benchmark_job
from resources.bench_plan import BenchPlan, plan_path_from_env
from resources.warehouse import default_db_path

ALL_ASSETS = [engine_builds, bench, *REPORT_ASSETS]

benchmark_job = dg.define_asset_job(
    "benchmark",
    selection=dg.AssetSelection.all(),
    description="Build, deploy, load, sample, validate and report the whole plan.",
)


def make_resources(db_path: str | None = None, plan_path: str | None = None, **plan_fields) -> dict:
    """The environment picks the resources: locally the agent is a subprocess, on a cluster
    (WATTBENCH_TARGET=kubernetes) a Pipes pod."""
    on_cluster = os.environ.get("WATTBENCH_TARGET") == "kubernetes"
    return {
        "warehouse": DuckDBResource(database=str(db_path or default_db_path())),
        "plan": BenchPlan(path=plan_path or plan_path_from_env(), **plan_fields),
        "pipes_subprocess_client": K8sAgentLauncher.from_env() if on_cluster else dg.PipesSubprocessClient(),
    }


defs = dg.Definitions(
    assets=ALL_ASSETS,
    asset_checks=stage_checks,
    jobs=[benchmark_job, cluster_benchmark_job],
    resources=make_resources(),
)
