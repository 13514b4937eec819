"""What every stage asset shares: owners, the writer pool, partitions (a step reads its own with
assets/partitions.step_partition). Which benchmark a step works on (the run id the warehouse keys rows by):
assets/benchmark_run.py."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from assets.partitions import BENCH_PARTITIONS  # noqa: F401  (re-exported: every asset is partitioned alike)

OWNERS = ["team:wattbench"]
# DuckDB allows one writing process: every asset that writes the warehouse runs in this pool (limit 1).
WRITER_POOL = "duckdb_writer"
GROUP = "wattbench"
# The bench agent and the engine builds run on the GPU node: a Kubernetes pod (dagster-k8s Pipes) on a cluster.
GPU_KINDS = {"python", "duckdb", "kubernetes"}
TABLE_KINDS = {"python", "duckdb"}


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
