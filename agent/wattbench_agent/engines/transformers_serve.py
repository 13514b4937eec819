"""`transformers serve --continuous-batching`: Hugging Face transformers' own OpenAI-compatible server.

Follows transformers 5.17 as run on the H200 machine (/work/shared/GPU.md):

    transformers serve /path/to/model --continuous-batching --device cuda:0 --host 127.0.0.1 --port 8000

It serves /health, /v1/models, /v1/completions and /v1/chat/completions (streaming; the last chunk carries usage
even though stream_options is ignored). Requests name the model by the folder path given on the command line.
No Prometheus /metrics endpoint is known for it, so metrics_path is None. No build step.
It needs fastapi 0.118 + starlette 0.48, uvicorn, pydantic, openai 1.109.x ... (wheels in .whl/, see README.txt
there). For smoke tests without downloads, `wattbench make-tiny-model` (agent/wattbench_agent/engines/tiny_model.py)
builds a random-initialised Llama-shaped model folder to serve.

Plan options (EngineConfig.options) are passed through as extra flags: {"dtype": "bfloat16"} -> --dtype bfloat16,
{"flag": True} -> --flag, {"flag": False} -> --no-flag, None -> omitted; "device" replaces the default cuda:0.
Flags seen in `transformers serve --help` (5.17): --cb-max-memory-percent, --cb-num-blocks, --cb-block-size,
--cb-max-batch-tokens, --cb-use-cuda-graph, --attn-implementation, --compile, --dtype, --default-seed, --log-level.
Seen on CPU with 5.17 (throwaway venv): GET /v1/models answers 500 when the Hugging Face cache folder does not exist
(set HF_HUB_CACHE to an existing folder); the CLI imports `requests` and loading with a device needs `accelerate`;
/metrics is 404.
Agent-side code: stdlib only.
"""

from __future__ import annotations

from typing import Any

from wattbench_agent.engines.base import EngineAdapter, EngineConfig


class TransformersServeAdapter(EngineAdapter):
    name = "transformers"
    image = "wattbench/transformers-serve:latest"
    follows_version = "5.17"  # transformers release whose `transformers serve` CLI this follows
    health_path = "/health"
    metrics_path = None  # transformers serve exposes no Prometheus metrics
    accepts_ignore_eos = False  # it answers 422 to ignore_eos / min_tokens (seen with 5.17)
    source = "measured"

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        model = artifact_path or cfg.model
        options = dict(cfg.options)
        device = options.pop("device", "cuda:0")
        cmd = [
            "transformers",
            "serve",
            model,
            "--continuous-batching",
            "--device",
            str(device),
            "--host",
            host,
            "--port",
            str(port),
        ]
        for key, value in sorted(options.items()):
            flag = "--" + str(key).replace("_", "-")
            if value is True:
                cmd.append(flag)
            elif value is False:  # typer boolean options: --flag / --no-flag
                cmd.append("--no-" + flag[2:])
            elif value is None:
                continue
            else:
                cmd += [flag, str(value)]
        return cmd

    def served_model_name(self, cfg: EngineConfig) -> str:
        return cfg.model  # the folder path, exactly as given on the command line

    def resolved_config(self, cfg: EngineConfig) -> dict[str, Any]:
        return {
            **super().resolved_config(cfg),
            "continuous_batching": True,
            "device": cfg.options.get("device", "cuda:0"),
        }
