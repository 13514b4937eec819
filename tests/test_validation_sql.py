"""Every rule judged in SQL means what it meant as a GX pandas batch.

The reference here is the way the suites ran before they moved into DuckDB: the derived columns computed in pandas
(the code kept below, as it was in wattbench/validation.py) and every expectation run by GX's own pandas engine on
the frame. The SQL path (validate_table -> wattbench.validation._judge) must give each rule the same verdict, the
same row and breaking-row counts, and the same breaking values, on rows drawn to break every rule and to sit on
every bound (NULL, NaN, +-Inf, equal pairs, strict and inclusive limits, rows outside a row_condition).
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pandas as pd
import pytest

from wattbench.ingest_checks import RANGES
from wattbench.validation import (
    DERIVED,
    NONFINITE,
    _question,
    suites,
    validate_run,
    validate_table,
)

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
import great_expectations as gx  # noqa: E402


# ------------------------------------------------------------------ the pandas derivations, as they were
def _gpu_energy_deltas(df: pd.DataFrame) -> pd.DataFrame:
    df = df.sort_values(["deployment_id", "gpu_uuid", "t_ns"]).copy()
    df["energy_delta_mj"] = df.groupby(["deployment_id", "gpu_uuid"])["energy_mj"].diff()
    df["gap_ns"] = df.groupby(["deployment_id", "gpu_uuid"])["t_ns"].diff()
    df["power_ceiling_w"] = df["power_limit_w"] * 1.1
    return df


def _window_checks(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    both = df["energy_j"].notna() & df["energy_trace_j"].notna() & (df["energy_j"] > 0)
    df["counter_trace_diff_pct"] = None
    df.loc[both, "counter_trace_diff_pct"] = (
        (df.loc[both, "energy_trace_j"] - df.loc[both, "energy_j"]).abs() / df.loc[both, "energy_j"] * 100
    )
    df["counter_trace_diff_pct"] = pd.to_numeric(df["counter_trace_diff_pct"])
    df["rate_achieved_pct"] = None
    has_rate = df["rate"].notna() & df["achieved_rate"].notna() & (df["shape"] == "poisson")
    df.loc[has_rate, "rate_achieved_pct"] = df.loc[has_rate, "achieved_rate"] / df.loc[has_rate, "rate"] * 100
    df["rate_achieved_pct"] = pd.to_numeric(df["rate_achieved_pct"])
    df["concurrency_achieved_pct"] = None
    conc = pd.to_numeric(df["concurrency"], errors="coerce")
    achieved = pd.to_numeric(df["achieved_concurrency"], errors="coerce")
    has_conc = (df["shape"] == "concurrency") & (conc > 0) & achieved.notna()
    df.loc[has_conc, "concurrency_achieved_pct"] = achieved[has_conc] / conc[has_conc] * 100
    df["concurrency_achieved_pct"] = pd.to_numeric(df["concurrency_achieved_pct"])
    df["has_energy"] = df["energy_j"].notna()
    verdict = df["probe_verdict"] if "probe_verdict" in df else pd.Series(None, index=df.index, dtype=object)
    df["energy_window_s"] = pd.to_numeric(df["window_s"], errors="coerce").where(verdict != "oversaturated")
    lifetime_s = pd.to_numeric(df["e2e_p50_ms"], errors="coerce") / 1000
    df["warmup_lifetimes"] = pd.to_numeric(df["warmup_s"], errors="coerce") / lifetime_s.where(lifetime_s > 0)
    return df


def _nonfinite(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    num = df.select_dtypes("number")
    inf = num.apply(lambda col: col.isin([float("inf"), float("-inf")]))
    df[NONFINITE] = [",".join(num.columns[row]) or None for row in inf.to_numpy()]
    return df


def reference(table: str, df: pd.DataFrame, plan_validation: dict | None = None) -> dict[str, dict]:
    """Each rule's verdict from GX's pandas engine on the frame prepared in pandas."""
    frame = _nonfinite(df)
    if table == "gpu_samples":
        frame = _gpu_energy_deltas(frame)
    if table == "load_runs":
        frame = _window_checks(frame)
    ctx = gx.get_context(mode="ephemeral")
    batch = (
        ctx.data_sources.add_pandas("ref")
        .add_dataframe_asset("rows")
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": frame})
    )
    suite = gx.ExpectationSuite(name=table)
    names = {}
    for rule in suites(plan_validation)[table]:
        exp = copy.deepcopy(rule.expectation)
        exp.meta = {"rule": rule.name}
        suite.add_expectation(exp)
        names[rule.name] = exp
    out = {}
    for r in batch.validate(suite).results:
        assert not (r.exception_info or {}).get("raised_exception"), r.exception_info
        res = r.result or {}
        out[r.expectation_config.meta["rule"]] = {
            "success": bool(r.success),
            "element_count": res.get("element_count"),
            "unexpected_count": res.get("unexpected_count"),
            "sample": res.get("partial_unexpected_list") or [],
        }
    return out


# ------------------------------------------------------------------ rows drawn to break and to touch every bound
STRINGS = {
    "source": ["emulated", "measured", "replayed", None],
    "status": ["ok", "built", "cached", "no_build", "healthy", "failed", None],
    "shape": ["concurrency", "poisson", "gamma", None],
    "error_kind": [None, None, None, "http_500", "truncated_prompt", "truncated_output"],
    "probe_verdict": [None, None, "meets", "misses", "oversaturated"],
}
BOOLS = {"version_checked", "has_energy", "idle_settled_before", "idle_settled_after"}


def _numbers(table: str, column: str) -> list:
    values = [None, 0.0, 0.5, 1.0, 2.0, 30.0, 100.0, 1e3, -1.0, float("inf"), float("-inf")]
    for rule in suites()[table]:  # every bound of every range rule on the column, and its neighbours
        exp = rule.expectation
        if getattr(exp, "column", None) == column:
            for bound in (getattr(exp, "min_value", None), getattr(exp, "max_value", None)):
                if bound is not None:
                    values += [bound, bound - 0.01, bound + 0.01]
    lo_hi = RANGES.get(table, {}).get(column)
    if lo_hi:
        values += [b for b in lo_hi if b is not None]
    return values


def rows(table: str, n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    columns: set[str] = set(RANGES.get(table, {}))
    for rule in suites()[table]:
        columns |= set(_question(rule.expectation).columns)
    for needs, _ in DERIVED.get(table, {}).values():
        columns |= set(needs)
    columns -= set(DERIVED.get(table, {})) | {NONFINITE}
    if table == "load_runs":
        columns |= {"latency_samples", "completed_in_window", "e2e_p50_ms", "window_drift"}
    data: dict[str, list] = {}
    for c in sorted(columns):
        if c in STRINGS:
            pool = STRINGS[c]
        elif c in BOOLS:
            pool = [True, False, None]
        elif c.endswith("_id") or c in ("gpu_uuid", "model", "engine", "metric", "artifact_sha256", "engine_version"):
            pool = ["a", "b", None] if c != "gpu_uuid" else ["g0", "g1", None]
        else:
            pool = _numbers(table, c)
        data[c] = [pool[i] for i in rng.integers(0, len(pool), n)]
    if table == "gpu_samples":  # a time series per GPU: distinct times, gaps around the limit, counters that step back
        data["t_ns"] = list(rng.permutation(np.cumsum(rng.choice([1e8, 2e8, 3e8, 3e8 + 1, 5e8], n))).astype("int64"))
        data["t_ns"][0] = None
        data["energy_mj"] = list(np.cumsum(rng.choice([30.0, 0.0, -5.0, 60.0], n)) + 1e4)
        data["energy_mj"][1] = None
        data["power_limit_w"] = [700.0 if i % 7 else None for i in range(n)]
        data["power_w"] = list(rng.choice([0.0, 300.0, 769.9, 770.0, 770.1, 900.0], n))
    df = pd.DataFrame(data)
    for c in df.columns:  # booleans and strings stay objects; numbers become floats (None: NaN, missing)
        if c not in STRINGS and c not in BOOLS and df[c].map(lambda v: isinstance(v, (int, float)) or v is None).all():
            df[c] = pd.to_numeric(df[c])
    return df


def _same_values(a: list, b: list) -> bool:
    """The same values in any order; NaN (GX pandas' missing) and None (SQL's NULL) alike."""

    def norm(v):
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        return None if isinstance(v, float) and np.isnan(v) else v

    norm = [sorted(repr(norm(v)) for v in s) for s in (a, b)]
    return norm[0] == norm[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("table", list(suites()))
def test_every_rule_in_sql_means_what_it_meant_in_pandas(table, seed):
    df = rows(table, 120, seed)
    pv = {"max_error_rate": 0.2}  # error_rate near its limit: both sides of `mostly` occur over the seeds
    want = reference(table, df, pv)
    got = {o.rule: o for o in validate_table(table, df, pv).outcomes}
    assert set(got) == set(want)
    broken = 0
    for name, ref in want.items():
        o = got[name]
        assert (o.success, o.element_count, o.unexpected_count) == (
            ref["success"],
            ref["element_count"],
            ref["unexpected_count"],
        ), name
        if ref["unexpected_count"] and ref["unexpected_count"] <= 5:  # all breaking values shown on both sides
            assert _same_values(o.sample, ref["sample"][:5]), (name, o.sample, ref["sample"])
        broken += not o.success
    assert broken >= len(want) // 3  # the rows do break rules: a comparison of passes alone would prove little


def test_every_rule_has_sql():
    for rules in suites().values():
        for rule in rules:
            _question(rule.expectation)  # raises for an expectation or option the SQL does not cover


def test_a_rule_whose_column_is_absent_fails_and_says_so():
    df = pd.DataFrame({"run_id": ["r"], "source": ["emulated"], "load_point_id": ["a"], "window_s": [30.0]})
    (o,) = [o for o in validate_table("load_runs", df).outcomes if o.rule == "load_runs.steady_window"]
    assert not o.success and o.sample == ["column window_drift, shape is not in the load_runs rows checked"]


def test_the_warehouse_path_judges_one_run_and_keeps_nan_apart_from_null(tmp_path):
    """validate_run reads the run's rows where they are: another run's bad rows are not this run's, a NaN in the
    warehouse is a broken value (finite rule) while NULL is not measured."""
    from wattbench.warehouse import connect

    with connect(tmp_path / "w.duckdb") as con:
        con.execute(
            "INSERT INTO requests (run_id, source, deployment_id, load_point_id, request_id, ttft_ms, e2e_ms) "
            "SELECT 'r', 'emulated', 'd', 'lp', i::VARCHAR, 10.0, CASE WHEN i = 3 THEN 'NaN'::DOUBLE "
            "WHEN i = 4 THEN NULL ELSE 100.0 END FROM range(50) t(i)"
        )
        con.execute(
            "INSERT INTO requests (run_id, source, deployment_id, load_point_id, request_id, ttft_ms, e2e_ms) "
            "VALUES ('other', 'emulated', 'd', 'lp', '1', 500.0, 100.0)"
        )
        con.execute("SET memory_limit = '4GiB'")
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        result = validate_run(con, "requests", "r")
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == limit  # given back
        assert result.rows == 50
        bad = {o.rule: o for o in result.errors}
        assert set(bad) == {"requests.finite"} and bad["requests.finite"].sample == ["e2e_ms"]
        other = {o.rule for o in validate_run(con, "requests", "other").errors}
        assert other == {"requests.ttft_le_e2e"}
        assert [o.rule for o in validate_run(con, "requests", "nobody").outcomes] == ["requests.has_rows"]
