"""TensorRT-LLM builds through the fake convert/quantize/trtllm-build: the cache, the hardware lock, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engines.conftest import A100
from wattbench_agent.deploy.local import DeployError
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.build_cache import (
    BuildCache,
    GpuInfo,
    HardwareMismatch,
    check_hardware_lock,
    query_gpu,
    tree_digest,
)
from wattbench_agent.engines.trtllm import TrtllmAdapter

H100_GPU = GpuInfo("NVIDIA H100 80GB HBM3", "9.0", "550.54.15")
A100_GPU = GpuInfo("NVIDIA A100-SXM4-80GB", "8.0", "550.54.15")


def cfg(precision: str = "fp8", tp: int = 2, **options) -> EngineConfig:
    opts = {**dict(max_batch_size=64, max_input_len=1024, max_seq_len=2048, max_num_tokens=4096), **options}
    return EngineConfig(
        engine="trtllm",
        model="meta-llama/Llama-3.1-8B-Instruct",
        config_name="trt-fp8",
        precision=precision,
        tp=tp,
        options=opts,
    )


def test_query_gpu_reads_nvidia_smi(fake_engines):
    gpu = query_gpu()
    assert gpu == GpuInfo("NVIDIA H100 80GB HBM3", "9.0", "550.54.15", 1) and gpu.sm == "sm90"
    fake_engines.set(FAKE_NO_GPU="1")
    assert query_gpu() is None
    assert query_gpu(nvidia_smi="/nonexistent/nvidia-smi") is None


def test_hardware_lock_message():
    lock = H100_GPU.lock(engine_version="0.18.2", tp=2)
    check_hardware_lock(lock, GpuInfo("NVIDIA H100 PCIe", "9.0"))  # same architecture: fine
    check_hardware_lock(lock, None)  # nothing to compare with
    with pytest.raises(HardwareMismatch) as err:
        check_hardware_lock(lock, A100_GPU)
    assert str(err.value) == (
        "engine built for NVIDIA H100 80GB HBM3 (sm90) cannot run on NVIDIA A100-SXM4-80GB (sm80); rebuild for this GPU"
    )
    with pytest.raises(HardwareMismatch, match="TensorRT-LLM 0.18.2 cannot be loaded by TensorRT-LLM 0.19.0"):
        check_hardware_lock(lock, H100_GPU, engine_version="0.19.0")


def test_build_then_cached_never_rebuilds(fake_engines, tmp_path):
    adapter = TrtllmAdapter()
    first = adapter.build(cfg(), tmp_path / "work")
    assert first.status == "built", first.error_text
    assert first.engine_version == "0.18.2"  # from `trtllm-build --help`'s version line
    assert first.hardware_lock == {
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "compute_capability": "9.0",
        "sm": "sm90",
        "driver": "550.54.15",
        "engine_version": "0.18.2",
        "tp": 2,
    }
    engine = Path(first.artifact_path)
    assert (engine / "config.json").is_file() and sorted(p.name for p in engine.glob("*.engine")) == [
        "rank0.engine",
        "rank1.engine",
    ]
    assert (first.artifact_sha256, first.artifact_bytes) == tree_digest(engine)
    assert first.build_s >= 0.2
    manifest = json.loads((engine.parent / "manifest.json").read_text())
    assert manifest["build_id"] == cfg().build_id() and manifest["hardware_lock"] == first.hardware_lock
    assert list((tmp_path / "work").glob("*.build.log"))
    # the documented flags reached the fakes
    (quant,) = fake_engines.calls("quantize.py")
    assert quant[quant.index("--qformat") + 1] == "fp8" and quant[quant.index("--tp_size") + 1] == "2"
    builds = [c for c in fake_engines.calls("trtllm-build") if "--help" not in c]
    assert len(builds) == 1 and builds[0][builds[0].index("--gemm_plugin") + 1] == "fp8"

    second = TrtllmAdapter().build(cfg(), tmp_path / "work")
    assert second.status == "cached"
    assert (second.build_s, second.artifact_sha256, second.artifact_path) == (
        first.build_s,
        first.artifact_sha256,
        first.artifact_path,
    )
    assert len([c for c in fake_engines.calls("trtllm-build") if "--help" not in c]) == 1  # not rebuilt

    changed = TrtllmAdapter().build(cfg(max_batch_size=128), tmp_path / "work")
    assert changed.status == "built" and changed.artifact_path != first.artifact_path


def test_other_gpu_builds_its_own_engine_and_an_h100_engine_is_refused_on_a100(fake_engines, tmp_path):
    h100 = TrtllmAdapter().build(cfg(), None)
    assert h100.status == "built"
    fake_engines.gpu(A100)
    # serving: the cached H100 engine is refused before any process starts
    with pytest.raises(DeployError) as err:
        TrtllmAdapter().serve_command(cfg(), "127.0.0.1", 8000)
    assert err.value.kind == "hardware_mismatch"
    assert (
        "engine built for NVIDIA H100 80GB HBM3 (sm90) cannot run on NVIDIA A100-SXM4-80GB (sm80); rebuild for this GPU"
    ) in str(err.value)
    with pytest.raises(DeployError) as err:  # the same with the engine folder given explicitly
        TrtllmAdapter().serve_command(cfg(), "127.0.0.1", 8000, h100.artifact_path)
    assert err.value.kind == "hardware_mismatch"
    prebuilt = TrtllmAdapter().build(cfg(engine_dir=h100.artifact_path), None)
    assert prebuilt.status == "failed" and prebuilt.error_kind == "hardware_mismatch"
    # building on the A100 makes an A100 engine under another key, which then serves
    a100 = TrtllmAdapter().build(cfg(), None)
    assert a100.status == "built" and a100.hardware_lock["sm"] == "sm80"
    assert a100.artifact_path != h100.artifact_path
    cmd = TrtllmAdapter().serve_command(cfg(), "127.0.0.1", 8000)
    assert cmd[:2] == ["trtllm-serve", a100.artifact_path]


def test_build_failure_is_a_row_and_the_plan_goes_on(fake_engines, tmp_path):
    fake_engines.set(FAKE_ENGINE_FAIL_BUILD="1")
    failed = TrtllmAdapter().build(cfg(), tmp_path)
    assert failed.status == "failed" and failed.error_kind == "build_failed"
    assert "Engine building failed" in failed.error_text and "trtllm-build exited with 1" in failed.error_text
    assert BuildCache().entries() == []  # nothing half-built left in the cache
    fake_engines.set(FAKE_ENGINE_FAIL_BUILD=None)
    assert TrtllmAdapter().build(cfg(), tmp_path).status == "built"
    fake_engines.set(FAKE_ENGINE_FAIL_CONVERT="1")
    conv = TrtllmAdapter().build(cfg("fp16"), tmp_path)
    assert conv.status == "failed" and "convert_checkpoint.py exited with 1" in conv.error_text


def test_no_gpu_and_missing_engine(fake_engines):
    fake_engines.set(FAKE_NO_GPU="1")
    result = TrtllmAdapter().build(cfg(), None)
    assert result.status == "failed" and result.error_kind == "no_gpu"
    fake_engines.set(FAKE_NO_GPU=None)
    with pytest.raises(DeployError) as err:
        TrtllmAdapter().serve_command(cfg(), "127.0.0.1", 8000)
    assert err.value.kind == "not_built"
