"""A new load shape or engine is one module (plus its registration): registered here, in the test only, a toy shape
and a toy engine adapter go through plan validation, labels, the bench agent's load generator against the emulator
on loopback, the vLLM result file and the emulator's twin, with no other file of wattbench changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.bundle_files import read_table
from wattbench.plan import PlanError, agent_spec, load_plan, point_label
from wattbench_agent.emulator import Workload, simulate
from wattbench_agent.engines import registry
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.emulator import EmulatorAdapter
from wattbench_agent.engines.registry import adapter_for
from wattbench_agent.loadgen import LoadSpec, LoadSpecError, shapes
from wattbench_agent.runner import run_spec


class Metronome(shapes.Shape):
    """Toy open-loop shape: one request every 1/rate seconds exactly (no randomness)."""

    name = "metronome"
    fields = ("rate",)
    summary = "evenly spaced requests at `rate` per second"

    def check(self, p: Mapping[str, Any]) -> str | None:
        return None if shapes.positive(p, "rate") else "shape 'metronome' needs rate > 0 (requests/s)"

    def label(self, p: Mapping[str, Any]) -> str:
        return f"tick-r{p['rate']:g}"

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        n = p.get("max_requests")
        count = int(n) if n is not None and not np.isfinite(horizon_s) else int(np.ceil(horizon_s * p["rate"]))
        return shapes.finish(np.arange(count) / float(p["rate"]), p, horizon_s)


class ToyEngine(EmulatorAdapter):
    """Toy engine: the emulator under another name, which insists on a `colour` option."""

    name = "toy"
    image = "example.org/toy:1"

    def plan_problem(self, spec: dict[str, Any]) -> str | None:
        return None if spec.get("options", {}).get("colour") else "a toy engine needs options.colour"

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        options = {k: v for k, v in cfg.options.items() if k != "colour"}  # the toy's own knob, not the emulator's
        return super().serve_command(replace(cfg, options=options), host, port, artifact_path)


@pytest.fixture
def toys(monkeypatch):
    monkeypatch.setitem(shapes.SHAPES, "metronome", Metronome())
    monkeypatch.setitem(registry.ADAPTERS, "toy", ToyEngine)


def plan_file(tmp_path: Path, engine: dict | None = None, point: dict | None = None) -> Path:
    plan = {
        "name": "toys",
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "telemetry": "emulated",
        "idle_baseline_s": 0,
        "engines": [
            engine
            or {
                "name": "toy-a",
                "engine": "toy",
                "profile": "vllm-like",
                "precision": "bf16",
                "options": {"colour": "teal", "max_num_seqs": 64},
            }
        ],
        "workloads": [
            {
                "name": "ticks",
                "input_tokens": 64,
                "output_tokens": 8,
                "warmup_s": 0.5,
                "duration_s": 2,
                "points": [point or {"shape": "metronome", "rate": 10}],
            }
        ],
        "prices": {"gpu_hour_usd": 2.0},
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def rows(bundle: Path, table: str) -> list[dict]:
    return read_table(bundle, table)  # whatever format the agent wrote it in


def test_unknown_names_list_what_the_registries_hold(tmp_path):
    with pytest.raises(PlanError, match=r"unknown load shape 'metronome'; expected one of concurrency, poisson"):
        load_plan(plan_file(tmp_path, engine={"name": "e", "engine": "emulator", "profile": "vllm-like"}))
    with pytest.raises(PlanError, match=r"engines\[0\].engine.*unknown engine 'toy'; expected one of emulator"):
        load_plan(plan_file(tmp_path, point={"shape": "poisson", "rate": 2}))


def test_a_toy_shape_and_engine_run_through_plan_agent_and_twin(toys, tmp_path):
    # plan validation asks the registries: the shape's and the engine's own checks, one line naming the field
    with pytest.raises(PlanError, match=r"workloads\[0\]' \(ticks\): shape 'metronome' needs rate > 0"):
        load_plan(plan_file(tmp_path, point={"shape": "metronome"}))
    with pytest.raises(PlanError, match=r"engines\[0\]'.*a toy engine needs options.colour"):
        load_plan(plan_file(tmp_path, engine={"name": "toy-a", "engine": "toy", "profile": "vllm-like"}))
    with pytest.raises(LoadSpecError, match="shape 'metronome' needs rate > 0"):
        LoadSpec.from_dict({"shape": "metronome", "rate": 0.0})
    assert adapter_for("toy").image == "example.org/toy:1"

    plan, _ = load_plan(plan_file(tmp_path))
    assert point_label(plan.workloads[0].load_specs()[0]) == "tick-r10"
    spec = agent_spec(plan, "r-toys", tmp_path / "bundle", builds={})
    assert [p.load_point_id for p in spec.deployments[0].load_points] == ["toy-a:ticks:tick-r10"]

    # the bench agent starts the toy engine (the emulator on loopback) and the load generator sends the toy schedule
    bundle = run_spec(spec, log=lambda m: None)
    deployment = rows(bundle, "deployments")[0]
    assert deployment["status"] == "healthy", (deployment["error_kind"], deployment["error_text"])
    (run,) = rows(bundle, "load_runs")
    assert (run["shape"], run["point_label"], run["status"]) == ("metronome", "tick-r10", "ok")
    assert run["burstiness"] is None  # not a field of this shape
    sent = sorted(r["scheduled_ns"] for r in rows(bundle, "requests"))
    assert len(sent) == 25  # 10/s over 0.5 s warm-up + 2 s window
    gaps_ms = np.diff(sent) / 1e6
    assert np.allclose(gaps_ms, 100.0, atol=0.5), gaps_ms  # scheduled exactly 1/rate apart

    # the twin replays the same schedule
    r = simulate(
        "vllm-like",
        "llama-3.1-8b",
        "h100-sxm",
        1,
        "bf16",
        {"max_num_seqs": 64},
        Workload(shape="metronome", rate=10, input_tokens=64, output_tokens=8),
        duration_s=2,
        warmup_s=0.5,
        record=True,
    )
    assert [round(q["sent"], 6) for q in r.extra["requests"]] == [round(k / 10, 6) for k in range(25)]
