"""Fake `python -m sglang.launch_server` (SGLang 0.5 documented server arguments, a subset)."""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
import _fake  # noqa: E402

p = argparse.ArgumentParser(prog="sglang.launch_server")
p.add_argument("--model-path", "--model", dest="model_path", required=True)
p.add_argument("--tokenizer-path", type=str, default=None)
p.add_argument("--host", type=str, default="127.0.0.1")
p.add_argument("--port", type=int, default=30000)
p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
p.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
p.add_argument(
    "--quantization",
    default=None,
    choices=[
        "awq",
        "fp8",
        "gptq",
        "marlin",
        "gptq_marlin",
        "awq_marlin",
        "bitsandbytes",
        "gguf",
        "modelopt",
        "modelopt_fp4",
        "w8a8_int8",
        "w8a8_fp8",
        "compressed-tensors",
    ],
)
p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8_e5m2", "fp8_e4m3"])
p.add_argument("--context-length", type=int, default=None)
p.add_argument("--max-running-requests", type=int, default=None)
p.add_argument("--max-total-tokens", type=int, default=None)
p.add_argument("--mem-fraction-static", type=float, default=None)
p.add_argument("--chunked-prefill-size", type=int, default=None)
p.add_argument("--max-prefill-tokens", type=int, default=16384)
p.add_argument("--schedule-policy", default="fcfs", choices=["lpm", "random", "fcfs", "dfs-weight"])
p.add_argument("--disable-radix-cache", action="store_true")
p.add_argument("--disable-cuda-graph", action="store_true")
p.add_argument("--cuda-graph-max-bs", type=int, default=None)
p.add_argument("--served-model-name", type=str, default=None)
p.add_argument("--trust-remote-code", action="store_true")
p.add_argument("--random-seed", type=int, default=None)
p.add_argument("--enable-metrics", action="store_true")
args = p.parse_args()
argv = sys.argv[1:]
_fake.record("sglang", argv)
_fake.start_failures("sglang", argv)
print(
    "[TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.12 GB, "
    "mem usage=1.25 GB, elapsed=0.04 s.",
    flush=True,
)
print("[TP0] Capture cuda graph end. Time elapsed: 0.03 s. mem usage=0.10 GB.", flush=True)
names = [args.served_model_name or args.model_path]
sys.exit(
    _fake.FakeServer(
        "sglang",
        argv,
        names,
        metrics="sglang" if args.enable_metrics else None,
        health_paths=("/health", "/health_generate"),
    ).serve(args.host, args.port)
)
