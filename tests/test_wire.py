"""The agent wire (docs/CONTRACTS.md section 0): a JSON round trip keeps every field, old specs are read, newer
or misspelt ones are refused with one line."""

from __future__ import annotations

import json

import pytest

from wattbench.plan import agent_spec, load_plan
from wattbench.settings import DEFAULT_PLAN
from wattbench_agent.wire import WIRE_VERSION, AgentSpec, WireError


def test_json_round_trip_keeps_every_field(tmp_path):
    plan, _ = load_plan(DEFAULT_PLAN)
    spec = agent_spec(plan, "r-wire", tmp_path / "bundle", builds={})
    assert spec.version == WIRE_VERSION and len(spec.deployments) == len(plan.engines)
    back = AgentSpec.from_json(spec.to_json())
    assert back == spec
    assert back.deployments[0].load_points[0].point_label == spec.deployments[0].load_points[0].point_label


def test_version_1_is_read_and_newer_or_unknown_fields_are_refused(tmp_path):
    v1 = {
        "run_id": "old",
        "out": str(tmp_path),
        "deployments": [
            {
                "deployment_id": "d",
                "engine_config": {"engine": "emulator", "model": "m", "config_name": "d"},
                "telemetry": "none",
                "gpu_uuids": ["GPU-1"],
                "load_points": [
                    {"load_point_id": "d:w:c2", "workload": "w", "spec": {"shape": "concurrency", "concurrency": 2}}
                ],
            }
        ],
    }
    spec = AgentSpec.from_dict(v1)
    assert spec.telemetry == "none" and spec.deployments[0].gpus == ("GPU-1",)
    assert spec.deployments[0].load_points[0].load == {"shape": "concurrency", "concurrency": 2}
    assert spec.deployments[0].load_points[0].point_label == "c2"
    with pytest.raises(WireError, match="newer than this agent"):
        AgentSpec.from_dict({**json.loads(spec.to_json()), "version": WIRE_VERSION + 1})
    with pytest.raises(WireError, match="unknown field.*sampler_khz"):
        AgentSpec.from_dict({**json.loads(spec.to_json()), "sampler_khz": 1})


def test_a_search_travels_and_a_point_without_one_says_nothing_of_it():
    """An agent spec with a capacity search reads back equal; a point without one has no `search` key, so an agent
    of before searches still reads specs that use none."""
    from wattbench_agent.engines.base import EngineConfig
    from wattbench_agent.wire import AgentSpec, DeploymentSpec, LoadPointSpec

    plain = LoadPointSpec("d:w:c4", "w", "c4", {"shape": "concurrency", "concurrency": 4})
    search = LoadPointSpec(
        "d:s:search-rate",
        "s",
        "search-rate",
        {"shape": "poisson", "rate": 2.0},
        search={"over": "rate", "slo": {"ttft_ms": 500}},
    )
    cfg = EngineConfig(engine="emulator", model="m", config_name="d", profile="vllm-like")
    spec = AgentSpec("r", "/tmp/b", (DeploymentSpec("d", cfg, load_points=(plain, search)),))
    data = spec.to_dict()
    assert "search" not in data["deployments"][0]["load_points"][0]
    assert data["deployments"][0]["load_points"][1]["search"]["over"] == "rate"
    assert AgentSpec.from_json(spec.to_json()) == spec
