"""Failure kinds, and the classification of silent truncation from a request record.

Failures are data: each is a row with its kind and the plan goes on.

    engine_builds.error_kind   config_error | no_gpu | build_failed | hardware_mismatch
    deployments.error_kind     start_failed | oom_at_start | health_timeout | port_in_use | hardware_mismatch |
                               not_built | config_error | server_crash | unreachable
    requests.error_kind        (the load generator's kinds) | truncated_prompt | truncated_output

Silent truncation (the seed article: "TensorRT-LLM can silently truncate if you misconfigure max_seq_len") shows
only in what the server reports: `usage.prompt_tokens` below the prompt length asked for (the prompt was cut), or
`usage.completion_tokens` below `max_tokens` with finish_reason 'length' although the client asked for exactly
max_tokens (ignore_eos) - the engine stopped at its own limit, not at the request's. A stop at EOS
(finish_reason 'stop') is not truncation.

Agent-side code: stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

BUILD_ERROR_KINDS = ("config_error", "no_gpu", "build_failed", "hardware_mismatch")
DEPLOY_ERROR_KINDS = (
    "start_failed",
    "oom_at_start",
    "health_timeout",
    "port_in_use",
    "hardware_mismatch",
    "not_built",
    "config_error",
    "server_crash",
    "unreachable",
)
TRUNCATION_KINDS = ("truncated_prompt", "truncated_output")


class DeployError(RuntimeError):
    """A server did not come up; `kind` says how (one of DEPLOY_ERROR_KINDS: start_failed, oom_at_start,
    health_timeout, port_in_use, hardware_mismatch, not_built, config_error). Raised by the adapters (a config they
    refuse, an engine built for another GPU) and by the deployment targets (deploy/local.py)."""

    def __init__(self, kind: str, text: str):
        super().__init__(text)
        self.kind = kind


def classify_truncation(record: dict[str, Any], prompt_tolerance: int = 0) -> str | None:
    """'truncated_prompt' | 'truncated_output' | None for one request record (a `requests` row or dict with
    prompt_tokens, input_tokens_requested, completion_tokens, max_tokens, finish_reason).

    A record that failed outright (error_kind set), or whose counts are unknown (NULL), is not classified.
    `prompt_tolerance` absorbs chat-template tokens when prompt lengths are estimated (token_count_source
    'estimate'): a prompt counts as cut only when it is more than that many tokens short.
    """
    if record.get("error_kind") and record["error_kind"] not in TRUNCATION_KINDS:
        return None
    asked_in, got_in = record.get("input_tokens_requested"), record.get("prompt_tokens")
    if asked_in is not None and got_in is not None and got_in + prompt_tolerance < asked_in:
        return "truncated_prompt"
    asked_out, got_out = record.get("max_tokens"), record.get("completion_tokens")
    finish = (record.get("finish_reason") or "").lower()
    if asked_out is not None and got_out is not None and got_out < asked_out and finish in ("length", ""):
        # '' : no finish_reason at all, yet the stream ended early and cleanly
        return "truncated_output" if finish == "length" or got_out == 0 else None
    return None


def mark_truncations(records: Iterable[dict[str, Any]], prompt_tolerance: int = 0) -> dict[str, int]:
    """Set error_kind/error_text on truncated records in place (only where error_kind is empty); counts per kind."""
    counts = {k: 0 for k in TRUNCATION_KINDS}
    for r in records:
        if r.get("error_kind"):
            continue
        kind = classify_truncation(r, prompt_tolerance)
        if kind:
            counts[kind] += 1
            r["error_kind"] = kind
            if kind == "truncated_prompt":
                r["error_text"] = (
                    f"prompt has {r.get('prompt_tokens')} tokens by the server's usage, "
                    f"{r.get('input_tokens_requested')} were sent"
                )
            else:
                r["error_text"] = (
                    f"{r.get('completion_tokens')} of {r.get('max_tokens')} output tokens, finish_reason "
                    f"{r.get('finish_reason')!r}: the engine stopped at its own limit"
                )
    return counts
