"""Blocking Great Expectations checks: one suite per stage table, run on this run's rows.

An error-level failure fails the check with ERROR severity, which stops the reports of this run (other runs
are untouched) and marks its benchmark 'blocked'; warn-level failures are recorded and shown but let the reports go
on. Every outcome also lands in the validation_results table, and each check's verdict in run_checks: when all
six have passed, the benchmark is 'complete' (assets/benchmark_run.py). Materialized alone (from the UI), a check
re-validates the partition's latest complete or blocked benchmark.
"""

import dagster as dg
from dagster import AssetCheckExecutionContext
from dagster_duckdb import DuckDBResource

from assets import benchmark_run
from assets.common import WRITER_POOL, warehouse_connection
from assets.partitions import step_partition
from resources.bench_plan import BenchPlan
from wattbench.plan import Plan
from wattbench.validation import outcome_rows, validate_run
from wattbench.warehouse import apply_schema

# asset -> tables its suite covers
CHECKED = {
    "engine_builds": ("engine_builds",),
    "deployments": ("deployments",),
    "load_runs": ("load_runs",),
    "requests": ("requests",),
    "gpu_samples": ("gpu_samples",),
    "server_metrics": ("server_metrics",),
}


def _make_check(asset: str, tables: tuple[str, ...]) -> dg.AssetChecksDefinition:
    check_name = f"gx_{asset}"

    @dg.asset_check(
        asset=asset,
        name=check_name,
        blocking=True,
        pool=WRITER_POOL,
        description=f"Great Expectations suite for {', '.join(tables)} (this run's rows); error-level failures "
        "block the reports.",
    )
    def _check(context: AssetCheckExecutionContext, plan: BenchPlan, warehouse: DuckDBResource) -> dg.AssetCheckResult:
        partition = step_partition(context)  # read once per step
        run_id = benchmark_run.benchmark_for_step(warehouse, context, "check", partition=partition)
        with benchmark_run.ends_with_step(lambda: warehouse_connection(warehouse), context, partition=partition):
            return _validate(context, plan.load(partition)[0], warehouse, run_id)

    def _validate(
        context: AssetCheckExecutionContext, bench_plan: Plan, warehouse: DuckDBResource, run_id: str
    ) -> dg.AssetCheckResult:
        pv = bench_plan.validation.model_dump()
        results = []
        with warehouse_connection(warehouse) as con:
            for table in tables:
                # judged in DuckDB where the rows are: a run of millions of requests never becomes a DataFrame
                result = validate_run(con, table, run_id, pv, sample_period_s=1.0 / bench_plan.sampler_hz)
                if table == "server_metrics" and not result.rows:
                    continue  # engines without /metrics (e.g. transformers serve) have none; nothing to judge
                results.append(result)
            apply_schema(con)
            con.execute("DELETE FROM validation_results WHERE run_id = ? AND check_name = ?", [run_id, check_name])
            for result in results:
                rows = outcome_rows(run_id, check_name, result)
                if rows:
                    con.executemany(
                        "INSERT INTO validation_results (run_id, check_name, table_name, expectation, column_name, "
                        "severity, success, element_count, unexpected_count, sample) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [list(r.values()) for r in rows],
                    )
            errors = [o for r in results for o in r.errors]
            warnings = [o for r in results for o in r.warnings]
            severity = "ERROR" if errors else "WARN" if warnings else None
            status = benchmark_run.record_check(
                con,
                run_id,
                check_name,
                not errors and not warnings,
                severity,
                benchmark_run.dagster_run_id(context),
                BLOCKING_CHECKS,
            )
        metadata = {
            "run_id": run_id,
            "expectations": sum(len(r.outcomes) for r in results),
            "failed_error": len(errors),
            "failed_warn": len(warnings),
            "rows_checked": sum(r.rows for r in results),
            "results": dg.MetadataValue.md("\n\n".join(r.markdown() for r in results) or "no rows to check"),
        }
        if status:
            metadata["benchmark_status"] = status
        if errors:
            metadata["failed"] = ", ".join(f"{o.rule} ({o.unexpected_count} rows)" for o in errors)
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, metadata=metadata)
        if warnings:
            metadata["warnings"] = ", ".join(f"{o.rule} ({o.unexpected_count} rows)" for o in warnings)
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=metadata)
        return dg.AssetCheckResult(passed=True, metadata=metadata)

    return _check


BLOCKING_CHECKS = tuple(f"gx_{asset}" for asset in CHECKED)
stage_checks = [_make_check(asset, tables) for asset, tables in CHECKED.items()]
