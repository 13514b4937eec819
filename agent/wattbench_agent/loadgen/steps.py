"""Step decomposition of a load point: what the engine's steps looked like from the client, from the token times.

A serving engine advances every running request by one token per step. A step that also carries a prompt's prefill
(a request joining the batch) takes longer, and every stream that was decoding sees that step as a long gap: a stall.
So the gaps between a request's tokens split into decode steps and stalls, and tok/s follows from both:
mean gap = (1 - stalled share) x mean decode gap + stalled share x mean stall.

Definitions (docs/MEASUREMENT.md, "Step decomposition"; `decompose` is their one implementation, used by the live
summary, `wattbench inspect` and the bundle's load_runs row alike; wattbench/token_pass.py computes the same at ingest
for bundles from before a figure existed, and a test keeps the two equal):
- the gaps are those ITL pools: successful requests sent in the window, the exact part of their token times
  (client.MAX_CHUNK_EVENTS);
- per token, not per event: an event carrying n tokens ends n steps, so its gap from the token-carrying event before
  it counts as n gaps of gap / n (their split inside the event cannot be seen; a stall inside a multi-token event is
  spread over its tokens, so with such events the stalled share is a lower bound: `multi_token_gap_fraction` says
  how many gaps came so). Events carrying no token are skipped. With one token an event, this is ITL's own gaps;
- `decode_step_ms`: the median gap;
- a stall: a gap longer than STALL_FACTOR x the median. On the H200 (vLLM 0.25, 8B, 512-token prompts, 4 and
  16 streams) gaps are bimodal: decode steps within 20% of the median, stalls at 2-4x, and under 1% of the gaps
  between 1.4x and 2x; the threshold sits in that valley;
- two kinds of stall. A delivery stall: the event ending the stall and at least one more token-carrying event of the
  request arrive within BURST_MS of it (a burst: the GPU cannot make two tokens of one request in 0.5 ms, so the host
  held them), and no other request's first token arrives in that burst (no prefill came out with it). Every other
  stall is a GPU stall (a step that carried a prefill, or one whose prefill came out with the held tokens).
  `stalled_gap_fraction` and `stall_ms_mean`: the GPU stalls' share of the gaps and their mean length (None when
  there is none); `delivery_stalled_fraction`, `delivery_stall_ms_mean`: the delivery stalls'; `gpu_stalls`,
  `delivery_stalls`: how many gaps each;
- prefills from first tokens: a request's first token comes out of the step that ran its prefill, so first tokens of
  different requests of the load point (any request: in the window or not, failed or not) arriving within BURST_MS of
  the next form one cluster, one prefill step. Over the pool's requests: `prefills` (those with a first token),
  `prefill_steps` (the clusters holding one of them), `prefills_per_step` (those clusters' mean size, each counting
  every request in it) with `prefills_per_step_se` (its standard error over the clusters; a closed loop's groups
  persist, so this is a lower bound), `shared_prefill_fraction` (the share of the pool's prefills in a cluster of two
  or more) and `prefill_step_sizes` ({size: clusters});
- `expected_stalled_fraction` (closed loop, every counted request of one output length o, c streams): each stream
  sends one prompt per o tokens, and a step with another stream's prefill stalls it: of its o - 1 gaps, c - 1 are
  stalls when each prefill has a step of its own: (c - 1) / (o - 1), at most 1 (about c / o; a single stream expects
  none). Undefined (None, `note` says why) for open loop (prefills come with the arrivals) and for output lengths
  that vary;
- `phase_state`, from the measured prefills a prefill step: 'bunched' when `prefills_per_step` is above
  BUNCHED_PREFILLS (more than 1.5 prefills a step: half-way between spread, 1, and pairs, 2) by more than PHASE_Z
  standard errors, 'spread' when below it by as much. None (`note` says why) without an expectation (open loop,
  varying lengths: prefills do not recur once per stream and request), for a single stream, where the expected
  stalled share is above MAX_PHASE_EXPECTED (prefills come so often that many share a step by chance, and the two
  modes of the gaps meet, so the stall threshold no longer isolates a decode step: at 64 streams of 128 tokens the
  old stall-count label inverted), with fewer than MIN_PREFILL_STEPS prefill steps, and where the figure is within
  PHASE_Z standard errors of BUNCHED_PREFILLS.

Agent side: numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

STALL_FACTOR = 1.5  # a gap longer than this many decode steps (the median gap) is a stall
# tokens of one request, or first tokens of different requests, arriving within this of each other came out together
BURST_MS = 0.5
BUNCHED_PREFILLS = 1.5  # bunched: more prefills a prefill step than this (by PHASE_Z standard errors)
PHASE_Z = 2.0
MIN_PREFILL_STEPS = 20  # no phase verdict on fewer prefill steps than this
MAX_PHASE_EXPECTED = 0.3  # no phase verdict where the expected stalled share is above this

KEYS = (
    "gaps",
    "decode_step_ms",
    "stall_threshold_ms",
    "stalled_gap_fraction",
    "stall_ms_mean",
    "gpu_stalls",
    "delivery_stalls",
    "delivery_stalled_fraction",
    "delivery_stall_ms_mean",
    "prefills",
    "prefill_steps",
    "prefills_per_step",
    "prefills_per_step_se",
    "shared_prefill_fraction",
    "prefill_step_sizes",
    "expected_stalled_fraction",
    "phase_state",
    "multi_token_gap_fraction",
    "note",
)


def request_events(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """One request's token-carrying events (the exact part of its events only, `chunks_exact`): their times (ns) and
    tokens (1 each where the record has no matching list)."""
    ch = record.get("chunk_ns") or []
    k = record.get("chunks_exact")
    if k is not None:
        ch = ch[:k]
    if not ch:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    t = np.asarray(ch, dtype=np.int64)
    tk = record.get("chunk_tokens") or []
    n = np.asarray(tk[: len(ch)], dtype=np.int64) if len(tk) >= len(ch) else np.ones(len(ch), dtype=np.int64)
    keep = n > 0
    return (t, n) if keep.all() else (t[keep], n[keep])


def request_gaps(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """One request's gaps (ms) between its token-carrying events, and the tokens of the event each gap ends at."""
    t, n = request_events(record)
    if len(t) < 2:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.diff(t) / 1e6, n[1:]


def first_token_ns(record: dict) -> int | None:
    """When a request's first token arrived (its first token-carrying event), None without one."""
    t, _ = request_events(record)
    return int(t[0]) if len(t) else None


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


def prefill_clusters(pool_firsts: np.ndarray, all_firsts: np.ndarray) -> dict[str, Any]:
    """The prefill figures (the module's docstring) of the pool's first tokens `pool_firsts` among every first token
    of the load point `all_firsts` (ns; the pool's among them)."""
    out: dict[str, Any] = {"prefills": int(len(pool_firsts)), "prefill_steps": 0}
    if not len(pool_firsts):
        return out
    every = np.sort(all_firsts)
    cluster = np.concatenate(([0], np.cumsum(np.diff(every) > round(BURST_MS * 1e6))))
    sizes = np.bincount(cluster)
    mine = cluster[np.searchsorted(every, pool_firsts)]
    held = sizes[np.unique(mine)]  # the clusters holding a pool prefill, each counting every request in it
    out.update(
        prefill_steps=int(len(held)),
        prefills_per_step=float(held.mean()),
        prefills_per_step_se=float(held.std(ddof=1) / np.sqrt(len(held))) if len(held) > 1 else None,
        shared_prefill_fraction=float((sizes[mine] > 1).mean()),
        prefill_step_sizes={str(k): int(v) for k, v in enumerate(np.bincount(held)) if v},
    )
    return out


def classify_stalls(
    pool: list[tuple[np.ndarray, np.ndarray]], threshold_ms: float, all_firsts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The stalls of the pool's requests (each its token-carrying events: times ns, tokens), one entry a token of the
    event ending the stall, in the order of the requests and their gaps: the per-token length (ms), and whether it is
    a delivery stall."""
    burst = round(BURST_MS * 1e6)
    every = np.sort(all_firsts)
    lengths, delivery = [np.zeros(0)], [np.zeros(0, dtype=bool)]
    for t, n in pool:
        if len(t) < 2:
            continue
        per_token = np.diff(t) / 1e6 / n[1:]
        i = np.flatnonzero(per_token > threshold_ms)
        if not len(i):
            continue
        end = t[i + 1]
        k = np.searchsorted(t, end + burst, side="right")  # the burst: events from `end` to `end` + BURST_MS
        last = t[k - 1]
        others = np.searchsorted(every, last + burst, side="right") - np.searchsorted(every, end - burst)
        others -= (end - burst <= t[0]) & (t[0] <= last + burst)  # its own first token is no other's prefill
        lengths.append(np.repeat(per_token[i], n[i + 1]))
        delivery.append(np.repeat((k - i - 1 >= 2) & (others == 0), n[i + 1]))
    return np.concatenate(lengths), np.concatenate(delivery)


def decompose(
    records: Iterable[dict],
    *,
    closed_loop: bool = False,
    concurrency: int | None = None,
    all_records: Iterable[dict] | None = None,
) -> dict[str, Any]:
    """The step decomposition of the successful in-window requests `records` (the module's docstring has the
    definitions). `closed_loop`, `concurrency`: the load point's shape, for the expected stalled share;
    `all_records`: every request of the load point (`records` among them), whose first tokens mark its prefills
    (default: `records`)."""
    recs = list(records)
    events = [request_events(r) for r in recs]
    pool_firsts = np.asarray([t[0] for t, _ in events if len(t)], dtype=np.int64)
    if all_records is None:
        all_firsts = pool_firsts
    else:  # the pool's own, where the caller left one out
        every = list(all_records)
        seen = {id(r) for r in every}
        every += [r for r in recs if id(r) not in seen]
        all_firsts = np.asarray([f for f in map(first_token_ns, every) if f is not None], dtype=np.int64)
    out: dict[str, Any] = dict.fromkeys(KEYS)
    out.update(prefill_clusters(pool_firsts, all_firsts))
    out["gaps"] = 0
    gaps = [(np.diff(t) / 1e6, n[1:]) for t, n in events if len(t) >= 2]
    if not gaps:
        out["note"] = "no gap between tokens in the window"
        return out
    g = np.concatenate([x for x, _ in gaps])
    n = np.concatenate([x for _, x in gaps])
    per_token = np.repeat(g / n, n)
    step = float(np.median(per_token))
    threshold = STALL_FACTOR * step
    lengths, delivery = classify_stalls(events, threshold, all_firsts)
    gpu = lengths[~delivery]
    held = lengths[delivery]
    out.update(
        gaps=int(per_token.size),
        decode_step_ms=step,
        stall_threshold_ms=threshold,
        stalled_gap_fraction=float(gpu.size / per_token.size),
        stall_ms_mean=float(gpu.mean()) if gpu.size else None,
        gpu_stalls=int(gpu.size),
        delivery_stalls=int(held.size),
        delivery_stalled_fraction=float(held.size / per_token.size),
        delivery_stall_ms_mean=float(held.mean()) if held.size else None,
        multi_token_gap_fraction=float(n[n > 1].sum() / per_token.size),
    )
    expected, note = expected_stalled_fraction(recs, closed_loop, concurrency)
    return verdict(out, expected, note)


def verdict(out: dict[str, Any], expected: float | None, note: str | None) -> dict[str, Any]:
    """The expected stalled share and the phase (or the note saying why none) of a decomposition whose prefill
    figures are in `out` (decompose's; the warehouse's from the token times at ingest)."""
    out["expected_stalled_fraction"] = expected
    out["phase_state"] = None
    mean, se, n = out.get("prefills_per_step"), out.get("prefills_per_step_se"), out.get("prefill_steps") or 0
    if expected is not None:
        if expected == 0:
            note = "one stream: no other stream's prefill can share its step"
        elif expected > MAX_PHASE_EXPECTED:
            note = (
                f"expected stalled share {expected:.2f}, above {MAX_PHASE_EXPECTED:g}: prefills come so often that "
                "many share a step by chance, and decode steps and prefill steps no longer separate; no phase"
            )
        elif n < MIN_PREFILL_STEPS:
            note = f"too few prefill steps for a phase: {n}, fewer than {MIN_PREFILL_STEPS}"
        else:
            margin = PHASE_Z * (se or 0.0)
            if mean - margin > BUNCHED_PREFILLS:
                out["phase_state"] = "bunched"
            elif mean + margin < BUNCHED_PREFILLS:
                out["phase_state"] = "spread"
            else:
                note = (
                    f"{mean:.2f} +- {margin:.2f} prefills a prefill step: not clear of {BUNCHED_PREFILLS:g}, "
                    "neither spread nor bunched"
                )
    out["note"] = note
    return out


def describe(steps: dict[str, Any] | None) -> str | None:
    """One line for the summary table: decode step, stalls of each kind, prefills a step and phase."""
    if not steps or steps.get("decode_step_ms") is None:
        return None
    stall, held = steps["stall_ms_mean"], steps.get("delivery_stall_ms_mean")
    expected = steps["expected_stalled_fraction"]
    text = (
        f"  steps: decode {steps['decode_step_ms']:.2f} ms, GPU stalls {100 * steps['stalled_gap_fraction']:.1f}% of "
        f"{steps['gaps']} gaps" + (f" (mean {stall:.2f} ms)" if stall is not None else "")
    )
    if expected is not None:
        text += f", expected {100 * expected:.1f}%"
    if steps.get("delivery_stalls"):
        text += f"; delivery stalls {100 * steps['delivery_stalled_fraction']:.1f}%" + (
            f" (mean {held:.2f} ms)" if held is not None else ""
        )
    if steps.get("prefill_steps"):
        text += (
            f"; {steps['prefills_per_step']:.2f} prefills a prefill step, "
            f"{100 * steps['shared_prefill_fraction']:.0f}% of {steps['prefills']} sharing one"
        )
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
    "gpu_stalls": "gpu_stalls",
    "delivery_stalls": "delivery_stalls",
    "delivery_stalled_fraction": "delivery_stalled_fraction",
    "delivery_stall_ms_mean": "delivery_stall_ms_mean",
    "prefills": "prefills",
    "prefill_steps": "prefill_steps",
    "prefills_per_step": "prefills_per_step",
    "prefills_per_step_se": "prefills_per_step_se",
    "shared_prefill_fraction": "shared_prefill_fraction",
    "expected_stalled_fraction": "expected_stalled_fraction",
    "phase_state": "phase_state",
    "phase_note": "note",
}


def load_run_columns(steps: dict[str, Any] | None) -> dict[str, Any]:
    """The load_runs columns of a summary's `steps` (all None without one)."""
    steps = steps or {}
    return {col: steps.get(key) for col, key in COLUMNS.items()}
