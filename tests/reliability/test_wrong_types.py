"""An agent spec or a bundle manifest with absurd or wrongly typed values gets one line naming the field, never a
traceback or a hang.

Probed on the old code (`wattbench-agent agent --spec`, `wattbench ingest`): idle_baseline_s 1e9, warmup_requests
1e12 or a load point's duration_s 1e9 held the agent (for years); a string sampler_hz, version, port or
concurrency, an int `gpus`, a list `env` or `load_points`, an int `out` ended in TypeError/ValueError/OverflowError
tracebacks; idle_baseline_s -1, health_timeout_s 1e12 or timeout_s 1e12 were taken as given. A manifest whose
clock anchor was a string or past 2^63 was a DuckDB conversion traceback; a list `host` was stored as text."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main as wattbench
from tests.reliability.conftest import emulator_spec
from tests.test_warehouse import make_bundle

REPO = Path(__file__).resolve().parents[2]


def _spec(where: str, key: str, value, out: Path) -> dict:
    spec = emulator_spec("r-types", out, n_points=1, duration_s=0.3)
    target = {
        "top": spec,
        "deployment": spec["deployments"][0],
        "engine": spec["deployments"][0]["engine_config"],
        "load": spec["deployments"][0]["load_points"][0]["spec"],
    }[where]
    target[key] = value
    return copy.deepcopy(spec)


SPECS = {
    "idle_baseline_s 1e9": (("top", "idle_baseline_s", 1e9), "field 'idle_baseline_s' is 1000000000.0; expected"),
    "idle_baseline_s -1": (("top", "idle_baseline_s", -1), "field 'idle_baseline_s' is -1; expected a number >= 0"),
    "sampler_hz text": (("top", "sampler_hz", "x"), "field 'sampler_hz' is 'x'; expected a number > 0"),
    "sampler_hz 0": (("top", "sampler_hz", 0), "field 'sampler_hz' is 0"),
    "warmup_requests 1e12": (("top", "warmup_requests", 10**12), "field 'warmup_requests' is 1000000000000"),
    "version text": (("top", "version", "x"), "field 'version' is 'x'; expected an integer"),
    "telemetry unknown": (("top", "telemetry", "bogus"), "field 'telemetry' is 'bogus'; expected one of auto"),
    "out a number": (("top", "out", 5), "field 'out' is 5; expected a non-empty string"),
    "health_timeout_s 1e12": (("deployment", "health_timeout_s", 1e12), "field 'health_timeout_s' is"),
    "port 99999": (("deployment", "port", 99999), "field 'port' is 99999; expected an integer 0-65,535"),
    "gpus a number": (("deployment", "gpus", 5), "field 'gpus' is 5; expected a list of GPU indices or UUIDs"),
    "env a list": (("deployment", "env", [1]), "field 'env' is [1]; expected an object"),
    "load_points an object": (("deployment", "load_points", {"a": 1}), "field 'load_points' is {'a': 1}"),
    "tp text": (("engine", "tp", "2"), "field 'tp' is '2'; expected an integer 1-64"),
    "duration_s 1e9": (("load", "duration_s", 1e9), "duration_s must be <= 86400, got 1e+09"),
    "timeout_s 1e12": (("load", "timeout_s", 1e12), "timeout_s must be <= 86400"),
    "concurrency text": (("load", "concurrency", "8"), "concurrency must be an integer, got '8'"),
    "random_range_ratio text": (
        ("load", "random_range_ratio", "0.5"),
        "random_range_ratio must be a number, got '0.5'",
    ),
    "random_range_ratio 1": (("load", "random_range_ratio", 1), "random_range_ratio must be >= 0 and < 1, got 1"),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_an_absurd_agent_spec_is_one_line_before_anything_starts(tmp_path, name):
    (where, key, value), expected = SPECS[name]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_spec(where, key, value, tmp_path / "bundle")))
    r = subprocess.run(
        [sys.executable, "-m", "wattbench_agent", "agent", "--spec", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,  # the old agent sat in idle_baseline_s 1e9 or a 1e9 s window
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert expected in r.stderr, r.stderr
    assert not (tmp_path / "bundle").exists()  # refused before anything was started or written


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("clock_anchor_mono_ns", "abc", "field 'clock_anchor_mono_ns' is 'abc'; expected an integer count"),
        ("clock_anchor_unix_ns", 10**30, "field 'clock_anchor_unix_ns' is 1000000000000000000000000000000"),
        ("clock_anchor_mono_ns", 1.5, "field 'clock_anchor_mono_ns' is 1.5"),
        ("host", [1], "field 'host' is [1]; expected a string"),
        ("bundle_version", 2.0, "bundle_version 2.0; this wattbench reads 1 and 2"),
    ],
)
def test_a_wrongly_typed_manifest_is_one_line(tmp_path, capsys, field, value, expected):
    bundle = make_bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest[field] = value
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert wattbench(["ingest", str(bundle), "--db", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json" in err and expected in err, err
