"""The `plan` resource: which plan a run measures, and where its bundles and reports go.

Benchmark assets are partitioned by model (dynamic partition `models`) and scenario (a plan file: the stems of
plans/*.yaml, plus the file $WATTBENCH_PLAN names; wattbench/partitions.py). A partition resolves to its scenario's plan
with `model` replaced by the partition's model (`BenchPlan.load(partition)`); without a partition (assets invoked
directly) the resource's own plan file is used as written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import dagster as dg

from wattbench.model_registry import model_id_for, partition_key_for
from wattbench.partitions import partition_of, scenario_key_for, scenario_plans
from wattbench.plan import Plan, PlanError, load_plan
from wattbench.settings import DEFAULT_PLAN, DEFAULT_RUNS_DIR


class BenchPlan(dg.ConfigurableResource):
    """The benchmark plan file, and where this run's bundles and reports are written.

    `replay_bundle`: ingest an existing result bundle instead of running the agent (for bundles measured
    elsewhere, e.g. on a GPU node without Dagster).
    """

    path: str = str(DEFAULT_PLAN)
    output_dir: str = str(DEFAULT_RUNS_DIR)
    replay_bundle: str | None = None

    def plan_path(self, partition_key: Any = None) -> Path:
        """The plan file of a partition's scenario (this resource's file for its own stem, or no partition)."""
        partition = partition_of(partition_key)
        if partition is None or partition.scenario == scenario_key_for(self.path):
            return Path(self.path)
        plans = scenario_plans()
        if partition.scenario not in plans:
            raise PlanError(f"scenario {partition.scenario!r}: no plan file; known: {', '.join(plans)}")
        return plans[partition.scenario]

    def load(self, partition_key: Any = None) -> tuple[Plan, str]:
        """The plan (and a sha256 naming it) for a partition: the scenario's plan file with `model` set to the
        partition's model; the file's own model where the partition names it."""
        plan, sha = load_plan(self.plan_path(partition_key))
        partition = partition_of(partition_key)
        if partition is None or partition.model == partition_key_for(plan.model):
            return plan, sha
        model = model_id_for(partition.model)
        # an engine's checkpoint is a copy of the plan's own model: another model's run loads that model instead
        engines = [e.model_copy(update={"checkpoint": None}) for e in plan.engines]
        return plan.model_copy(update={"model": model, "engines": engines}), hashlib.sha256(
            f"{sha}\nmodel: {model}".encode()
        ).hexdigest()

    def run_dir(self, run_id: str) -> Path:
        path = Path(self.output_dir) / run_id
        path.mkdir(parents=True, exist_ok=True)
        return path
