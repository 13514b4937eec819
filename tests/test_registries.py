"""A new load shape or engine is one module (plus its registration): registered here, in the test only, a toy shape
(with a typed parameter and a trait of its own) and a toy engine adapter go through plan validation, labels,
`wattbench load`'s flags, the wire, the bench agent's load generator against the emulator on loopback, the vLLM
result file, ingest and the head-to-head, and the emulator's twin, with no other file of wattbench changed."""

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
    """Toy open-loop shape: a tick every 1/rate seconds exactly (no randomness), `tick_burst` requests at each tick.
    Its own typed parameter and its bursty trait are declared here, nowhere else."""

    name = "metronome"
    fields = ("rate",)
    bursty = True  # ticks of several requests at once: the head-to-head's "under a surge" row takes its points
    params = (shapes.Param("tick_burst", int, default=1, minimum=1, maximum=64, help="requests sent at each tick"),)
    summary = "evenly spaced ticks at `rate` per second, `tick_burst` requests each"

    def check(self, p: Mapping[str, Any]) -> str | None:
        return None if shapes.positive(p, "rate") else "shape 'metronome' needs rate > 0 (requests/s)"

    def label(self, p: Mapping[str, Any]) -> str:
        burst = self.param(p, "tick_burst")
        return f"tick-r{p['rate']:g}" + (f"x{burst}" if burst > 1 else "")

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        n = p.get("max_requests")
        count = int(n) if n is not None and not np.isfinite(horizon_s) else int(np.ceil(horizon_s * p["rate"]))
        ticks = np.arange(count) / float(p["rate"])
        return shapes.finish(np.repeat(ticks, self.param(p, "tick_burst")), p, horizon_s)


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
        "server_starts": 1,  # one start: the registries, not the starts, are under test
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


def test_a_toy_shapes_own_parameter_and_trait_reach_plan_cli_wire_warehouse_and_twin(toys, tmp_path):
    """The toy shape's typed parameter (tick_burst) and trait (bursty), declared in its class only: the plan takes
    the parameter and checks it, `wattbench load` offers its flag, the wire carries it into the agent's LoadSpec, the
    load generator and the twin send its schedule, and ingest writes the trait the head-to-head asks for."""
    from pipelines.cli import build_parser
    from wattbench.warehouse import connect, ingest_bundle, run_sql

    with pytest.raises(PlanError, match="tick_burst must be >= 1, got 0"):
        load_plan(plan_file(tmp_path, point={"shape": "metronome", "rate": 10, "tick_burst": 0}))
    with pytest.raises(PlanError, match="tick_burst must be an integer"):
        load_plan(plan_file(tmp_path, point={"shape": "metronome", "rate": 10, "tick_burst": "two"}))
    with pytest.raises(PlanError, match=r"shape 'poisson' has no parameter 'tick_burst'"):
        load_plan(plan_file(tmp_path, point={"shape": "poisson", "rate": 10, "tick_burst": 2}))

    load_help = build_parser("load")._subparsers._group_actions[0].choices["load"].format_help()
    assert "--tick-burst TICK_BURST" in load_help and "--shape metronome: requests sent at each tick" in load_help
    args = build_parser("load").parse_args(
        ["load", "--url", "http://h:1", "--model", "m", "--shape", "metronome", "--rate", "4", "--tick-burst", "3"]
    )
    from wattbench_agent.loadgen.cli import _spec

    assert _spec(args, "http://h:1", "chat", "m", rate=4.0).params == {"tick_burst": 3}

    plan, _ = load_plan(plan_file(tmp_path, point={"shape": "metronome", "rate": 10, "tick_burst": 2}))
    assert point_label(plan.workloads[0].load_specs()[0]) == "tick-r10x2"
    spec = agent_spec(plan, "r-burst", tmp_path / "bundle", builds={})
    (point,) = spec.deployments[0].load_points
    assert point.load["tick_burst"] == 2  # flat on the wire, as LoadSpec's own fields
    assert (point.load_spec.shape, point.load_spec.params) == ("metronome", {"tick_burst": 2})

    bundle = run_spec(spec, log=lambda m: None)
    (run,) = rows(bundle, "load_runs")
    assert (run["point_label"], run["status"]) == ("tick-r10x2", "ok")
    sent = sorted(r["scheduled_ns"] for r in rows(bundle, "requests"))
    assert len(sent) == 50  # two requests at each of 25 ticks
    assert np.allclose(np.diff(sent)[1::2] / 1e6, 100.0, atol=0.5) and not np.diff(sent)[::2].any()

    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        ingest_bundle(con, bundle)
        traits = con.execute("SELECT shape, closed_loop, bursty FROM load_runs").fetchall()
        long = run_sql(con, "head_to_head", {"run_id": "r-burst"})
    assert traits == [("metronome", False, True)]
    surge = long[long["figure"].str.startswith("p99 TTFT under a surge")].iloc[0]
    assert surge["value"] is not None and surge["load_point_id"] == "ticks:tick-r10x2"

    r = simulate(
        "vllm-like",
        "llama-3.1-8b",
        "h100-sxm",
        1,
        "bf16",
        {"max_num_seqs": 64},
        Workload(shape="metronome", rate=10, input_tokens=64, output_tokens=8, params={"tick_burst": 2}),
        duration_s=2,
        warmup_s=0.5,
        record=True,
    )
    assert sorted(round(q["sent"], 6) for q in r.extra["requests"]) == [round(k // 2 / 10, 6) for k in range(50)]


def test_a_shape_parameter_cannot_shadow_a_loadspec_field(monkeypatch):
    class Shadow(Metronome):
        name = "shadow"
        params = (shapes.Param("rate", float),)

    monkeypatch.setitem(shapes.SHAPES, "shadow", Shadow())
    with pytest.raises(LoadSpecError, match=r"declares LoadSpec fields as its own parameters: \['rate'\]"):
        LoadSpec.from_dict({"shape": "shadow", "rate": 1.0})
