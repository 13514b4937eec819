"""wattbench's settings: every default and every environment variable the control plane reads, named once here.

Importing this module reads no environment variable (the code location is built lazily, pipelines/definitions.py);
the functions below read it when called. The warehouse, the plan and the run folder resolve the same way for every
command and for the code location: an explicit value (a flag), else the environment variable, else the default in
this checkout. A relative path is taken from the current directory, as the user typed it; the defaults are absolute,
so `wattbench run` from any directory and `wattbench report` / `sql` from any other find the same warehouse.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PLANS_DIR = REPO_ROOT / "plans"
DATA_DIR = REPO_ROOT / "data"

DEFAULT_DB = DATA_DIR / "wattbench.duckdb"
DEFAULT_PLAN = PLANS_DIR / "default.yaml"
DEFAULT_RUNS_DIR = DATA_DIR / "runs"

# The environment variables, by what they set (docs/USAGE.md, docs/AUTOMATION.md, docs/ENGINES.md describe them).
DB = "WATTBENCH_DB"  # the warehouse file
PLAN = "WATTBENCH_PLAN"  # the plan file; outside plans/ its stem becomes a scenario partition
RUNS_DIR = "WATTBENCH_RUNS_DIR"  # run folders: bundles, reports
TARGET = "WATTBENCH_TARGET"  # local (default) | kubernetes: picks the agent launcher and the engine builder
GIT_URL = "WATTBENCH_GIT_URL"  # links each asset's code reference to a Git host
GIT_BRANCH = "WATTBENCH_GIT_BRANCH"
SCHEDULE_TZ = "WATTBENCH_SCHEDULE_TZ"  # the schedules' timezone (default UTC)
HUB_POLL_S = "WATTBENCH_HUB_POLL_S"  # the model-release sensor's interval (default 3600 s)
INGEST_MEMORY = "WATTBENCH_INGEST_MEMORY"  # DuckDB's memory while a bundle loads (wattbench/warehouse.py)
VALIDATION_MEMORY = "WATTBENCH_VALIDATION_MEMORY"  # DuckDB's memory while GX validates (wattbench/validation.py)
HF_TOKEN = "HF_TOKEN"  # the Hugging Face Hub token of the model-release sensor

# resources/hub_watch.py HubWatch: field -> (environment variable, type)
HUB_WATCH = {
    "base_url": ("WATTBENCH_HUB_URL", str),
    "orgs": ("WATTBENCH_HUB_ORGS", str),
    "pipeline_tag": ("WATTBENCH_HUB_PIPELINE_TAG", str),
    "library": ("WATTBENCH_HUB_LIBRARY", str),
    "filters": ("WATTBENCH_HUB_FILTERS", str),
    "limit": ("WATTBENCH_HUB_LIMIT", int),
    "scenarios": ("WATTBENCH_HUB_SCENARIOS", str),
    "first_poll_models": ("WATTBENCH_HUB_FIRST_POLL_MODELS", int),
    "timeout_s": ("WATTBENCH_HUB_TIMEOUT_S", float),
    "backoff_s": ("WATTBENCH_HUB_BACKOFF_S", float),
    "max_backoff_s": ("WATTBENCH_HUB_MAX_BACKOFF_S", float),
}

# The cluster (resources/k8s.py launchers, pipelines/k8s.py executor); docs/ENGINES.md
AGENT_IMAGE = "WATTBENCH_AGENT_IMAGE"  # image with the engine(s) and the bench agent
K8S_NAMESPACE = "WATTBENCH_K8S_NAMESPACE"  # namespace of step jobs and the agent pod
DEFAULT_K8S_NAMESPACE = "wattbench"
GPU_PRODUCT = "WATTBENCH_GPU_PRODUCT"  # node selector nvidia.com/gpu.product
AGENT_GPUS = "WATTBENCH_AGENT_GPUS"  # GPUs of the agent pod (default: the largest tp in the spec)
BUNDLE_PVC = "WATTBENCH_BUNDLE_PVC"  # PVC holding run folders, mounted at DATA_MOUNT
DATA_MOUNT = "WATTBENCH_DATA_MOUNT"
DEFAULT_DATA_MOUNT = "/data"
MODELS_PVC = "WATTBENCH_MODELS_PVC"  # PVC with models and the engine cache, mounted at /models
K8S_SERVICE_ACCOUNT = "WATTBENCH_K8S_SERVICE_ACCOUNT"
ORCHESTRATOR_IMAGE = "WATTBENCH_ORCHESTRATOR_IMAGE"  # image of the step pods (default: the code location's)
# WATTBENCH_BUILD_IMAGE (the build pods' image) is the agent's own: wattbench_agent.deploy.kubernetes

DB_HELP = f"DuckDB file (default: ${DB} or data/wattbench.duckdb in this checkout)"


def db_path(given: str | os.PathLike | None = None) -> Path:
    """The warehouse file: `given` (--db), else $WATTBENCH_DB, else data/wattbench.duckdb in this checkout; absolute,
    so that a run and the commands that read it agree on the file wherever each starts."""
    raw = given or os.environ.get(DB)
    return Path(raw).resolve() if raw else DEFAULT_DB


def plan_path(given: str | os.PathLike | None = None) -> Path:
    """The plan file: `given` (--plan), else $WATTBENCH_PLAN, else plans/default.yaml."""
    return Path(given or os.environ.get(PLAN) or DEFAULT_PLAN)


# A memory limit as DuckDB reads one: a number and a unit (no unit: bytes); nothing else reaches its SET statement
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*", re.IGNORECASE)
_UNITS = {u.lower(): u for u in ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")}


def memory_size(name: str, default: str) -> str:
    """A memory limit for DuckDB from the environment variable `name` (INGEST_MEMORY, VALIDATION_MEMORY), else
    `default`, written back in DuckDB's spelling (`1GB`, `512MiB`); ValueError naming the variable, its value and what
    was expected otherwise (the value goes into a SET statement: only a size may)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    m = _SIZE.fullmatch(raw)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(
            f"{name} = {raw[:80]!r}; expected a memory size greater than 0, a number and a unit such as 1GB, 512MB "
            "or 2GiB"
        )
    return f"{m.group(1)}{_UNITS[(m.group(2) or 'B').lower()]}"


def runs_dir(given: str | os.PathLike | None = None) -> Path:
    """Where run folders (bundles, reports) go: `given`, else $WATTBENCH_RUNS_DIR, else data/runs."""
    return Path(given or os.environ.get(RUNS_DIR) or DEFAULT_RUNS_DIR)
