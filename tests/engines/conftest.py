"""Fixtures for the engine tests: the fake engine executables of tests/fake_engines first on PATH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

FAKE_DIR = Path(__file__).resolve().parents[1] / "fake_engines"
H100 = {"FAKE_GPU_NAME": "NVIDIA H100 80GB HBM3", "FAKE_GPU_CC": "9.0"}
A100 = {"FAKE_GPU_NAME": "NVIDIA A100-SXM4-80GB", "FAKE_GPU_CC": "8.0"}


class FakeEngines:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch):
        self.tmp = tmp
        self.mp = monkeypatch
        self.argv_log = tmp / "argv.jsonl"
        self.cache = tmp / "engine_cache"

    def set(self, **env: str | None) -> None:
        for key, value in env.items():
            if value is None:
                self.mp.delenv(key, raising=False)
            else:
                self.mp.setenv(key, str(value))

    def gpu(self, spec: dict[str, str]) -> None:
        self.set(**spec)

    def records(self, prog: str | None = None) -> list[dict]:
        """Every start of a fake engine: prog, argv, pid and the GPU environment it saw."""
        if not self.argv_log.exists():
            return []
        rows = [json.loads(line) for line in self.argv_log.read_text().splitlines() if line.strip()]
        return [r for r in rows if prog is None or r["prog"] == prog]

    def calls(self, prog: str | None = None) -> list[list[str]]:
        return [r["argv"] for r in self.records(prog)]


@pytest.fixture
def fake_engines(tmp_path, monkeypatch) -> FakeEngines:
    """PATH: a python3 that is this interpreter, then tests/fake_engines; PYTHONPATH: the fake sglang package;
    a fresh engine cache; an H100 from the fake nvidia-smi; no scenario set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), str(FAKE_DIR), os.environ.get("PATH", "")]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_DIR), os.environ.get("PYTHONPATH")])))
    fe = FakeEngines(tmp_path, monkeypatch)
    for key in list(os.environ):
        if key.startswith("FAKE_") or key.startswith("WATTBENCH_TRTLLM_"):
            monkeypatch.delenv(key)
    fe.set(
        FAKE_ENGINE_ARGV_LOG=str(fe.argv_log),
        WATTBENCH_ENGINE_CACHE=str(fe.cache),
        WATTBENCH_SGLANG_PYTHON=sys.executable,
        TRTLLM_EXAMPLES_DIR=str(tmp_path / "no-examples"),
        FAKE_BUILD_S="0.2",
        **H100,
    )
    return fe
