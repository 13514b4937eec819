"""The transformers-serve adapter's command line (by contract), and the tiny-model builder when torch is present."""

from __future__ import annotations

import json

import pytest

from wattbench_agent.engines.base import EngineAdapter, EngineConfig
from wattbench_agent.engines.transformers_serve import TransformersServeAdapter


def cfg(**kw) -> EngineConfig:
    return EngineConfig(engine="transformers", model="/models/tiny-1b", config_name="cb", precision="bf16", **kw)


def test_serve_command_follows_transformers_5_17():
    a = TransformersServeAdapter()
    assert isinstance(a, EngineAdapter)
    assert a.name == "transformers" and a.follows_version == "5.17"
    assert a.health_path == "/health" and a.metrics_path is None and a.source == "measured"
    assert a.serve_command(cfg(), "127.0.0.1", 8123) == [
        "transformers",
        "serve",
        "/models/tiny-1b",
        "--continuous-batching",
        "--device",
        "cuda:0",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    ]
    assert a.served_model_name(cfg()) == "/models/tiny-1b"
    assert a.build(cfg(), workdir=None).status == "no_build"


def test_serve_command_options_become_flags():
    a = TransformersServeAdapter()
    cmd = a.serve_command(
        cfg(options={"device": "cuda:1", "dtype": "bfloat16", "enable_cors": True, "input_validation": False}),
        "0.0.0.0",
        9000,
    )
    assert cmd[:9] == [
        "transformers",
        "serve",
        "/models/tiny-1b",
        "--continuous-batching",
        "--device",
        "cuda:1",
        "--host",
        "0.0.0.0",
        "--port",
    ]
    assert cmd[10:] == ["--dtype", "bfloat16", "--enable-cors", "--no-input-validation"]
    assert a.resolved_config(cfg(options={"device": "cuda:1"}))["device"] == "cuda:1"


def test_tiny_model_presets_and_cli_without_torch(monkeypatch, capsys):
    from wattbench_agent.engines import tiny_model

    assert tiny_model.PRESETS["1b"] == dict(
        layers=16, hidden=2048, heads=32, kv_heads=8, intermediate=8192, vocab=32000
    )
    assert "tiny" in tiny_model.PRESETS

    def no_torch(*a, **k):
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(tiny_model, "build_tiny_llama", no_torch)
    assert tiny_model.main(["--out", "/tmp/never", "--size", "tiny"]) == 2
    assert "needs torch" in capsys.readouterr().err


def test_build_tiny_llama(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from wattbench_agent.engines.tiny_model import PRESETS, build_tiny_llama

    summary = build_tiny_llama(tmp_path / "m", seed=0, **PRESETS["tiny"])
    conf = json.loads((tmp_path / "m" / "config.json").read_text())
    gen = json.loads((tmp_path / "m" / "generation_config.json").read_text())
    assert conf["eos_token_id"] is None and gen.get("eos_token_id") is None
    assert conf["vocab_size"] == PRESETS["tiny"]["vocab"] and summary["random_init"] is True
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert model.dtype == torch.bfloat16 and len(tok) == conf["vocab_size"]
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hello, how are you?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    new = out[0][ids["input_ids"].shape[1] :]
    assert len(new) == 8  # no early stop
    assert all(tok.decode([int(i)], skip_special_tokens=True).strip() for i in new)  # every token streams text
