"""The older shapes' own parameters (gamma's burstiness, surge's surge_*, trace's trace_path and trace_time_scale)
are `shapes.Param` declarations, as a new shape's are: LoadSpec keeps them in `params` and writes them flat under
the keys they always had, a LoadSpec dict from before (every one carried all six) still reads, `wattbench load`'s
flags (vllm bench serve's names) come from the declarations, and a plan checks their bounds naming the field."""

from __future__ import annotations

import pytest

from wattbench.plan import PlanError, load_plan
from wattbench.settings import DEFAULT_PLAN
from wattbench_agent.loadgen import LoadSpec, shapes
from wattbench_agent.loadgen.spec import LoadSpecError

# what LoadSpec.to_dict wrote for every shape while these were its fields
OLD_DEFAULTS = {
    "burstiness": 1.0,
    "surge_factor": 1.0,
    "surge_start_s": 0.0,
    "surge_duration_s": 0.0,
    "trace_path": None,
    "trace_time_scale": 1.0,
}


def test_the_older_shapes_declare_their_parameters():
    declared = {name: [q.name for q in shape.params] for name, shape in shapes.SHAPES.items()}
    assert declared["gamma"] == ["burstiness"]
    assert declared["surge"] == ["burstiness", "surge_factor", "surge_start_s", "surge_duration_s"]
    assert declared["trace"] == ["trace_path", "trace_time_scale"]
    assert shapes.get("gamma").params[0] is shapes.get("surge").params[0]  # one burstiness, shared
    fields = {f for f in LoadSpec.__dataclass_fields__}
    assert not fields & set(OLD_DEFAULTS)


@pytest.mark.parametrize(
    "old, params",
    [
        ({"shape": "concurrency", "concurrency": 4}, {}),
        ({"shape": "poisson", "rate": 2.0}, {}),
        ({"shape": "gamma", "rate": 6.0, "burstiness": 0.25}, {"burstiness": 0.25}),
        (
            {"shape": "surge", "rate": 2.0, "surge_factor": 5.0, "surge_start_s": 10.0, "surge_duration_s": 20.0},
            {"burstiness": 1.0, "surge_factor": 5.0, "surge_start_s": 10.0, "surge_duration_s": 20.0},
        ),
    ],
)
def test_a_loadspec_dict_written_with_every_field_still_reads(old, params):
    spec = LoadSpec.from_dict({**OLD_DEFAULTS, **old})
    assert spec.params == params
    again = LoadSpec.from_dict(spec.to_dict())
    assert again == spec and {k: spec.to_dict()[k] for k in params} == params  # flat, the same keys


def test_another_shapes_parameter_set_is_refused_naming_the_shape():
    with pytest.raises(LoadSpecError, match=r"shape 'poisson' has no parameter 'burstiness' \(its parameters: none\)"):
        LoadSpec.from_dict({"shape": "poisson", "rate": 2.0, "burstiness": 0.5})


@pytest.mark.parametrize(
    "point, message",
    [
        ({"burstiness": 0}, "burstiness must be > 0, got 0"),
        ({"burstiness": 2000}, "burstiness must be <= 1000, got 2000"),
        ({"burstiness": "a lot"}, "burstiness must be a finite number"),
        ({"shape": "surge", "surge_factor": -1}, "surge_factor must be > 0, got -1"),
        ({"shape": "surge", "surge_start_s": -1}, "surge_start_s must be >= 0, got -1"),
        ({"shape": "surge", "surge_duration_s": 1e9}, "surge_duration_s must be <= 86400, got 1e+09"),
        ({"shape": "trace", "trace_path": 5}, "trace_path must be a string, got 5"),
    ],
)
def test_a_plan_checks_the_bounds_naming_the_field(tmp_path, point, message):
    path = tmp_path / "plan.yaml"
    text = DEFAULT_PLAN.read_text()
    old = "points: [{shape: gamma, rate: 6, burstiness: 0.25}]"
    assert old in text
    fields = (
        {"shape": "gamma", "rate": 6, "burstiness": 0.25, **point} if "shape" not in point else {"rate": 6, **point}
    )
    path.write_text(text.replace(old, "points: [{" + ", ".join(f"{k}: {v!r}" for k, v in fields.items()) + "}]"))
    with pytest.raises(PlanError, match="field 'workloads") as err:
        load_plan(path)
    assert message in str(err.value)


def test_a_plan_sweeps_a_shapes_parameter(tmp_path):
    path = tmp_path / "plan.yaml"
    text = DEFAULT_PLAN.read_text()
    old = "points: [{shape: gamma, rate: 6, burstiness: 0.25}]"
    path.write_text(text.replace(old, old + "\n    sweep: {burstiness: [0.25, 4]}"))
    plan, _ = load_plan(path)
    (workload,) = [w for w in plan.workloads if w.sweep and "burstiness" in w.sweep]
    assert [s["burstiness"] for s in workload.load_specs()] == [0.25, 4.0]


def _args(*argv):
    from pipelines.cli import build_parser

    return build_parser("load").parse_args(["load", "--url", "http://h:1", "--model", "m", *argv])


@pytest.mark.parametrize(
    "argv, shape, params",
    [
        (["--rate", "4"], "poisson", {}),
        (["--request-rate", "4", "--burstiness", "0.5"], "gamma", {"burstiness": 0.5}),
        (
            ["--rate", "2", "--surge-factor", "5", "--surge-start", "10", "--surge-duration", "20"],
            "surge",
            {"surge_factor": 5.0, "surge_start_s": 10.0, "surge_duration_s": 20.0},
        ),
        (
            ["--trace", "t.jsonl", "--trace-time-scale", "0.5"],
            "trace",
            {"trace_path": "t.jsonl", "trace_time_scale": 0.5},
        ),
        (["--concurrency", "8", "--burstiness", "0.5"], "concurrency", {}),  # read for the shape that has it
    ],
)
def test_wattbench_load_flags_come_from_the_declarations(argv, shape, params):
    from wattbench_agent.loadgen.cli import _spec

    over = {"concurrency": 8} if shape == "concurrency" else {} if shape == "trace" else {"rate": 4.0}
    spec = _spec(_args(*argv), "http://h:1", "chat", "m", **over)
    assert (spec.shape, spec.params) == (shape, params)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rate", "4", "--burstiness", "0"], "argument --burstiness: must be > 0, got 0"),
        (["--rate", "4", "--surge-start", "-1"], "argument --surge-start: must be >= 0, got -1"),
        (["--rate", "4", "--trace", "t.jsonl"], "argument --trace: not allowed with argument --rate"),
    ],
)
def test_a_bad_flag_is_an_argparse_error_naming_it(argv, message, capsys):
    with pytest.raises(SystemExit):
        _args(*argv)
    assert message in capsys.readouterr().err
