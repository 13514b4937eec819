"""Build a random-initialised Llama-shaped model and a tokenizer locally, for smoke tests with no downloads.

    wattbench make-tiny-model --out DIR --size 1b|tiny      (or: python -m wattbench_agent.engines.tiny_model ...)

The folder holds a LlamaForCausalLM in bf16 (save_pretrained) and a PreTrainedTokenizerFast with a chat template,
so `transformers serve DIR --continuous-batching` can serve it (GPU.md has the recipe). Pitfalls handled here:
- eos_token_id is None in the model config and the generation config, and the tokenizer has no eos token:
  random weights would otherwise stop generating early at a random EOS.
- The tokenizer's vocabulary has exactly the model's vocab_size entries and every entry decodes to visible text,
  so every generated token streams as non-empty content (a token id the tokenizer lacks would stream as an empty
  delta and corrupt TTFT/ITL). It is a WordLevel tokenizer trained in-process with the `tokenizers` library on a
  built-in corpus plus deterministic pseudo-words.
torch, transformers and tokenizers are imported inside the functions: they are not wattbench dependencies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

PRESETS: dict[str, dict[str, int]] = {
    # Llama-3.2-1B-like shape (its real vocab is 128256; 32000 keeps the embedding small)
    "1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, intermediate=8192, vocab=32000),
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=1024),
}

# Only these three are special (skipped when decoding); role markers are ordinary words, so that a random model
# that emits them still streams visible text.
SPECIAL_TOKENS = ["<unk>", "<pad>", "<s>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }} : "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }} "
    "{% endif %}{% endfor %}{% endif %}"
    " . "
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)

_CORPUS = """
The quick brown fox jumps over the lazy dog. A benchmark measures latency, throughput and energy.
Serving engines batch requests continuously so the accelerator stays busy while tokens stream back.
Tokens per joule compare engines fairly when the power limit and the workload are the same.
Time to first token, time per output token and end to end latency describe what a user feels.
The energy counter is read at the start and at the end of every window, and the difference is the energy.
Hello, how are you today? Please write a short story about a robot that learns to paint.
What is the capital of France? Explain the difference between a list and a tuple in Python.
Summarize the following text in one sentence. Translate this paragraph into French and German.
one two three four five six seven eight nine ten hundred thousand million system user assistant tool
""".split()

_SYLLABLES = (
    "ka ri to mu ne sa lo vi de po ta shi ru ma ke no ba zi fe gu la mi so nu re ko da pi ve tu ga hi jo we yu xe qi bo"
).split()


def _pseudo_words(n: int) -> list[str]:
    """n distinct lowercase words made of syllables (deterministic)."""
    words = []
    s = len(_SYLLABLES)
    i = 0
    while len(words) < n:
        a, b, c = i % s, (i // s) % s, (i // (s * s)) % s
        words.append(_SYLLABLES[a] + _SYLLABLES[b] + ("" if i < s * s else _SYLLABLES[c]))
        i += 1
    return words


def build_tokenizer(vocab: int, max_length: int = 4096):
    """A WordLevel tokenizer with exactly `vocab` entries, trained in-process; wrapped as PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    base = list(dict.fromkeys(w.lower() for w in _CORPUS))
    base += list(dict.fromkeys(p for p in ".,?!:;'\"()-"))
    need = vocab - len(SPECIAL_TOKENS)
    if need <= len(base):
        raise ValueError(f"vocab {vocab} too small; needs more than {len(base) + len(SPECIAL_TOKENS)}")
    extra = [w for w in _pseudo_words(need * 2) if w not in set(base)][: need - len(base)]
    # Lines repeat the base corpus more often, so frequent words get small ids (as in a real tokenizer).
    lines = [" ".join(base)] * 3 + [" ".join(extra[i : i + 64]) for i in range(0, len(extra), 64)]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins words with spaces, tidies punctuation
    trainer = trainers.WordLevelTrainer(vocab_size=vocab, min_frequency=0, special_tokens=SPECIAL_TOKENS)
    tok.train_from_iterator(lines, trainer=trainer)
    size = tok.get_vocab_size()
    if size < vocab:  # top up so that every model token id decodes to something
        tok.add_tokens([f"w{i}" for i in range(vocab - size)])
    if tok.get_vocab_size() != vocab:
        raise RuntimeError(f"tokenizer vocabulary has {tok.get_vocab_size()} entries, expected {vocab}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        model_max_length=max_length,
        chat_template=CHAT_TEMPLATE,
        # no eos_token on purpose: random weights must not stop early (see module docstring)
    )


def build_tiny_llama(
    out_dir: str | Path,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    seed: int = 0,
    max_position: int = 4096,
) -> dict[str, Any]:
    """Write a random-initialised bf16 LlamaForCausalLM and its tokenizer to `out_dir`; returns a summary."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(vocab, max_position)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        tie_word_embeddings=False,  # tied random embeddings make greedy decoding echo the prompt's last token
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
        dtype="bfloat16",
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"  # random init of 1B params is much faster on a GPU
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.config.eos_token_id = None
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=128,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    summary = {
        "path": str(out.resolve()),
        "n_params": n_params,
        "dtype": "bfloat16",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "intermediate": intermediate,
        "vocab": vocab,
        "seed": seed,
        "random_init": True,
        "build_s": round(time.perf_counter() - t0, 2),
    }
    (out / "wattbench_tiny_model.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wattbench make-tiny-model",
        description="Build a random-initialised Llama-shaped model + tokenizer locally.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder to write (served as `transformers serve OUT`)")
    parser.add_argument("--size", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    for key in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab"):
        parser.add_argument("--" + key.replace("_", "-"), type=int, dest=key, help=f"override the preset's {key}")


def run(args: argparse.Namespace) -> int:
    shape = dict(PRESETS[args.size])
    shape.update({k: getattr(args, k) for k in shape if getattr(args, k, None) is not None})
    try:
        summary = build_tiny_llama(args.out, seed=args.seed, **shape)
    except ImportError as exc:
        print(f"wattbench make-tiny-model: needs torch, transformers and tokenizers ({exc})", file=sys.stderr)
        return 2
    print(
        f"built random-initialised Llama ({summary['n_params'] / 1e6:.1f} M params, bf16) -> {summary['path']} "
        f"in {summary['build_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
