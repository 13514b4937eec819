"""A pre-quantized fp8 copy of a 16-bit Llama checkpoint, in the format vLLM reads as `quant_method: fp8`.

    python3 mkfp8.py SRC_FOLDER OUT_FOLDER

Every linear layer of the decoder (q/k/v/o, gate/up/down) becomes fp8 e4m3 weights with one per-tensor scale
(amax / 448) and a static activation scale: the amax of its input over a calibration batch of random token ids
(8 sequences of 512), divided by 448. Embeddings, norms and lm_head stay 16-bit, as in published fp8 checkpoints
(AutoFP8 / llm-compressor "FP8" with static activations). The source model has random weights, so the calibration
text does not matter for speed; the scales are real ones for these weights. Runs on the GPU node (torch,
transformers, safetensors), about a minute for the 8B model.
"""

import json
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def main(src: str, out: str) -> None:
    t0 = time.time()
    src_p, out_p = Path(src), Path(out)
    model = LlamaForCausalLM.from_pretrained(src_p, torch_dtype=torch.bfloat16).to("cuda").eval()
    amax: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(_mod, args):
            a = args[0].detach().abs().amax().float()
            amax[name] = torch.maximum(amax[name], a) if name in amax else a

        return record

    handles = [
        mod.register_forward_pre_hook(hook(name))
        for name, mod in model.named_modules()
        if name.split(".")[-1] in LINEARS
    ]
    gen = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (8, 512), device="cuda", generator=gen)
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    print(f"calibrated {len(amax)} linear inputs in {time.time() - t0:.1f} s", flush=True)

    state = {}
    for name, tensor in model.state_dict().items():
        layer = name.rsplit(".", 1)[0]
        if name.endswith(".weight") and layer.split(".")[-1] in LINEARS:
            w = tensor.float()
            scale = (w.abs().amax() / FP8_MAX).clamp(min=1e-12)
            state[name] = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).cpu()
            state[f"{layer}.weight_scale"] = scale.reshape(()).cpu()
            state[f"{layer}.input_scale"] = (amax[layer] / FP8_MAX).clamp(min=1e-12).reshape(()).cpu()
        else:
            state[name] = tensor.contiguous().cpu()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    out_p.mkdir(parents=True, exist_ok=True)
    save_file(state, out_p / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((src_p / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}
    (out_p / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in src_p.iterdir():  # tokenizer, chat template, generation config: everything but weights and config
        if f.is_file() and f.name != "config.json" and "safetensors" not in f.name and not f.name.startswith("."):
            shutil.copy(f, out_p / f.name)
    size = sum(f.stat().st_size for f in out_p.iterdir()) / 2**30
    print(f"wrote {out_p} ({size:.1f} GiB) in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
