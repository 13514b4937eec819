"""Engine name -> adapter class (or a lazy loader of it), and the lookups over it: `engine_names()`, and
`adapter_for(name)`, which calls the value with no arguments.

Adapters whose module may not be in this build yet are registered through `_lazy`: the import happens when the
adapter is first asked for, and a missing module gives a clear error for that engine only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from wattbench_agent.engines.base import EngineAdapter
from wattbench_agent.engines.emulator import EmulatorAdapter
from wattbench_agent.engines.external import ExternalAdapter
from wattbench_agent.engines.sglang import SglangAdapter
from wattbench_agent.engines.trtllm import TrtllmAdapter
from wattbench_agent.engines.vllm import VllmAdapter


def _lazy(module: str, cls: str) -> Callable[[], EngineAdapter]:
    def load() -> EngineAdapter:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            raise ValueError(f"engine adapter {module}.{cls} is not in this build of wattbench") from None
        return getattr(mod, cls)()

    load.__qualname__ = load.__name__ = f"lazy:{module}.{cls}"
    return load


ADAPTERS: dict[str, Callable[[], EngineAdapter]] = {
    "emulator": EmulatorAdapter,
    "trtllm": TrtllmAdapter,
    "vllm": VllmAdapter,
    "sglang": SglangAdapter,
    "transformers": _lazy("wattbench_agent.engines.transformers_serve", "TransformersServeAdapter"),
    "external": ExternalAdapter,
}


def engine_names() -> tuple[str, ...]:
    """Every engine name a plan, the CLI and the agent accept: the adapter registry's keys."""
    return tuple(ADAPTERS)


def adapter_for(engine: str) -> EngineAdapter:
    """The adapter registered for an engine name."""
    try:
        return ADAPTERS[engine]()
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ValueError(f"unknown engine {engine!r}; expected one of {known}") from None
