"""`wattbench load`: the load generator on its own (same code path as the load_runs asset: run_load)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from wattbench_agent.argtypes import check_finite, finite_float, port_number
from wattbench_agent.safety import redact_text

from . import datasets, search_cli, shapes, vllm_flags
from .endpoint import (
    BACKENDS,
    EndpointError,
    api_of,
    backend_api,
    check_url,
    join_endpoint,
    resolve_api,
)
from .spec import MAX_CONCURRENCY, LoadSpec, LoadSpecError
from .vllm_result import (
    ResultArgError,
    parse_goodput,
    parse_percentile_metrics,
    parse_percentiles,
    result_filename,
    result_json,
)


def _floats(s: str, flag: str = "the value") -> list[float]:
    """A comma list of positive finite numbers (--rate, --concurrency); ValueError naming the flag otherwise."""
    try:
        values = [
            check_finite(x.strip(), f"{flag} {x.strip()!r}", minimum=0, strict_minimum=True)
            for x in s.split(",")
            if x.strip()
        ]
    except ValueError as exc:
        raise ValueError(f"{exc}; expected a comma list of positive numbers") from None
    if not values:
        raise ValueError(f"{flag} {s!r}: expected a comma list of positive numbers")
    return values


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "load",
        help="drive an OpenAI-compatible server with load and measure it",
        description="Drive an OpenAI-compatible streaming server: fixed concurrency, Poisson/gamma rate, surge, or "
        "trace replay. Per-request records go to --out (JSONL, flushed as they complete). vllm bench "
        "serve's flag names work as aliases (--base-url, --endpoint, --request-rate, --num-prompts, "
        "--dataset-name, --goodput, --save-result, ...; docs/LOADGEN.md).",
    )
    _target_flags(p)
    _shape_flags(p)
    _request_flags(p)
    _run_flags(p)
    _vllm_result_flags(p)
    vllm_flags.register(p)
    search_cli.register(p)
    _energy_flags(p)
    p.set_defaults(func=main)


def _target_flags(p) -> None:
    """Where the load goes: the server, its endpoint and API, the model."""
    p.add_argument(
        "--url",
        "--base-url",
        dest="url",
        help="server base URL (http://127.0.0.1:8000 or .../v1) or a full endpoint URL "
        "(.../v1/chat/completions, .../v1/completions; the endpoint picks the API)",
    )
    p.add_argument(
        "--endpoint",
        help="API path appended to --url/--base-url, as vllm bench serve: /v1/chat/completions or /v1/completions",
    )
    p.add_argument("--host", help="with --port, instead of --url (default, as vllm bench serve's: 127.0.0.1:8000)")
    p.add_argument("--port", type=port_number)
    p.add_argument(
        "--model", help="model name sent in each request (default: the server's only model, from GET /v1/models)"
    )
    p.add_argument("--api", choices=("chat", "completions"), help="default: what the endpoint URL says, else chat")
    p.add_argument(
        "--backend",
        help=f"vllm bench serve's backend: {', '.join(BACKENDS)} (openai, vllm: /v1/completions; openai-chat: "
        "/v1/chat/completions); it picks the API and, for a base URL, the endpoint",
    )


def _shape_flags(p) -> None:
    """The load shape and its parameters."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--concurrency", help="closed-loop streams; a comma list sweeps (e.g. 8,16,32)")
    g.add_argument(
        "--rate",
        "--request-rate",
        dest="rate",
        help="open-loop requests/s (Poisson; gamma with --burstiness); a comma list sweeps; 'inf' (vLLM's "
        "default, also with --num-prompts alone) sends every request at once: --max-concurrency (or --num-prompts) "
        "streams",
    )
    _param_flags(g, exclusive=True)  # --trace FILE
    p.add_argument(
        "--max-concurrency",
        type=int,
        help="cap on requests in flight for --rate/--trace; alone: that many closed-loop streams",
    )
    p.add_argument(
        "--shape",
        choices=shapes.names(),
        help="the load shape by name (default: from --concurrency / --rate / --burstiness / --surge-factor "
        "/ --trace); the registered shapes are the modules of wattbench_agent/loadgen/shapes/",
    )
    _param_flags(p, exclusive=False)


def _param_flags(p, exclusive: bool) -> None:
    """The shapes' own parameters (shapes.Param): a flag each, read for the shape that has it. Their names, aliases,
    bounds and help are the declarations'; a flag that does not pick its shape itself says which --shape reads it."""
    for param in shapes.params().values():
        if param.exclusive != exclusive:
            continue
        owners = ", ".join(name for name, shape in shapes.SHAPES.items() if param in shape.params)
        p.add_argument(
            *param.flags,
            dest=param.name,
            type=_flag_type(param),
            metavar=param.metavar,
            help=param.help if param.shape_from_flags else f"--shape {owners}: {param.help}",
        )


def _flag_type(param: shapes.Param):
    """The argparse type of a parameter's flag: a number outside its bounds is an argparse error naming the flag."""
    if param.type is float:
        return finite_float(param.minimum, param.maximum, strict_minimum=param.exclusive_minimum)
    return param.type


def _request_flags(p) -> None:
    """What each request asks: lengths, prompts."""
    p.add_argument(
        "--input-tokens",
        "--random-input-len",
        "--input-len",
        dest="input_tokens",
        type=int,
        help="prompt tokens per request (default 128)",
    )
    p.add_argument(
        "--output-tokens",
        "--random-output-len",
        "--output-len",
        dest="output_tokens",
        type=int,
        help="output tokens per request (default 128; with a dataset: the dataset's own reply lengths unless given)",
    )
    p.add_argument(
        "--random-range-ratio",
        type=vllm_flags.range_ratio,
        default=0.0,
        help='vLLM\'s random dataset: lengths uniform in [L x (1 - r), L x (1 + r)]; or JSON {"input": r, "output": r}',
    )
    p.add_argument(
        "--dataset", "--dataset-path", dest="dataset", help="the dataset's file or folder (alone: ShareGPT JSON/JSONL)"
    )
    p.add_argument(
        "--dataset-name",
        choices=(*datasets.DATASETS, *datasets.NOT_TEXT),
        help="vllm bench serve's datasets: random (synthetic, the default), sharegpt, sonnet, burstgpt, custom, hf, "
        "prefix_repetition, spec_bench, speed_bench, timed_trace; and multi_turn (conversations, the chat API); "
        "docs/LOADGEN.md",
    )
    p.add_argument("--shared-prefix-tokens", type=int, default=0)
    p.add_argument(
        "--tokenizer",
        help="tokenizer.json path or HF name (optional: without one, synthetic prompts are sized on the server's "
        "count, prompt_length in the summary)",
    )


def _run_flags(p) -> None:
    """How long and how the point runs, and where its records and summary go."""
    p.add_argument("--warmup", type=finite_float(0), default=0.0, help="seconds of warm-up before the window")
    p.add_argument(
        "--ramp",
        type=finite_float(0),
        default=0.0,
        help="--concurrency: start the streams evenly over this many seconds (keep it within --warmup)",
    )
    p.add_argument(
        "--duration",
        type=finite_float(0),
        help="seconds of steady-state window (default 10; with --num-prompts: until they are sent, the window "
        "from the first send to the last answer, as vllm bench serve's duration; with --trace: the whole trace)",
    )
    p.add_argument(
        "--max-requests", "--num-prompts", dest="max_requests", type=int, help="stop sending after this many requests"
    )
    p.add_argument("--timeout", type=finite_float(0, strict_minimum=True), default=600.0, help="per-request timeout, s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos/min_tokens")
    p.add_argument("--ignore-eos", action="store_true", help="(the default; accepted for vllm bench serve)")
    p.add_argument("--extra-body", help="JSON object merged into every request body")
    p.add_argument(
        "--header", nargs="*", action="extend", default=[], help="extra HTTP headers 'Name: value' or KEY=VALUE"
    )
    p.add_argument("--transport", choices=("fast", "httpx"), default="fast")
    p.add_argument("--workers", type=int, help="client processes (default: automatic)")
    p.add_argument(
        "--no-fail-fast", action="store_true", help="keep sending even when the first requests all fail the same way"
    )
    p.add_argument("--load-point-id")
    p.add_argument("--out", help="per-request JSONL (appended, flushed per record)")
    p.add_argument("--json", action="store_true", help="print a final one-line JSON summary on stdout")
    p.add_argument("--no-progress", action="store_true")


def _vllm_result_flags(p) -> None:
    """vllm bench serve's result file."""
    v = p.add_argument_group("vllm bench serve results")
    v.add_argument(
        "--goodput",
        nargs="+",
        metavar="KEY:MS",
        help="SLOs for goodput, vLLM's form: ttft:500 tpot:50 e2el:2000 (milliseconds)",
    )
    v.add_argument(
        "--percentile-metrics",
        help="metrics with percentiles in --save-result: comma list of ttft, "
        "tpot, itl, e2el (default all four; vLLM: ttft,tpot,itl)",
    )
    v.add_argument("--metric-percentiles", help="percentiles for them, e.g. 50,90,99 (default 99)")
    v.add_argument("--save-result", action="store_true", help="write a result JSON with vllm bench serve's keys")
    v.add_argument("--save-detailed", action="store_true", help="... with the per-request lists (ttfts, itls, ...)")
    v.add_argument("--result-dir", help="folder for --save-result (default: here)")
    v.add_argument("--result-filename", help="file name for --save-result (default: vLLM's naming)")
    v.add_argument("--label", help="label in the result file and its name (default: wattbench)")
    v.add_argument(
        "--metadata", nargs="*", metavar="KEY=VALUE", default=[], help="key-value pairs stored in the result file"
    )


def _energy_flags(p) -> None:
    """Energy and cost with the load (loadgen/energy.py): a telemetry source and prices."""
    e = p.add_argument_group(
        "energy and cost",
        "read the GPUs' energy counter at each window's edges and give tok/J, J per request and $ per 1M output "
        "tokens with the load's figures (at a search's capacity: with 95% intervals over its windows)",
    )
    e.add_argument(
        "--telemetry",
        metavar="SOURCE",
        help="nvml (this host's NVML, on --gpus), dcgm=URL (an NVIDIA dcgm-exporter's /metrics), emulator (the "
        "emulator's own power figures, beside its API) or none (the default)",
    )
    e.add_argument(
        "--gpus",
        help="the server's GPUs, a comma list: NVML indices or UUIDs (nvml; default every GPU), UUIDs (dcgm, "
        "emulator); their number is the GPU count of the $ per GPU-hour figure",
    )
    e.add_argument(
        "--telemetry-hz",
        type=finite_float(0, 1000, strict_minimum=True),
        default=10.0,
        help="telemetry samples per second (default 10); the window's energy is read at its edges either way",
    )
    e.add_argument(
        "--idle",
        type=finite_float(0, 3600),
        default=0.0,
        metavar="S",
        help="seconds of idle power read before the first window (for the above-idle figures; default 0: none)",
    )
    e.add_argument("--gpu-hour-usd", type=finite_float(0, 1e4, strict_minimum=True), help="$ per GPU-hour")
    e.add_argument("--energy-kwh-usd", type=finite_float(0, 1e3, strict_minimum=True), help="$ per kWh")
    e.add_argument(
        "--pue", type=finite_float(1, 10), help="the data centre's PUE for the energy cost (default 1: the GPUs alone)"
    )
    e.add_argument(
        "--prices-from", metavar="PLAN", help="a wattbench plan whose prices: section gives them (the flags win)"
    )


def energy_meter(a, url: str):
    """The Meter (loadgen/energy.py) the flags ask for, or None when they ask for no energy and no cost."""
    from .energy import Meter, Prices, parse_telemetry, plan_prices

    wanted = (a.telemetry, a.gpu_hour_usd, a.energy_kwh_usd, a.prices_from, a.gpus)
    if all(v is None for v in wanted):
        return None
    kind, dcgm_url = parse_telemetry(a.telemetry or "none")
    prices = plan_prices(a.prices_from) if a.prices_from else Prices()
    for flag, key in (("gpu_hour_usd", "gpu_hour_usd"), ("energy_kwh_usd", "energy_kwh_usd"), ("pue", "pue")):
        if getattr(a, flag) is not None:
            setattr(prices, key, getattr(a, flag))
    gpus = [g.strip() for g in (a.gpus or "").split(",") if g.strip()]
    return Meter(kind, url, gpus, prices, hz=a.telemetry_hz, idle_s=a.idle, dcgm_url=dcgm_url)


def _headers(a) -> dict:
    headers = {}
    for h in a.header:
        k, sep, v = h.partition(":")
        if not sep:
            k, sep, v = h.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"--header {h!r}: expected 'Name: value'")
        headers[k.strip()] = v.strip()
    return headers


def resolve_target(a) -> tuple[str, str]:
    """(URL to load, API) from --url/--base-url, --endpoint, --host/--port, --backend and --api. No server named:
    vllm bench serve's 127.0.0.1:8000. --backend (vllm bench serve's values) picks the API and, for a base URL
    without --endpoint, its endpoint (openai: /v1/completions, openai-chat: /v1/chat/completions)."""
    if a.url and (a.host or a.port):
        raise ValueError("give either --url/--base-url or --host/--port, not both")
    url = a.url or f"http://{a.host or '127.0.0.1'}:{a.port or 8000}"
    check_url(url)
    endpoint = a.endpoint
    api = a.api
    backend = getattr(a, "backend", None)
    if backend:
        b_api, b_endpoint = backend_api(backend)
        if api and api != b_api:
            raise ValueError(f"--api {api} contradicts --backend {backend} (the {b_api} API); give one of them")
        implied = api_of(join_endpoint(url, endpoint) if endpoint else url)
        if implied and implied != b_api:
            raise ValueError(
                f"--backend {backend} speaks the {b_api} API but the endpoint is the {implied} one; "
                f"drop --endpoint or give --backend {'openai-chat' if implied == 'chat' else 'openai'}"
            )
        api = b_api
        if not endpoint and not api_of(url):
            endpoint = b_endpoint
    if endpoint:
        if api_of(url):
            raise ValueError(
                f"--endpoint {endpoint} given with a URL that already names an endpoint ({url}); give the base URL"
            )
        url = join_endpoint(url, endpoint)
        if not api_of(url):
            raise ValueError(f"--endpoint {endpoint}: expected /v1/chat/completions or /v1/completions")
    return url, resolve_api(url, api)


def _spec(a, url: str, api: str, model: str, **over) -> LoadSpec:
    data = vllm_flags.spec_fields(a, api)  # the dataset and its lengths, sampling parameters, request ids, warm-ups
    d = dict(
        url=url,
        model=model,
        api=api,
        warmup_s=a.warmup,
        ramp_s=a.ramp,
        duration_s=a.duration if a.duration is not None else 10.0,
        max_requests=a.max_requests,
        timeout_s=a.timeout,
        seed=a.seed,
        ignore_eos=not a.no_ignore_eos,
        extra_body={**data.pop("extra_body_under"), **(json.loads(a.extra_body) if a.extra_body else {})},
        headers=_headers(a),
        transport=a.transport,
        shared_prefix_tokens=a.shared_prefix_tokens,
        tokenizer=a.tokenizer,
        load_point_id=a.load_point_id,
        fail_fast=not a.no_fail_fast,
    )
    d.update(data)
    until_sent = a.duration is None and a.max_requests is not None
    if a.trace_path or a.shape == "ramp":  # schedules of their own (ramp: vLLM's, over --num-prompts)
        d.update(shape=a.shape or "trace", concurrency=a.max_concurrency)
        if a.trace_path and a.duration is None:
            d["duration_s"] = 0.0
    elif a.rate is not None and not _inf(a.rate):
        # vllm bench serve's flags pick the shape: --burstiness other than 1 gamma, --surge-factor surge
        shape = "surge" if a.surge_factor else ("gamma" if a.burstiness not in (None, 1.0) else "poisson")
        d.update(shape=shape, concurrency=a.max_concurrency)
    else:
        d.update(shape="concurrency")
    if a.shape:
        d["shape"] = a.shape
    if until_sent and not a.trace_path:
        d["duration_s"] = 0.0  # until --num-prompts are sent (LoadSpec: duration 0 with max_requests)
    d.update(over)
    # the shape's own parameters, from their flags (those of other shapes are not its business)
    d.update(
        {
            q.name: getattr(a, q.name)
            for q in shapes.get(d["shape"]).params
            if getattr(a, q.name, None) is not None and q.name not in over
        }
    )
    return LoadSpec.from_dict(d)


def _inf(text: str) -> bool:
    return str(text).strip().lower() in ("inf", "infinity")


def _points(a) -> tuple[str | None, list]:
    """(swept parameter, its values) from --concurrency / --rate / --request-rate / --max-concurrency."""
    if a.concurrency is not None:
        counts = _floats(a.concurrency, "--concurrency")
        if any(v != int(v) or v > MAX_CONCURRENCY for v in counts):
            raise ValueError(
                f"--concurrency {a.concurrency!r}: expected whole numbers of streams, at most {MAX_CONCURRENCY}"
            )
        return "concurrency", [int(v) for v in counts]
    if a.rate is not None and not _inf(a.rate):
        return "rate", _floats(a.rate, "--rate")
    if a.trace_path or a.shape == "ramp":
        return None, [None]
    # vLLM's request rate inf (also its default, with --num-prompts alone): every request at once, capped by
    # --max-concurrency: that many closed-loop streams, or one per prompt
    n = a.max_concurrency or a.max_requests
    if not n:
        if a.rate is not None:
            raise ValueError(
                "--request-rate inf needs --max-concurrency N (or --num-prompts N): that many closed-loop streams"
            )
        raise ValueError(
            "no load shape: give --concurrency N, --rate R (--request-rate), --max-concurrency N or --trace FILE"
        )
    return "concurrency", [int(n)]


def _fmt(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def summary_table(s: dict) -> str:
    rows = [
        f"load point {s.get('load_point_id')}  ({s.get('shape')}, {s.get('api')}, {s.get('workload')})",
        f"  window {s['window_s']:.2f} s (warm-up {s.get('warmup_s', 0):g} s, drain {s.get('drain_s', 0):.2f} s)   "
        f"sent {s['sent']}  completed {s['completed']}  failed {s['failed']}",
        f"  {'metric':<10} {'p50':>9} {'p90':>9} {'p99':>9} {'mean':>9} {'stdev':>9}",
    ]
    for k, label in (("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms")):
        m = s[k]
        rows.append(
            f"  {label:<10} {_fmt(m['p50']):>9} {_fmt(m['p90']):>9} {_fmt(m['p99']):>9} "
            f"{_fmt(m['mean']):>9} {_fmt(m['stdev']):>9}"
        )
    req = s.get("requested_rate")
    rows += [
        f"  request throughput  {_fmt(s['request_throughput'])} req/s   "
        f"output tokens {_fmt(s['output_token_throughput'], 1)} tok/s"
        f"   total tokens {_fmt(s.get('total_token_throughput'), 1)} tok/s"
        + (f"   goodput {_fmt(s.get('goodput'))} req/s" if s.get("slo") else ""),
        f"  achieved rate {_fmt(s['achieved_rate'])} req/s"
        + (f" (requested {req:g})" if req else "")
        + f"   achieved concurrency {_fmt(s['achieved_concurrency'])}"
        + (f" (requested {s['requested_concurrency']})" if s.get("requested_concurrency") else ""),
        f"  send lateness p50 {_fmt(s['send_lateness_ms']['p50'], 3)} ms  "
        f"p99 {_fmt(s['send_lateness_ms']['p99'], 3)} ms",
    ]
    if s.get("errors"):
        rows.append("  errors: " + ", ".join(f"{k} {v}" for k, v in s["errors"].items()))
    if s.get("energy"):
        rows.append(energy_row(s["energy"]))
    pl = s.get("prompt_length") or {}
    if pl.get("achieved_mean_tokens") is not None:  # how prompt lengths were met, and what the server counted
        asked = pl.get("requested_mean_tokens")
        rows.append(
            f"  prompt tokens (server's count) mean {pl['achieved_mean_tokens']:.1f}"
            + (f", asked {asked:.1f} ({pl['error_pct']:+.2f}%)" if asked else "")
            + f"   lengths: {pl['method']}"
        )
    from .steps import describe  # numpy: not for `wattbench load --help`

    if describe(s.get("steps")):
        rows.append(describe(s.get("steps")))
    return "\n".join(rows)


def energy_row(e: dict) -> str:
    """The summary table's energy and cost line (loadgen/energy.py figures)."""
    where = (
        f" ({e.get('source')}: {e.get('telemetry')} telemetry, {e.get('n_gpus')} GPU(s))"
        if e.get("telemetry") not in (None, "none")
        else ""
    )
    usd, eusd = e.get("usd_per_1m_output_tokens"), e.get("energy_usd_per_1m_output_tokens")
    return (
        f"  energy {_fmt(e.get('energy_j'), 1)} J{where}   {_fmt(e.get('output_tokens_per_j'), 3)} tok/J   "
        f"{_fmt(e.get('j_per_request'))} J per request   {_fmt(e.get('mean_power_w'), 1)} W   "
        f"$ {_fmt(usd, 4)} per 1M output tokens (GPU-hours)   energy $ {_fmt(eusd, 4)}"
        + (f"\n  ({e['note']})" if e.get("note") else "")
    )


def main(a) -> int:
    from .energy import EnergyError

    try:
        problem = vllm_flags.refused(a)
        if problem:
            raise ValueError(problem)
        vllm_flags.prepare(a)  # vLLM's flags into wattbench's: before the shape is read from them
        url, api = resolve_target(a)
        slo = parse_goodput(a.goodput) if a.goodput else None
        meter = energy_meter(a, url)
        model_id = a.model or vllm_flags.server_model(url, _headers(a), a.ready_check_timeout_sec)
        model = a.served_model_name or model_id  # the name sent in requests (vLLM's --served-model-name)
        if a.search:
            if not a.model:
                print(f"wattbench load: model {model} (the server's only model)", file=sys.stderr)
            with meter or contextlib.nullcontext():
                return search_cli.main(
                    a,
                    url,
                    api,
                    model,
                    slo or {},
                    lambda **over: _spec(a, url, api, model, **over),
                    _headers(a),
                    meter=meter,
                )
        key, values = _points(a)
        pmetrics = parse_percentile_metrics(a.percentile_metrics)
        pcts = parse_percentiles(a.metric_percentiles)
        metadata = {}
        for item in a.metadata:
            k, sep, v = item.partition("=")
            if not sep:
                raise ValueError(f"--metadata {item!r}: expected KEY=VALUE")
            metadata[k.strip()] = v.strip()
        specs = [
            _spec(
                a,
                url,
                api,
                model,
                **({key: v} if key else {}),
                **(
                    {"load_point_id": f"{a.load_point_id}-{key[0]}{v:g}"} if a.load_point_id and len(values) > 1 else {}
                ),
            )
            for v in values
        ]
        specs = [vllm_flags.cap_to_dataset(spec) for spec in specs]  # --no-oversample
    except (LoadSpecError, EndpointError, ResultArgError, ValueError) as exc:
        print(f"wattbench load: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    if not a.model:
        print(f"wattbench load: model {model} (the server's only model)", file=sys.stderr)
    try:
        with meter or contextlib.nullcontext():
            return _run_points(a, specs, key, model, slo, pmetrics, pcts, metadata, meter, model_id)
    except EnergyError as exc:
        print(f"wattbench load: {redact_text(str(exc))}", file=sys.stderr)
        return 2


def _run_points(a, specs, key, model, slo, pmetrics, pcts, metadata, meter, model_id) -> int:
    """Every load point of a `wattbench load` (one, or a sweep), its summary printed and its files written. `model`:
    the name requests carry; `model_id`: the model's id as the result file names it (vLLM's --served-model-name)."""
    from .prelude import NotReady
    from .runner import run_load

    summaries = []
    for spec in specs:
        start, end = meter.callbacks(spec.load_point_id or "load") if meter is not None else (None, None)
        try:
            res = run_load(
                spec,
                out=Path(a.out) if a.out else None,
                progress=not a.no_progress and sys.stderr.isatty() or (not a.no_progress and not a.json),
                workers=a.workers,
                slo=slo,
                on_window_start=start,
                on_window_end=end,
                verify=not a.insecure,
            )
        except (LoadSpecError, ValueError, NotReady) as exc:
            print(f"wattbench load: {redact_text(str(exc))}", file=sys.stderr)
            return 2
        ff = res.summary.get("fail_fast")
        gone = res.summary.get("server_gone")
        if ff and not res.summary["completed"]:
            print(f"wattbench load: {redact_text(ff['message'])}", file=sys.stderr, flush=True)
        else:
            print(summary_table(res.summary), file=sys.stderr if a.json else sys.stdout, flush=True)
            first = next((r for r in res.records if r.get("error_kind")), None)
            if first is not None and not res.summary["completed"]:
                text = " ".join(str(first.get("error_text") or "").split())[:400]
                print(
                    f"wattbench load: no request completed; the first failed with {first['error_kind']}: "
                    f"{redact_text(text)}",
                    file=sys.stderr,
                    flush=True,
                )
        if gone:
            print(f"wattbench load: {redact_text(gone['message'])}", file=sys.stderr, flush=True)
        if a.save_result or a.save_detailed or a.append_result or a.plot_timeline:
            result = result_json(
                res,
                model_id=model_id,
                label=a.label,
                num_prompts=a.max_requests,
                tokenizer_id=a.tokenizer,
                percentile_metrics=pmetrics,
                percentiles=pcts,
                goodput=slo,
                detailed=a.save_detailed,
                metadata=metadata,
            )
            suffix = f"{key[0]}{spec.concurrency if key == 'concurrency' else spec.rate:g}" if len(specs) > 1 else None
            path = result_filename(result, a.label, a.result_dir, a.result_filename, suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            for line in vllm_flags.write_result(a, res, result, path):
                print(f"wattbench load: {line}", file=sys.stderr)
        summaries.append(res.summary)
        if ff and not res.summary["completed"] or gone:
            break
    if a.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else {"sweep": summaries}, separators=(",", ":")))
    # non-zero when a point measured nothing, or its server went away mid-run (a broken window is no measurement)
    return 0 if all(s["completed"] and not s.get("server_gone") for s in summaries) else 1
