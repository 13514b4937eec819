"""Server starts end to end (wattbench/plan.py server_starts, agent/wattbench_agent/runner.py run_start): a plan of two
emulated engines started twice runs each start's points on a fresh engine process, every load run records its start,
the deployment its starts (each with its own startup and idle power), the emulated GPUs' energy counters stay monotone
across the restart (as a real GPU's do), the warehouse's intervals are over the two starts, and the emulator's later
start runs at its own drawn speed."""

from __future__ import annotations

from pathlib import Path

import yaml

from wattbench.plan import agent_spec, load_plan
from wattbench.validation import validate_run
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.emulator.profiles import START_SPEED_SD, start_speed
from wattbench_agent.runner import run_spec

PLAN = {
    "name": "starts",
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "engines": [
        {"name": "a", "engine": "emulator", "profile": "trtllm-like", "precision": "fp8", "tp": 1},
        {"name": "b", "engine": "emulator", "profile": "vllm-like", "precision": "fp8", "tp": 1},
    ],
    "workloads": [
        {"name": "w", "input_tokens": 64, "output_tokens": 16, "warmup_s": 0.3, "duration_s": 1.5,
         "points": [{"shape": "concurrency", "concurrency": 4}]},
    ],
    "prices": {"gpu_hour_usd": 2.0},
    "repeats": 2,
    "server_starts": 2,
    "start_engines": "together",
    "idle_baseline_s": 0.3,
    "idle_quiet_s": 0.5,
    "health_timeout_s": 30,
}  # fmt: skip


def test_two_server_starts_run_record_and_summarise(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    plan, _ = load_plan(path)
    lines: list[str] = []
    bundle = run_spec(agent_spec(plan, "starts-1", tmp_path / "bundle", {}), log=lines.append)
    assert sum("(server start 2)" in line and "starting" in line for line in lines) == 2  # both engines again
    db = tmp_path / "w.duckdb"
    with connect(db) as con:
        ingest_bundle(con, bundle)
        runs = con.execute(
            "SELECT deployment_id, server_start, count(*), list(repeat ORDER BY repeat) FROM load_runs "
            "GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        deps = con.execute(
            "SELECT deployment_id, server_starts, json_array_length(config->'starts'), startup_s, "
            "config->'starts'->1->>'startup_s', idle_power_w_before FROM deployments ORDER BY 1"
        ).fetchall()
        windows = {r[0] for r in con.execute("SELECT window_name FROM energy_windows").fetchall()}
        backwards = con.execute(
            "SELECT count(*) FROM (SELECT energy_mj - lag(energy_mj) OVER (PARTITION BY deployment_id, gpu_uuid "
            "ORDER BY t_ns) AS d FROM gpu_samples) WHERE d < 0"
        ).fetchone()[0]
        figs = con.execute(
            "SELECT deployment_id, starts, interval_scope, lo < estimate AND estimate < hi FROM point_figures "
            "WHERE metric = 'output_tok_s' ORDER BY 1"
        ).fetchall()
        samples = validate_run(con, "gpu_samples", "starts-1")  # the blocking GX suite of gpu_samples
    assert runs == [("a", 1, 2, [1, 2]), ("a", 2, 2, [3, 4]), ("b", 1, 2, [1, 2]), ("b", 2, 2, [3, 4])]
    for dep, starts, listed, startup, second, idle in deps:
        assert starts == 2 and listed == 2 and startup is not None and float(second) > 0 and idle > 0, dep
    assert {"idle_before", "idle_after", "idle_before@s2", "idle_after@s2"} <= windows
    assert backwards == 0  # the emulated counter jumped forward at the restart, as a real GPU's keeps counting
    assert figs == [("a", 2, "starts+prior", True), ("b", 2, "starts+prior", True)]
    assert samples.passed, [o for o in samples.errors]


def test_the_emulator_draws_a_later_starts_speed_reproducibly() -> None:
    """The first start keeps the calibrated speed; later ones move by a seeded log-normal of sd START_SPEED_SD."""
    assert start_speed(1) == 1.0
    later = [start_speed(s, seed=0) for s in range(2, 202)]
    assert later == [start_speed(s, seed=0) for s in range(2, 202)] and len(set(later)) == 200
    logs = [abs(__import__("math").log(x)) for x in later]
    assert 0.5 * START_SPEED_SD < sum(logs) / len(logs) < 1.5 * START_SPEED_SD  # mean |z| sd ~ 0.8 sd
