"""python -m wattbench.twin [--workers N] [--refresh] [--report-only]: calibrate the twin on every committed
real-hardware bundle not on the held-out list, cross-validate it by workload and by board, predict the held-out runs
and the held-out model, size the prediction intervals from the cross-validated errors, and write the emulator's
calibration.json and the report (results/twin/)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from wattbench.twin import evaluate, intervals, measured, report
from wattbench.twin.model import PREDICTED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wattbench.twin", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1, help="calibrations in parallel (each one core)")
    ap.add_argument("--refresh", action="store_true", help="re-read the bundles (else results/twin/measured.json)")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="size the intervals and write the outputs from the committed predictions (results/twin/"
        "cross_validation.json, calibration.json) without calibrating again",
    )
    args = ap.parse_args(argv)
    t0 = time.time()
    points = measured.load(refresh=args.refresh, save=True)
    if args.report_only:
        rows = json.loads(report.ROWS.read_text())["rows"]
        final = json.loads(report.FINAL.read_text())
    else:
        print(f"{len(points)} measured points; calibrating and testing ...", file=sys.stderr)
        results = evaluate.run_folds(points, workers=args.workers)
        rows = evaluate.rows(points, results)
        final = {**results["final"]["calibration"], "took_s": round(time.time() - t0)}
    final["excluded"] = measured.excluded()  # what the list keeps out as written (outside the content hash)
    rows = intervals.mark(rows, PREDICTED)
    ints = intervals.size(rows, PREDICTED)
    coverage = intervals.coverage(rows, PREDICTED)
    report.write_all(final, rows, points, ints, coverage, PREDICTED, final.get("took_s", time.time() - t0))
    print(
        f"wrote {report.relative(report.PACKAGE_DATA)}, {report.relative(report.REPORT)}, "
        f"{report.relative(report.COVERAGE)} and {report.relative(report.ROWS)} in {time.time() - t0:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
