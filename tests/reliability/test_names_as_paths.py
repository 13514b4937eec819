"""Engine names become file names (the engine's log in the bundle, build logs): a name with a path in it must
not write outside the bundle (issue 17, item 4). The plan refuses such names; the agent, which also runs specs
written by hand, keeps every log inside the bundle whatever the deployment id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.conftest import emulator_spec, rows
from tests.reliability.test_bounds import BASE as GOOD  # a plan of its own: the shipped plans change
from wattbench.plan import PlanError, load_plan
from wattbench_agent.runner import run_spec
from wattbench_agent.safety import file_name


@pytest.mark.parametrize(
    "name", ["../../x", "/tmp/abs", "a/b", "..", ".hidden", "", "x" * 65, "tab\there", "nul\x00byte", "back\\slash"]
)
def test_the_plan_refuses_engine_names_that_are_not_plain_names(tmp_path, name):
    path = tmp_path / "plan.yaml"
    path.write_text(
        GOOD.replace("name: trtllm-like", f"name: {name!r}", 1).replace("'", '"')
        if "\x00" not in name
        else GOOD.replace("name: trtllm-like", 'name: "nul\\0byte"', 1)
    )
    with pytest.raises(PlanError) as err:
        load_plan(path)
    message = str(err.value)
    assert "engines[0].name" in message and "letters, digits" in message and "\n" not in message


@pytest.mark.parametrize("name", ["trtllm-like", "vLLM_0.10.1", "a", "sglang.fp8-tp8"])
def test_plain_engine_names_are_fine(tmp_path, name):
    path = tmp_path / "plan.yaml"
    path.write_text(GOOD.replace("name: trtllm-like", f"name: {name}", 1))
    plan, _ = load_plan(path)
    assert plan.engines[0].name == name


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs/escape", "..", "a/../../b", "con\x00sole"])
def test_file_name_stays_in_its_folder(tmp_path, name):
    folder = tmp_path / "logs"
    folder.mkdir()
    made = folder / file_name(name, ".log")
    assert made.resolve().parent == folder.resolve() and made.name.endswith(".log")
    assert "/" not in made.name and "\x00" not in made.name and not made.name.startswith(".")
    assert file_name(name, ".log") != file_name(name + "x", ".log")
    assert file_name("vllm-like", ".log") == "vllm-like.log"  # plain names stay as they are


def test_the_agent_keeps_the_engine_log_inside_the_bundle(tmp_path):
    """A spec written by hand (no plan schema on the way) with a deployment id that climbs out of the bundle."""
    bundle = tmp_path / "run" / "bundle"
    spec = emulator_spec("r-names", bundle, n_points=1, duration_s=0.3)
    spec["deployments"][0]["deployment_id"] = "../../escape"
    for point in spec["deployments"][0]["load_points"]:
        point["load_point_id"] = "../../escape:steady:c2"
    run_spec(spec, log=lambda m: None)
    (dep,) = rows(bundle, "deployments")
    assert dep["status"] == "healthy", dep
    log = Path(dep["log_path"])
    assert log.exists() and log.resolve().parent == (bundle / "logs").resolve()
    assert not (tmp_path / "escape.log").exists() and not (tmp_path / "run" / "escape.log").exists()
    assert [p for p in tmp_path.rglob("*.log")] == [log]


# --- A plan's name and a run id name folders too (issue 38): `wattbench spec` makes the run id `<plan name>-<hex>` and
# the bundle folder `bundle-<run id>`. Probed on the old code: a plan named ../../../escaped made the agent write its
# bundle three folders up; a name of 5,000 characters was an `OSError: File name too long` traceback in the agent.


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs", "a/b", "..", "x" * 5000, "tab\there", "-rf"])
def test_the_plan_refuses_a_plan_name_that_is_not_a_plain_name(tmp_path, name):
    path = tmp_path / "plan.yaml"
    path.write_text(GOOD.replace("name: bounds", f'name: "{name}"', 1))
    with pytest.raises(PlanError) as err:
        load_plan(path)
    message = str(err.value)
    assert "field 'name'" in message and "letters, digits" in message and "\n" not in message
    assert len(message) < 600, len(message)  # the name is cut, not printed whole


def test_the_agent_refuses_a_run_id_that_would_put_its_bundle_elsewhere(tmp_path, monkeypatch, capsys):
    """A spec written by hand, or by an older `wattbench spec`, whose run id climbs out of the folder."""
    from pipelines.cli import main as wattbench

    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    spec = emulator_spec("../../escaped-1234", Path("bundle-../../escaped-1234"), n_points=1, duration_s=0.3)
    (work / "spec.json").write_text(json.dumps(spec))
    monkeypatch.chdir(work)
    assert wattbench(["agent", "--spec", "spec.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'run_id' is '../../escaped-1234'; expected letters, digits" in err and "\n" not in err
    assert not (tmp_path / "escaped-1234").exists() and sorted(p.name for p in work.iterdir()) == ["spec.json"]


def test_wattbench_spec_refuses_a_run_id_that_is_not_a_plain_name(tmp_path, capsys):
    from pipelines.cli import main as wattbench

    plan = tmp_path / "plan.yaml"
    plan.write_text(GOOD)
    assert wattbench(["spec", "--plan", str(plan), "--run-id", "../../x"]) == 2
    assert "--run-id '../../x' is not a plain name" in capsys.readouterr().err


def test_a_bundle_folder_past_the_file_systems_limit_is_one_line(tmp_path, monkeypatch, capsys):
    from pipelines.cli import main as wattbench

    spec = emulator_spec("r-long-out", tmp_path / ("x" * 5000), n_points=1, duration_s=0.3)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert wattbench(["agent", "--spec", str(tmp_path / "spec.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot make the bundle folder" in err and "File name too long" in err and "\n" not in err


@pytest.mark.parametrize(
    "text, key, line",
    [
        (GOOD.replace("precision: fp8, tp: 1}", "precision: fp8, tp: 1, tp: 8}", 1), "tp", 4),
        (GOOD.replace("    duration_s: 6\n", "    duration_s: 6\n    duration_s: 60\n", 1), "duration_s", 10),
        (GOOD + "name: other\n", "name", 16),
    ],
)
def test_a_key_given_twice_in_a_plan_is_refused_naming_it_and_its_line(tmp_path, text, key, line):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as err:
        load_plan(path)
    message = str(err.value)
    assert f"at line {line}," in message and f"the key '{key}' is given twice" in message, message
    assert "\n" not in message


def test_a_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(
        GOOD.replace("  - {name: trtllm-like,", "  - &e {name: trtllm-like,", 1).replace(
            "  - {name: vllm-like, engine: emulator, profile: vllm-like, precision: fp8, tp: 1}",
            "  - {<<: *e, name: vllm-like, profile: vllm-like, tp: 2}",
        )
    )
    plan, _ = load_plan(path)
    assert [(e.name, e.profile, e.tp) for e in plan.engines] == [
        ("trtllm-like", "trtllm-like", 1),
        ("vllm-like", "vllm-like", 2),
    ]


def test_the_agent_refuses_a_spec_with_a_key_given_twice(tmp_path, capsys):
    from pipelines.cli import main as wattbench

    text = json.dumps(emulator_spec("r-dup", tmp_path / "b", n_points=1))
    (tmp_path / "spec.json").write_text(text.replace('"run_id": "r-dup"', '"run_id": "r-dup", "run_id": "r-other"'))
    assert wattbench(["agent", "--spec", str(tmp_path / "spec.json")]) == 2
    assert "the key 'run_id' is given twice in one object" in capsys.readouterr().err
