"""argparse types shared by the agent's and the control plane's command lines: a bad number is one argparse
error naming the flag and what was expected, never a traceback or a value quietly taken as something else.

    p.add_argument("--port", type=port_number)
    p.add_argument("--duration", type=finite_float(minimum=0))

Stdlib only.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (0: a free one). `--port 99999` must not listen on another port."""
    try:
        port = int(text, 10)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port number; expected an integer 0-65535 (0 picks a free port)"
        ) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{port} is out of range; expected a port number 0-65535 (0 picks a free port)"
        )
    return port


def check_finite(
    value: float, what: str, minimum: float | None = None, maximum: float | None = None, strict_minimum: bool = False
) -> float:
    """`value` as a float if it is finite and within the bounds, else ValueError naming `what`."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if minimum is not None and (number <= minimum if strict_minimum else number < minimum):
        raise ValueError(f"{what} must be {'>' if strict_minimum else '>='} {minimum:g}, got {number:g}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{what} must be <= {maximum:g}, got {number:g}")
    return number


def finite_float(
    minimum: float | None = None, maximum: float | None = None, strict_minimum: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite float within the bounds (`--rate nan`, `--duration inf` are errors)."""

    def parse(text: str) -> float:
        try:
            return check_finite(text, "the value", minimum, maximum, strict_minimum)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace("the value ", "")) from None

    parse.__name__ = "finite number"  # argparse says "invalid finite number value" for what it cannot call
    return parse


def bounded_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number within the bounds."""

    def parse(text: str) -> int:
        try:
            number = int(text, 10)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if minimum is not None and number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {number}")
        if maximum is not None and number > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {number}")
        return number

    parse.__name__ = "whole number"
    return parse


def parse_command(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but arguments no subcommand knows are one line naming the subcommand (`wattbench
    load: unrecognized arguments: --foo`) and exit 2, not the top-level usage line, which says nothing of them."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = getattr(args, "command", None)
        where = f"{parser.prog} {command}" if command else parser.prog
        hint = f" ({where} --help lists its flags)" if command else ""
        print(f"{where}: unrecognized arguments: {' '.join(extra)}{hint}", file=sys.stderr)
        raise SystemExit(2)
    return args
