"""`wattbench emulate`: start the emulator's HTTP server (see docs/EMULATOR.md)."""

from __future__ import annotations

import argparse
import sys

from wattbench_agent.emulator.profiles import PROFILES, ConfigError, EngineStartupError, parse_config_items, setup
from wattbench_agent.emulator.specs import SpecError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "emulate", help="serve an EMULATED engine (OpenAI API, /metrics, /emulator/telemetry) from a performance model",
        description="Start a real HTTP server whose timing and GPU telemetry come from the emulator's performance "
                    "model (labelled source=emulated). Exits non-zero before listening when the config does not fit.")
    p.add_argument("--profile", choices=PROFILES, default="vllm-like")
    p.add_argument("--model", required=True, help="llama-3.1-8b, llama-3-70b, llama-3.1-70b, llama-3.1-405b, "
                                                  "mixtral-8x7b, qwen2.5-72b (or their Hub names)")
    p.add_argument("--gpu", default="h100-sxm", help="h100-sxm, h100-pcie, h200, a100-80gb")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs")
    p.add_argument("--precision", default="bf16", help="fp16, bf16, fp8, int4-awq")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on the listening line)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="engine knob, repeatable (e.g. max_batch_size=128, max_num_seqs=256, block_size=16)")
    p.add_argument("--seed", type=int, default=0, help="seeds token text and GPU uuids")
    p.add_argument("--check", action="store_true", help="check that the config fits, print it as JSON, and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        st = setup(args.profile, args.model, args.gpu, args.tp, args.precision, parse_config_items(args.config))
    except (SpecError, ConfigError) as e:
        print(f"wattbench emulate: error: {e}", file=sys.stderr)
        return 2
    except EngineStartupError as e:
        print(f"wattbench emulate ({args.profile}, emulated): {e.kind}: {e.text}", file=sys.stderr)
        return 1
    if args.check:
        import json

        print(json.dumps(st.summary(), indent=2))
        return 0
    from wattbench_agent.emulator.server import serve

    try:
        return serve(st, args.host, args.port, args.seed)
    except OSError as e:
        print(f"wattbench emulate: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
