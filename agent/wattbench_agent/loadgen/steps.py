"""Step decomposition of a load point: what the engine's steps looked like from the client, from the token times.

A serving engine advances every running request by one token per step. A step that also carries a prompt's prefill
(a request joining the batch) takes longer, and every stream that was decoding sees that step as a long gap: a stall.
So the gaps between a request's tokens split into decode steps and stalls, and tok/s follows from both:
mean gap = (1 - stalled share) x mean decode gap + stalled share x mean stall.

Definitions (docs/MEASUREMENT.md, "Step decomposition"; `decompose` is their one implementation, used by the live
summary, `wattbench inspect` and the bundle's load_runs row alike):
- the gaps are those ITL pools: successful requests sent in the window, the exact part of their token times
  (client.MAX_CHUNK_EVENTS);
- per token, not per event: an event carrying n tokens ends n steps, so its gap from the token-carrying event before
  it counts as n gaps of gap / n (their split inside the event cannot be seen; a stall inside a multi-token event is
  spread over its tokens, so with such events the stalled share is a lower bound: `multi_token_gap_fraction` says
  how many gaps came so). Events carrying no token are skipped. With one token an event, this is ITL's own gaps;
- `decode_step_ms`: the median gap;
- a stall: a gap longer than STALL_FACTOR x the median. On the H200 (vLLM 0.25, 8B, 512-token prompts, 4 and
  16 streams) gaps are bimodal: decode steps within 20% of the median, stalls at 2-4x, and under 1% of the gaps
  between 1.4x and 2x; the threshold sits in that valley. `stalled_gap_fraction`: the share of gaps that are
  stalls; `stall_ms_mean`: their mean length (None when there is none);
- `expected_stalled_fraction` (closed loop, every counted request of one output length o, c streams): each stream
  sends one prompt per o tokens, and a step with another stream's prefill stalls it: of its o - 1 gaps, c - 1 are
  stalls when each prefill has a step of its own (the spread phase): (c - 1) / (o - 1), at most 1 (about c / o;
  a single stream expects none). Undefined (None, `note` says why) for open loop (prefills come with the arrivals)
  and for output lengths that vary;
- `phase_state`: 'bunched' when the stalled share is below expected / BUNCHED_RATIO (more than 1.5 prefills share
  a stalled step on average: half-way between spread, 1, and pairs, 2), else 'spread'; None where there is no
  expectation, a single stream, as many streams as tokens a request or more (expected 1: prefills must share steps),
  fewer than MIN_EXPECTED_STALLS stalls are expected among the gaps, no stall was
  found, or the stalls found average fewer than MIN_STALL_STEPS decode steps (their mode then straddles the
  threshold, so the count is not to be trusted: short prompts on a fast prefill).

Agent side: numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

STALL_FACTOR = 1.5  # a gap longer than this many decode steps (the median gap) is a stall
BUNCHED_RATIO = 1.5  # bunched: measured stalled share below expected / this
MIN_EXPECTED_STALLS = 20  # no phase verdict on fewer expected stalls than this
# no phase verdict when the stalls found average fewer decode steps than this: their mode then straddles the
# threshold and an unknown part of them went uncounted (the emulator's 8B H200 profile at 256-token prompts: 1.65)
MIN_STALL_STEPS = 2.0

KEYS = (
    "gaps",
    "decode_step_ms",
    "stall_threshold_ms",
    "stalled_gap_fraction",
    "stall_ms_mean",
    "expected_stalled_fraction",
    "phase_state",
    "multi_token_gap_fraction",
    "note",
)


def request_gaps(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """One request's gaps (ms) between its token-carrying events, and the tokens of the event each gap ends at:
    the exact part of its events only (`chunks_exact`); tokens 1 each where the record has no matching list."""
    ch = record.get("chunk_ns") or []
    k = record.get("chunks_exact")
    if k is not None:
        ch = ch[:k]
    if len(ch) < 2:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    t = np.asarray(ch, dtype=np.int64)
    tk = record.get("chunk_tokens") or []
    n = np.asarray(tk[: len(ch)], dtype=np.int64) if len(tk) >= len(ch) else np.ones(len(ch), dtype=np.int64)
    keep = n > 0
    if not keep.all():
        t, n = t[keep], n[keep]
    if len(t) < 2:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.diff(t) / 1e6, n[1:]


def expected_stalled_fraction(
    records: list[dict], closed_loop: bool, concurrency: int | None
) -> tuple[float | None, str | None]:
    """(c - 1) / (o - 1) capped at 1 for a closed loop of c streams whose requests all have o output tokens; else
    (None, why)."""
    return expected_for_lengths({r.get("completion_tokens") for r in records}, closed_loop, concurrency)


def expected_for_lengths(lengths: set, closed_loop: bool, concurrency: int | None) -> tuple[float | None, str | None]:
    """expected_stalled_fraction from the set of the records' output lengths (None among them: one not known)."""
    if not closed_loop:
        return None, "open loop: prefills come with the arrivals, not once per request of each stream"
    if not concurrency:
        return None, "closed loop without a stream count"
    if not lengths or None in lengths:
        return None, "output lengths not known"
    if len(lengths) > 1:
        return None, f"output lengths vary ({min(lengths)}-{max(lengths)} tokens): no fixed prefills per token"
    o = int(next(iter(lengths)))
    if o < 2:
        return None, "one output token a request: no gaps"
    return min(1.0, (int(concurrency) - 1) / (o - 1)), None


def decompose(records: Iterable[dict], *, closed_loop: bool = False, concurrency: int | None = None) -> dict[str, Any]:
    """The step decomposition of the successful in-window requests `records` (the module's docstring has the
    definitions). `closed_loop`, `concurrency`: the load point's shape, for the expected stalled share."""
    recs = list(records)
    gaps, tokens = [], []
    for r in recs:
        g, n = request_gaps(r)
        if len(g):
            gaps.append(g)
            tokens.append(n)
    out: dict[str, Any] = dict.fromkeys(KEYS)
    out["gaps"] = 0
    if not gaps:
        out["note"] = "no gap between tokens in the window"
        return out
    g, n = np.concatenate(gaps), np.concatenate(tokens)
    per_token = np.repeat(g / n, n)
    step = float(np.median(per_token))
    threshold = STALL_FACTOR * step
    stalled = per_token > threshold
    out.update(
        gaps=int(per_token.size),
        decode_step_ms=step,
        stall_threshold_ms=threshold,
        stalled_gap_fraction=float(stalled.mean()),
        stall_ms_mean=float(per_token[stalled].mean()) if stalled.any() else None,
        multi_token_gap_fraction=float(n[n > 1].sum() / per_token.size),
    )
    expected, note = expected_stalled_fraction(recs, closed_loop, concurrency)
    return verdict(out, expected, note)


def verdict(out: dict[str, Any], expected: float | None, note: str | None) -> dict[str, Any]:
    """The expected stalled share and the phase (or the note saying why none) of a decomposition whose gaps,
    decode_step_ms, stalled_gap_fraction and stall_ms_mean are in `out` (decompose's; the warehouse's from the token
    times at ingest)."""
    per_token_size = out["gaps"]
    step = out["decode_step_ms"]
    out["expected_stalled_fraction"] = expected
    if expected is not None:
        if expected == 0:
            note = "one stream: no other stream's prefill can stall it"
        elif expected >= 1:
            note = (
                "as many streams as tokens a request or more: every step carries a prefill even when spread, and "
                "steps carrying several are forced, not a phase"
            )
        elif expected * per_token_size < MIN_EXPECTED_STALLS:
            note = (
                f"too few gaps for a phase: {expected * per_token_size:.1f} stalls expected, "
                f"fewer than {MIN_EXPECTED_STALLS}"
            )
        elif out["stall_ms_mean"] is None:
            note = "no stall found: prefills did not lengthen the steps they joined (or ran elsewhere)"
        elif out["stall_ms_mean"] < MIN_STALL_STEPS * step:
            note = (
                f"stalls average {out['stall_ms_mean'] / step:.2f} decode steps, under {MIN_STALL_STEPS:g}: shorter "
                f"stalls than {STALL_FACTOR:g} steps may have gone uncounted, so no phase"
            )
        else:
            out["phase_state"] = "bunched" if out["stalled_gap_fraction"] < expected / BUNCHED_RATIO else "spread"
    out["note"] = note
    return out


def describe(steps: dict[str, Any] | None) -> str | None:
    """One line for the summary table: decode step, stalls, expected share and phase."""
    if not steps or steps.get("decode_step_ms") is None:
        return None
    stall = steps["stall_ms_mean"]
    expected = steps["expected_stalled_fraction"]
    text = (
        f"  steps: decode {steps['decode_step_ms']:.2f} ms, stalls {100 * steps['stalled_gap_fraction']:.1f}% of "
        f"{steps['gaps']} gaps" + (f" (mean {stall:.2f} ms)" if stall is not None else "")
    )
    if expected is not None:
        text += f", expected {100 * expected:.1f}%"
    if steps.get("phase_state"):
        text += f", phase {steps['phase_state']}"
    elif steps.get("note"):
        text += f" ({steps['note']})"
    return text


# load_runs columns (sql/schema.sql) <- keys of the `steps` summary
COLUMNS = {
    "step_gaps": "gaps",
    "decode_step_ms": "decode_step_ms",
    "stalled_gap_fraction": "stalled_gap_fraction",
    "stall_ms_mean": "stall_ms_mean",
    "expected_stalled_fraction": "expected_stalled_fraction",
    "phase_state": "phase_state",
}


def load_run_columns(steps: dict[str, Any] | None) -> dict[str, Any]:
    """The load_runs columns of a summary's `steps` (all None without one)."""
    steps = steps or {}
    return {col: steps.get(key) for col, key in COLUMNS.items()}
