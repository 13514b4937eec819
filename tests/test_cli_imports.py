"""`wattbench sql`, `wattbench report` and `wattbench load --help` import nothing heavy (issue 18, item 5): each
command runs in a fresh interpreter, which then lists the heavy packages in sys.modules. A fact, not a timing
(benchmarks/cli_startup.py times them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reports.synth import Deployment, simple_point, started, write_run

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("dagster", "great_expectations", "pandas", "matplotlib", "altair")
PROBE = """
import contextlib, io, json, sys
from pipelines.cli import main
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        rc = main(json.loads(sys.argv[1]))
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "out": out.getvalue(),
                  "heavy": sorted({m for m in sys.modules if m in json.loads(sys.argv[2])}
                                  | ({m.split('.')[0] for m in sys.modules} & set(json.loads(sys.argv[2]))))}))
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("cli")
    path = tmp / "w.duckdb"
    write_run(
        path,
        tmp,
        "r1",
        [
            Deployment("alpha", points=[simple_point("c8", 5.0 + 0.1 * r, repeat=r + 1) for r in range(3)]),
            Deployment("beta", points=[simple_point("c8", 6.0 + 0.2 * r, repeat=r + 1) for r in range(3)]),
        ],
        started=started(0),
    )
    return path


def run_fresh(argv: list[str], heavy: tuple[str, ...] = HEAVY) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(heavy)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["sql", "select 42 AS answer"], "42"),
        (["sql", "load_points", "--format", "csv"], "alpha,steady,c8"),
        (["sql", "load_points", "--format", "json"], '"engine":"beta"'),
        (["report"], "Head to head, run r1"),
    ],
)
def test_read_only_commands_import_nothing_heavy(db, argv, expect):
    """numpy too: the warehouse module loads the bundle's chunk-file reader (and numpy) only when a bundle loads. Nor
    the `duckdb` package: a sandboxed connection runs on DuckDB's engine (_duckdb) alone, and the package's Python
    layer (0.1 s to import, a third of the command) loads only for the other connections. Nor the ingest code: they
    read through wattbench.connection, not wattbench.warehouse (its bundle checks and chunk files)."""
    result = run_fresh([*argv, "--db", str(db)], (*HEAVY, "numpy", "duckdb", "wattbench.warehouse"))
    assert result["rc"] == 0 and expect in result["out"], result["out"][-2000:]
    assert result["heavy"] == [], f"wattbench {' '.join(argv)} imported {result['heavy']}"


def test_load_help_imports_nothing_heavy():
    """Nor the load generator's HTTP client: its parser comes from wattbench_agent.loadgen.cli alone, and the loadgen
    package loads its runner (httpx) only when it runs load. Nor numpy: the load shapes and the vLLM-result writer
    import it where they make a schedule or a statistic, not when the parser lists the shapes."""
    result = run_fresh(["load", "--help"], (*HEAVY, "httpx", "numpy"))
    assert result["rc"] == 0 and "--rate" in result["out"]
    assert result["heavy"] == []


def test_the_report_shows_measured_cells_and_engine_contrasts(db):
    """The pandas-free head-to-head: engines as columns, a measured cell names its load point."""
    out = run_fresh(["report", "--db", str(db)])["out"]
    header = next(line for line in out.splitlines() if line.startswith("| figure"))
    assert "alpha" in header and "beta" in header
    assert "@ steady:c8" in out
    assert "Engines compared at each point" in out and "beta / alpha" in out


def test_each_own_command_is_registered_by_the_module_the_cli_maps_it_to():
    import argparse
    import importlib

    from pipelines.cli import _COMMAND_MODULES, OWN_COMMANDS, build_parser

    registered = {}
    for name in _COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers(dest="command")
        importlib.import_module(name).register(sub)
        registered.update({command: name for command in sub.choices})
    assert registered == OWN_COMMANDS
    for command in OWN_COMMANDS:  # the narrow parser knows the command as the whole one does
        assert command in build_parser(command)._subparsers._group_actions[0].choices
