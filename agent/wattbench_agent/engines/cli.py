"""`wattbench deploy` and `wattbench make-tiny-model`.

    wattbench deploy --engine vllm --model meta-llama/Llama-3.1-8B-Instruct --tp 8 --target kubernetes --dry-run \
        [--image IMG] [--namespace NS] [--gpu-product NVIDIA-H100-80GB-HBM3] [--option max_model_len=4096 ...]
        # TensorRT-LLM: the build pod (agent/wattbench_agent/engines/build_agent.py) is printed before the Deployment
    wattbench deploy --engine vllm --model M --target local [--port 8000]      # start, wait for health, Ctrl-C stops
    wattbench deploy --engine vllm --model M --target local --dry-run           # print the command line only
    wattbench make-tiny-model --out DIR [--size tiny|1b]
        # a random-initialised model folder for smoke tests (agent/wattbench_agent/engines/tiny_model.py)

Agent-side code: no Dagster. The kubernetes target imports the `kubernetes` client only when used.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from wattbench_agent.argtypes import finite_float, port_number
from wattbench_agent.engines.base import EngineConfig
from wattbench_agent.engines.registry import adapter_for
from wattbench_agent.safety import file_name


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _options(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"wattbench deploy: --option wants KEY=VALUE, got {item!r}")
        out[key.strip()] = _parse_value(value.strip())
    return out


def _config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        engine=args.engine,
        model=args.model,
        config_name=args.config_name or args.engine,
        precision=args.precision,
        tp=args.tp,
        gpu=args.gpu,
        profile=args.profile,
        options=_options(args.option),
    )


def _deploy(args: argparse.Namespace) -> int:
    from wattbench_agent.deploy.local import DeployError

    cfg = _config(args)
    if args.target == "kubernetes":
        return _deploy_kubernetes(cfg, args)
    adapter = adapter_for(cfg.engine)
    try:
        command = adapter.serve_command(cfg, args.host, args.port or 8000, args.artifact_path)
    except DeployError as exc:
        print(f"wattbench deploy: {exc.kind}: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        print(shlex.join(command))
        return 0
    return _deploy_local(cfg, adapter, args)


def _deploy_local(cfg: EngineConfig, adapter, args: argparse.Namespace) -> int:
    from wattbench_agent.deploy.local import DeployError, start_server

    log_path = Path(args.log or Path("data") / "deploy" / file_name(f"{cfg.engine}-{cfg.config_name}", ".log"))
    print(f"wattbench deploy: starting {cfg.engine} ({adapter.follows_version}); log {log_path}", file=sys.stderr)
    try:
        server, startup_s = start_server(
            lambda port: adapter.serve_command(cfg, args.host, port, args.artifact_path),
            log_path,
            host=args.host,
            port=args.port,
            health_path=adapter.health_path,
            health_timeout_s=args.health_timeout,
        )
    except DeployError as exc:
        hint = adapter.start_failure_hint(str(exc))
        print(f"wattbench deploy: {exc.kind}: {exc}" + (f"\nhint: {hint}" if hint else ""), file=sys.stderr)
        return 1
    phases = getattr(adapter, "startup_phases", None)
    detail = phases(server.log_tail(200_000)) if phases else {}
    print(
        json.dumps(
            {
                "url": server.url,
                "model": adapter.served_model_name(cfg),
                "startup_s": round(startup_s, 2),
                "log": str(log_path),
                "pid": server.proc.pid if server.proc else None,
                **detail,
            }
        ),
        flush=True,
    )
    print("wattbench deploy: serving; Ctrl-C stops it", file=sys.stderr)
    try:
        while server.alive():
            time.sleep(0.5)
        print(f"wattbench deploy: the server exited; log {log_path}:\n{server.log_tail(1500)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        code = server.stop()
        print(f"wattbench deploy: stopped (exit {code})", file=sys.stderr)
        return 0


def _deploy_kubernetes(cfg: EngineConfig, args: argparse.Namespace) -> int:
    from wattbench_agent.deploy.kubernetes import K8sTarget, build_manifests, to_dicts, to_yaml
    from wattbench_agent.deploy.local import DeployError

    target = K8sTarget(
        namespace=args.namespace,
        image=args.image,
        gpu_product=args.gpu_product,
        port=args.port or 8000,
        shm_size=args.shm_size,
        models_pvc=args.models_pvc,
        hf_token_secret=args.hf_token_secret,
    )
    try:
        manifests = build_manifests(cfg, target, args.artifact_path)
    except (DeployError, ValueError) as exc:
        print(f"wattbench deploy: {getattr(exc, 'kind', 'config_error')}: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.write(to_yaml(_build_pod(cfg, target, args) + manifests))
        return 0
    try:  # apply with the kubernetes client (kubeconfig or in-cluster config)
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config
        from kubernetes.client.rest import ApiException

        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()
        apps, core = k8s.AppsV1Api(), k8s.CoreV1Api()
        deployment, service = manifests
        for create, replace, obj in (
            (apps.create_namespaced_deployment, apps.replace_namespaced_deployment, deployment),
            (core.create_namespaced_service, core.replace_namespaced_service, service),
        ):
            try:
                create(target.namespace, obj)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                replace(obj.metadata.name, target.namespace, obj)
        print(
            json.dumps(
                {
                    "applied": [d["kind"] + "/" + d["metadata"]["name"] for d in to_dicts(manifests)],
                    "namespace": target.namespace,
                }
            )
        )
        return 0
    except Exception as exc:  # no cluster, no kubeconfig, API refusal: one clear line
        print(
            f"wattbench deploy: cannot apply to the cluster ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
            "use --dry-run | kubectl apply -f -",
            file=sys.stderr,
        )
        return 1


def _build_pod(cfg: EngineConfig, target, args: argparse.Namespace) -> list[Any]:
    """[the build pod] for an engine compiled for its GPU (TensorRT-LLM), to run before the Deployment; [] when
    it needs none or a prebuilt engine is given."""
    from wattbench_agent.deploy.kubernetes import build_image_from_env, build_pod

    if not adapter_for(cfg.engine).builds_on_gpu or args.artifact_path or cfg.options.get("engine_dir"):
        return []
    image = build_image_from_env()
    print(
        f"wattbench deploy: the build pod (image {image}: $WATTBENCH_BUILD_IMAGE, else $WATTBENCH_AGENT_IMAGE) "
        "must succeed before the Deployment's engine can start",
        file=sys.stderr,
    )
    if not target.models_pvc:
        print(
            "wattbench deploy: without --models-pvc the engine stays in the build pod and the Deployment will not "
            "find it",
            file=sys.stderr,
        )
    return [build_pod(cfg, target, image)]


def _make_tiny_model(args: argparse.Namespace) -> int:
    try:
        module = importlib.import_module("wattbench_agent.engines.tiny_model")
    except ModuleNotFoundError as exc:
        if exc.name != "wattbench_agent.engines.tiny_model":
            raise
        print(
            "wattbench make-tiny-model: agent/wattbench_agent/engines/tiny_model.py is not in this build",
            file=sys.stderr,
        )
        return 2
    return int(module.main(list(args.tiny_args)) or 0)


def register(sub: argparse._SubParsersAction) -> None:
    from wattbench_agent.engines import registry

    p = sub.add_parser(
        "deploy",
        help="start an engine locally, or print/apply its Kubernetes manifests",
        description="Serve one engine config: --target local starts it and waits for health (Ctrl-C stops it); "
        "--target kubernetes builds a Deployment + Service (--dry-run prints them as YAML).",
    )
    p.add_argument("--engine", required=True, choices=sorted(registry.ADAPTERS))
    p.add_argument("--model", required=True, help="Hub name or local path (emulator: its spec name)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs")
    p.add_argument("--precision", default="bf16", choices=["fp16", "bf16", "fp8", "int4-awq"])
    p.add_argument("--config-name", help="name of this config (default: the engine)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine option, repeatable (e.g. max_model_len=4096, enable_prefix_caching=true)",
    )
    p.add_argument("--target", choices=["local", "kubernetes"], default="local")
    p.add_argument("--dry-run", action="store_true", help="print the command line (local) or manifests (kubernetes)")
    p.add_argument("--host", default="127.0.0.1", help="local: address to listen on")
    p.add_argument(
        "--port", type=port_number, default=0, help="local: 0 picks a free port; kubernetes: container port (8000)"
    )
    p.add_argument(
        "--health-timeout",
        type=finite_float(0, strict_minimum=True),
        default=1800.0,
        help="local: seconds to wait for health",
    )
    p.add_argument("--log", help="local: server log file")
    p.add_argument("--artifact-path", help="compiled engine folder (TensorRT-LLM); default: the engine cache")
    p.add_argument("--image", help="kubernetes: container image (default per engine)")
    p.add_argument("--namespace", default="wattbench", help="kubernetes namespace")
    p.add_argument("--gpu-product", help="kubernetes: node selector nvidia.com/gpu.product, e.g. NVIDIA-H100-80GB-HBM3")
    p.add_argument("--shm-size", default="16Gi", help="kubernetes: /dev/shm size")
    p.add_argument("--models-pvc", help="kubernetes: PersistentVolumeClaim mounted at /models")
    p.add_argument("--hf-token-secret", help="kubernetes: Secret holding HF_TOKEN")
    p.add_argument("--gpu", default="h100-sxm", help="emulator: GPU spec")
    p.add_argument("--profile", help="emulator: trtllm-like | vllm-like")
    p.set_defaults(func=_deploy)

    # Everything after the subcommand goes to tiny_model.main(argv) unparsed ('+' prefix: '--out' stays an argument).
    t = sub.add_parser(
        "make-tiny-model",
        prefix_chars="+",
        add_help=False,
        help="build a random-initialised Llama-shaped model + tokenizer (needs torch, transformers)",
    )
    t.add_argument("tiny_args", nargs="*")
    t.set_defaults(func=_make_tiny_model)
