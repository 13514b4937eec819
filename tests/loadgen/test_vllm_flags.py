"""Every flag of vLLM 0.25's `vllm bench serve` is taken by `wattbench load` with vLLM's meaning or refused by name
in one line (tests/data/vllm/bench_serve_flags.txt, made from vLLM's own argparse definitions). What the taken
flags send is read off a real loopback server that records every request (recording_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.cli import build_parser
from wattbench_agent.loadgen import shapes, vllm_flags

from .conftest import load_in_process as run
from .recording_server import recording_server

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"
REF = Path("/work/ref/vllm-0.25-benchmarks")  # vLLM 0.25's vllm/benchmarks/, where it is on this machine


def vllm_flags_list() -> list[str]:
    return [ln.strip() for ln in (DATA / "bench_serve_flags.txt").read_text().splitlines() if ln.startswith("--")]


def load_parser():
    sub = build_parser("load")._subparsers._group_actions[0]
    return sub.choices["load"]


def test_the_fixture_lists_vllms_flags():
    flags = vllm_flags_list()
    assert len(flags) == len(set(flags)) == 104
    assert {"--temperature", "--ramp-up-strategy", "--no-self-timed", "--random-mm-bucket-config"} <= set(flags)
    if REF.exists():  # made again from vLLM's sources, it is the same list
        import subprocess
        import sys

        made = subprocess.run(
            [sys.executable, str(DATA / "make_bench_serve_flags.py"), str(REF)], capture_output=True, text=True
        ).stdout
        assert made == (DATA / "bench_serve_flags.txt").read_text()


def test_every_vllm_flag_is_taken_or_refused_by_name(capsys):
    parser = load_parser()
    known = parser._option_string_actions
    missing = [f for f in vllm_flags_list() if f not in known]
    assert not missing, f"wattbench load does not know {missing}"
    refused = [f for f in vllm_flags_list() if isinstance(known[f], vllm_flags._Refused)]
    assert set(refused) == set(vllm_flags.REFUSED)
    for flag in refused:  # each refused in one line naming it and saying why, before anything is sent
        rc, _, err = run(capsys, "--url", "http://127.0.0.1:9", "--model", "m", flag, "x", "--concurrency", "1")
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"wattbench load: {flag} is not supported: "), err
    for flag in set(vllm_flags_list()) - set(refused):  # the others are wattbench's flags with a meaning
        assert not isinstance(known[flag], vllm_flags._Refused) and known[flag].help != "==SUPPRESS==", flag


def test_an_unknown_flag_names_the_subcommand(capsys):
    rc, _, err = run(capsys, "--url", "http://127.0.0.1:9", "--bogus-flag", "3", "--concurrency", "1")
    assert rc == 2
    assert (
        err.strip() == "wattbench load: unrecognized arguments: --bogus-flag 3 (wattbench load --help lists its flags)"
    )


def test_sampling_parameters_model_names_and_request_ids_reach_the_server_as_vllm_sends_them(capsys):
    with recording_server() as (url, rec):
        rc, _, err = run(
            capsys, "--base-url", url, "--endpoint", "/v1/completions", "--model", "org/model-id",
            "--served-model-name", "served", "--temperature", "0", "--top-p", "0.9", "--top-k", "20",
            "--min-p", "0.05", "--frequency-penalty", "0.1", "--presence-penalty", "0.2", "--repetition-penalty", "1.1",
            "--logprobs", "2", "--extra-body", '{"top_k": 5}', "--request-id-prefix", "bench-x-",
            "--header", "a=1", "b: 2", "--num-prompts", "3", "--max-concurrency", "1", "--input-len", "8",
            "--output-len", "3", "--disable-tqdm", "--ready-check-timeout-sec", "5",
        )  # fmt: skip
    assert rc == 0, err
    sent = rec.completions()[-3:]
    for r in sent:
        b = r["body"]
        assert b["model"] == "served" and b["max_tokens"] == 3 and b["stream"] is True
        assert (b["temperature"], b["top_p"], b["min_p"], b["repetition_penalty"]) == (0.0, 0.9, 0.05, 1.1)
        assert (b["frequency_penalty"], b["presence_penalty"], b["logprobs"]) == (0.1, 0.2, 2)
        assert b["top_k"] == 5  # --extra-body wins over the sampling flags, as vLLM's {**sampling, **extra_body}
        assert r["headers"]["a"] == "1" and r["headers"]["b"] == "2"
    assert sorted(r["headers"]["x-request-id"] for r in sent) == ["bench-x-0", "bench-x-1", "bench-x-2"]
    assert "Waiting" not in err and "%|" not in err  # no progress display (--disable-tqdm)


def test_logprobs_on_the_chat_api_ask_for_top_logprobs(capsys):
    with recording_server() as (url, rec):
        rc, _, err = run(capsys, "--url", f"{url}/v1/chat/completions", "--logprobs", "3", "--num-prompts", "1",
                         "--output-len", "2")  # fmt: skip
    assert rc == 0, err
    b = rec.completions()[-1]["body"]
    assert b["logprobs"] is True and b["top_logprobs"] == 3 and b["model"] == "rec-model"


def test_warmups_go_before_the_run_and_are_not_measured(capsys):
    with recording_server() as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--num-warmups", "3", "--num-prompts", "4", "--max-concurrency", "2",
                           "--output-len", "2", "--json")  # fmt: skip
    assert rc == 0, err
    s = json.loads(out.strip().splitlines()[-1])
    assert s["sent"] == 4 and s["warmup_requests"] == {"sent": 3, "failed": 0, "s": s["warmup_requests"]["s"]}
    bodies = [json.dumps(r["body"]["messages"]) for r in rec.completions()]
    first_measured = bodies[-4:]
    warm = bodies[-7:-4]
    assert len(set(warm)) == 1 and warm[0] in first_measured  # vLLM's warm-up: the first request, num_warmups times


def test_the_ready_check_waits_for_the_server_and_gives_up_in_one_line(capsys):
    with recording_server(fail_first=1) as (url, rec):  # the first test request fails (503), the next one at 5 s works
        rc, out, err = run(capsys, "--url", url, "--ready-check-timeout-sec", "20", "--num-prompts", "2",
                           "--output-len", "2", "--json")  # fmt: skip
    assert rc == 0, err
    s = json.loads(out.strip().splitlines()[-1])
    assert s["ready_check"]["tries"] == 2 and 4.5 < s["ready_check"]["waited_s"] < 15 and s["completed"] == 2
    with recording_server(fail_first=1000) as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--model", "m", "--ready-check-timeout-sec", "1", "--num-prompts", "2")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("wattbench load: the server did not answer a test request within --ready-check-timeout-sec 1")
    assert "http_5xx" in err and len(rec.requests) < 4  # nothing sent after


def test_append_result_adds_a_json_line_each_run(capsys, tmp_path):
    with recording_server() as (url, _):
        for _ in range(2):
            rc, _, err = run(capsys, "--url", url, "--num-prompts", "2", "--output-len", "2", "--append-result",
                             "--result-dir", str(tmp_path), "--result-filename", "r.json")  # fmt: skip
            assert rc == 0, err
    lines = (tmp_path / "r.json").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["completed"] == 2 for x in lines)


def test_plot_timeline_draws_every_request(capsys, tmp_path):
    with recording_server() as (url, _):
        rc, _, err = run(capsys, "--url", url, "--num-prompts", "5", "--max-concurrency", "2", "--output-len", "4",
                         "--plot-timeline", "--save-result", "--result-dir", str(tmp_path), "--result-filename",
                         "r.json")  # fmt: skip
    assert rc == 0, err
    page = (tmp_path / "r.timeline.html").read_text()
    assert page.count("request 0000") >= 5 and "<svg" in page and "TTFT" in page
    assert "timeline written to" in err


def test_ramp_up_is_vllms_ramp(capsys, tmp_path):
    """vLLM's linear ramp over --num-prompts: request i at rate S + (E - S) i / (N - 1); the gaps of the first and
    last tenth of 2,000 requests are those of their rates; the result file names the ramp as vLLM's does."""
    p = {"shape": "ramp", "ramp_up_strategy": "linear", "ramp_up_start_rps": 2.0, "ramp_up_end_rps": 20.0}
    frac = np.arange(1, 2000) / 1999
    for strategy, rates in (("linear", 2 + 18 * frac), ("exponential", 2 * 10**frac)):
        offs = shapes.get("ramp").offsets({**p, "ramp_up_strategy": strategy, "max_requests": 2000}, 1e9, seed=3)
        gaps = np.diff(offs)
        assert len(offs) == 2000 and offs[0] == 0
        for part in (slice(0, 200), slice(-200, None)):  # the mean gap is the mean of 1 / the rate at each request
            assert np.mean(gaps[part]) == pytest.approx(np.mean(1 / rates[part]), rel=0.15), (strategy, part)
    timed = shapes.get("ramp").offsets(p, 10.0, seed=3)  # over a duration: the rate moves with time, 110 expected
    assert 80 < len(timed) < 140 and np.sum(timed < 5) < np.sum(timed >= 5)
    with recording_server() as (url, _):
        rc, out, err = run(capsys, "--url", url, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "20",
                           "--ramp-up-end-rps", "60", "--num-prompts", "12", "--output-len", "2", "--save-result",
                           "--result-dir", str(tmp_path), "--label", "ramp", "--json")  # fmt: skip
        bad_rc, _, bad = run(capsys, "--url", url, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
                             "--ramp-up-end-rps", "5", "--request-rate", "3")  # fmt: skip
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1])["shape"] == "ramp"
    (f,) = tmp_path.glob("*.json")
    assert f.name.startswith("ramp-ramp-up-linear-20qps-60qps-rec-model-")
    r = json.loads(f.read_text())
    assert (r["ramp_up_strategy"], r["ramp_up_start_rps"], r["ramp_up_end_rps"], r["completed"]) == (
        "linear",
        20.0,
        60.0,
        12,
    )
    assert bad_rc == 2 and "with --ramp-up-strategy give no --request-rate" in bad


def test_flags_wattbench_needs_nothing_for_are_accepted(capsys):
    with recording_server() as (url, _):
        rc, out, err = run(capsys, "--url", url, "--num-prompts", "2", "--output-len", "2", "--skip-tokenizer-init",
                           "--skip-chat-template", "--no-stream", "--trust-remote-code", "--tokenizer-mode", "hf",
                           "--random-batch-size", "1", "--insecure", "--seed", "4", "--json")  # fmt: skip
        bad_rc, _, bad = run(capsys, "--url", url, "--tokenizer-mode", "mistral", "--num-prompts", "1")
        batch_rc, _, batch = run(capsys, "--url", url, "--random-batch-size", "4", "--num-prompts", "1")
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1])["completed"] == 2
    assert bad_rc == 2 and "--tokenizer-mode is not supported: mistral" in bad
    assert batch_rc == 2 and "--random-batch-size is not supported" in batch


def test_insecure_takes_a_self_signed_certificate(capsys, tmp_path):
    """vLLM's --insecure: no TLS verification. Without it a server whose certificate no authority signed is refused."""
    with recording_server(tls_folder=tmp_path) as (url, rec):
        rc, out, err = run(capsys, "--url", url, "--model", "m", "--insecure", "--num-prompts", "2", "--output-len",
                           "2", "--json")  # fmt: skip
        assert rc == 0, err
        assert json.loads(out.strip().splitlines()[-1])["completed"] == 2
        rc, out, err = run(capsys, "--url", url, "--model", "m", "--num-prompts", "2", "--output-len", "2", "--json")
    assert rc == 1 and "CERTIFICATE_VERIFY_FAILED" in err + out
