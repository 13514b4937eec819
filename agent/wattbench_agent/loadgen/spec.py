"""`LoadSpec`: everything one load point needs. Plain data, JSON round-trippable (`from_dict` / `to_dict`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from . import shapes
from .endpoint import api_of

# More streams than this is a typo, not a benchmark (a concurrency of 1e9 hung with nothing sent). The plan's bounds
# are these (wattbench/plan.py); an agent spec's load points are checked against them before any engine starts.
MAX_CONCURRENCY = 16384
MAX_TOKENS = 1_048_576  # per prompt or output: 1M-token contexts
MAX_WINDOW_S = 86400.0  # one load point's window, warm-up excluded; a request's timeout
MAX_WARMUP_S = 3600.0
MAX_RATE = 100_000.0  # requests/s
MAX_REQUESTS = 100_000_000
APIS = ("chat", "completions")
# field: (integer?, highest); numbers past these, or of another type, are refused with the field's name
_BOUNDS: dict[str, tuple[bool, float]] = {
    "concurrency": (True, MAX_CONCURRENCY),
    "rate": (False, MAX_RATE),
    "input_tokens": (True, MAX_TOKENS),
    "output_tokens": (True, MAX_TOKENS),
    "random_range_ratio": (False, 1.0),  # and < 1 (validate)
    "shared_prefix_tokens": (True, MAX_TOKENS),
    "num_prefixes": (True, 1_000_000),
    "warmup_s": (False, MAX_WARMUP_S),
    "ramp_s": (False, MAX_WARMUP_S),
    "duration_s": (False, MAX_WINDOW_S),
    "max_requests": (True, MAX_REQUESTS),
    "seed": (True, 2**63 - 1),
    "timeout_s": (False, MAX_WINDOW_S),
    "turns": (True, 10_000),
    "turn_delay_s": (False, MAX_WARMUP_S),
    "num_warmups": (True, MAX_REQUESTS),
    "ready_check_timeout_s": (False, MAX_WINDOW_S),
}


class LoadSpecError(ValueError):
    """A LoadSpec (or the dict it was made from) is not valid; the message names the field."""


def _split(d: dict[str, Any], shape: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the shape's own parameters, LoadSpec's fields) of a flat dict; any other key is a LoadSpecError naming it.

    Another shape's parameter at its default (or None) is dropped: LoadSpecs written before the older shapes' own
    parameters left its fields (burstiness, surge_*, trace_*) carry every one of them, e.g. a concurrency point's
    burstiness 1.0. Set to anything else, it is refused, naming the shape's parameters."""
    known = {f.name for f in dataclasses.fields(LoadSpec)} - {"params"}
    declared = {q.name for q in shapes.SHAPES[shape].params} if shape in shapes.SHAPES else set()
    if declared & known:  # a parameter named as a field would be read from two places
        raise LoadSpecError(
            f"shape {shape!r} declares LoadSpec fields as its own parameters: {sorted(declared & known)}"
        )
    others = shapes.params()
    for key in d:
        if key in known or key in declared:
            continue
        if key in others and (d[key] is None or d[key] == others[key].default):
            continue
        if key in others:
            own = ", ".join(sorted(declared)) or "none"
            raise LoadSpecError(f"shape {shape!r} has no parameter {key!r} (its parameters: {own})")
        raise LoadSpecError(f"unknown LoadSpec key {key!r} (known: {', '.join(sorted(known | declared))})")
    return {k: v for k, v in d.items() if k in declared}, {k: v for k, v in d.items() if k in known}


@dataclass
class LoadSpec:
    url: str = "http://127.0.0.1:8000"  # server base URL (with or without /v1)
    model: str = "model"
    api: str = "chat"  # chat | completions
    shape: str = "concurrency"  # a registered load shape (loadgen/shapes/): concurrency | poisson | ...
    concurrency: int | None = None  # closed loop streams; for open-loop shapes: max in flight (None = no cap)
    rate: float | None = None  # requests/s for poisson | gamma | surge (base rate)
    # a shape's own parameters (gamma's burstiness, surge's surge_*, trace's trace_path, ...) are no fields: `params`
    input_tokens: int = 128
    output_tokens: int = 128
    input_tokens_dist: dict | None = None  # see workload.sample_lengths: fixed | uniform | normal | lognormal | choice
    output_tokens_dist: dict | None = None
    # vllm bench serve's --random-range-ratio r: lengths uniform over [floor(L(1 - r)), ceil(L(1 + r))] where no
    # *_tokens_dist says otherwise (prompts only when synthetic); 0 = every request input_tokens / output_tokens
    random_range_ratio: float = 0.0
    dataset_path: str | None = None  # the dataset's file or folder (alone: ShareGPT-format JSON/JSONL)
    # vllm bench serve's --dataset-name (loadgen/datasets.py: sharegpt, sonnet, burstgpt, custom, hf, spec_bench,
    # speed_bench, timed_trace, prefix_repetition, random) or multi_turn; None: sharegpt with a path, else random
    dataset_name: str | None = None
    dataset_options: dict = field(default_factory=dict)  # the dataset's own options, by vLLM's flag names
    turns: int = 1  # user turns per conversation (synthetic multi-turn); a multi_turn dataset has its own
    turn_delay_s: float = 0.0  # think time before each later turn of a conversation
    shared_prefix_tokens: int = 0  # every prompt starts with the same prefix of this many tokens
    num_prefixes: int = 1  # number of distinct shared prefixes (requests assigned round robin)
    tokenizer: str | None = None  # tokenizer.json path or HF name (optional; exact lengths + token counts)
    tokenizer_options: dict = field(default_factory=dict)  # trust_remote_code, tokenizer_mode (vLLM's flags)
    # synthetic prompts' length met on the server's count (loadgen/prompt_length.py): calibrated before t0 on its
    # /tokenize or its usage; the calibration found travels here (worker processes make the same prompts)
    calibrate_prompts: bool = True
    prompt_calibration: dict | None = None
    warmup_s: float = 0.0
    ramp_s: float = 0.0  # concurrency: start the streams evenly over this many seconds
    # (desynchronises closed-loop waves; keep it within warmup_s)
    duration_s: float = 10.0
    max_requests: int | None = None  # stop sending after this many requests
    seed: int = 0
    ignore_eos: bool = True  # send ignore_eos + min_tokens so outputs are as long as asked
    timeout_s: float = 600.0  # per request, send -> end of stream; also bounds the drain
    extra_body: dict = field(default_factory=dict)  # merged into every request body last; a None value deletes a key
    headers: dict = field(default_factory=dict)  # extra HTTP headers (e.g. Authorization)
    load_point_id: str | None = None
    workload: str | None = None  # workload name, copied to load_run_row()
    honor_retry_after: bool = (
        True  # closed loop: a stream that got 429 waits Retry-After (capped) before its next request
    )
    transport: str = "fast"  # fast (wattbench's httpx transport) | httpx (httpx's own pool); see docs/LOADGEN.md
    fail_fast: bool = True  # stop when the first requests all fail the same way (result.FAIL_FAST_N)
    request_id_prefix: str | None = None  # x-request-id: prefix + request number (vllm bench serve's)
    num_warmups: int = 0  # requests sent (and not measured) before t0, as vllm bench serve's --num-warmups
    ready_check_timeout_s: float = 0.0  # before anything: retry a test request until it succeeds, up to this long
    # the shape's own parameters (shapes.Param), by name: flat in the dict form (from_dict / to_dict, the wire's load),
    # as the fields above are, so that a new shape's parameter needs no field here
    params: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadSpec:
        if not isinstance(d, dict):
            raise LoadSpecError(f"LoadSpec wants a mapping, got {type(d).__name__}")
        own, rest = _split(d, d.get("shape", cls.shape))
        spec = cls(**rest, params=own)
        spec.validate()
        return spec

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(d.pop("params"))
        return d

    def replace(self, **changes: Any) -> LoadSpec:
        """A copy with `changes`; another shape keeps only the parameters it declares too (a search's closed-loop
        probe of a gamma base has no burstiness)."""
        shape = changes.get("shape", self.shape)
        own, rest = _split(changes, shape)
        kept = {q.name for q in shapes.get(shape).params} if shape in shapes.SHAPES else set()
        params = {k: v for k, v in {**self.params, **own}.items() if k in kept}
        spec = dataclasses.replace(self, **rest, params=params)
        spec.validate()
        return spec

    @property
    def load_shape(self) -> shapes.Shape:
        """The registered shape `shape` names: its traits, schedule, label and parameters."""
        return shapes.get(self.shape)

    def param(self, name: str) -> Any:
        """The shape's own parameter `name` (burstiness, ...): as given, else its declared default; None when the
        shape has no such parameter (a load_runs column NULL for the shapes that do not read it)."""
        if not any(q.name == name for q in self.load_shape.params):
            return None
        return self.load_shape.param(self.params, name)

    def point(self) -> dict[str, Any]:
        """The fields as a shape reads them (`p`): LoadSpec's own and the shape's parameters, one flat mapping."""
        return {**vars(self), **self.params}

    def validate(self) -> LoadSpec:
        for f in dataclasses.fields(self):  # NaN or Inf would pass every comparison below and hang or crash later
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise LoadSpecError(f"{f.name} must be a finite number, got {value}")
        for name, (integer, highest) in _BOUNDS.items():
            value = getattr(self, name)
            if value is None:
                continue
            kinds = (int,) if integer else (int, float)
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise LoadSpecError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r:.80}")
            if value > highest:
                raise LoadSpecError(f"{name} must be <= {highest:g}, got {value if integer else format(value, 'g')}")
        if self.concurrency is not None and self.concurrency > MAX_CONCURRENCY:
            raise LoadSpecError(f"concurrency must be <= {MAX_CONCURRENCY}, got {self.concurrency}")
        if self.api not in APIS:
            raise LoadSpecError(f"api must be one of {APIS}, got {self.api!r}")
        implied = api_of(self.url or "")
        if implied and implied != self.api:
            raise LoadSpecError(
                f"url {self.url} is the {implied} endpoint but api is {self.api!r}; set "
                f"api={implied!r} or give the base URL"
            )
        if not isinstance(self.params, dict):
            raise LoadSpecError("params must be a mapping")
        problem = shapes.check(self.point())
        if problem is None:
            problem = self.load_shape.params_problem(self.params)
        if problem:
            raise LoadSpecError(problem)
        if self.concurrency is not None and self.concurrency < 1:
            raise LoadSpecError("concurrency must be >= 1")
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise LoadSpecError("input_tokens and output_tokens must be >= 1")
        if self.random_range_ratio is None or not 0 <= self.random_range_ratio < 1:
            raise LoadSpecError(f"random_range_ratio must be >= 0 and < 1, got {self.random_range_ratio}")
        if (
            self.shared_prefix_tokens < 0
            or self.shared_prefix_tokens >= max(self.input_tokens, 1)
            and self.shared_prefix_tokens
        ):
            raise LoadSpecError("shared_prefix_tokens must be >= 0 and < input_tokens")
        if self.ramp_s is None or self.ramp_s < 0:
            raise LoadSpecError("ramp_s must be >= 0")
        if self.warmup_s < 0 or self.duration_s is None or self.duration_s < 0:
            raise LoadSpecError("warmup_s and duration_s must be >= 0")
        if self.duration_s == 0 and not self.load_shape.ends_by_itself and not self.max_requests:
            raise LoadSpecError("duration_s must be > 0 (or give max_requests: 0 then means until they are sent)")
        if self.max_requests is not None and self.max_requests < 1:
            raise LoadSpecError("max_requests must be >= 1")
        if self.timeout_s <= 0:
            raise LoadSpecError("timeout_s must be > 0")
        if self.transport not in ("fast", "httpx"):
            raise LoadSpecError("transport must be 'fast' or 'httpx'")
        if not isinstance(self.extra_body, dict) or not isinstance(self.headers, dict):
            raise LoadSpecError("extra_body and headers must be mappings")
        if self.turns < 1 or self.turn_delay_s < 0 or self.num_warmups < 0 or self.ready_check_timeout_s < 0:
            raise LoadSpecError("turns must be >= 1; turn_delay_s, num_warmups, ready_check_timeout_s >= 0")
        from . import datasets

        problem = datasets.check(self)
        if problem:
            raise LoadSpecError(problem)
        return self
