#!/usr/bin/env python3
"""Fake TensorRT-LLM examples/llama/convert_checkpoint.py (0.18): documented flags only; writes a checkpoint."""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import _fake  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--model_dir", type=str, default=None)
p.add_argument("--meta_ckpt_dir", type=str, default=None)
p.add_argument("--tp_size", type=int, default=1)
p.add_argument("--pp_size", type=int, default=1)
p.add_argument("--dtype", type=str, default="float16", choices=["float32", "bfloat16", "float16"])
p.add_argument("--use_weight_only", action="store_true")
p.add_argument(
    "--weight_only_precision",
    const="int8",
    type=str,
    nargs="?",
    default="int8",
    choices=["int8", "int4", "int8_gptq", "int4_gptq", "int4_awq"],
)
p.add_argument("--calib_dataset", type=str, default="ccdv/cnn_dailymail")
p.add_argument("--calib_size", type=int, default=512)
p.add_argument("--smoothquant", "-sq", type=float, default=None)
p.add_argument("--per_channel", action="store_true")
p.add_argument("--per_token", action="store_true")
p.add_argument("--int8_kv_cache", action="store_true")
p.add_argument("--fp8_kv_cache", action="store_true")
p.add_argument("--use_fp8", action="store_true")
p.add_argument("--use_fp8_rowwise", action="store_true")
p.add_argument("--per_group", action="store_true")
p.add_argument("--load_by_shard", action="store_true")
p.add_argument("--group_size", type=int, default=128)
p.add_argument("--load_model_on_cpu", action="store_true")
p.add_argument("--use_parallel_embedding", action="store_true")
p.add_argument("--output_dir", type=str, default="tllm_checkpoint")
p.add_argument("--workers", type=int, default=1)
p.add_argument("--log_level", type=str, default="info")
args = p.parse_args()
_fake.record("convert_checkpoint.py", sys.argv[1:])
print(f"[TensorRT-LLM] TensorRT-LLM version: {_fake.TRTLLM_VERSION}", flush=True)
if _fake.scenario("FAKE_ENGINE_FAIL_CONVERT", "convert_checkpoint.py", sys.argv[1:]):
    print("Traceback (most recent call last):\nKeyError: 'model.layers.0.self_attn.q_proj.weight'", flush=True)
    sys.exit(1)
os.makedirs(args.output_dir, exist_ok=True)
world = args.tp_size * args.pp_size
cfg = {
    "architecture": "LlamaForCausalLM",
    "dtype": args.dtype,
    "source_model": args.model_dir,
    "mapping": {"world_size": world, "tp_size": args.tp_size, "pp_size": args.pp_size},
    "quantization": {"quant_algo": "FP8" if args.use_fp8 else None},
}
with open(os.path.join(args.output_dir, "config.json"), "w") as fh:
    json.dump(cfg, fh)
for r in range(world):
    with open(os.path.join(args.output_dir, f"rank{r}.safetensors"), "wb") as fh:
        fh.write(b"W" * 1024)
print("Total time of converting checkpoints: 00:00:00", flush=True)
