#!/usr/bin/env python3
"""make_int4_fixture.py — the compressed-tensors pack-quantized INT4 fixture (tests/data/int4/).

Purpose
  Kimi K2-Thinking, K2.5 and K2.6 publish their routed experts in compressed-tensors'
  `pack-quantized` format: symmetric INT4, one scale per group of 32 inputs. This script lets
  PyPI's compressed-tensors itself write and read back a few such weights, so that the C++
  loader (src/checkpoint/int4.cpp) can be checked against it bit for bit
  (tests/unit/test_int4.cpp, suite `int4`):

  1. a torch module tree named like a Kimi MoE layer (routed experts' gate/up/down_proj, plus a
     shared expert and an attention projection that the `ignore` list keeps unquantized), with
     weights in bfloat16 (what Kimi ships), float32 and float16 (the scale takes the weight's
     dtype, and the dequantized weight the scale's);
  2. compressed-tensors' apply_quantization_config with Kimi's scheme (int, 4 bits, symmetric,
     strategy group, group_size 32, targets Linear, Kimi's ignore list);
  3. per-group scales from compressed-tensors' calculate_qparams on each group's min and max
     (what llm-compressor's min-max observer hands it), stored in the module's weight_scale;
  4. ModelCompressor.compress_model (CPU) -> the state dict written as model.safetensors, and
     ModelCompressor.update_config -> config.json's quantization_config;
  5. ModelCompressor.decompress_model on the compressed model -> the dequantized weights, written
     as expected.safetensors under their plain names (`...gate_proj.weight`).

Output (DIR, default tests/data/int4), a few KB:
  config.json          a small DeepSeek-V3 attention config (so that the C++ Checkpoint opens
                       the fixture) plus the quantization_config exactly as compressed-tensors'
                       ModelCompressor.update_config writes it
  model.safetensors    weight_packed (I32), weight_scale (BF16/F32/F16), weight_shape (I64) of
                       every quantized Linear; the ignored Linears' plain BF16 `weight`
  expected.safetensors every Linear's weight after compressed-tensors' decompression
  source.safetensors   every quantized Linear's weight before compression (what the C++
                       quantizer of `mla-h2o synth` must turn into the same bytes)

Shapes: columns a multiple of 32 but not always of 64 (96, 160), odd row counts, and one
weight whose groups include an exact zero group (scale = the dtype's eps), so that the
packing order, the group index, the sign offset and the rounding of the product are all
exercised. The bf16 scales have arbitrary mantissas, so q * scale needs rounding to bf16 in
many elements (an implementation that truncates, or that multiplies in a wider type and
keeps it, fails).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SEED = 20260517

# name -> (out_features, in_features, torch dtype name)
QUANTIZED = {
    "model.layers.1.mlp.experts.0.gate_proj": (6, 96, "bfloat16"),
    "model.layers.1.mlp.experts.0.up_proj": (6, 96, "bfloat16"),
    "model.layers.1.mlp.experts.0.down_proj": (24, 32, "bfloat16"),
    "model.layers.1.mlp.experts.1.gate_proj": (5, 160, "bfloat16"),
    "model.layers.1.mlp.experts.1.up_proj": (3, 96, "float32"),
    "model.layers.1.mlp.experts.1.down_proj": (7, 64, "float16"),
}
IGNORED = {
    "model.layers.1.mlp.shared_experts.gate_proj": (4, 96, "bfloat16"),
    "model.layers.1.self_attn.o_proj": (4, 32, "bfloat16"),
}
# Kimi K2.5 / K2.6's ignore list (text_config.quantization_config.ignore).
IGNORE = [
    "re:.*self_attn.*",
    "re:.*shared_experts.*",
    r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
    "re:.*lm_head.*",
]


# The attention geometry config.json needs so that the C++ Checkpoint opens the fixture (no
# attention tensor is in it; the loader is asked for the experts by name).
BASE_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "num_hidden_layers": 2,
    "vocab_size": 97, "max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": None,
}


def build_model(torch):
    root = torch.nn.Module()
    for name, (out_f, in_f, dtype) in {**QUANTIZED, **IGNORED}.items():
        parent = root
        parts = name.split(".")
        for p in parts[:-1]:
            if not hasattr(parent, p):
                parent.add_module(p, torch.nn.Module())
            parent = getattr(parent, p)
        lin = torch.nn.Linear(in_f, out_f, bias=False, dtype=getattr(torch, dtype))
        parent.add_module(parts[-1], lin)
    return root


def init_weights(torch, model):
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if not isinstance(mod, torch.nn.Linear):
                continue
            out_f, in_f = mod.weight.shape
            w = torch.randn(out_f, in_f, generator=g, dtype=torch.float64) / in_f ** 0.5
            # log-normal row gains, so scales spread over several binades
            w *= torch.exp(0.8 * torch.randn(out_f, 1, generator=g, dtype=torch.float64))
            if name.endswith("experts.1.gate_proj"):
                w[2, 32:64] = 0.0  # an all-zero group: scale becomes the dtype's eps
            mod.weight.copy_(w.to(mod.weight.dtype))


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(root, "tests", "data", "int4"))
    args = p.parse_args(argv)

    import torch
    import compressed_tensors
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationScheme,
                                                 QuantizationStatus, apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    from safetensors.torch import save_file

    torch.manual_seed(SEED)
    model = build_model(torch)
    init_weights(torch, model)
    source = {f"{n}.weight": model.get_submodule(n).weight.detach().clone() for n in QUANTIZED}

    weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32,
                               dynamic=False, observer="minmax")
    qconfig = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
        ignore=IGNORE,
        quantization_status=QuantizationStatus.INITIALIZED,
    )
    apply_quantization_config(model, qconfig)
    for name in QUANTIZED:
        mod = model.get_submodule(name)
        if not hasattr(mod, "weight_scale"):
            sys.exit(f"make_int4_fixture: {name} was not initialised for quantization")
    for name in IGNORED:
        if hasattr(model.get_submodule(name), "weight_scale"):
            sys.exit(f"make_int4_fixture: {name} should be ignored but was initialised for quantization")

    # Scales: calculate_qparams on each group's min and max (llm-compressor's min-max observer).
    with torch.no_grad():
        for name in QUANTIZED:
            mod = model.get_submodule(name)
            w = mod.weight
            groups = w.unflatten(-1, (w.shape[-1] // 32, 32))
            scale, zp = calculate_qparams(groups.amin(dim=-1), groups.amax(dim=-1), mod.quantization_scheme.weights)
            mod.weight_scale.data = scale.to(mod.weight_scale.dtype)
            if hasattr(mod, "weight_zero_point"):
                mod.weight_zero_point.data = zp.to(mod.weight_zero_point.dtype)

    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    compressed = {k: v.detach().contiguous() for k, v in model.state_dict().items()}

    os.makedirs(args.out_dir, exist_ok=True)
    config_path = os.path.join(args.out_dir, "config.json")
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(BASE_CONFIG, f)
    compressor.update_config(args.out_dir)
    meta = {"generator": "reference/python/make_int4_fixture.py", "seed": str(SEED),
            "compressed_tensors": compressed_tensors.__version__, "torch": torch.__version__}
    save_file(compressed, os.path.join(args.out_dir, "model.safetensors"), metadata=meta)
    save_file(source, os.path.join(args.out_dir, "source.safetensors"), metadata=meta)

    compressor.decompress_model(model)
    expected = {}
    for name in {**QUANTIZED, **IGNORED}:
        expected[f"{name}.weight"] = model.get_submodule(name).weight.detach().contiguous()
    save_file(expected, os.path.join(args.out_dir, "expected.safetensors"), metadata=meta)

    for name in QUANTIZED:
        packed = compressed[f"{name}.weight_packed"]
        scale = compressed[f"{name}.weight_scale"]
        shape = compressed[f"{name}.weight_shape"]
        out = expected[f"{name}.weight"]
        print(f"{name}: packed {packed.dtype} {list(packed.shape)}, scale {scale.dtype} {list(scale.shape)}, "
              f"shape {shape.dtype} {shape.tolist()} -> {out.dtype} {list(out.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
