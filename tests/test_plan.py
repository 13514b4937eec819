"""The plan schema: the default plan is valid; a bad plan gets one message naming file, field and expectation."""

from pathlib import Path

import pytest

from wattbench.plan import PlanError, load_plan, point_label
from wattbench.settings import DEFAULT_PLAN


def test_default_plan_is_the_documented_one():
    plan, sha = load_plan(DEFAULT_PLAN)
    assert plan.model == "llama-3-70b" and plan.gpu == "h100-sxm"
    assert {e.profile for e in plan.engines} == {"trtllm-like", "vllm-like"}
    assert all(e.precision == "fp8" and e.tp == 8 for e in plan.engines)
    shapes = {p.shape for w in plan.workloads for p in w.expanded_points()}
    assert shapes == {"concurrency", "gamma"}
    assert plan.is_emulated and len(sha) == 64


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


GOOD = DEFAULT_PLAN.read_text()


@pytest.mark.parametrize(
    "mutate, field, expected",
    [
        (lambda t: t.replace("tp: 8", "tp: 0", 1), "engines[0].tp", "greater than or equal to 1"),
        (lambda t: t.replace("precision: fp8", "precision: fp7", 1), "engines[0].precision", "fp16"),
        (lambda t: t.replace("gpu_hour_usd: 2.50", "gpu_hour_usd: cheap"), "prices.gpu_hour_usd", "valid number"),
        (lambda t: t.replace("model: llama-3-70b", "modle: llama-3-70b"), "modle", "unknown field"),
        (lambda t: t.replace("    profile: vllm-like\n", ""), "engines[1]", "needs profile"),
        (lambda t: t.replace("shape: gamma, rate: 6", "shape: gamma"), "workloads[1]", "rate"),
        # an engine's env: strings only, and no CUDA_VISIBLE_DEVICES (gpus: pins the engine)
        (
            lambda t: t.replace(
                "    profile: vllm-like\n", "    profile: vllm-like\n    env: {VLLM_USE_FLASHINFER_SAMPLER: 0}\n"
            ),
            "engines[1].env.VLLM_USE_FLASHINFER_SAMPLER",
            "valid string",
        ),
        (
            lambda t: t.replace(
                "    profile: vllm-like\n", "    profile: vllm-like\n    env: {CUDA_VISIBLE_DEVICES: '1'}\n"
            ),
            "engines[1].env",
            "gpus",
        ),
        (
            lambda t: t.replace("    profile: vllm-like\n", "    profile: vllm-like\n    gpus: [0, 1]\n"),
            "engines[1]",
            "exactly tp",
        ),
        (lambda t: t.replace("repeats: 2 ", "repeats: 0 "), "repeats", "greater than or equal to 1"),
    ],
)
def test_bad_plan_names_file_field_and_expectation(tmp_path, mutate, field, expected):
    path = _write(tmp_path, mutate(GOOD))
    with pytest.raises(PlanError) as err:
        load_plan(path)
    message = str(err.value)
    assert str(path) in message
    assert field in message
    assert expected in message
    assert "\n" not in message  # one clear line


def test_yaml_syntax_error_names_line(tmp_path):
    path = _write(tmp_path, "name: x\nengines: [\n")
    with pytest.raises(PlanError, match=r"plan.yaml: not valid YAML at line \d+"):
        load_plan(path)


def test_missing_file(tmp_path):
    with pytest.raises(PlanError, match="plan file not found"):
        load_plan(tmp_path / "nope.yaml")


def test_point_labels():
    assert point_label({"shape": "concurrency", "concurrency": 32}) == "c32"
    assert point_label({"shape": "gamma", "rate": 6.0, "burstiness": 0.25}) == "gamma-r6-b0.25"
    assert point_label({"shape": "surge", "rate": 2.0, "surge_factor": 5.0}) == "surge-r2x5"


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[1] / "plans").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_shipped_plan_is_valid(path):
    plan, _ = load_plan(path)
    assert plan.engines and plan.workloads


def test_closed_loop_points_ramp_in_by_default(tmp_path):
    text = GOOD.replace(
        "    load_options: {ramp_s: 2}   # start the streams over 2 s: "
        "closed-loop waves would otherwise skew a short window\n",
        "",
    )
    plan, _ = load_plan(_write(tmp_path, text))
    steady, bursty = plan.workloads[:2]
    assert {s["ramp_s"] for s in steady.load_specs()} == {2.0}  # not asked for: ramped over 2 s
    assert all("ramp_s" not in s for s in bursty.load_specs())  # open loop: arrivals decide
    short = plan.model_copy(update={"workloads": [steady.model_copy(update={"warmup_s": 0.5})]})
    assert {s["ramp_s"] for s in short.workloads[0].load_specs()} == {0.5}  # never past the warm-up


def test_an_engine_checkpoint_is_what_that_engine_loads(tmp_path):
    """Online fp8 and a pre-quantized checkpoint side by side: each engine loads its own copy of the plan's model,
    the twin maps the pre-quantized one to its checkpoint mode, and another model's partition drops the copy."""
    from resources.bench_plan import BenchPlan
    from wattbench_agent.emulator.twin import twin_engine

    plan, _ = load_plan(Path("plans/h200-vllm-fp8ckpt.yaml"))
    cfgs = {spec.name: cfg for spec, cfg in plan.engine_configs()}
    assert cfgs["vllm-fp8"].model == "/tmp/wattbench-llama8b"
    assert cfgs["vllm-fp8-ckpt"].model == "/tmp/wattbench-llama8b-fp8"
    modes = {
        s.name: twin_engine(s.engine, s.precision, s.options, model=plan.model, checkpoint=s.checkpoint)[1][
            "quantization"
        ]
        for s in plan.engines
    }
    assert modes == {"vllm-fp8": "online", "vllm-fp8-ckpt": "checkpoint"}

    text = (
        Path("plans/h200-vllm-fp8ckpt.yaml")
        .read_text()
        .replace(
            "engine: vllm\n    precision: fp8\n    checkpoint",
            "engine: emulator\n    profile: vllm-like\n    precision: fp8\n    checkpoint",
        )
    )
    with pytest.raises(PlanError, match=r"engines\[1\].*checkpoint is for engines that load a model"):
        load_plan(_write(tmp_path, text))
    external = (
        Path("plans/h200-vllm-fp8ckpt.yaml")
        .read_text()
        .replace(
            "engine: vllm\n    precision: fp8\n    checkpoint",
            "engine: external\n    url: http://gpu:8000/v1\n    precision: fp8\n    checkpoint",
        )
    )
    with pytest.raises(PlanError, match=r"engines\[1\].*the external engine serves whatever its url serves"):
        load_plan(_write(tmp_path, external))

    res = BenchPlan(path="plans/h200-vllm-fp8ckpt.yaml")
    other, _ = res.load("meta-llama--Llama-3.1-8B|h200-vllm-fp8ckpt")
    assert other.model != plan.model and all(e.checkpoint is None for e in other.engines)


def test_default_plan_spreads_lengths_as_real_traffic(tmp_path):
    """The default comparison protocol draws each request's lengths as vllm bench serve --random-range-ratio 0.5
    does: a closed loop of equal requests can lock into one phase (docs/MEASUREMENT.md); every load spec carries the
    ratio and the load generator accepts it. A plan without it keeps one length a request; out of [0, 1) is refused."""
    from wattbench_agent.loadgen import LoadSpec

    plan, _ = load_plan(DEFAULT_PLAN)
    specs = [s for w in plan.workloads for s in w.load_specs()]
    assert specs and {s["random_range_ratio"] for s in specs} == {0.5}
    assert all(LoadSpec.from_dict(s).random_range_ratio == 0.5 for s in specs)
    plain, _ = load_plan(_write(tmp_path, GOOD.replace("    random_range_ratio: 0.5", "    # no spread")))
    assert all("random_range_ratio" not in s for w in plain.workloads for s in w.load_specs())
    with pytest.raises(PlanError, match=r"workloads\[0\].random_range_ratio"):
        load_plan(_write(tmp_path, GOOD.replace("random_range_ratio: 0.5", "random_range_ratio: 1.5", 1)))


def test_a_search_workload_is_one_point_per_engine_and_server_start(tmp_path):
    """A workload with `search:` becomes one load point per deployment and server start, after that start's repeats
    of the plan's points, whose load is the search's first probe and whose search carries the SLO (its own, else the
    plan's); a later start's search id carries its start."""
    from wattbench.plan import agent_spec

    plan, _ = load_plan(DEFAULT_PLAN)
    spec = agent_spec(plan, "r", tmp_path, {})
    for dep in spec.deployments:
        searches = [p for p in dep.load_points if p.search is not None]
        starts = plan.starts_of(plan.engines[0])
        assert [p.server_start for p in searches] == list(range(1, starts + 1))  # once a start, not once a repeat
        assert dep.load_points[-1] is searches[-1]
        for s in searches:  # each after its own start's points
            before = dep.load_points[: dep.load_points.index(s)]
            assert all(p.server_start <= s.server_start for p in before)
        assert searches[-1].load_point_id == f"{dep.deployment_id}:interactive:search-concurrency@s{starts}"
        point = searches[0]
        assert point.load_point_id == f"{dep.deployment_id}:interactive:search-concurrency"
        assert point.load["shape"] == "concurrency" and point.load["concurrency"] == 16
        assert point.load["output_tokens"] == 32 and point.load["ramp_s"] == 0.3
        assert point.search["slo"] == {"ttft_ms": 250.0, "tpot_ms": 15.0} and point.search["repeats"] == 2
    text = GOOD.replace("             slo: {ttft_ms: 250, tpot_ms: 15}}", "             }")
    plan, _ = load_plan(_write(tmp_path, text.replace("max_time_s: 30,\n", "max_time_s: 30")))
    point = agent_spec(plan, "r", tmp_path, {}).deployments[0].load_points[-1]
    assert point.search["slo"] == {"ttft_ms": 2000.0, "tpot_ms": 200.0}  # the plan's SLO


def test_a_search_probes_at_the_workloads_spread_of_lengths(tmp_path):
    """A search workload's load is built as its points' would be: a random_range_ratio set on the workload reaches
    every probe (the search's first load carried none, so the probes ran at one length a request)."""
    text = GOOD.replace("    output_tokens: 32\n", "    output_tokens: 32\n    random_range_ratio: 0.25\n", 1)
    plan, _ = load_plan(_write(tmp_path, text))
    interactive = next(w for w in plan.workloads if w.search is not None)
    assert interactive.search_load()["random_range_ratio"] == 0.25
    assert interactive.search_load()["ramp_s"] == 0.3  # load_options still over the workload's defaults


BOTH = "points: [{shape: concurrency, concurrency: 4}]\n    search: {over: concurrency"
PLAN_SLO = "slo:                       # MLPerf Llama-2-70B server limits\n  ttft_ms: 2000\n  tpot_ms: 200\n"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda t: t.replace("search: {over: concurrency", BOTH), "either points (and a sweep) or a search"),
        (lambda t: t.replace("search: {over: concurrency", "search: {over: streams"), "'rate' or 'concurrency'"),
        (lambda t: t.replace("start: 16, tolerance", "start: 16, min_load: 32, tolerance"), "start 16 is outside"),
        (lambda t: t.replace("repeats: 2, max_probes", "repeats: 0, max_probes"), "greater than or equal to 1"),
        (lambda t: t.replace("slo: {ttft_ms: 250, tpot_ms: 15}}", "slo: {}}").replace(PLAN_SLO, ""), "needs an SLO"),
    ],
)  # fmt: skip
def test_a_bad_search_is_one_message_naming_the_workload(tmp_path, mutate, expected):
    with pytest.raises(PlanError, match="workloads\\[2\\]") as err:
        load_plan(_write(tmp_path, mutate(GOOD)))
    assert expected in str(err.value)


def test_server_starts_default_and_bounds(tmp_path):
    """Engines the agent starts are started twice unless the plan says otherwise; each start runs the plan's repeats
    (their numbers run on over starts, so ids and seeds stay distinct); an external URL is measured once, and a plan
    asking it for more starts is refused naming the field."""
    from wattbench.plan import agent_spec

    plan, _ = load_plan(DEFAULT_PLAN)
    dep = agent_spec(plan, "r", tmp_path, {}).deployments[0]
    plain = [p for p in dep.load_points if p.search is None]
    per_start = {s: sorted({p.repeat for p in plain if p.server_start == s}) for s in (1, 2)}
    assert plan.server_starts is None and plan.starts_of(plan.engines[0]) == 2
    assert per_start[1] == list(range(1, plan.repeats + 1))
    assert per_start[2] == list(range(plan.repeats + 1, 2 * plan.repeats + 1))
    assert len({p.load_point_id for p in dep.load_points}) == len(dep.load_points)
    one = load_plan(_write(tmp_path, GOOD.replace("repeats: 2 ", "server_starts: 1\nrepeats: 2 ", 1)))[0]
    assert {p.server_start for p in agent_spec(one, "r", tmp_path, {}).deployments[0].load_points} == {1}
    external = (
        "name: ext\nmodel: m\nengines:\n  - {name: e, engine: external, url: 'http://127.0.0.1:9'}\n"
        "workloads:\n  - {name: w, points: [{shape: concurrency, concurrency: 1}]}\nprices: {gpu_hour_usd: 1}\n"
    )
    ext = load_plan(_write(tmp_path, external))[0]
    assert ext.starts_of(ext.engines[0]) == 1
    with pytest.raises(PlanError, match="server_starts: 2 needs engines the agent starts"):
        load_plan(_write(tmp_path, external + "server_starts: 2\n"))
