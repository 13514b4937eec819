"""The suites cover every rule issue 7 lists, NaN is told apart from NULL, and bad bundles get messages that
name the file, the line or key, and what was expected, with nothing half-loaded."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.bundle_files import line_of, read_table, table_file
from wattbench.validation import suites, table_frame, validate_table
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent.bundle import BundleError, BundleWriter

# Issue 7, item 1: every rule, by the name the plan uses to set its severity.
ISSUE_RULES = {
    "engine_builds": ["hash_present", "build_time_positive"],
    "deployments": ["healthy", "hbm_within_gpu", "startup_positive"],
    "requests": [
        "ttft_le_e2e",
        "tpot_nonnegative",
        "completion_le_max_tokens",
        "no_truncation",
        "error_rate",
        "sent_before_first_token",
        "first_before_last_token",
    ],
    "gpu_samples": [
        "power_nonnegative",
        "power_within_limit",
        "energy_monotone",
        "no_gaps",
        "hbm_within_total",
        "no_nan",
    ],
    "load_runs": ["min_energy_window", "counter_vs_trace_2pct", "achieved_rate_5pct", "achieved_concurrency_5pct"],
    "server_metrics": ["metric_present", "value_present", "t_ns_present"],
}


def test_every_rule_of_the_issue_is_in_a_suite():
    names = {t: {r.name for r in rules} for t, rules in suites().items()}
    for table, rules in ISSUE_RULES.items():
        for rule in rules:
            assert f"{table}.{rule}" in names[table], f"{table}.{rule}"


def test_counter_vs_trace_is_a_warning_by_default():
    """The counter is the figure of record; the 10 Hz trace disagreed by 2.35-2.75% on the H200 at 256 streams
    while the counter agreed with Zeus to 0.000% (docs/RELIABILITY.md)."""
    (rule,) = [r for r in suites()["load_runs"] if r.name == "load_runs.counter_vs_trace_2pct"]
    assert rule.severity == "warn"
    (window,) = [r for r in suites()["load_runs"] if r.name == "load_runs.min_energy_window"]
    assert window.severity == "error"


def gpu_rows(n=20):
    return [
        {
            "deployment_id": "d",
            "gpu_uuid": "GPU-0",
            "t_ns": i * 100_000_000,
            "power_w": 300.0,
            "power_limit_w": 700.0,
            "energy_mj": 1000.0 + 30 * i,
            "hbm_used_mib": 1.0,
            "hbm_total_mib": 2.0,
            "hbm_temp_c": None,
        }
        for i in range(n)
    ]


def test_nan_is_an_error_and_null_is_not_measured(tmp_path):
    """A NaN in the warehouse fails gpu_samples.no_nan naming the column; NULL (not measured) passes. DuckDB's
    DataFrame conversion conflates the two, so table_frame names the non-finite columns in SQL. (Ingest refuses a
    bundle holding NaN, tests/reliability/test_ingest_checks.py; here the NaN arrives by other SQL.)"""
    path = tmp_path / "b"
    with BundleWriter(path, run_id="r", source="measured") as w:
        w.write("gpu_samples", gpu_rows())
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, path)
        con.execute("UPDATE gpu_samples SET power_w = 'NaN'::DOUBLE WHERE t_ns = 300000000")
        frame = table_frame(con, "gpu_samples", "r")
    result = validate_table("gpu_samples", frame)
    (nan,) = [o for o in result.errors if o.rule == "gpu_samples.no_nan"]
    assert nan.unexpected_count == 1 and nan.sample == ["power_w"]
    assert not [o for o in result.outcomes if not o.success and o.rule != "gpu_samples.no_nan"]


def test_inf_is_caught_without_the_sql_helper():
    df = pd.DataFrame(gpu_rows())
    df.loc[5, "temp_c"] = np.inf
    (bad,) = [o for o in validate_table("gpu_samples", df).errors if o.rule == "gpu_samples.no_nan"]
    assert bad.sample == ["temp_c"]


def test_startup_and_achieved_load_rules():
    dep = pd.DataFrame(
        {
            "run_id": "r",
            "source": "emulated",
            "deployment_id": ["a", "b", "c"],
            "engine": "e",
            "status": "healthy",
            "startup_s": [12.0, 0.0, None],
        }
    )  # None: attached, not started
    (bad,) = [o for o in validate_table("deployments", dep).errors if o.rule == "deployments.startup_positive"]
    assert bad.unexpected_count == 1
    lr = pd.DataFrame(
        {
            "run_id": "r",
            "source": "emulated",
            "load_point_id": ["a", "b"],
            "window_s": 30.0,
            "status": "ok",
            "completed": 10,
            "shape": "concurrency",
            "concurrency": [8, 8],
            "achieved_concurrency": [7.9, 6.0],
            "rate": None,
            "achieved_rate": None,
            "energy_j": 1.0,
            "energy_trace_j": 1.0,
        }
    )
    result = validate_table("load_runs", lr)
    (warn,) = [o for o in result.warnings if o.rule == "load_runs.achieved_concurrency_5pct"]
    assert warn.unexpected_count == 1 and warn.sample == [75.0] and result.passed


def test_nan_written_to_a_bundle_is_named(tmp_path):
    w = BundleWriter(tmp_path / "b", run_id="r", source="measured")
    with pytest.raises(
        BundleError,
        match=r"gpu_samples.(jsonl|csv): row 1 of this write has NaN/Inf in power_w; "
        r"expected a finite number, or null where not measured",
    ):
        w.write("gpu_samples", [{**gpu_rows(1)[0], "power_w": float("nan")}])
    w.close(complete=False)


def test_duplicate_rows_in_a_bundle_are_named_and_nothing_loads(tmp_path):
    path = tmp_path / "b"
    with BundleWriter(path, run_id="r", source="emulated") as w:
        w.write(
            "deployments",
            [{"deployment_id": "d", "model": "m", "engine": "e", "config_name": "c", "status": "healthy"}],
        )
        row = {"deployment_id": "d", "load_point_id": "d:w:c1", "workload": "w", "shape": "concurrency", "status": "ok"}
        w.write("load_runs", [row, row])
    with connect(tmp_path / "w.duckdb") as con:
        with pytest.raises(
            BundleError,
            match=r"load_runs.jsonl:2: the same row as line 1 \(load_point_id = d:w:c1\); "
            r"expected each row once; nothing was loaded",
        ):
            ingest_bundle(con, path)
        assert con.execute("SELECT count(*) FROM deployments").fetchone()[0] == 0


def test_wrong_type_in_a_bundle_is_named(tmp_path):
    path = tmp_path / "b"
    with BundleWriter(path, run_id="r", source="emulated") as w:
        w.write("requests", [{"deployment_id": "d", "load_point_id": "lp", "request_id": "1", "ttft_ms": "fast"}])
    with connect(tmp_path / "w.duckdb") as con:
        name, line = table_file(path, "requests").name, line_of(path, "requests", 0)
        # every CSV field is text: "(a string)" is said of a JSON string only
        with pytest.raises(BundleError, match=rf"{name}:{line}: ttft_ms = 'fast'( \(a string\))?; expected a number"):
            ingest_bundle(con, path)
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0


def test_rerun_into_the_same_folder_sets_the_attempt_aside(tmp_path):
    path = tmp_path / "b"
    w = BundleWriter(path, run_id="r", source="emulated")
    w.write("gpu_samples", gpu_rows(3))  # killed here: never closed
    again = BundleWriter(path, run_id="r", source="emulated")
    assert again.set_aside == path / "attempts" / "1"
    assert len(read_table(path / "attempts" / "1", "gpu_samples")) == 3
    assert not read_table(path, "gpu_samples")
    assert json.loads((path / "manifest.json").read_text())["earlier_attempt"] == str(again.set_aside)
    again.close()
    with pytest.raises(BundleError, match="holds run 'r', refusing to mix in run 'other'; use an empty folder"):
        BundleWriter(path, run_id="other", source="emulated")
