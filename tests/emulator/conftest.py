"""Fixtures: a real emulator server process on a free loopback port."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start_emulator(*args: str, timeout: float = 20.0, preexec_fn=None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "pipelines.cli", "emulate", "--host", "127.0.0.1", "--port", "0", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=preexec_fn,
    )
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise RuntimeError("emulator did not start: " + "".join(lines))


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def vllm_server():
    proc, url = start_emulator(
        "--profile", "vllm-like", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--precision", "bf16"
    )
    yield url
    stop(proc)


@pytest.fixture(scope="module")
def trt_server():
    proc, url = start_emulator(
        "--profile",
        "trtllm-like",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h200",
        "--tp",
        "1",
        "--precision",
        "fp8",
        "--config",
        "max_seq_len=64",
        "--config",
        "max_input_len=48",
        "--config",
        "max_batch_size=8",
    )
    yield url
    stop(proc)
