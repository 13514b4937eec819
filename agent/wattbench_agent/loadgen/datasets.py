"""Datasets: `vllm bench serve`'s text datasets (`--dataset-name`, vLLM 0.25's vllm/benchmarks/datasets/datasets.py)
read from their own file formats, and multi-turn conversations (as AIPerf's and guidellm's).

A dataset is a list of entries (`Entry`): the text to send, or the lengths of a prompt wattbench makes itself, the
dataset's own output length, and for conversations the user turns. Requests take the entries in the order of a
permutation drawn from the seed (the file's order with `disable_shuffle`) and start over when they run out (vLLM
oversamples the same way; `no_oversample` stops there instead). Every file is read locally: `hf` reads local
parquet / JSON Lines / JSON / arrow files or the local Hugging Face caches, never the hub at run time.

What differs from vLLM, and why: wattbench renders no chat template client side (it has no tokenizer by default):
a dataset's text is sent as it is, which is vLLM's `--skip-chat-template`; on the chat API the server applies its
own. Prompts vLLM makes of random token ids (burstgpt, timed_trace blocks, random) are wattbench's single-token
words, their lengths met on the server's count (workload.py, docs/LOADGEN.md "Prompt lengths"). vLLM's length
filters of ShareGPT-like data (prompt 4..1024, total <= 2048 tokens) are not applied: every entry is used.
Agent side: stdlib only (pyarrow, where present, for parquet and arrow files).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dataset_files import DatasetError, Entry, lines_json, load_sharegpt, need, open_text, records

# vLLM 0.25's --dataset-name values that send something other than text, with why they are not supported
NOT_TEXT = {
    "random-mm": "multimodal (random images and videos): wattbench sends text prompts only",
    "random-rerank": "reranking (query-document pairs to a rerank endpoint): wattbench measures streamed text",
    "custom_audio": "audio inputs: wattbench sends text prompts only",
    "custom_image": "multimodal (images): wattbench sends text prompts only",
}


@dataclass(frozen=True)
class Dataset:
    """One `--dataset-name`: whether it reads `dataset_path`, its options (vLLM's flag names, their defaults) and
    its reader. `own_output` says where the output length comes from when no flag gives one (the dataset's entry;
    else the option `output_option`)."""

    name: str
    summary: str
    reader: Callable[[Path | None, Mapping[str, Any]], list[Entry]] | None = None
    options: Mapping[str, Any] = None  # option name -> default
    output_option: str | None = None  # vLLM's per-dataset output length flag (its dest)
    needs_path: bool = True
    conversations: bool = False
    ordered: bool = False  # the file's order is the dataset's (sonnet's prefix lines, a trace's times): no shuffle


# ------------------------------------------------------------------------------------------ vLLM's datasets
def _sharegpt(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    pairs = load_sharegpt(need(path, "sharegpt"))
    return [Entry(prompt=user, reply=reply) for user, reply in pairs]


def _sonnet(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    lines = [ln for ln in open_text(need(path, "sonnet")).splitlines(keepends=True) if ln.strip()]
    if not lines:
        raise DatasetError(f"{path}: no lines (the sonnet dataset is a text file of poem lines)")
    return [Entry(prompt=ln) for ln in lines]  # made into prompts by `sonnet_prompt`


SONNET_BASE = "Pick as many lines as you can from these poem lines:\n"


def sonnet_prompt(lines: list[str], input_tokens: int, prefix_tokens: int, count, rng) -> str:
    """vLLM's SonnetDataset: the base prompt, the file's first lines up to `prefix_tokens` (shared by every request),
    then lines drawn with replacement up to `input_tokens`; `count(text)` counts tokens (a tokenizer's, or words)."""
    avg = sum(count(ln) for ln in lines) / len(lines)
    base = count(SONNET_BASE)
    if input_tokens <= base:
        raise DatasetError(f"sonnet: the prompt length {input_tokens} must exceed the base prompt's ({base} tokens)")
    n_input = max(round((input_tokens - base) / avg), 1)
    n_prefix = min(max(round((prefix_tokens - base) / avg), 0), n_input)
    extra = [lines[int(k)] for k in rng.integers(0, len(lines), size=n_input - n_prefix)]
    return SONNET_BASE + "".join(lines[:n_prefix] + extra)


def _burstgpt(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    """BurstGPT's CSV (Timestamp, Model, Request tokens, Response tokens, ...): the GPT-4 rows that answered."""
    p = need(path, "burstgpt")
    try:
        with p.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"{p}: cannot be read as CSV ({exc})") from None
    out = []
    for i, row in enumerate(rows, 2):
        if "Request tokens" not in row or "Response tokens" not in row or "Model" not in row:
            raise DatasetError(f"{p}:1: expected BurstGPT's columns Model, Request tokens, Response tokens")
        if row["Model"] != "GPT-4":
            continue
        try:
            n_in, n_out = int(float(row["Request tokens"])), int(float(row["Response tokens"]))
        except ValueError:
            raise DatasetError(f"{p}:{i}: Request tokens / Response tokens are not numbers") from None
        if n_out > 0 and n_in > 0:
            out.append(Entry(input_tokens=n_in, output_tokens=n_out))
    if not out:
        raise DatasetError(f"{p}: no GPT-4 rows with Response tokens > 0 (vLLM's BurstGPT filter)")
    return out


def _custom(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    """vLLM's custom dataset: JSON Lines of {"prompt": ..., "output_tokens"?: N}."""
    p = need(path, "custom")
    if p.suffix.lower() != ".jsonl":
        raise DatasetError(f'{p}: the custom dataset is a .jsonl file of {{"prompt": ...}} lines (as vLLM\'s)')
    out = []
    for i, row in lines_json(p):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise DatasetError(f'{p}:{i}: expected {{"prompt": "...", "output_tokens"?: N}}')
        n_out = row.get("output_tokens")
        if n_out is not None:
            try:
                n_out = int(n_out)
            except (TypeError, ValueError):
                raise DatasetError(f"{p}:{i}: output_tokens {n_out!r} is not an integer") from None
        out.append(Entry(prompt=row["prompt"], output_tokens=n_out))
    if not out:
        raise DatasetError(f"{p}: no lines")
    return out


def _spec_bench(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    """Spec-Bench's question.jsonl: the first of each line's `turns`, of `spec_bench_category` when given."""
    p = need(path, "spec_bench")
    cat = opts.get("spec_bench_category")
    out = []
    for i, row in lines_json(p):
        turns = row.get("turns") if isinstance(row, dict) else None
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise DatasetError(f"{p}:{i}: expected a 'turns' list of strings (Spec-Bench's question.jsonl)")
        if not cat or row.get("category") == cat:
            out.append(Entry(prompt=turns[0]))
    if not out:
        raise DatasetError(f"{p}: no question" + (f" of category {cat!r}" if cat else ""))
    return out


def _speed_bench(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    """SPEED-Bench's prepared folder: <subset>.jsonl, the first message of each line's `messages`."""
    d = need(path, "speed_bench")
    if not d.is_dir():
        raise DatasetError(f"{d}: the speed_bench dataset is a folder of <subset>.jsonl files (SPEED-Bench's prepare)")
    p = d / f"{opts.get('speed_bench_dataset_subset') or 'qualitative'}.jsonl"
    cat = opts.get("speed_bench_category")
    out = []
    for i, row in lines_json(need(p, "speed_bench")):
        msgs = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(msgs, list) or not msgs or not isinstance(msgs[0], dict):
            raise DatasetError(f"{p}:{i}: expected a 'messages' list (SPEED-Bench)")
        if not cat or row.get("category") == cat:
            out.append(Entry(prompt=str(msgs[0].get("content") or "")))
    if not out:
        raise DatasetError(f"{p}: no entry" + (f" of category {cat!r}" if cat else ""))
    return out


def _timed_trace(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    """vLLM's timed_trace JSON Lines (timestamp, input_length, output_length, hash_ids; the labels are options):
    each request's prompt is its hash ids' blocks (`timed_trace_chunk_hash_size` tokens each, the same tokens for
    the same id) up to its input length. Send times: the trace shape (`trace_rows`)."""
    return [Entry(input_tokens=r.input_tokens, output_tokens=r.output_tokens, blocks=r.hash_ids) for r in
            trace_rows(need(path, "timed_trace"), opts)]  # fmt: skip


def trace_rows(path: Path, opts: Mapping[str, Any]):
    """A timed trace's rows (shapes.trace.TraceRow, hash ids included) read with the dataset's labels."""
    from .shapes.trace import TraceError, load_trace

    labels = {k: opts.get(f"timed_trace_label_{k}") for k in ("timestamp", "input_length", "output_length", "hash_ids")}
    try:
        return load_trace(path, labels={k: v for k, v in labels.items() if v})
    except TraceError as exc:
        raise DatasetError(str(exc)) from None


# ------------------------------------------------------------------------------------------ conversations
def _conversation(row: Any, where: str) -> Entry | None:
    """One conversation: ShareGPT (`conversations` from/value), OpenAI (`messages` role/content) or AIPerf's
    multi_turn (`turns`: [{"text" | "texts", "delay" (ms)?}]); the user turns, in order."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected an object with conversations, messages or turns")
    turns: list[str] = []
    delays: list[float] = []
    if isinstance(row.get("turns"), list):  # AIPerf multi_turn
        for t in row["turns"]:
            text = t.get("text") if isinstance(t, dict) else t
            if isinstance(t, dict) and text is None and isinstance(t.get("texts"), list):
                text = " ".join(str(x.get("contents", x) if isinstance(x, dict) else x) for x in t["texts"])
            if not isinstance(text, str):
                raise DatasetError(f"{where}: a turn without text")
            if turns:
                delays.append(float((t.get("delay") or 0) if isinstance(t, dict) else 0) / 1e3)
            turns.append(text)
    else:
        msgs = row.get("conversations") or row.get("conversation") or row.get("messages") or []
        for m in msgs:
            if isinstance(m, dict) and m.get("from", m.get("role")) in ("human", "user"):
                val = m.get("value", m.get("content"))
                if isinstance(val, str):
                    turns.append(val)
        delays = [0.0] * max(len(turns) - 1, 0)
    return Entry(prompt=turns[0], turns=tuple(turns), delays_s=tuple(delays)) if turns else None


def _multi_turn(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    p = need(path, "multi_turn")
    out = [e for i, row in enumerate(records(p), 1) if (e := _conversation(row, f"{p}: entry {i}")) is not None]
    if not out:
        raise DatasetError(f"{p}: no conversation with a user turn (ShareGPT, OpenAI messages or AIPerf turns)")
    return out


# ------------------------------------------------------------------------------------------ the registry
def _hf(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    from . import hf_datasets

    return hf_datasets.read(path, opts)


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("random", "synthetic prompts of --input-tokens (+ --random-prefix-len shared)", needs_path=False),
        Dataset("sharegpt", "ShareGPT JSON/JSONL: first user turn, the reply's length", _sharegpt,
                {"sharegpt_output_len": None}, "sharegpt_output_len"),
        Dataset("sonnet", "poem lines: a shared prefix of lines, the rest drawn", _sonnet,
                {"sonnet_input_len": 550, "sonnet_output_len": 150, "sonnet_prefix_len": 200}, "sonnet_output_len",
                ordered=True),
        Dataset("burstgpt", "BurstGPT CSV: GPT-4 rows' request and response lengths", _burstgpt),
        Dataset("custom", "JSONL of {\"prompt\": ..., \"output_tokens\"?}", _custom,
                {"custom_output_len": 256}, "custom_output_len"),
        Dataset("hf", "a Hugging Face text dataset from local files or the local cache", _hf,
                {"hf_name": None, "hf_subset": None, "hf_split": None, "hf_output_len": None,
                 "blazedit_min_distance": 0.0, "blazedit_max_distance": 1.0}, "hf_output_len"),
        Dataset("prefix_repetition", "synthetic: prefixes shared by groups of requests, unique suffixes",
                options={"prefix_repetition_prefix_len": 256, "prefix_repetition_suffix_len": 256,
                         "prefix_repetition_num_prefixes": 10, "prefix_repetition_output_len": 128},
                output_option="prefix_repetition_output_len", needs_path=False),
        Dataset("spec_bench", "Spec-Bench question.jsonl: each question's first turn", _spec_bench,
                {"spec_bench_output_len": 256, "spec_bench_category": None}, "spec_bench_output_len"),
        Dataset("speed_bench", "SPEED-Bench folder: <subset>.jsonl's first messages", _speed_bench,
                {"speed_bench_output_len": 4096, "speed_bench_dataset_subset": "qualitative",
                 "speed_bench_category": None}, "speed_bench_output_len"),
        Dataset("timed_trace", "JSONL of timestamp, input_length, output_length, hash_ids (shared blocks)",
                _timed_trace, {"timed_trace_chunk_hash_size": 16, "timed_trace_sec_multiplier": 1.0,
                               "timed_trace_label_timestamp": "timestamp",
                               "timed_trace_label_input_length": "input_length",
                               "timed_trace_label_output_length": "output_length",
                               "timed_trace_label_hash_ids": "hash_ids",
                               "self_timed": True}, ordered=True),
        Dataset("multi_turn", "conversations (ShareGPT, OpenAI messages, AIPerf turns): every user turn, the "
                "history resent with the server's replies", _multi_turn, conversations=True),
    )
}  # fmt: skip
# options every file dataset takes (vLLM's --disable-shuffle, --no-oversample)
COMMON_OPTIONS = {"disable_shuffle": False, "no_oversample": False}


def get(name: str) -> Dataset:
    if name in NOT_TEXT:
        raise DatasetError(f"--dataset-name {name} is not supported: {NOT_TEXT[name]}")
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}") from None


def name_of(spec: Any) -> str:
    """The spec's dataset: its dataset_name, else sharegpt for a dataset_path (wattbench's older form), else random."""
    return spec.dataset_name or ("sharegpt" if spec.dataset_path else "random")


def option(spec: Any, key: str) -> Any:
    """A dataset option of the spec (dataset_options), else its declared default."""
    opts = spec.dataset_options or {}
    if opts.get(key) is not None:
        return opts[key]
    return {**COMMON_OPTIONS, **(get(name_of(spec)).options or {})}.get(key)


def check(spec: Any) -> str | None:
    """What is wrong with a LoadSpec's dataset fields (one line), or None; reads no file."""
    name = name_of(spec)
    try:
        ds = get(name)
    except DatasetError as exc:
        return str(exc)
    if not isinstance(spec.dataset_options, dict):
        return "dataset_options must be a mapping"
    known = {**COMMON_OPTIONS, **(ds.options or {})}
    bad = sorted(set(spec.dataset_options) - set(known))
    if bad:
        return f"dataset {name!r} has no option {bad[0]!r} (its options: {', '.join(known)})"
    if ds.needs_path and not spec.dataset_path:
        return f"dataset {name!r} needs dataset_path (--dataset-path)"
    if not ds.needs_path and spec.dataset_path:
        return f"dataset {name!r} takes no dataset_path ({spec.dataset_path}); name the dataset the file is"
    if (ds.conversations or (spec.turns or 1) > 1) and spec.api != "chat":
        return "multi-turn conversations need the chat API (/v1/chat/completions): the history is a list of messages"
    return None


def load(spec: Any) -> list[Entry] | None:
    """The spec's dataset entries in the order requests take them (None: a synthetic dataset, no file)."""
    ds = get(name_of(spec))
    if ds.reader is None:
        return None
    path = Path(os.path.expanduser(spec.dataset_path)) if spec.dataset_path else None
    opts = {**COMMON_OPTIONS, **(ds.options or {}), **{k: v for k, v in (spec.dataset_options or {}).items()}}
    entries = ds.reader(path, opts)
    if not opts.get("disable_shuffle") and not ds.ordered:
        import numpy as np

        order = np.random.default_rng(spec.seed + 15485863).permutation(len(entries))
        entries = [entries[int(k)] for k in order]
    return entries
