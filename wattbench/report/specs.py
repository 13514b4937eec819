"""The report registry: every report of a benchmark, one `ReportSpec` each, in `REPORTS`. From it derive the report
assets (assets/reports.py: `REPORT_ASSETS`, and what `html_report` waits for), the flags of `wattbench report`
(pipelines/report_cli.py), the HTML report's sections and the tests that go over every report.

A table report is its SQL and its entry: `report_asset(spec)` makes its Dagster asset (gated by every stage's
blocking checks like the others; its table as Dagster table metadata, its `figures` as float metadata the UI
charts across materializations), the HTML report gets a section with its title, description and table, and
`wattbench report --<cli>` prints it. The reports that draw pictures, run several queries or carry a check
(`bespoke=True`) are listed here too, and built by their own functions in assets/reports.py.

Light on purpose: `wattbench report` reads this list without importing Dagster or pandas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


def run_only(run_id: str) -> dict[str, Any]:
    """The $parameters of a report over one run: `$run_id`."""
    return {"run_id": run_id}


@dataclass(frozen=True)
class ReportSpec:
    """One report. `name`: its asset's name (a plain identifier). `title`: its heading in the HTML report and on
    the console. `description`: what it shows and how, with units (the asset's description). `sql`: the query, a
    file of sql/ by name (`head_to_head` -> sql/head_to_head.sql) or literal SQL, over the warehouse's views with
    `$run_id` and whatever `params(run_id)` gives. `cli`: the flag of `wattbench report` that prints it (None: not
    on the console). `html`: whether the HTML report has a section for it. `figures`: numeric columns given as float
    metadata per row, named `<key columns>/<column>`. `bespoke`: built by its own function in assets/reports.py."""

    name: str
    title: str
    description: str
    sql: str | None = None
    params: Callable[[str], dict[str, Any]] = run_only
    cli: str | None = None
    cli_help: str | None = None
    html: bool = True
    figures: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    empty: str = "no rows"
    bespoke: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"report name {self.name!r} is not a plain identifier (it names a Dagster asset)")
        if not self.bespoke and not self.sql:
            raise ValueError(f"report {self.name}: a table report needs its sql")


REPORTS: list[ReportSpec] = [
    ReportSpec(
        "load_point_report",
        "Every load point, summarised over its repeats",
        "Per load point, its repeats summarised with 95% intervals, the pictures, and every repeat.",
        sql="load_runs",
        bespoke=True,
    ),
    ReportSpec(
        "head_to_head",
        "Head to head",
        "Rows are capabilities and measured figures, columns are engines; every cell names its run and point.",
        sql="head_to_head",
        bespoke=True,  # `wattbench report` with no flag prints it
    ),
    ReportSpec(
        "slo_capacity",
        "SLO capacity",
        "The highest load meeting the plan's SLO per engine config, with its interval and the figures at it.",
        sql="slo_capacity",
        bespoke=True,  # printed by `wattbench report --capacity` before the capacity plan
    ),
    ReportSpec(
        "capacity_plan",
        "Capacity plan",
        "The fewest GPUs per engine config for the plan's traffic profile, and the hybrid topology.",
        sql="capacity_plan",
        cli="capacity",
        cli_help="capacity plan and hybrid topology of the run",
        bespoke=True,
    ),
    ReportSpec(
        "regressions",
        "Against the previous run",
        "This run's load points against the previous run of the same point, flagged beyond the noise band.",
        sql="regressions",
        cli="regressions",
        cli_help="the run against the previous run of each point",
        bespoke=True,
    ),
]


def spec(name: str) -> ReportSpec:
    """The registered report of that name."""
    for s in REPORTS:
        if s.name == name:
            return s
    raise KeyError(f"no report {name!r}; registered: {', '.join(s.name for s in REPORTS)}")


def register(new: ReportSpec) -> ReportSpec:
    """Add a report to the registry (after the others); its name and CLI flag must be new."""
    if any(s.name == new.name for s in REPORTS):
        raise ValueError(f"a report named {new.name!r} is already registered")
    if new.cli and any(s.cli == new.cli for s in REPORTS):
        raise ValueError(f"`wattbench report --{new.cli}` already prints another report")
    REPORTS.append(new)
    return new


@contextmanager
def registered(new: ReportSpec) -> Iterator[ReportSpec]:
    """A report registered for the length of a `with` block (tests)."""
    register(new)
    try:
        yield new
    finally:
        REPORTS.remove(new)
