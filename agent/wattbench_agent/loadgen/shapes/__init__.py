"""Load shapes: one module per shape, each registering itself here; everything that knows about shapes reads this.

A shape says, in its own module (see docs/CONTRIBUTING.md, "Add a load shape"):
- `check(p)`: what the shape needs of a load point's fields (plan validation and LoadSpec.validate both ask it);
- `label(p)`: the point's short, stable name (c32, gamma-r6-b0.25, ...; load_runs.point_label, load point ids);
- `offsets(p, horizon_s, seed)`: the load generator's send schedule (open-loop shapes);
- `twin_arrivals(p, horizon_s, seed)`: the arrivals the emulator's `simulate` replays for the same point.

`p` is any mapping of LoadSpec field names (a plan's load spec dict, `vars(LoadSpec)`, `vars(emulator Workload)`).
Modules in this package whose name does not start with "_" are imported when the package is, so a new shape is one
new file. Agent side: stdlib + numpy only.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # numpy loads where a schedule is made, not with `wattbench load --help`
    import numpy as np


@dataclass(frozen=True)
class Param:
    """A parameter of a shape's own, beyond LoadSpec's fields: plans' load points take it as a key, the wire carries
    it in the LoadSpec (flat, as its fields; `LoadSpec.params` on the agent), `wattbench load` offers `flag` (and
    `aliases`), and the emulator's Workload and `wattbench predict` pass it on. Unset, the shape reads `default`
    (`Shape.param`). Shapes that share a parameter (gamma's and surge's burstiness) declare the same Param."""

    name: str
    type: type  # int | float | str (a path is a str: it travels on the wire as one)
    default: Any = None
    minimum: float | None = None  # inclusive bounds of a number (exclusive_minimum: the minimum itself is refused)
    maximum: float | None = None
    help: str = ""
    exclusive_minimum: bool = False
    cli: str | None = None  # `wattbench load`'s flag when not --<name with dashes> (vllm bench serve's names)
    aliases: tuple[str, ...] = ()  # further flags for the same parameter
    metavar: str | None = None
    # `wattbench load` picks the owning shape from vllm bench serve's flags (--rate with --burstiness or
    # --surge-factor, --trace), not only from --shape: the flag's help then names no "--shape"
    shape_from_flags: bool = False
    # the flag names the load on its own (--trace FILE): it joins --concurrency and --rate's mutually exclusive group
    exclusive: bool = False

    @property
    def flag(self) -> str:
        return self.cli or "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.flag, *self.aliases)

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` for this parameter (one line naming it), or None."""
        if self.type is str:
            return None if isinstance(value, str) else f"{self.name} must be a string, got {value!r:.80}"
        kinds = (int,) if self.type is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            return f"{self.name} must be {'an integer' if self.type is int else 'a finite number'}, got {value!r:.80}"
        low = self.minimum
        if low is not None and (value <= low if self.exclusive_minimum else value < low):
            return f"{self.name} must be {'>' if self.exclusive_minimum else '>='} {low:g}, got {value:g}"
        if self.maximum is not None and value > self.maximum:
            return f"{self.name} must be <= {self.maximum:g}, got {value:g}"
        return None


class Shape:
    """Base class of a load shape; subclasses set `name` and are registered with `@register`."""

    name: ClassVar[str] = ""
    # closed loop: `concurrency` streams send back to back (no schedule); open loop: requests go out at `offsets`
    closed_loop: ClassVar[bool] = False
    # bursty: arrivals meant to come in bursts (the head-to-head's "under a surge" row, the capacity plan's burst
    # point); ingest writes both traits into load_runs, so SQL asks `bursty` / `closed_loop`, never a shape's name
    bursty: ClassVar[bool] = False
    # the LoadSpec / plan load point fields this shape reads, besides the ones every point has
    fields: ClassVar[tuple[str, ...]] = ()
    # parameters of the shape's own (see Param): a new shape declares what it needs here, not in LoadSpec or the plan
    params: ClassVar[tuple[Param, ...]] = ()
    # a schedule with an end of its own (a trace): duration_s 0 then means all of it
    ends_by_itself: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    order: ClassVar[int] = 100  # where the shape sorts in lists, legends and pictures (closed loop first)

    def check(self, p: Mapping[str, Any]) -> str | None:
        """What is missing or wrong in the point's fields for this shape (one line), or None."""
        return None

    def param(self, p: Mapping[str, Any], name: str) -> Any:
        """The point's value of this shape's parameter `name`, else its declared default."""
        value = p.get(name)
        return next(q.default for q in self.params if q.name == name) if value is None else value

    def params_problem(self, values: Mapping[str, Any]) -> str | None:
        """What is wrong with `values` as this shape's parameters (an undeclared name, a type, a bound), or None."""
        declared = {q.name: q for q in self.params}
        for name, value in values.items():
            if name not in declared:
                known = ", ".join(declared) or "none"
                return f"shape {self.name!r} has no parameter {name!r:.80} (its parameters: {known})"
            if value is not None and (problem := declared[name].problem(value)):
                return problem
        return None

    def label(self, p: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def offsets(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> np.ndarray:
        """Send offsets (s from t0, ascending, in [0, horizon_s)); open-loop shapes only. horizon_s may be inf
        when p has max_requests: then exactly that many."""
        raise ValueError(f"shape {self.name!r} is closed loop: it has no send schedule")

    def request_rows(self, p: Mapping[str, Any]) -> list | None:
        """Per-request contents the shape itself dictates (a trace's rows: prompt or lengths), or None."""
        return None

    def workload_name(self, p: Mapping[str, Any]) -> str | None:
        """The workload name a point of this shape gets when the caller names none (None: from its lengths)."""
        return None

    def twin_arrivals(self, p: Mapping[str, Any], horizon_s: float, seed: int = 0) -> list[float]:
        """Arrival times (s) the emulator's simulate submits; by default the load generator's own schedule."""
        return [float(t) for t in self.offsets(p, horizon_s, seed)]


SHAPES: dict[str, Shape] = {}


def register(cls: type[Shape]) -> type[Shape]:
    """Class decorator: register one instance of `cls` under `cls.name`."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no shape name")
    SHAPES[cls.name] = cls()
    return cls


def names() -> tuple[str, ...]:
    return tuple(SHAPES)


def get(name: str) -> Shape:
    """The shape registered under `name`; an unknown name is one ValueError naming the known ones."""
    try:
        return SHAPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown load shape {name!r}; expected one of {', '.join(SHAPES)}") from None


def label(p: Mapping[str, Any]) -> str:
    """A load point's label: its shape's (c32, poisson-r4, gamma-r6-b0.25, surge-r2x5, trace-<file stem>)."""
    return get(p["shape"]).label(p)


def check(p: Mapping[str, Any]) -> str | None:
    """The problem with a load point's shape and shape fields, or None."""
    shape = p.get("shape")
    if shape not in SHAPES:
        return f"shape must be one of {', '.join(SHAPES)}; got {shape!r}"
    own = {q.name for q in SHAPES[shape].params}
    return SHAPES[shape].params_problem({k: v for k, v in p.items() if k in own}) or SHAPES[shape].check(p)


def params() -> dict[str, Param]:
    """Every registered shape's own parameters by name (one Param per name: shapes that share a name share it)."""
    return {q.name: q for shape in SHAPES.values() for q in shape.params}


def arrival_offsets(
    shape: str, *, horizon_s: float, seed: int = 0, max_requests: int | None = None, **fields: Any
) -> np.ndarray:
    """The send schedule of an open-loop shape from keyword fields, e.g. arrival_offsets("poisson", rate=4,
    horizon_s=60); at most max_requests of them."""
    return get(shape).offsets({"shape": shape, "max_requests": max_requests, **fields}, horizon_s, seed)


# ------------------------------------------------------------------------------------ helpers for shape modules
def renewal_unit(k: float, rng: np.random.Generator, horizon: float, n: int | None = None) -> np.ndarray:
    """Arrival times of a unit-rate renewal process with gamma(k) gaps (mean 1; k = 1: Poisson) up to `horizon`
    or, when `n` is given, the first n of them (horizon may then be inf)."""
    import numpy as np

    if n is None and not math.isfinite(horizon):
        raise ValueError("an endless schedule: give a finite duration or max_requests")
    out: list[np.ndarray] = []
    t, got = 0.0, 0
    chunk = max(int(min(horizon, 1e7) * 1.2) + 16 if math.isfinite(horizon) else 0, int(n or 0) + 16, 16)
    while True:
        gaps = rng.gamma(shape=k, scale=1.0 / k, size=chunk) if k != 1.0 else rng.exponential(1.0, size=chunk)
        times = t + np.cumsum(gaps)
        out.append(times)
        got += len(times)
        t = float(times[-1])
        if t >= horizon or (n is not None and got >= n):
            break
    allt = np.concatenate(out)
    allt = allt[allt < horizon]
    return allt[:n] if n is not None else allt


def finish(offs: np.ndarray, p: Mapping[str, Any], horizon_s: float) -> np.ndarray:
    """Offsets cut to the horizon and to p's max_requests (the common tail of every schedule)."""
    offs = offs[offs < horizon_s] if horizon_s > 0 else offs[:1]
    n = p.get("max_requests")
    return offs[:n] if n is not None else offs


def positive(p: Mapping[str, Any], key: str) -> bool:
    value = p.get(key)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    ordered = sorted(SHAPES.items(), key=lambda item: (item[1].order, item[0]))
    SHAPES.clear()
    SHAPES.update(ordered)


_load_all()
