"""benchmarks/twin_power_lag.py: GPU samples binned by the time since the last prefill ended, on a bundle folder
written here (the same JSONL files the agent writes)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import twin_power_lag


def _write(folder: Path, name: str, rows: list[dict]) -> None:
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_power_is_binned_by_time_since_the_last_prefill(tmp_path: Path):
    ms = 1_000_000
    _write(
        tmp_path,
        "load_runs.jsonl",
        [
            {
                "load_point_id": "e:light:c1#1",
                "deployment_id": "e",
                "shape": "concurrency",
                "status": "ok",
                "workload": "light",
                "point_label": "c1",
                "repeat": 1,
                "concurrency": 1,
                "output_tokens": 128,
                "window_start_ns": 1000 * ms,
                "window_end_ns": 2000 * ms,
            }
        ],
    )
    # prefills end at 1000 and 1500 ms; power 700 W within 100 ms of one, 450 W otherwise
    _write(
        tmp_path,
        "requests.jsonl",
        [{"load_point_id": "e:light:c1#1", "first_token_ns": t * ms} for t in (1000, 1500)],
    )
    samples = [
        {"deployment_id": "e", "t_ns": t * ms, "power_w": 700.0 if t % 500 < 100 else 450.0}
        for t in range(1000, 2000, 25)
    ]
    samples.append({"deployment_id": "e", "t_ns": 5000 * ms, "power_w": 100.0})  # outside the window: ignored
    _write(tmp_path, "gpu_samples.jsonl", samples)
    (row,) = twin_power_lag.analyse_folder(tmp_path)
    assert row["samples"] == 40 and row["prefills_per_s"] == 2.0
    bins = {b["from_ms"]: b for b in row["bins"]}
    assert bins[0]["mean_w"] == 700.0 and bins[50]["mean_w"] == 700.0
    assert bins[100]["mean_w"] == 450.0 and bins[250]["mean_w"] == 450.0
    assert row["decode_only_w"] == 450.0 and row["decode_only_samples"] == 28
    (pt,) = twin_power_lag.points([{"bundle": "b", **row}])
    assert pt["mean_w"] == row["mean_w"] and pt["point"] == "light:c1"
