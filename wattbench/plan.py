"""The benchmark plan: models x engines x workloads x prices, as a YAML file validated by a schema.

A bad plan gets one message naming the file, the field and what was expected; nothing runs on it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from wattbench_agent.bundle import file_kind
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.registry import adapter_for, engine_names
from wattbench_agent.loadgen import shapes
from wattbench_agent.loadgen.shapes import label as point_label  # noqa: F401 - the plan's name for it
from wattbench_agent.loadgen.spec import MAX_CONCURRENCY, MAX_RATE, MAX_TOKENS, MAX_WARMUP_S, MAX_WINDOW_S
from wattbench_agent.safety import is_plain_name, plain_name_problem
from wattbench_agent.wire import (
    MAX_IDLE_BASELINE_S,
    MAX_IDLE_QUIET_S,
    MAX_SAMPLER_HZ,
    MAX_SERVER_STARTS,
    MAX_WARMUP_REQUESTS,
    AgentSpec,
    DeploymentSpec,
    LoadPointSpec,
    start_mark,
)


class PlanError(ValueError):
    """A plan file that cannot be run, with a message naming the file, the field and what was expected."""


# Upper bounds: a value past them is a typo or an attack, not a benchmark (1e400 reads as inf; a concurrency of 1e9
# hung the load generator with nothing sent). Those of load points and agent settings are the agent's own
# (wattbench_agent.loadgen.spec, wattbench_agent.wire), which it applies to a spec written by hand too.
MAX_USD_PER_HOUR = 10_000.0
# Engines the agent starts are started this many times unless the plan says server_starts: one start's repeats say
# nothing of what the next start gives (docs/MEASUREMENT.md, "Server starts").
DEFAULT_SERVER_STARTS = 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class EngineSpec(_Strict):
    name: str = Field(description="Column name in reports, e.g. 'trtllm-like'")
    engine: str = Field(
        description="an engine of the adapter registry (wattbench_agent/engines/registry.py): "
        "emulator, trtllm, vllm, sglang, transformers, external, ..."
    )
    profile: Literal["trtllm-like", "vllm-like"] | None = None
    precision: Literal["fp16", "bf16", "fp8", "int4-awq"] = "fp16"
    tp: int = Field(1, ge=1, le=64)
    url: str | None = Field(None, description="external engines only: the endpoint to measure")
    options: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, StrictStr] = Field(
        default_factory=dict,
        description="extra environment of this engine's process only (values are strings; secrets - by name "
        "(TOKEN(S), KEY(S), SECRET, PASS, PWD, PAT, DSN, AUTH, CRED(ENTIAL)S, COOKIE) and by value (URL "
        "user:password@, Bearer/Basic credentials, sk-/ghp_/hf_ tokens) - are masked in rows and logs, and "
        "`wattbench spec` writes them to an owner-only file), "
        "e.g. VLLM_USE_FLASHINFER_SAMPLER: '0'",
    )
    checkpoint: str | None = Field(
        None,
        min_length=1,
        description="the checkpoint this engine loads instead of the plan's model: another copy of the same "
        "model, e.g. a pre-quantized fp8 one (a Hugging Face id or a folder on the GPU node), so online "
        "quantization and a pre-quantized checkpoint can be measured side by side. Engines that start a "
        "server only; a model partition other than the plan's own drops it",
    )
    gpus: list[int | str] | None = Field(
        None,
        min_length=1,
        description="the GPUs this engine runs on and is measured on (NVML indices or UUIDs), "
        "tp of them; omitted: the agent assigns free ones. Engines may name the same GPU (one is loaded at a time)",
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        # the name becomes file names (the engine's log in the bundle, build logs) and report columns
        if not is_plain_name(name):
            raise ValueError(
                f"{name[:80]!r} is not a plain name; expected letters, digits, '.', '_' or '-', starting "
                "with a letter or digit, at most 64 characters (it names files and report columns)"
            )
        return name

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        if engine not in engine_names():
            raise ValueError(f"unknown engine {engine[:80]!r}; expected one of {', '.join(engine_names())}")
        return engine

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} is not an environment variable name")
            if name == "CUDA_VISIBLE_DEVICES":
                raise ValueError(
                    "set the engine's GPUs with `gpus: [...]`, not CUDA_VISIBLE_DEVICES: the agent pins "
                    "the engine and reads exactly those GPUs' energy"
                )
        return env

    @model_validator(mode="after")
    def _what_the_engine_needs(self) -> EngineSpec:
        problem = adapter_for(self.engine).plan_problem(self.model_dump())
        if problem:
            raise ValueError(problem)
        if self.gpus is not None and len(self.gpus) != self.tp:
            raise ValueError(f"gpus names {len(self.gpus)} GPU(s) for tp={self.tp}; expected exactly tp of them")
        return self


class LoadPoint(_Strict):
    """One load point: what the load generator's LoadSpec takes, less url/model (the plan supplies them), and the
    parameters its shape declares of its own (shapes.Param: any other key is refused, naming the shape's)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    shape: str = Field(
        description="a load shape of the registry (wattbench_agent/loadgen/shapes/): concurrency, "
        "poisson, gamma, surge, trace, ..."
    )
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY)
    rate: float | None = Field(None, gt=0, le=MAX_RATE)

    @field_validator("shape")
    @classmethod
    def _known_shape(cls, shape: str) -> str:
        if shape not in shapes.SHAPES:
            raise ValueError(f"unknown load shape {shape[:80]!r}; expected one of {', '.join(shapes.SHAPES)}")
        return shape  # what the shape needs of the other fields is checked once sweeps are expanded (load_plan)

    @model_validator(mode="after")
    def _shape_params(self) -> LoadPoint:
        problem = shapes.get(self.shape).params_problem(self.model_extra or {})
        if problem:
            raise ValueError(problem)
        return self


def _sweep_keys() -> dict[str, type]:
    """What a workload's sweep may vary, and each one's type: concurrency, rate and the shapes' numeric params."""
    own = {q.name: q.type for q in shapes.params().values() if q.type in (int, float)}
    return {"concurrency": int, "rate": float, **own}


DEFAULT_RAMP_S = 2.0  # closed-loop points: streams start spread over this long unless load_options says ramp_s


class Slo(_Strict):
    ttft_ms: float | None = Field(None, gt=0, le=MAX_WINDOW_S * 1000)
    tpot_ms: float | None = Field(None, gt=0, le=MAX_WINDOW_S * 1000)
    e2e_ms: float | None = Field(None, gt=0, le=MAX_WINDOW_S * 1000)


class Search(_Strict):
    """An SLO capacity search (agent/wattbench_agent/loadgen/search.py): per deployment, the highest load meeting the
    plan's `slo` with `attainment`; every probe is a window of the workload's warmup_s + duration_s."""

    over: Literal["rate", "concurrency"] = Field(
        description="rate: open-loop arrivals (shape poisson or gamma); concurrency: closed-loop streams"
    )
    shape: Literal["poisson", "gamma"] = Field("poisson", description="a rate search's arrivals")
    burstiness: float | None = Field(None, gt=0, le=1000, description="gamma arrivals' shape k")
    attainment: float = Field(0.99, gt=0, le=1, description="share of requests that must meet every SLO bound")
    start: float | None = Field(None, gt=0, le=MAX_RATE, description="the first probe's load (req/s or streams)")
    min_load: float | None = Field(None, gt=0, le=MAX_RATE)
    max_load: float | None = Field(None, gt=0, le=MAX_RATE)
    growth: float = Field(2.0, gt=1, le=1000, description="bracket step")
    tolerance: float = Field(0.1, gt=0, le=10, description="relative width at which bisection stops")
    repeats: int = Field(3, ge=1, le=100, description="windows at the load found and one step below it")
    max_probes: int = Field(24, ge=1, le=1000)
    max_time_s: float = Field(3600.0, gt=0, le=MAX_WINDOW_S, description="wall time of one deployment's search")
    early_stop: bool = Field(True, description="end an open-loop probe whose queue grows without bound")
    slo: Slo | None = Field(
        None,
        description="the SLO searched for (default: the plan's slo); the probes' goodput and attainment in "
        "v_load_points stay counted against the plan's",
    )

    def search_spec(self, slo: dict[str, Any]) -> dict[str, Any]:
        """The agent's SearchSpec fields; `slo`: the plan's, used where the search names none."""
        d = self.model_dump(exclude={"shape", "burstiness", "slo"})
        own = self.slo.model_dump() if self.slo is not None else slo
        d["slo"] = {k: v for k, v in own.items() if v is not None}
        return d


class Workload(_Strict):
    name: str
    api: Literal["chat", "completions"] = "chat"
    input_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    random_range_ratio: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="spread the lengths as vllm bench serve's --random-range-ratio r: each request's prompt and "
        "output uniform over [floor(L(1 - r)), ceil(L(1 + r))] around input_tokens / output_tokens (0: every request "
        "the same; a closed loop of equal requests can lock into one phase, docs/MEASUREMENT.md)",
    )
    warmup_s: float = Field(2.0, ge=0, le=MAX_WARMUP_S)
    duration_s: float = Field(20.0, gt=0, le=MAX_WINDOW_S)
    points: list[LoadPoint] = Field(default_factory=list, description="the load points (none with `search`)")
    search: Search | None = Field(
        None, description="instead of points: search the highest load meeting the plan's slo (docs/LOADGEN.md)"
    )
    sweep: dict[str, list[float]] | None = Field(
        None, description="expand each point over these values, e.g. {concurrency: [8, 32]}"
    )
    load_options: dict[str, Any] = Field(
        default_factory=dict,
        description="further load generator settings (LoadSpec fields: input_tokens_dist, dataset_path, "
        "shared_prefix_tokens, tokenizer, seed, timeout_s, ...)",
    )

    @field_validator("sweep")
    @classmethod
    def _sweep_within_bounds(cls, sweep: dict[str, list[float]] | None, info: ValidationInfo):
        """Sweep values go through the point's own field bounds (model_copy alone would not check them)."""
        numeric = _sweep_keys()
        for key, values in (sweep or {}).items():
            if key not in numeric:
                raise ValueError(
                    f"sweep key {key!r} is not a load point field; expected some of {', '.join(sorted(numeric))}"
                )
            for point in info.data.get("points") or ():
                for value in values:
                    cast = numeric[key](value)
                    try:
                        LoadPoint.model_validate({**point.model_dump(exclude_none=True), key: cast})
                    except ValidationError as exc:
                        raise ValueError(f"{key}={cast}: {exc.errors()[0]['msg']}") from None
        return sweep

    @model_validator(mode="after")
    def _points_or_search(self) -> Workload:
        if self.search is not None and (self.points or self.sweep):
            raise ValueError("a workload has either points (and a sweep) or a search, not both")
        if self.search is None and not self.points:
            raise ValueError("a workload needs points (at least one) or a search")
        return self

    def search_load(self) -> dict[str, Any]:
        """A search workload's base load (LoadSpec fields, less url/model), at the search's first load."""
        assert self.search is not None
        from wattbench_agent.loadgen.search import SearchSpec

        start, _, _ = SearchSpec(
            over=self.search.over, start=self.search.start, min_load=self.search.min_load, max_load=self.search.max_load
        ).bounds()
        point: dict[str, Any] = (
            {"shape": "concurrency", "concurrency": int(start)}
            if self.search.over == "concurrency"
            else {"shape": self.search.shape, "rate": float(start)}
        )
        if self.search.over == "rate" and self.search.burstiness is not None and self.search.shape == "gamma":
            point["burstiness"] = self.search.burstiness  # poisson has no burstiness (a LoadSpec would refuse it)
        return self._load_spec(point)

    def expanded_points(self) -> list[LoadPoint]:
        if not self.sweep:
            return list(self.points)
        out: list[LoadPoint] = []
        for point in self.points:
            for key, values in self.sweep.items():
                for value in values:
                    cast = _sweep_keys()[key](value)
                    out.append(LoadPoint.model_validate({**point.model_dump(exclude_none=True), key: cast}))
        return out

    def load_specs(self) -> list[dict[str, Any]]:
        """One load generator spec (LoadSpec fields, less url/model) per expanded point."""
        return [
            self._load_spec({k: v for k, v in point.model_dump().items() if v is not None})
            for point in self.expanded_points()
        ]

    def _load_spec(self, point: dict[str, Any]) -> dict[str, Any]:
        """The workload's load generator spec at one point (a plan point, or a search's first load): the workload's
        lengths and timings, the point, then load_options over both."""
        spec = {
            "api": self.api,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "warmup_s": self.warmup_s,
            "duration_s": self.duration_s,
            "workload": self.name,
        }
        if self.random_range_ratio:
            spec["random_range_ratio"] = self.random_range_ratio
        spec.update(point)
        spec.update(self.load_options)
        if shapes.get(spec["shape"]).closed_loop and "ramp_s" not in self.load_options and self.warmup_s > 0:
            # closed-loop streams ramp in by default: started together they stay in lockstep (prefill waves),
            # measured on the emulator and on the H200; over at most 2 s, inside the warm-up
            spec["ramp_s"] = min(DEFAULT_RAMP_S, self.warmup_s)
        if (
            spec.get("dataset_path")
            and "output_tokens" not in self.model_fields_set
            and "output_tokens_dist" not in spec
        ):
            spec["output_tokens_dist"] = {"kind": "dataset"}  # a dataset's own reply lengths, as vLLM's
        return spec


class Prices(_Strict):
    gpu_hour_usd: float = Field(gt=0, le=MAX_USD_PER_HOUR, description="price of one GPU-hour, $")
    energy_kwh_usd: float = Field(0.12, ge=0, le=100)
    pue: float = Field(1.3, ge=1, le=10)
    label: str = "example prices; replace with your own"


class CapacityProfile(_Strict):
    """The traffic to plan capacity for (sql/capacity_plan.sql, sql/hybrid_plan.sql; docs/REPORTS.md)."""

    steady_qps: float = Field(ge=0, le=1e7, description="requests/s of the steady baseline, served around the clock")
    peak_qps: float = Field(gt=0, le=1e7, description="requests/s at the burst peak (>= steady_qps)")
    burst_hours_per_day: float = Field(4.0, ge=0, le=24, description="hours a day the elastic pool runs")
    input_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="typical prompt length; None: every measured length"
    )
    output_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="typical output length; None: every measured length"
    )
    elastic_gpu_hour_usd: float | None = Field(
        None,
        gt=0,
        le=MAX_USD_PER_HOUR,
        description="$ per GPU-hour of the elastic pool (on-demand); None: prices.gpu_hour_usd",
    )

    @model_validator(mode="after")
    def _peak_at_least_steady(self) -> CapacityProfile:
        if self.peak_qps < self.steady_qps:
            raise ValueError(f"peak_qps ({self.peak_qps:g}) must be >= steady_qps ({self.steady_qps:g})")
        return self


class Validation(_Strict):
    max_error_rate: float = Field(0.01, ge=0, le=1)
    min_energy_window_s: float = Field(20.0, ge=0, le=MAX_WINDOW_S)
    severity: dict[str, Literal["error", "warn"]] = Field(
        default_factory=dict, description="expectation name -> severity, overriding the suite's default"
    )


class Plan(_Strict):
    name: str = Field(description="the plan's name: plain (letters, digits, '.', '_', '-'), at most 64 characters")
    description: str = ""
    model: str
    twin_model: str | None = Field(
        None,
        description="what the digital twin (wattbench predict, wattbench/twin/) takes `model` to be: a "
        "twin model name (wattbench_agent/emulator/specs.json: id, Hub name or alias) or a Hugging Face config.json "
        "(the file, or a folder holding one; relative to the plan's folder). Default: `model` itself, which may "
        "also be a local model folder holding a config.json",
    )
    gpu: str = "h100-sxm"
    engines: list[EngineSpec] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    prices: Prices
    slo: Slo = Field(default_factory=Slo)
    capacity: CapacityProfile | None = Field(None, description="traffic profile for the capacity plan")
    validation: Validation = Field(default_factory=Validation)
    repeats: int = Field(
        1,
        ge=1,
        le=100,
        description="run every load point this many times in every server start, interleaved across "
        "engines (A B A B), for 95% intervals on every figure",
    )
    server_starts: int | None = Field(
        None,
        ge=1,
        le=MAX_SERVER_STARTS,
        description="start each engine this many times, one after another, each start running `repeats` of every "
        "point (and the capacity search once), so that every interval holds what another start of the same engine "
        "gives (docs/MEASUREMENT.md, 'Server starts'). Default: 2 for engines the agent starts (the emulator "
        "included: it reseeds per start), 1 for an external URL (it cannot be restarted)",
    )
    telemetry: Literal["auto", "nvml", "dcgm", "emulated", "none"] = "auto"  # dcgm: WATTBENCH_DCGM_URL on the agent
    sampler_hz: float = Field(10.0, gt=0, le=MAX_SAMPLER_HZ)
    idle_baseline_s: float = Field(3.0, ge=0, le=MAX_IDLE_BASELINE_S)
    # before each idle window: the GPUs quiet (utilisation 0, power steady) this long, waited for at most the timeout
    idle_quiet_s: float = Field(3.0, ge=0, le=MAX_IDLE_QUIET_S)
    idle_quiet_timeout_s: float = Field(30.0, ge=0, le=MAX_IDLE_BASELINE_S)
    health_timeout_s: float = Field(600.0, gt=0, le=MAX_WINDOW_S)
    warmup_requests: int = Field(
        0, ge=0, le=MAX_WARMUP_REQUESTS, description="unrecorded requests sent once the engine is up"
    )
    start_engines: Literal["one_by_one", "together"] = Field(
        "one_by_one",
        description="start the engines that run side by side one after another (each startup time "
        "clean) or together (faster; their startup times overlap)",
    )
    energy_crosscheck: bool = Field(
        False, description="also read energy independently (nvidia-smi or Zeus) at every window edge"
    )

    @field_validator("name")
    @classmethod
    def _plain_plan_name(cls, name: str) -> str:
        # it becomes a run id and the folder of the bundle `wattbench spec` names (`bundle-NAME-...`): a name like
        # ../../x put the agent's bundle outside it, and 5,000 characters was 'File name too long'
        problem = plain_name_problem(name)
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("engines")
    @classmethod
    def _unique_names(cls, engines: list[EngineSpec]) -> list[EngineSpec]:
        names = [e.name for e in engines]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"engine names must be unique; repeated: {', '.join(dupes)}")
        return engines

    @model_validator(mode="after")
    def _starts_of_external(self) -> Plan:
        if (self.server_starts or 1) > 1 and any(e.engine == "external" for e in self.engines):
            raise ValueError(
                f"server_starts: {self.server_starts} needs engines the agent starts; an external engine (a URL "
                "measured as it is) cannot be restarted: leave server_starts out (1 for it) or give it its own plan"
            )
        return self

    def starts_of(self, spec: EngineSpec) -> int:
        """How many times the agent starts this engine: the plan's server_starts, or its default (2 for an engine
        the agent starts, 1 for an external URL)."""
        if spec.engine == "external":
            return 1
        return self.server_starts if self.server_starts is not None else DEFAULT_SERVER_STARTS

    def engine_configs(self) -> list[tuple[EngineSpec, EngineConfig]]:
        return [
            (
                spec,
                EngineConfig(
                    engine=spec.engine,
                    model=spec.checkpoint or self.model,
                    config_name=spec.name,
                    precision=spec.precision,
                    tp=spec.tp,
                    gpu=self.gpu,
                    profile=spec.profile,
                    options=dict(spec.options),
                ),
            )
            for spec in self.engines
        ]

    @property
    def is_emulated(self) -> bool:
        return all(e.engine == "emulator" for e in self.engines)


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# A plan is a short text: bounds on its bytes and on what its YAML aliases expand to (a 1 KB "billion laughs" of
# nested aliases expands to 387 M values), checked before anything is built from it.
MAX_PLAN_BYTES = 1024 * 1024
MAX_PLAN_VALUES = 100_000  # scalars, lists and mappings after alias expansion (plans/ hold at most a few hundred)


def _read_plan_bytes(path: Path) -> bytes:
    """The plan file's bytes: a regular file of at most MAX_PLAN_BYTES. A FIFO is refused without waiting for a
    writer, a device (/dev/zero) without reading it."""
    expected = "expected a YAML benchmark plan file (see plans/default.yaml)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    except FileNotFoundError:
        raise PlanError(f"{path}: plan file not found; {expected}") from None
    except IsADirectoryError:
        raise PlanError(f"{path}: not a regular file (a directory); {expected}") from None
    except OSError as exc:
        raise PlanError(f"{path}: cannot be read ({exc.strerror or exc}); {expected}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PlanError(f"{path}: not a regular file ({file_kind(mode)}); {expected}")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(MAX_PLAN_BYTES + 1)
    except OSError as exc:
        raise PlanError(f"{path}: cannot be read ({exc.strerror or exc}); {expected}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanError(f"{path}: larger than {MAX_PLAN_BYTES // 1024} KiB; {expected}")
    return raw


class _PlanLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a document whose aliases expand beyond MAX_PLAN_VALUES values (or refer
    to themselves), before it is built into objects, and a mapping that names a key twice (YAML says keys are
    unique; PyYAML keeps the last: `tp: 1` then `tp: 8` ran tp 8 without a word)."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _count_expanded(node, {})
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults` may be overridden: that is what a merge is for
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {str(key)[:80]!r} is given twice (first at line {seen[key].line + 1}); expected each "
                        "key once in a mapping (the last would silently win)",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


class _TooLarge(Exception):
    pass


def _count_expanded(node: yaml.Node, memo: dict[int, int | None]) -> int:
    """How many values `node` stands for once every alias is expanded (shared nodes counted each time they are
    used, computed once each)."""
    key = id(node)
    if key in memo:
        if memo[key] is None:
            raise _TooLarge("an alias refers to the node that holds it (a recursive structure)")
        return memo[key]
    memo[key] = None
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_count_expanded(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_count_expanded(k, memo) + _count_expanded(v, memo) for k, v in node.value)
    if total > MAX_PLAN_VALUES:
        raise _TooLarge(f"its aliases expand to more than {MAX_PLAN_VALUES:,} values")
    memo[key] = total
    return total


def load_plan(path: str | Path) -> tuple[Plan, str]:
    """Parse and validate a plan file; returns the plan and the sha256 of its bytes."""
    path = Path(path)
    raw = _read_plan_bytes(path)
    try:
        data = yaml.load(raw, Loader=_PlanLoader)  # a SafeLoader, with bounds
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PlanError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except _TooLarge as exc:
        raise PlanError(f"{path}: refused: {exc}; expected a plan of at most {MAX_PLAN_VALUES:,} values") from None
    except RecursionError:
        raise PlanError(f"{path}: refused: nested too deeply; expected a benchmark plan") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: expected a mapping of plan fields at the top level, got {type(data).__name__}")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        # An unknown key is usually a typo of a missing one: name the unknown key first.
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        err = errors[0]
        field = _field_path(tuple(err["loc"]))
        if err["type"] == "extra_forbidden":
            err = {**err, "msg": "unknown field; see plans/default.yaml for the fields a plan takes", "input": None}
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        got = err.get("input")
        shown = repr(got)
        shown = shown if len(shown) <= 80 else f"{shown[:80]}... ({len(shown):,} characters)"
        got_text = "" if isinstance(got, dict) or got is None else f"; got {shown}"
        raise PlanError(f"{path}: field '{field}': {err['msg']}{got_text}{more}") from None
    if plan.twin_model:
        from wattbench_agent.emulator.specs import SpecError, config_path, model_spec

        local = path.parent / plan.twin_model
        if config_path(local) is not None and config_path(plan.twin_model) is None:
            plan.twin_model = str(local.resolve())  # relative to the plan's folder
        try:
            model_spec(plan.twin_model)
        except SpecError as exc:
            raise PlanError(f"{path}: field 'twin_model': {exc}") from None
    from wattbench_agent.loadgen import LoadSpec
    from wattbench_agent.loadgen.search import SearchError, SearchSpec, check_base

    for w_index, workload in enumerate(plan.workloads):
        for spec in workload.load_specs():
            try:
                LoadSpec.from_dict({k: v for k, v in spec.items()})
            except ValueError as exc:
                raise PlanError(f"{path}: field 'workloads[{w_index}]' ({workload.name}): {exc}") from None
        if workload.search is not None:
            try:
                check_base(LoadSpec.from_dict(workload.search_load()), workload.search.over)
                SearchSpec.from_dict(workload.search.search_spec(plan.slo.model_dump()))
            except (SearchError, ValueError) as exc:
                raise PlanError(f"{path}: field 'workloads[{w_index}].search' ({workload.name}): {exc}") from None
    return plan, hashlib.sha256(raw).hexdigest()


def plan_run_fields(plan: Plan, plan_path: str | Path, plan_sha: str) -> dict[str, Any]:
    """The `runs` columns a plan decides: its name and file, prices and SLO (the reports' cost and goodput)."""
    return {
        "plan_name": plan.name,
        "plan_path": str(plan_path),
        "plan_sha256": plan_sha,
        "gpu_price_per_hour": plan.prices.gpu_hour_usd,
        "energy_price_per_kwh": plan.prices.energy_kwh_usd,
        "pue": plan.prices.pue,
        "slo_ttft_ms": plan.slo.ttft_ms,
        "slo_tpot_ms": plan.slo.tpot_ms,
        "slo_e2e_ms": plan.slo.e2e_ms,
    }


def agent_spec(plan: Plan, run_id: str, out: Path, builds: dict[str, dict[str, Any]]) -> AgentSpec:
    """What the bench agent needs to run every deployment and load point of the plan.

    Load points are listed repeat by repeat (every point once, then every point again, ...): the agent runs the
    k-th point of each deployment in turn, so repeats spread over the whole run and drift hits every engine."""
    deployments = []
    for spec, cfg in plan.engine_configs():
        points = []
        starts = plan.starts_of(spec)
        for start in range(1, starts + 1):
            for repeat in range((start - 1) * plan.repeats + 1, start * plan.repeats + 1):
                for workload in plan.workloads:
                    for load in workload.load_specs() if workload.search is None else ():
                        label = point_label(load)
                        suffix = f"#{repeat}" if starts * plan.repeats > 1 else ""
                        points.append(
                            LoadPointSpec(
                                load_point_id=f"{spec.name}:{workload.name}:{label}{suffix}",
                                workload=workload.name,
                                point_label=label,
                                load=load,
                                repeat=repeat,
                                server_start=start,
                            )
                        )
            for workload in plan.workloads:  # a search repeats its own windows: once a start, after its points
                if workload.search is not None:
                    load = workload.search_load()
                    label = f"search-{workload.search.over}"
                    points.append(
                        LoadPointSpec(
                            load_point_id=f"{spec.name}:{workload.name}:{label}{start_mark(start)}",
                            workload=workload.name,
                            point_label=label,
                            load=load,
                            search=workload.search.search_spec(plan.slo.model_dump()),
                            server_start=start,
                        )
                    )
        build = builds.get(cfg.build_id(), {})
        deployments.append(
            DeploymentSpec(
                deployment_id=spec.name,
                engine_config=cfg,
                build_id=cfg.build_id(),
                target="external" if spec.engine == "external" else "local",
                url=spec.url,
                artifact_path=build.get("artifact_path"),
                env=dict(spec.env),
                gpus=tuple(str(g) for g in spec.gpus) if spec.gpus else None,
                health_timeout_s=plan.health_timeout_s,
                load_points=tuple(points),
            )
        )
    return AgentSpec(
        run_id=run_id,
        out=str(out),
        deployments=tuple(deployments),
        source="emulated" if plan.is_emulated else "measured",
        plan_name=plan.name,
        telemetry=plan.telemetry,
        sampler_hz=plan.sampler_hz,
        idle_baseline_s=plan.idle_baseline_s,
        idle_quiet_s=plan.idle_quiet_s,
        idle_quiet_timeout_s=plan.idle_quiet_timeout_s,
        warmup_requests=plan.warmup_requests,
        energy_crosscheck=plan.energy_crosscheck,
        start_together=plan.start_engines == "together",
    )
