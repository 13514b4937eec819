"""python -m wattbench.twin [--workers N] [--refresh]: calibrate the twin on every committed real-hardware bundle, test
it held out by workload and by board (and on the held-out model), write the emulator's calibration.json and the
report (results/twin/)."""

from __future__ import annotations

import argparse
import sys
import time

from wattbench.twin import evaluate, measured, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wattbench.twin", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1, help="calibrations in parallel (each one core)")
    ap.add_argument("--refresh", action="store_true", help="re-read the bundles (else results/twin/measured.json)")
    args = ap.parse_args(argv)
    t0 = time.time()
    points = measured.load(refresh=args.refresh, save=True)
    print(f"{len(points)} measured points; calibrating and testing held out ...", file=sys.stderr)
    results = evaluate.run_folds(points, workers=args.workers)
    old = evaluate.before(points)
    rows = evaluate.rows(points, results, old)
    bundles = {str(p.relative_to(measured.RESULTS)): measured._sha(p) for p in measured.bundles()}
    report.write_all(results["final"]["calibration"], rows, points, bundles, time.time() - t0)
    print(
        f"wrote {report.relative(report.PACKAGE_DATA)}, {report.relative(report.REPORT)} and "
        f"{report.relative(report.ROWS)} in {time.time() - t0:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
