"""`wattbench-agent` / `python -m wattbench_agent`: the agent's entry point, also what Dagster Pipes launches.

Under Pipes the spec arrives in the Pipes extras, progress goes to the Dagster UI as log lines, and each
load point's headline figures as a custom message. By hand: `wattbench-agent agent --spec FILE` (or just
`--spec FILE`), and the agent's other subcommands (load, emulate, telemetry, deploy, make-tiny-model).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from wattbench_agent import COMMAND_MODULES
from wattbench_agent.argtypes import parse_command


def build_parser(prog: str = "wattbench-agent") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="wattbench's bench agent: engines, load, GPU telemetry.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Launched by Dagster Pipes (dagster_pipes.DAGSTER_PIPES_CONTEXT_ENV_VAR set, no arguments): the spec is in the
    # Pipes extras. A subcommand (an emulator the agent started, say) is never the Pipes run, whatever it inherits.
    if os.environ.get("DAGSTER_PIPES_CONTEXT") and not argv:
        from dagster_pipes import open_dagster_pipes

        from wattbench_agent.cli import stop_on_sigterm
        from wattbench_agent.procs import die_with_parent
        from wattbench_agent.runner import STOP, run_spec
        from wattbench_agent.wire import AgentSpec

        stop_on_sigterm()  # a terminated Dagster run stops the engine and leaves a loadable bundle
        # and so does one killed outright (SIGKILL): the kernel sends SIGTERM when it dies; either way a watchdog
        # ends this process within a bounded time should the main thread not get there (procs.StopWatchdog)
        die_with_parent(stop=STOP)
        with open_dagster_pipes() as pipes:
            spec = AgentSpec.from_dict(pipes.get_extra("spec"))
            out = run_spec(spec, log=pipes.log.info, report=pipes.report_custom_message)
            pipes.report_custom_message({"bundle": str(out)})
        return 0
    if argv and argv[0].startswith("--") and argv[0] not in ("--help", "-h"):
        argv = ["agent", *argv]  # `python -m wattbench_agent --spec FILE`: the agent subcommand
    parser = build_parser()
    args = parse_command(parser, argv)  # an unknown flag: one line naming the subcommand
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("wattbench-agent: interrupted; everything measured so far is on disk", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
