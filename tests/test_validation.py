"""Great Expectations suites: good rows pass, each planted fault is named with its row count and a sample."""

import numpy as np
import pandas as pd
import pytest

from wattbench.validation import outcome_rows, suites, validate_table


def requests_frame(n=20):
    return pd.DataFrame(
        {
            "run_id": "r",
            "source": "emulated",
            "deployment_id": "d",
            "load_point_id": "lp",
            "request_id": [str(i) for i in range(n)],
            "ttft_ms": 10.0,
            "e2e_ms": 100.0,
            "tpot_ms": 1.0,
            "completion_tokens": 32,
            "max_tokens": 32,
            "error_kind": None,
            "sent_ns": 0,
            "first_token_ns": 10,
            "last_token_ns": 100,
        }
    )


def failed(result):
    return {o.rule: o for o in result.outcomes if not o.success}


def test_good_requests_pass():
    result = validate_table("requests", requests_frame())
    assert result.passed and not failed(result)


def test_ttft_after_e2e_fails_with_sample():
    df = requests_frame()
    df.loc[3, "ttft_ms"] = 500.0
    result = validate_table("requests", df)
    bad = failed(result)
    assert not result.passed
    assert bad["requests.ttft_le_e2e"].unexpected_count == 1
    assert bad["requests.ttft_le_e2e"].sample  # shows the offending pair


def test_error_rate_limit_from_plan():
    df = requests_frame(100)
    df.loc[:2, "error_kind"] = "http_500"
    assert "requests.error_rate" in failed(validate_table("requests", df, {"max_error_rate": 0.01}))
    assert "requests.error_rate" not in failed(validate_table("requests", df, {"max_error_rate": 0.05}))


def test_truncation_is_caught():
    df = requests_frame()
    df.loc[0, "error_kind"] = (
        "truncated_output"  # as the agent classifies it (agent/wattbench_agent/engines/failures.py)
    )
    assert failed(validate_table("requests", df))["requests.no_truncation"].unexpected_count == 1


def test_severity_override_turns_error_into_warning():
    df = requests_frame(200)
    df.loc[0, "error_kind"] = "truncated_output"
    result = validate_table("requests", df, {"severity": {"requests.no_truncation": "warn"}})
    assert result.passed and [o.rule for o in result.warnings] == ["requests.no_truncation"]


def gpu_frame():
    t = np.arange(0, 50) * 100_000_000
    return pd.DataFrame(
        {
            "run_id": "r",
            "source": "emulated",
            "deployment_id": "d",
            "gpu_uuid": "GPU-0",
            "t_ns": t,
            "power_w": 300.0,
            "power_limit_w": 700.0,
            "energy_mj": 1000.0 + np.arange(50) * 30.0,
            "hbm_used_mib": 1000.0,
            "hbm_total_mib": 80000.0,
        }
    )


def test_gpu_samples_faults():
    assert validate_table("gpu_samples", gpu_frame()).passed
    df = gpu_frame()
    df.loc[10, "energy_mj"] = 0.0  # counter going backwards
    df.loc[20, "power_w"] = 900.0  # above 1.1 x the 700 W limit
    df.loc[30, "hbm_used_mib"] = 90000.0  # more HBM used than the GPU has
    bad = failed(validate_table("gpu_samples", df))
    assert {"gpu_samples.energy_monotone", "gpu_samples.power_within_limit", "gpu_samples.hbm_within_total"} <= set(bad)


def test_load_window_rules():
    df = pd.DataFrame(
        {
            "run_id": "r",
            "source": "emulated",
            "load_point_id": ["a", "b"],
            "window_s": [25.0, 5.0],
            "status": "ok",
            "completed": 10,
            "energy_j": [1000.0, 1000.0],
            "energy_trace_j": [1010.0, 1100.0],
            "rate": None,
            "achieved_rate": None,
            "shape": "concurrency",
        }
    )
    bad = failed(validate_table("load_runs", df))
    assert bad["load_runs.min_energy_window"].unexpected_count == 1
    assert bad["load_runs.counter_vs_trace_2pct"].unexpected_count == 1
    # a capacity search's probe that ended early (its queue growing without bound) is short by design
    df["probe_verdict"] = [None, "oversaturated"]
    assert "load_runs.min_energy_window" not in failed(validate_table("load_runs", df))
    df["probe_verdict"] = [None, "misses"]
    assert failed(validate_table("load_runs", df))["load_runs.min_energy_window"].unexpected_count == 1


def test_empty_table_fails_and_rows_are_recorded():
    result = validate_table("deployments", pd.DataFrame())
    assert not result.passed
    rows = outcome_rows("r", "gx_deployments", result)
    assert rows[0]["table_name"] == "deployments" and rows[0]["success"] is False


@pytest.mark.parametrize("table", list(suites()))
def test_every_stage_table_has_a_suite(table):
    assert len(suites()[table]) >= 3


def load_runs_frame():
    """Four closed-loop points and one gamma point, each with the figures the steady-state rules read."""
    return pd.DataFrame(
        {
            "run_id": "r",
            "source": "measured",
            "load_point_id": ["a", "b", "c", "d", "g"],
            "window_s": 30.0,
            "status": "ok",
            "completed": 500,
            "shape": ["concurrency"] * 4 + ["gamma"],
            "warmup_s": 10.0,
            "latency_samples": [500, 60, 500, 500, 500],
            "completed_in_window": [500, 500, 12, 500, 500],
            "e2e_p50_ms": [2000.0, 2000.0, 2000.0, 8000.0, 2000.0],
            "window_drift": [0.01, 0.01, 0.01, 0.2, 0.4],
        }
    )


def test_steady_state_rules_flag_thin_unsettled_points_and_leave_open_loop_drift_alone():
    bad = failed(validate_table("load_runs", load_runs_frame(), {"min_energy_window_s": 20}))
    assert bad["load_runs.p99_from_100_requests"].unexpected_count == 1  # b: a p99 of 60 requests
    assert bad["load_runs.completions_in_window"].unexpected_count == 1  # c: 12 completions
    assert bad["load_runs.warmup_two_lifetimes"].unexpected_count == 1  # d: 10 s warm-up, 8 s lifetimes
    assert bad["load_runs.steady_window"].unexpected_count == 1  # d drifts; gamma g may
    assert all(o.severity == "warn" for o in bad.values())


def test_a_version_the_adapter_was_not_checked_against_is_a_warning():
    df = pd.DataFrame(
        {
            "run_id": "r",
            "source": "measured",
            "deployment_id": ["a", "b", "c"],
            "engine": "vllm",
            "status": "healthy",
            "startup_s": 90.0,
            "engine_version": ["0.25.0", "0.26.1", None],
            "version_checked": [True, False, None],
            "hbm_used_mib": 1.0,
            "hbm_total_mib": 2.0,
        }
    )
    result = validate_table("deployments", df)
    bad = failed(result)
    assert result.passed  # warnings only
    assert bad["deployments.version_checked"].unexpected_count == 1 and bad["deployments.version_checked"].sample == [
        False
    ]
    assert bad["deployments.version_known"].unexpected_count == 1
