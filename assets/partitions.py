"""How benchmark results are partitioned: by model (dynamic: models appear as they are released or asked for)
and by scenario (static: one per plan file, see resources/bench_plan.scenario_plans).

Every asset of the graph shares this definition, so one run materializes one (model, scenario) cell end to end
and a backfill over many cells launches one run per cell. pipelines/partitions.py has the helpers that pick or
register partitions for `wattbench run`, the sensors and the schedules.
"""

import dagster as dg

from resources.bench_plan import scenario_plans

MODELS = dg.DynamicPartitionsDefinition(name="models")
SCENARIOS = dg.StaticPartitionsDefinition(list(scenario_plans()))
BENCH_PARTITIONS = dg.MultiPartitionsDefinition({"model": MODELS, "scenario": SCENARIOS})
