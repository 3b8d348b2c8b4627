#!/usr/bin/env python3
"""make_whole_model_fixture.py — the whole-model golden fixture (tests/data/golden/whole-model/).

Purpose
  A tiny random transformers DeepseekV3ForCausalLM — 3 decoder layers, the first dense and the
  other two MoE (first_k_dense_replace=1), yarn RoPE, a geometry of its own — written by
  transformers' own save_pretrained (config.json in transformers 5's rope_parameters layout,
  model.safetensors in bfloat16), loaded back with from_pretrained, and run on fixed token ids
  in float32 and in bfloat16 by dump_hidden_states.py. The suite `sweep`
  (tests/unit/test_sweep.cpp) checks that `mla-h2o run --tokens` on layer 0 and
  `mla-h2o run --input --residual` on every layer reproduce the model's per-layer attention
  weights, and that `mla-h2o sweep` over the checkpoint equals per-layer runs.

Output (DIR, default tests/data/golden/whole-model):
  model/            what save_pretrained wrote (config.json, generation_config.json,
                    model.safetensors), committed as it is
  tokens.txt        the token ids (S = 20)
  fp32.safetensors  dump_hidden_states.py --dtype float32
  bf16.safetensors  dump_hidden_states.py --dtype bfloat16

Weights: torch.manual_seed(SEED), then every 2-D weight N(0, (gain / sqrt(fan_in))^2) (gain 1.5
on the attention projections so that attention is far from uniform), embeddings N(0, 1),
every RMSNorm weight 1 + 0.25 N(0, 1) (so that a norm weight that is not applied is noticed),
the MoE router bias e_score_correction_bias N(0, 0.1^2); then rounded to bfloat16 (the stored
dtype), so the fp32 and bf16 runs use the same weights.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys

SEED = 20261130
TOKENS = [1, 17, 93, 5, 42, 42, 7, 120, 64, 3, 17, 88, 101, 9, 56, 77, 2, 42, 127, 30]


def build_config():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=24,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        q_lora_rank=40,
        kv_lora_rank=24,
        qk_nope_head_dim=12,
        qk_rope_head_dim=8,
        v_head_dim=12,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_interleave=True,
        attention_bias=False,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "original_max_position_embeddings": 32,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    )
    cfg._attn_implementation = "eager"
    return cfg


def init_weights(torch, model):
    attention = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.25 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.normal_(0.0, 1.0)
            elif p.dim() >= 2:
                fan_in = p.shape[-1]
                gain = 1.5 if any(a in name for a in attention) else 1.0
                p.normal_(0.0, gain / math.sqrt(fan_in))
            else:
                p.normal_(0.0, 0.1)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.1)


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(root, "tests", "data", "golden", "whole-model"))
    args = p.parse_args(argv)

    import torch
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(SEED)
    cfg = build_config()
    model = DeepseekV3ForCausalLM(cfg).eval()
    init_weights(torch, model)
    model = model.to(torch.bfloat16)

    model_dir = os.path.join(args.out_dir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(model_dir)

    # from_pretrained must give back exactly the saved weights.
    back = DeepseekV3ForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    saved = model.state_dict()
    for name, t in back.state_dict().items():
        if name in saved and not torch.equal(saved[name], t):
            sys.exit(f"make_whole_model_fixture: {name} differs after from_pretrained")
    layer_types = [type(layer.mlp).__name__ for layer in back.model.layers]
    print(f"make_whole_model_fixture: layers' MLPs: {layer_types}")
    if layer_types[0] == layer_types[1] or layer_types[1] != layer_types[2]:
        sys.exit("make_whole_model_fixture: expected one dense layer followed by two MoE layers")

    tokens = os.path.join(args.out_dir, "tokens.txt")
    with open(tokens, "w", encoding="utf-8") as f:
        f.write(",".join(str(t) for t in TOKENS) + "\n")
    for dtype, name in (("float32", "fp32"), ("bfloat16", "bf16")):
        # relative paths, so the metadata names no machine's directories
        subprocess.run([sys.executable, os.path.join(here, "dump_hidden_states.py"), "--checkpoint", "model",
                        "--tokens", "tokens.txt", "--dtype", dtype, "--out", f"{name}.safetensors"],
                       check=True, cwd=args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
