"""The `hub` resource: what the model-release sensor (pipelines/sensors.py) watches on the Hugging Face Hub, and what
it runs for a new model; docs/AUTOMATION.md."""

from __future__ import annotations

import os
from typing import Any

import dagster as dg

from wattbench import settings
from wattbench.model_registry import HubClient, HubModel


def csv_list(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


class HubWatch(dg.ConfigurableResource):
    """What the model-release sensor watches on the Hugging Face Hub, and what it runs for a new model.

    Comma-separated fields (orgs, filters, scenarios) so that each can come from one environment variable;
    `HubWatch.from_env()` reads them (see docs/AUTOMATION.md)."""

    base_url: str = "https://huggingface.co"
    orgs: str = "meta-llama,Qwen,mistralai,google,microsoft,deepseek-ai"
    pipeline_tag: str = "text-generation"
    library: str = "transformers"
    filters: str = ""
    limit: int = 20
    scenarios: str = "default"
    first_poll_models: int = 0
    timeout_s: float = 10.0
    backoff_s: float = 300.0
    max_backoff_s: float = 6 * 3600.0
    token: str | None = None

    @classmethod
    def from_env(cls) -> HubWatch:
        env = os.environ.get
        fields: dict[str, Any] = {}
        for name, (var, cast) in settings.HUB_WATCH.items():
            if env(var) is not None:
                fields[name] = cast(env(var))
        if env(settings.HF_TOKEN):
            # resolved at run time; the UI shows the variable, not the token
            fields["token"] = dg.EnvVar(settings.HF_TOKEN)
        return cls(**fields)

    def client(self) -> HubClient:
        return HubClient(base_url=self.base_url, token=self.token, timeout_s=self.timeout_s)

    def org_list(self) -> list[str]:
        return csv_list(self.orgs)

    def scenario_list(self) -> list[str]:
        return csv_list(self.scenarios)

    def wanted(self, model: HubModel) -> bool:
        """Client-side filter too (a server that ignores a parameter must not start runs for other models)."""
        if self.pipeline_tag and model.pipeline_tag and model.pipeline_tag != self.pipeline_tag:
            return False
        library_mismatch = (
            self.library
            and (model.library or model.tags)
            and model.library != self.library
            and self.library not in model.tags
        )
        return not library_mismatch
