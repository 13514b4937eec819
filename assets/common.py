"""What every stage asset shares: owners, the writer pool, and the run id the warehouse keys rows by."""

from dagster import AssetCheckExecutionContext, AssetExecutionContext

OWNERS = ["team:wattbench"]
# DuckDB allows one writing process: every asset that writes the warehouse runs in this pool (limit 1).
WRITER_POOL = "duckdb_writer"
GROUP = "wattbench"


def run_id_of(context: AssetExecutionContext | AssetCheckExecutionContext) -> str:
    """The Dagster run id: every warehouse row of a run carries it, so checks and reports see only their run."""
    if isinstance(context, AssetCheckExecutionContext):
        return context.op_execution_context.run_id
    return context.run_id
