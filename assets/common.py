"""What every stage asset shares: owners, the writer pool, partitions. Which benchmark a step works on (the run id
the warehouse keys rows by): assets/benchmark_run.py."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster import AssetCheckExecutionContext, AssetExecutionContext

from assets.partitions import BENCH_PARTITIONS  # noqa: F401  (re-exported: every asset is partitioned alike)
from resources.bench_plan import partition_dims

OWNERS = ["team:wattbench"]
# DuckDB allows one writing process: every asset that writes the warehouse runs in this pool (limit 1).
WRITER_POOL = "duckdb_writer"
GROUP = "wattbench"
# The bench agent and the engine builds run on the GPU node: a Kubernetes pod (dagster-k8s Pipes) on a cluster.
GPU_KINDS = {"python", "duckdb", "kubernetes"}
TABLE_KINDS = {"python", "duckdb"}


def partition_key_of(context: AssetExecutionContext | AssetCheckExecutionContext) -> Any:
    """The run's (model, scenario) partition key, or None when the asset runs unpartitioned (invoked directly)."""
    ctx = context.op_execution_context if isinstance(context, AssetCheckExecutionContext) else context
    return ctx.partition_key if ctx.has_partition_key else None


def partition_metadata(context: AssetExecutionContext | AssetCheckExecutionContext) -> dict[str, str]:
    dims = partition_dims(partition_key_of(context))
    return {} if dims is None else {"model": dims["model"], "scenario": dims["scenario"]}


@contextmanager
def warehouse_connection(warehouse: Any) -> Iterator[Any]:
    """DuckDBResource.get_connection, closed also when the body raises (dagster_duckdb 0.29 closes it only on
    success, and the open read-write connection then keeps this process from opening the file otherwise)."""
    manager = warehouse.get_connection()
    con = manager.__enter__()
    try:
        yield con
    finally:
        con.close()
