"""The built-in emulator of LLM serving engines (TensorRT-LLM-like and vLLM-like) on NVIDIA GPUs.

Everything it produces is labelled source='emulated'. Agent-side: imports nothing of Dagster, DuckDB or GE.

    from wattbench_agent.emulator import emulated_build, simulate, setup
"""

from wattbench_agent.emulator.build import emulated_build
from wattbench_agent.emulator.profiles import (
    EMULATOR_VERSION,
    FACTORS,
    KNOBS,
    PROFILES,
    ConfigError,
    EngineStartupError,
    setup,
)
from wattbench_agent.emulator.simulate import SimResult, Workload, simulate, step_time
from wattbench_agent.emulator.specs import SpecError, gpu_spec, known, model_spec, precision_spec

__all__ = [
    "emulated_build",
    "simulate",
    "step_time",
    "Workload",
    "SimResult",
    "setup",
    "PROFILES",
    "KNOBS",
    "FACTORS",
    "EMULATOR_VERSION",
    "ConfigError",
    "EngineStartupError",
    "SpecError",
    "model_spec",
    "gpu_spec",
    "precision_spec",
    "known",
]
