import json
from pathlib import Path

import pytest

TRACE = Path(__file__).parent / "traces" / "h200_trace.json"


@pytest.fixture(scope="session")
def trace_path() -> Path:
    return TRACE


@pytest.fixture(scope="session")
def trace() -> dict:
    return json.loads(TRACE.read_text())


class ListSink:
    """Collects rows like BundleWriter.write does."""

    def __init__(self):
        self.tables: dict[str, list[dict]] = {}
        self.errors: list[tuple[str, str]] = []

    def write(self, table, rows):
        rows = list(rows)
        self.tables.setdefault(table, []).extend(rows)
        return len(rows)

    def note_error(self, kind, text):
        self.errors.append((kind, text))


@pytest.fixture
def sink() -> ListSink:
    return ListSink()
