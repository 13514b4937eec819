"""wattbench's bench agent: the thin process that runs next to the GPUs.

It starts (or attaches to) engines, drives load, samples GPU telemetry and writes a result bundle. It imports
nothing of Dagster core, DuckDB or Great Expectations, so it installs alone on a GPU node
(`pip install ./agent`, dependencies: httpx, numpy, nvidia-ml-py, dagster-pipes, pyyaml) and runs as
`wattbench-agent` or `python -m wattbench_agent`.
"""

__version__ = "0.2.0"

# Modules exposing `register(subparsers)`: the agent's own subcommands, also part of the `wattbench` CLI.
COMMAND_MODULES = (
    "wattbench_agent.cli",  # agent
    "wattbench_agent.loadgen.cli",  # load
    "wattbench_agent.loadgen.inspect_cli",  # inspect
    "wattbench_agent.emulator.cli",  # emulate
    "wattbench_agent.telemetry.cli",  # telemetry
    "wattbench_agent.engines.cli",  # deploy, make-tiny-model
)
