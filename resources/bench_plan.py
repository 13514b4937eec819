"""Dagster resources that carry the run's configuration: which plan, where bundles and reports go.

Benchmark assets are partitioned by model (dynamic partition `models`) and scenario (a plan file: the stems of
plans/*.yaml, plus the file $WATTBENCH_PLAN names). A partition resolves to its scenario's plan with `model`
replaced by the partition's model (`BenchPlan.load(partition_key)`); without a partition key (assets invoked
directly) the resource's own plan file is used as written.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from resources.model_registry import model_id_for, partition_key_for
from resources.plan import DEFAULT_PLAN, REPO_ROOT, Plan, PlanError, load_plan

PLANS_DIR = REPO_ROOT / "plans"


def scenario_key_for(plan_path: str | Path) -> str:
    """A plan file's scenario partition key: its file stem (plans/default.yaml -> default)."""
    return partition_key_for(Path(plan_path).stem)


def plan_file_scenarios() -> dict[str, Path]:
    """Scenario key -> plan file for every plans/*.yaml (what the code location's partitions are built from at
    import: the files, no environment)."""
    return {scenario_key_for(p): p.resolve() for p in sorted(PLANS_DIR.glob("*.yaml"))}


def scenario_plans(extra: str | Path | None = None) -> dict[str, Path]:
    """Scenario key -> plan file: every plans/*.yaml, and the plan $WATTBENCH_PLAN (read when called, at run time)
    or `extra` names, which wins over a plans/ file of the same stem."""
    out = plan_file_scenarios()
    for path in (os.environ.get("WATTBENCH_PLAN"), extra):
        if path:
            out[scenario_key_for(path)] = Path(path).resolve()
    return dict(sorted(out.items()))


def partition_dims(partition_key: Any) -> Mapping[str, str] | None:
    """{'model': ..., 'scenario': ...} of a (model, scenario) partition key or its string form; None for none."""
    if partition_key is None:
        return None
    if isinstance(partition_key, dg.MultiPartitionKey):
        return partition_key.keys_by_dimension
    text = str(partition_key)
    if "|" not in text:
        raise PlanError(f"partition {text!r}: expected a model|scenario key")
    model, scenario = text.split("|", 1)  # MultiPartitionKey's string form orders dimensions by name
    return {"model": model, "scenario": scenario}


class BenchPlan(dg.ConfigurableResource):
    """The benchmark plan file, and where this run's bundles and reports are written.

    `replay_bundle`: ingest an existing result bundle instead of running the agent (for bundles measured
    elsewhere, e.g. on a GPU node without Dagster).
    """

    path: str = str(DEFAULT_PLAN)
    output_dir: str = str(REPO_ROOT / "data" / "runs")
    replay_bundle: str | None = None

    def plan_path(self, partition_key: Any = None) -> Path:
        """The plan file of a partition's scenario (this resource's file for its own stem, or no partition)."""
        dims = partition_dims(partition_key)
        if dims is None or dims["scenario"] == scenario_key_for(self.path):
            return Path(self.path)
        plans = scenario_plans()
        if dims["scenario"] not in plans:
            raise PlanError(f"scenario {dims['scenario']!r}: no plan file; known: {', '.join(plans)}")
        return plans[dims["scenario"]]

    def load(self, partition_key: Any = None) -> tuple[Plan, str]:
        """The plan (and a sha256 naming it) for a partition: the scenario's plan file with `model` set to the
        partition's model; the file's own model where the partition names it."""
        plan, sha = load_plan(self.plan_path(partition_key))
        dims = partition_dims(partition_key)
        if dims is None or dims["model"] == partition_key_for(plan.model):
            return plan, sha
        model = model_id_for(dims["model"])
        # an engine's checkpoint is a copy of the plan's own model: another model's run loads that model instead
        engines = [e.model_copy(update={"checkpoint": None}) for e in plan.engines]
        return plan.model_copy(update={"model": model, "engines": engines}), hashlib.sha256(
            f"{sha}\nmodel: {model}".encode()
        ).hexdigest()

    def run_dir(self, run_id: str) -> Path:
        path = Path(self.output_dir) / run_id
        path.mkdir(parents=True, exist_ok=True)
        return path


def plan_path_from_env() -> str:
    return os.environ.get("WATTBENCH_PLAN", str(DEFAULT_PLAN))


def output_dir_from_env() -> str:
    """Where run folders (bundles, reports) go: $WATTBENCH_RUNS_DIR, else data/runs."""
    return os.environ.get("WATTBENCH_RUNS_DIR", str(REPO_ROOT / "data" / "runs"))
