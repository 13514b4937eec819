"""`wattbench load` takes every flag of vLLM 0.25's `vllm bench serve` (vllm/benchmarks/serve.py `add_cli_args`,
datasets/datasets.py `add_dataset_parser`) with vLLM's meaning, or refuses it by name in one line saying why
(tests/data/vllm/bench_serve_flags.txt lists them; tests/loadgen/test_vllm_flags.py holds every one to this).

Registered here: the flags wattbench's own groups (cli.py) do not already take under vLLM's name. `prepare(a)` turns
them into wattbench's own arguments before the load shape is inferred, `spec_fields(a)` into LoadSpec fields (the
dataset and its lengths, sampling parameters, request ids, warm-ups); `refused(a)` is the one line for a flag that
is not supported.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from wattbench_agent.argtypes import finite_float

# vLLM sends these in the request body when given (serve.py: sampling_params, under --extra-body's keys)
SAMPLING = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "frequency_penalty": float,
    "presence_penalty": float,
    "repetition_penalty": float,
}

_MULTIMODAL = "multimodal inputs (images, video): wattbench sends text prompts only"
_AUDIO = "audio inputs (the ASR datasets): wattbench sends text prompts only"
REFUSED = {
    "--profile": "it starts the server's own profiler (server-side profiling: vLLM's /start_profile, with "
    "--profiler-config on the server); wattbench measures from the client: profile the engine on its side",
    "--use-beam-search": "beam search: vLLM's serving benchmark sends no beam-search request either; wattbench "
    "measures streamed sampling",
    "--lora-modules": "LoRA assignment (an adapter per request) is not supported: name one adapter with --model "
    "(--served-model-name) to measure it",
    "--lora-assignment": "LoRA assignment (an adapter per request) is not supported: name one adapter with --model",
    "--enable-multimodal-chat": _MULTIMODAL,
    "--custom-ensure-client-side-data": _MULTIMODAL + " (custom_image media)",
    "--random-mm-base-items-per-request": _MULTIMODAL + " (random-mm)",
    "--random-mm-num-mm-items-range-ratio": _MULTIMODAL + " (random-mm)",
    "--random-mm-limit-mm-per-prompt": _MULTIMODAL + " (random-mm)",
    "--random-mm-bucket-config": _MULTIMODAL + " (random-mm)",
    "--asr-max-audio-len-sec": _AUDIO,
    "--asr-min-audio-len-sec": _AUDIO,
    "--no-reranker": "reranking (random-rerank: query-document pairs to a rerank endpoint): wattbench measures "
    "streamed text",
    "--bfcl-categories": "BFCL sends tool schemas with each request (function calling), which wattbench does not",
    "--chat-template-kwargs": "it renders a chat template client side, which wattbench does not (dataset text is sent "
    "as is, as with --skip-chat-template); for the server's template give --extra-body "
    "'{\"chat_template_kwargs\": {...}}'",
    "--plot-dataset-stats": "a matplotlib figure of the dataset's lengths; the lengths are in the result file "
    "(--save-detailed: input_lens, output_lens) and in --out",
}
TOKENIZER_MODES = ("auto", "hf", "slow")  # vLLM's others (mistral, deepseek_v32, plugins) need their own packages

# dataset flags: vLLM's dest -> (type, help); their defaults are the datasets' (datasets.py)
_DATASET_FLAGS = {
    "sonnet_input_len": (int, "sonnet: prompt tokens (vLLM's default 550)"),
    "sonnet_output_len": (int, "sonnet: output tokens (default 150)"),
    "sonnet_prefix_len": (int, "sonnet: tokens of the shared prefix lines (default 200)"),
    "sharegpt_output_len": (int, "sharegpt: output tokens for every request (default: each reply's own)"),
    "custom_output_len": (int, "custom: output tokens (default 256; -1: each line's output_tokens)"),
    "hf_name": (str, "hf: the dataset's hub name (picks its format) when --dataset-path is a local copy"),
    "hf_subset": (str, "hf: the subset (files named by it)"),
    "hf_split": (str, "hf: the split (files named by it; vLLM's default per dataset)"),
    "hf_output_len": (int, "hf: output tokens (default: the dataset's)"),
    "blazedit_min_distance": (float, "hf vdaita/edit_*: lowest norm_distance kept (0)"),
    "blazedit_max_distance": (float, "hf vdaita/edit_*: highest norm_distance kept (1)"),
    "prefix_repetition_prefix_len": (int, "prefix_repetition: tokens of each shared prefix (256)"),
    "prefix_repetition_suffix_len": (int, "prefix_repetition: tokens of each unique suffix (256)"),
    "prefix_repetition_num_prefixes": (int, "prefix_repetition: distinct prefixes (10)"),
    "prefix_repetition_output_len": (int, "prefix_repetition: output tokens (128)"),
    "spec_bench_output_len": (int, "spec_bench: output tokens (256)"),
    "spec_bench_category": (str, "spec_bench: only this category"),
    "speed_bench_dataset_subset": (str, "speed_bench: <subset>.jsonl of the folder (qualitative)"),
    "speed_bench_output_len": (int, "speed_bench: output tokens (4096)"),
    "speed_bench_category": (str, "speed_bench: only this category"),
    "timed_trace_chunk_hash_size": (int, "timed_trace: tokens per hash id's block (16)"),
    "timed_trace_sec_multiplier": (float, "timed_trace: timestamps times this are seconds (1; 0.001 for ms)"),
    "timed_trace_label_timestamp": (str, "timed_trace: the timestamp's key (timestamp)"),
    "timed_trace_label_input_length": (str, "timed_trace: the input length's key (input_length)"),
    "timed_trace_label_output_length": (str, "timed_trace: the output length's key (output_length)"),
    "timed_trace_label_hash_ids": (str, "timed_trace: the hash ids' key (hash_ids)"),
}


class _Refused(argparse.Action):
    """A flag of vLLM's that wattbench does not support: noted (with any values it takes), refused in main."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = getattr(namespace, "vllm_refused", None) or []
        namespace.vllm_refused = [*seen, option_string]


def range_ratio(text: str) -> Any:
    """vLLM's --random-range-ratio: a number in [0, 1), or JSON {"input": r, "output": r}."""
    try:
        value: Any = float(text)
    except ValueError:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict) or not set(value) <= {"input", "output"}:
            raise argparse.ArgumentTypeError(
                f'{text!r}: expected a number in [0, 1) or JSON like {{"input": 0.3, "output": 0.5}}'
            ) from None
    for r in value.values() if isinstance(value, dict) else [value]:
        if not isinstance(r, (int, float)) or not 0 <= r < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: ratios must be in [0, 1)")
    return value


def register(p) -> None:
    """vllm bench serve's flags that wattbench's own groups do not take under vLLM's names."""
    v = p.add_argument_group("vllm bench serve's other flags (vLLM's meaning; docs/LOADGEN.md)")
    s = p.add_argument_group("sampling parameters (sent in each request's body, as vLLM sends them)")
    for name, kind in SAMPLING.items():
        s.add_argument("--" + name.replace("_", "-"), dest=name, type=kind if kind is int else finite_float())
    v.add_argument("--served-model-name", help="the model name sent in requests (default: --model)")
    v.add_argument("--request-id-prefix", help="send x-request-id: PREFIX<request number> with each request")
    v.add_argument("--num-warmups", type=int, default=0, help="warm-up requests before the run (the first prompt)")
    v.add_argument("--disable-tqdm", action="store_true", help="no progress display (= --no-progress)")
    v.add_argument("--append-result", action="store_true", help="append the result JSON to the file as a new line")
    v.add_argument(
        "--ready-check-timeout-sec",
        type=finite_float(0),
        default=0.0,
        help="retry a test request every 5 s until it succeeds, up to this long (0: no check)",
    )
    v.add_argument("--logprobs", type=int, help="logprobs per token (completions: logprobs; chat: top_logprobs)")
    v.add_argument("--insecure", action="store_true", help="do not verify the server's TLS certificate")
    v.add_argument("--plot-timeline", action="store_true", help="with --save-result: an HTML timeline of the requests")
    v.add_argument("--timeline-itl-thresholds", default="25,50", help="ITL ms that colour the timeline (25,50)")
    v.add_argument("--trust-remote-code", action="store_true", help="--tokenizer: trust the model's own code")
    v.add_argument("--tokenizer-mode", default="auto", help=f"--tokenizer: {', '.join(TOKENIZER_MODES)}")
    v.add_argument("--skip-tokenizer-init", action="store_true", help="(wattbench needs no tokenizer: accepted)")
    v.add_argument("--skip-chat-template", action="store_true", help="(wattbench renders none client side: accepted)")
    v.add_argument("--no-stream", action="store_true", help="(hf: local files are read whole: accepted)")
    v.add_argument("--disable-shuffle", action="store_true", help="take the dataset's entries in the file's order")
    v.add_argument("--no-oversample", action="store_true", help="send each dataset entry once at most")
    v.add_argument("--self-timed", action=argparse.BooleanOptionalAction, help="timed_trace: its own times (default)")
    v.add_argument("--random-prefix-len", type=int, default=0, help="random: a prefix of this many tokens, shared")
    v.add_argument("--random-batch-size", type=int, default=1, help="(1: embedding benchmarks batch prompts)")
    v.add_argument("--turns", "--conversation-turn-mean", dest="turns", type=int, help="user turns a conversation")
    v.add_argument(
        "--turn-delay-ms",
        "--conversation-turn-delay-mean",
        dest="turn_delay_ms",
        type=finite_float(0),
        help="think time before each later turn, ms",
    )
    for dest, (kind, text) in _DATASET_FLAGS.items():
        v.add_argument("--" + dest.replace("_", "-"), dest=dest, type=kind if kind is not float else finite_float(0),
                       help=text)  # fmt: skip
    r = p.add_argument_group("vllm bench serve's flags that wattbench refuses (each says why)")
    for flag in REFUSED:
        r.add_argument(flag, nargs="*", action=_Refused, help=argparse.SUPPRESS)


def refused(a) -> str | None:
    """One line for the flags of vLLM's that were given and are not supported, or None."""
    why = {f: REFUSED[f] for f in dict.fromkeys(getattr(a, "vllm_refused", None) or [])}
    if getattr(a, "random_batch_size", 1) not in (None, 1):
        why["--random-batch-size"] = (
            "batching prompts is vLLM's embedding benchmark; streamed text is one prompt a request"
        )
    mode = getattr(a, "tokenizer_mode", "auto")
    if mode not in TOKENIZER_MODES:
        why["--tokenizer-mode"] = (
            f"{mode}: expected one of {', '.join(TOKENIZER_MODES)} (the others need their own tokenizer packages)"
        )
    return "; ".join(f"{flag} is not supported: {text}" for flag, text in why.items()) or None


def prepare(a) -> None:
    """vLLM's flags into wattbench's own arguments, before the load shape is read from them: --disable-tqdm, a
    self-timed timed_trace (the trace shape over its file), a ramp (the ramp shape)."""
    from . import datasets

    if a.disable_tqdm:
        a.no_progress = True
    if a.dataset_name:
        datasets.get(a.dataset_name)  # a dataset that is not text: one line, before anything else is asked
    if a.max_requests is not None and a.max_requests <= 0:  # vLLM's --num-prompts -1: every entry of the file
        a.max_requests, a.no_oversample = _dataset_size(a), True
    if a.self_timed is not None and a.dataset_name != "timed_trace":
        raise ValueError("--self-timed / --no-self-timed is only for --dataset-name timed_trace (as vLLM's)")
    if a.dataset_name == "timed_trace" and a.self_timed is not False:
        if a.rate is not None or a.concurrency is not None:
            raise ValueError("a self-timed timed_trace sends at its own times: give no --rate (or --no-self-timed)")
        a.trace_path = a.dataset
        if a.timed_trace_sec_multiplier is not None:
            a.trace_time_scale = a.timed_trace_sec_multiplier
    if a.ramp_up_strategy is not None or a.ramp_up_start_rps is not None or a.ramp_up_end_rps is not None:
        if a.rate is not None:
            raise ValueError("with --ramp-up-strategy give no --request-rate: the ramp sets the rate (as vLLM's)")
        if a.ramp_up_start_rps is None or a.ramp_up_end_rps is None or a.ramp_up_strategy is None:
            raise ValueError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps (as vLLM's)")
        a.shape = "ramp"


def _dataset_size(a) -> int:
    """How many entries the dataset the flags name has (vLLM's --num-prompts 0 or less: all of them)."""
    from types import SimpleNamespace

    from . import datasets

    name = a.dataset_name or ("sharegpt" if a.dataset else "random")
    if not datasets.get(name).reader:
        raise ValueError(f"--num-prompts {a.max_requests}: every entry of a dataset file, but {name} has no file")
    if a.dataset and not Path(a.dataset).expanduser().exists() and name != "hf":
        raise ValueError(f"--dataset-path {a.dataset}: no such file or folder (--dataset-name {name})")
    ds = datasets.get(name)
    opts = {k: getattr(a, k) for k in (ds.options or {}) if getattr(a, k, None) is not None}
    spec = SimpleNamespace(dataset_name=name, dataset_path=a.dataset, dataset_options=opts, seed=a.seed)
    return len(datasets.load(spec) or [])


def _lengths(a, name: str, ds) -> dict[str, Any]:
    """The LoadSpec lengths of a dataset: --input-len / --output-len over the dataset's own flags (vLLM maps the
    general ones onto every dataset's), over its defaults; a dataset's own output lengths where none is given."""
    from .workload import range_ratio_dist

    out: dict[str, Any] = {}
    n_in, n_out = a.input_tokens, a.output_tokens
    if name == "random":
        n_in, n_out = n_in or 128, n_out or 128
        ratio, prefix = a.random_range_ratio or 0.0, a.random_prefix_len or 0
        r_in, r_out = (ratio.get("input", 0.0), ratio.get("output", 0.0)) if isinstance(ratio, dict) else (ratio,) * 2
        if prefix:  # vLLM: a shared prefix, then the context of the sampled length
            dist = range_ratio_dist(n_in, r_in) or {"kind": "fixed", "value": n_in}
            out.update(shared_prefix_tokens=prefix, num_prefixes=1, input_tokens=n_in + prefix)
            out["input_tokens_dist"] = {**dist, **{k: dist[k] + prefix for k in ("min", "max", "value") if k in dist}}
        elif isinstance(ratio, dict) and r_in:
            out["input_tokens_dist"] = range_ratio_dist(n_in, r_in)
        if isinstance(ratio, dict) and r_out:
            out["output_tokens_dist"] = range_ratio_dist(n_out, r_out)
        elif not isinstance(ratio, dict) and ratio:
            out["random_range_ratio"] = ratio
        return {"input_tokens": n_in, "output_tokens": n_out, **out}
    if name == "prefix_repetition":
        pre, suf = a.prefix_repetition_prefix_len or 256, a.prefix_repetition_suffix_len or 256
        return {
            "input_tokens": pre + suf,
            "shared_prefix_tokens": pre,
            "num_prefixes": a.prefix_repetition_num_prefixes or 10,
            "output_tokens": n_out or a.prefix_repetition_output_len or 128,
        }
    if name == "sonnet":
        return {"input_tokens": n_in or a.sonnet_input_len or 550, "output_tokens": n_out or a.sonnet_output_len or 150}
    own = getattr(a, ds.output_option, None) if ds.output_option else None
    if n_out is None and own is None and ds.output_option:
        own = (ds.options or {}).get(ds.output_option)
    n_out = n_out if n_out is not None else own
    if name in ("burstgpt", "timed_trace") or n_out is None or n_out == -1:  # the dataset's own lengths
        return {"input_tokens": n_in or 128, "output_tokens": 128, "output_tokens_dist": {"kind": "dataset"}}
    return {"input_tokens": n_in or 128, "output_tokens": int(n_out)}


def spec_fields(a, api: str) -> dict[str, Any]:
    """LoadSpec fields from vLLM's dataset, sampling, request and tokenizer flags (`api`: the one resolved)."""
    from . import datasets

    name = a.dataset_name or ("sharegpt" if a.dataset else "random")
    ds = datasets.get(name)
    if ds.needs_path and not a.dataset:
        raise ValueError(f"--dataset-name {name} needs --dataset-path ({ds.summary})")
    if not ds.needs_path and a.dataset:
        raise ValueError(f"--dataset-name {name} takes no --dataset-path ({a.dataset}); name the dataset the file is")
    if a.dataset and not Path(a.dataset).expanduser().exists() and name != "hf":
        raise ValueError(f"--dataset-path {a.dataset}: no such file or folder (--dataset-name {name})")
    opts = {k: getattr(a, k) for k in (ds.options or {}) if k != ds.output_option and getattr(a, k, None) is not None}
    opts.update({k: True for k in ("disable_shuffle", "no_oversample") if getattr(a, k)})
    if name == "timed_trace" and a.self_timed is not None:
        opts["self_timed"] = a.self_timed
    d: dict[str, Any] = {
        "dataset_name": a.dataset_name,
        "dataset_path": a.dataset,
        "dataset_options": opts,
        **_lengths(a, name, ds),
    }
    if a.turns:
        d["turns"] = a.turns
    if a.turn_delay_ms:
        d["turn_delay_s"] = a.turn_delay_ms / 1e3
    body = {k: getattr(a, k) for k in SAMPLING if getattr(a, k) is not None}
    if a.logprobs is not None:  # vLLM's completions body; the chat API's form of the same ask
        chat = {"logprobs": True, "top_logprobs": a.logprobs}
        body.update({"logprobs": a.logprobs} if api == "completions" else chat)
    d["extra_body_under"] = body  # under --extra-body's keys, as vLLM's {**sampling_params, **extra_body}
    if a.request_id_prefix is not None:
        d["request_id_prefix"] = a.request_id_prefix
    d["num_warmups"] = a.num_warmups or 0
    d["ready_check_timeout_s"] = a.ready_check_timeout_sec or 0.0
    tok = {"trust_remote_code": True} if a.trust_remote_code else {}
    if a.tokenizer_mode != "auto":
        tok["tokenizer_mode"] = a.tokenizer_mode
    d["tokenizer_options"] = tok
    return d


def cap_to_dataset(spec) -> Any:
    """--no-oversample: at most one request per dataset entry (vLLM sends the entries it has)."""
    from . import datasets

    if not (spec.dataset_options or {}).get("no_oversample"):
        return spec
    entries = datasets.load(spec)
    if entries is None:
        return spec
    n = len(entries)
    return spec.replace(max_requests=min(spec.max_requests or n, n))


def server_model(url: str, headers: dict, ready_timeout_s: float = 0.0) -> str:
    """The server's only model (GET /v1/models); with --ready-check-timeout-sec, asked again every 5 s until the
    server answers or the time is up (vLLM asks for the model before its ready check; a server still starting has
    no model list yet)."""
    import time

    from .endpoint import EndpointError, default_model

    deadline = time.monotonic() + (ready_timeout_s or 0.0)
    while True:
        try:
            return default_model(url, headers)
        except EndpointError:
            if time.monotonic() + 5.0 > deadline:
                raise
            time.sleep(5.0)


def write_result(a, res, result: dict, path: Path) -> list[str]:
    """The result file as vLLM writes it (--save-result; --append-result: one more JSON line in the same file) and
    its timeline (--plot-timeline, beside it); what was written, one line each."""
    lines = []
    if a.save_result or a.save_detailed or a.append_result:
        text = json.dumps(result)
        if a.append_result and path.exists() and path.stat().st_size:
            with path.open("rb+") as f:  # a new line each, as vLLM's (it writes "\n" before each appended one)
                f.seek(-1, 2)
                gap = b"" if f.read(1) == b"\n" else b"\n"
            with path.open("ab") as f:
                f.write(gap + text.encode() + b"\n")
            lines.append(f"result appended to {path} (vllm bench serve's keys)")
        else:
            path.write_text(text + "\n", encoding="utf-8")
            lines.append(f"result written to {path} (vllm bench serve's keys)")
    if a.plot_timeline:
        from .timeline import write_timeline

        out = path.with_suffix(".timeline.html")
        write_timeline(res, out, a.timeline_itl_thresholds)
        lines.append(f"timeline written to {out}")
    return lines
