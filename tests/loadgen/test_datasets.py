"""vllm bench serve's text datasets and multi-turn conversations (agent/wattbench_agent/loadgen/datasets.py), each
from a small fixture in its own format (tests/data/datasets/README.md): what reaches the server is read off a real
loopback server that records every request; a bad or missing file is one line; a plan names them as it names
ShareGPT, in load_options."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from wattbench.plan import PlanError, load_plan
from wattbench.settings import DEFAULT_PLAN
from wattbench_agent.loadgen import LoadSpec, run_load

from .conftest import load_in_process as run
from .recording_server import recording_server

D = Path(__file__).resolve().parents[1] / "data" / "datasets"


def measured(rec, n: int) -> list[dict]:
    """The last n completion requests' bodies (the run's own, after calibration and warm-ups)."""
    return [r["body"] for r in rec.completions()[-n:]]


def prompt(body: dict) -> str:
    return body["prompt"] if "prompt" in body else body["messages"][-1]["content"]


def test_custom_jsonl_sends_its_prompts_with_their_own_output_lengths(capsys):
    rows = [json.loads(x) for x in (D / "custom.jsonl").read_text().splitlines()]
    with recording_server() as (url, rec):
        rc, _, err = run(capsys, "--base-url", url, "--endpoint", "/v1/completions", "--dataset-name", "custom",
                         "--dataset-path", str(D / "custom.jsonl"), "--custom-output-len", "-1", "--num-prompts", "6",
                         "--max-concurrency", "2")  # fmt: skip
        assert rc == 0, err
        sent = measured(rec, 6)
        rc, _, err = run(capsys, "--base-url", url, "--endpoint", "/v1/completions", "--dataset-name", "custom",
                         "--dataset-path", str(D / "custom.jsonl"), "--num-prompts", "2")  # fmt: skip
        assert rc == 0, err
        default = measured(rec, 2)
    own = {r["prompt"]: r["output_tokens"] for r in rows}
    assert {b["prompt"] for b in sent} == set(own)  # every line once (6 prompts, 6 lines, shuffled by the seed)
    assert all(b["max_tokens"] == own[b["prompt"]] for b in sent)
    assert {b["max_tokens"] for b in default} == {256}  # vLLM's --custom-output-len default


def test_sonnet_prompts_share_the_prefix_lines_and_draw_the_rest(capsys):
    lines = (D / "sonnet.txt").read_text().splitlines(keepends=True)
    with recording_server() as (url, rec):
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "sonnet", "--dataset-path", str(D / "sonnet.txt"),
                         "--sonnet-input-len", "120", "--sonnet-prefix-len", "40", "--sonnet-output-len", "5",
                         "--num-prompts", "4")  # fmt: skip
    assert rc == 0, err
    texts = [prompt(b) for b in measured(rec, 4)]
    base = "Pick as many lines as you can from these poem lines:\n"
    assert all(t.startswith(base + lines[0] + lines[1]) for t in texts)  # the prefix: the file's first lines
    assert len(set(texts)) == 4 and all(b["max_tokens"] == 5 for b in measured(rec, 4))
    assert all(set(t[len(base) :].splitlines(keepends=True)) <= set(lines) for t in texts)


def test_burstgpt_uses_the_gpt4_rows_lengths(capsys):
    with (D / "burstgpt.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["Model"] == "GPT-4" and int(r["Response tokens"]) > 0]
    with recording_server() as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--dataset-name", "burstgpt", "--dataset-path",
                           str(D / "burstgpt.csv"), "--num-prompts", "8", "--json")  # fmt: skip
    assert rc == 0, err
    asked = {(int(r["Request tokens"]), int(r["Response tokens"])) for r in rows}
    # the recording server counts words (+1 a message): a made prompt of N tokens is N - 1 words here
    got = {(len(prompt(b).split()) + 1, b["max_tokens"]) for b in measured(rec, 8)}
    assert got <= asked and len(got) >= 4


def test_hf_reads_local_jsonl_and_parquet_in_the_datasets_own_columns(capsys):
    with recording_server() as (url, rec):
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "hf", "--dataset-path",
                         str(D / "hf" / "instructcoder"), "--hf-name", "likaixin/InstructCoder", "--num-prompts",
                         "3")  # fmt: skip
        assert rc == 0, err
        coder = measured(rec, 3)
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "hf", "--dataset-path", str(D / "hf" / "gsm8k"),
                         "--hf-name", "openai/gsm8k", "--hf-output-len", "7", "--num-prompts", "5")  # fmt: skip
        assert rc == 0, err
        gsm = measured(rec, 5)
    assert all(prompt(b).endswith("Just output the code, do not include any explanation.") for b in coder)
    assert {b["max_tokens"] for b in coder} == {200}  # InstructCoder's default output length, as vLLM's
    qs = {prompt(b) for b in gsm}
    assert len(qs) == 5 and all(q.startswith("If a train goes") for q in qs)  # the test split of main, not train
    assert {b["max_tokens"] for b in gsm} == {7}


def test_hf_without_local_files_or_with_images_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: nothing is fetched from the hub
    rc, _, err = run(capsys, "--url", "http://127.0.0.1:9", "--model", "m", "--dataset-name", "hf",
                     "--dataset-path", "likaixin/InstructCoder", "--num-prompts", "2")  # fmt: skip
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "no train files found locally" in err and "wattbench reads no hub at run time" in err
    rc, _, err = run(capsys, "--url", "http://127.0.0.1:9", "--model", "m", "--dataset-name", "hf",
                     "--dataset-path", "lmarena-ai/VisionArena-Chat", "--num-prompts", "2")  # fmt: skip
    assert rc == 2 and "is not supported: multimodal" in err


def test_spec_bench_and_speed_bench_send_their_first_turns(capsys):
    with recording_server() as (url, rec):
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "spec_bench", "--dataset-path",
                         str(D / "spec_bench_question.jsonl"), "--spec-bench-category", "writing", "--num-prompts",
                         "3", "--spec-bench-output-len", "4")  # fmt: skip
        assert rc == 0, err
        spec_bench = measured(rec, 3)
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "speed_bench", "--dataset-path",
                         str(D / "speed_bench"), "--num-prompts", "2")  # fmt: skip
        assert rc == 0, err
        speed = measured(rec, 2)
    rows = [json.loads(x) for x in (D / "spec_bench_question.jsonl").read_text().splitlines()]
    writing = {r["turns"][0] for r in rows if r["category"] == "writing"}
    assert {prompt(b) for b in spec_bench} <= writing and {b["max_tokens"] for b in spec_bench} == {4}
    assert {b["max_tokens"] for b in speed} == {4096}  # SPEED-Bench's default output length


def test_num_prompts_minus_one_sends_every_entry_once(capsys):
    """vLLM's docs run spec_bench and speed_bench with --num-prompts -1: every question of the file, once."""
    with recording_server() as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--dataset-name", "spec_bench", "--dataset-path",
                           str(D / "spec_bench_question.jsonl"), "--num-prompts", "-1", "--json")  # fmt: skip
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1])["sent"] == 6 and len({prompt(b) for b in measured(rec, 6)}) == 6


def test_prefix_repetition_shares_each_prefix_among_its_group(capsys):
    with recording_server() as (url, rec):
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len",
                         "40", "--prefix-repetition-suffix-len", "20", "--prefix-repetition-num-prefixes", "2",
                         "--prefix-repetition-output-len", "3", "--num-prompts", "6")  # fmt: skip
    assert rc == 0, err
    texts = [prompt(b).split() for b in measured(rec, 6)]
    prefixes = {" ".join(t[:40]) for t in texts}
    assert len(prefixes) == 2 and len({" ".join(t[40:]) for t in texts}) == 6  # two shared prefixes, unique suffixes


def test_timed_trace_replays_its_times_and_shares_its_blocks(capsys):
    rows = [json.loads(x) for x in (D / "timed_trace.jsonl").read_text().splitlines()]
    with recording_server() as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--dataset-name", "timed_trace", "--dataset-path",
                           str(D / "timed_trace.jsonl"), "--timed-trace-sec-multiplier", "0.001", "--json")  # fmt: skip
    assert rc == 0, err
    s = json.loads(out.strip().splitlines()[-1])
    assert s["shape"] == "trace" and s["sent"] == len(rows)
    got = rec.completions()[-len(rows) :]
    gaps = [b["t"] - a["t"] for a, b in zip(got, got[1:])]
    want = [(b["timestamp"] - a["timestamp"]) / 1e3 for a, b in zip(rows, rows[1:])]
    assert all(abs(g - w) < 0.04 for g, w in zip(gaps, want)), (gaps, want)
    texts = [prompt(r["body"]).split() for r in got]
    assert len({" ".join(t[:32]) for t in texts}) == 1  # every row names hash ids 0 and 1: the same first blocks
    assert [r["body"]["max_tokens"] for r in got] == [r["output_length"] for r in rows]


@pytest.mark.parametrize("name", ["multi_turn_sharegpt.json", "multi_turn_aiperf.jsonl"])
def test_a_conversation_resends_its_history_with_the_servers_replies(capsys, name):
    with recording_server() as (url, rec):
        rc, out, err = run(capsys, "--url", f"{url}/v1/chat/completions", "--dataset-name", "multi_turn",
                           "--dataset-path", str(D / name), "--num-prompts", "2", "--max-concurrency", "2",
                           "--output-len", "3", "--json")  # fmt: skip
    assert rc == 0, err
    s = json.loads(out.strip().splitlines()[-1])
    turns = rec.completions()[-6:]  # two conversations of three user turns
    assert s["sent"] == 6 and s["completed"] == 6
    by_len = sorted(turns, key=lambda r: len(r["body"]["messages"]))
    for r in by_len[2:]:  # later turns: user, assistant, user, ...; each assistant turn is what the server streamed
        msgs = r["body"]["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant"] * (len(msgs) // 2) + ["user"]
        for m in msgs[1::2]:
            assert m["content"].startswith("reply ") and len(m["content"].split()) == 3
    replied = {int(m["content"].split()[1]) for r in by_len for m in r["body"]["messages"][1::2]}
    numbers = {k for k, r in enumerate(rec.requests) if r in turns}
    assert replied <= numbers  # the replies resent are the ones this server gave
    if name.endswith("aiperf.jsonl"):  # AIPerf's per-turn delay (50 ms) between an answer and the next turn
        convo = [
            r for r in turns if r["body"]["messages"][0]["content"] == by_len[-1]["body"]["messages"][0]["content"]
        ]
        assert all(b["t"] - a["t"] >= 0.05 for a, b in zip(convo, convo[1:]))


def test_synthetic_turns_need_the_chat_api(capsys):
    rc, _, err = run(capsys, "--url", "http://127.0.0.1:9/v1/completions", "--model", "m", "--turns", "3",
                     "--num-prompts", "2")  # fmt: skip
    assert rc == 2 and "multi-turn conversations need the chat API" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--dataset-name", "sharegpt", "--dataset-path", "missing.json"],
        ["--dataset-path", "missing.json"],
        ["--dataset-name", "custom", "--dataset-path", "/nowhere/c.jsonl"],
        ["--dataset-name", "sonnet", "--dataset-path", "nope.txt"],
    ],
)
def test_a_missing_dataset_file_is_one_line(capsys, args):
    rc, _, err = run(capsys, "--url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "2", *args)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "no such file" in lines[0] and "Traceback" not in err, err


def test_a_bad_line_names_the_file_and_line(capsys, tmp_path):
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with recording_server() as (url, _):
        rc, _, err = run(capsys, "--url", url, "--dataset-name", "custom", "--dataset-path", str(bad), "--num-prompts",
                         "1")  # fmt: skip
    assert rc == 2 and err.strip().splitlines()[-1] == (
        f'wattbench load: {bad}:2: expected {{"prompt": "...", "output_tokens"?: N}}'
    )  # after the one line naming the model it asked the server for
    assert "Traceback" not in err


def test_datasets_that_are_not_text_are_refused_by_name(capsys):
    for name in ("random-mm", "custom_image", "custom_audio", "random-rerank"):
        rc, _, err = run(capsys, "--url", "http://127.0.0.1:9", "--model", "m", "--dataset-name", name)
        assert rc == 2 and f"--dataset-name {name} is not supported" in err


def test_no_oversample_sends_each_entry_once(capsys):
    with recording_server() as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--dataset-name", "custom", "--dataset-path", str(D / "custom.jsonl"),
                           "--num-prompts", "50", "--no-oversample", "--disable-shuffle", "--json")  # fmt: skip
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1])["sent"] == 6
    prompts = [json.loads(x)["prompt"] for x in (D / "custom.jsonl").read_text().splitlines()]
    assert sorted(prompt(b) for b in measured(rec, 6)) == sorted(prompts)  # each line once


def test_a_plan_names_a_dataset_as_it_names_sharegpt(tmp_path):
    text = DEFAULT_PLAN.read_text()
    old = "    load_options: {ramp_s: 2}"
    assert old in text
    path = tmp_path / "plan.yaml"
    new = (
        f"    load_options: {{ramp_s: 2, dataset_name: custom, dataset_path: {D / 'custom.jsonl'}, "
        "dataset_options: {disable_shuffle: true}}"
    )
    path.write_text(text.replace(old, new, 1))
    plan, _ = load_plan(path)
    spec = plan.workloads[0].load_specs()[0]
    assert spec["dataset_name"] == "custom" and spec["dataset_options"] == {"disable_shuffle": True}
    with recording_server() as (url, rec):  # the spec a plan makes runs as `wattbench load`'s does
        res = run_load(LoadSpec.from_dict({**spec, "url": url, "model": "m", "duration_s": 0, "max_requests": 3,
                                           "warmup_s": 0, "ramp_s": 0, "concurrency": 1}))  # fmt: skip
    first = json.loads((D / "custom.jsonl").read_text().splitlines()[0])
    assert res.summary["completed"] == 3 and rec.completions()[-3]["body"]["messages"][0]["content"] == first["prompt"]
    path.write_text(text.replace(old, "    load_options: {dataset_name: sonnett}", 1))
    with pytest.raises(PlanError, match="unknown dataset 'sonnett'"):
        load_plan(path)
