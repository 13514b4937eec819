"""What the twin is calibrated on and tested against: every committed real-hardware bundle (results/h200-*/bundle-*),
read once into a scratch warehouse (the figures' definitions are sql/views.sql's) and with the load generator's own step
decomposition (loadgen/steps.py through loadgen/replay.py), cached in results/twin/measured.json.

Per load window (a repeat of a point): its figures (tok/s, W, tok/J, TTFT and TPOT p50), its step decomposition
(decode step d, stalled share f, stall length s, expected share, phase), the stall length its TPOT implies (S: below)
and the GPU board it ran on. Per point: the figures over its repeats as v_point_figures gives them (means; latency
percentiles pooled), what the twin needs to run it (plan, engine options, prompt length as measured, output lengths,
load shape, window, ramp; open-loop send schedules) and the model.

The stall a window's TPOT implies. In a closed loop of c streams whose requests all have o output tokens, each request
sees the c - 1 other streams' prefills among its o - 1 gaps when each has a step of its own, so its mean gap is
d + (c - 1)(S - d)/(o - 1), S the length of a prefill-carrying step: S = d + (TPOT p50 - d)(o - 1)/(c - 1). It counts
every prefill's cost once however the client's clock split it into gaps (a stall whose next token arrived with it, two
prefills in one step), which the stall mean s of the decomposition does not: s is what the gaps looked like, S what the
steps cost.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
OUT = RESULTS / "twin"
CACHE = OUT / "measured.json"
HELD_OUT_LIST = OUT / "held_out.txt"  # bundles no calibration fits on (globs relative to results/, each with why)
FIGURES = ("output_tok_s", "counter_w_per_gpu", "output_tokens_per_j", "ttft_p50_ms", "tpot_p50_ms")
SPLIT = ("to_scheduled_ms", "prefill_ms")  # TTFT's two parts (v_engine_ttft_split) where vLLM's histograms gave them
EXTRA = ("ttft_p99_ms", "mean_sm_clock_mhz", "power_capped_share")


def bundles() -> list[Path]:
    """Every committed real-hardware vLLM bundle the twin reads (results/h200-vllm*/bundle-*.tar.xz), in name order:
    those it fits on and the held-out ones it is scored on (held_out())."""
    return sorted(RESULTS.glob("h200-vllm*/bundle-*.tar.xz"))


def held_out_patterns(path: Path | None = None) -> list[str]:
    """The held-out list (results/twin/held_out.txt): one glob a line, relative to results/, '#' starts the why."""
    path = path or HELD_OUT_LIST
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def held_out(rel: str, patterns: list[str] | None = None) -> bool:
    """Whether a bundle (its path relative to results/) is on the held-out list: no calibration may fit on it."""
    return any(fnmatch.fnmatchcase(rel, pat) for pat in (held_out_patterns() if patterns is None else patterns))


def excluded() -> dict[str, object]:
    """What the calibration keeps out: the list's globs and the committed bundles they match now."""
    pats = held_out_patterns()
    found = sorted({str(p.relative_to(RESULTS)) for pat in pats for p in RESULTS.glob(pat)})
    where = HELD_OUT_LIST.relative_to(ROOT) if HELD_OUT_LIST.is_relative_to(ROOT) else HELD_OUT_LIST
    return {"list": str(where), "globs": pats, "bundles": found}


def bundle_sha(rel: str) -> str:
    """The sha256 of a committed bundle (path relative to results/)."""
    return _sha(RESULTS / rel)


def plan_for(bundle: Path) -> Path:
    """results/<folder>/bundle-<name>.tar.xz was run with plans/<folder>-<name>.yaml where that exists, else
    plans/<folder>.yaml."""
    folder, name = bundle.parent.name, bundle.name.removeprefix("bundle-").removesuffix(".tar.xz")
    own = ROOT / "plans" / f"{folder}-{name}.yaml"
    return own if own.exists() else ROOT / "plans" / f"{folder}.yaml"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Point:
    """A measured load point as the twin runs it, and what was measured there."""

    folder: str
    bundle: str
    engine: str
    precision: str
    workload: str
    label: str
    shape: str
    concurrency: int | None
    rate: float | None
    burstiness: float | None
    prompt_tokens: float  # measured mean (chat template included)
    output_tokens: int
    output_dist: dict | None  # the plan's output length distribution (None: every request output_tokens)
    warmup_s: float
    window_s: float
    ramp_s: float
    config: dict  # the twin's engine configuration (wattbench_agent.emulator.twin)
    model: str  # what the twin runs (a config.json path or a specs.json name)
    board: str  # the GPU's NVML UUID, first 8 hex digits
    cpu: str | None  # the host's CPU model where the bundle recorded it
    arrivals: list = field(default_factory=list)  # open loop: each repeat's send times (s from the load's start)
    figures: dict = field(default_factory=dict)  # figure -> value over the repeats (v_point_figures)
    repeats: list = field(default_factory=list)  # per repeat: figures, decomposition, implied stall S

    @property
    def key(self) -> str:
        return f"{self.folder}:{self.engine}:{self.workload}:{self.label}"

    @property
    def rel(self) -> str:
        """Its bundle's path relative to results/ (what the held-out list names)."""
        return f"{self.folder}/{self.bundle}"

    @property
    def fixed_closed_loop(self) -> bool:
        return self.shape == "concurrency" and self.output_dist is None and bool(self.concurrency)

    @property
    def model_size(self) -> str:
        return Path(self.model).parent.name if self.model.endswith(".json") else self.model


def implied_stall_ms(d: float | None, tpot: float | None, c: int | None, o: int) -> float | None:
    """S = d + (TPOT p50 - d)(o - 1)/(c - 1): the length of a prefill-carrying step a closed loop's TPOT implies (the
    module's docstring); None for one stream or without the figures."""
    if d is None or tpot is None or not c or c < 2 or o < 2:
        return None
    return d + (tpot - d) * (o - 1) / (c - 1)


# what the cached figures were computed with: the figures' definitions and the step decomposition
DEFINITIONS = ("sql/views.sql", "agent/wattbench_agent/loadgen/steps.py")


def definitions() -> dict[str, str]:
    return {name: _sha(ROOT / name) for name in DEFINITIONS}


def load(refresh: bool = False, save: bool = False) -> list[Point]:
    """The measured points (cached; `refresh`, a changed bundle or a changed definition of the figures or of the step
    decomposition re-reads them). Only `save` (python -m wattbench.twin) rewrites the committed cache: a stale one
    read by a test or by predict is recomputed into a scratch file under the temp folder, so that `make test` never
    edits results/."""
    paths = bundles()
    want = {str(p.relative_to(RESULTS)): _sha(p) for p in paths}
    key = {"bundles": want, "definitions": definitions()}
    scratch = Path(tempfile.gettempdir()) / f"wattbench-twin-measured-{_key_sha(key)}.json"
    for cached in [] if refresh else [CACHE] if save else [CACHE, scratch]:
        if cached.exists():
            data = json.loads(cached.read_text())
            if data.get("bundles") == want and data.get("definitions") == key["definitions"]:
                return [Point(**p) for p in data["points"]]
    points = _read(paths)
    target = CACHE if save else scratch
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        json.dumps(
            {
                "source": "measured",
                "what": "every committed real-hardware vLLM bundle, per point (figures over its repeats, as "
                "v_point_figures) and per repeat (figures and the step decomposition): python -m wattbench.twin",
                **key,
                "points": [vars(p) for p in points],
            },
            indent=1,
        )
        + "\n"
    )
    return points


def _key_sha(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _read(paths: list[Path]) -> list[Point]:
    from wattbench.plan import load_plan, plan_run_fields
    from wattbench.warehouse import connect, ingest_bundle, set_run_fields
    from wattbench_agent.bundle import read_manifest, unpacked

    points: list[Point] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            plan, sha = load_plan(plan_for(path))
            with connect(Path(tmp) / f"{path.parent.name}-{path.name}.duckdb") as con:
                with unpacked(path) as folder:
                    ingest_bundle(con, folder)
                    run_id = read_manifest(folder)["run_id"]
                    steps = _steps(folder)
                set_run_fields(con, run_id, plan_run_fields(plan, plan_for(path), sha))
                points += _points(con, path, plan, steps)
    return points


def _steps(folder: Path) -> dict[str, dict]:
    """load_point_id -> the window's step decomposition, made again from its requests with the load generator's code."""
    from wattbench_agent.loadgen.replay import bundle_summaries

    return {s["load_point_id"]: s["steps"] for s in bundle_summaries(folder)}


def _twin_model(plan, folder: Path) -> str:
    """What the twin runs for a plan (its twin_model, else its model where the twin knows it, else the results folder's
    config.json), as a path relative to the checkout where it is a file."""
    from wattbench_agent.emulator.specs import SpecError, model_spec

    model = plan.twin_model
    if not model:
        try:
            model_spec(plan.model)
            model = plan.model
        except SpecError:
            model = str(folder / "config.json")
    path = Path(model)
    return str(path.resolve().relative_to(ROOT)) if path.is_absolute() and path.exists() else model


def model_path(model: str) -> str:
    """A Point's model as the emulator takes it (a checkout-relative config.json made absolute)."""
    return str(ROOT / model) if model.endswith(".json") and not Path(model).is_absolute() else model


def _points(con, path: Path, plan, steps: dict[str, dict]) -> list[Point]:
    from wattbench_agent.emulator.twin import twin_engine

    figs = con.execute(
        "SELECT engine, workload, point_label, metric, estimate FROM v_point_figures WHERE metric IN "
        f"({', '.join('?' for _ in FIGURES + EXTRA)})",
        list(FIGURES + EXTRA),
    ).fetchall()
    per_point: dict[tuple, dict] = {}
    for e, w, pl, metric, est in figs:
        per_point.setdefault((e, w, pl), {})[metric] = est
    for e, w, pl, *vals in con.execute(
        "SELECT engine, workload, point_label, avg(mean_sm_clock_mhz), avg(s.prefill_ms), avg(s.to_scheduled_ms) "
        "FROM v_load_points LEFT JOIN v_engine_ttft_split s USING (run_id, load_point_id) GROUP BY ALL"
    ).fetchall():
        d = per_point.setdefault((e, w, pl), {})
        d.update({k: v for k, v in zip(("mean_sm_clock_mhz", "prefill_ms", "to_scheduled_ms"), vals) if v is not None})
    cols = ["load_point_id", "repeat", *FIGURES]
    reps: dict[tuple, list] = {}
    for row in con.execute(
        f"SELECT engine, workload, point_label, {', '.join(cols)} FROM v_load_points ORDER BY repeat"
    ).fetchall():
        rec = dict(zip(cols, row[3:]))
        reps.setdefault(tuple(row[:3]), []).append(rec)
    info = {
        tuple(r[:3]): r[3:]
        for r in con.execute(
            "SELECT d.config_name, l.workload, l.point_label, any_value(l.shape), any_value(l.concurrency), "
            "any_value(l.rate), any_value(l.burstiness), any_value(l.output_tokens), "
            "any_value(d.gpu_uuids[1]), any_value(d.cpu_model), avg(q.prompt_tokens), any_value(d.precision) "
            "FROM load_runs l JOIN deployments d ON d.run_id = l.run_id AND d.deployment_id = l.deployment_id "
            "LEFT JOIN requests q ON q.run_id = l.run_id AND q.load_point_id = l.load_point_id "
            "AND q.error_kind IS NULL GROUP BY ALL"
        ).fetchall()
    }
    sched: dict[tuple, list] = {}
    for e, w, pl, _rep, xs in con.execute(
        "SELECT d.config_name, l.workload, l.point_label, l.repeat, list((q.scheduled_ns - (l.window_start_ns "
        "- l.warmup_s * 1e9)) / 1e9 ORDER BY q.scheduled_ns) FROM requests q "
        "JOIN load_runs l ON l.run_id = q.run_id AND l.load_point_id = q.load_point_id "
        "JOIN deployments d ON d.run_id = l.run_id AND d.deployment_id = l.deployment_id "
        "WHERE l.shape <> 'concurrency' AND q.scheduled_ns IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        sched.setdefault((e, w, pl), []).append([round(x, 6) for x in xs])
    workloads = {w.name: w for w in plan.workloads}
    engines = {e.name: e for e in plan.engines}
    model = _twin_model(plan, path.parent)
    out = []
    for key, figures in sorted(per_point.items()):
        e, w, pl = key
        shape, c, rate, burst, o, uuid, cpu, prompt, precision = info[key]
        wl, eng = workloads[w], engines[e]
        _prof, cfg, _ = twin_engine(eng.engine, eng.precision, eng.options, model=plan.model, checkpoint=eng.checkpoint)
        dist = wl.load_options.get("output_tokens_dist")
        if wl.random_range_ratio:
            from wattbench_agent.loadgen.workload import range_ratio_dist

            dist = dist or range_ratio_dist(wl.output_tokens, wl.random_range_ratio)
        p = Point(
            folder=path.parent.name,
            bundle=path.name,
            engine=e,
            precision=precision,
            workload=w,
            label=pl,
            shape=shape,
            concurrency=int(c) if c else None,
            rate=rate,
            burstiness=burst,
            prompt_tokens=float(prompt or wl.input_tokens),
            output_tokens=int(o or wl.output_tokens),
            output_dist=dist,
            warmup_s=wl.warmup_s,
            window_s=wl.duration_s,
            ramp_s=float(wl.load_options.get("ramp_s", 0.0)),
            config=cfg,
            model=model,
            board=(uuid or "?").removeprefix("GPU-")[:8],
            cpu=cpu,
            arrivals=sched.get(key, []),
            figures={k: float(v) for k, v in figures.items() if v is not None},
        )
        for rec in reps.get(key, []):
            st = steps.get(rec["load_point_id"]) or {}
            rec.update(
                {
                    k: st.get(k)
                    for k in (
                        "decode_step_ms",
                        "stalled_gap_fraction",
                        "stall_ms_mean",
                        "expected_stalled_fraction",
                        "phase_state",
                    )
                }
            )
            rec["implied_stall_ms"] = (
                implied_stall_ms(rec["decode_step_ms"], rec["tpot_p50_ms"], p.concurrency, p.output_tokens)
                if p.fixed_closed_loop
                else None
            )
            p.repeats.append(rec)
        out.append(p)
    return out
