"""Silent truncation is classified from what the server reported (usage and finish_reason)."""

from wattbench_agent.engines.failures import classify_truncation, mark_truncations


def rec(**kw):
    base = {
        "prompt_tokens": 512,
        "input_tokens_requested": 512,
        "completion_tokens": 128,
        "max_tokens": 128,
        "finish_reason": "length",
        "error_kind": None,
    }
    return {**base, **kw}


def test_classify_truncation():
    assert classify_truncation(rec()) is None  # all asked for
    assert classify_truncation(rec(prompt_tokens=300)) == "truncated_prompt"  # the prompt was cut
    assert classify_truncation(rec(prompt_tokens=510), prompt_tolerance=4) is None
    assert classify_truncation(rec(completion_tokens=40)) == "truncated_output"  # stopped at the engine's limit
    assert classify_truncation(rec(completion_tokens=40, finish_reason="stop")) is None  # EOS: not truncation
    assert classify_truncation(rec(completion_tokens=0, finish_reason=None)) == "truncated_output"
    assert classify_truncation(rec(completion_tokens=None, prompt_tokens=None)) is None  # unknown: unclassified
    assert classify_truncation(rec(completion_tokens=3, error_kind="http_500")) is None  # a failure already


def test_mark_truncations_sets_kinds_in_place():
    records = [rec(), rec(completion_tokens=10), rec(prompt_tokens=100), rec(error_kind="timeout")]
    counts = mark_truncations(records)
    assert counts == {"truncated_prompt": 1, "truncated_output": 1}
    assert [r["error_kind"] for r in records] == [None, "truncated_output", "truncated_prompt", "timeout"]
    assert "10 of 128 output tokens" in records[1]["error_text"]
