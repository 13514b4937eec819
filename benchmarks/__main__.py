"""Run every `benchmarks/*.py` module that defines `main()` (what `make bench` does)."""

import importlib
import pkgutil
import sys
import traceback
from pathlib import Path


def main() -> int:
    """Every benchmark runs, whatever the others did: one that returns non-zero or raises is listed at the end (and
    the run exits 1); a benchmark reports its own misses against its targets in its output."""
    failed: list[str] = []
    here = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"benchmarks.{info.name}")
        fn = getattr(mod, "main", None)
        if callable(fn):
            print(f"== benchmarks.{info.name}", flush=True)
            try:
                try:
                    rc = int(fn([]) or 0)
                except TypeError:
                    rc = int(fn() or 0)
            except SystemExit as exc:  # argparse's exit: reported like a non-zero return
                rc = exc.code if isinstance(exc.code, int) else 1
            except Exception:  # noqa: BLE001 - reported, and the other benchmarks still run
                traceback.print_exc()
                rc = 1
            if rc:
                failed.append(f"{info.name} (exit {rc})")
    print("== benchmarks that failed: " + (", ".join(failed) if failed else "none"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
