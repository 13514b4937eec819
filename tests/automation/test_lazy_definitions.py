"""The code location is built lazily (issue 15, item 3): importing it reads no WATTBENCH_* variable; building it
(what `dagster dev` and `wattbench run` do) reads them then, and the plan, warehouse and run folder reach the
resources through dg.EnvVar (resolved when a run starts, shown by name in the UI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[2]

SPY = """
import json, os, sys

class Spy(dict):
    seen = set()
    def _note(self, key):
        if isinstance(key, str) and (key.startswith("WATTBENCH_") or key == "HF_TOKEN"):
            Spy.seen.add(key)
    def __getitem__(self, key):
        self._note(key); return dict.__getitem__(self, key)
    def get(self, key, default=None):
        self._note(key); return dict.get(self, key, default)
    def __contains__(self, key):
        self._note(key); return dict.__contains__(self, key)

os.environ = Spy(os.environ)
import pipelines.definitions as d, pipelines.cli, pipelines.sensors, pipelines.schedules, pipelines.k8s, resources.k8s
at_import = sorted(Spy.seen)
defs = d.defs()
job = defs.resolve_job_def("benchmark")
scenarios = next(x.partitions_def for x in job.partitions_def.partitions_defs if x.name == "scenario")
print(json.dumps({"at_import": at_import, "at_build": sorted(Spy.seen),
                  "scenarios": scenarios.get_partition_keys(),
                  "schedule_tz": defs.get_schedule_def("nightly_regression").execution_timezone}))
"""


def test_importing_reads_no_wattbench_variable_and_building_does(tmp_path):
    plan = tmp_path / "my_scenario.yaml"
    plan.write_text((REPO / "tests" / "data" / "smoke_plan.yaml").read_text())
    env = {
        **os.environ,
        "WATTBENCH_PLAN": str(plan),
        "WATTBENCH_DB": str(tmp_path / "w.duckdb"),
        "WATTBENCH_SCHEDULE_TZ": "Europe/Paris",
        "WATTBENCH_GIT_URL": "https://github.com/org/wattbench",
    }
    proc = subprocess.run([sys.executable, "-c", SPY], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["at_import"] == [], f"read at import: {seen['at_import']}"
    assert {"WATTBENCH_PLAN", "WATTBENCH_DB", "WATTBENCH_SCHEDULE_TZ", "WATTBENCH_GIT_URL"} <= set(seen["at_build"])
    assert "my_scenario" in seen["scenarios"] and "default" in seen["scenarios"]  # the plan's stem: a scenario
    assert seen["schedule_tz"] == "Europe/Paris"


def test_the_resources_take_their_files_through_env_vars(monkeypatch, tmp_path):
    from pipelines.definitions import DEFAULT_DB, build_definitions

    monkeypatch.setenv("WATTBENCH_DB", str(tmp_path / "w.duckdb"))
    monkeypatch.setenv("WATTBENCH_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("WATTBENCH_PLAN", raising=False)
    defs = build_definitions()
    warehouse = defs.resources["warehouse"]
    plan = defs.resources["plan"]
    assert isinstance(warehouse.database, dg.EnvVar) and warehouse.database.env_var_name == "WATTBENCH_DB"
    assert isinstance(plan.output_dir, dg.EnvVar) and plan.output_dir.env_var_name == "WATTBENCH_RUNS_DIR"
    assert plan.path.endswith("plans/default.yaml")  # not set: the default
    monkeypatch.delenv("WATTBENCH_DB")
    assert build_definitions().resources["warehouse"].database == str(DEFAULT_DB)
