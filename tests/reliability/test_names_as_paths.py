"""Engine names become file names (the engine's log in the bundle, build logs): a name with a path in it must
not write outside the bundle (issue 17, item 4). The plan refuses such names; the agent, which also runs specs
written by hand, keeps every log inside the bundle whatever the deployment id."""

from __future__ import annotations

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
