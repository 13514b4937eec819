"""Sensors: new model releases on the Hugging Face Hub, and failed runs recorded in the warehouse.

`model_release_sensor` polls `{base}/api/models?author=ORG&sort=createdAt&direction=-1&limit=N` (with the
configured pipeline_tag / library / filter parameters) for each organisation of the `hub` resource (HubWatch,
resources/hub_watch.py), keeps per-organisation high-water marks in its cursor, adds each new model as a key of
the dynamic partition `models`, and requests one `benchmark` run per (model, scenario) of the configured scenarios:
each run is the scenario's plan (its engine matrix, workloads and prices) with `model` set to the new model. The
cursor advances only in the same result that carries the partitions and run requests; a 429 (Retry-After
honoured), 5xx, timeout or connection error leaves every organisation's mark as it was and backs off (exponentially,
capped) before the next poll.

Cursor (JSON):
    {"v": 1,
     "orgs": {"meta-llama": {"created_at": "2025-04-05T18:23:12.000Z", "ids": ["meta-llama/Llama-4-Scout-17B-16E"]}},
     "failures": 0,                     # consecutive failed polls
     "backoff_until": null,             # ISO time before which the sensor skips without calling the Hub
     "last_error": null}
`ids` are the models seen at exactly `created_at` (ties of the newest timestamp).

`record_failed_runs` (a run-failure sensor) writes one row per failed run to the warehouse table `failed_runs`
(run id, job, partition, time, error text) and marks the benchmark it opened or resumed failed if it is still
running. The steps do both themselves (assets/benchmark_run.py), so the daemon is not needed for either; the sensor
catches what a step could not record (a run that failed before its first step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
from dagster_duckdb import DuckDBResource

from pipelines.partitions import BENCHMARK_JOB, MODEL_TAG, MODELS, SCENARIO_TAG, TRIGGER_TAG, bench_partition
from resources.hub_watch import HubWatch, csv_list
from wattbench.model_registry import HubModel, HubUnavailable, parse_time, partition_key_for
from wattbench.partitions import scenario_plans


@dataclass
class HubCursor:
    orgs: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: int = 0
    backoff_until: str | None = None
    last_error: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> HubCursor:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(
            orgs=dict(data.get("orgs") or {}),
            failures=int(data.get("failures") or 0),
            backoff_until=data.get("backoff_until"),
            last_error=data.get("last_error"),
        )

    def dumps(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "orgs": self.orgs,
                "failures": self.failures,
                "backoff_until": self.backoff_until,
                "last_error": self.last_error,
            },
            sort_keys=True,
        )


@dataclass
class PollOutcome:
    cursor: HubCursor
    new_models: list[HubModel]
    error: HubUnavailable | None = None
    backoff_s: float | None = None
    skipped_until: datetime | None = None
    notes: list[str] = field(default_factory=list)


def _new_since(models: list[HubModel], mark: dict[str, Any] | None, first_poll: int) -> list[HubModel]:
    if not mark:
        return models[:first_poll] if first_poll > 0 else []
    last = parse_time(mark["created_at"])
    seen = set(mark.get("ids") or [])
    return [m for m in models if m.created > last or (m.created == last and m.id not in seen)]


def _advance(mark: dict[str, Any] | None, models: list[HubModel]) -> dict[str, Any] | None:
    if not models:
        return mark
    newest = max(m.created for m in models)
    if mark and parse_time(mark["created_at"]) > newest:
        return mark
    at_newest = sorted({m.id for m in models if m.created == newest})
    if mark and parse_time(mark["created_at"]) == newest:
        at_newest = sorted(set(at_newest) | set(mark.get("ids") or []))
    created = next(m.created_at for m in models if m.created == newest)
    return {"created_at": created, "ids": at_newest}


def poll_hub(watch: HubWatch, cursor_text: str | None, now: datetime | None = None) -> PollOutcome:
    """One poll of every organisation. Pure apart from the HTTP calls: what is new, and the next cursor."""
    now = now or datetime.now(UTC)
    cursor = HubCursor.parse(cursor_text)
    if cursor.backoff_until and parse_time(cursor.backoff_until) > now:
        return PollOutcome(cursor=cursor, new_models=[], skipped_until=parse_time(cursor.backoff_until))
    client = watch.client()
    notes: list[str] = []
    new_models: list[HubModel] = []
    orgs = dict(cursor.orgs)
    for org in watch.org_list():
        mark = orgs.get(org)
        try:
            listed = client.list_models(
                org,
                limit=watch.limit,
                pipeline_tag=watch.pipeline_tag or None,
                library=watch.library or None,
                filters=csv_list(watch.filters),
                stop_at=parse_time(mark["created_at"]) if mark else None,
            )
        except HubUnavailable as exc:
            failures = cursor.failures + 1
            backoff = (
                exc.retry_after_s
                if exc.retry_after_s is not None
                else min(watch.max_backoff_s, watch.backoff_s * 2 ** (failures - 1))
            )
            # the organisations polled before the error keep their progress: their run requests go out with it
            next_cursor = HubCursor(
                orgs=orgs,
                failures=failures,
                last_error=f"{org}: {exc}",
                backoff_until=(now + timedelta(seconds=backoff)).isoformat(),
            )
            return PollOutcome(cursor=next_cursor, new_models=new_models, error=exc, backoff_s=backoff, notes=notes)
        notes += client.notes
        wanted = [m for m in listed if watch.wanted(m)]
        new_models += [
            m for m in _new_since(wanted, mark, watch.first_poll_models) if m.id not in {n.id for n in new_models}
        ]
        advanced = _advance(mark, wanted)
        if advanced is not None:
            orgs[org] = advanced
    return PollOutcome(cursor=HubCursor(orgs=orgs), new_models=new_models, notes=notes)


def hub_run_requests(models: list[HubModel], scenarios: list[str]) -> list[dg.RunRequest]:
    return [
        dg.RunRequest(
            run_key=f"hub:{m.id}:{scenario}",
            partition_key=bench_partition(partition_key_for(m.id), scenario),
            tags={
                MODEL_TAG: m.id,
                SCENARIO_TAG: scenario,
                TRIGGER_TAG: "hub-sensor",
                "wattbench/hub_created_at": m.created_at,
            },
        )
        for m in models
        for scenario in scenarios
    ]


DEFAULT_POLL_S = 3600  # $WATTBENCH_HUB_POLL_S, read when the definitions are built (pipelines/definitions.py)


def _model_release(context: dg.SensorEvaluationContext, hub: HubWatch):
    scenarios = [s for s in hub.scenario_list() if s in scenario_plans()]
    unknown = sorted(set(hub.scenario_list()) - set(scenarios))
    if unknown:
        context.log.warning(f"scenarios with no plan file ignored: {', '.join(unknown)}")
    try:
        outcome = poll_hub(hub, context.cursor)
    except ValueError as exc:  # a cursor that is not ours: keep it, say so, do nothing
        return dg.SkipReason(f"cursor not understood ({exc}); fix or reset the sensor cursor")
    if outcome.skipped_until is not None:
        return dg.SkipReason(
            f"backing off until {outcome.skipped_until.isoformat()} (after: {outcome.cursor.last_error})"
        )
    for note in outcome.notes:
        context.log.warning(note)
    models = outcome.new_models
    have = set(context.instance.get_dynamic_partitions(MODELS.name)) if models else set()
    new_keys = [k for k in dict.fromkeys(partition_key_for(m.id) for m in models) if k not in have]
    run_requests = hub_run_requests(models, scenarios)
    partitions = [MODELS.build_add_request(new_keys)] if new_keys else []
    if outcome.error is not None:
        context.log.warning(f"Hub poll failed: {outcome.error}; backing off {outcome.backoff_s:.0f} s")
        skip = (
            f"Hub unavailable ({outcome.cursor.last_error}); backing off {outcome.backoff_s:.0f} s until "
            f"{outcome.cursor.backoff_until}"
        )
    else:
        skip = f"no new models from {', '.join(hub.org_list())}"
    if models:
        context.log.info("new models: " + ", ".join(m.id for m in models))
    if not run_requests and not partitions:
        return dg.SensorResult(skip_reason=skip, cursor=outcome.cursor.dumps())
    return dg.SensorResult(
        run_requests=run_requests, dynamic_partitions_requests=partitions, cursor=outcome.cursor.dumps()
    )


def _error_text(context: dg.RunFailureSensorContext) -> str:
    parts = []
    for event in context.get_step_failure_events():
        data = event.event_specific_data
        err = getattr(data, "error", None)
        parts.append(f"[{event.step_key}] " + (err.to_string() if err is not None else (event.message or "")))
    if context.failure_event is not None and context.failure_event.message:
        parts.insert(0, context.failure_event.message)
    return "\n".join(parts)[:20000] or "run failed (no error text)"


def model_release_sensor_with(poll_s: int = DEFAULT_POLL_S) -> dg.SensorDefinition:
    @dg.sensor(
        name="model_release_sensor",
        job_name=BENCHMARK_JOB,
        minimum_interval_seconds=poll_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Polls the Hugging Face Hub for new models of the watched organisations; each new model becomes "
        "a `models` partition and a benchmark run per configured scenario (engine matrix of that plan).",
    )
    def model_release_sensor(context: dg.SensorEvaluationContext, hub: HubWatch):
        return _model_release(context, hub)

    return model_release_sensor


model_release_sensor = model_release_sensor_with()


@dg.run_failure_sensor(
    name="record_failed_runs",
    monitor_all_code_locations=True,  # also the runs `wattbench run` launches in-process on the same instance
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Writes each failed run (run id, job, partition, time, error) to the warehouse table failed_runs and "
    "marks its row in runs failed.",
)
def record_failed_runs(context: dg.RunFailureSensorContext, warehouse: DuckDBResource):
    from wattbench.warehouse import connect

    run = context.dagster_run
    record = context.instance.get_run_record_by_id(run.run_id)
    ended = record.end_time if record is not None and record.end_time else None
    failed_at = (datetime.fromtimestamp(ended, UTC) if ended else datetime.now(UTC)).replace(tzinfo=None)
    from assets.benchmark_run import mark_ended

    with connect(warehouse.database) as con:
        moved = mark_ended(
            con, run.run_id, "failed", _error_text(context), run.job_name, run.tags.get("dagster/partition")
        )
        con.execute("UPDATE failed_runs SET failed_at = ? WHERE run_id = ?", [failed_at, run.run_id])
    context.log.info(
        f"recorded failed run {run.run_id} ({run.job_name}) in failed_runs"
        + (f"; benchmark(s) {', '.join(moved)} marked failed" if moved else "")
    )


def build_sensors(poll_s: int = DEFAULT_POLL_S) -> list:
    return [model_release_sensor_with(poll_s), record_failed_runs]


SENSORS = [model_release_sensor, record_failed_runs]
