"""wattbench's load generator: OpenAI-compatible streaming load on httpx (docs/CONTRACTS.md section 2,
docs/LOADGEN.md). Agent side: stdlib + httpx + numpy (+ uvloop) only.

The names below load on first use (PEP 562): importing a part of the package (`loadgen.shapes`, `loadgen.cli` for
`wattbench load --help`) does not import the runner or httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "stats": ".metrics",
    "summarize": ".metrics",
    "LoadResult": ".result",
    "run_load": ".runner",
    "run_sweep": ".runner",
    "arrival_offsets": ".shapes",
    "TraceError": ".shapes.trace",
    "load_trace": ".shapes.trace",
    "LoadSpec": ".spec",
    "LoadSpecError": ".spec",
}

__all__ = [
    "LoadSpec",
    "LoadSpecError",
    "LoadResult",
    "run_load",
    "run_sweep",
    "summarize",
    "stats",
    "arrival_offsets",
    "load_trace",
    "TraceError",
]

if TYPE_CHECKING:
    from .metrics import stats, summarize
    from .result import LoadResult
    from .runner import run_load, run_sweep
    from .shapes import arrival_offsets
    from .shapes.trace import TraceError, load_trace
    from .spec import LoadSpec, LoadSpecError


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
