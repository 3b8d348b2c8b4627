#!/usr/bin/env python3
"""make_golden.py — golden tensors from Hugging Face transformers' DeepseekV3Attention (or
DeepseekV2Attention, for a model_type deepseek_v2 checkpoint).

Purpose
  Runs ONE layer of `transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention`
  (attn_implementation="eager", eval mode, no cache) on a checkpoint written by
  `mla-h2o synth` (or any DeepSeek-V3 / Kimi K2.x checkpoint with that layout) and writes one
  safetensors file per (precision, mask) case with every tensor the C++ backends produce, in
  HF's own layout with the batch dimension dropped. These files are the project's golden
  fixtures (tests/data/golden/, compared by tests/unit/test_golden.cpp) and the "HF" side of
  scripts/crosscheck. The C++ product never needs Python: only fixture regeneration does.

  Every step of the attention is HF's own code: the module's forward, its submodules
  (q_a_proj, q_a_layernorm, ...), its RoPE function and eager_attention_forward. The
  query/key/value states are captured by wrapping eager_attention_forward (the exact tensors
  HF hands to QK^T); nothing is recomputed here. Weights are read with the `safetensors`
  package's own reader, so the C++ writer is checked by the reference reader.

How each case is run (docs/math.md §3, §7, §8)
  fp32: module parameters float32 (widened exactly from the checkpoint), hidden states fp32.
  bf16: module parameters bfloat16, hidden states bfloat16, and the rotary module's
        `inv_freq` buffer kept in float32 -- what `from_pretrained(dtype=torch.bfloat16)`
        produces. (Calling `.to(torch.bfloat16)` on a module holding the buffer would round
        inv_freq too; the rotary module is therefore never converted.)
  position ids 0..S-1; (cos, sin) = DeepseekV3RotaryEmbedding(config)(hidden, position_ids).
  mask "none":   attention_mask=None (eager: no masking at all, every query sees every key).
  mask "causal": the 4-D float mask the model builds for eager, [1, 1, S, S] in the run dtype,
                 0 where key t <= query s and finfo(dtype).min elsewhere; it is cross-checked
                 against transformers.masking_utils.create_causal_mask.

Hidden states (seeded, bf16-representable, identical for both precisions)
  x[s, h] = bf16( scale * normal() ), s-major, drawn from the project's documented generator
  (include/mla/random.hpp) as Rng(seed, stream=HIDDEN_STREAM); or read from --hidden-states.

Shape legend (batch dropped)
  S = sequence length, H = hidden_size, n = num_attention_heads,
  d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_qk = d_n + d_r, d_v = v_head_dim

Output tensors (all float values stored as F32 -- bf16 values are exact in F32 -- except the
attention-mass sums, which are F64):
  hidden_states  [S, H]        the input
  attn_output    [S, H]        o_proj output
  attn_weights   [n, S, S]     post-softmax probabilities (in the run dtype)
  query_states   [n, S, d_qk]  cat(q_pass, rope(q_rot)); rope half in HF's de-interleaved order
  key_states     [n, S, d_qk]  cat(k_pass, rope(k_rot) broadcast over heads)
  value_states   [n, S, d_v]
  token_scores   [S]   F64     attn_weights summed over heads and queries (in float64)
  head_scores    [n, S] F64    attn_weights summed over queries, per head
  inv_freq       [d_r/2]       the rotary module's fp32 buffer
  cos, sin       [S, d_r]      position embeddings in the run dtype
Metadata (str -> str): producer, versions, precision, mask, layer, geometry, seq_len,
hidden_seed/hidden_scale, the checkpoint's config.json text, the synth recipe (preset, seed,
dtype, layers, vocab, shards) and a checksum of every weight tensor (see weight_checksum).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

MASK64 = (1 << 64) - 1
HIDDEN_STREAM = 0x68696464656E  # "hidden" -- the Rng stream for seeded hidden states

# The attention parameters of one layer, by HF module attribute name (docs/math.md §1.1).
WEIGHT_NAMES = [
    "q_a_proj.weight",
    "q_a_layernorm.weight",
    "q_b_proj.weight",
    "q_proj.weight",
    "kv_a_proj_with_mqa.weight",
    "kv_a_layernorm.weight",
    "kv_b_proj.weight",
    "o_proj.weight",
    "q_a_proj.bias",
    "kv_a_proj_with_mqa.bias",
    "o_proj.bias",
]


# ---- the project's documented generator (include/mla/random.hpp) -------------------------
class Rng:
    """SplitMix64 + Box-Muller, bit-identical to mla::Rng."""

    def __init__(self, seed: int, stream: int | None = None):
        self.state = seed & MASK64
        if stream is not None:
            self.state = (seed ^ ((stream * 0xD1B54A32D192ED03) & MASK64)) & MASK64
            self.state = self.next_u64()
        self.spare = None

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self) -> float:
        return (self.next_u64() >> 11) * 2.0**-53

    def normal(self) -> float:
        if self.spare is not None:
            v, self.spare = self.spare, None
            return v
        u1 = 1.0 - self.uniform()
        u2 = self.uniform()
        r = math.sqrt(-2.0 * math.log(u1))
        two_pi = 6.283185307179586476925286766559
        self.spare = r * math.sin(two_pi * u2)
        return r * math.cos(two_pi * u2)


def seeded_hidden_states(torch, seq_len: int, hidden: int, seed: int, scale: float):
    """[S, H] float32 tensor of bf16-representable values: bf16(scale * normal())."""
    rng = Rng(seed, HIDDEN_STREAM)
    values = [scale * rng.normal() for _ in range(seq_len * hidden)]
    x = torch.tensor(values, dtype=torch.float64).view(seq_len, hidden)
    # double -> fp32 -> bf16, as the C++ side rounds (mla::round_to_bf16(double))
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float32)


# ---- checkpoint reading -----------------------------------------------------------------
def read_config(checkpoint_dir: str) -> tuple[str, dict]:
    """The config.json text and the text-model keys (text_config for nested Kimi K2.5/K2.6)."""
    path = os.path.join(checkpoint_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    cfg = json.loads(text)
    if isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    return text, cfg


def is_deepseek_v2(text_cfg: dict) -> bool:
    """model_type deepseek_v2 (or, without one, architectures DeepseekV2ForCausalLM): V2's RoPE."""
    name = text_cfg.get("model_type") or (text_cfg.get("architectures") or [""])[0]
    return name in ("deepseek_v2", "DeepseekV2ForCausalLM")


def build_hf_config(text_cfg: dict):
    """DeepseekV3Config (DeepseekV2Config for a deepseek_v2 config) from the text-model keys, eager
    attention."""
    from transformers import DeepseekV2Config, DeepseekV3Config

    keys = dict(text_cfg)
    # Identity keys of the checkpoint that are not config fields.
    for k in ("architectures", "model_type", "torch_dtype", "dtype", "auto_map", "quantization_config"):
        keys.pop(k, None)
    if is_deepseek_v2(text_cfg):
        keys.pop("rope_interleave", None)  # DeepseekV2Config has no such key
        cfg = DeepseekV2Config(**keys)
    else:
        cfg = DeepseekV3Config(**keys)
    cfg._attn_implementation = "eager"
    return cfg


def shard_map(checkpoint_dir: str) -> dict[str, str]:
    """tensor name -> shard path, through model.safetensors.index.json when present."""
    index = os.path.join(checkpoint_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            wm = json.load(f)["weight_map"]
        return {name: os.path.join(checkpoint_dir, shard) for name, shard in wm.items()}
    from safetensors import safe_open

    out = {}
    for fname in sorted(os.listdir(checkpoint_dir)):
        if fname.endswith(".safetensors"):
            path = os.path.join(checkpoint_dir, fname)
            with safe_open(path, framework="pt") as f:
                for name in f.keys():
                    out[name] = path
    return out


def load_layer_weights(torch, checkpoint_dir: str, layer: int) -> tuple[dict, dict, dict]:
    """{module key: tensor as stored (FP8: dequantized to fp32)} for layer L's self_attn,
    {module key: full name} and {module key: stored dtype name}."""
    from safetensors import safe_open

    names = shard_map(checkpoint_dir)
    marker = f"layers.{layer}.self_attn."
    found, full, stored = {}, {}, {}
    for name, path in names.items():
        pos = name.find(marker)
        if pos < 0 or (pos > 0 and name[pos - 1] != "."):
            continue
        key = name[pos + len(marker):]
        if key not in WEIGHT_NAMES:
            continue
        with safe_open(path, framework="pt") as f:
            found[key] = f.get_tensor(name)
        full[key] = name
        stored[key] = str(found[key].dtype).removeprefix("torch.")
        if found[key].dtype == torch.float8_e4m3fn:
            scale_name = name + "_scale_inv"
            if scale_name not in names:
                sys.exit(f"make_golden: {name} is float8_e4m3fn but {scale_name} is missing")
            with safe_open(names[scale_name], framework="pt") as f:
                found[key] = dequantize_fp8_blocks(torch, found[key], f.get_tensor(scale_name), name)
    if not found:
        sys.exit(f"make_golden: {checkpoint_dir}: no tensors '*{marker}*' (layer {layer} absent?)")
    return found, full, stored


def dequantize_fp8_blocks(torch, w, scale_inv, name: str, block: int = 128):
    """DeepSeek-V3 FP8 weights (docs/math.md §11): W = fp32(w) * scale_inv[i // 128, j // 128].

    Written here with torch ops (float8 -> float32 conversion, repeat_interleave), independently
    of the C++ loader, so the fixture's weight checksums cross-check our dequantization."""
    out_f, in_f = w.shape
    want = ((out_f + block - 1) // block, (in_f + block - 1) // block)
    if tuple(scale_inv.shape) != want:
        sys.exit(f"make_golden: {name}_scale_inv is {list(scale_inv.shape)}, expected {list(want)}")
    s = scale_inv.to(torch.float32).repeat_interleave(block, 0).repeat_interleave(block, 1)[:out_f, :in_f]
    return w.to(torch.float32) * s  # one fp32 multiply per element


def weight_checksum(torch, w) -> int:
    """sum_i u32(fp32 bits of w_i) * (2i + 1) mod 2^64 over the row-major values.

    Exact integer arithmetic, so the C++ test reproduces it bit for bit (it detects a
    re-synthesized checkpoint that differs from the one a fixture was made from)."""
    import numpy as np

    bits = w.detach().to(torch.float32).contiguous().view(-1).numpy().view(np.uint32).astype(np.uint64)
    odd = np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(bits * odd, dtype=np.uint64))


# ---- one case ---------------------------------------------------------------------------
def causal_mask(torch, hf_cfg, seq_len: int, dtype):
    """[1, 1, S, S]: 0 where key t <= query s, finfo(dtype).min elsewhere (eager mask)."""
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    mask = torch.full((seq_len, seq_len), torch.finfo(dtype).min, dtype=dtype)
    mask = mask.masked_fill(allowed, 0.0).view(1, 1, seq_len, seq_len)
    # Cross-check with the mask the model itself would build.
    try:
        from transformers.masking_utils import create_causal_mask
    except ImportError:
        return mask
    embeds = torch.zeros(1, seq_len, hf_cfg.hidden_size, dtype=dtype)
    hf = create_causal_mask(config=hf_cfg, inputs_embeds=embeds, attention_mask=None, cache=None,
                            position_ids=torch.arange(seq_len).view(1, -1))
    if hf is not None:
        if hf.dtype == torch.bool:  # a boolean mask: True = visible
            hf = torch.zeros_like(mask).masked_fill(~hf, torch.finfo(dtype).min)
        if hf.shape != mask.shape or not torch.equal(hf.to(dtype), mask):
            sys.exit("make_golden: transformers' create_causal_mask differs from the explicit eager mask")
    return mask


def run_case(torch, hf_cfg, weights: dict, layer: int, hidden_f32, precision: str, mask_name: str) -> dict:
    v2 = hf_cfg.model_type == "deepseek_v2"
    if v2:
        from transformers.models.deepseek_v2 import modeling_deepseek_v2 as m
    else:
        from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    attn = (m.DeepseekV2Attention if v2 else m.DeepseekV3Attention)(hf_cfg, layer_idx=layer).eval()
    missing, unexpected = attn.load_state_dict({k: v.to(torch.float32) for k, v in weights.items()}, strict=False)
    if missing or unexpected:
        sys.exit(f"make_golden: weights do not fit the module: missing {missing}, unexpected {unexpected}")
    attn = attn.to(dtype)  # parameters only: the module holds no buffers
    rotary = (m.DeepseekV2RotaryEmbedding if v2 else m.DeepseekV3RotaryEmbedding)(hf_cfg)  # never converted: inv_freq stays fp32
    assert rotary.inv_freq.dtype == torch.float32
    assert all(p.dtype == dtype for p in attn.parameters())

    seq_len = hidden_f32.shape[0]
    x = hidden_f32.to(dtype).unsqueeze(0)  # [1, S, H]; exact (values are bf16-representable)
    position_ids = torch.arange(seq_len).view(1, -1)
    if v2:
        # DeepseekV2: freqs_cis [1, S, d_r/2] complex64 (c + i s, times attention_scaling), never
        # rounded to the run dtype; recorded as cos/sin [S, d_r] in V3's cat(freqs, freqs) layout
        freqs_cis = rotary(x, position_ids)
        position_embeddings = freqs_cis
        cos = torch.cat((freqs_cis.real, freqs_cis.real), dim=-1)
        sin = torch.cat((freqs_cis.imag, freqs_cis.imag), dim=-1)
    else:
        cos, sin = rotary(x, position_ids)  # [1, S, d_r] each, run dtype
        position_embeddings = (cos, sin)
    mask = causal_mask(torch, hf_cfg, seq_len, dtype) if mask_name == "causal" else None

    captured = {}
    original = m.eager_attention_forward

    def capture(module, query, key, value, attention_mask, *args, **kwargs):
        captured["query_states"], captured["key_states"], captured["value_states"] = query, key, value
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    m.eager_attention_forward = capture
    try:
        with torch.no_grad():
            out, weights_p = attn(hidden_states=x, position_embeddings=position_embeddings, attention_mask=mask)
    finally:
        m.eager_attention_forward = original
    if "query_states" not in captured:
        sys.exit("make_golden: eager_attention_forward was not called (attention implementation not eager?)")

    w64 = weights_p[0].to(torch.float64)  # [n, S, S]
    f32 = lambda t: t.detach().to(torch.float32).contiguous()  # noqa: E731  exact widening
    return {
        "hidden_states": f32(x[0]),
        "attn_output": f32(out[0]),
        "attn_weights": f32(weights_p[0]),
        "query_states": f32(captured["query_states"][0]),
        "key_states": f32(captured["key_states"][0]),
        "value_states": f32(captured["value_states"][0]),
        "token_scores": w64.sum(dim=(0, 1)).contiguous(),  # [S]
        "head_scores": w64.sum(dim=1).contiguous(),        # [n, S]
        "inv_freq": f32(rotary.inv_freq),
        "cos": f32(cos[0]),
        "sin": f32(sin[0]),
    }, {
        "scaling": repr(float(attn.scaling)),
        "latent_norm_eps": repr(float(attn.kv_a_layernorm.variance_epsilon)),
        "attention_scaling": repr(float(rotary.attention_scaling)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (config.json + safetensors)")
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--hidden-seed", type=int, default=1)
    p.add_argument("--hidden-scale", type=float, default=1.0)
    p.add_argument("--hidden-states", help="safetensors file with 'hidden_states' [S, H] (overrides the seeded input)")
    p.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    p.add_argument("--mask", choices=["causal", "none", "both"], default="both")
    p.add_argument("--out-dir", required=True, help="writes <precision>_<mask>.safetensors here")
    p.add_argument("--geometry", default="custom", help="geometry name recorded in the metadata")
    p.add_argument("--synth", default="", help="synth recipe recorded in the metadata (JSON object)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 = deterministic order)")
    args = p.parse_args(argv)

    import numpy as np
    import safetensors
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(args.threads)
    config_text, text_cfg = read_config(args.checkpoint)
    hf_cfg = build_hf_config(text_cfg)
    weights, full_names, stored_dtypes = load_layer_weights(torch, args.checkpoint, args.layer)

    if args.hidden_states:
        hidden = load_file(args.hidden_states)["hidden_states"].to(torch.float32)
        if hidden.dim() == 3 and hidden.shape[0] == 1:
            hidden = hidden[0]
        if hidden.dim() != 2 or hidden.shape[1] != hf_cfg.hidden_size:
            sys.exit(f"make_golden: {args.hidden_states}: hidden_states must be [S, {hf_cfg.hidden_size}], "
                     f"got {list(hidden.shape)}")
        hidden_source = os.path.basename(args.hidden_states)
    else:
        hidden = seeded_hidden_states(torch, args.seq_len, hf_cfg.hidden_size, args.hidden_seed, args.hidden_scale)
        hidden_source = "seeded"

    checksums = ",".join(f"{k.removesuffix('.weight')}:{weight_checksum(torch, v):#018x}"
                         for k, v in weights.items())
    dtypes = ",".join(f"{k.removesuffix('.weight')}:{stored_dtypes[k]}" for k in weights)
    precisions = ["fp32", "bf16"] if args.precision == "both" else [args.precision]
    masks = ["causal", "none"] if args.mask == "both" else [args.mask]
    os.makedirs(args.out_dir, exist_ok=True)
    for precision in precisions:
        for mask_name in masks:
            tensors, module_facts = run_case(torch, hf_cfg, weights, args.layer, hidden, precision, mask_name)
            meta = {
                "producer": "reference/python/make_golden.py (HF "
                            + ("DeepseekV2Attention" if hf_cfg.model_type == "deepseek_v2" else "DeepseekV3Attention")
                            + ", eager)",
                "transformers_version": transformers.__version__,
                "torch_version": torch.__version__,
                "safetensors_version": safetensors.__version__,
                "numpy_version": np.__version__,
                "precision": precision,
                "dtype": "float32" if precision == "fp32" else "bfloat16",
                "mask": mask_name,
                "layer": str(args.layer),
                "geometry": args.geometry,
                "seq_len": str(hidden.shape[0]),
                "position_offset": "0",
                "hidden_source": hidden_source,
                "hidden_seed": str(args.hidden_seed),
                "hidden_scale": repr(args.hidden_scale),
                "hidden_stream": f"{HIDDEN_STREAM:#x}",
                "config_json": config_text,
                "synth": args.synth or "{}",
                "weight_names": ",".join(full_names[k] for k in weights),
                "weight_dtypes": dtypes,
                "weight_checksums": checksums,
                "torch_threads": str(args.threads),
                **module_facts,
            }
            path = os.path.join(args.out_dir, f"{precision}_{mask_name}.safetensors")
            save_file(tensors, path, metadata=meta)
            print(f"make_golden: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
