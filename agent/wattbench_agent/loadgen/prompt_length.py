"""Synthetic prompts of the length asked for, as the server counts it.

Without a tokenizer a synthetic prompt is words that are one token each in the common vocabularies; the server
adds what its own framing costs (a BOS token, the chat template's role headers: ten tokens on the emulated
Llama-3 chat, 512 words arriving as 522 tokens). Before t0 the load generator measures that on the server and sizes
the prompts by it: server tokens = overhead + per_word x words, fitted on two prompts of the length asked for and
half of it, counted
- by the server's POST /tokenize (vLLM serves it: the chat template applied to `messages`), method
  `server_tokenize`, else
- by the `usage.prompt_tokens` of two requests with max_tokens 1, method `calibrated_on_usage`;
- with a tokenizer (`LoadSpec.tokenizer`) the content is exact in its tokens, vLLM's meaning (method `tokenizer`,
  the server's framing on top);
- with neither, or `calibrate_prompts` off, `uncalibrated` (one word per token asked).
The calibration is the server's: it is made once per server, API and model in a process (a sweep, a search's
probes), and travels in the LoadSpec to worker processes. A point's summary says how its lengths were met and what
the server counted (`prompt_length`).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

METHODS = ("tokenizer", "server_tokenize", "calibrated_on_usage", "uncalibrated", "dataset")
_CACHE: dict[tuple, dict] = {}
CALIBRATION_TIMEOUT_S = 10.0  # the whole calibration's bound: a server that hangs costs the run this, not timeout_s


@dataclass(frozen=True)
class Calibration:
    method: str = "uncalibrated"
    overhead: float = 0.0  # server tokens beyond the words (BOS, chat template)
    per_word: float = 1.0  # server tokens per word
    note: str | None = None

    def words(self, n_tokens: int) -> int:
        """Words that the server counts as n_tokens (at least 1)."""
        if n_tokens <= 0:
            return 0
        return max(1, round((n_tokens - self.overhead) / self.per_word))

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def of(spec: Any) -> Calibration:
    """The calibration a LoadSpec carries (none: uncalibrated, one word a token)."""
    d = spec.prompt_calibration or {}
    return Calibration(**{k: d[k] for k in ("method", "overhead", "per_word", "note") if k in d})


def synthetic(spec: Any) -> bool:
    """Whether the spec's prompts are wattbench's words (the ones a calibration sizes)."""
    from . import datasets

    return datasets.name_of(spec) in ("random", "prefix_repetition", "burstgpt", "timed_trace") or spec.shape == "trace"


def _fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    (w1, t1), (w2, t2) = points
    per = (t1 - t2) / (w1 - w2) if w1 != w2 else 1.0
    if not math.isfinite(per) or per <= 0:
        per = 1.0
    return t1 - per * w1, per


def _prompts(spec: Any) -> list[str]:
    import numpy as np

    from .words import synthetic_text

    n = max(int(spec.input_tokens), 16)
    rng = np.random.default_rng(spec.seed + 7)
    return [synthetic_text(n, rng), synthetic_text(max(n // 2, 8), rng)]


def _by_tokenize(spec: Any, texts: list[str], verify: Any, deadline: float) -> tuple[list[int] | None, bool]:
    """The server's /tokenize counts of `texts` (None: it does not serve it), and whether the server answered HTTP
    at all (a server that does not is not asked for usage either: the run says what is wrong with it). A response
    is read to 64 KiB at most: a server that answers without end costs a bounded read."""
    import json

    import httpx

    from .endpoint import base_of

    root = base_of(spec.url).rstrip("/")
    url = root.removesuffix("/v1") + "/tokenize"  # vLLM serves it at the server's root, beside /v1
    counts = []
    try:
        with httpx.Client(timeout=min(spec.timeout_s, 5.0), verify=verify, headers=spec.headers or {}) as c:
            for text in texts:
                if time.monotonic() > deadline:  # a server answering slowly: the calibration's time is up
                    return None, True
                body: dict[str, Any] = {"model": spec.model}
                if spec.api == "chat":
                    body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
                else:
                    body.update(prompt=text)
                with c.stream("POST", url, json=body) as r:
                    raw = b""
                    for part in r.iter_raw():
                        raw += part
                        if len(raw) > 65536 or time.monotonic() > deadline:
                            return None, True
                    if r.status_code != 200:
                        return None, True
                n = json.loads(raw).get("count")
                if not isinstance(n, int) or n <= 0:
                    return None, True
                counts.append(n)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return None, False
    except (httpx.HTTPError, ValueError, AttributeError):
        return None, True
    return counts, True


def _by_usage(spec: Any, texts: list[str], verify: Any, deadline: float) -> tuple[list[int] | None, str | None]:
    """Two requests of max_tokens 1: the server's usage.prompt_tokens of each, or why not. On a thread of its own:
    the caller may be inside an event loop (run_load is callable from one)."""
    import threading

    import httpx

    from .client import RequestRunner

    left = max(deadline - time.monotonic(), 0.5)
    one = spec.replace(timeout_s=min(spec.timeout_s, left))

    async def go() -> list[dict]:
        async with httpx.AsyncClient(timeout=one.timeout_s, verify=verify) as client:
            runner = RequestRunner(one, client, "calibration")
            return await asyncio.wait_for(  # both requests within what is left of the calibration's time
                asyncio.gather(*(runner.run(f"cal{k}", runner.encode(t, 1), 0, 1, 0) for k, t in enumerate(texts))),
                timeout=left,
            )

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["recs"] = asyncio.run(go())
        except Exception as exc:  # noqa: BLE001 - said in the result, never fatal
            box["err"] = f"{type(exc).__name__}: {exc}"

    th = threading.Thread(target=target, name="wattbench-calibration", daemon=True)
    th.start()
    th.join()
    if "err" in box:
        return None, box["err"]
    recs = box["recs"]
    bad = next((r for r in recs if r["error_kind"]), None)
    if bad is not None:
        return None, f"a calibration request failed ({bad['error_kind']}: {str(bad['error_text'])[:160]})"
    counts = [r["prompt_tokens"] for r in recs]
    if any(not c for c in counts):
        return None, "the server reported no usage.prompt_tokens"
    return counts, None


def calibrate(spec: Any, verify: Any = True) -> Calibration:
    """The calibration of spec's server for synthetic prompts (cached per server, API, model and framing)."""
    if spec.tokenizer:
        return Calibration("tokenizer")
    if not spec.calibrate_prompts:
        return Calibration("uncalibrated", note="calibrate_prompts is off")
    key = (spec.url, spec.api, spec.model, tuple(sorted((spec.headers or {}).items())))
    if key in _CACHE:
        return Calibration(**_CACHE[key])
    texts = _prompts(spec)
    words = [len(t.split()) for t in texts]
    deadline = time.monotonic() + CALIBRATION_TIMEOUT_S
    counts, answers = _by_tokenize(spec, texts, verify, deadline)
    method, note = "server_tokenize", None
    if counts is None and not answers:
        note = "the server did not answer"
    elif counts is None:
        counts, note = _by_usage(spec, texts, verify, deadline)
        method = "calibrated_on_usage"
    if counts is None:
        cal = Calibration("uncalibrated", note=note if not answers else f"no /tokenize and {note}")
        return cal  # not cached: the server may answer later (a search's next probe)
    overhead, per_word = _fit(list(zip(words, counts)))
    cal = Calibration(method, round(overhead, 3), round(per_word, 5))
    _CACHE[key] = asdict(cal)
    return cal


def summary(spec: Any, records: list[dict]) -> dict:
    """How the point's prompt lengths were met, and what the server counted: the mean requested length and the
    mean of the prompt_tokens the server reported (usage), over the successful requests sent in the window."""
    ok = [r for r in records if r.get("in_window") and r.get("error_kind") is None]
    counted = [r for r in ok if r.get("token_count_source") == "usage" and r.get("prompt_tokens")]
    asked = [int(r["input_tokens_requested"]) for r in ok if r.get("input_tokens_requested") is not None]
    req = sum(asked) / len(asked) if asked else None
    got = sum(int(r["prompt_tokens"]) for r in counted) / len(counted) if counted else None
    cal = of(spec)
    method = cal.method if synthetic(spec) or spec.tokenizer else "dataset"
    if method == "dataset":  # the dataset's text is its length: what was asked is only an estimate of it
        req = None
    out = {
        "method": method,
        "requested_mean_tokens": req,
        "achieved_mean_tokens": got,  # null: the server reported no usage
        "error_pct": (got - req) / req * 100 if got is not None and req else None,
        "requests_counted": len(counted),
    }
    if method not in ("dataset", "tokenizer"):
        out["calibration"] = cal.as_dict()
    return out
