"""wattbench's load generator: OpenAI-compatible streaming load on httpx (docs/CONTRACTS.md section 2,
docs/LOADGEN.md). Agent side: stdlib + httpx + numpy (+ uvloop) only."""

from .metrics import stats, summarize
from .runner import LoadResult, run_load, run_sweep
from .shapes import arrival_offsets
from .shapes.trace import TraceError, load_trace
from .spec import LoadSpec, LoadSpecError

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
