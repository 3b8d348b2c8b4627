#!/usr/bin/env python3
"""make_whole_model_fixture.py — the whole-model golden fixtures (tests/data/golden/whole-model*/).

Purpose
  Tiny random transformers DeepseekV3ForCausalLM models written by transformers' own
  save_pretrained (config.json in transformers 5's rope_parameters layout, model.safetensors in
  bfloat16 with the MoE router in float32, as transformers keeps it), loaded back with
  from_pretrained and run on fixed token ids in float32 and in bfloat16 by dump_hidden_states.py.
  The suites `sweep` (per-layer attention through `run --residual`) and `model` (the whole-model
  forward: every layer's hidden states, the routed experts, the logits) read them.

Fixtures (DIR = tests/data/golden):
  whole-model         3 layers, layer 0 dense, 1-2 MoE (8 experts in 2 groups, topk_group 1, 2 per
                      token, 1 shared), q_lora_rank 40, yarn
  whole-model-qproj   q_lora_rank null (q_proj), attention_bias true, tie_word_embeddings true,
                      norm_topk_prob false, 2 shared experts; 2 layers (1 dense, 1 MoE)
  whole-model-groups  16 experts in 4 groups, topk_group 2, 4 per token: group-limited routing
                      that really excludes groups (checked: for some tokens the 4 best experts
                      overall are not the 4 chosen); 3 layers (1 dense, 2 MoE)
  whole-model-v2      transformers DeepseekV2ForCausalLM shaped as DeepSeek-V2-Lite: q_lora_rank
                      null (q_proj), softmax routing, topk_method greedy, norm_topk_prob false,
                      2 shared experts, yarn factor 40 with mscale = mscale_all_dim = 0.707
                      (V2-Lite's rope_scaling); 3 layers (1 dense, 2 MoE), 8 experts, 2 per token
  whole-model-v2-groups  DeepseekV2ForCausalLM shaped as DeepSeek-V2: q_lora_rank 32,
                      group_limited_greedy over 16 experts in 4 groups, topk_group 2, 4 per token
                      (checked to exclude groups somewhere), routed_scaling_factor 16, mscale 1.0
                      beside mscale_all_dim 0.707 (so the cos/sin attention factor is not 1)

Output of each (DIR/<name>):
  model/            what save_pretrained wrote (config.json, generation_config.json,
                    model.safetensors), committed as it is
  tokens.txt        the token ids (S = 20)
  fp32.safetensors  dump_hidden_states.py --dtype float32
  bf16.safetensors  dump_hidden_states.py --dtype bfloat16

Weights: torch.manual_seed(SEED), then every 2-D weight N(0, (gain / sqrt(fan_in))^2) (gain 1.5
on the attention projections so that attention is far from uniform), embeddings N(0, 1),
every RMSNorm weight 1 + 0.25 N(0, 1) (so that a norm weight that is not applied is noticed),
other 1-D parameters N(0, 0.1^2), the MoE router bias e_score_correction_bias N(0, 0.1^2); then
rounded to bfloat16 (the stored dtype), so the fp32 and bf16 runs use the same weights. The MoE
router's weight and bias: in whole-model rounded to bfloat16 too (stored BF16, widened by
transformers); in the other fixtures redrawn in float32 (weight N(0, 1/H), bias N(0, 0.1^2)) and
stored F32, as transformers keeps the router and as a trained model ships it.
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


def build_v2_config(**overrides):
    """A tiny DeepseekV2Config with V2-Lite's conventions (overrides change them)."""
    from transformers import DeepseekV2Config

    keys = dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=24, num_hidden_layers=3,
        first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=2,
        n_routed_experts=8, num_experts_per_tok=2, n_group=None, topk_group=None, topk_method="greedy",
        routed_scaling_factor=1.0, norm_topk_prob=False, q_lora_rank=None, kv_lora_rank=24,
        qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=12, max_position_embeddings=1280,
        rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 0.707, "mscale_all_dim": 0.707},
    )
    keys.update(overrides)
    cfg = DeepseekV2Config(**keys)
    cfg._attn_implementation = "eager"
    return cfg


def build_config(**overrides):
    from transformers import DeepseekV3Config

    keys = dict(
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
    keys.update(overrides)
    cfg = DeepseekV3Config(**keys)
    cfg._attn_implementation = "eager"
    return cfg


# name -> (config overrides, layer MLP types expected)
FIXTURES = {
    "whole-model": ({}, ["DeepseekV3MLP", "DeepseekV3MoE", "DeepseekV3MoE"]),
    "whole-model-qproj": (dict(q_lora_rank=None, attention_bias=True, tie_word_embeddings=True, norm_topk_prob=False,
                               n_shared_experts=2, num_hidden_layers=2, routed_scaling_factor=1.5),
                          ["DeepseekV3MLP", "DeepseekV3MoE"]),
    "whole-model-groups": (dict(hidden_size=48, n_routed_experts=16, n_group=4, topk_group=2, num_experts_per_tok=4,
                                moe_intermediate_size=16, intermediate_size=64, q_lora_rank=32, kv_lora_rank=16,
                                routed_scaling_factor=2.827),
                           ["DeepseekV3MLP", "DeepseekV3MoE", "DeepseekV3MoE"]),
    "whole-model-v2": (dict(family="v2"), ["DeepseekV2MLP", "DeepseekV2Moe", "DeepseekV2Moe"]),
    "whole-model-v2-groups": (dict(family="v2", hidden_size=48, n_routed_experts=16, n_group=4, topk_group=2,
                                   num_experts_per_tok=4, topk_method="group_limited_greedy", moe_intermediate_size=16,
                                   intermediate_size=64, q_lora_rank=32, kv_lora_rank=16, routed_scaling_factor=16.0,
                                   rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                                    "original_max_position_embeddings": 32, "beta_fast": 32.0,
                                                    "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.707}),
                              ["DeepseekV2MLP", "DeepseekV2Moe", "DeepseekV2Moe"]),
}


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


def fp32_routers(torch, model):
    """The MoE routers back in float32 with values that are not bfloat16 values, as transformers
    keeps them (_keep_in_fp32_modules_strict) and as a trained model ships them: a forward that
    rounds the router to bf16 in a bf16 run is then caught."""
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is None:
            continue
        with torch.no_grad():
            w = torch.randn(gate.weight.shape, dtype=torch.float32) / math.sqrt(gate.weight.shape[-1])
            gate.weight.data = w
            if hasattr(gate, "e_score_correction_bias"):  # DeepseekV3's router; V2's has none
                gate.e_score_correction_bias.data = 0.1 * torch.randn(gate.e_score_correction_bias.shape,
                                                                      dtype=torch.float32)


def groups_excluded_somewhere(torch, model, tokens) -> int:
    """Tokens (over the MoE layers) whose k best bias-corrected experts overall are not the k the
    group-limited router chose: the exclusion of groups changed the routing."""
    chosen, changed = {}, 0

    def hook(idx):
        def h(module, args, output):
            x = args[0].view(-1, module.hidden_dim).float()
            if hasattr(module, "e_score_correction_bias"):
                choice = (x @ module.weight.float().T).sigmoid() + module.e_score_correction_bias
            else:  # DeepseekV2: softmax scores, no bias
                choice = (x @ module.weight.float().T).softmax(dim=-1)
            best = choice.topk(module.top_k, dim=-1)[1].sort(dim=-1)[0]
            chosen[idx] = (best, output[2].sort(dim=-1)[0])
        return h

    handles = [layer.mlp.gate.register_forward_hook(hook(i))
               for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")]
    with torch.no_grad():
        model(input_ids=torch.tensor([tokens]), use_cache=False)
    for h in handles:
        h.remove()
    for best, got in chosen.values():
        changed += int((best != got).any(dim=-1).sum())
    return changed


def make_fixture(torch, name, out_dir, here):
    from transformers import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM

    overrides, expected_mlps = FIXTURES[name]
    overrides = dict(overrides)
    v2 = overrides.pop("family", "v3") == "v2"
    model_class = DeepseekV2ForCausalLM if v2 else DeepseekV3ForCausalLM
    torch.manual_seed(SEED)
    cfg = build_v2_config(**overrides) if v2 else build_config(**overrides)
    model = model_class(cfg).eval()
    init_weights(torch, model)
    model = model.to(torch.bfloat16)
    if name != "whole-model":
        fp32_routers(torch, model)

    model_dir = os.path.join(out_dir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(model_dir)

    # from_pretrained must give back exactly the saved weights.
    back = model_class.from_pretrained(model_dir, dtype=torch.bfloat16)
    saved = model.state_dict()
    for key, t in back.state_dict().items():
        if key in saved and not torch.equal(saved[key].float(), t.float()):
            sys.exit(f"make_whole_model_fixture: {name}: {key} differs after from_pretrained")
    layer_types = [type(layer.mlp).__name__ for layer in back.model.layers]
    print(f"make_whole_model_fixture: {name}: layers' MLPs: {layer_types}")
    if layer_types != expected_mlps:
        sys.exit(f"make_whole_model_fixture: {name}: expected {expected_mlps}")
    if name in ("whole-model-groups", "whole-model-v2-groups"):
        changed = groups_excluded_somewhere(torch, back, TOKENS)
        print(f"make_whole_model_fixture: {name}: {changed} token-layers routed differently than ungrouped top-k")
        if changed == 0:
            sys.exit(f"make_whole_model_fixture: {name}: group-limited routing excluded nothing")

    tokens = os.path.join(out_dir, "tokens.txt")
    with open(tokens, "w", encoding="utf-8") as f:
        f.write(",".join(str(t) for t in TOKENS) + "\n")
    for dtype, tag in (("float32", "fp32"), ("bfloat16", "bf16")):
        # relative paths, so the metadata names no machine's directories
        subprocess.run([sys.executable, os.path.join(here, "dump_hidden_states.py"), "--checkpoint", "model",
                        "--tokens", "tokens.txt", "--dtype", dtype, "--out", f"{tag}.safetensors"],
                       check=True, cwd=out_dir)


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default=os.path.join(root, "tests", "data", "golden"),
                   help="the directory that holds the fixtures' folders")
    p.add_argument("--only", choices=sorted(FIXTURES), help="make one fixture")
    args = p.parse_args(argv)

    import torch

    for name in FIXTURES:
        if args.only in (None, name):
            make_fixture(torch, name, os.path.join(args.out_dir, name), here)
    return 0


if __name__ == "__main__":
    sys.exit(main())
