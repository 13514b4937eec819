"""How benchmark results are partitioned, and the one place a partition key is read.

By model (dynamic: models appear as they are released or asked for; keys from wattbench/model_registry.py
partition_key_for) and by scenario (static: one per plan file in plans/, `plan_file_scenarios`; a plan outside
plans/ adds its stem in the definitions built for it, `bench_partitions`). Every asset of the graph shares this
definition, so one run materializes one (model, scenario) cell end to end and a backfill over many cells launches
one run per cell.

A step resolves its partition once, `step_partition(context)`, and hands the `Partition` on: to BenchPlan.load (the
scenario's plan with the partition's model), to its metadata, and to the benchmark it opens (runs.partition_key).
pipelines/partitions.py picks and registers partitions for `wattbench run`, the sensors and the schedules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg

from wattbench import settings
from wattbench.model_registry import partition_key_for
from wattbench.plan import PlanError


def scenario_key_for(plan_path: str | Path) -> str:
    """A plan file's scenario partition key: its file stem (plans/default.yaml -> default)."""
    return partition_key_for(Path(plan_path).stem)


def plan_file_scenarios() -> dict[str, Path]:
    """Scenario key -> plan file for every plans/*.yaml (what the code location's partitions are built from at
    import: the files, no environment)."""
    return {scenario_key_for(p): p.resolve() for p in sorted(settings.PLANS_DIR.glob("*.yaml"))}


def scenario_plans(extra: str | Path | None = None) -> dict[str, Path]:
    """Scenario key -> plan file: every plans/*.yaml, and the plan $WATTBENCH_PLAN (read when called, at run time)
    or `extra` names, which wins over a plans/ file of the same stem."""
    out = plan_file_scenarios()
    for path in (os.environ.get(settings.PLAN), extra):
        if path:
            out[scenario_key_for(path)] = Path(path).resolve()
    return dict(sorted(out.items()))


MODELS = dg.DynamicPartitionsDefinition(name="models")
SCENARIOS = dg.StaticPartitionsDefinition(list(plan_file_scenarios()))
BENCH_PARTITIONS = dg.MultiPartitionsDefinition({"model": MODELS, "scenario": SCENARIOS})


@cache
def _with_scenario(scenario: str) -> dg.MultiPartitionsDefinition:
    keys = sorted({*SCENARIOS.get_partition_keys(), scenario})
    return dg.MultiPartitionsDefinition({"model": MODELS, "scenario": dg.StaticPartitionsDefinition(keys)})


def bench_partitions(extra_plan: str | Path | None = None) -> dg.MultiPartitionsDefinition:
    """The partitions of definitions built for `extra_plan` (a plan file whose stem may not be a plans/ scenario):
    BENCH_PARTITIONS itself when it adds nothing."""
    if not extra_plan or scenario_key_for(extra_plan) in SCENARIOS.get_partition_keys():
        return BENCH_PARTITIONS
    return _with_scenario(scenario_key_for(extra_plan))


@dataclass(frozen=True)
class Partition:
    """One (model, scenario) cell: what a step benchmarks."""

    model: str
    scenario: str

    @property
    def key(self) -> str:
        """The key's string form, as Dagster writes a MultiPartitionKey (dimensions by name) and runs.partition_key
        stores it."""
        return f"{self.model}|{self.scenario}"

    def metadata(self) -> dict[str, str]:
        return {"model": self.model, "scenario": self.scenario}


def partition_of(key: Any) -> Partition | None:
    """A (model, scenario) partition key read: a MultiPartitionKey, its string form 'model|scenario' or a Partition;
    None for None."""
    if key is None or isinstance(key, Partition):
        return key
    if isinstance(key, dg.MultiPartitionKey):
        dims = key.keys_by_dimension
        return Partition(dims["model"], dims["scenario"])
    text = str(key)
    if "|" not in text:
        raise PlanError(f"partition {text!r}: expected a model|scenario key")
    model, scenario = text.split("|", 1)  # MultiPartitionKey's string form orders dimensions by name
    return Partition(model, scenario)


def step_partition(context: Any) -> Partition | None:
    """The partition of the step's run (an asset's or a check's context), or None when the asset runs unpartitioned
    (invoked directly)."""
    ctx = getattr(context, "op_execution_context", context)  # a check's context wraps an op context
    return partition_of(ctx.partition_key) if ctx.has_partition_key else None


def partition_metadata(partition: Partition | None) -> dict[str, str]:
    """The partition as asset metadata ({} unpartitioned)."""
    return {} if partition is None else partition.metadata()
