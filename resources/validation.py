"""Great Expectations 1.x suites, one per warehouse table, and the code that runs them on one run's rows.

Each expectation has a short name (`<table>.<what>`) and a severity: `error` blocks the reports of the run,
`warn` is recorded and shown but lets reports go on. The plan may override severities by name.
Derived columns (per-GPU energy deltas, counter-vs-trace differences) are computed here before GX runs,
so every rule stays a plain GX expectation.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from resources.ingest_checks import RANGES

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

import great_expectations as gx  # noqa: E402
from great_expectations.data_context.types.base import ProgressBarsConfig  # noqa: E402

logging.getLogger("great_expectations").setLevel(logging.ERROR)

SOURCES = ["emulated", "measured"]


@dataclass
class Rule:
    name: str
    expectation: Any  # a gx.expectations.* instance
    severity: str = "error"
    prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None  # adds derived columns the rule reads


@dataclass
class Outcome:
    rule: str
    table: str
    expectation: str
    column: str | None
    severity: str
    success: bool
    element_count: int | None
    unexpected_count: int | None
    sample: list[Any] = field(default_factory=list)


@dataclass
class SuiteResult:
    table: str
    outcomes: list[Outcome]
    rows: int

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success and o.severity == "error"]

    @property
    def warnings(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success and o.severity == "warn"]

    @property
    def passed(self) -> bool:
        return not self.errors

    def markdown(self) -> str:
        lines = [
            f"**{self.table}**: {self.rows} rows, {len(self.outcomes)} expectations, "
            f"{len(self.errors)} failed (error), {len(self.warnings)} failed (warn)",
            "",
            "| expectation | severity | result | unexpected / rows | sample |",
            "|---|---|---|---|---|",
        ]
        for o in sorted(self.outcomes, key=lambda o: (o.success, o.severity != "error")):
            sample = ", ".join(str(s) for s in o.sample[:3]).replace("|", "/")
            status = "pass" if o.success else "**FAIL**"
            lines.append(
                f"| {o.rule} | {o.severity} | {status} | {o.unexpected_count or 0} / {o.element_count or 0} | {sample} |"
            )
        return "\n".join(lines)


E = gx.expectations


def _not_null(table: str, *cols: str) -> list[Rule]:
    return [Rule(f"{table}.{c}_present", E.ExpectColumnValuesToNotBeNull(column=c)) for c in cols]


def _source(table: str) -> Rule:
    return Rule(f"{table}.source_known", E.ExpectColumnValuesToBeInSet(column="source", value_set=SOURCES))


def _gpu_energy_deltas(df: pd.DataFrame) -> pd.DataFrame:
    df = df.sort_values(["deployment_id", "gpu_uuid", "t_ns"]).copy()
    df["energy_delta_mj"] = df.groupby(["deployment_id", "gpu_uuid"])["energy_mj"].diff()
    df["gap_ns"] = df.groupby(["deployment_id", "gpu_uuid"])["t_ns"].diff()
    df["power_ceiling_w"] = df["power_limit_w"] * 1.1
    return df


def _window_checks(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col in ("energy_j", "energy_trace_j", "rate", "achieved_rate", "concurrency", "achieved_concurrency", "shape"):
        if col not in df.columns:
            df[col] = None
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
    # Closed loop: the time-averaged in-flight requests against the concurrency asked for.
    df["concurrency_achieved_pct"] = None
    conc = pd.to_numeric(df["concurrency"], errors="coerce")
    achieved = pd.to_numeric(df["achieved_concurrency"], errors="coerce")
    has_conc = (df["shape"] == "concurrency") & (conc > 0) & achieved.notna()
    df.loc[has_conc, "concurrency_achieved_pct"] = achieved[has_conc] / conc[has_conc] * 100
    df["concurrency_achieved_pct"] = pd.to_numeric(df["concurrency_achieved_pct"])
    df["has_energy"] = df["energy_j"].notna()
    if "e2e_p50_ms" in df.columns:
        lifetime_s = pd.to_numeric(df["e2e_p50_ms"], errors="coerce") / 1000
        df["warmup_lifetimes"] = pd.to_numeric(df["warmup_s"], errors="coerce") / lifetime_s.where(lifetime_s > 0)
    return df


# DuckDB's DataFrame conversion turns NULL (not measured) and NaN (a broken value) into the same NaN, so the
# non-finite values are named in SQL, before conversion: `nonfinite_columns` lists the DOUBLE columns of a row
# holding NaN or +-Inf (NULL when none). `table_frame` adds it; a frame without it (rows handed in directly)
# gets it from the values where that is unambiguous (+-Inf), see _nonfinite.
NONFINITE = "nonfinite_columns"


# Figures a table's rules read besides its own columns, joined from the views (sql/views.sql).
_FRAME_JOINS = {
    "load_runs": "LEFT JOIN (SELECT run_id, load_point_id, latency_samples, completed_in_window, e2e_p50_ms "
    "FROM v_load_points) v USING (run_id, load_point_id) "
    "LEFT JOIN (SELECT run_id, load_point_id, window_drift FROM v_window_steadiness) s "
    "USING (run_id, load_point_id)",
}


def table_frame(con: Any, table: str, run_id: str) -> pd.DataFrame:
    """One run's rows of a table as the checks read them, with `nonfinite_columns` computed in SQL. List columns
    (requests.chunk_ns, chunk_tokens: every token's time) are left in DuckDB: no rule reads them (ingest checked
    their elements), and a million requests' token times would be gigabytes of Python objects."""
    described = con.execute(f"DESCRIBE {table}").fetchall()
    doubles = [r[0] for r in described if r[1] in ("DOUBLE", "FLOAT", "REAL")]
    lists = [r[0] for r in described if r[1].endswith("]")]
    star = f"* EXCLUDE ({', '.join('t.' + c for c in lists)})" if lists else "*"
    if doubles:
        names = ", ".join(f"CASE WHEN isnan(t.{c}) OR isinf(t.{c}) THEN '{c}' END" for c in doubles)
        extra = f", nullif(concat_ws(',', {names}), '') AS {NONFINITE}"
    else:
        extra = f", NULL::VARCHAR AS {NONFINITE}"
    return con.execute(
        f"SELECT {star}{extra} FROM {table} t {_FRAME_JOINS.get(table, '')} WHERE t.run_id = ?", [run_id]
    ).df()


def _nonfinite(df: pd.DataFrame) -> pd.DataFrame:
    if NONFINITE in df.columns:
        return df
    df = df.copy()
    num = df.select_dtypes("number")
    inf = num.apply(lambda col: col.isin([float("inf"), float("-inf")]))
    df[NONFINITE] = [",".join(num.columns[row]) or None for row in inf.to_numpy()] if len(num.columns) else None
    return df


def _gpu_samples_prepare(df: pd.DataFrame) -> pd.DataFrame:
    return _gpu_energy_deltas(_nonfinite(df))


# Ranges of the values that reach a figure: the same table as ingest's (resources/ingest_checks.RANGES), checked
# again here on whatever reached the warehouse. Columns an older rule already covers keep that rule's name.
_COVERED = {
    ("requests", "tpot_ms"),
    ("gpu_samples", "power_w"),
    ("deployments", "startup_s"),
    ("load_runs", "completed"),
    ("engine_builds", "tp"),
    ("deployments", "tp"),
    ("load_runs", "window_s"),
}
_PREPARE_CACHE: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {}


def _complete(table: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A prepare step (one per table, so its rules share one GX batch): the range columns the frame lacks as NULL,
    and `nonfinite_columns`."""
    if table not in _PREPARE_CACHE:
        columns = list(RANGES.get(table, {}))

        def prepare(df: pd.DataFrame) -> pd.DataFrame:
            df = _nonfinite(df)
            missing = [c for c in columns if c not in df.columns]
            return df.assign(**{c: None for c in missing}) if missing else df

        _PREPARE_CACHE[table] = prepare
    return _PREPARE_CACHE[table]


def _finite_and_in_range(table: str) -> list[Rule]:
    """`<table>.finite` (no NaN/Inf in any DOUBLE column; the sample names the columns) and one rule per column of
    RANGES: `<col>_nonnegative`, `<col>_in_range` or `<col>_at_least_<n>`."""
    prepare = _complete(table)
    rules = (
        []
        if table == "gpu_samples"
        else [  # gpu_samples.no_nan is the same rule under its older name
            Rule(f"{table}.finite", E.ExpectColumnValuesToBeNull(column=NONFINITE), "error", prepare)
        ]
    )
    for column, (lo, hi) in RANGES.get(table, {}).items():
        if (table, column) in _COVERED:
            continue
        name = "nonnegative" if lo == 0 and hi is None else "in_range" if hi is not None else f"at_least_{lo:g}"
        rules.append(
            Rule(
                f"{table}.{column}_{name}",
                E.ExpectColumnValuesToBeBetween(column=column, min_value=lo, max_value=hi),
                "error",
                prepare,
            )
        )
    return rules


def suites(plan_validation: dict[str, Any] | None = None, sample_period_s: float = 0.1) -> dict[str, list[Rule]]:
    """The rules of every table, with the plan's limits applied."""
    pv = plan_validation or {}
    max_err = float(pv.get("max_error_rate", 0.01))
    min_window = float(pv.get("min_energy_window_s", 20.0))
    gap_limit_ns = 3 * sample_period_s * 1e9
    return {
        "engine_builds": [
            *_not_null("engine_builds", "run_id", "build_id", "model", "engine"),
            _source("engine_builds"),
            Rule(
                "engine_builds.status_ok",
                E.ExpectColumnValuesToBeInSet(column="status", value_set=["built", "cached", "no_build"]),
            ),
            Rule(
                "engine_builds.hash_present",
                E.ExpectColumnValuesToNotBeNull(
                    column="artifact_sha256", row_condition='status == "built"', condition_parser="pandas"
                ),
            ),
            Rule(
                "engine_builds.build_time_positive",
                E.ExpectColumnValuesToBeBetween(
                    column="build_s",
                    min_value=0,
                    strict_min=True,
                    row_condition='status == "built"',
                    condition_parser="pandas",
                ),
            ),
            *_finite_and_in_range("engine_builds"),
        ],
        "deployments": [
            *_not_null("deployments", "run_id", "deployment_id", "engine"),
            _source("deployments"),
            Rule("deployments.healthy", E.ExpectColumnValuesToBeInSet(column="status", value_set=["healthy"])),
            # NULL for an attached external endpoint (not started, so not timed); a started engine took some time.
            Rule(
                "deployments.startup_positive",
                E.ExpectColumnValuesToBeBetween(column="startup_s", min_value=0, strict_min=True),
            ),
            # The engine's own version, and one its adapter was checked against (flags, log lines, metric names).
            Rule(
                "deployments.version_known",
                E.ExpectColumnValuesToNotBeNull(
                    column="engine_version", row_condition='status == "healthy"', condition_parser="pandas"
                ),
                "warn",
            ),
            Rule(
                "deployments.version_checked",
                E.ExpectColumnValuesToBeInSet(column="version_checked", value_set=[True]),
                "warn",
            ),
            Rule(
                "deployments.hbm_within_gpu",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="hbm_total_mib",
                    column_B="hbm_used_mib",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
            ),
            *_finite_and_in_range("deployments"),
        ],
        "load_runs": [
            *_not_null("load_runs", "run_id", "load_point_id", "window_s"),
            _source("load_runs"),
            Rule("load_runs.status_ok", E.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"])),
            Rule("load_runs.completed_some", E.ExpectColumnValuesToBeBetween(column="completed", min_value=1)),
            Rule(
                "load_runs.energy_measured",
                E.ExpectColumnValuesToBeInSet(column="has_energy", value_set=[True]),
                "warn",
                _window_checks,
            ),
            Rule(
                "load_runs.min_energy_window",
                E.ExpectColumnValuesToBeBetween(column="window_s", min_value=min_window),
                "error",
            ),
            # The counter is the figure of record; a trace that disagrees by > 2% is flagged (warn), not fatal:
            # NVML's instant power covers only part of each 100 ms, so under load that changes faster the trace
            # misses the counter at any sampling rate (measured on the H200: results/nvml-power-sampling).
            Rule(
                "load_runs.counter_vs_trace_2pct",
                E.ExpectColumnValuesToBeBetween(column="counter_trace_diff_pct", min_value=0, max_value=2.0),
                "warn",
                _window_checks,
            ),
            # Achieved against requested load: open loop (poisson) by rate, closed loop by time-averaged concurrency.
            Rule(
                "load_runs.achieved_rate_5pct",
                E.ExpectColumnValuesToBeBetween(column="rate_achieved_pct", min_value=95, max_value=105),
                "warn",
                _window_checks,
            ),
            Rule(
                "load_runs.achieved_concurrency_5pct",
                E.ExpectColumnValuesToBeBetween(column="concurrency_achieved_pct", min_value=95, max_value=105),
                "warn",
                _window_checks,
            ),
            # Steady state by rule (docs/MEASUREMENT.md): enough requests behind each figure, a warm-up of at least
            # two request lifetimes, and a window whose two halves delivered the same tokens within 5%.
            Rule(
                "load_runs.p99_from_100_requests",
                E.ExpectColumnValuesToBeBetween(column="latency_samples", min_value=100),
                "warn",
            ),
            Rule(
                "load_runs.completions_in_window",
                E.ExpectColumnValuesToBeBetween(column="completed_in_window", min_value=30),
                "warn",
            ),
            Rule(
                "load_runs.warmup_two_lifetimes",
                E.ExpectColumnValuesToBeBetween(column="warmup_lifetimes", min_value=2),
                "warn",
                _window_checks,
            ),
            # closed loop only: open-loop arrivals (poisson, gamma, surge, trace) vary by design
            Rule(
                "load_runs.steady_window",
                E.ExpectColumnValuesToBeBetween(
                    column="window_drift",
                    max_value=0.05,
                    row_condition='shape == "concurrency"',
                    condition_parser="pandas",
                ),
                "warn",
            ),
            # a window of no time makes every per-second figure infinite
            Rule(
                "load_runs.window_s_positive",
                E.ExpectColumnValuesToBeBetween(column="window_s", min_value=0, strict_min=True),
            ),
            *_finite_and_in_range("load_runs"),
        ],
        "requests": [
            *_not_null("requests", "run_id", "request_id", "load_point_id"),
            _source("requests"),
            Rule(
                "requests.error_rate", E.ExpectColumnValuesToBeNull(column="error_kind", mostly=max(1e-9, 1 - max_err))
            ),
            Rule(
                "requests.ttft_le_e2e",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="e2e_ms", column_B="ttft_ms", or_equal=True, ignore_row_if="either_value_is_missing"
                ),
            ),
            Rule("requests.tpot_nonnegative", E.ExpectColumnValuesToBeBetween(column="tpot_ms", min_value=0)),
            Rule(
                "requests.completion_le_max_tokens",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="max_tokens",
                    column_B="completion_tokens",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
            ),
            Rule(
                "requests.no_truncation",
                E.ExpectColumnValuesToNotBeInSet(
                    column="error_kind", value_set=["truncated_prompt", "truncated_output"]
                ),
            ),
            Rule(
                "requests.sent_before_first_token",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="first_token_ns",
                    column_B="sent_ns",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
            ),
            Rule(
                "requests.first_before_last_token",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="last_token_ns",
                    column_B="first_token_ns",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
            ),
            *_finite_and_in_range("requests"),
        ],
        "gpu_samples": [
            *_not_null("gpu_samples", "run_id", "gpu_uuid", "t_ns"),
            _source("gpu_samples"),
            Rule("gpu_samples.power_nonnegative", E.ExpectColumnValuesToBeBetween(column="power_w", min_value=0)),
            Rule(
                "gpu_samples.power_within_limit",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="power_ceiling_w",
                    column_B="power_w",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
                "error",
                _gpu_samples_prepare,
            ),
            Rule(
                "gpu_samples.energy_monotone",
                E.ExpectColumnValuesToBeBetween(column="energy_delta_mj", min_value=0),
                "error",
                _gpu_samples_prepare,
            ),
            Rule(
                "gpu_samples.no_gaps",
                E.ExpectColumnValuesToBeBetween(column="gap_ns", max_value=gap_limit_ns, mostly=0.999),
                "warn",
                _gpu_samples_prepare,
            ),
            # NaN/Inf is a broken reading (a value not measured is NULL); the sample names the columns.
            Rule("gpu_samples.no_nan", E.ExpectColumnValuesToBeNull(column=NONFINITE), "error", _gpu_samples_prepare),
            Rule(
                "gpu_samples.hbm_within_total",
                E.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A="hbm_total_mib",
                    column_B="hbm_used_mib",
                    or_equal=True,
                    ignore_row_if="either_value_is_missing",
                ),
            ),
            *_finite_and_in_range("gpu_samples"),
        ],
        "server_metrics": [
            *_not_null("server_metrics", "run_id", "metric", "t_ns", "value"),
            _source("server_metrics"),
            *_finite_and_in_range("server_metrics"),
        ],
    }


_CONTEXT: Any = None


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        _CONTEXT = ctx
    return _CONTEXT


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def validate_table(
    table: str, df: pd.DataFrame, plan_validation: dict[str, Any] | None = None, sample_period_s: float = 0.1
) -> SuiteResult:
    """Run a table's suite on a DataFrame of its rows (one run's rows, as the asset checks pass them)."""
    rules = suites(plan_validation, sample_period_s)[table]
    overrides = (plan_validation or {}).get("severity", {})
    ctx = _context()
    name = f"wb_{table}"
    try:
        source = ctx.data_sources.get(name)
    except (KeyError, ValueError):
        source = ctx.data_sources.add_pandas(name)
    outcomes: list[Outcome] = []
    if df.empty:
        return SuiteResult(
            table,
            [
                Outcome(
                    f"{table}.has_rows",
                    table,
                    "expect_table_row_count_to_be_between",
                    None,
                    overrides.get(f"{table}.has_rows", "error"),
                    False,
                    0,
                    0,
                )
            ],
            0,
        )
    # One GX suite per distinct `prepare`, so derived columns are computed once per batch.
    groups: dict[Any, list[Rule]] = {}
    for rule in rules:
        groups.setdefault(rule.prepare, []).append(rule)
    for i, (prepare, group) in enumerate(groups.items()):
        frame = prepare(df) if prepare else df
        asset_name = f"{table}_{i}"
        try:
            asset = source.get_asset(asset_name)
        except LookupError:
            asset = source.add_dataframe_asset(name=asset_name)
        try:
            batch_def = asset.get_batch_definition("all")
        except (KeyError, ValueError, LookupError):
            batch_def = asset.add_batch_definition_whole_dataframe("all")
        suite = gx.ExpectationSuite(name=f"{table}_{i}")
        by_id = {}
        for rule in group:
            severity = overrides.get(rule.name, rule.severity)
            exp = (
                rule.expectation.model_copy(deep=True) if hasattr(rule.expectation, "model_copy") else rule.expectation
            )
            exp.severity = "critical" if severity == "error" else "warning"
            exp.meta = {"rule": rule.name, "severity": severity}
            suite.add_expectation(exp)
            by_id[id(exp)] = rule
        result = batch_def.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
        for r in result.results:
            cfg = r.expectation_config
            meta = cfg.meta or {}
            res = r.result or {}
            failed_to_run = bool(r.exception_info and r.exception_info.get("raised_exception"))
            sample = res.get("partial_unexpected_list") or []
            if failed_to_run:
                sample = [str(r.exception_info.get("exception_message"))[:200]]
            outcomes.append(
                Outcome(
                    rule=meta.get("rule", cfg.type),
                    table=table,
                    expectation=cfg.type,
                    column=cfg.kwargs.get("column") or cfg.kwargs.get("column_A"),
                    severity=meta.get("severity", "error"),
                    success=bool(r.success) and not failed_to_run,
                    element_count=res.get("element_count"),
                    unexpected_count=res.get("unexpected_count"),
                    sample=_jsonable(sample[:5]),
                )
            )
    return SuiteResult(table, outcomes, len(df))


def outcome_rows(run_id: str, check_name: str, result: SuiteResult) -> list[dict[str, Any]]:
    """validation_results rows for a suite result."""
    return [
        {
            "run_id": run_id,
            "check_name": check_name,
            "table_name": o.table,
            "expectation": o.rule,
            "column_name": o.column,
            "severity": o.severity,
            "success": o.success,
            "element_count": o.element_count,
            "unexpected_count": o.unexpected_count,
            "sample": json.dumps(o.sample, default=str),
        }
        for o in result.outcomes
    ]
