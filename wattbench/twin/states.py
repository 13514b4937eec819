"""The two phase states of a closed loop of equal lengths, as a prediction gives them.

A closed loop whose requests all have the same lengths is periodic, and its prefills can lock into a pattern: each in
a step of its own (spread: a request sees (c - 1)/(o - 1) of its gaps stalled) or sharing steps (bunched: fewer,
longer stalls; docs/MEASUREMENT.md, "A point whose repeats fall in both phase states"). Which one a server start
falls into is not set by the ramp or the warm-up, so a prediction of such a point gives both:

- the state the twin simulates: its figures, cross-validated against the committed windows (which ran spread at 2-16
  streams, shared at 32 streams of 512-token prompts: share_table);
- the other state, from the twin's own step model (the decode step d, the step carrying one prompt S1 and the step
  carrying k prompts Sk, each with the host's launch time where the step runs outside CUDA graphs) by the closed
  loop's arithmetic: with prefills k to a step a request's TPOT excess over d is (c-1)/((o-1) k) x (Sk - d), so
  going from k to k' it scales by ((Sk' - d)/k') / ((Sk - d)/k); TTFT moves by Sk' - Sk; a request's time
  TTFT + (o-1) TPOT sets tok/s; W stays (at 16 streams the decode batch sets the power: results/h200-vllm-sweep, "Does
  power follow the prefills?"). Spread is k = 1, shared k = SHARED_K. The twin cannot simulate the shared state
  where it does not form by itself (its API server takes requests in one at a time, so two sent together never
  share a step), and no committed window at 16 streams ran in it: these figures are the step model's, not
  validated against a measured window of that state.

Each state's share is what the committed real windows of such points ran in (share_table: per prompt class and
stream count; a window is `shared` when its stalled share is below the expected one / 1.5, the rule of
docs/MEASUREMENT.md, computed here from the windows' stalled and expected shares). The band of a prediction covers the
other state too when that state's share is at least 1 - level, or when no committed window says (the share unknown).
"""

from __future__ import annotations

from typing import Any

SHARED_K = 2  # prompts a step in the shared state: the least sharing the bunched rule (more than 1.5) counts
MAX_EXPECTED = 0.3  # above this expected stalled share every other step carries a prefill: no phase to lock into
LONG_PROMPT = 1500  # prompt tokens above which a prefill step is the GPU's (calibrate.LONG)


def expected_share(c: int, o: int) -> float:
    """The stalled share of a spread closed loop: (c - 1)/(o - 1)."""
    return (c - 1) / (o - 1) if o > 1 else 0.0


def lockable(closed_loop: bool, fixed_lengths: bool, c: int | None, o: int | None) -> bool:
    """Whether a point can lock into either state: a closed loop of equal lengths, two streams or more, and an
    expected stalled share above 0 and at most MAX_EXPECTED."""
    if not (closed_loop and fixed_lengths and c and o) or c < 2 or o < 2:
        return False
    return 0.0 < expected_share(c, o) <= MAX_EXPECTED


def prompt_class(prompt_tokens: float) -> str:
    return "long" if prompt_tokens > LONG_PROMPT else "short"


def window_state(stalled: float | None, expected: float | None) -> str | None:
    """A measured window's state from its stalled share and the expected one (None: not judged)."""
    if stalled is None or not expected or expected > MAX_EXPECTED:
        return None
    return "shared" if stalled < expected / 1.5 else "spread"


def share_table(points) -> dict[str, dict[str, dict[str, int]]]:
    """{prompt class: {streams: {"spread": windows, "shared": windows}}} over the lockable points' windows."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for p in points:
        if not lockable(p.shape == "concurrency", p.output_dist is None, p.concurrency, p.output_tokens):
            continue
        for r in p.repeats:
            state = window_state(r.get("stalled_gap_fraction"), r.get("expected_stalled_fraction"))
            if state:
                counts = out.setdefault(prompt_class(p.prompt_tokens), {}).setdefault(str(p.concurrency), {})
                counts[state] = counts.get(state, 0) + 1
    return out


def share_of(table: dict, prompt_tokens: float, c: int) -> dict[str, Any]:
    """The shared state's measured share at a point: {"shared": m, "windows": n, "share": m / n} (share None where no
    committed window of that prompt class and stream count was judged)."""
    counts = (table.get(prompt_class(prompt_tokens)) or {}).get(str(c)) or {}
    n = sum(counts.values())
    m = counts.get("shared", 0)
    return {"shared": m, "windows": n, "share": m / n if n else None}


def moved(setup, c: int, prompt_tokens: float, o: int, figs: dict[str, float], k_from: int, k_to: int):
    """A state's figures from another's by the module's arithmetic: prefills k_from to a step -> k_to to a step."""
    from wattbench.twin.calibrate import decode_step_load, prefill_step_load

    dep = setup.dep
    d = dep.step(decode_step_load(c, prompt_tokens, o)).dt * 1e3
    s_from, s_to = (dep.step(prefill_step_load(c, prompt_tokens, o, k)).dt * 1e3 for k in (k_from, k_to))
    tpot, ttft = figs.get("tpot_p50_ms"), figs.get("ttft_p50_ms")
    if tpot is None or ttft is None or s_from <= d:
        return {}
    excess = ((s_to - d) / k_to) / ((s_from - d) / k_from)
    out = {"tpot_p50_ms": d + (tpot - d) * excess, "ttft_p50_ms": ttft + (s_to - s_from)}
    if figs.get("ttft_p99_ms") is not None:
        out["ttft_p99_ms"] = figs["ttft_p99_ms"] + (s_to - s_from)
    speed = (ttft + (o - 1) * tpot) / (out["ttft_p50_ms"] + (o - 1) * out["tpot_p50_ms"])
    for f in ("output_tok_s", "output_tokens_per_j"):
        if figs.get(f) is not None:
            out[f] = figs[f] * speed
    if figs.get("counter_w_per_gpu") is not None:
        out["counter_w_per_gpu"] = figs["counter_w_per_gpu"]
    return out


def states(setup, c: int, prompt_tokens: float, o: int, figs: dict[str, float], table: dict, level: float):
    """Both states of a lockable point. The twin's figures `figs` stand for the state most committed windows of that
    prompt class and stream count ran in (spread where none did: the ramp sets each prefill a step of its own), and
    were cross-validated against those windows; the other state comes from them by moved(). Each state has its
    measured share (None: no committed window); the band covers the other state too when its share is at least
    1 - level or unknown."""
    sh = share_of(table, prompt_tokens, c)
    simulated = "shared" if sh["share"] is not None and sh["share"] > 0.5 else "spread"
    other = "spread" if simulated == "shared" else "shared"
    k = {"spread": 1, "shared": SHARED_K}
    other_figs = moved(setup, c, prompt_tokens, o, figs, k[simulated], k[other])
    share = {"shared": sh["share"], "spread": None if sh["share"] is None else 1.0 - sh["share"]}
    return {
        "simulated": simulated,
        "states": {
            simulated: {"figures": dict(figs), "share": share[simulated], "prompts_a_step": k[simulated]},
            other: {"figures": other_figs, "share": share[other], "prompts_a_step": k[other]},
        },
        "windows": sh["windows"],
        "band_covers_both": bool(other_figs) and (share[other] is None or share[other] >= 1.0 - level),
    }
