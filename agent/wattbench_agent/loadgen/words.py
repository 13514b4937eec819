"""Synthetic prompt text: words that are one token each (with their leading space) in the common BPE vocabularies,
so a prompt of N words is N tokens give or take the first word and a BOS; exact with a tokenizer. Stdlib + numpy."""

from __future__ import annotations

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
