"""Great Expectations 1.x suites, one per warehouse table, and the code that runs them on one run's rows.

Each expectation has a short name (`<table>.<what>`) and a severity: `error` blocks the reports of the run,
`warn` is recorded and shown but lets reports go on. The plan may override severities by name.

How the rules run (docs/RELIABILITY.md, "Validation at scale"): every rule is a GX expectation that asks a yes/no
question of each row. DuckDB answers it: one SQL pass per table counts, for every rule, the rows in its domain, the
rows it skips (missing values) and the rows that break it, and fetches up to 20 of the breaking values; those
metrics are handed to the expectation's `metrics_validate`, under the ids its `get_validation_dependencies` gives
them, as GX's own validator hands it the metrics its execution engine computed: GX decides each verdict (`mostly`,
vacuous truth) and shapes its result exactly as it does for a batch it computed itself (no private GX call). GX's
SQL datasources would compute the metrics with queries of their own, and DuckDB is not among the dialects GX 1.x
supports (GXSqlDialect); the one pass per table is what keeps a large run's checks bounded. Nothing is sampled: every
row is judged. A run of 10M requests never becomes a DataFrame (benchmarks/warehouse_scale.py times it). Rows handed
in as a DataFrame (`validate_table`) go through the same SQL, in an in-memory DuckDB. tests/test_validation_sql.py
checks every rule's SQL against GX's own pandas engine on rows that break each rule and on boundary values.
Derived columns (per-GPU energy deltas, counter-vs-trace differences) are SQL expressions (DERIVED), computed in
the same pass, so every rule stays a plain GX expectation.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd

from wattbench import settings
from wattbench.ingest_checks import RANGES

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

import great_expectations as gx  # noqa: E402

logging.getLogger("great_expectations").setLevel(logging.ERROR)

SOURCES = ["emulated", "measured"]
# DuckDB's memory while the suites run on the warehouse (it spills past it); WATTBENCH_VALIDATION_MEMORY overrides
# (read when the suites run, not at import).
VALIDATION_MEMORY = "1GB"
SAMPLE_ROWS = 20  # breaking values kept per rule: GX's partial_unexpected_list


@dataclass
class Rule:
    name: str
    expectation: Any  # a gx.expectations.* instance
    severity: str = "error"


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
            counts = f"{o.unexpected_count or 0} / {o.element_count or 0}"
            lines.append(f"| {o.rule} | {o.severity} | {status} | {counts} | {sample} |")
        return "\n".join(lines)


E = gx.expectations


def _not_null(table: str, *cols: str) -> list[Rule]:
    return [Rule(f"{table}.{c}_present", E.ExpectColumnValuesToNotBeNull(column=c)) for c in cols]


def _source(table: str) -> Rule:
    return Rule(f"{table}.source_known", E.ExpectColumnValuesToBeInSet(column="source", value_set=SOURCES))


# Columns computed from a row (and, for gpu_samples, the row before it on the same GPU) that rules read:
# name -> (columns it needs, SQL). Absent when a column it needs is absent (rows handed in without it): the rules
# reading it then fail naming the column. NaN has been turned into NULL before these run (see _rows_sql), and a
# NaN they make (inf / inf) is NULL too: pandas and GX read NaN as missing, DuckDB orders it above every number.
DERIVED: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "gpu_samples": {
        # per GPU of a deployment, in time order; a row without a deployment or GPU belongs to no series
        "energy_delta_mj": (
            ("deployment_id", "gpu_uuid", "t_ns", "energy_mj"),
            "CASE WHEN deployment_id IS NOT NULL AND gpu_uuid IS NOT NULL THEN nullif(energy_mj - lag(energy_mj) "
            "OVER (PARTITION BY deployment_id, gpu_uuid ORDER BY t_ns), 'NaN'::DOUBLE) END",
        ),
        "gap_ns": (
            ("deployment_id", "gpu_uuid", "t_ns"),
            "CASE WHEN deployment_id IS NOT NULL AND gpu_uuid IS NOT NULL THEN t_ns - lag(t_ns) "
            "OVER (PARTITION BY deployment_id, gpu_uuid ORDER BY t_ns) END",
        ),
        "power_ceiling_w": (("power_limit_w",), "nullif(power_limit_w * 1.1, 'NaN'::DOUBLE)"),
    },
    "load_runs": {
        "counter_trace_diff_pct": (
            ("energy_j", "energy_trace_j"),
            "CASE WHEN energy_j > 0 THEN nullif(abs(energy_trace_j - energy_j) / energy_j * 100, 'NaN'::DOUBLE) END",
        ),
        "rate_achieved_pct": (
            ("rate", "achieved_rate", "shape"),
            "CASE WHEN shape = 'poisson' THEN nullif(achieved_rate / rate * 100, 'NaN'::DOUBLE) END",
        ),
        # Closed loop: the time-averaged in-flight requests against the concurrency asked for.
        "concurrency_achieved_pct": (
            ("concurrency", "achieved_concurrency", "shape"),
            "CASE WHEN shape = 'concurrency' AND concurrency > 0 "
            "THEN nullif(achieved_concurrency / concurrency * 100, 'NaN'::DOUBLE) END",
        ),
        "has_energy": (("energy_j",), "energy_j IS NOT NULL"),
        "energy_window_s": (
            ("window_s", "probe_verdict"),
            "CASE WHEN probe_verdict::VARCHAR IS DISTINCT FROM 'oversaturated' THEN window_s END",
        ),
        "warmup_lifetimes": (
            ("warmup_s", "e2e_p50_ms"),
            "nullif(warmup_s / CASE WHEN e2e_p50_ms / 1000 > 0 THEN e2e_p50_ms / 1000 END, 'NaN'::DOUBLE)",
        ),
    },
}
# Columns a rule reads that rows handed in may lack: NULL (not measured) when absent.
_FILL = {
    "load_runs": (
        "energy_j",
        "energy_trace_j",
        "rate",
        "achieved_rate",
        "concurrency",
        "achieved_concurrency",
        "probe_verdict",
    )
}

# DuckDB's DataFrame conversion turns NULL (not measured) and NaN (a broken value) into the same NaN, so the
# non-finite values are named in SQL: `nonfinite_columns` lists the DOUBLE columns of a row holding NaN or +-Inf
# (NULL when none). Rows handed in as a DataFrame arrive with NaN already NULL: there only +-Inf is told apart
# (unambiguous), unless the frame carries the column (table_frame adds it).
NONFINITE = "nonfinite_columns"


# Figures a table's rules read besides its own columns, joined from the views (sql/views.sql).
_FRAME_JOINS = {
    "load_runs": "LEFT JOIN (SELECT run_id, load_point_id, latency_samples, completed_in_window, e2e_p50_ms "
    "FROM v_load_points) v USING (run_id, load_point_id) "
    "LEFT JOIN (SELECT run_id, load_point_id, window_drift FROM v_window_steadiness) s "
    "USING (run_id, load_point_id)",
}


def _nonfinite_sql(doubles: list[str], prefix: str = "") -> str:
    if not doubles:
        return f"NULL::VARCHAR AS {NONFINITE}"
    names = ", ".join(f"CASE WHEN isnan({prefix}{_q(c)}) OR isinf({prefix}{_q(c)}) THEN '{c}' END" for c in doubles)
    return f"nullif(concat_ws(',', {names}), '') AS {NONFINITE}"


def _described(con: Any, relation_sql: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {relation_sql}").fetchall()]


def _run_rows_sql(con: Any, table: str) -> str:
    """One run's rows of a table (parameter $run_id) with the joined figures and `nonfinite_columns`, without the
    list columns (requests.chunk_ns, chunk_tokens: every token's time; no rule reads them, ingest checked their
    elements)."""
    described = _described(con, table)
    doubles = [c for c, t in described if t in ("DOUBLE", "FLOAT", "REAL")]
    lists = [c for c, t in described if t.endswith("]")]
    star = f"* EXCLUDE ({', '.join('t.' + _q(c) for c in lists)})" if lists else "*"
    return (
        f"SELECT {star}, {_nonfinite_sql(doubles, 't.')} FROM {table} t {_FRAME_JOINS.get(table, '')} "
        "WHERE t.run_id = $run_id"
    )


def table_frame(con: Any, table: str, run_id: str) -> pd.DataFrame:
    """One run's rows of a table as the checks read them, with `nonfinite_columns` computed in SQL, as a DataFrame
    (for a look at the rows; the checks themselves run in SQL, `validate_run`)."""
    return con.execute(_run_rows_sql(con, table), {"run_id": run_id}).df()


# Ranges of the values that reach a figure: the same table as ingest's (wattbench/ingest_checks.RANGES), checked
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


def _finite_and_in_range(table: str) -> list[Rule]:
    """`<table>.finite` (no NaN/Inf in any DOUBLE column; the sample names the columns) and one rule per column of
    RANGES: `<col>_nonnegative`, `<col>_in_range` or `<col>_at_least_<n>`."""
    rules = (
        []
        if table == "gpu_samples"
        else [  # gpu_samples.no_nan is the same rule under its older name
            Rule(f"{table}.finite", E.ExpectColumnValuesToBeNull(column=NONFINITE), "error")
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
            # an idle window taken before the GPUs went quiet (utilisation 0, power steady) reads idle high
            Rule(
                "deployments.idle_before_settled",
                E.ExpectColumnValuesToBeInSet(column="idle_settled_before", value_set=[True]),
                "warn",
            ),
            Rule(
                "deployments.idle_after_settled",
                E.ExpectColumnValuesToBeInSet(column="idle_settled_after", value_set=[True]),
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
            ),
            # every window but a capacity search's probe that ended early (its queue grew without bound: short by
            # design)
            Rule(
                "load_runs.min_energy_window",
                E.ExpectColumnValuesToBeBetween(column="energy_window_s", min_value=min_window),
                "error",
            ),
            # The counter is the figure of record; a trace that disagrees by > 2% is flagged (warn), not fatal:
            # NVML's instant power covers only part of each 100 ms, so under load that changes faster the trace
            # misses the counter at any sampling rate (measured on the H200: results/nvml-power-sampling).
            Rule(
                "load_runs.counter_vs_trace_2pct",
                E.ExpectColumnValuesToBeBetween(column="counter_trace_diff_pct", min_value=0, max_value=2.0),
                "warn",
            ),
            # Achieved against requested load: open loop (poisson) by rate, closed loop by time-averaged concurrency.
            Rule(
                "load_runs.achieved_rate_5pct",
                E.ExpectColumnValuesToBeBetween(column="rate_achieved_pct", min_value=95, max_value=105),
                "warn",
            ),
            Rule(
                "load_runs.achieved_concurrency_5pct",
                E.ExpectColumnValuesToBeBetween(column="concurrency_achieved_pct", min_value=95, max_value=105),
                "warn",
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
            ),
            Rule(
                "gpu_samples.energy_monotone",
                E.ExpectColumnValuesToBeBetween(column="energy_delta_mj", min_value=0),
                "error",
            ),
            Rule(
                "gpu_samples.no_gaps",
                E.ExpectColumnValuesToBeBetween(column="gap_ns", max_value=gap_limit_ns, mostly=0.999),
                "warn",
            ),
            # NaN/Inf is a broken reading (a value not measured is NULL); the sample names the columns.
            Rule("gpu_samples.no_nan", E.ExpectColumnValuesToBeNull(column=NONFINITE), "error"),
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


# ------------------------------------------------------------------------------------------ rules as SQL
_CONDITION = re.compile(r'^\s*([A-Za-z_]\w*)\s*==\s*"([^"\\]*)"\s*$')  # pandas row_condition: column == "value"
_SUPPORTED_IGNORE = ("either_value_is_missing",)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise ValueError(f"{value!r}: a rule compares with str, int, float or bool values only")


@dataclass(frozen=True)
class _Question:
    """What one expectation asks of each row, as SQL over the checked rows: `domain` (its row_condition) picks the
    rows it looks at, `skipped` the ones among them it ignores (missing values; None: it ignores none), and
    `unexpected` those of the rest that break it. `values`: what its sample shows of a breaking row."""

    columns: tuple[str, ...]
    domain: str
    skipped: str | None
    unexpected: str
    values: tuple[str, ...]
    pair: bool = False


def _question(exp: Any) -> _Question:
    """The SQL of a GX expectation, with GX's meaning: a column map expectation ignores missing values except the
    (not-)null ones, which count every row; a column pair expectation here ignores a row with either value missing.
    An expectation or option without SQL here raises ValueError (tests/test_validation_sql.py runs every rule)."""
    kind = type(exp).__name__
    domain, columns = "TRUE", ()
    if getattr(exp, "row_condition", None):
        condition = exp.row_condition
        condition = getattr(condition, "pass_through_filter", condition)  # GX 1.x wraps a pandas query string
        found = _CONDITION.match(str(condition))
        if not found or exp.condition_parser != "pandas":
            raise ValueError(f'{kind}: row_condition {str(condition)!r}; only column == "value" runs in SQL')
        domain, columns = f"({_q(found[1])} IS NOT DISTINCT FROM {_literal(found[2])})", (found[1],)
    if kind == "ExpectColumnPairValuesAToBeGreaterThanB":
        if exp.ignore_row_if not in _SUPPORTED_IGNORE:
            raise ValueError(f"{kind}: ignore_row_if={exp.ignore_row_if!r}; only {_SUPPORTED_IGNORE} runs in SQL")
        a, b = _q(exp.column_A), _q(exp.column_B)
        return _Question(
            (exp.column_A, exp.column_B, *columns),
            domain,
            f"{a} IS NULL OR {b} IS NULL",
            f"NOT ({a} {'>=' if exp.or_equal else '>'} {b})",
            (a, b),
            pair=True,
        )
    c = _q(exp.column)
    cols = (exp.column, *columns)
    if kind == "ExpectColumnValuesToNotBeNull":
        return _Question(cols, domain, None, f"{c} IS NULL", (c,))
    if kind == "ExpectColumnValuesToBeNull":
        return _Question(cols, domain, None, f"{c} IS NOT NULL", (c,))
    if kind in ("ExpectColumnValuesToBeInSet", "ExpectColumnValuesToNotBeInSet"):
        values = ", ".join(_literal(v) for v in exp.value_set)
        op = "NOT IN" if kind == "ExpectColumnValuesToBeInSet" else "IN"
        return _Question(cols, domain, f"{c} IS NULL", f"{c} {op} ({values})", (c,))
    if kind == "ExpectColumnValuesToBeBetween":
        bounds = []
        if exp.min_value is not None:
            bounds.append(f"{c} {'>' if exp.strict_min else '>='} {_literal(exp.min_value)}")
        if exp.max_value is not None:
            bounds.append(f"{c} {'<' if exp.strict_max else '<='} {_literal(exp.max_value)}")
        return _Question(cols, domain, f"{c} IS NULL", f"NOT ({' AND '.join(bounds) or 'TRUE'})", (c,))
    raise ValueError(f"{kind}: no SQL for this expectation; add it to wattbench/validation._question")


def _rows_sql(con: Any, source_sql: str, params: dict[str, Any], table: str) -> tuple[str, set[str]]:
    """The checked rows as one SQL relation: NaN turned into NULL (as GX and pandas treat it: missing; the finite
    rules read `nonfinite_columns`, computed before), absent fill columns as NULL, and the derived columns. Returns
    the SQL and the names of its columns."""
    described = [(d[0], str(d[1])) for d in con.execute(f"SELECT * FROM ({source_sql}) LIMIT 0", params).description]
    names = {c for c, _ in described}
    cols = [
        f"CASE WHEN isnan({_q(c)}) THEN NULL ELSE {_q(c)} END AS {_q(c)}" if t in ("DOUBLE", "FLOAT") else _q(c)
        for c, t in described
        if not t.endswith("]")  # list columns: no rule reads them
    ]
    fill = [c for c in (*RANGES.get(table, {}), *_FILL.get(table, ())) if c not in names]
    cols += [f"NULL AS {_q(c)}" for c in dict.fromkeys(fill)]
    names |= set(fill)
    derived = {n: sql for n, (needs, sql) in DERIVED.get(table, {}).items() if set(needs) <= names}
    base = f"SELECT {', '.join(cols)} FROM ({source_sql})"
    extra = "".join(f", {sql} AS {_q(n)}" for n, sql in derived.items())
    return f"SELECT *{extra} FROM ({base})", names | set(derived)


def _judge(
    con: Any, source_sql: str, params: dict[str, Any], table: str, rules: list[Rule], overrides: dict[str, str]
) -> SuiteResult:
    """Every rule of a table on the rows `source_sql` selects: one SQL pass for the counts, one small query per
    rule that found breaking rows for its sample, and GX's verdict on those metrics."""
    rows_sql, present = _rows_sql(con, source_sql, params, table)
    aggregates: dict[str, str] = {"count(*)": "n"}

    def aggregate(expr: str) -> str:
        return aggregates.setdefault(expr, f"m{len(aggregates)}")

    plans = []
    for rule in rules:
        q = _question(rule.expectation)
        missing = [c for c in q.columns if c not in present]
        if missing:
            plans.append((rule, q, missing, None))
            continue
        kept = f"{q.domain} AND NOT ({q.skipped})" if q.skipped else q.domain
        plans.append(
            (
                rule,
                q,
                [],
                (
                    aggregate(f"count_if({q.domain})"),
                    aggregate(f"count_if({q.domain} AND ({q.skipped}))") if q.skipped else None,
                    aggregate(f"count_if({kept} AND ({q.unexpected}))"),
                    f"{kept} AND ({q.unexpected})",
                ),
            )
        )
    select = ", ".join(f"{expr} AS {alias}" for expr, alias in aggregates.items())
    counted = con.execute(f"WITH checked AS ({rows_sql}) SELECT {select} FROM checked", params).fetchone()
    value = dict(zip(aggregates.values(), counted, strict=True))
    if not value["n"]:
        return SuiteResult(table, [], 0)  # no rows: the caller says so (`has_rows`)
    outcomes = []
    for rule, q, missing, plan in plans:
        severity = overrides.get(rule.name, rule.severity)
        exp = rule.expectation
        column = getattr(exp, "column", None) or getattr(exp, "column_A", None)
        if missing:  # as GX says when a batch lacks the column: the rule cannot run, so it fails
            note = f"column {', '.join(missing)} is not in the {table} rows checked"
            outcomes.append(
                Outcome(rule.name, table, exp.expectation_type, column, severity, False, value["n"], None, [note])
            )
            continue
        rows, skipped, bad, breaking = plan
        sample: list[Any] = []
        if value[bad]:
            got = con.execute(
                f"WITH checked AS ({rows_sql}) SELECT {', '.join(q.values)} FROM checked WHERE {breaking} "
                f"LIMIT {SAMPLE_ROWS}",
                params,
            ).fetchall()
            sample = [tuple(r) if q.pair else r[0] for r in got]
        metric = type(exp).map_metric
        computed = {
            "table.row_count": value[rows],
            "column_values.nonnull.unexpected_count": value[skipped] if skipped else 0,
            f"{metric}.unexpected_count": value[bad],
            f"{metric}.unexpected_values": sample,
            f"{metric}.filtered_row_count": value[rows] - (value[skipped] if skipped else 0),
        }
        verdict = _gx_verdict(exp, computed)
        res = verdict.result or {}
        outcomes.append(
            Outcome(
                rule=rule.name,
                table=table,
                expectation=exp.expectation_type,
                column=column,
                severity=severity,
                success=bool(verdict.success),
                element_count=res.get("element_count"),
                unexpected_count=res.get("unexpected_count"),
                sample=_jsonable((res.get("partial_unexpected_list") or [])[:5]),
            )
        )
    return SuiteResult(table, outcomes, value["n"])


def _gx_verdict(exp: Any, computed: dict[str, Any]) -> Any:
    """GX's own verdict (mostly, vacuous truth, the result's shape) on metrics computed by the SQL: the metrics the
    expectation declares it depends on (`get_validation_dependencies`), under GX's own ids for them, handed to
    `metrics_validate`, the entry GX's validator itself calls with the metrics its execution engine computed."""
    needed = exp.get_validation_dependencies().metric_configurations
    return exp.metrics_validate({cfg.id: computed[name] for name, cfg in needed.items()})


def _no_rows(table: str, overrides: dict[str, str]) -> SuiteResult:
    rule = f"{table}.has_rows"
    outcome = Outcome(
        rule, table, "expect_table_row_count_to_be_between", None, overrides.get(rule, "error"), False, 0, 0
    )
    return SuiteResult(table, [outcome], 0)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def validate_table(
    table: str, df: pd.DataFrame, plan_validation: dict[str, Any] | None = None, sample_period_s: float = 0.1
) -> SuiteResult:
    """Run a table's suite on a DataFrame of its rows (rows handed in directly; the checks use `validate_run`).
    The frame goes through the same SQL as the warehouse's rows, in an in-memory DuckDB."""
    overrides = (plan_validation or {}).get("severity", {})
    if df.empty:
        return _no_rows(table, overrides)
    rules = suites(plan_validation, sample_period_s)[table]
    con = duckdb.connect()  # in memory, this call's own
    try:
        con.register("handed_in", df)
        described = [(d[0], str(d[1])) for d in con.execute("SELECT * FROM handed_in LIMIT 0").description]
        extra = ""
        if NONFINITE not in df.columns:  # NaN arrived as NULL: only +-Inf is told apart here
            extra = ", " + _nonfinite_sql([c for c, t in described if t in ("DOUBLE", "FLOAT")])
        return _judge(con, f"SELECT *{extra} FROM handed_in", {}, table, rules, overrides)
    finally:
        con.close()


@contextmanager
def _memory(con: Any, limit: str) -> Iterator[None]:
    before = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.execute(f"SET memory_limit = '{limit}'")  # DuckDB spills past it: a run of any size stays bounded
    try:
        yield
    finally:  # the default back exactly (the setting reads back rounded, e.g. '18.7 GiB'), else what was set
        con.execute("RESET memory_limit")
        if con.execute("SELECT current_setting('memory_limit')").fetchone()[0] != before:
            con.execute(f"SET memory_limit = '{before}'")


def validate_run(
    con: Any,
    table: str,
    run_id: str,
    plan_validation: dict[str, Any] | None = None,
    sample_period_s: float = 0.1,
) -> SuiteResult:
    """Run a table's suite on one run's rows where they are, in the warehouse (as the blocking checks do): every
    row judged in SQL, nothing but counts and samples leaves DuckDB."""
    overrides = (plan_validation or {}).get("severity", {})
    rules = suites(plan_validation, sample_period_s)[table]
    source, params = _run_rows_sql(con, table), {"run_id": run_id}
    kept = f"_wb_checked_{table}"
    with _memory(con, settings.memory_size(settings.VALIDATION_MEMORY, VALIDATION_MEMORY)):  # a size, nothing else
        try:
            if table in _FRAME_JOINS:  # a few rows joined to views that read whole tables: join once, not per query
                con.execute(f"CREATE OR REPLACE TEMP TABLE {kept} AS {source}", params)
                source, params = f"SELECT * FROM temp.{kept}", {}
            result = _judge(con, source, params, table, rules, overrides)
        finally:
            con.execute(f"DROP TABLE IF EXISTS temp.{kept}")
    return result if result.rows else _no_rows(table, overrides)


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
