"""Picking and registering (model, scenario) partitions: for `wattbench run`, the sensors and the schedules.

The definitions, and the reading of a partition key, live in assets/partitions.py (assets do not import pipelines):
`models` is a dynamic partition (keys from wattbench/model_registry.partition_key_for), `scenario` a static one (one
key per plan file, scenario_plans).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.partitions import BENCH_PARTITIONS, MODELS, SCENARIOS, bench_partitions
from wattbench.model_registry import partition_key_for
from wattbench.partitions import scenario_key_for, scenario_plans
from wattbench.plan import Plan, PlanError, load_plan

BENCHMARK_JOB = "benchmark"  # the partitioned job that sensors, schedules and backfills launch
MODEL_TAG = "wattbench/model_id"  # the exact model id a run benchmarks (partition keys are sanitised)
SCENARIO_TAG = "wattbench/scenario"
TRIGGER_TAG = "wattbench/trigger"  # cli | hub-sensor | nightly | weekly


def bench_partition(model_key: str, scenario: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"model": model_key, "scenario": scenario})


def partition_for_plan(
    plan: Plan, plan_path: str | Path, partitions: dg.MultiPartitionsDefinition | None = None
) -> dg.MultiPartitionKey:
    """`wattbench run --plan X`: model = the plan's model, scenario = the plan file's stem, which must be a
    scenario of `partitions` (default: the definitions built for that plan, assets/partitions.bench_partitions)."""
    scenario = scenario_key_for(plan_path)
    partitions = partitions or bench_partitions(plan_path)
    known = next(d.partitions_def for d in partitions.partitions_defs if d.name == "scenario").get_partition_keys()
    if scenario not in known:
        raise PlanError(
            f"{plan_path}: scenario {scenario!r} is not a partition of these definitions "
            f"(known: {', '.join(known)}); build them for the plan (WATTBENCH_PLAN)"
        )
    return bench_partition(partition_key_for(plan.model), scenario)


def ensure_models(instance: dg.DagsterInstance, model_keys: list[str]) -> list[str]:
    """Add the model keys missing from the dynamic partition `models`; returns those added."""
    have = set(instance.get_dynamic_partitions(MODELS.name))
    new = [k for k in dict.fromkeys(model_keys) if k not in have]
    if new:
        instance.add_dynamic_partitions(MODELS.name, new)
    return new


def registered_models(instance: dg.DagsterInstance) -> list[str]:
    return list(instance.get_dynamic_partitions(MODELS.name))


def pinned_models(scenarios: list[str] | None = None) -> dict[str, str]:
    """model key -> model id of the model each scenario's plan file names (all scenarios by default)."""
    out: dict[str, str] = {}
    plans = scenario_plans()
    for scenario in scenarios if scenarios is not None else list(plans):
        path = plans.get(scenario)
        if path is None:
            continue
        try:
            plan, _ = load_plan(path)
        except PlanError:
            continue
        out[partition_key_for(plan.model)] = plan.model
    return out


__all__ = [
    "BENCH_PARTITIONS",
    "MODELS",
    "SCENARIOS",
    "BENCHMARK_JOB",
    "MODEL_TAG",
    "SCENARIO_TAG",
    "TRIGGER_TAG",
    "bench_partition",
    "partition_for_plan",
    "ensure_models",
    "registered_models",
    "pinned_models",
]
