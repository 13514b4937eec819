"""The model-release sensor against a local HTTP server (tests/automation/hub_server.py) serving hand-written Hub
API fixtures: new models become `models` partitions and benchmark runs per scenario; 429 / 500 / timeouts back
off and never move the cursor; the cursor advances only with the partitions and run requests it goes out with."""

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from assets.partitions import BENCH_PARTITIONS, MODELS
from pipelines.sensors import HubCursor, model_release_sensor, poll_hub
from resources.hub_watch import HubWatch
from wattbench.model_registry import HubClient, HubUnavailable, model_id_for, partition_key_for, retry_after_seconds

from .hub_server import FakeHub


@pytest.fixture
def hub():
    with FakeHub() as server:
        yield server


def watch(hub: FakeHub, **kw) -> HubWatch:
    return HubWatch(
        **{
            "base_url": hub.url,
            "orgs": "meta-llama,Qwen",
            "scenarios": "default,h200-transformers",
            "timeout_s": 2.0,
            "backoff_s": 60.0,
            "max_backoff_s": 600.0,
            **kw,
        }
    )


def evaluate(sensor_watch: HubWatch, instance: dg.DagsterInstance, cursor: str | None):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"hub": sensor_watch})
    return model_release_sensor(context)


def apply(result, instance: dg.DagsterInstance) -> None:
    """What the daemon does with a SensorResult's dynamic partition requests."""
    for req in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))


def baseline(hub: FakeHub, instance: dg.DagsterInstance) -> str:
    hub.serve("meta-llama", "meta-llama/v1")
    hub.serve("Qwen", "Qwen/v1")
    result = evaluate(watch(hub), instance, None)
    assert isinstance(result, dg.SensorResult) and not result.run_requests and result.skip_reason
    return result.cursor


def test_partition_keys_turn_back_into_model_ids():
    for model in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-72B", "llama-3-70b", "/tmp/wattbench-tiny-1b"):
        key = partition_key_for(model)
        assert "/" not in key and not set("|,[]") & set(key)
        assert model_id_for(key) == model
    assert partition_key_for("odd name|x") == "odd_name_x"


def test_first_poll_records_where_each_org_is_and_starts_nothing(hub):
    instance = dg.DagsterInstance.ephemeral()
    cursor = json.loads(baseline(hub, instance))
    assert cursor["orgs"]["meta-llama"] == {
        "created_at": "2026-10-01T12:00:00.000Z",
        "ids": ["meta-llama/fixture-Llama-5-8B-Instruct"],
    }
    assert cursor["orgs"]["Qwen"]["ids"] == ["Qwen/fixture-Qwen4-7B"]
    assert cursor["failures"] == 0 and cursor["backoff_until"] is None
    assert instance.get_dynamic_partitions("models") == []
    q = next(r for r in hub.requests if r.get("author") == ["meta-llama"])
    assert q["sort"] == ["createdAt"] and q["direction"] == ["-1"] and q["limit"] == ["20"]
    assert q["pipeline_tag"] == ["text-generation"] and q["library"] == ["transformers"]


def test_new_models_become_partitions_and_runs_over_each_scenario(hub):
    instance = dg.DagsterInstance.ephemeral()
    cursor = baseline(hub, instance)
    hub.serve("meta-llama", "meta-llama/v2")
    hub.serve("Qwen", "Qwen/v2")
    result = evaluate(watch(hub), instance, cursor)
    new_ids = [
        "meta-llama/fixture-Llama-5-405B-Instruct",
        "meta-llama/fixture-Llama-5-8B",
        "Qwen/fixture-Qwen4-72B-Instruct",
    ]
    # the text-classification model is filtered out; the already-seen ones are not new
    (add,) = result.dynamic_partitions_requests
    assert add.partitions_def_name == "models"
    assert sorted(add.partition_keys) == sorted(partition_key_for(m) for m in new_ids)
    assert len(result.run_requests) == 3 * 2
    by_key = {r.run_key: r for r in result.run_requests}
    run = by_key["hub:Qwen/fixture-Qwen4-72B-Instruct:h200-transformers"]
    assert run.partition_key == dg.MultiPartitionKey(
        {"model": "Qwen--fixture-Qwen4-72B-Instruct", "scenario": "h200-transformers"}
    )
    assert run.tags["wattbench/model_id"] == "Qwen/fixture-Qwen4-72B-Instruct"
    assert run.tags["wattbench/trigger"] == "hub-sensor"
    apply(result, instance)
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        for r in result.run_requests:  # every requested partition exists once the partitions are added
            assert BENCH_PARTITIONS.has_partition_key(r.partition_key)
    after = json.loads(result.cursor)
    assert after["orgs"]["meta-llama"] == {
        "created_at": "2026-10-08T16:45:00.000Z",
        "ids": ["meta-llama/fixture-Llama-5-405B-Instruct"],
    }
    # polling again with the new cursor finds nothing new
    again = evaluate(watch(hub), instance, result.cursor)
    assert not again.run_requests and "no new models" in again.skip_reason.skip_message


def test_rate_limit_backs_off_with_retry_after_and_keeps_the_cursor(hub):
    instance = dg.DagsterInstance.ephemeral()
    cursor = baseline(hub, instance)
    hub.fail("meta-llama", 429, retry_after="120")
    result = evaluate(watch(hub), instance, cursor)
    assert (
        not result.run_requests
        and "429" in result.skip_reason.skip_message
        and "backing off 120 s" in result.skip_reason.skip_message
    )
    state = json.loads(result.cursor)
    assert state["orgs"] == json.loads(cursor)["orgs"]  # no organisation's mark moved
    assert state["failures"] == 1
    until = datetime.fromisoformat(state["backoff_until"])
    assert timedelta(seconds=100) < until - datetime.now(UTC) <= timedelta(seconds=121)
    # before the backoff ends the Hub is not called at all
    n = len(hub.requests)
    skipped = evaluate(watch(hub), instance, result.cursor)
    assert isinstance(skipped, dg.SkipReason) and "backing off until" in skipped.skip_message
    assert len(hub.requests) == n
    # once it ends, the models released meanwhile are found from the kept marks
    hub.serve("meta-llama", "meta-llama/v2")
    hub.serve("Qwen", "Qwen/v2")
    later = poll_hub(watch(hub), result.cursor, now=until + timedelta(seconds=1))
    assert {m.id for m in later.new_models} == {
        "meta-llama/fixture-Llama-5-405B-Instruct",
        "meta-llama/fixture-Llama-5-8B",
        "Qwen/fixture-Qwen4-72B-Instruct",
    }
    assert later.cursor.failures == 0 and later.cursor.backoff_until is None


def test_server_errors_back_off_exponentially_and_keep_the_cursor(hub):
    instance = dg.DagsterInstance.ephemeral()
    cursor = baseline(hub, instance)
    hub.fail("meta-llama", 500)
    now = datetime.now(UTC)
    first = poll_hub(watch(hub), cursor, now=now)
    assert first.error is not None and first.error.status == 500 and first.backoff_s == 60
    second = poll_hub(watch(hub), first.cursor.dumps(), now=now + timedelta(seconds=61))
    assert second.backoff_s == 120 and second.cursor.failures == 2
    assert second.cursor.orgs == json.loads(cursor)["orgs"]
    many = HubCursor(orgs=second.cursor.orgs, failures=10).dumps()
    assert poll_hub(watch(hub), many, now=now).backoff_s == 600  # capped


def test_one_org_failing_does_not_hold_back_the_others(hub):
    instance = dg.DagsterInstance.ephemeral()
    cursor = baseline(hub, instance)
    hub.serve("meta-llama", "meta-llama/v2")
    hub.fail("Qwen", 503)
    result = evaluate(watch(hub), instance, cursor)
    assert {r.tags["wattbench/model_id"] for r in result.run_requests} == {
        "meta-llama/fixture-Llama-5-405B-Instruct",
        "meta-llama/fixture-Llama-5-8B",
    }
    state = json.loads(result.cursor)
    assert state["orgs"]["meta-llama"]["created_at"] == "2026-10-08T16:45:00.000Z"  # moved with its runs
    assert state["orgs"]["Qwen"] == json.loads(cursor)["orgs"]["Qwen"]  # kept
    assert state["failures"] == 1 and state["backoff_until"]


def test_timeouts_back_off(hub):
    instance = dg.DagsterInstance.ephemeral()
    cursor = baseline(hub, instance)
    hub.stall("meta-llama", 1.5)
    outcome = poll_hub(watch(hub, timeout_s=0.3), cursor)
    assert isinstance(outcome.error, HubUnavailable) and "timed out" in str(outcome.error)
    assert outcome.cursor.orgs == json.loads(cursor)["orgs"] and outcome.backoff_s == 60


def test_connection_refused_backs_off():
    outcome = poll_hub(HubWatch(base_url="http://127.0.0.1:9", orgs="x", timeout_s=1.0), None)
    assert outcome.error is not None and "unreachable" in str(outcome.error)


def test_a_burst_larger_than_one_page_follows_the_next_link(hub):
    hub.serve("Qwen", "Qwen/page1", next_fixture="Qwen/v2")
    client = HubClient(base_url=hub.url)
    mark = datetime(2026, 9, 30, tzinfo=UTC)
    models = client.list_models("Qwen", limit=2, stop_at=mark)
    assert [m.id for m in models] == [
        "Qwen/fixture-Qwen4-1.5B",
        "Qwen/fixture-Qwen4-14B",
        "Qwen/fixture-Qwen4-72B-Instruct",
        "Qwen/fixture-Qwen4-7B",
    ]
    assert len(client.list_models("Qwen", limit=2, stop_at=None)) == 2  # first poll: one page


def test_first_poll_can_take_the_newest_models(hub):
    hub.serve("meta-llama", "meta-llama/v1")
    outcome = poll_hub(watch(hub, orgs="meta-llama", first_poll_models=1), None)
    assert [m.id for m in outcome.new_models] == ["meta-llama/fixture-Llama-5-8B-Instruct"]


def test_retry_after_as_http_date():
    now = datetime(2026, 10, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("Thu, 01 Oct 2026 12:02:00 GMT", now=now) == 120
    assert retry_after_seconds("30") == 30 and retry_after_seconds("soon") is None


def test_config_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("WATTBENCH_HUB_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("WATTBENCH_HUB_ORGS", "a, b")
    monkeypatch.setenv("WATTBENCH_HUB_SCENARIOS", "default")
    monkeypatch.setenv("WATTBENCH_HUB_LIMIT", "5")
    w = HubWatch.from_env()
    assert (w.base_url, w.org_list(), w.scenario_list(), w.limit) == ("http://127.0.0.1:1", ["a", "b"], ["default"], 5)


def test_sensor_is_wired_to_the_partitioned_benchmark_job():
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    sensor = defs.get_sensor_def("model_release_sensor")
    assert sensor.job_name == "benchmark"
    assert defs.resolve_job_def("benchmark").partitions_def == BENCH_PARTITIONS
    assert MODELS.name == "models"
