"""Token timelines of a closed loop as an engine steps it, with the truth known (which prefills share a step, where
the host held tokens): for the step decomposition's tests (tests/loadgen/test_steps.py, tests/test_step_fill.py)."""

from __future__ import annotations

import numpy as np

MS = 1_000_000


def closed_loop(
    c: int,
    o: int,
    k: int = 1,
    *,
    periods: int = 12,
    prefill_steps: int = 1,
    d: float = 5.0,
    s: float = 15.0,
) -> list[dict]:
    """A closed loop of c streams of o tokens a request, as an engine steps it (the truth known): the streams run in
    c // k groups of k whose prefills share a step. A group's prefill takes `prefill_steps` steps of s ms (its k first
    tokens come out together at the end of the last, 10 us apart), then its o - 1 decode steps follow, and its next
    request's prefill comes the step after its last token. Every step that carries no prefill takes d ms. The groups
    start evenly spread over the cycle, so no two groups' prefills share a step: each request of a group sees the other
    c // k - 1 groups' prefills, `prefill_steps` stalled gaps each, among its o - 1 gaps. `periods` requests a
    stream, all in the window."""
    groups = c // k
    cycle = prefill_steps + o - 1  # steps from a group's prefill to the next
    start = [j * cycle // groups for j in range(groups)]
    steps_total = start[-1] + (periods + 1) * cycle
    prefill = np.zeros(steps_total, dtype=bool)
    for j in range(groups):
        for p in range(periods + 1):  # the requests after the last: their prefills stall the last ones too
            first = start[j] + p * cycle
            prefill[first : first + prefill_steps] = True
    ends = 1000.0 + np.cumsum(np.where(prefill, s, d))  # ms: when each step's tokens come out
    out = []
    for j in range(groups):
        for p in range(periods):
            last_prefill = start[j] + p * cycle + prefill_steps - 1
            times = ends[last_prefill : last_prefill + o]
            for m in range(k):
                ns = [int(round(t * MS)) + 10_000 * m for t in times]
                out.append(
                    {
                        "request_id": f"{j}.{m}.{p}",
                        "sent_ns": ns[0] - 40 * MS,
                        "chunk_ns": ns,
                        "chunk_tokens": [1] * o,
                        "completion_tokens": o,
                        "error_kind": None,
                        "in_window": True,
                    }
                )
    return out


def hold(rec: dict, at: int, events: int) -> dict:
    """The request with its events at..at + events - 1 held by the host and delivered at once, 0.1 ms apart, when the
    last of them came out (a delivery stall: the gap before `at` spans `events` steps)."""
    ns = list(rec["chunk_ns"])
    release = ns[at + events - 1] - 100_000 * (events - 1)
    ns[at : at + events] = [release + 100_000 * i for i in range(events)]
    return {**rec, "chunk_ns": ns}
