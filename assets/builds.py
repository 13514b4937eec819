"""Stage 1: engine builds. TensorRT-LLM-style engines are compiled and timed; vLLM/SGLang record 'no build'.

Where a build runs is the `engine_builder` resource's business, picked by the environment (pipelines/definitions.py):
resources/engine_builder.py's LocalEngineBuilder builds in the step's own process (locally the step runs on the GPU
machine); on a cluster resources/k8s.py's K8sBuildLauncher sends each engine that is compiled for its GPU to a build
pod on a node of that GPU kind, and builds the rest here. Either way the step writes the same engine_builds rows.
"""

import socket
import time
from datetime import UTC, datetime

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
from assets.partitions import partition_metadata, step_partition
from assets.table_meta import table_metadata
from resources.bench_plan import BenchPlan
from resources.engine_builder import LocalEngineBuilder
from wattbench.plan import plan_run_fields
from wattbench.warehouse import apply_schema, replace_rows
from wattbench_agent.engines.registry import adapter_for


def _with_stages(context: AssetExecutionContext) -> bool:
    """Whether this Dagster run also materializes the bench stages that fill the benchmark engine_builds opens."""
    try:
        layer = context.job_def.asset_layer
        selection = context.dagster_run.asset_selection or layer.selected_asset_keys or layer.executable_asset_keys
    except Exception:  # noqa: BLE001 - invoked directly: no run
        return True
    return dg.AssetKey("deployments") in selection


def _build_all(context: AssetExecutionContext, bench_plan, plan: BenchPlan, engine_builder, run_id: str) -> list[dict]:
    workdir = plan.run_dir(run_id) / "builds"
    rows = []
    for spec, cfg in bench_plan.engine_configs():
        adapter = adapter_for(cfg.engine)
        context.log.info(f"build {spec.name}: {cfg.engine} {cfg.model} {cfg.precision} tp={cfg.tp}")
        result = engine_builder.build(context, cfg, workdir)
        rows.append(
            {
                "run_id": run_id,
                "source": adapter.source,
                "build_id": cfg.build_id(),
                "model": cfg.model,
                "engine": cfg.engine if cfg.engine != "emulator" else f"emulator:{cfg.profile}",
                "config_name": spec.name,
                "precision": cfg.precision,
                "tp": cfg.tp,
                "gpu_name": cfg.gpu,
                "status": result.status,
                "build_s": result.build_s,
                "artifact_sha256": result.artifact_sha256,
                "artifact_bytes": result.artifact_bytes,
                "engine_version": result.engine_version,
                "hardware_lock": result.hardware_lock,
                "config": result.resolved_config,
                "error_kind": result.error_kind,
                "error_text": result.error_text,
            }
        )
    return rows


@dg.asset(
    group_name=GROUP,
    owners=OWNERS,
    kinds=GPU_KINDS,
    pool=WRITER_POOL,
    code_version="1",
    partitions_def=BENCH_PARTITIONS,
)
def engine_builds(
    context: AssetExecutionContext, plan: BenchPlan, warehouse: DuckDBResource, engine_builder: LocalEngineBuilder
) -> dg.MaterializeResult:
    """Build (or resolve) one engine per plan entry: build time, artifact hash and hardware lock for compiled
    engines; the resolved config and 'no build' for engines that load checkpoints directly. Opens the benchmark
    (its row in `runs`, status 'running', with the plan, prices and SLO) that the later stages fill."""
    partition = step_partition(context)  # read once per step
    bench_plan, plan_sha = plan.load(partition)
    plan_file = plan.plan_path(partition).resolve()
    source = "emulated" if bench_plan.is_emulated else "measured"
    with warehouse_connection(warehouse) as con:
        apply_schema(con)
        run_id = benchmark_run.open_benchmark(
            con,
            context,
            {
                "source": source,
                **plan_run_fields(bench_plan, plan_file, plan_sha),
                "started_at": datetime.now(UTC).replace(tzinfo=None),
                "host": socket.gethostname(),
                "wattbench_version": "0.1.0",
                "clock_anchor_mono_ns": time.perf_counter_ns(),
                "clock_anchor_unix_ns": time.time_ns(),
            },
            partition=partition,
        )
    with benchmark_run.ends_with_step(lambda: warehouse_connection(warehouse), context, partition=partition):
        rows = _build_all(context, bench_plan, plan, engine_builder, run_id)
        with warehouse_connection(warehouse) as con:
            replace_rows(con, "engine_builds", rows, key=("run_id", "build_id"))
            schema_meta = table_metadata(con, "engine_builds")
            if not _with_stages(context):  # builds only (e.g. to fill the engine cache): nothing will be measured
                benchmark_run.set_status(con, run_id, "incomplete")
                context.log.info(f"builds only: benchmark {run_id} is 'incomplete' (no measurements); reports skip it")
    table = "\n".join(
        ["| engine | status | build s | artifact |", "|---|---|---|---|"]
        + [
            f"| {r['config_name']} | {r['status']} | {r['build_s'] if r['build_s'] is not None else 'n/a'} | "
            f"{(r['artifact_sha256'] or '')[:12]} |"
            for r in rows
        ]
    )
    build_s = [r["build_s"] for r in rows if isinstance(r["build_s"], (int, float))]
    return dg.MaterializeResult(
        metadata={
            "run_id": run_id,
            "source": source,
            **partition_metadata(partition),
            "plan_name": bench_plan.name,
            "model_id": bench_plan.model,
            "dagster/row_count": dg.MetadataValue.int(len(rows)),
            **schema_meta,
            "rows": len(rows),
            "built_or_cached": dg.MetadataValue.int(sum(r["status"] in ("built", "cached") for r in rows)),
            "failed": dg.MetadataValue.int(sum(r["status"] == "failed" for r in rows)),
            "total_build_s": dg.MetadataValue.float(float(sum(build_s))),
            "builds": dg.MetadataValue.md(table),
            "plan": dg.MetadataValue.path(str(plan_file)),
        }
    )
