"""`wattbench emulate`: start the emulator's HTTP server (see docs/EMULATOR.md)."""

from __future__ import annotations

import argparse
import os
import sys

from wattbench_agent.argtypes import finite_float, port_number
from wattbench_agent.emulator.profiles import (
    PROFILES,
    ConfigError,
    EngineStartupError,
    parse_config_items,
    setup,
    with_server_start,
)
from wattbench_agent.emulator.specs import SpecError
from wattbench_agent.http_request import IDLE_TIMEOUT_S, REQUEST_TIMEOUT_S

# With no flags: a small model on one GPU, the smallest deployment that serves at once.
DEFAULTS = {"profile": "vllm-like", "model": "llama-3.1-8b", "gpu": "h100-sxm", "tp": 1, "precision": "bf16"}


def describe(args: argparse.Namespace, st) -> str:
    """One line: what is emulated, which of it are defaults, and the model name requests should carry."""
    d = st.dep
    given = [k for k in ("profile", "model", "gpu", "tp", "precision") if getattr(args, k) == DEFAULTS[k]]
    served = st.options.get("served_model_name") or d.model.id
    return (
        f"wattbench emulate: emulating a {args.profile} engine serving {d.model.id} ({d.model.hf_id}) on "
        f"{d.tp}x {d.gpu.name} at {d.precision.id}; requests name the model {served!r}"
        + (f" (defaults used: {', '.join(f'--{k} {DEFAULTS[k]}' for k in given)})" if given else "")
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "emulate",
        help="serve an EMULATED engine (OpenAI API, /metrics, /emulator/telemetry) from a performance model",
        description="Start a real HTTP server whose timing and GPU telemetry come from the emulator's performance "
        "model (labelled source=emulated). Exits non-zero before listening when the config does not fit.",
    )
    p.add_argument("--profile", choices=PROFILES, default=DEFAULTS["profile"])
    p.add_argument(
        "--model",
        default=DEFAULTS["model"],
        help=f"llama-3.1-8b, llama-3-70b, llama-3.1-70b, llama-3.1-405b, mixtral-8x7b, qwen2.5-72b (or their "
        f"Hub names); default {DEFAULTS['model']}",
    )
    p.add_argument("--gpu", default=DEFAULTS["gpu"], help="h100-sxm, h100-pcie, h200, a100-80gb")
    p.add_argument("--tp", type=int, default=DEFAULTS["tp"], help="tensor-parallel GPUs")
    p.add_argument("--precision", default=DEFAULTS["precision"], help="fp16, bf16, fp8, int4-awq")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8000, help="0 picks a free port (printed on the listening line)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine knob, repeatable (e.g. max_batch_size=128, max_num_seqs=256, block_size=16)",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds token text and GPU uuids")
    p.add_argument(
        "--server-start",
        type=int,
        default=None,
        help="which start of this engine this is, 1-based (default: $WATTBENCH_SERVER_START, set by the bench agent, "
        "or 1): a later start runs a few percent faster or slower, as a real engine's starts do (docs/EMULATOR.md)",
    )
    p.add_argument(
        "--request-timeout",
        type=finite_float(minimum=0, strict_minimum=True),
        default=REQUEST_TIMEOUT_S,
        help="seconds a request may take to arrive whole, from its first byte (then 408, and the connection "
        "is closed; default %(default)g)",
    )
    p.add_argument(
        "--idle-timeout",
        type=finite_float(minimum=0, strict_minimum=True),
        default=IDLE_TIMEOUT_S,
        help="seconds a kept-alive connection may stay idle before it is closed (default %(default)g)",
    )
    p.add_argument("--check", action="store_true", help="check that the config fits, print it as JSON, and exit")
    p.set_defaults(func=run)


def _env_start() -> int:
    from wattbench_agent.wire import SERVER_START_ENV

    text = os.environ.get(SERVER_START_ENV, "1")
    return int(text) if text.isdigit() and 1 <= int(text) <= 1000 else 1


def run(args: argparse.Namespace) -> int:
    try:
        st = setup(args.profile, args.model, args.gpu, args.tp, args.precision, parse_config_items(args.config))
    except (SpecError, ConfigError) as e:
        print(f"wattbench emulate: error: {e}", file=sys.stderr)
        return 2
    except EngineStartupError as e:
        print(f"wattbench emulate ({args.profile}, emulated): {e.kind}: {e.text}", file=sys.stderr)
        return 1
    start = args.server_start if args.server_start is not None else _env_start()
    st = with_server_start(st, start, args.seed)
    if args.check:
        import json

        print(json.dumps(st.summary(), indent=2))
        return 0
    from wattbench_agent.emulator.server import serve

    print(describe(args, st), file=sys.stderr, flush=True)

    try:
        return serve(st, args.host, args.port, args.seed, args.request_timeout, args.idle_timeout)
    except OSError as e:
        print(f"wattbench emulate: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
