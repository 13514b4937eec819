"""Dagster resources that carry the run's configuration: which plan, where bundles and reports go."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from resources.plan import DEFAULT_PLAN, REPO_ROOT, Plan, load_plan


class BenchPlan(dg.ConfigurableResource):
    """The benchmark plan file, and where this run's bundles and reports are written.

    `replay_bundle`: ingest an existing result bundle instead of running the agent (for bundles measured
    elsewhere, e.g. on a GPU node without Dagster).
    """

    path: str = str(DEFAULT_PLAN)
    output_dir: str = str(REPO_ROOT / "data" / "runs")
    replay_bundle: str | None = None

    def load(self) -> tuple[Plan, str]:
        return load_plan(self.path)

    def run_dir(self, run_id: str) -> Path:
        path = Path(self.output_dir) / run_id
        path.mkdir(parents=True, exist_ok=True)
        return path


def plan_path_from_env() -> str:
    return os.environ.get("WATTBENCH_PLAN", str(DEFAULT_PLAN))
