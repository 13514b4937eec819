"""The bench agent alone, as a GPU node gets it: `pip install ./agent` into a fresh venv (no system site packages)
installs no Dagster, DuckDB or Great Expectations, and that venv's `wattbench-agent` runs an agent spec (wire
version 2) end to end: it starts the emulator as its engine (`python -m wattbench_agent emulate`, from the venv),
drives one load point and writes a bundle with deployments, load_runs and requests rows.

Needs PyPI (the agent's dependencies and its build backend are downloaded): skipped, with pip's own words, only
when pip fails for want of a network; any other pip failure fails the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from wattbench_agent.emulator.profiles import EMULATOR_VERSION
from wattbench_agent.wire import WIRE_VERSION

ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE_ONLY = ("dagster", "duckdb", "great_expectations")
# What pip says when it cannot reach the index (urllib3 / requests / socket errors), as opposed to a bad requirement.
NO_NETWORK = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "No route to host",
    "ConnectTimeoutError",
    "connection broken by",
    "ProxyError",
    "Connection refused",
)


def clean_env(venv_dir: Path) -> dict[str, str]:
    """The environment of a shell on the node: the venv's bin first, nothing of this checkout or its venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("DAGSTER_")
    }
    env["PATH"] = os.pathsep.join([str(venv_dir / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_agent_installs_alone_and_runs_a_spec(tmp_path):
    node = tmp_path / "node"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(node)
    python = node / "bin" / "python"
    env = clean_env(node)
    # a copy of agent/, so that the build writes nothing into this checkout (build/, *.egg-info)
    source = tmp_path / "agent"
    shutil.copytree(ROOT / "agent", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--retries", "1", "--timeout", "20", str(source)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if pip.returncode != 0:
        said = pip.stdout + pip.stderr
        marker = next((m for m in NO_NETWORK if m in said), None)
        if marker:
            line = next((ln for ln in said.splitlines() if marker in ln), marker)
            pytest.skip(f"no network to PyPI for `pip install ./agent` into a fresh venv: {line.strip()[:300]}")
        pytest.fail(f"pip install ./agent into a fresh venv failed (exit {pip.returncode}):\n{said[-3000:]}")

    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util, json, wattbench_agent; print(json.dumps({'present': "
            f"[m for m in {CONTROL_PLANE_ONLY!r} if importlib.util.find_spec(m)], "
            "'agent': wattbench_agent.__file__}))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["present"] == [], f"the agent's install brought control-plane packages: {found['present']}"
    assert found["agent"].startswith(str(node)), found["agent"]  # the installed copy, not this checkout

    deployment = {
        "deployment_id": "emu",
        "engine_config": {
            "engine": "emulator",
            "model": "llama-3.1-8b",
            "config_name": "emu",
            "precision": "bf16",
            "tp": 1,
            "gpu": "h100-sxm",
            "profile": "vllm-like",
            "options": {},
        },
        "health_timeout_s": 60,
        "load_points": [
            {
                "load_point_id": "emu:chat:c2",
                "workload": "chat",
                "point_label": "c2",
                "load": {
                    "api": "chat",
                    "shape": "concurrency",
                    "concurrency": 2,
                    "input_tokens": 32,
                    "output_tokens": 8,
                    "warmup_s": 0.5,
                    "duration_s": 2.0,
                    "timeout_s": 30,
                },
            }
        ],
    }
    spec = {
        "version": WIRE_VERSION,
        "run_id": "standalone",
        "out": str(tmp_path / "bundle"),
        "source": "emulated",
        "telemetry": "emulated",
        "idle_baseline_s": 0.5,
        "deployments": [deployment],
    }
    assert WIRE_VERSION == 2
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    run = subprocess.run(
        [str(node / "bin" / "wattbench-agent"), "agent", "--spec", str(tmp_path / "spec.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    bundle = Path(run.stdout.strip().splitlines()[-1])
    assert bundle == tmp_path / "bundle"
    # the engine was the installed agent's own emulator, started with the venv's interpreter
    assert f"[emu] starting: {python} -m wattbench_agent emulate --profile vllm-like" in run.stderr

    def rows(table: str) -> list[dict]:
        from wattbench_agent.bundle import read_rows  # version 3 writes requests and GPU samples as CSV

        path = next(p for p in (bundle / f"{table}.csv", bundle / f"{table}.jsonl") if p.exists())
        return [row for _, row in read_rows(path)]

    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["complete"] is True
    (dep,) = rows("deployments")
    assert (dep["status"], dep["source"], dep["engine_version"]) == (
        "healthy",
        "emulated",
        f"wattbench-emulator-{EMULATOR_VERSION}",
    )
    assert dep["version_checked"] is True
    (lr,) = rows("load_runs")
    assert lr["status"] == "ok" and lr["load_point_id"] == "emu:chat:c2" and lr["completed"] > 0
    requests = rows("requests")
    assert len(requests) >= lr["completed"] and all(r["deployment_id"] == "emu" for r in requests)
    assert sum(r["error_kind"] is None and r["completion_tokens"] == 8 for r in requests) >= lr["completed"]
    metrics = {r["metric"] for r in rows("server_metrics")}
    assert "vllm:kv_cache_usage_perc" in metrics and not any(m.endswith("_created") for m in metrics)
    assert rows("gpu_samples") and rows("energy_windows")
