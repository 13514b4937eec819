"""Schedules: a nightly regression run of the pinned matrix and a weekly full sweep.

- `nightly_regression` (02:00 every day): the `default` scenario (the pinned engine matrix of plans/default.yaml)
  for every registered model; the regressions asset then compares each load point with its previous night.
- `weekly_full_sweep` (03:00 on Sundays): every scenario (plans/*.yaml) for every registered model.

Registered models are the keys of the dynamic partition `models` (added by `wattbench run`, the model-release
sensor, or the UI). The model plans/default.yaml names is always part of the matrix: a schedule adds its
partition key when missing, so a fresh instance benchmarks something. Run keys carry the scheduled date, so
a tick evaluated twice requests each run once. Both are stopped until started in the UI (or
`dagster schedule start`); the timezone is $WATTBENCH_SCHEDULE_TZ (default UTC), read when the definitions are
built (pipelines/definitions.py), not at import.
"""

from __future__ import annotations

import dagster as dg

from pipelines.partitions import (
    BENCHMARK_JOB,
    MODEL_TAG,
    SCENARIO_TAG,
    TRIGGER_TAG,
    bench_partition,
    ensure_models,
    pinned_models,
    registered_models,
)
from wattbench.model_registry import model_id_for
from wattbench.partitions import scenario_plans

PINNED_SCENARIO = "default"
TZ = "UTC"


def scheduled_run_requests(
    context: dg.ScheduleEvaluationContext, scenarios: list[str], trigger: str
) -> list[dg.RunRequest]:
    pinned = pinned_models([PINNED_SCENARIO])
    ensure_models(context.instance, list(pinned))
    models = registered_models(context.instance)
    day = context.scheduled_execution_time.strftime("%Y-%m-%d") if context.scheduled_execution_time else "manual"
    return [
        dg.RunRequest(
            run_key=f"{trigger}:{day}:{model}|{scenario}",
            partition_key=bench_partition(model, scenario),
            tags={MODEL_TAG: pinned.get(model, model_id_for(model)), SCENARIO_TAG: scenario, TRIGGER_TAG: trigger},
        )
        for scenario in scenarios
        for model in models
    ]


def build_schedules(tz: str = TZ) -> list[dg.ScheduleDefinition]:
    """The nightly and weekly schedules in timezone `tz`."""

    @dg.schedule(
        name="nightly_regression",
        cron_schedule="0 2 * * *",
        job_name=BENCHMARK_JOB,
        execution_timezone=tz,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Every night: the pinned matrix (scenario 'default') for every registered model, so "
        "`regressions` compares each load point with the night before.",
    )
    def nightly_regression(context: dg.ScheduleEvaluationContext):
        if PINNED_SCENARIO not in scenario_plans():
            return dg.SkipReason(f"no scenario {PINNED_SCENARIO!r} (plans/{PINNED_SCENARIO}.yaml is missing)")
        return scheduled_run_requests(context, [PINNED_SCENARIO], "nightly") or dg.SkipReason("no registered models")

    @dg.schedule(
        name="weekly_full_sweep",
        cron_schedule="0 3 * * 0",
        job_name=BENCHMARK_JOB,
        execution_timezone=tz,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Every Sunday: every scenario (plans/*.yaml) for every registered model.",
    )
    def weekly_full_sweep(context: dg.ScheduleEvaluationContext):
        return scheduled_run_requests(context, list(scenario_plans()), "weekly") or dg.SkipReason(
            "no registered models"
        )

    return [nightly_regression, weekly_full_sweep]


SCHEDULES = build_schedules()
nightly_regression, weekly_full_sweep = SCHEDULES
