"""The `wattbench` console script. Each component registers its own subcommands (see `_COMMAND_MODULES`)."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from wattbench_agent import COMMAND_MODULES as AGENT_COMMAND_MODULES
from wattbench_agent.argtypes import parse_command

# Subcommands that only print: `wattbench sql ... | head` ends them quietly (SIGPIPE at its default). Everything
# else (servers, the load generator, the agent) keeps Python's default, where a peer hanging up is an EPIPE error
# on that one socket, not the death of the process.
_QUIET_ON_CLOSED_PIPE = ("sql", "report", "runs")

# Modules that expose `register(subparsers)`; each adds its subcommands and sets `func` on its parser. The agent's
# own subcommands (agent, load, inspect, emulate, telemetry, deploy, make-tiny-model) are `wattbench-agent`'s too.
_COMMAND_MODULES = (
    "pipelines.commands",  # run, runs, sql, ingest
    "pipelines.report_cli",  # report
    "pipelines.import_cli",  # import
    "pipelines.predict_cli",  # predict
    *AGENT_COMMAND_MODULES,
)


# Every command and the module that registers it: `wattbench sql ...` or `wattbench load --help` builds its parser
# from that module alone, so it imports none of the others (the load generator's httpx and numpy, the predictor's
# emulator, ...). tests/test_cli_imports.py keeps this map true to what the modules register.
OWN_COMMANDS = {
    "run": "pipelines.commands",
    "runs": "pipelines.commands",
    "sql": "pipelines.commands",
    "spec": "pipelines.commands",
    "ingest": "pipelines.commands",
    "report": "pipelines.report_cli",
    "import": "pipelines.import_cli",
    "predict": "pipelines.predict_cli",
    "agent": "wattbench_agent.cli",
    "load": "wattbench_agent.loadgen.cli",
    "inspect": "wattbench_agent.loadgen.inspect_cli",
    "emulate": "wattbench_agent.emulator.cli",
    "telemetry": "wattbench_agent.telemetry.cli",
    "deploy": "wattbench_agent.engines.cli",
    "make-tiny-model": "wattbench_agent.engines.cli",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (for one of OWN_COMMANDS) a parser with only the commands of that command's module."""
    parser = argparse.ArgumentParser(
        prog="wattbench",
        description="Benchmark LLM serving engines on your traffic: latency, tokens per joule, $ per 1M tokens.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in [OWN_COMMANDS[command]] if command in OWN_COMMANDS else _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that component is not in this build yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    args = parse_command(parser, argv)  # an unknown flag: one line naming the subcommand
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    quiet = (
        hasattr(signal, "SIGPIPE")
        and args.command in _QUIET_ON_CLOSED_PIPE
        and threading.current_thread() is threading.main_thread()
    )
    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL) if quiet else None
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("wattbench: interrupted; everything measured so far is on disk", file=sys.stderr)
        return 130
    finally:
        if quiet:  # called in-process (tests, notebooks): leave the caller's disposition as it was
            signal.signal(signal.SIGPIPE, previous)


if __name__ == "__main__":
    sys.exit(main())
