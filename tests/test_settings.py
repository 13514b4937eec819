"""One warehouse for every command (wattbench/settings.py, docs/USAGE.md): `wattbench run` started in any directory
writes the file that `wattbench sql` and `report` read from any other, by default the checkout's
data/wattbench.duckdb; a relative --db or $WATTBENCH_DB is taken from the current directory, alike for all."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from pipelines.cli import main
from wattbench import settings

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "tests" / "data" / "smoke_plan.yaml"


class Opened(BaseException):  # no command catches it
    """Raised where a command would open the warehouse: the test wants the file, not the run."""


def _run_target(monkeypatch) -> Path:
    """The warehouse `wattbench run` builds its definitions for, stopped before anything runs."""
    import pipelines.definitions

    def stop(settings_=None):
        raise Opened(settings_.db_path)

    monkeypatch.setattr(pipelines.definitions, "build_definitions", stop)
    with pytest.raises(Opened) as got:
        main(["run", "--plan", str(PLAN)])
    return Path(str(got.value))


def _read_target(monkeypatch, command: list[str]) -> Path:
    """The file a read-only command opens, stopped at the open."""
    import wattbench.connection

    def stop(path, *args, **kwargs):
        raise Opened(path)

    monkeypatch.setattr(wattbench.connection.duckdb, "connect", stop)
    # a file must be there for a read-only command to open it; the stop comes before anything is read
    monkeypatch.setattr(Path, "exists", lambda self: True)
    with contextlib.suppress(SystemExit), pytest.raises(Opened) as got:
        main(command)
    return Path(str(got.value))


@pytest.mark.parametrize("reader", [["sql", "SELECT 1"], ["report"]])
def test_run_from_another_directory_and_the_readers_find_the_same_warehouse(tmp_path, monkeypatch, reader):
    monkeypatch.delenv(settings.DB, raising=False)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    written = _run_target(monkeypatch)
    monkeypatch.chdir(tmp_path / "b")
    read = _read_target(monkeypatch, reader)
    assert written == read == settings.DEFAULT_DB == ROOT / "data" / "wattbench.duckdb"


def test_a_relative_warehouse_is_taken_from_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.DB, "w/wattbench.duckdb")
    monkeypatch.chdir(tmp_path)
    assert _run_target(monkeypatch) == tmp_path / "w" / "wattbench.duckdb"
    assert settings.db_path() == tmp_path / "w" / "wattbench.duckdb"
    assert settings.db_path("x.duckdb") == tmp_path / "x.duckdb"  # --db wins over the environment
