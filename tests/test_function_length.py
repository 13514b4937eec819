"""No function of wattbench's own code is over MAX_LINES lines, except the declarative tables below: a longer function
is several steps that want names of their own (docs/CONTRIBUTING.md). The packages are walked with ast; an allowed
table is named by its module's file name and the function's, so that it survives a move between packages."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent/wattbench_agent", "assets", "resources", "pipelines", "wattbench")
MAX_LINES = 150
# (module file name, function name): why its length is a table's, not a procedure's
TABLES = {
    ("validation.py", "suites"): "the Great Expectations suites: one expectation per line, per table",
}


def parse(path: Path) -> ast.Module:
    """ast.parse with the collector off and a retry: CPython 3.11's AST conversion keeps its recursion depth in state
    shared by the process, and a finalizer or another thread compiling during it fails it with "SystemError: AST
    constructor recursion depth mismatch" (gh-106905), as it did after the Dagster tests in the same process."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for attempt in range(3):
            try:
                return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            except SystemError:
                if attempt == 2:
                    raise
    finally:
        if enabled:
            gc.enable()
    raise AssertionError("unreachable")


def long_functions() -> dict[tuple[str, str], tuple[str, int]]:
    """(file name, function) -> (path from the repository root, lines), for every function over MAX_LINES."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(parse(path)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_LINES:
                        found[(path.name, node.name)] = (str(path.relative_to(ROOT)), lines)
    return found


def test_no_function_is_over_150_lines_but_the_declarative_tables():
    found = long_functions()
    too_long = {key: where for key, where in found.items() if key not in TABLES}
    named = ", ".join(f"{path}:{name} ({n} lines)" for (_, name), (path, n) in sorted(too_long.items()))
    assert not too_long, (
        f"functions over {MAX_LINES} lines (split them, or add a table to TABLES with its reason): {named}"
    )


def test_every_allowed_table_is_still_long():
    """An allowance outlives its need: once a table is short again, its entry goes."""
    stale = set(TABLES) - set(long_functions())
    assert not stale, f"no longer over {MAX_LINES} lines (remove from TABLES): {sorted(stale)}"
