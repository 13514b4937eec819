"""A plan file is read within bounds: one line for a YAML alias bomb, a plan too large, nested too deeply, or a path
that is a directory, a FIFO or a device.

Probed on the old code: a 1 KB plan whose engine options hold six levels of nested aliases took 79 s and 1.5 GB
(nine levels did not finish in 300 s); a directory was an IsADirectoryError traceback; a FIFO waited for a writer
forever; /dev/zero was read until memory ran out. Each case runs `wattbench spec --plan` in its own process with
bounds on time and address space."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from wattbench.plan import MAX_PLAN_VALUES, PlanError, load_plan

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "tests" / "data" / "smoke_plan.yaml"
ENGINE = "{name: vllm-like, engine: emulator, profile: vllm-like, precision: fp8, tp: 1}"


def with_options(options: str, defs: str = "") -> str:
    """The smoke plan with `options` on its vllm-like engine (and `defs`, anchors, on an engine before it)."""
    text = SMOKE.read_text().replace(ENGINE, ENGINE[:-1] + f", options: {options}}}")
    if defs:
        text = text.replace(
            "engines:\n", f"engines:\n  - {{name: defs, engine: emulator, profile: trtllm-like, options: {defs}}}\n"
        )
    return text


def alias_bomb(levels: int) -> str:
    anchors = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
        f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)
    ]
    return with_options(f"{{x: *a{levels}}}", "{d: [" + ", ".join(anchors) + "]}")


def spec_process(plan: Path, timeout_s: float = 60) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "spec", "--plan", str(plan)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        preexec_fn=limit,
    )


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return r.stderr


@pytest.mark.parametrize("levels", [6, 9])
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, levels):
    plan = tmp_path / "bomb.yaml"
    plan.write_text(alias_bomb(levels))
    assert plan.stat().st_size < 1500
    err = one_line(spec_process(plan))
    assert f"bomb.yaml: refused: its aliases expand to more than {MAX_PLAN_VALUES:,} values" in err


def test_a_recursive_alias_is_refused(tmp_path):
    plan = tmp_path / "loop.yaml"
    plan.write_text(with_options("{x: &loop [1, *loop]}"))
    err = one_line(spec_process(plan))
    assert "loop.yaml: refused: an alias refers to the node that holds it" in err


def test_aliases_within_the_bound_still_work(tmp_path):
    plan, _ = load_plan(REPO / "plans" / "h200-vllm-tp.yaml")  # env and options shared by anchors
    assert len({tuple(sorted(e.env.items())) for e in plan.engines}) == 1
    small = tmp_path / "small.yaml"
    small.write_text(alias_bomb(2))  # 9 x 9 x 9 values: fine
    assert load_plan(small)[0].engines[0].options["d"][2][0][0] == ["lol"] * 9


def test_a_plan_too_large_or_too_deep_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(SMOKE.read_text() + "# " + "x" * (1 << 20) + "\n")
    with pytest.raises(PlanError, match=r"big.yaml: larger than 1024 KiB; expected a YAML benchmark plan"):
        load_plan(big)
    deep = tmp_path / "deep.yaml"
    deep.write_text(with_options("{x: " + "[" * 50_000 + "]" * 50_000 + "}"))
    err = one_line(spec_process(deep))
    assert "deep.yaml: refused: nested too deeply" in err


@pytest.mark.parametrize("kind", ["directory", "FIFO", "character device"])
def test_a_plan_path_that_is_not_a_file_is_one_line(tmp_path, kind):
    if kind == "directory":
        path = tmp_path / "plans"
        path.mkdir()
    elif kind == "FIFO":
        path = tmp_path / "plan.fifo"
        os.mkfifo(path)  # nobody writes: the old code waited forever
    else:
        path = Path("/dev/zero")  # the old code read it until memory ran out
    err = one_line(spec_process(path, timeout_s=30))
    assert f"{path}: not a regular file (a {kind}); expected a YAML benchmark plan file" in err
