"""`vllm bench serve` command lines, as vLLM documents them, run through `wattbench load` against the emulator
(run: python -m benchmarks.vllm_cli_compat; also `make bench`). Writes results/vllm_cli_compat.json and .md.

One line per vLLM text dataset (and a few of its other flags), taken from vLLM's docs (docs/benchmarking/cli.md:
the online examples, the SPEED-Bench, prefix repetition and timed-trace sections) where they have a `vllm bench serve`
line for it, else composed from vLLM 0.25's own flags and marked so (random, sonnet, burstgpt, ramp-up). Each line
runs unchanged but for the program name (`vllm bench serve` -> `wattbench load`) and its placeholder paths, which
name the small fixtures of tests/data/datasets laid out where the line looks (`<your data path>/...`, `./...`, a hub
name resolved in a local Hugging Face cache made for the run: nothing is downloaded). `--save-result` (vLLM's own
flag) is appended where the line has none, so that every line leaves a result file to check.

For each line: an emulator (`wattbench emulate`, a vLLM-like 8B on one H100) listening where the line points
(127.0.0.1:8000 by default; --port when given) and answering to the line's --model; the exit status; every key vLLM
0.25's result JSON has for a text run (vllm/benchmarks/serve.py: its setup keys, benchmark()'s result, the
statistics of --percentile-metrics at --metric-percentiles; the per-request lists with --save-detailed); the requests
completed against what the line asks for; how prompt lengths were met. A line of flags wattbench refuses must end in
one line naming them, exit 2. Exit 1 when any line misses.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "datasets"
DOCS = "vLLM docs/benchmarking/cli.md"
COMPOSED = "composed from vLLM 0.25's flags (its docs have no `bench serve` line for it)"

# (dataset, source, the command line, requests it must complete (None: any), whether it must be refused)
LINES = [
    ("sharegpt", DOCS + ", Online Benchmark",
     "vllm bench serve --backend vllm --model NousResearch/Hermes-3-Llama-3.1-8B --endpoint /v1/completions "
     "--dataset-name sharegpt --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json "
     "--num-prompts 10", 10, False),
    ("sharegpt", DOCS + ", Running With Sampling Parameters",
     "vllm bench serve --backend vllm --model NousResearch/Hermes-3-Llama-3.1-8B --endpoint /v1/completions "
     "--dataset-name sharegpt --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json "
     "--top-k 10 --top-p 0.9 --temperature 0.5 --num-prompts 10", 10, False),
    ("sharegpt", DOCS + ", Results Visualization (--plot-dataset-stats is refused)",
     "vllm bench serve --backend vllm --model meta-llama/Llama-3.1-8B-Instruct --endpoint /v1/completions "
     "--dataset-name sharegpt --dataset-path <your data path>/ShareGPT_V3_unfiltered_cleaned_split.json "
     "--num-prompts 100 --plot-timeline --timeline-itl-thresholds 2,5 --plot-dataset-stats --save-result",
     None, True),
    ("custom", DOCS + ", Custom Dataset",
     "vllm bench serve --port 9001 --save-result --save-detailed --backend vllm "
     "--model meta-llama/Llama-3.1-8B-Instruct --endpoint /v1/completions --dataset-name custom "
     "--dataset-path <path-to-your-data-jsonl> --skip-chat-template --num-prompts 80 --max-concurrency 1 "
     '--temperature=0.3 --top-p=0.75 --result-dir "./log/"', 80, False),
    ("hf", DOCS + ", InstructCoder Benchmark with Speculative Decoding",
     "vllm bench serve --model meta-llama/Meta-Llama-3-8B-Instruct --dataset-name hf "
     "--dataset-path likaixin/InstructCoder --num-prompts 2048", 2048, False),
    ("hf", DOCS + ", Other HuggingFaceDataset Examples (openai/gsm8k)",
     "vllm bench serve --model NousResearch/Hermes-3-Llama-3.1-8B --dataset-name hf --dataset-path openai/gsm8k "
     "--num-prompts 80", 80, False),
    ("spec_bench", DOCS + ", Spec Bench Benchmark",
     'vllm bench serve --model meta-llama/Meta-Llama-3-8B-Instruct --dataset-name spec_bench '
     '--dataset-path "<YOUR_DOWNLOADED_PATH>/data/spec_bench/question.jsonl" --num-prompts -1', 6, False),
    ("speed_bench", DOCS + ", SPEED-Bench Benchmark",
     'vllm bench serve --model meta-llama/Llama-3.3-70B-Instruct --dataset-name speed_bench '
     '--dataset-path "<YOUR_DOWNLOADED_PATH>/data/speed_bench" --num-prompts -1', 6, False),
    ("prefix_repetition", DOCS + ", Prefix Repetition Dataset",
     "vllm bench serve --backend openai --model meta-llama/Llama-2-7b-chat-hf --dataset-name prefix_repetition "
     "--num-prompts 100 --prefix-repetition-prefix-len 512 --prefix-repetition-suffix-len 128 "
     "--prefix-repetition-num-prefixes 5 --prefix-repetition-output-len 128", 100, False),
    ("timed_trace", DOCS + ", Replay Timed Traces",
     "vllm bench serve --model Qwen/Qwen3.5-2B --dataset-name=timed_trace --num-prompts 100 --host 127.0.0.1 "
     "--port 8000 --dataset-path ./conversation_trace.jsonl --ignore-eos --self-timed "
     "--timed-trace-chunk-hash-size 512 --timed-trace-sec-multiplier 0.001", 8, False),
    ("random", COMPOSED,
     "vllm bench serve --backend vllm --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random "
     "--random-input-len 1024 --random-output-len 128 --random-range-ratio 0.2 --request-rate 8 "
     "--max-concurrency 32 --num-prompts 64 --ignore-eos --num-warmups 2 --seed 42", 64, False),
    ("sonnet", COMPOSED + "; its throughput example's dataset",
     "vllm bench serve --backend openai-chat --endpoint /v1/chat/completions "
     "--model NousResearch/Hermes-3-Llama-3.1-8B --dataset-name sonnet --dataset-path vllm/benchmarks/sonnet.txt "
     "--num-prompts 10", 10, False),
    ("burstgpt", COMPOSED + "; the file its docs name",
     "vllm bench serve --model NousResearch/Hermes-3-Llama-3.1-8B --dataset-name burstgpt "
     "--dataset-path BurstGPT_without_fails_2.csv --request-rate 10 --num-prompts 20", 20, False),
    ("random (ramp-up)", COMPOSED + "; Running With Ramp-Up Request Rate",
     "vllm bench serve --model NousResearch/Hermes-3-Llama-3.1-8B --dataset-name random --random-input-len 256 "
     "--random-output-len 32 --ramp-up-strategy linear --ramp-up-start-rps 4 --ramp-up-end-rps 40 "
     "--num-prompts 60", 60, False),
]  # fmt: skip

# vLLM 0.25's result JSON for a text run (serve.py: result_json's setup keys + benchmark()'s result)
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
}  # fmt: skip
DETAILED = {"input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"}
RAMP = {"ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"}


def _layout(tmp: Path) -> dict[str, str]:
    """The fixtures where the lines look for them; the placeholders' values."""
    (tmp / "data" / "spec_bench").mkdir(parents=True)
    shutil.copy(DATA / "sharegpt.json", tmp / "ShareGPT_V3_unfiltered_cleaned_split.json")
    shutil.copy(DATA / "custom.jsonl", tmp / "data.jsonl")
    shutil.copy(DATA / "spec_bench_question.jsonl", tmp / "data" / "spec_bench" / "question.jsonl")
    shutil.copytree(DATA / "speed_bench", tmp / "data" / "speed_bench")
    shutil.copy(DATA / "timed_trace.jsonl", tmp / "conversation_trace.jsonl")
    shutil.copy(DATA / "burstgpt.csv", tmp / "BurstGPT_without_fails_2.csv")
    (tmp / "vllm" / "benchmarks").mkdir(parents=True)
    shutil.copy(DATA / "sonnet.txt", tmp / "vllm" / "benchmarks" / "sonnet.txt")
    hub = tmp / "hf" / "hub"  # a local Hugging Face hub cache, as `huggingface-cli download` leaves it
    coder = hub / "datasets--likaixin--InstructCoder" / "snapshots" / "0"
    coder.mkdir(parents=True)
    shutil.copy(DATA / "hf" / "instructcoder" / "train.jsonl", coder / "train.jsonl")
    shutil.copytree(DATA / "hf" / "gsm8k", hub / "datasets--openai--gsm8k" / "snapshots" / "0")
    return {
        "<your data path>": str(tmp),
        "<path-to-your-data-jsonl>": str(tmp / "data.jsonl"),
        "<YOUR_DOWNLOADED_PATH>": str(tmp),
    }


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _emulator(port: int, model: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "emulate", "--host", "127.0.0.1", "--port", str(port),
         "--config", f"served_model_name={model}"],
        cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    for line in proc.stderr:
        if re.search(r"listening on http://127\.0\.0\.1:\d+", line):
            return proc
    proc.kill()
    raise RuntimeError(f"the emulator did not start on port {port}")


def _flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _check(args: list[str], r: dict, want: int | None) -> list[str]:
    keys = set(VLLM_KEYS)
    metrics = (_flag(args, "--percentile-metrics") or "ttft,tpot,itl").split(",")
    pcts = (_flag(args, "--metric-percentiles") or "99").split(",")
    for m in metrics:
        keys |= {f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"} | {f"p{p}_{m}_ms" for p in pcts}
    if "--save-detailed" in args:
        keys |= DETAILED
    if "--ramp-up-strategy" in args:
        keys |= RAMP
    misses = [f"keys missing: {sorted(keys - set(r))}"] if keys - set(r) else []
    if want is not None and r.get("completed") != want:
        misses.append(f"completed {r.get('completed')} of {want}")
    if r.get("failed"):
        misses.append(f"{r['failed']} failed")
    return misses


def _result_path(args: list[str], cwd: Path) -> Path:
    d = _flag(args, "--result-dir")
    return (cwd / (d or ".") / (_flag(args, "--result-filename") or "")).resolve()


def run_line(dataset: str, source: str, line: str, want: int | None, refused: bool, tmp: Path, subs: dict) -> dict:
    for k, v in subs.items():
        line = line.replace(k, v)
    args = shlex.split(line)[3:]  # `vllm bench serve` -> `wattbench load`
    if not refused and "--save-result" not in args:
        args += ["--save-result"]  # vLLM's own flag: a result file to check
    if not refused:
        args += ["--result-filename", f"{len(list(tmp.glob('*.out')))}-{dataset.split()[0]}.json"]
    port = int(_flag(args, "--port") or 8000)
    row = {"dataset": dataset, "source": source, "line": "vllm bench serve " + shlex.join(args), "port": port}
    if not _free(port):
        return {**row, "ok": False, "misses": [f"port {port} is in use: the line names it; free it and run again"]}
    emu = _emulator(port, _flag(args, "--model") or "llama-3.1-8b")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp / "hf" / "hub"), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'agent'}"}
    began = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "pipelines.cli", "load", *args], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    finally:
        emu.terminate()
        emu.wait(timeout=10)
    (tmp / f"{len(list(tmp.glob('*.out')))}.out").write_text(p.stderr)
    row.update(seconds=round(time.monotonic() - began, 1), exit=p.returncode)
    if refused:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("wattbench load:")]
        ok = p.returncode == 2 and len(lines) == 1 and "is not supported" in lines[0]
        return {
            **row,
            "ok": ok,
            "said": lines[-1] if lines else p.stderr[-300:],
            "misses": [] if ok else ["not refused"],
        }
    path = _result_path(args, tmp)
    if p.returncode != 0 or not path.exists():
        return {**row, "ok": False, "misses": [f"exit {p.returncode}: {p.stderr.strip()[-400:]}"]}
    r = json.loads(path.read_text().splitlines()[-1])
    misses = _check(args, r, want)
    pl = (r.get("wattbench") or {}).get("prompt_length") or {}
    row.update(completed=r.get("completed"), duration_s=r.get("duration"), output_tok_s=r.get("output_throughput"))
    row.update(prompt_length=pl.get("method"), prompt_error_pct=pl.get("error_pct"), misses=misses, ok=not misses)
    return row


def _md(rows: list[dict]) -> str:
    out = [
        "# `vllm bench serve` lines through `wattbench load` (benchmarks/vllm_cli_compat.py)",
        "",
        "| dataset | source | completed | duration s | output tok/s | prompt lengths | exit | ok | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        pl = r.get("prompt_length") or "-"
        if r.get("prompt_error_pct") is not None:
            pl += f" ({r['prompt_error_pct']:+.2f}%)"
        dur = f"{r['duration_s']:.2f}" if r.get("duration_s") else "-"
        tok = f"{r['output_tok_s']:.0f}" if r.get("output_tok_s") else "-"
        ok = "yes" if r["ok"] else "NO: " + "; ".join(r.get("misses") or [])
        out.append(f"| {r['dataset']} | {r['source']} | {r.get('completed', '-')} | {dur} | {tok} | {pl} | "
                   f"{r.get('exit', '-')} | {ok} | {r.get('seconds', '-')} |")  # fmt: skip
    out += ["", "Lines as run:", ""] + [f"- `{r['line']}`" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results"), help="folder for vllm_cli_compat.json and .md")
    ap.add_argument("--only", help="run the lines of this dataset only")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="wattbench-vllm-cli-") as t:
        tmp = Path(t)
        subs = _layout(tmp)
        for dataset, source, line, want, refused in LINES:
            if a.only and not dataset.startswith(a.only):
                continue
            row = run_line(dataset, source, line, want, refused, tmp, subs)
            rows.append(row)
            print(f"{'ok  ' if row['ok'] else 'MISS'} {dataset:<18} {row.get('seconds', '-')} s  "
                  f"{'; '.join(row.get('misses') or []) or row.get('said') or ''}", flush=True)  # fmt: skip
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in rows:  # the run's temporary folder is no one's path
        r["line"] = r["line"].replace(str(tmp), "$FIXTURES")
    (out / "vllm_cli_compat.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "vllm_cli_compat.md").write_text(_md(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
