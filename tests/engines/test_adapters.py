"""Command lines by contract: each adapter's flags follow its engine's documented CLI (docs/ENGINES.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wattbench_agent.deploy.local import DeployError, classify_start_failure
from wattbench_agent.engines import registry
from wattbench_agent.engines.base import EngineAdapter, EngineConfig
from wattbench_agent.engines.registry import adapter_for
from wattbench_agent.engines.sglang import SglangAdapter
from wattbench_agent.engines.trtllm import TrtllmAdapter
from wattbench_agent.engines.vllm import VllmAdapter


def cfg(engine: str, precision: str = "bf16", tp: int = 1, **options) -> EngineConfig:
    return EngineConfig(
        engine=engine,
        model="meta-llama/Llama-3.1-8B-Instruct",
        config_name=f"{engine}-x",
        precision=precision,
        tp=tp,
        options=options,
    )


def test_registry_covers_every_engine_and_versions_are_recorded():
    assert set(registry.ADAPTERS) == {"emulator", "trtllm", "vllm", "sglang", "transformers", "external"}
    expected = {"trtllm": "0.18.2", "vllm": "0.10.1.1", "sglang": "0.5", "external": "openai-v1"}
    for name, version in expected.items():
        adapter = adapter_for(name)
        assert isinstance(adapter, EngineAdapter) and adapter.name == name
        assert adapter.follows_version == version
    t = adapter_for("transformers")  # lazy import of the other engineer's module
    assert t.name == "transformers" and t.follows_version


def test_vllm_fp8_is_a_quantization_not_a_dtype():
    cmd = VllmAdapter().serve_command(
        cfg(
            "vllm",
            "fp8",
            tp=8,
            max_model_len=4096,
            max_num_seqs=256,
            gpu_memory_utilization=0.9,
            block_size=16,
            enable_prefix_caching=True,
            enable_chunked_prefill=False,
            kv_cache_dtype="fp8",
        ),
        "127.0.0.1",
        8000,
    )
    assert cmd == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "8",
        "--dtype",
        "auto",
        "--quantization",
        "fp8",
        "--kv-cache-dtype",
        "fp8",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "256",
        "--gpu-memory-utilization",
        "0.9",
        "--block-size",
        "16",
        "--enable-prefix-caching",
        "--no-enable-chunked-prefill",
    ]
    assert "fp8" not in cmd[cmd.index("--dtype") + 1]


@pytest.mark.parametrize(
    "precision,dtype,quant", [("fp16", "float16", None), ("bf16", "bfloat16", None), ("int4-awq", "float16", "awq")]
)
def test_vllm_precisions(precision, dtype, quant):
    cmd = VllmAdapter().serve_command(cfg("vllm", precision), "h", 1)
    assert cmd[cmd.index("--dtype") + 1] == dtype
    assert (cmd[cmd.index("--quantization") + 1] if "--quantization" in cmd else None) == quant


def test_unknown_option_is_a_config_error_not_a_crash():
    bad = cfg("vllm", max_num_seq=8)  # typo of max_num_seqs
    with pytest.raises(DeployError) as err:
        VllmAdapter().serve_command(bad, "h", 1)
    assert err.value.kind == "config_error" and "max_num_seqs" in str(err.value)
    assert "config_error" in VllmAdapter().resolved_config(bad)  # never raises: the runner calls it first
    result = VllmAdapter().build(bad, None)
    assert result.status == "failed" and result.error_kind == "config_error"


def test_vllm_and_sglang_record_no_build_with_resolved_config():
    for adapter in (VllmAdapter(), SglangAdapter()):
        result = adapter.build(cfg(adapter.name, "fp8", tp=2), None)
        assert result.status == "no_build" and result.engine_version == adapter.follows_version
        assert result.resolved_config["quantization"] == "fp8" and result.resolved_config["tp"] == 2


def test_sglang_command_and_aliases():
    a = SglangAdapter()
    cmd = a.serve_command(
        cfg(
            "sglang",
            "fp8",
            tp=4,
            max_model_len=8192,
            max_num_seqs=128,
            gpu_memory_utilization=0.85,
            python="python3.11",
        ),
        "0.0.0.0",
        30000,
    )
    assert cmd == [
        "python3.11",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--tp-size",
        "4",
        "--dtype",
        "auto",
        "--quantization",
        "fp8",
        "--context-length",
        "8192",
        "--max-running-requests",
        "128",
        "--mem-fraction-static",
        "0.85",
        "--enable-metrics",
    ]
    assert a.health_path == "/health" and a.readiness_path == "/health_generate" and a.metrics_path == "/metrics"


def test_trtllm_commands_per_precision(tmp_path):
    a = TrtllmAdapter(gpu_probe=lambda: None)
    opts = dict(max_batch_size=128, max_input_len=2048, max_seq_len=4096, max_num_tokens=8192)
    fp16 = a.checkpoint_command(cfg("trtllm", "fp16", tp=8, **opts), "CK")
    assert fp16[1].endswith("llama/convert_checkpoint.py")
    assert fp16[2:] == [
        "--model_dir",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--output_dir",
        "CK",
        "--dtype",
        "float16",
        "--tp_size",
        "8",
    ]
    fp8 = a.checkpoint_command(cfg("trtllm", "fp8", tp=8, **opts), "CK")
    assert fp8[1].endswith("quantization/quantize.py")
    assert fp8[2:] == [
        "--model_dir",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--output_dir",
        "CK",
        "--dtype",
        "float16",
        "--qformat",
        "fp8",
        "--kv_cache_dtype",
        "fp8",
        "--calib_size",
        "512",
        "--tp_size",
        "8",
    ]
    awq = a.checkpoint_command(cfg("trtllm", "int4-awq"), "CK")
    assert awq[awq.index("--qformat") + 1] == "int4_awq" and "--awq_block_size" in awq
    build = a.build_command(cfg("trtllm", "fp8", tp=8, **opts), "CK", "EN")
    assert build == [
        "trtllm-build",
        "--checkpoint_dir",
        "CK",
        "--output_dir",
        "EN",
        "--gemm_plugin",
        "fp8",
        "--max_batch_size",
        "128",
        "--max_input_len",
        "2048",
        "--max_seq_len",
        "4096",
        "--max_num_tokens",
        "8192",
        "--workers",
        "8",
    ]
    engine = tmp_path / "engine"
    engine.mkdir()
    serve = a.serve_command(
        cfg("trtllm", "fp8", tp=8, kv_cache_free_gpu_mem_fraction=0.85, **opts), "127.0.0.1", 8000, str(engine)
    )
    assert serve == [
        "trtllm-serve",
        str(engine),
        "--tokenizer",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--max_batch_size",
        "128",
        "--max_num_tokens",
        "8192",
        "--max_seq_len",
        "4096",
        "--tp_size",
        "8",
        "--kv_cache_free_gpu_memory_fraction",
        "0.85",
    ]
    assert a.metrics_path is None  # trtllm-serve's /metrics is JSON, not Prometheus
    bad = a.build(cfg("trtllm", "fp8", max_input_len=8192, max_seq_len=4096), None)
    assert bad.status == "failed" and bad.error_kind == "config_error"


def test_the_fakes_accept_our_command_lines_and_reject_the_seed_dtype(fake_engines):
    """vllm serve --dtype fp8 (the seed article) is not a valid vLLM command: argparse exits 2."""
    seed = [
        "vllm",
        "serve",
        "meta-llama/Llama-3-70b",
        "--tensor-parallel-size",
        "8",
        "--dtype",
        "fp8",
        "--max-model-len",
        "4096",
        "--port",
        "8000",
    ]
    proc = subprocess.run(seed, capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'fp8'" in proc.stderr
    proc = subprocess.run(
        ["trtllm-build", "--checkpoint_dir", "x", "--no_such_flag", "1"], capture_output=True, text=True
    )
    assert proc.returncode == 2


def test_start_failures_are_classified():
    assert classify_start_failure("torch.OutOfMemoryError: CUDA out of memory. Tried") == "oom_at_start"
    assert (
        classify_start_failure(
            "Error Code 6: The engine plan file is generated on an incompatible device, "
            "expecting compute 8.0 got compute 9.0"
        )
        == "hardware_mismatch"
    )
    assert classify_start_failure("address already in use") == "port_in_use"
    assert classify_start_failure("KeyError: 'x'") == "start_failed"


def test_a_long_start_failure_keeps_its_first_line_and_the_log_tail():
    from wattbench_agent.runner import clip_error

    head = "server exited with code 1 before it was healthy: ModuleNotFoundError: No module named 'flashinfer'"
    text = head + "\n" + "".join(f"log line {i}\n" for i in range(500)) + "last line"
    clipped = clip_error(text)
    assert len(clipped) <= 2000 and clipped.startswith(head + "\n...") and clipped.endswith("log line 499\nlast line")
    assert clip_error("short\ntext") == "short\ntext"


def test_agent_side_imports_no_dagster_duckdb_or_gx():
    code = (
        "import sys; import wattbench_agent.engines.registry, wattbench_agent.engines.cli, "
        "wattbench_agent.engines.failures, "
        "wattbench_agent.deploy.local, wattbench_agent.deploy.kubernetes; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'duckdb', 'great_expectations'}); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
