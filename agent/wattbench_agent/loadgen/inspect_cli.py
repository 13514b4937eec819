"""`wattbench inspect REQUESTS.jsonl [--json]`: the summary `wattbench load` printed, made again from the per-request
file `wattbench load --out` wrote (and its points file beside it; loadgen/replay.py), by the same code."""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="summarise a saved load run again from its per-request file (wattbench load --out)",
        description="Recompute the summary that `wattbench load` printed (its --json summary with --json) from the "
        "per-request JSONL that `wattbench load --out` wrote and the points file it wrote beside it "
        "(REQUESTS.points.jsonl): the same code as the live summary, so figures added since the run are "
        "there too (the step decomposition, `steps`).",
    )
    p.add_argument(
        "requests",
        metavar="REQUESTS.jsonl",
        help="the per-request file of `wattbench load --out`; or a result bundle (folder or .tar.xz): its stored "
        "summaries with their step decomposition made again from its requests",
    )
    p.add_argument("--json", action="store_true", help="print the summary as `wattbench load --json` does")
    p.set_defaults(func=main)


def main(a) -> int:
    from pathlib import Path

    from wattbench_agent.bundle import ARCHIVE_SUFFIXES, MANIFEST, BundleError

    from .cli import summary_table
    from .replay import ReplayError, bundle_summaries, summaries
    from .spec import LoadSpecError

    path = Path(a.requests)
    try:
        if path.is_dir() or (path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)):
            if path.is_dir() and not (path / MANIFEST).exists():
                raise ReplayError(f"{path}: a folder without {MANIFEST}; expected a result bundle or a JSONL file")
            found = bundle_summaries(path)
        else:
            found = summaries(path)
    except (ReplayError, LoadSpecError, BundleError) as exc:
        print(f"wattbench inspect: {exc}", file=sys.stderr)
        return 2
    if not found:
        print(f"wattbench inspect: {a.requests}: no request records in it", file=sys.stderr)
        return 2
    for s in found:
        print(summary_table(s), file=sys.stderr if a.json else sys.stdout)
        if s.get("inspect_note"):
            print(f"  note: {s['inspect_note']}", file=sys.stderr if a.json else sys.stdout)
    if a.json:
        print(json.dumps(found[0] if len(found) == 1 else {"sweep": found}, separators=(",", ":")))
    return 0
