"""Secrets stay where they belong (issue 17, item 7): the Hugging Face token goes to the Hub's own origin only,
an external engine's `user:password@` never reaches a row, a log or the bundle, and the Kubernetes pods run as a
non-root user with no capabilities and no service-account token."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.automation.hub_server import FakeHub
from tests.reliability.conftest import MisbehavingServer, external_deployment, rows
from wattbench.model_registry import HubClient, same_origin
from wattbench_agent.deploy.kubernetes import K8sTarget, agent_pod_spec, build_manifests, build_pod, build_pod_spec
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.runner import run_spec
from wattbench_agent.safety import redact_url

TOKEN = "hf_wattbench_test_token"
PASSWORD = "pa55-w0rd-for-test"


def test_the_hub_token_is_not_sent_to_the_origin_a_next_link_names():
    with FakeHub() as hub, FakeHub() as elsewhere:
        elsewhere.serve("Qwen", "Qwen/v2")
        hub.serve(
            "Qwen", "Qwen/page1", next_fixture="Qwen/v2", next_url=f"{elsewhere.url}/api/models?author=Qwen&cursor=p2"
        )
        client = HubClient(base_url=hub.url, token=TOKEN)
        models = client.list_models("Qwen", limit=2, stop_at=datetime(2026, 9, 30, tzinfo=UTC))
    assert [r["authorization"] for r in hub.requests] == [[f"Bearer {TOKEN}"]]
    assert elsewhere.requests == []  # not asked at all, with or without the token
    assert len(models) == 2  # the first page is kept
    assert any(elsewhere.url in note and "not followed" in note for note in client.notes)


def test_a_next_link_on_the_hubs_own_origin_is_still_followed():
    with FakeHub() as hub:
        hub.serve("Qwen", "Qwen/page1", next_fixture="Qwen/v2")
        client = HubClient(base_url=hub.url, token=TOKEN)
        models = client.list_models("Qwen", limit=2, stop_at=datetime(2026, 9, 30, tzinfo=UTC))
    assert len(models) == 4 and [r["authorization"] for r in hub.requests] == [[f"Bearer {TOKEN}"]] * 2
    assert client.notes == []


@pytest.mark.parametrize(
    "link, same",
    [
        ("https://huggingface.co/api/models?cursor=x", True),
        ("http://huggingface.co/api/models?cursor=x", False),  # plain http: the token would travel in clear
        ("https://huggingface.co:8443/api/models", False),
        ("https://evil.example/api/models", False),
        ("https://huggingface.co.evil.example/api/models", False),
        ("//evil.example/api/models", False),
    ],
)
def test_same_origin(link, same):
    assert same_origin("https://huggingface.co", link) is same


def test_an_external_urls_credentials_reach_no_row_log_or_file(tmp_path):
    server = MisbehavingServer(behaviours=("ok",))
    logs: list[str] = []
    with server.running():
        port = server.url.rsplit(":", 1)[1]
        spec = {
            "run_id": "r-secret",
            "source": "measured",
            "out": str(tmp_path / "bundle"),
            "deployments": [
                external_deployment("up", f"http://wbuser:{PASSWORD}@127.0.0.1:{port}/v1"),
                external_deployment("down", f"http://wbuser:{PASSWORD}@127.0.0.1:9/v1?api_key={PASSWORD}"),
            ],
        }
        bundle = run_spec(spec, log=logs.append)
    deployments = {r["deployment_id"]: r for r in rows(bundle, "deployments")}
    assert deployments["up"]["status"] == "healthy" and deployments["up"]["url"] == f"http://***@127.0.0.1:{port}"
    assert deployments["down"]["status"] == "failed" and "127.0.0.1:9" in deployments["down"]["error_text"]
    for path in bundle.rglob("*"):
        if path.is_file():
            assert PASSWORD not in path.read_text(errors="replace"), path
    assert not [line for line in logs if PASSWORD in line]


def test_redact_url():
    assert (
        redact_url(f"https://u:{PASSWORD}@h:8000/v1?api_key=k&model=m")
        == "https://***@h:8000/v1?api_key=%2A%2A%2A&model=m"
    )
    assert redact_url("http://h:8000/v1") == "http://h:8000/v1"


def _pods():
    target = K8sTarget(models_pvc="models", gpu_product="NVIDIA-H100-80GB-HBM3")
    cfg = EngineConfig(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", config_name="c", precision="bf16", tp=2)
    trt = EngineConfig(
        engine="trtllm", model="meta-llama/Llama-3.1-8B-Instruct", config_name="t", precision="fp8", tp=2
    )
    from kubernetes import client as k8s

    api = k8s.ApiClient()
    deployment, _ = build_manifests(cfg, target)
    return {
        "engine Deployment": api.sanitize_for_serialization(deployment)["spec"]["template"]["spec"],
        "agent pod": agent_pod_spec(2, target, bundle_pvc="data"),
        "build pod (Pipes)": build_pod_spec(trt, target),
        "build pod (dry run)": api.sanitize_for_serialization(build_pod(trt, target))["spec"],
    }


@pytest.mark.parametrize("which", ["engine Deployment", "agent pod", "build pod (Pipes)", "build pod (dry run)"])
def test_kubernetes_pods_run_unprivileged(which):
    spec = _pods()[which]
    assert spec["automountServiceAccountToken"] is False
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0 and pod["runAsGroup"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert any(e["name"] == "HOME" for e in container["env"])  # a writable home for a non-root user


def test_an_imported_results_url_credentials_are_not_stored(tmp_path, monkeypatch, capsys):
    """`wattbench import` of another tool's result file that names its target with user:password@."""
    from pipelines.cli import main as wattbench
    from wattbench.warehouse import connect

    source = Path(__file__).resolve().parents[1] / "data" / "imports" / "guidellm-0.8.1-concurrent-2-4.json"
    data = json.loads(source.read_text())
    for bench in data["benchmarks"]:
        bench["config"]["backend"]["target"] = f"http://wbuser:{PASSWORD}@127.0.0.1:8000"
    path = tmp_path / "guidellm.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv("WATTBENCH_DB", str(tmp_path / "w.duckdb"))
    assert wattbench(["import", str(path)]) == 0
    capsys.readouterr()
    with connect(tmp_path / "w.duckdb", read_only=True) as con:
        (url,) = con.execute("SELECT DISTINCT url FROM deployments").fetchone()
    assert url == "http://***@127.0.0.1:8000"


# ---------------------------------------------------------------------------------------------------------------
# Secrets by name and by value: an environment, a header map, a command line, a URL, free text
# ---------------------------------------------------------------------------------------------------------------
SECRET_ENV = {
    "WANDB_KEY": "wkey-s3cr3t-1",
    "AUTH_HEADER": "Bearer s3cr3t-2-bearer",
    "MY_PASS": "s3cr3t-3",
    "DATABASE_URL": "postgres://u:s3cr3t-4@db.example/db",
    "HF_TOKEN": "hf_s3cr3t-5",
    "SESSION_COOKIE": "sid=s3cr3t-6",
    "GCP_CREDENTIALS": "s3cr3t-7",
    "OPENAI_SECRET": "s3cr3t-8",
    "PROXY": "Basic s3cr3t-9==",
    # names the third round found in clear: plural and short words (issue 38)
    "API_TOKENS": "s3cr3t-10",
    "DB_PWD": "s3cr3t-11",
    "GITHUB_PAT": "s3cr3t-12",
    "SECRETS": "s3cr3t-13",
    "TOKENS": "s3cr3t-14",
    "SERVICE_KEYS": "s3cr3t-15",
    "AWS_CREDS": "s3cr3t-16",
    "SENTRY_DSN": "https://s3cr3t-17.ingest.example/1",
    "ANY_NAME": "sk-proj-s3cr3t18abcdefghijklmn",  # a token in its issuer's form, whatever the name
}
KEPT_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "MAX_TOKENS": "64",
    "TOKENIZERS_PARALLELISM": "false",
    "PLAIN": "x",
    "SKIP_SPECIAL_TOKENS": "true",
    "NUM_KEYS": "4",
    "VLLM_COMPAT_MODE": "1",
}


def test_secret_names_and_values_are_masked():
    from wattbench_agent.safety import is_secret_name, mask_env, redact_argv, redact_text

    masked = mask_env({**SECRET_ENV, **KEPT_ENV})
    assert {k: masked[k] for k in KEPT_ENV} == KEPT_ENV
    assert masked["DATABASE_URL"] == "postgres://***@db.example/db"
    assert masked["AUTH_HEADER"] == "***" and masked["PROXY"] == "Basic ***"
    assert "s3cr3t" not in json.dumps(masked)
    for name in ("Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "apiKey", "db_password"):
        assert is_secret_name(name), name
    text = redact_text(
        "GET http://u:s3cr3t@h:1/v1?api_key=s3cr3t&model=m failed\nAuthorization: Bearer s3cr3t-abc\n"
        "token=s3cr3t max_tokens=64 and Bearer s3cr3t-xyz"
    )
    assert "s3cr3t" not in text and "model=m" in text and "max_tokens=64" in text, text
    argv = redact_argv(["vllm", "serve", "m", "--api-key", "s3cr3t", "--hf-token=s3cr3t", "--max-num-seqs", "8"])
    assert argv == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--max-num-seqs", "8"]


def test_a_plans_secret_env_reaches_no_row_log_or_file(tmp_path):
    """An engine's env of secret names and values (and an option api_key): the engine gets them; the deployments
    row, the agent's log and every bundle file show them masked."""
    from tests.reliability.conftest import emulator_spec

    spec = emulator_spec("r-env", tmp_path / "bundle", n_points=1, duration_s=0.5)
    dep = spec["deployments"][0]
    dep["env"] = {**SECRET_ENV, **KEPT_ENV}
    logs: list[str] = []
    bundle = run_spec(spec, log=logs.append)
    (row,) = rows(bundle, "deployments")
    assert row["status"] == "healthy", row
    assert row["config"]["env"]["DATABASE_URL"] == "postgres://***@db.example/db"
    assert row["config"]["env"]["MAX_TOKENS"] == "64" and row["config"]["env"]["WANDB_KEY"] == "***"
    for path in bundle.rglob("*"):
        if path.is_file() and path.suffix != ".bin" and path.parent.name != "logs":  # logs/: the engine's own output
            assert "s3cr3t" not in path.read_text(errors="replace"), path
    assert not [line for line in logs if "s3cr3t" in line]


def test_an_engine_options_secret_is_masked_in_its_row():
    """vLLM takes `--api-key`: a plan's `options: {api_key: ...}` is passed to it, and masked in the row."""
    from wattbench_agent.runner import new_deployment
    from wattbench_agent.wire import AgentSpec

    spec = AgentSpec.from_dict(
        {
            "run_id": "r",
            "out": "/nonexistent",
            "deployments": [
                {
                    "deployment_id": "v",
                    "engine_config": asdict(
                        EngineConfig(engine="vllm", model="m", config_name="v", options={"api_key": "s3cr3t-o"})
                    ),
                    "env": {"DATABASE_URL": "postgres://u:s3cr3t@h/db"},
                }
            ],
        }
    )
    row = new_deployment(spec.deployments[0], spec).row
    assert "s3cr3t" not in json.dumps(row), row["config"]


def test_the_load_client_writes_and_prints_no_credentials(tmp_path):
    """`wattbench load --url http://user:pass@host` (and --metadata token=..., --header Authorization: ...): the
    result file, the summary and the error messages show no credentials."""
    import subprocess
    import sys

    server = MisbehavingServer(behaviours=("ok",))
    with server.running():
        port = server.url.rsplit(":", 1)[1]
        ok = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "load", "--url", f"http://wbuser:{PASSWORD}@127.0.0.1:{port}/v1",
             "--model", "m", "--concurrency", "1", "--max-requests", "2", "--duration", "0", "--no-progress",
             "--header", f"Authorization: Bearer {PASSWORD}", "--metadata", f"token={PASSWORD}", "team=infra",
             "--save-result", "--result-dir", str(tmp_path), "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    (result_file,) = tmp_path.glob("*.json")
    result = json.loads(result_file.read_text())
    assert result["wattbench"]["url"] == f"http://***@127.0.0.1:{port}/v1" and result["team"] == "infra"
    assert result["token"] == "***"
    assert PASSWORD not in result_file.read_text() + ok.stdout + ok.stderr
    down = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "load", "--url", f"http://wbuser:{PASSWORD}@127.0.0.1:9/v1",
         "--concurrency", "1", "--max-requests", "1", "--duration", "0", "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert down.returncode == 2 and "127.0.0.1:9" in down.stderr and PASSWORD not in down.stdout + down.stderr


def test_a_spec_holding_secrets_is_not_printed_and_is_written_for_its_owner_only(tmp_path, capsys):
    from pipelines.cli import main as wattbench

    plan = tmp_path / "plan.yaml"
    smoke = (Path(__file__).resolve().parents[1] / "data" / "smoke_plan.yaml").read_text()
    plan.write_text(
        smoke.replace(
            "profile: vllm-like, precision: fp8, tp: 1}",
            f"profile: vllm-like, precision: fp8, tp: 1, env: {{WANDB_KEY: {PASSWORD}}}}}",
        )
    )
    assert wattbench(["spec", "--plan", str(plan)]) == 2
    out = capsys.readouterr()
    assert PASSWORD not in out.out + out.err and "deployments[1].env.WANDB_KEY" in out.err and "--write" in out.err
    assert wattbench(["spec", "--plan", str(plan), "--write", str(tmp_path / "spec.json")]) == 0
    assert (tmp_path / "spec.json").stat().st_mode & 0o777 == 0o600
    assert PASSWORD in (tmp_path / "spec.json").read_text()  # the agent needs it


@pytest.mark.parametrize(
    "text, kept",
    [
        ("HF_TOKEN: hf_abcdefghijklmnopqrstuvwxyz0123", "HF_TOKEN: "),
        ('{"HF_TOKEN": "s3cr3t", "model": "m"}', '"model": "m"'),
        ("{'api_key': 's3cr3t', 'max_tokens': 64}", "'max_tokens': 64"),
        ("password: s3cr3t", "password: ***"),
        ("api-key: s3cr3t", "api-key: ***"),
        ("vllm serve m --api-key s3cr3t --max-num-batched-tokens 8192", "--max-num-batched-tokens 8192"),
        ("vllm serve m --api-key=s3cr3t --port 8000", "--port 8000"),
        ("export OPENAI_API_KEY; token sk-s3cr3tabcdefghijklmnop used", "token *** used"),
        (
            "cloned with ghp_s3cr3tabcdefghijklmnop0123 and github_pat_s3cr3t_abcdefghijklmnopq",
            "cloned with *** and ***",
        ),
        ("API_TOKENS=s3cr3t DB_PWD=s3cr3t GITHUB_PAT=s3cr3t MAX_TOKENS=64", "MAX_TOKENS=64"),
        ("KeyError: 'choices'", "KeyError: 'choices'"),  # an exception's name, not a key
        ("--goodput: expected KEY:MILLISECONDS", "expected KEY:MILLISECONDS"),  # a message's placeholder
        ('{"tokens": [1, 2], "api_key": "s3cr3t"}', '"tokens": [1, 2]'),
    ],
)
def test_redact_text_masks_secrets_in_the_forms_they_are_written(text, kept):
    from wattbench_agent.safety import redact_text

    out = redact_text(text)
    assert "s3cr3t" not in out and "hf_abc" not in out, out
    assert kept in out, out


def test_secret_names_and_the_counts_they_resemble():
    from wattbench_agent.safety import is_secret, redact_argv

    for name in ("API_TOKENS", "DB_PWD", "GITHUB_PAT", "SECRETS", "TOKENS", "KEYS", "CREDS", "PAT", "DSN", "db.pwd"):
        assert is_secret(name, "abc"), name
    kept = [("MAX_TOKENS", "64"), ("max_num_batched_tokens", 8192), ("SKIP_SPECIAL_TOKENS", "true")]
    kept += [("PATH", "/usr/bin"), ("PWD", "/home/u"), ("COMPAT", "x"), ("TOKENIZERS_PARALLELISM", "x")]
    for name, value in kept:
        assert not is_secret(name, value), name
    argv = redact_argv(["serve", "--api-tokens", "s3cr3t", "--max-num-batched-tokens", "8192", "--db-pwd=s3cr3t"])
    assert argv == ["serve", "--api-tokens", "***", "--max-num-batched-tokens", "8192", "--db-pwd=***"]


def test_a_spec_whose_env_has_plural_or_short_secret_names_is_not_printed(tmp_path, capsys):
    from pipelines.cli import main as wattbench

    plan = tmp_path / "plan.yaml"
    smoke = (Path(__file__).resolve().parents[1] / "data" / "smoke_plan.yaml").read_text()
    env = "{API_TOKENS: s3cr3t-a, DB_PWD: s3cr3t-b, GITHUB_PAT: s3cr3t-c, MAX_TOKENS: '64'}"
    plan.write_text(
        smoke.replace(
            "profile: vllm-like, precision: fp8, tp: 1}", f"profile: vllm-like, precision: fp8, tp: 1, env: {env}}}"
        )
    )
    assert wattbench(["spec", "--plan", str(plan)]) == 2
    out = capsys.readouterr()
    assert "s3cr3t" not in out.out + out.err
    for name in ("API_TOKENS", "DB_PWD", "GITHUB_PAT"):
        assert f"deployments[1].env.{name}" in out.err
    assert "MAX_TOKENS" not in out.err


class _RecordingServer(MisbehavingServer):
    """Answers as MisbehavingServer does and keeps each request body it was sent."""

    def __init__(self):
        super().__init__(behaviours=("ok",))
        self.bodies: list[dict] = []

    def respond(self, sock, path, body):
        if "completions" in path:
            self.bodies.append(json.loads(body))
        return super().respond(sock, path, body)


def test_the_load_clients_extra_body_and_metadata_are_sent_as_given_and_written_masked(tmp_path):
    import subprocess
    import sys

    server = _RecordingServer()
    extra = {"api_key": PASSWORD, "hf_token": "hf_" + "x" * 30, "temperature": 0}
    with server.running():
        p = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "load", "--url", server.url, "--model", "m", "--concurrency", "1",
             "--max-requests", "2", "--duration", "0", "--no-progress", "--extra-body", json.dumps(extra),
             "--metadata", f"github_pat={PASSWORD}", f"API_TOKENS={PASSWORD}", "team=infra",
             "--out", str(tmp_path / "r.jsonl"), "--save-result", "--result-dir", str(tmp_path), "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert server.bodies and all(b["api_key"] == PASSWORD and b["hf_token"] == extra["hf_token"] for b in server.bodies)
    written = {f.name: f.read_text() for f in tmp_path.iterdir()}
    assert "r.points.jsonl" in written and len(written) == 3, sorted(written)
    for name, text in written.items():
        assert PASSWORD not in text and extra["hf_token"] not in text, name
    point = json.loads(written["r.points.jsonl"].splitlines()[0])
    assert point["spec"]["extra_body"] == {"api_key": "***", "hf_token": "***", "temperature": 0}
    (result,) = [json.loads(t) for n, t in written.items() if n.endswith(".json")]
    assert result["github_pat"] == result["API_TOKENS"] == "***" and result["team"] == "infra"
    assert PASSWORD not in p.stdout + p.stderr
