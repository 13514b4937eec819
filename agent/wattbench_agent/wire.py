"""The agent's wire: what the control plane sends the bench agent (an agent spec), typed and versioned.

One home for every default: the control plane builds an `AgentSpec` (wattbench/plan.py `agent_spec`), sends it
as JSON (a file for `wattbench-agent --spec`, the Pipes extras under Dagster), and the agent reads it back with
`AgentSpec.from_dict`. Neither side re-defaults a field. A spec of an older wire version is read where it can be
(version 1 was the untyped dict of wattbench 0.1: the same field names, settings on each deployment).

    spec = AgentSpec(run_id="r1", out="/tmp/b", deployments=(DeploymentSpec(...),), repeats=3)
    AgentSpec.from_json(spec.to_json()) == spec

Stdlib only.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.safety import plain_name_problem

if TYPE_CHECKING:  # the load generator loads where a load point is parsed
    from wattbench_agent.loadgen.spec import LoadSpec

WIRE_VERSION = 2

# Bounds of the settings an agent spec carries (the plan's own bounds are these: wattbench/plan.py). A value past
# one is a typo or an attack, not a benchmark: idle_baseline_s 1e9 held the agent for 31 years.
MAX_SAMPLER_HZ = 100.0
MAX_IDLE_BASELINE_S = 3600.0
MAX_IDLE_QUIET_S = 600.0  # the quiet time waited for before an idle window
MAX_WARMUP_REQUESTS = 100_000
MAX_HEALTH_TIMEOUT_S = 86400.0
MAX_REPEAT = 1000
MAX_SERVER_STARTS = 20  # a plan's server_starts (wattbench/plan.py): each start is a whole engine start


SERVER_START_ENV = "WATTBENCH_SERVER_START"  # set in an engine's environment: which start of it this is (1-based)


def start_mark(start: int) -> str:
    """What a load point's or a search probe's id carries after its label when it ran in a later server start
    (`@s2`): ids stay unique over starts, and a run of one start keeps the ids it always had."""
    return f"@s{start}" if start > 1 else ""


MAX_TP = 64
# a run id names the bundle's folder where `wattbench spec` chooses it (`bundle-RUN`): a plan's name (64) and a suffix
MAX_RUN_ID_CHARS = 128
SOURCES = ("measured", "emulated")
TELEMETRY = ("auto", "nvml", "dcgm", "emulated", "none")


class WireError(ValueError):
    """An agent spec that cannot be run: names the field and what was expected."""


# -- field rules: each returns what was expected when a value breaks it (None: the value is fine) ---------------
def _text(optional: bool = False):
    def rule(v: Any) -> str | None:
        if v is None and optional:
            return None
        return None if isinstance(v, str) and v else "a non-empty string" + (" or null" if optional else "")

    return rule


def _plain(max_len: int, optional: bool = False):
    """A name that becomes a file or folder name as it is (safety.plain_name_problem)."""

    def rule(v: Any) -> str | None:
        if v is None and optional:
            return None
        problem = plain_name_problem(v, max_len)
        return None if problem is None else problem.split(" is not a plain name; expected ", 1)[-1]

    return rule


def _integer(lo: int, hi: int, optional: bool = False):
    def rule(v: Any) -> str | None:
        if v is None and optional:
            return None
        ok = isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
        return None if ok else f"an integer {lo}-{hi:,}" + (" or null" if optional else "")

    return rule


def _number(lo: float, hi: float, strict: bool = False):
    def rule(v: Any) -> str | None:
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = number and (v > lo if strict else v >= lo) and v <= hi
        return None if ok else f"a number {'>' if strict else '>='} {lo:g} and <= {hi:g}"

    return rule


def _flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _one_of(*choices: str):
    def rule(v: Any) -> str | None:
        return None if v in choices else "one of " + ", ".join(choices)

    return rule


def _mapping(v: Any) -> str | None:
    return None if isinstance(v, dict) else "an object"


def _check(obj: Any, rules: dict[str, Any], where: str) -> None:
    for name, rule in rules.items():
        value = getattr(obj, name)
        expected = rule(value)
        if expected:
            raise WireError(f"{where}: field '{name}' is {value!r:.80}; expected {expected}")


@dataclass(frozen=True)
class LoadPointSpec:
    """One load point of one deployment, one repeat of it."""

    load_point_id: str  # unique in the run: <deployment>:<workload>:<label>[#<repeat>]
    workload: str
    point_label: str  # c32, gamma-r6-b0.25, ...: the same for every repeat and every engine
    load: dict[str, Any]  # LoadSpec fields, less url and model (the deployment supplies them)
    repeat: int = 1  # 1-based, unique over the point's server starts (start 2 of 2 x 3 repeats holds 4, 5, 6)
    # which start of the deployment's engine runs it (1-based): the agent starts the engine once per start, runs that
    # start's points, and stops it (docs/MEASUREMENT.md, "Server starts"); load_runs.server_start
    server_start: int = 1
    # an SLO capacity search from this load (loadgen/search.py SearchSpec fields): its probes are the point's load
    # runs, each with its own id (<deployment>:<workload>:<label>[#<n>]); None: the load point itself
    search: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        where = f"load point {self.load_point_id!r:.80}"
        _check(
            self,
            {
                "load_point_id": _text(),
                "workload": _text(),
                "point_label": _text(),
                "load": _mapping,
                "repeat": _integer(1, MAX_REPEAT),
                "server_start": _integer(1, MAX_SERVER_STARTS),
            },
            where,
        )
        from wattbench_agent.loadgen.spec import LoadSpecError

        try:  # every duration, count and rate within its bounds before any engine starts
            self.load_spec  # noqa: B018 (parsed here, once: the agent runs this object)
        except (LoadSpecError, TypeError) as exc:
            raise WireError(f"{where}: load: {exc}") from None

    @cached_property
    def load_spec(self) -> LoadSpec:
        """`load` parsed (LoadSpec.from_dict, at construction): the typed load the agent runs, url and model left to
        the deployment (LoadSpec.replace). Not a field: the wire form stays `load`, a mapping."""
        from wattbench_agent.loadgen.spec import LoadSpec

        return LoadSpec.from_dict(dict(self.load))


@dataclass(frozen=True)
class DeploymentSpec:
    """One engine deployment: how to start (or reach) it, on which GPUs, and its load points in run order."""

    deployment_id: str
    engine_config: EngineConfig
    build_id: str | None = None
    target: str = "local"  # local | external
    url: str | None = None  # external engines: the endpoint measured
    artifact_path: str | None = None  # a built engine (TensorRT-LLM)
    port: int | None = None  # None: a free port
    gpus: tuple[str, ...] | None = None  # GPU indices or UUIDs; None: the agent assigns free ones (tp of them)
    env: dict[str, str] = field(default_factory=dict)  # the engine process's extra environment, this engine only
    health_timeout_s: float = 600.0  # start -> healthy, at most (TensorRT-LLM and vLLM differ widely)
    load_points: tuple[LoadPointSpec, ...] = ()

    def __post_init__(self) -> None:
        where = f"deployment {self.deployment_id!r:.80}"
        if self.target not in ("local", "external"):
            raise WireError(f"deployment {self.deployment_id}: target must be local or external, got {self.target!r}")
        _check(
            self,
            {
                "deployment_id": _text(),
                "build_id": _text(optional=True),
                "url": _text(optional=True),
                "artifact_path": _text(optional=True),
                "port": _integer(0, 65535, optional=True),
                "env": _mapping,
                "health_timeout_s": _number(0, MAX_HEALTH_TIMEOUT_S, strict=True),
            },
            where,
        )
        cfg = self.engine_config
        _check(
            cfg,
            {
                "engine": _text(),
                "model": _text(),
                "config_name": _text(),
                "precision": _text(),
                "tp": _integer(1, MAX_TP),
                "gpu": _text(),
                "profile": _text(optional=True),
                "options": _mapping,
            },
            f"{where}.engine_config",
        )
        bad = {k: v for k, v in self.env.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise WireError(
                f"deployment {self.deployment_id}: env values must be strings; got "
                + ", ".join(f"{k}={v!r}" for k, v in bad.items())
            )


@dataclass(frozen=True)
class AgentSpec:
    """Everything one agent run does: its deployments, how often each point repeats, how it is measured."""

    run_id: str
    out: str  # the bundle folder
    deployments: tuple[DeploymentSpec, ...]
    source: str = "measured"  # measured | emulated
    plan_name: str | None = None
    telemetry: str = "auto"  # auto | nvml | dcgm | emulated | none
    sampler_hz: float = 10.0
    idle_baseline_s: float = 3.0  # idle power window with the engines loaded, before and after load
    idle_quiet_s: float = 3.0  # before each idle window, wait until the GPUs were quiet this long (util 0, power flat)
    idle_quiet_timeout_s: float = 30.0  # ... at most this long; then the window is taken anyway and flagged
    warmup_requests: int = 0  # unrecorded requests once an engine is up
    start_together: bool = False  # start a round's engines at once (faster; startup_s then overlaps)
    energy_crosscheck: bool = False
    version: int = WIRE_VERSION

    def __post_init__(self) -> None:
        _check(
            self,
            {
                "run_id": _plain(MAX_RUN_ID_CHARS),
                "out": _text(),
                "source": _one_of(*SOURCES),
                "plan_name": _plain(64, optional=True),
                "telemetry": _one_of(*TELEMETRY),
                "sampler_hz": _number(0, MAX_SAMPLER_HZ, strict=True),
                "idle_baseline_s": _number(0, MAX_IDLE_BASELINE_S),
                "idle_quiet_s": _number(0, MAX_IDLE_QUIET_S),
                "idle_quiet_timeout_s": _number(0, MAX_IDLE_BASELINE_S),
                "warmup_requests": _integer(0, MAX_WARMUP_REQUESTS),
                "start_together": _flag,
                "energy_crosscheck": _flag,
            },
            "agent spec",
        )
        names = [d.deployment_id for d in self.deployments]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise WireError(f"deployment ids must be unique; repeated: {', '.join(dupes)}")

    # -- JSON ---------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for dep in out["deployments"]:  # a point without a search says nothing of it: agents before searches read it
            for point in dep["load_points"]:
                if point.get("search") is None:
                    point.pop("search", None)
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AgentSpec:
        return cls.from_dict(json.loads(text, object_pairs_hook=_unique_keys))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentSpec:
        if isinstance(data, AgentSpec):
            return data
        if not isinstance(data, dict):
            raise WireError(f"an agent spec is a JSON object, got {type(data).__name__}")
        version = data.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise WireError(f"agent spec: field 'version' is {version!r:.80}; expected an integer >= 1")
        if version > WIRE_VERSION:
            raise WireError(
                f"agent spec version {version} is newer than this agent's {WIRE_VERSION}; "
                "upgrade wattbench-agent on this node"
            )
        data = dict(data)
        deps_raw = data.pop("deployments", None)
        if not isinstance(deps_raw, list) or not deps_raw:
            raise WireError("field 'deployments': expected a non-empty list of deployments")
        if version == 1:  # wattbench 0.1: measurement settings were repeated on every deployment
            first = deps_raw[0]
            for key in ("telemetry", "sampler_hz", "idle_baseline_s", "warmup_requests", "energy_crosscheck"):
                if key in first:
                    data.setdefault(key, first[key])
        data["deployments"] = tuple(_deployment(d, i, version) for i, d in enumerate(deps_raw))
        data["version"] = WIRE_VERSION
        return _build(cls, data, "agent spec")

    def with_out(self, out: str) -> AgentSpec:
        return replace(self, out=str(out))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (json keeps the last of two silently)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise WireError(f"agent spec: the key {k[:80]!r} is given twice in one object; expected each key once")
        out[k] = v
    return out


def _build(cls, data: dict[str, Any], where: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise WireError(f"{where}: unknown field(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise WireError(f"{where}: {exc}") from None


_V1_DEPLOYMENT_SETTINGS = (
    "telemetry",
    "sampler_hz",
    "idle_baseline_s",
    "warmup_requests",
    "energy_crosscheck",
    "gpu_uuids",
)


def _deployment(raw: dict[str, Any], index: int, version: int) -> DeploymentSpec:
    if not isinstance(raw, dict):
        raise WireError(f"deployments[{index}]: expected an object, got {type(raw).__name__}")
    raw = dict(raw)
    where = f"deployments[{index}] ({raw.get('deployment_id', '?')})"
    if version == 1:
        uuids = raw.get("gpu_uuids")
        for key in _V1_DEPLOYMENT_SETTINGS:
            raw.pop(key, None)
        if uuids:
            raw["gpus"] = uuids
    cfg = raw.get("engine_config")
    if isinstance(cfg, dict):
        raw["engine_config"] = _build(EngineConfig, cfg, f"{where}.engine_config")
    elif not isinstance(cfg, EngineConfig):
        raise WireError(f"{where}: field 'engine_config' is required")
    if raw.get("gpus") is not None:
        if not isinstance(raw["gpus"], (list, tuple)) or not all(isinstance(g, (str, int)) for g in raw["gpus"]):
            raise WireError(f"{where}: field 'gpus' is {raw['gpus']!r:.80}; expected a list of GPU indices or UUIDs")
        raw["gpus"] = tuple(str(g) for g in raw["gpus"])
    env = raw.get("env") or {}
    if not isinstance(env, dict):
        raise WireError(f"{where}: field 'env' is {env!r:.80}; expected an object of environment variables")
    raw["env"] = dict(env)
    points = []
    load_points = raw.get("load_points") or ()
    if not isinstance(load_points, (list, tuple)):
        raise WireError(f"{where}: field 'load_points' is {load_points!r:.80}; expected a list of load points")
    for j, p in enumerate(load_points):
        if isinstance(p, LoadPointSpec):
            points.append(p)
            continue
        if not isinstance(p, dict):
            raise WireError(f"{where}.load_points[{j}]: expected an object, got {type(p).__name__}")
        p = dict(p)
        if version == 1:  # {"load_point_id", "workload", "spec"}
            p["load"] = p.pop("spec", {})
            p.setdefault("point_label", str(p.get("load_point_id", "")).rsplit(":", 1)[-1])
        points.append(_build(LoadPointSpec, p, f"{where}.load_points[{j}]"))
    raw["load_points"] = tuple(points)
    return _build(DeploymentSpec, raw, where)
