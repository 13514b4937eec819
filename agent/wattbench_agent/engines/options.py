"""Plan options (EngineConfig.options) -> an engine's documented command-line flags.

Each adapter declares a table {option: Flag(...)}; an option that is not in the table is an error naming the
accepted ones, so a typo never silently benchmarks the default. `extra_args` (a list, or a string split like a
shell would) is passed through verbatim for flags the table does not know.

Agent-side code: stdlib only.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class OptionError(ValueError):
    """An engine option the adapter does not know, or a value of the wrong type."""


@dataclass(frozen=True)
class Flag:
    flag: str | None  # the CLI flag, e.g. "--max-model-len"; None = not a flag of this command
    kind: Callable[[Any], Any] | type = str  # int | float | str | bool
    negatable: bool = False  # bool flags: False -> "--no-<flag>" (argparse BooleanOptionalAction)
    help: str = ""


def _coerce(key: str, value: Any, kind) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise OptionError(f"option {key!r} expects true/false, got {value!r}")
    if kind in (int, float):
        if isinstance(value, bool):
            raise OptionError(f"option {key!r} expects a number, got {value!r}")
        try:
            out = kind(value)
        except (TypeError, ValueError):
            raise OptionError(
                f"option {key!r} expects {'an integer' if kind is int else 'a number'}, got {value!r}"
            ) from None
        if kind is int and float(value) != out:
            raise OptionError(f"option {key!r} expects an integer, got {value!r}")
        return out
    return kind(value)


def normalise(
    options: dict[str, Any], table: dict[str, Flag], engine: str, aliases: dict[str, str] | None = None
) -> dict[str, Any]:
    """Options with '-' spelled '_', aliases resolved, values coerced; unknown keys raise OptionError."""
    out: dict[str, Any] = {}
    aliases = aliases or {}
    for raw_key, value in (options or {}).items():
        key = str(raw_key).replace("-", "_")
        key = aliases.get(key, key)
        if key == "extra_args":
            out[key] = shlex.split(value) if isinstance(value, str) else [str(v) for v in (value or [])]
            continue
        if key not in table:
            known = ", ".join(sorted([*table, "extra_args"]))
            raise OptionError(f"unknown {engine} option {raw_key!r}; accepted: {known}")
        out[key] = None if value is None else _coerce(key, value, table[key].kind)
    return out


def to_flags(options: dict[str, Any], table: dict[str, Flag]) -> list[str]:
    """Normalised options -> flags, in the table's order; None values are left out (the engine's default)."""
    args: list[str] = []
    for key, spec in table.items():
        if spec.flag is None or key not in options or options[key] is None:
            continue
        value = options[key]
        if spec.kind is bool:
            if value:
                args.append(spec.flag)
            elif spec.negatable:
                args.append("--no-" + spec.flag[2:])
        else:
            args += [spec.flag, str(value)]
    return args + list(options.get("extra_args") or [])
