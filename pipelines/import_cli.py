"""`wattbench import FILE...`: other tools' results (vllm bench serve, AIPerf, guidellm) as runs in the warehouse,
source 'imported:<tool>' (wattbench/importers/). They appear in `wattbench sql load_points --run RUN` and
`wattbench report --compare RUN_A RUN_B`."""

from __future__ import annotations

import argparse
import sys

from wattbench import settings
from wattbench.importers import IMPORTER_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="load other tools' results (vllm bench serve, AIPerf, guidellm) and wattbench load's own as runs",
        description="Load result files of vllm bench serve (--save-result JSON, with per-request rows when saved "
        "with --save-detailed), NVIDIA AIPerf (profile_export_aiperf.json with profile_export.jsonl, or "
        "the artifact folder; its GPU telemetry is the run's energy), guidellm (benchmarks JSON) and wattbench load "
        "(--json output, a search's --save-result file, or the --out per-request file; with --telemetry, its energy) "
        "into the warehouse, one run per file with source 'imported:<tool>'. Importing the same file again replaces "
        "its run.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="result files (or AIPerf artifact folders)")
    p.add_argument("--tool", choices=IMPORTER_NAMES, help="the format (default: recognised)")
    p.add_argument("--db", help=settings.DB_HELP)
    p.add_argument(
        "--run-id",
        help="file the run under this id (one file only; default: from the file's content); an import replaces only "
        "an import, never a measured, emulated or predicted run",
    )
    g = p.add_argument_group("what was measured (the files do not say; used to pair points with other runs)")
    g.add_argument("--engine", help="engine kind: vllm, sglang, trtllm, ... (default: external)")
    g.add_argument("--config-name", help="engine config name, as in a plan (default: the tool's name)")
    g.add_argument("--precision")
    g.add_argument("--tp", type=int, help="GPUs per deployment")
    g.add_argument("--gpu-name", help="e.g. 'NVIDIA H200'")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from wattbench.importers import ImportFileError, read_file, run_id_of, store_run
    from wattbench.warehouse import WarehouseError, connect

    if args.run_id and len(args.files) > 1:
        print("wattbench import: --run-id names one run; give one file with it", file=sys.stderr)
        return 2
    runs = []
    for f in args.files:  # read everything first: a bad file loads nothing
        try:
            runs.append(read_file(f, args.tool))
        except ImportFileError as exc:
            print(f"wattbench import: {exc}", file=sys.stderr)
            return 2
    seen: dict[str, str] = {}
    try:
        with connect(args.db) as con:
            for run in runs:
                rid = args.run_id or run_id_of(run)
                if rid in seen:  # e.g. an AIPerf folder and its export file: the same run
                    continue
                seen[rid] = str(run.path)
                res = store_run(
                    con,
                    run,
                    run_id=args.run_id,
                    engine=args.engine,
                    config_name=args.config_name,
                    precision=args.precision,
                    tp=args.tp,
                    gpu_name=args.gpu_name,
                )
                rows = f"{res['requests']} request rows" if res["requests"] else "the tool's statistics only"
                print(
                    f"imported {run.path} as run {res['run_id']} ({res['source']}, model {run.model}, "
                    f"{res['load_points']} load point(s), {rows})"
                )
                for note in run.notes:
                    print(f"  note: {note}")
    except (WarehouseError, ImportFileError) as exc:
        print(f"wattbench import: {exc}", file=sys.stderr)
        return 2
    if seen:
        last = list(seen)[-1]
        print(f"see: wattbench sql load_points --run {last}")
    return 0
