#!/usr/bin/env python3
"""Fake TensorRT-LLM examples/quantization/quantize.py (ModelOpt): documented flags only; writes a checkpoint."""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import _fake  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--model_dir", default=None)
p.add_argument("--nemo_ckpt_path", default=None)
p.add_argument("--decoder_type", type=str, default="gptnext", choices=["gptnext", "llama"])
p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
p.add_argument("--device_map", default="auto", choices=["auto", "sequential", "cpu", "gpu"])
p.add_argument("--calib_dataset", type=str, default="cnn_dailymail")
p.add_argument("--dtype", type=str, default="auto", choices=["auto", "float16", "bfloat16", "float32"])
p.add_argument(
    "--qformat",
    default="full_prec",
    choices=["nvfp4", "fp8", "int8_sq", "int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "full_prec"],
)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--tokenizer_max_seq_length", type=int, default=2048)
p.add_argument("--batch_size", type=int, default=1)
p.add_argument("--calib_size", type=int, default=512)
p.add_argument("--calib_max_seq_length", type=int, default=512)
p.add_argument("--output_dir", default="exported_model")
p.add_argument("--tp_size", type=int, default=1)
p.add_argument("--pp_size", type=int, default=1)
p.add_argument("--cp_size", type=int, default=1)
p.add_argument("--awq_block_size", type=int, default=128)
p.add_argument("--kv_cache_dtype", default=None, choices=["int8", "fp8", None])
p.add_argument("--quantize_lm_head", action="store_true", default=False)
p.add_argument("--export_format", type=str, default="tensorrt_llm", choices=["tensorrt_llm", "hf"])
args = p.parse_args()
_fake.record("quantize.py", sys.argv[1:])
print(f"[TensorRT-LLM] TensorRT-LLM version: {_fake.TRTLLM_VERSION}", flush=True)
os.makedirs(args.output_dir, exist_ok=True)
world = args.tp_size * args.pp_size
cfg = {
    "architecture": "LlamaForCausalLM",
    "dtype": args.dtype,
    "source_model": args.model_dir,
    "mapping": {"world_size": world, "tp_size": args.tp_size, "pp_size": args.pp_size},
    "quantization": {
        "quant_algo": args.qformat.upper(),
        "kv_cache_quant_algo": args.kv_cache_dtype,
        "group_size": args.awq_block_size if "awq" in args.qformat else None,
    },
}
with open(os.path.join(args.output_dir, "config.json"), "w") as fh:
    json.dump(cfg, fh)
for r in range(world):
    with open(os.path.join(args.output_dir, f"rank{r}.safetensors"), "wb") as fh:
        fh.write(b"Q" * 512)
print(f"Quantized model exported to :{args.output_dir}", flush=True)
