"""`wattbench agent --spec SPEC.json [--out DIR]`: run the bench agent by hand (Dagster runs it via Pipes)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def stop_on_sigterm() -> None:
    """SIGTERM (Dagster terminating the run, a pod being deleted, `kill`) stops the agent the way Ctrl-C does:
    the engine it started is stopped and the bundle is closed with complete=false. (SIGKILL cannot be caught;
    the bundle is still loadable then, see docs/RELIABILITY.md.)"""
    import signal

    from wattbench_agent.runner import STOP

    seen: list[int] = []

    def _terminate(signum, frame):
        # Only the first signal acts. Later ones come in bursts (the kernel sends PR_SET_PDEATHSIG once for each
        # thread of the dying parent the agent is handed to on its way to init), and Python runs a handler inside
        # the one before it: a second STOP.set() there waited for the Event's lock that the first held, for ever.
        if seen:
            return
        seen.append(signum)
        STOP.set()
        raise KeyboardInterrupt(f"terminated by {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, _terminate)


def interrupted_message(out: str, exc: BaseException) -> str:
    return (
        f"wattbench agent: interrupted ({exc or 'SIGINT'}); {out} keeps every load point finished before it "
        f"(manifest complete=false); load it with `wattbench ingest {out}`, or run the spec again (the partial "
        "attempt is kept under attempts/<n>/)"
    )


def _run(args: argparse.Namespace) -> int:
    from wattbench_agent.runner import run_spec
    from wattbench_agent.wire import AgentSpec, WireError

    try:
        spec = AgentSpec.from_json(Path(args.spec).read_text())
    except FileNotFoundError:
        print(f"wattbench agent: {args.spec}: spec file not found", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"wattbench agent: {args.spec}: not valid JSON ({exc.msg} at line {exc.lineno})", file=sys.stderr)
        return 2
    except WireError as exc:
        print(f"wattbench agent: {args.spec}: {exc}", file=sys.stderr)
        return 2
    if args.out:
        spec = spec.with_out(args.out)
    try:  # before any engine starts: a folder that cannot be made (a name past the file system's limit) is one line
        Path(spec.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(
            f"wattbench agent: cannot make the bundle folder {spec.out[:200]!r} ({exc.strerror or exc}); expected a "
            "folder this user can write",
            file=sys.stderr,
        )
        return 2
    stop_on_sigterm()
    try:
        out = run_spec(spec, log=lambda m: print(m, file=sys.stderr, flush=True))
    except KeyboardInterrupt as exc:
        print(interrupted_message(spec.out, exc), file=sys.stderr, flush=True)
        return 130
    print(out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "agent", help="run the bench agent on a spec (start engines, drive load, sample GPUs) into a bundle"
    )
    p.add_argument("--spec", required=True, help="agent spec JSON (see docs/CONTRACTS.md)")
    p.add_argument("--out", help="bundle folder (overrides the spec's 'out')")
    p.set_defaults(func=_run)
