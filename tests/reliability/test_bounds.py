"""Numbers that reach a run are finite and within bounds (issue 17, item 6): a plan with a duration of 1e400 (YAML
reads it as inf), a concurrency of 1e9 (load hung with 0 requests sent) or an idle baseline of 1e12 s (a
traceback) is refused with the field and the bound; `--rate nan`, `--duration inf` and `--peak-qps inf` are
argparse errors naming the flag, not tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wattbench.plan import PlanError, load_plan
from wattbench.settings import DEFAULT_PLAN
from wattbench_agent.loadgen.spec import LoadSpec, LoadSpecError

REPO = Path(__file__).resolve().parents[2]
BASE = """\
name: bounds
model: llama-3.1-8b
engines:
  - {name: trtllm-like, engine: emulator, profile: trtllm-like, precision: fp8, tp: 1}
  - {name: vllm-like, engine: emulator, profile: vllm-like, precision: fp8, tp: 1}
workloads:
  - name: steady
    input_tokens: 512
    duration_s: 6
    points: [{shape: concurrency}]
    sweep: {concurrency: [8, 32, 128]}
  - name: bursty
    duration_s: 6
    points: [{shape: gamma, rate: 6, burstiness: 0.25}]
prices: {gpu_hour_usd: 2.50}
"""
GOOD = BASE  # a plan of its own: the shipped plans change


def plan_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as err:
        load_plan(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    return message


@pytest.mark.parametrize(
    "old, new, field, expected",
    [
        ("duration_s: 6", "duration_s: 1e400", "workloads[0].duration_s", "finite number"),
        ("duration_s: 6", "duration_s: 1e9", "workloads[0].duration_s", "less than or equal to 86400"),
        ("duration_s: 6", "duration_s: .nan", "workloads[0].duration_s", "finite number"),
        (
            "sweep: {concurrency: [8, 32, 128]}",
            "sweep: {concurrency: [8, 1000000000]}",
            "workloads[0].sweep",
            "concurrency=1000000000",
        ),
        ("sweep: {concurrency: [8, 32, 128]}", "sweep: {concurrency: [8, .inf]}", "workloads[0].sweep", "finite"),
        ("sweep: {concurrency: [8, 32, 128]}", "sweep: {temperature: [0.5]}", "workloads[0].sweep", "temperature"),
        ("shape: gamma, rate: 6", "shape: gamma, rate: .inf", "workloads[1].points[0].rate", "finite number"),
        ("shape: gamma, rate: 6", "shape: gamma, rate: 1e12", "workloads[1].points[0].rate", "less than or equal"),
        ("gpu_hour_usd: 2.50", "gpu_hour_usd: .nan", "prices.gpu_hour_usd", "finite number"),
        (
            "{shape: concurrency}",
            "{shape: concurrency, concurrency: 100000}",
            "workloads[0].points[0].concurrency",
            "less than or equal to 16384",
        ),
        ("input_tokens: 512", "input_tokens: 100000000", "workloads[0].input_tokens", "less than or equal"),
    ],
)
def test_the_plan_refuses_values_out_of_bounds(tmp_path, old, new, field, expected):
    assert old in GOOD, old
    message = plan_error(tmp_path, GOOD.replace(old, new, 1))
    assert f"'{field}" in message and expected in message


@pytest.mark.parametrize(
    "extra, field",
    [
        ("idle_baseline_s: 1e12", "idle_baseline_s"),
        ("health_timeout_s: .inf", "health_timeout_s"),
        ("warmup_requests: 1000000000", "warmup_requests"),
    ],
)
def test_the_plan_refuses_run_settings_out_of_bounds(tmp_path, extra, field):
    message = plan_error(tmp_path, GOOD + f"\n{extra}\n")
    assert f"'{field}'" in message


def test_the_base_and_the_default_plan_are_within_bounds(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(GOOD)
    load_plan(path)
    load_plan(DEFAULT_PLAN)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"rate": float("nan"), "shape": "poisson"}, "rate"),
        ({"duration_s": float("inf")}, "duration_s"),
        ({"warmup_s": float("-inf")}, "warmup_s"),
        ({"concurrency": 10**9}, "concurrency"),
        ({"timeout_s": float("nan")}, "timeout_s"),
    ],
)
def test_load_spec_refuses_values_that_are_not_finite_or_too_large(changes, name):
    with pytest.raises(LoadSpecError, match=name):
        LoadSpec.from_dict({"shape": "concurrency", "concurrency": 4, **changes})


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--rate", "nan"], "--rate"),
        (["--rate", "4,inf"], "--rate"),
        (["--concurrency", "1e9"], "--concurrency"),
        (["--concurrency", "4", "--duration", "inf"], "--duration"),
        (["--concurrency", "4", "--warmup", "nan"], "--warmup"),
        (["--concurrency", "4", "--timeout", "-1"], "--timeout"),
    ],
)
def test_load_cli_refuses_numbers_that_are_not_finite(args, flag):
    r = cli("load", "--url", "http://127.0.0.1:9", "--model", "m", *args)
    assert r.returncode == 2, r.stderr
    assert flag in r.stderr and "Traceback" not in r.stderr


def test_report_cli_refuses_a_peak_that_is_not_finite(tmp_path):
    r = cli("report", "--capacity", "--db", str(tmp_path / "none.duckdb"), "--steady-qps", "1", "--peak-qps", "inf")
    assert r.returncode == 2 and "--peak-qps" in r.stderr and "finite" in r.stderr and "Traceback" not in r.stderr
