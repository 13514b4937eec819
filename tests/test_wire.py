"""The agent wire (docs/CONTRACTS.md section 0): a JSON round trip keeps every field, old specs are read, newer
or misspelt ones are refused with one line."""

from __future__ import annotations

import json

import pytest

from resources.plan import DEFAULT_PLAN, agent_spec, load_plan
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
