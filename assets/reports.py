"""Stage 6: reports. Every figure comes from a .sql file in sql/ over this run's validated rows."""


from datetime import datetime, timezone

import dagster as dg
from dagster import AssetCheckExecutionContext, AssetExecutionContext
from dagster_duckdb import DuckDBResource

from assets.bench import STAGE_TABLES
from assets.common import GROUP, OWNERS, WRITER_POOL, run_id_of
from pipelines.resources import BenchPlan
from resources import reporting
from resources.warehouse import run_sql

STAGES = ["engine_builds", *STAGE_TABLES]


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"duckdb", "python"}, deps=STAGES)
def load_point_report(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Per load point: output tokens/s, requests/s, goodput at the SLO, TTFT/TPOT/ITL/E2E percentiles, tokens
    per joule, J per token, W per GPU, peak HBM and $ per 1M output tokens (sql/load_points.sql), with the
    throughput-latency, tokens-per-joule, power-trace and TTFT-CDF pictures."""
    run_id = run_id_of(context)
    with warehouse.get_connection() as con:
        table = run_sql(con, "load_points", {"run_id": run_id})
        full = con.execute("SELECT * FROM v_load_points WHERE run_id = ?", [run_id]).df()
        source = con.execute("SELECT source FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    label = source
    plots = {
        "throughput vs latency": reporting.plot_throughput_latency(full, label),
        "tokens per joule": reporting.plot_tokens_per_joule(full, label),
    }
    best = full.sort_values("output_tokens_per_j", ascending=False).head(1)
    meta = {
        "run_id": run_id, "source": source, "load_points": len(table),
        "table": dg.MetadataValue.md(reporting.markdown_table(table)),
        "plots": dg.MetadataValue.md("\n\n".join(reporting.md_image(p, n) for n, p in plots.items())),
    }
    if not best.empty and best["output_tokens_per_j"].notna().all():
        meta["best_output_tokens_per_j"] = float(best["output_tokens_per_j"].iloc[0])
        meta["best_tokens_per_j_at"] = str(best["load_point_id"].iloc[0])
    peak = full["output_tok_s"].max() if not full.empty else None
    if peak == peak and peak is not None:
        meta["peak_output_tok_s"] = float(peak)
    return dg.MaterializeResult(metadata=meta)


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"duckdb", "python"}, deps=STAGES)
def head_to_head(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """The head-to-head table the seed article announces: rows are measured figures (peak tokens/s, tokens per
    joule and $ per 1M tokens at the SLO, p99 TTFT under bursts, build and startup time, longest context,
    failures), columns are engines; every cell names the load point it came from (sql/head_to_head.sql)."""
    run_id = run_id_of(context)
    with warehouse.get_connection() as con:
        long = run_sql(con, "head_to_head", {"run_id": run_id})
    table = reporting.pivot_head_to_head(long)
    origin = long.dropna(subset=["load_point_id"])[["figure", "engine", "load_point_id"]]
    return dg.MaterializeResult(metadata={
        "run_id": run_id,
        "head_to_head": dg.MetadataValue.md(reporting.markdown_table(table, index=True)),
        "cell_origins": dg.MetadataValue.md(reporting.markdown_table(origin)),
    })


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"python"}, deps=[load_point_report, head_to_head], pool=WRITER_POOL)
def html_report(context: AssetExecutionContext, plan: BenchPlan, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """A self-contained HTML report (opens offline): the head-to-head table, pictures and every load point,
    marked EMULATED at the top when the emulator produced the numbers. Closes the run's row in `runs`."""
    bench_plan, _ = plan.load()
    run_id = run_id_of(context)
    with warehouse.get_connection() as con:
        long = run_sql(con, "head_to_head", {"run_id": run_id})
        table = run_sql(con, "load_points", {"run_id": run_id})
        full = con.execute("SELECT * FROM v_load_points WHERE run_id = ?", [run_id]).df()
        samples = con.execute(
            "SELECT deployment_id, gpu_uuid, t_ns, power_w FROM gpu_samples WHERE run_id = ? AND power_w IS NOT NULL",
            [run_id]).df()
        windows = con.execute(
            "SELECT deployment_id, load_point_id, window_start_ns, window_end_ns FROM load_runs WHERE run_id = ? "
            "AND window_start_ns IS NOT NULL", [run_id]).df()
        reqs = con.execute(
            "SELECT load_point_id, ttft_ms, in_window, error_kind FROM requests WHERE run_id = ?", [run_id]).df()
        source = con.execute("SELECT source FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
        con.execute("UPDATE runs SET finished_at = ?, status = 'succeeded' WHERE run_id = ?",
                    [datetime.now(timezone.utc).replace(tzinfo=None), run_id])
    plots = {
        "throughput vs latency": reporting.plot_throughput_latency(full, source),
        "tokens per joule vs concurrency": reporting.plot_tokens_per_joule(full, source),
        "power trace": reporting.plot_power_trace(samples, windows, source),
        "TTFT CDF": reporting.plot_ttft_cdf(reqs, source),
    }
    min_window = float(full["window_s"].min()) if not full.empty else None
    notes = reporting.summarize_notes(source, f"{bench_plan.name} ({plan.path})", bench_plan.prices.label, min_window)
    path = reporting.write_html(
        plan.run_dir(run_id) / "report.html", f"wattbench: {bench_plan.name}", source, run_id,
        reporting.pivot_head_to_head(long), table, plots, notes,
    )
    context.log.info(f"HTML report: {path}")
    return dg.MaterializeResult(metadata={
        "run_id": run_id, "source": source, "path": dg.MetadataValue.path(str(path)),
        "power_trace": dg.MetadataValue.md(reporting.md_image(plots["power trace"], "power trace")),
    })
