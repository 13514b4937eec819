"""A benchmark partition without Dagster: one (model, scenario) cell, the reading of its key, and the scenarios
(one per plan file).

A model key comes from wattbench/model_registry.py partition_key_for; a scenario is a plan file's stem (plans/*.yaml,
plus the plan $WATTBENCH_PLAN or `wattbench run --plan` names). The Dagster partition definitions over these, and
`step_partition(context)`, which reads a step's key once, are assets/partitions.py; BenchPlan
(resources/bench_plan.py) resolves a Partition to its plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wattbench import settings
from wattbench.model_registry import partition_key_for
from wattbench.plan import PlanError


def scenario_key_for(plan_path: str | Path) -> str:
    """A plan file's scenario partition key: its file stem (plans/default.yaml -> default)."""
    return partition_key_for(Path(plan_path).stem)


def plan_file_scenarios() -> dict[str, Path]:
    """Scenario key -> plan file for every plans/*.yaml (what the code location's partitions are built from at
    import: the files, no environment)."""
    return {scenario_key_for(p): p.resolve() for p in sorted(settings.PLANS_DIR.glob("*.yaml"))}


def scenario_plans(extra: str | Path | None = None) -> dict[str, Path]:
    """Scenario key -> plan file: every plans/*.yaml, and the plan $WATTBENCH_PLAN (read when called, at run time)
    or `extra` names, which wins over a plans/ file of the same stem."""
    out = plan_file_scenarios()
    for path in (os.environ.get(settings.PLAN), extra):
        if path:
            out[scenario_key_for(path)] = Path(path).resolve()
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class Partition:
    """One (model, scenario) cell: what a step benchmarks."""

    model: str
    scenario: str

    @property
    def key(self) -> str:
        """The key's string form, as Dagster writes a MultiPartitionKey (dimensions by name) and runs.partition_key
        stores it."""
        return f"{self.model}|{self.scenario}"

    def metadata(self) -> dict[str, str]:
        return {"model": self.model, "scenario": self.scenario}


def partition_of(key: Any) -> Partition | None:
    """A (model, scenario) partition key read: its string form 'model|scenario' (a Dagster MultiPartitionKey is a str
    whose form that is: dimensions ordered by name) or a Partition; None for None."""
    if key is None or isinstance(key, Partition):
        return key
    text = str(key)
    if "|" not in text:
        raise PlanError(f"partition {text!r}: expected a model|scenario key")
    model, scenario = text.split("|", 1)
    return Partition(model, scenario)
