"""Workloads: prompts of a given token length, length distributions, ShareGPT files, shared prefixes.

Exact lengths need a tokenizer (any object with `encode(text) -> list[int]` and `decode(ids) -> str`, or a
tokenizer.json path / Hugging Face name when the optional `tokenizers` / `transformers` package is installed):
random token ids are decoded and re-encoded until the prompt encodes to exactly N tokens (the vllm bench
"random" dataset method, plus a fix-up loop).
Without a tokenizer the prompt is N words drawn from a list of common English words that are each a single
token (with their leading space) in the GPT-2/cl100k/Llama-2/Llama-3/Mistral/Qwen BPE vocabularies, so the
prompt is N tokens +- a few (the first word, and a BOS token some servers add). This is an approximation and is
recorded as such: `input_tokens_requested` is what was asked, `prompt_tokens` what the server counted.
For the chat API the chat template adds its own tokens on top of the content's N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .words import WORDS, synthetic_text  # noqa: F401 (the prompt text, re-exported)


class WorkloadError(ValueError):
    pass


def load_tokenizer(name_or_path: str, options: dict | None = None):
    """A tokenizer from a tokenizer.json path (needs `tokenizers`) or a HF name/dir (needs `transformers`).
    `options`: vllm bench serve's trust_remote_code and tokenizer_mode (auto | hf: the fast tokenizer; slow)."""
    p = Path(name_or_path)
    options = options or {}
    if p.suffix == ".json" and not p.is_file():
        raise WorkloadError(f"tokenizer {name_or_path}: no such file (expected a tokenizer.json, or a model name)")
    looks_like_path = p.is_absolute() or name_or_path.startswith((".", "~")) or name_or_path.count("/") > 1
    if looks_like_path and not p.exists():
        raise WorkloadError(f"tokenizer {name_or_path}: no such file or folder")
    if p.is_dir() and (p / "tokenizer.json").is_file() and options.get("tokenizer_mode") != "slow":
        p = p / "tokenizer.json"  # a model folder: its fast tokenizer, without `transformers`
    if p.is_file() and p.suffix == ".json":
        try:
            from tokenizers import Tokenizer  # type: ignore
        except ImportError as exc:
            raise WorkloadError(f"tokenizer {name_or_path}: needs the `tokenizers` package") from exc
        tok = Tokenizer.from_file(str(p))

        class _Wrap:
            def encode(self, text: str) -> list[int]:
                return tok.encode(text, add_special_tokens=False).ids

            def decode(self, ids: list[int]) -> str:
                return tok.decode(ids)

            vocab_size = tok.get_vocab_size()

        return _Wrap()
    try:
        from transformers import AutoTokenizer  # type: ignore
    except ImportError as exc:
        raise WorkloadError(f"tokenizer {name_or_path}: needs `transformers` (or give a tokenizer.json path)") from exc
    hf = AutoTokenizer.from_pretrained(
        name_or_path,
        trust_remote_code=bool(options.get("trust_remote_code")),
        use_fast=options.get("tokenizer_mode") != "slow",
    )

    class _HF:
        vocab_size = hf.vocab_size

        def encode(self, text: str) -> list[int]:
            return hf.encode(text, add_special_tokens=False)

        def decode(self, ids: list[int]) -> str:
            return hf.decode(ids)

    return _HF()


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text))


# ------------------------------------------------------------------------------------------- lengths
def sample_lengths(dist: dict | None, default: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n lengths (ints >= 1) from a distribution spec:
    None -> all `default`; {"kind": "fixed", "value": N}; {"kind": "uniform", "min": a, "max": b} (inclusive);
    {"kind": "normal", "mean": m, "std": s, "min"?, "max"?}; {"kind": "lognormal", "median": m, "sigma": s,
    "min"?, "max"?}; {"kind": "choice", "values": [100, 32768], "weights"?: [0.9, 0.1]} (the seed's mix)."""
    if dist is None:
        return np.full(n, int(default), dtype=np.int64)
    if not isinstance(dist, dict) or "kind" not in dist:
        raise WorkloadError(f"length distribution must be a mapping with 'kind', got {dist!r}")
    kind = dist["kind"]
    if kind == "fixed":
        out = np.full(n, int(dist.get("value", default)))
    elif kind == "uniform":
        out = rng.integers(int(dist["min"]), int(dist["max"]) + 1, size=n)
    elif kind == "normal":
        out = np.rint(rng.normal(float(dist["mean"]), float(dist["std"]), size=n))
    elif kind == "lognormal":
        out = np.rint(rng.lognormal(np.log(float(dist["median"])), float(dist["sigma"]), size=n))
    elif kind == "choice":
        vals = np.asarray(dist["values"], dtype=np.int64)
        w = dist.get("weights")
        p = None if w is None else np.asarray(w, dtype=float) / float(np.sum(w))
        out = rng.choice(vals, size=n, p=p)
    elif kind == "dataset":
        return np.full(n, -1, dtype=np.int64)  # resolved by the dataset
    else:
        raise WorkloadError(f"unknown length distribution kind {kind!r}")
    lo = int(dist.get("min", 1))
    hi = dist.get("max")
    out = np.maximum(out, max(lo, 1))
    if hi is not None:
        out = np.minimum(out, int(hi))
    return out.astype(np.int64)


def range_ratio_dist(length: int, ratio: float) -> dict | None:
    """vllm bench serve's `--random-range-ratio`: lengths uniform over the integers [floor(L(1 - r)),
    ceil(L(1 + r))], both ends included, at least 1 (its RandomDataset). None for r = 0 (every request L). vLLM
    takes the prompt's special tokens off L first; wattbench's prompt lengths are the content's (docs/LOADGEN.md)."""
    if not ratio:
        return None
    return {
        "kind": "uniform",
        "min": max(1, math.floor(length * (1 - ratio))),
        "max": max(1, math.ceil(length * (1 + ratio))),
    }


def length_dists(spec: Any) -> tuple[dict | None, dict | None]:
    """(input, output) length distributions of a LoadSpec: its own *_tokens_dist, else its random_range_ratio's
    (prompts only when synthetic: a dataset's prompts are its own)."""
    ratio = getattr(spec, "random_range_ratio", 0.0) or 0.0
    inp = spec.input_tokens_dist or (None if spec.dataset_path else range_ratio_dist(spec.input_tokens, ratio))
    out = spec.output_tokens_dist or range_ratio_dist(spec.output_tokens, ratio)
    return inp, out


@dataclass
class Item:
    prompt: str
    input_tokens: int  # requested prompt length (tokens)
    output_tokens: int  # max_tokens to ask for


def _est_tokens(text: str, tokenizer=None) -> int:
    if tokenizer is not None:
        return max(1, count_tokens(tokenizer, text))
    return max(1, round(len(text) / 4))


@dataclass
class Conversation:
    """A multi-turn conversation: its user turns (text, max_tokens), the think time before each later turn, and the
    requested length of the first (the later ones carry the history the server answered)."""

    turns: list[tuple[str, int]]
    delays_s: list[float]
    input_tokens: int


class Workload:
    """Makes request items on demand (index -> Item), deterministically from the seed: synthetic prompts (their
    length met on the server's count: prompt_length.py), a dataset's entries (datasets.py), a trace's rows."""

    def __init__(self, spec: Any, tokenizer=None, n_hint: int = 4096, trace_rows=None):
        from . import datasets, prompt_length

        self.spec = spec
        self.tok = tokenizer
        self.rng = np.random.default_rng(spec.seed + 7919)
        self.trace_rows = trace_rows
        self.dataset = datasets.name_of(spec)
        try:
            self._entries = datasets.load(spec)
        except datasets.DatasetError as exc:
            raise WorkloadError(str(exc)) from None
        self._cal = prompt_length.of(spec) if tokenizer is None else prompt_length.Calibration("tokenizer")
        self._blocks: dict[tuple, list[str]] = {}
        self._n = max(int(n_hint), 1)
        self._in_dist, self._out_dist = length_dists(spec)
        self._in = sample_lengths(self._in_dist, spec.input_tokens, self._n, self.rng)
        self._out = sample_lengths(self._out_dist, spec.output_tokens, self._n, self.rng)
        self._prefixes: list[str] = []
        if spec.shared_prefix_tokens:
            prng = np.random.default_rng(spec.seed + 104729)
            self._prefixes = [
                synthetic_text(spec.shared_prefix_tokens, prng, self.tok) for _ in range(max(spec.num_prefixes, 1))
            ]

    @property
    def size(self) -> int | None:
        """Entries in the dataset (None: made without end)."""
        return None if self._entries is None or self.dataset == "sonnet" else len(self._entries)

    @property
    def conversations(self) -> bool:
        return self.dataset == "multi_turn" or self.spec.turns > 1

    def lengths(self, i: int) -> tuple[int, int]:
        """Request i's (input, output) lengths, drawn in order from the seed (the twin draws the same)."""
        if i >= self._n:  # grow deterministically
            extra = max(self._n, i + 1 - self._n)
            self._in = np.concatenate(
                [self._in, sample_lengths(self._in_dist, self.spec.input_tokens, extra, self.rng)]
            )
            self._out = np.concatenate(
                [self._out, sample_lengths(self._out_dist, self.spec.output_tokens, extra, self.rng)]
            )
            self._n += extra
        return int(self._in[i]), int(self._out[i])

    def words(self, n_tokens: int, rng: np.random.Generator) -> str:
        """A synthetic prompt the server counts as n_tokens: exact with a tokenizer, else sized by the calibration."""
        if self.tok is not None:
            return synthetic_text(n_tokens, rng, self.tok)
        return synthetic_text(self._cal.words(n_tokens), rng)

    def _entry(self, i: int):
        from .datasets import Entry

        if self.trace_rows is not None:
            row = self.trace_rows[i % len(self.trace_rows)]
            return Entry(row.prompt, row.input_tokens, row.output_tokens, blocks=row.hash_ids), True
        if self._entries is not None and self.dataset != "sonnet":
            return self._entries[i % len(self._entries)], False
        return None, False

    def _own_output(self, entry, n_out: int) -> int:
        """The output length: a trace row's own, else (n_out < 0: the dataset's lengths) the entry's own, its
        reply's estimate, or the spec's."""
        if entry.output_tokens is not None and (n_out < 0 or entry.blocks or entry.input_tokens is not None):
            return int(entry.output_tokens)
        if n_out < 0:
            return _est_tokens(entry.reply, self.tok) if entry.reply else self.spec.output_tokens
        return n_out

    def item(self, i: int) -> Item:
        n_in, n_out = self.lengths(i)
        rng = np.random.default_rng((self.spec.seed, i))
        entry, from_trace = self._entry(i)
        if entry is not None:
            n_out = int(entry.output_tokens) if from_trace and entry.output_tokens is not None else n_out
            n_out = max(self._own_output(entry, n_out), 1)
            if entry.prompt is not None:
                return Item(entry.prompt, entry.input_tokens or _est_tokens(entry.prompt, self.tok), n_out)
            n_in = entry.input_tokens or n_in
            if entry.blocks:
                return Item(self._from_blocks(entry.blocks, n_in), n_in, n_out)
            return Item(self.words(n_in, rng), n_in, n_out)
        if n_out < 0:
            n_out = self.spec.output_tokens
        if self.dataset == "sonnet":
            return self._sonnet(n_out, rng)
        prefix_n = 0
        prefix = ""
        if self._prefixes:
            prefix = self._prefixes[i % len(self._prefixes)]
            prefix_n = min(self.spec.shared_prefix_tokens, n_in - 1)
        if self.tok is not None or not prefix:
            body = synthetic_text(n_in - prefix_n, rng, self.tok) if self.tok is not None else self.words(n_in, rng)
        else:
            body = synthetic_text(max(self._cal.words(n_in) - len(prefix.split()), 1), rng)
        prompt = (prefix + " " + body) if prefix else body
        return Item(prompt, n_in, n_out)

    def _sonnet(self, n_out: int, rng: np.random.Generator) -> Item:
        from .datasets import option, sonnet_prompt

        lines = [e.prompt for e in self._entries]
        prompt = sonnet_prompt(
            lines, self.spec.input_tokens, int(option(self.spec, "sonnet_prefix_len")), self._count, rng
        )
        return Item(prompt, self._count(prompt), n_out)

    def _count(self, text: str) -> int:
        return _est_tokens(text, self.tok)

    def _from_blocks(self, blocks: tuple, n_tokens: int) -> str:
        """vLLM's timed_trace prompt: the blocks of the row's hash ids (the same words for the same id, whatever the
        row), up to the row's length (the last block cut); the server's framing taken off the last block."""
        from .datasets import option

        size = int(option(self.spec, "timed_trace_chunk_hash_size"))
        budget = self._cal.words(n_tokens) if self.tok is None else n_tokens
        words: list[str] = []
        for h in blocks:
            if len(words) >= budget:
                break
            key = (h, size)
            if key not in self._blocks:
                seed = int.from_bytes(str(h).encode()[:16].ljust(16, b"\0"), "little") % (2**63)
                self._blocks[key] = synthetic_text(size, np.random.default_rng((self.spec.seed, seed))).split(" ")
            words += self._blocks[key][: budget - len(words)]
        if len(words) < budget:  # fewer blocks than the length: unique words for the rest
            words += synthetic_text(budget - len(words), np.random.default_rng((self.spec.seed, len(blocks)))).split()
        return " ".join(words)

    def conversation(self, i: int) -> Conversation:
        """Conversation i: a multi_turn dataset's entry (its user turns, its delays), or `turns` synthetic turns."""
        n_in, n_out = self.lengths(i)
        if n_out < 0:
            n_out = self.spec.output_tokens
        rng = np.random.default_rng((self.spec.seed, i))
        if self._entries is not None and self.dataset == "multi_turn":
            e = self._entries[i % len(self._entries)]
            texts, delays = list(e.turns), list(e.delays_s)
            n_in = _est_tokens(texts[0], self.tok)
        else:
            texts = [self.words(n_in, rng) for _ in range(self.spec.turns)]
            delays = []
        if not any(delays):
            delays = [float(self.spec.turn_delay_s)] * (len(texts) - 1)
        return Conversation([(t, max(n_out, 1)) for t in texts], delays, n_in)
