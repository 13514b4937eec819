"""How benchmark results are partitioned: by model (dynamic: models appear as they are released or asked for)
and by scenario (static: one per plan file in plans/, see resources/bench_plan.plan_file_scenarios; a plan outside
plans/ adds its stem in the definitions built for it, `bench_partitions`).

Every asset of the graph shares this definition, so one run materializes one (model, scenario) cell end to end
and a backfill over many cells launches one run per cell. pipelines/partitions.py has the helpers that pick or
register partitions for `wattbench run`, the sensors and the schedules.
"""

from functools import cache
from pathlib import Path

import dagster as dg

from resources.bench_plan import plan_file_scenarios, scenario_key_for

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
