"""How benchmark results are partitioned (Dagster's definitions), and the one place a step's partition key is read.

By model (dynamic: models appear as they are released or asked for; keys from wattbench/model_registry.py
partition_key_for) and by scenario (static: one per plan file in plans/, `plan_file_scenarios`; a plan outside
plans/ adds its stem in the definitions built for it, `bench_partitions`). Every asset of the graph shares this
definition, so one run materializes one (model, scenario) cell end to end and a backfill over many cells launches
one run per cell. The partition itself (`Partition`, reading a key, the scenarios' plan files) is Dagster-free, in
wattbench/partitions.py, which BenchPlan (a resource) reads too.

A step resolves its partition once, at its top, `step_partition(context)`, and hands the `Partition` on: to
BenchPlan.load (the scenario's plan with the partition's model), to its metadata, and to assets/benchmark_run.py (the
benchmark it opens or works on: runs.partition_key, dagster_runs, failed_runs).
pipelines/partitions.py picks and registers partitions for `wattbench run`, the sensors and the schedules.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg

from wattbench.partitions import Partition, partition_of, plan_file_scenarios, scenario_key_for

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


def step_partition(context: Any) -> Partition | None:
    """The partition of the step's run (an asset's or a check's context), or None when the asset runs unpartitioned
    (invoked directly)."""
    ctx = getattr(context, "op_execution_context", context)  # a check's context wraps an op context
    return partition_of(ctx.partition_key) if ctx.has_partition_key else None


def partition_metadata(partition: Partition | None) -> dict[str, str]:
    """The partition as asset metadata ({} unpartitioned)."""
    return {} if partition is None else partition.metadata()
