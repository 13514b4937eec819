"""`wattbench report`: print a run's reports from the warehouse."""

from __future__ import annotations

import argparse

from pipelines.commands import _fail, head_to_head_text, latest_run_id


def _report(args: argparse.Namespace) -> int:
    from resources.warehouse import WarehouseError, connect

    try:
        with connect(args.db, read_only=True) as con:
            run_id = args.run or latest_run_id(con)
            if run_id is None:
                return _fail("no runs in the warehouse yet; run `make run` first")
            print(f"Head to head, run {run_id}:")
            print(head_to_head_text(con, run_id))
    except WarehouseError as exc:
        return _fail(str(exc))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="print the head-to-head table of a run")
    p.add_argument("--run", help="run id (default: the latest run)")
    p.add_argument("--db", help="DuckDB file (default: $WATTBENCH_DB or data/wattbench.duckdb)")
    p.set_defaults(func=_report)
