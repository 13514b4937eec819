"""What every stage asset shares: owners, the writer pool, and the run id the warehouse keys rows by."""


import dagster as dg
from dagster import AssetCheckExecutionContext, AssetExecutionContext

OWNERS = ["team:wattbench"]
# DuckDB allows one writing process: every asset that writes the warehouse runs in this pool (limit 1).
WRITER_POOL = "duckdb_writer"
GROUP = "wattbench"


def run_id_of(context: AssetExecutionContext | dg.AssetCheckExecutionContext) -> str:
    return context.run_id
