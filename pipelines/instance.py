"""The Dagster instance the commands run in: $DAGSTER_HOME's, its storage created once and under a lock
(`wattbench run` and `wattbench runs`, and `make run` / `make ui`, which create it before they start)."""

from __future__ import annotations

import os
from pathlib import Path


def open_instance(models: list[str] = ()):
    """The Dagster instance of $DAGSTER_HOME (an ephemeral one without it), with its storage created and the
    given model partitions added.

    A fresh DAGSTER_HOME creates its SQLite storages (and their alembic version tables) on first use; two
    `wattbench run`s started together would race on that and one would die with "table alembic_version already
    exists". An exclusive lock file in DAGSTER_HOME serializes the first use; later runs pass straight through."""
    import fcntl

    import dagster as dg

    from pipelines.partitions import ensure_models

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        instance = dg.DagsterInstance.ephemeral()
        ensure_models(instance, models)
        return instance
    Path(home).mkdir(parents=True, exist_ok=True)
    with open(Path(home) / ".wattbench-instance.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = dg.DagsterInstance.get()
            # touch every storage so that its tables exist before the lock is released
            instance.get_runs(limit=1)
            instance.all_instigator_state()
            ensure_models(instance, models)  # check-then-add, also under the lock
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return instance
