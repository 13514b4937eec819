"""Run every `benchmarks/*.py` module that defines `main()` (what `make bench` does)."""

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    rc = 0
    here = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"benchmarks.{info.name}")
        fn = getattr(mod, "main", None)
        if callable(fn):
            print(f"== benchmarks.{info.name}", flush=True)
            try:
                rc |= int(fn([]) or 0)
            except TypeError:
                rc |= int(fn() or 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
