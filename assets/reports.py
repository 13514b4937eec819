"""Stage 6: reports. Every figure comes from a .sql file in sql/ over one benchmark's validated rows (docs/REPORTS.md):
the benchmark of this Dagster run, or, for a report materialized alone, its partition's latest complete benchmark
(assets/benchmark_run.py); with none, the report fails with one line instead of showing an empty table.

Every report asset depends on every stage asset, so the blocking Great Expectations checks gate it.
`REPORT_ASSETS` is the list pipelines/definitions.py wires in, made from the report registry
(wattbench/report/specs.py): the reports built here by their own functions, and `report_asset(spec)` for every
table report, then `html_report`, which waits for all of them.
"""

import html
from typing import Any

import dagster as dg
import pandas as pd
from dagster import AssetExecutionContext
from dagster_duckdb import DuckDBResource

from assets import benchmark_run
from assets.bench import STAGE_TABLES
from assets.common import (
    BENCH_PARTITIONS,
    GROUP,
    OWNERS,
    TABLE_KINDS,
    WRITER_POOL,
    warehouse_connection,
)
from assets.partitions import partition_metadata, step_partition
from assets.table_meta import frame_metadata
from resources.bench_plan import BenchPlan
from wattbench.report import pictures, render
from wattbench.report.rows import capacity_params
from wattbench.report.specs import REPORTS, ReportSpec
from wattbench.warehouse import run_sql

STAGES = ["engine_builds", *STAGE_TABLES]


def _num(value: Any) -> float | None:
    """A finite float, or None (NULL / NaN are not figures)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _floats(meta: dict[str, Any], figures: dict[str, Any]) -> None:
    """Add the finite figures as float metadata (the Dagster UI charts them across materializations)."""
    for key, value in figures.items():
        f = _num(value)
        if f is not None:
            meta[key] = dg.MetadataValue.float(f)


def _run_frames(con, run_id: str) -> dict[str, pd.DataFrame]:
    """What the pictures and tables are drawn from: the point summaries with intervals, power samples, windows,
    requests (render.report_frames), each load run (v_load_points) and every figure in long form."""
    frames = render.report_frames(con, run_id)
    frames["runs"] = con.execute("SELECT * FROM v_load_points WHERE run_id = ?", [run_id]).df()
    frames["figures"] = run_sql(con, "point_figures", {"run_id": run_id})
    return frames


def _load_point_plots(frames: dict[str, pd.DataFrame], label: str) -> dict[str, bytes]:
    return render.pictures(frames, label)


def _source(con, run_id: str) -> str:
    row = con.execute("SELECT source FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return row[0] if row else "unknown"


@dg.asset(
    group_name=GROUP, owners=OWNERS, kinds=TABLE_KINDS, deps=STAGES, partitions_def=BENCH_PARTITIONS, pool=WRITER_POOL
)  # DuckDBResource opens read-write, which takes the file lock
def load_point_report(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Per load point, its repeats summarised with 95% intervals: output tokens/s, requests/s, goodput at the SLO,
    tokens per joule (total and above idle), power from the energy counter (deployment, above idle, per GPU),
    $ per 1M output tokens and the energy cost line, TTFT/TPOT/E2E percentiles (sql/point_figures.sql and
    sql/load_points.sql over v_point_figures), with the throughput-latency (Pareto frontier per config),
    tokens-per-joule, power-trace and TTFT/E2E CDF pictures; every repeat in `load_runs` (sql/load_runs.sql)."""
    partition = step_partition(context)  # read once per step
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
    with warehouse_connection(warehouse) as con:
        per_repeat = run_sql(con, "load_runs", {"run_id": run_id})
        frames = _run_frames(con, run_id)
        source = _source(con, run_id)
    full = frames["runs"]
    summary = render.point_summary_table(frames["figures"], frames["points"])
    plots = _load_point_plots(frames, source)
    meta: dict[str, Any] = {
        "run_id": run_id,
        "source": source,
        **partition_metadata(partition),
        "load_points": len(summary),
        "load_runs": len(per_repeat),
        "dagster/row_count": dg.MetadataValue.int(len(summary)),
        "load_points_meeting_slo": int(full["meets_slo_p99"].fillna(False).sum()) if not full.empty else 0,
        "summary": frame_metadata(summary),
        "intervals": dg.MetadataValue.md(
            "\n".join(f"- {m}" for m in render.interval_methods(frames["figures"])) or "_no figures_"
        ),
        "every_repeat": dg.MetadataValue.md(render.markdown_table(per_repeat)),
        "plots": dg.MetadataValue.md("\n\n".join(render.md_image(p, n) for n, p in plots.items())),
    }
    if not full.empty:
        best = full.dropna(subset=["output_tokens_per_j"]).sort_values("output_tokens_per_j", ascending=False).head(1)
        if not best.empty:
            meta["best_tokens_per_j_at"] = str(best["load_point_id"].iloc[0])
        slo = full[full["meets_slo_p99"].fillna(False).astype(bool)]
        _floats(
            meta,
            {
                "best_output_tokens_per_j": full["output_tokens_per_j"].max(),
                "best_output_tokens_per_j_above_idle": full["output_tokens_per_j_above_idle"].max(),
                "peak_output_tok_s": full["output_tok_s"].max(),
                "best_usd_per_1m_output_tokens_at_slo": slo["usd_per_1m_output_tokens"].min()
                if not slo.empty
                else None,
                "max_capped_share": full["capped_share"].max(),
            },
        )
    return dg.MaterializeResult(metadata=meta)


@dg.asset(
    group_name=GROUP, owners=OWNERS, kinds=TABLE_KINDS, deps=STAGES, partitions_def=BENCH_PARTITIONS, pool=WRITER_POOL
)  # DuckDBResource opens read-write, which takes the file lock
def head_to_head(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """The head-to-head table the seed article announces and leaves empty: rows are capabilities and measured
    figures (engine and version, peak tokens/s, goodput, tokens per joule and $ per 1M tokens at the SLO, p99
    TTFT under a surge, build time, hardware lock, startup time, longest context served, behaviour on failure),
    columns are engines; every cell names the run and load point it came from (sql/head_to_head.sql)."""
    partition = step_partition(context)  # read once per step
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
    with warehouse_connection(warehouse) as con:
        long = run_sql(con, "head_to_head", {"run_id": run_id})
    table = render.pivot_head_to_head(long)
    origin = long.dropna(subset=["load_point_id"])[["figure", "engine", "value", "run_id", "load_point_id"]]
    meta: dict[str, Any] = {
        "run_id": run_id,
        **partition_metadata(partition),
        "dagster/row_count": dg.MetadataValue.int(len(table)),
        "head_to_head": dg.MetadataValue.md(render.markdown_table(table, index=True)),
        "head_to_head_table": frame_metadata(table),
        "cell_origins": dg.MetadataValue.md(render.markdown_table(origin)),
    }
    keys = {
        3: "peak_output_tok_s",
        5: "tokens_per_j_at_slo",
        6: "usd_per_1m_output_tokens_at_slo",
        8: "surge_ttft_p99_ms",
    }
    for _, row in long[long["ord"].isin(list(keys))].iterrows():  # a cell reads 'value [lo, hi]': its value
        value = str(row["value"]).split(" ")[0] if row["value"] is not None else None
        _floats(meta, {f"{row['engine']}/{keys[int(row['ord'])]}": value})
    return dg.MaterializeResult(metadata=meta)


@dg.asset(
    group_name=GROUP, owners=OWNERS, kinds=TABLE_KINDS, deps=STAGES, partitions_def=BENCH_PARTITIONS, pool=WRITER_POOL
)  # DuckDBResource opens read-write, which takes the file lock
def slo_capacity(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """The SLO capacity of every capacity search of the plan (a workload with `search:`): per engine config, the
    highest load meeting the plan's SLO with its 95% interval, the binding bound and what limits it, and the figures
    at that load with their intervals over its repeats: tokens/s, tokens per joule, joules per request, $ per 1M
    output tokens, W; probes and window-seconds used (table slo_capacity, made again here from searches and the
    point figures; sql/slo_capacity.sql), with the frontier pictures (tok/J against TTFT p99 and TPOT p99, tok/s per
    GPU against tok/s per user) and the capacity marked on them."""
    from wattbench.warehouse import refresh_kept_views

    partition = step_partition(context)  # read once per step
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
    with warehouse_connection(warehouse) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            refresh_kept_views(con, run_id, ("slo_capacity",))
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        table = run_sql(con, "slo_capacity", {"run_id": run_id})
        frames = render.report_frames(con, run_id)
        source = _source(con, run_id)
    picture = pictures.plot_frontiers(frames["points"], frames["capacity"], source, render.slo_of(frames))
    meta: dict[str, Any] = {
        "run_id": run_id,
        "source": source,
        **partition_metadata(partition),
        "dagster/row_count": dg.MetadataValue.int(len(table)),
        "searches": dg.MetadataValue.int(len(table)),
        "slo_capacity": frame_metadata(table)
        if not table.empty
        else dg.MetadataValue.md("_no capacity search in this benchmark: add a workload with `search:` to the plan_"),
        "answers": dg.MetadataValue.md(
            "\n".join(f"- **{r['engine']}** ({r['workload']}): {r['answer']}" for _, r in table.iterrows()) or "_none_"
        ),
        "frontiers": dg.MetadataValue.md(render.md_image(picture, "frontiers")),
    }
    for _, row in table.iterrows():
        _floats(
            meta,
            {
                f"{row['engine']}/{row['workload']}/capacity": row["capacity"],
                f"{row['engine']}/{row['workload']}/capacity_lo": row["capacity_lo"],
                f"{row['engine']}/{row['workload']}/capacity_hi": row["capacity_hi"],
                f"{row['engine']}/{row['workload']}/probes": row["probes"],
                f"{row['engine']}/{row['workload']}/window_s": row["window_s"],
            },
        )
    return dg.MaterializeResult(metadata=meta)


def _capacity_frames(con, run_id: str, params: dict[str, Any] | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    if params is None:
        return pd.DataFrame(), pd.DataFrame()
    full = {"run_id": run_id, **params}
    return run_sql(con, "capacity_plan", full), run_sql(con, "hybrid_plan", full)


_NO_PROFILE = (
    "no traffic profile: add a `capacity:` section to the plan (steady_qps, peak_qps, "
    "burst_hours_per_day, input_tokens, output_tokens) to size GPUs and cost"
)


def _profile_text(params: dict[str, Any]) -> str:
    lengths = f"{params['input_tokens'] or 'any'}/{params['output_tokens'] or 'any'} tokens in/out"
    elastic = f", elastic GPU-hour ${params['elastic_gpu_hour_usd']:g}" if params.get("elastic_gpu_hour_usd") else ""
    return (
        f"steady {params['steady_qps']:g} req/s, peak {params['peak_qps']:g} req/s for "
        f"{params['burst_hours_per_day']:g} h/day, {lengths}{elastic}"
    )


@dg.asset(
    group_name=GROUP,
    owners=OWNERS,
    kinds=TABLE_KINDS,
    deps=[*STAGES, slo_capacity],
    partitions_def=BENCH_PARTITIONS,
    pool=WRITER_POOL,
)  # DuckDBResource opens read-write, which takes the file lock
def capacity_plan(context: AssetExecutionContext, plan: BenchPlan, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Capacity plan for the plan's traffic profile (`capacity:`) at its SLO: the fewest GPUs per engine config
    and their monthly cost (sql/capacity_plan.sql; sized on the SLO capacity search's conservative bound where the
    plan has one, slo_capacity), and the seed article's hybrid topology (steady baseline on one engine's pool, bursts
    on another's elastic pool) against each engine alone (sql/hybrid_plan.sql). NULL with a reason where no load
    point meets the SLO; the assumptions are listed with the tables."""
    partition = step_partition(context)  # read once per step
    bench_plan, _ = plan.load(partition)
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
    params = capacity_params(bench_plan.capacity)
    with warehouse_connection(warehouse) as con:
        per_config, topologies = _capacity_frames(con, run_id, params)
        source = _source(con, run_id)
    meta: dict[str, Any] = {"run_id": run_id, "source": source, **partition_metadata(partition)}
    if params is None:
        meta["capacity_plan"] = dg.MetadataValue.md(f"_{_NO_PROFILE}_")
        return dg.MaterializeResult(metadata=meta)
    picture = pictures.plot_capacity(topologies, source, note=_topology_note(topologies))
    meta.update(
        {
            "traffic_profile": _profile_text(params),
            "per_engine_config": dg.MetadataValue.md(render.markdown_table(per_config)),
            "topologies": dg.MetadataValue.md(render.markdown_table(topologies)),
            "assumptions": dg.MetadataValue.md("\n".join(f"- {a}" for a in render.CAPACITY_ASSUMPTIONS)),
            "picture": dg.MetadataValue.md(render.md_image(picture, "monthly cost per topology")),
        }
    )
    for _, row in per_config.iterrows():
        _floats(
            meta,
            {
                f"{row['engine']}/peak_gpus": row["peak_gpus"],
                f"{row['engine']}/monthly_gpu_usd": row["monthly_gpu_usd"],
            },
        )
    sized = topologies.dropna(subset=["monthly_gpu_usd"]) if not topologies.empty else topologies
    if not sized.empty:
        pick = sized[sized["pick"].str.contains("rule pick")]
        alone = sized[sized["topology"].str.endswith("always on for the peak")]
        _floats(
            meta,
            {
                "hybrid_monthly_gpu_usd": pick["monthly_gpu_usd"].iloc[0] if not pick.empty else None,
                "best_single_pool_monthly_gpu_usd": alone["monthly_gpu_usd"].min() if not alone.empty else None,
                "cheapest_monthly_gpu_usd": sized["monthly_gpu_usd"].min(),
            },
        )
        if not pick.empty:
            meta["hybrid"] = str(pick["topology"].iloc[0])
    return dg.MaterializeResult(metadata=meta)


def _topology_note(topologies: pd.DataFrame) -> str | None:
    if topologies.empty or "note" not in topologies:
        return None
    notes = topologies["note"].dropna()
    return str(notes.iloc[0]) if not notes.empty else None


@dg.asset(
    group_name=GROUP,
    owners=OWNERS,
    kinds=TABLE_KINDS,
    deps=STAGES,
    partitions_def=BENCH_PARTITIONS,
    pool=WRITER_POOL,
    check_specs=[
        dg.AssetCheckSpec(
            "no_regressions",
            asset="regressions",
            blocking=False,
            description="WARN when a load point moved beyond its noise band in the worse "
            "direction against the previous run of the same point.",
        )
    ],
)
def regressions(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """This run's load points against the previous run of the same point (same model, engine, config,
    precision, tp, GPU, source, workload and load point): relative change per metric, flagged REGRESSION or
    improvement beyond its noise band: from the two runs' 95% intervals where both have them (a change only when
    they do not overlap), else max(3 x the robust relative stdev (1.4826 x MAD / |median|) over earlier runs of the
    point, 5%)
    (sql/regressions.sql). The check `no_regressions` warns (never blocks) when something regressed."""
    partition = step_partition(context)  # read once per step
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
    with warehouse_connection(warehouse) as con:
        table = run_sql(con, "regressions", {"run_id": run_id})
    counts = table["flag"].value_counts().to_dict() if not table.empty else {}
    flagged = table[table["flag"].isin(["REGRESSION", "improvement"])]
    compared = int((table["flag"] != "no baseline").sum()) if not table.empty else 0
    n_reg = int(counts.get("REGRESSION", 0))
    meta: dict[str, Any] = {
        "run_id": run_id,
        **partition_metadata(partition),
        "dagster/row_count": dg.MetadataValue.int(len(table)),
        "rule": (
            "change = (this - previous) / |previous|; a change beyond the band only when the two runs' 95% "
            "intervals do not overlap (both repeated), else band = max(3 x robust relative stdev (1.4826 x "
            "MAD / |median|) over earlier runs of the point, 5%); column band_from says which"
        ),
        "regressions": dg.MetadataValue.int(n_reg),
        "improvements": dg.MetadataValue.int(int(counts.get("improvement", 0))),
        "compared_figures": dg.MetadataValue.int(compared),
        "no_baseline_figures": dg.MetadataValue.int(int(counts.get("no baseline", 0))),
        "flagged": dg.MetadataValue.md(
            render.markdown_table(flagged)
            if not flagged.empty
            else (
                "_nothing beyond the noise band_"
                if compared
                else "_no earlier run of these load points to compare with_"
            )
        ),
    }
    previous = table["previous_run_id"].dropna().unique().tolist() if not table.empty else []
    if previous:
        meta["previous_runs"] = ", ".join(sorted(previous))
    worst = flagged[flagged["flag"] == "REGRESSION"]
    check = dg.AssetCheckResult(
        check_name="no_regressions",
        passed=n_reg == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "regressions": n_reg,
            "worst": dg.MetadataValue.md(render.markdown_table(worst.head(20)) if n_reg else "_none_"),
        },
    )
    return dg.MaterializeResult(metadata=meta, check_results=[check])


def report_asset(spec: ReportSpec) -> dg.AssetsDefinition:
    """The Dagster asset of a table report of the registry: its query over the benchmark's validated rows, its
    table as Dagster table metadata, each row's `figures` as float metadata (`<key columns>/<column>`)."""

    @dg.asset(
        name=spec.name,
        description=spec.description,
        group_name=GROUP,
        owners=OWNERS,
        kinds=TABLE_KINDS,
        deps=STAGES,
        partitions_def=BENCH_PARTITIONS,
        pool=WRITER_POOL,
    )  # DuckDBResource opens read-write, which takes the file lock
    def table_report(context: AssetExecutionContext, warehouse: DuckDBResource) -> dg.MaterializeResult:
        partition = step_partition(context)  # read once per step
        run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
        with warehouse_connection(warehouse) as con:
            table = run_sql(con, spec.sql, spec.params(run_id))
            source = _source(con, run_id)
        meta: dict[str, Any] = {
            "run_id": run_id,
            "source": source,
            **partition_metadata(partition),
            "dagster/row_count": dg.MetadataValue.int(len(table)),
            spec.name: frame_metadata(table) if not table.empty else dg.MetadataValue.md(f"_{spec.empty}_"),
        }
        for _, row in table.iterrows():
            prefix = "/".join(str(row[k]) for k in spec.key)
            _floats(meta, {f"{prefix}/{c}" if prefix else c: row[c] for c in spec.figures})
        return dg.MaterializeResult(metadata=meta)

    return table_report


def table_reports(con, run_id: str) -> list[tuple[ReportSpec, pd.DataFrame]]:
    """Every table report of the registry that the HTML report shows, with its table for the run."""
    return [(s, run_sql(con, s.sql, s.params(run_id))) for s in REPORTS if not s.bespoke and s.html]


def _table_sections(tables: list[tuple[ReportSpec, pd.DataFrame]]) -> list[tuple[str, str]]:
    return [
        (
            s.title,
            f"<p class='meta'>{html.escape(s.description)}</p>" + render.html_table(table, empty=s.empty),
        )
        for s, table in tables
    ]


def _html_sections(
    long: pd.DataFrame,
    frames: dict[str, pd.DataFrame],
    contrasts: pd.DataFrame,
    params: dict[str, Any] | None,
    per_config: pd.DataFrame,
    topologies: pd.DataFrame,
    regress: pd.DataFrame,
    run_id: str,
    searched: pd.DataFrame | None = None,
    tables: list[tuple[ReportSpec, pd.DataFrame]] = (),
) -> list[tuple[str, str]]:
    h2h = render.pivot_head_to_head(long)
    methods = render.interval_methods(frames["figures"])
    scopes = frames.get("scopes")
    scope_text = "; ".join(scopes["scope"]) if scopes is not None and not scopes.empty else "none"
    how = (
        "<p class='meta'>[lo, hi]: the 95% interval, for what another server start of the engine gives: every figure "
        "is the mean of the repeats' values (a latency percentile: of each repeat's percentile; $ per 1M tokens: the "
        "price over the mean throughput), its interval from the spread between server starts and within them on the "
        "log scale (docs/MEASUREMENT.md, 'Server starts, repeats and intervals'); a figure of one start with no "
        "between-start prior says 'within one server start' and sizes nothing; none from one repeat, nor for a "
        "percentile with fewer than ten requests beyond it in a repeat. <b>Scope</b>: "
        + html.escape(scope_text)
        + ". Intervals here: "
        + html.escape("; ".join(methods) or "none")
        + ".</p>"
    )
    sections = [
        (
            "Head to head",
            (
                f"<p class='meta'>every cell from run {html.escape(run_id)}, a point's repeats summarised: "
                "value [95% interval] @ the load point (workload:point) it came from. Tokens per joule above idle "
                "(the deployment's idle power with the model loaded subtracted) is the row after the total. "
                f"Intervals: {html.escape(scope_text)}.</p>" + render.html_table(h2h, index=True)
            ),
        )
    ]
    if searched is not None and not searched.empty:
        answers = "".join(
            f"<li><b>{html.escape(str(r['engine']))}</b> ({html.escape(str(r['workload']))}): "
            f"{html.escape(str(r['answer']))}</li>"
            for _, r in searched.iterrows()
        )
        sections.append(
            (
                "SLO capacity",
                (
                    "<p class='meta'>the highest load meeting the SLO per engine config (a capacity search: bracket, "
                    "bisect to its tolerance, then repeated windows at the load found and one step below); capacity_lo"
                    "/hi: its 95% interval; the figures at it carry their 95% intervals over those repeats. The "
                    "frontier pictures below ring it. sql/slo_capacity.sql.</p>"
                    f"<ul>{answers}</ul>" + render.html_table(searched.drop(columns=["answer"]))
                ),
            )
        )
    summary = render.point_summary_table(frames["figures"], frames["points"])
    sections.append(
        (
            "Every load point, summarised over its repeats",
            (
                how
                + "<p class='meta'>Total and above-idle side by side: tokens per joule, total = output tokens / GPU "
                "energy (counter); above idle = output tokens / (that energy - idle W x window). Every W is "
                "energy-counter energy over the window.</p>" + render.html_table(summary, empty="no load points")
            ),
        )
    )
    headline = render.contrasts_table(contrasts, frames["points"], headlines=True)
    every = render.contrasts_table(contrasts, frames["points"], headlines=False)
    sections.append(
        (
            "Engines compared at each point",
            (
                "<p class='meta'>ratio = first engine / second, with the 95% interval of that ratio where repeats pair "
                "up (the same repeat of a point ran back to back on both engines: a t interval on the log ratios; "
                "latency percentiles: each repeat's own). A difference is called only when that interval excludes 1, "
                "otherwise 'no significant difference'; without an interval the row says it was not tested. "
                "sql/engine_contrasts.sql.</p>"
                + render.html_table(headline, empty="one engine config, or no point measured on two engines")
                + (
                    f"<details><summary>every figure ({len(every)} rows)</summary>{render.html_table(every)}</details>"
                    if len(every) > len(headline)
                    else ""
                )
            ),
        )
    )
    if params is None:
        sections.append(("Capacity plan", f"<p>{_NO_PROFILE}.</p>"))
    else:
        assumptions = "".join(f"<li>{a}</li>" for a in render.CAPACITY_ASSUMPTIONS)
        sections.append(
            (
                "Capacity plan",
                (
                    f"<p>Traffic profile: {_profile_text(params)}; SLO and prices from the plan.</p>"
                    + render.html_table(per_config, empty="no engine config")
                    + "<h3>Hybrid topology against each engine alone</h3>"
                    + render.html_table(topologies, empty="no topology")
                    + f"<p>Assumptions:</p><ul>{assumptions}</ul>"
                ),
            )
        )
    if regress.empty:
        body = "<p>no load points</p>"
    else:
        flagged = regress[regress["flag"].isin(["REGRESSION", "improvement"])]
        compared = int((regress["flag"] != "no baseline").sum())
        counts = regress["flag"].value_counts().to_dict()
        body = (
            f"<p>{counts.get('REGRESSION', 0)} regression(s), {counts.get('improvement', 0)} improvement(s) "
            f"among {compared} compared figures; rule: change = (this - previous) / |previous|, flagged when "
            "the two runs' 95% intervals do not overlap (both repeated), else beyond max(3 x robust relative "
            "stdev (1.4826 x MAD / |median|) over earlier runs of the point, 5%); band_from says which.</p>"
            + (
                render.html_table(flagged)
                if not flagged.empty
                else "<p>nothing beyond the noise band</p>"
                if compared
                else "<p>no earlier run of these load points to compare with</p>"
            )
        )
    sections.append(("Against the previous run", body))
    sections += _table_sections(list(tables))
    sections.append(
        (
            "Every load run (each repeat)",
            (
                "<p class='meta'>sql/load_runs.sql: one row per repeat of each point; trace W and capped shares come "
                "from the sampled power trace (diagnosis), every other W from the energy counter.</p>"
                + render.html_table(frames["per_repeat"], empty="no load runs")
            ),
        )
    )
    return sections


@dg.asset(
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python", "duckdb", "html"},
    partitions_def=BENCH_PARTITIONS,
    deps=[s.name for s in REPORTS],  # every report of the registry
    pool=WRITER_POOL,
)
def html_report(context: AssetExecutionContext, plan: BenchPlan, warehouse: DuckDBResource) -> dg.MaterializeResult:
    """A self-contained HTML report that opens offline (inline CSS; Vega-Lite charts with their JavaScript inlined;
    PNGs as data URIs; nothing fetched): the head-to-head table, every point summarised over its repeats with 95%
    intervals (above-idle energy next to the total), the engines compared at each point, the capacity plan and
    hybrid topology, regressions against the previous run, interactive charts (power trace with zoom, TTFT/E2E
    CDFs with hover, throughput against latency and tokens per joule against load with error bars), the same
    pictures as PNG, and every load run; marked EMULATED at the top when the emulator produced the numbers.
    Written into the benchmark's run folder (materialized alone: the partition's latest complete benchmark's)."""
    partition = step_partition(context)  # read once per step
    bench_plan, _ = plan.load(partition)
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "report", partition=partition)
    params = capacity_params(bench_plan.capacity)
    with warehouse_connection(warehouse) as con:
        long = run_sql(con, "head_to_head", {"run_id": run_id})
        frames = _run_frames(con, run_id)
        frames["per_repeat"] = run_sql(con, "load_runs", {"run_id": run_id})
        frames["scopes"] = run_sql(con, "interval_scopes", {"run_id": run_id})  # what each engine's intervals hold
        contrasts = run_sql(con, "engine_contrasts", {"run_id": run_id})
        per_config, topologies = _capacity_frames(con, run_id, params)
        regress = run_sql(con, "regressions", {"run_id": run_id})
        searched = run_sql(con, "slo_capacity", {"run_id": run_id})
        tables = table_reports(con, run_id)
        source = _source(con, run_id)
    plots = _load_point_plots(frames, source)
    plots["capacity plan"] = pictures.plot_capacity(
        topologies, source, note=_NO_PROFILE if params is None else _topology_note(topologies)
    )
    interactive = render.interactive_charts(frames, source)
    full = frames["runs"]
    min_window = float(full["window_s"].min()) if not full.empty else None
    notes = render.summarize_notes(
        source, f"{bench_plan.name} ({plan.plan_path(partition)})", bench_plan.prices.label, min_window
    )
    path = render.write_html(
        plan.run_dir(run_id) / "report.html",
        f"wattbench: {bench_plan.name}",
        source,
        run_id,
        _html_sections(long, frames, contrasts, params, per_config, topologies, regress, run_id, searched, tables),
        plots,
        notes,
        interactive=interactive,
    )
    context.log.info(f"HTML report: {path}")
    meta: dict[str, Any] = {
        "run_id": run_id,
        "source": source,
        **partition_metadata(partition),
        "path": dg.MetadataValue.path(str(path)),
        "pictures": dg.MetadataValue.int(len(plots)),
        "interactive_charts": dg.MetadataValue.int(sum(spec is not None for spec in interactive.values())),
        "load_points": dg.MetadataValue.int(len(frames["points"])),
        "head_to_head": dg.MetadataValue.md(render.markdown_table(render.pivot_head_to_head(long), index=True)),
        "power_trace": dg.MetadataValue.md(render.md_image(plots["power trace"], "power trace")),
        "throughput_vs_latency": dg.MetadataValue.md(
            render.md_image(plots["throughput vs latency"], "throughput vs latency")
        ),
    }
    if min_window is not None:
        meta["shortest_window_s"] = dg.MetadataValue.float(min_window)
    if not full.empty:
        _floats(
            meta,
            {
                "peak_output_tok_s": full["output_tok_s"].max(),
                "best_output_tokens_per_j": full["output_tokens_per_j"].max(),
            },
        )
    return dg.MaterializeResult(metadata=meta)


# The reports built above by their own functions; every other report of the registry is a table report.
BESPOKE = {
    a.key.to_user_string(): a for a in (load_point_report, head_to_head, slo_capacity, capacity_plan, regressions)
}
# What pipelines/definitions.py wires in: ALL_ASSETS = [engine_builds, bench, *REPORT_ASSETS]
REPORT_ASSETS = [BESPOKE[s.name] if s.bespoke else report_asset(s) for s in REPORTS] + [html_report]
