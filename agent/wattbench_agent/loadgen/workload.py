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

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Single-token (with leading space) in common BPE vocabularies.
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will more can out up who them some "
    "into time only new other then two may these its like first any my now such people over also made after "
    "did many most before must through back years where much your way well down should because each just those "
    "how too little state good very make world still see own men work long here get both between life being under "
    "never day same another know while last might us great old year off come since against go came right used "
    "take three small large number part place water power house point city light family room table door river "
    "line music money market system group order field story street friend paper road color stone summer winter "
    "garden window glass cloud mountain forest ocean island bridge train school letter morning evening night"
).split()


class WorkloadError(ValueError):
    pass


def load_tokenizer(name_or_path: str):
    """A tokenizer from a tokenizer.json path (needs `tokenizers`) or a HF name/dir (needs `transformers`)."""
    p = Path(name_or_path)
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
    hf = AutoTokenizer.from_pretrained(name_or_path)

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


# ------------------------------------------------------------------------------------------- prompts
def synthetic_text(n_tokens: int, rng: np.random.Generator, tokenizer=None) -> str:
    """A prompt of n_tokens tokens: exact with a tokenizer, approximate (one word per token) without."""
    if n_tokens <= 0:
        return ""
    if tokenizer is None:
        idx = rng.integers(0, len(WORDS), size=n_tokens)
        return " ".join(WORDS[i] for i in idx)
    vocab = int(getattr(tokenizer, "vocab_size", 30000) or 30000)
    ids = rng.integers(0, min(vocab, 30000), size=n_tokens).tolist()
    text = tokenizer.decode(ids)
    for _ in range(10):
        enc = tokenizer.encode(text)
        if len(enc) == n_tokens:
            return text
        if len(enc) > n_tokens:
            enc = enc[:n_tokens]
        else:
            enc = enc + rng.integers(0, min(vocab, 30000), size=n_tokens - len(enc)).tolist()
        text = tokenizer.decode(enc)
    # fall back to words, trimmed/padded with the tokenizer
    words = synthetic_text(n_tokens, rng).split(" ")
    while words and len(tokenizer.encode(" ".join(words))) > n_tokens:
        words.pop()
    while len(tokenizer.encode(" ".join(words))) < n_tokens:
        words.append(WORDS[int(rng.integers(0, len(WORDS)))])
    return " ".join(words)


@dataclass
class Item:
    prompt: str
    input_tokens: int  # requested prompt length (tokens)
    output_tokens: int  # max_tokens to ask for


def load_sharegpt(path: str | Path) -> list[tuple[str, str | None]]:
    """(first user turn, first assistant reply or None) pairs from a ShareGPT-format JSON or JSONL file
    ({"conversations": [{"from": "human"|"gpt", "value": ...}]} or {"messages": [{"role", "content"}]})."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            data = data.get("data") or [data]
    except json.JSONDecodeError:
        data = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    data.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise WorkloadError(f"{p}:{i}: not valid JSON ({exc.msg})") from None
    pairs: list[tuple[str, str | None]] = []
    for item in data:
        if not isinstance(item, dict):
            continue
        turns = item.get("conversations") or item.get("conversation") or item.get("messages") or []
        user = reply = None
        for t in turns:
            if not isinstance(t, dict):
                continue
            who = t.get("from", t.get("role"))
            val = t.get("value", t.get("content"))
            if not isinstance(val, str):
                continue
            if user is None and who in ("human", "user"):
                user = val
            elif user is not None and who in ("gpt", "assistant", "chatgpt", "bard", "model"):
                reply = val
                break
        if user:
            pairs.append((user, reply))
    if not pairs:
        raise WorkloadError(f"{p}: no conversations with a user turn (ShareGPT format expected)")
    return pairs


def _est_tokens(text: str, tokenizer=None) -> int:
    if tokenizer is not None:
        return max(1, count_tokens(tokenizer, text))
    return max(1, round(len(text) / 4))


class Workload:
    """Makes request items on demand (index -> Item), deterministically from the seed."""

    def __init__(self, spec: Any, tokenizer=None, n_hint: int = 4096, trace_rows=None):
        self.spec = spec
        self.tok = tokenizer
        self.rng = np.random.default_rng(spec.seed + 7919)
        self.trace_rows = trace_rows
        self._pairs = load_sharegpt(spec.dataset_path) if spec.dataset_path else None
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

    def item(self, i: int) -> Item:
        n_in, n_out = self.lengths(i)
        rng = np.random.default_rng((self.spec.seed, i))
        if self.trace_rows is not None:
            row = self.trace_rows[i % len(self.trace_rows)]
            if row.output_tokens is not None:
                n_out = row.output_tokens
            if row.prompt is not None:
                n_in_t = row.input_tokens or _est_tokens(row.prompt, self.tok)
                return Item(row.prompt, n_in_t, n_out)
            if row.input_tokens is not None:
                n_in = row.input_tokens
        if self._pairs is not None:
            user, reply = self._pairs[int(rng.integers(0, len(self._pairs)))]
            if n_out < 0:
                n_out = _est_tokens(reply, self.tok) if reply else self.spec.output_tokens
            return Item(user, _est_tokens(user, self.tok), max(n_out, 1))
        if n_out < 0:
            n_out = self.spec.output_tokens
        prefix_n = 0
        prefix = ""
        if self._prefixes:
            prefix = self._prefixes[i % len(self._prefixes)]
            prefix_n = min(self.spec.shared_prefix_tokens, n_in - 1)
        body = synthetic_text(n_in - prefix_n, rng, self.tok)
        prompt = (prefix + " " + body) if prefix else body
        return Item(prompt, n_in, n_out)
