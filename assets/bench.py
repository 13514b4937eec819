"""Stages 2-5: deployments, load runs with their requests, GPU telemetry and server metrics.

These stages happen together on the GPU node: the engine must be up while load runs and the sampler and the
/metrics scraper watch it. So one Dagster step launches the bench agent through Pipes (a subprocess here,
a pod on Kubernetes), the agent writes a result bundle, and the step ingests the bundle in one transaction
and materializes each stage table as its own asset, each gated by its own blocking check.
"""

import secrets
import sys
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext
from dagster_duckdb import DuckDBResource

from assets import benchmark_run
from assets.common import (
    BENCH_PARTITIONS,
    GPU_KINDS,
    GROUP,
    OWNERS,
    WRITER_POOL,
    warehouse_connection,
)
from assets.partitions import Partition, partition_metadata, step_partition
from assets.table_meta import table_metadata
from resources.bench_plan import BenchPlan
from wattbench.plan import agent_spec
from wattbench.warehouse import apply_schema, ingest_bundle
from wattbench_agent.procs import RUN_TOKEN_ENV

STAGE_TABLES = {
    "deployments": (
        "engine_builds",
        "Engine servers started (or attached): startup time, HBM after load, idle power "
        "before and after, versions, telemetry source; failed starts are rows with their kind.",
    ),
    "load_runs": (
        "deployments",
        "One row per load point: steady-state window, achieved vs requested load, send "
        "lateness, completed/failed, output tokens and GPU energy (counter) over the window.",
    ),
    "requests": (
        "load_runs",
        "One row per request sent: TTFT, E2E, TPOT, every content event's time and tokens, "
        "token counts and where they came from, finish reason, HTTP status, error kind.",
    ),
    "gpu_samples": (
        "load_runs",
        "GPU telemetry (NVML, or the emulator's model for emulated engines) at the plan's "
        "sample rate, plus energy-counter readings at every window boundary (energy_windows).",
    ),
    "server_metrics": (
        "load_runs",
        "Engine /metrics scrapes during the run: running and waiting requests, KV-cache "
        "use, preemptions, token counters.",
    ),
}


def _stage_metadata(con, table: str, run_id: str) -> dict[str, Any]:
    rows = con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchone()[0]
    meta: dict[str, Any] = {
        "run_id": run_id,
        "rows": dg.MetadataValue.int(rows),
        "dagster/row_count": dg.MetadataValue.int(rows),
        **table_metadata(con, table),
    }
    if table == "load_runs":
        figures = con.execute(
            """SELECT sum(completed), sum(failed), min(window_s), sum(output_tokens_in_window), sum(energy_j),
                      max(window_s), sum(window_s)
               FROM load_runs WHERE run_id = ?""",
            [run_id],
        ).fetchone()
        meta.update(
            {
                "completed_requests": figures[0] or 0,
                "failed_requests": figures[1] or 0,
                "shortest_window_s": float(figures[2]) if figures[2] is not None else None,
                "longest_window_s": float(figures[5]) if figures[5] is not None else None,
                "total_window_s": float(figures[6]) if figures[6] is not None else None,
                "output_tokens_in_windows": int(figures[3] or 0),
                "energy_in_windows_j": float(figures[4]) if figures[4] is not None else None,
            }
        )
    elif table == "deployments":
        healthy, failed = con.execute(
            "SELECT count(*) FILTER (WHERE status = 'healthy'), count(*) FILTER (WHERE status <> 'healthy') "
            "FROM deployments WHERE run_id = ?",
            [run_id],
        ).fetchone()
        meta.update({"healthy": healthy, "failed": failed})
    elif table == "gpu_samples":
        gpus, mean_w, peak_w, span_ns = con.execute(
            "SELECT count(DISTINCT gpu_uuid), avg(power_w), max(power_w), max(t_ns) - min(t_ns) FROM gpu_samples "
            "WHERE run_id = ?",
            [run_id],
        ).fetchone()
        meta.update(
            {
                "gpus": gpus,
                "trace_mean_w_per_gpu": float(mean_w) if mean_w is not None else None,
                "trace_peak_w_per_gpu": float(peak_w) if peak_w is not None else None,
                "sampled_s": float(span_ns) / 1e9 if span_ns is not None else None,
            }
        )
    elif table == "requests":
        ok, errors, p50 = con.execute(
            "SELECT count(*) FILTER (WHERE error_kind IS NULL), count(*) FILTER (WHERE error_kind IS NOT NULL), "
            "quantile_cont(ttft_ms, 0.5) FILTER (WHERE in_window AND error_kind IS NULL) FROM requests "
            "WHERE run_id = ?",
            [run_id],
        ).fetchone()
        meta.update(
            {
                "ok_requests": ok,
                "error_requests": errors,
                "ttft_p50_ms_in_windows": float(p50) if p50 is not None else None,
            }
        )
    elif table == "server_metrics":
        n_metrics = con.execute(
            "SELECT count(DISTINCT metric) FROM server_metrics WHERE run_id = ?", [run_id]
        ).fetchone()[0]
        meta["distinct_metrics"] = n_metrics
    return {k: v for k, v in meta.items() if v is not None}


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            name,
            deps=[dep],
            description=desc,
            owners=OWNERS,
            kinds=GPU_KINDS,
            group_name=GROUP,
            skippable=True,
            partitions_def=BENCH_PARTITIONS,
        )
        for name, (dep, desc) in STAGE_TABLES.items()
    ],
    pool=WRITER_POOL,
    can_subset=False,
)
def bench(
    context: AssetExecutionContext,
    plan: BenchPlan,
    warehouse: DuckDBResource,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    """Run the bench agent over every deployment and load point of the plan, then ingest its bundle into the
    benchmark engine_builds opened in this Dagster run (or the one a re-execution continues)."""
    partition = step_partition(context)  # read once per step
    bench_plan, _ = plan.load(partition)
    run_id = benchmark_run.benchmark_for_step(warehouse, context, "stage", partition=partition)
    with benchmark_run.ends_with_step(lambda: warehouse_connection(warehouse), context, partition=partition):
        yield from _run_and_ingest(context, plan, bench_plan, warehouse, pipes_subprocess_client, run_id, partition)


def _run_and_ingest(
    context: AssetExecutionContext,
    plan: BenchPlan,
    bench_plan,
    warehouse: DuckDBResource,
    pipes_subprocess_client: dg.PipesSubprocessClient,
    run_id: str,
    partition: Partition | None,
):
    out = plan.run_dir(run_id) / "bundle"
    headlines: list[dict[str, Any]] = []
    if plan.replay_bundle:
        out = Path(plan.replay_bundle)
        context.log.info(f"replaying bundle {out} instead of running the agent")
    else:
        with warehouse_connection(warehouse) as con:
            builds = {
                r[0]: {"artifact_path": None}
                for r in con.execute("SELECT build_id FROM engine_builds WHERE run_id = ?", [run_id]).fetchall()
            }
        spec = agent_spec(bench_plan, run_id, out, builds)
        n_points = sum(len(d.load_points) for d in spec.deployments)
        context.log.info(f"bench agent: {len(spec.deployments)} deployment(s), {n_points} load point(s) -> {out}")
        invocation = pipes_subprocess_client.run(
            command=[sys.executable, "-m", "wattbench_agent"],
            context=context,
            extras={"spec": spec.to_dict()},
            # the run's mark on the agent (and, through it, on its engines): the stale-run reaper signals a process
            # only if it carries it (wattbench_agent.procs)
            env={RUN_TOKEN_ENV: secrets.token_hex(16)},
        )
        headlines = [m for m in invocation.get_custom_messages() if isinstance(m, dict) and "load_point_id" in m]
    results = []
    with warehouse_connection(warehouse) as con:
        apply_schema(con)
        counts = ingest_bundle(con, out, run_id=run_id)
        context.log.info(f"ingested {out}: " + ", ".join(f"{t}={n}" for t, n in counts.items()))
        for table in STAGE_TABLES:
            meta = {**_stage_metadata(con, table, run_id), **partition_metadata(partition)}
            meta["bundle"] = dg.MetadataValue.path(str(out))
            if table == "load_runs" and headlines:
                md = ["| load point | output tok/s | TTFT p50 ms | energy J | tok/J |", "|---|---|---|---|---|"]
                for h in headlines:
                    md.append(
                        "| {} | {} | {} | {} | {} |".format(
                            h["load_point_id"],
                            *(
                                f"{h[k]:.4g}" if isinstance(h.get(k), (int, float)) else "n/a"
                                for k in ("output_tok_s", "ttft_p50_ms", "energy_j", "tokens_per_joule")
                            ),
                        )
                    )
                meta["headlines"] = dg.MetadataValue.md("\n".join(md))
            results.append(dg.MaterializeResult(asset_key=table, metadata=meta))
    return results
