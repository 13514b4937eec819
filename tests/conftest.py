import os
import sys
from pathlib import Path

import hypothesis  # noqa: F401  (imported early: its pytest plugin imports it late otherwise, which trips a CPython 3.11 AST bug)
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


@pytest.fixture
def repo_root() -> Path:
    return REPO
