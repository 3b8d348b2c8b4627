#!/usr/bin/env python3
"""bench_torch.py — the PyTorch peer of bench_cpu: one Kimi K2.6 attention layer in PyTorch eager
on the CPU, timed the same way (warm-up, then N repetitions, median).

Purpose
  tests/bench/bench_cpu.cpp runs this script in the same benchmark run and prints its medians
  next to the cpu backend's, so both are measured on the same machine under the same load.
  It can also be run alone:  python3 tests/bench/bench_torch.py --seq-len 256 --reps 5

What runs
  transformers' own `DeepseekV3Attention` (attn_implementation "eager", eval mode, no cache)
  with its `DeepseekV3RotaryEmbedding` when transformers is importable; otherwise a plain-torch
  module with the same math (docs/math.md §3: q_a -> RMSNorm -> q_b, kv_a -> RMSNorm -> kv_b,
  interleaved RoPE, QK^T * scaling + mask, fp32 softmax, PV, o_proj).
  Weights: random normal(0, 1/sqrt(in)) rounded to bf16 values (speed does not depend on the
  values). fp32: parameters float32; bf16: parameters bfloat16 with the rotary inv_freq kept
  in fp32 (what from_pretrained(dtype=bfloat16) gives). Causal mask: the 4-D float mask HF
  builds for eager ([1, 1, S, S], 0 / finfo(dtype).min). torch.set_num_threads(--threads).

Output
  Human-readable lines on stderr, and ONE line on stdout starting with "BENCH_TORCH_JSON "
  followed by a JSON object:
    {"impl": ..., "torch": ..., "transformers": ..., "threads": 2, "seq_len": 256,
     "reps": 5, "fp32": {"median_s": ..., "times_s": [...]}, "bf16": {...}}
  Exit status 77 (meson SKIP) when torch is not importable.

Shape legend: S = seq_len, H = hidden_size 7168, n = 64 heads, r_q = 1536, r_kv = 512,
d_n = 128, d_r = 64, d_v = 128 (docs/math.md §1).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
except ImportError as exc:  # meson: exit code 77 = SKIP
    print(f"bench_torch.py: torch is not importable ({exc}); skipping the PyTorch peer", file=sys.stderr)
    sys.exit(77)

# The Kimi K2.6 attention geometry (K2.5 values, docs/math.md §1).
KIMI = dict(
    hidden_size=7168, num_attention_heads=64, num_key_value_heads=64, q_lora_rank=1536,
    kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    rope_theta=50000.0, factor=64.0, original_max_position_embeddings=4096, beta_fast=32.0,
    beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, max_position_embeddings=262144,
)


def yarn_scaling(g: dict) -> float:
    """softmax scale = qk_head_dim^-0.5 * m^2, m = 0.1 * mscale_all_dim * ln(factor) + 1 (§5)."""
    m = 0.1 * g["mscale_all_dim"] * math.log(g["factor"]) + 1.0
    return (g["qk_nope_head_dim"] + g["qk_rope_head_dim"]) ** -0.5 * m * m


def yarn_inv_freq(g: dict) -> torch.Tensor:
    """YaRN inverse frequencies in fp32 (§4), for the plain-torch fallback only."""
    dim, base, factor = g["qk_rope_head_dim"], g["rope_theta"], g["factor"]
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def corr_dim(rot: float) -> float:
        return dim * math.log(g["original_max_position_embeddings"] / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr_dim(g["beta_fast"])), 0)
    high = min(math.ceil(corr_dim(g["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor


class PlainRMSNorm(torch.nn.Module):
    """y = w * (x / sqrt(mean(x^2) + eps)), statistics in fp32, cast back before the weight."""

    def __init__(self, n: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class PlainMLA(torch.nn.Module):
    """HF DeepseekV3Attention's eager math in plain torch (used when transformers is absent).
    forward(x [1, S, H], (cos, sin) [1, S, d_r], mask [1, 1, S, S] or None) -> [1, S, H]."""

    def __init__(self, g: dict):
        super().__init__()
        self.g = g
        H, n = g["hidden_size"], g["num_attention_heads"]
        d_n, d_r, d_v = g["qk_nope_head_dim"], g["qk_rope_head_dim"], g["v_head_dim"]
        self.q_a_proj = torch.nn.Linear(H, g["q_lora_rank"], bias=False)
        self.q_a_layernorm = PlainRMSNorm(g["q_lora_rank"])
        self.q_b_proj = torch.nn.Linear(g["q_lora_rank"], n * (d_n + d_r), bias=False)
        self.kv_a_proj_with_mqa = torch.nn.Linear(H, g["kv_lora_rank"] + d_r, bias=False)
        self.kv_a_layernorm = PlainRMSNorm(g["kv_lora_rank"])
        self.kv_b_proj = torch.nn.Linear(g["kv_lora_rank"], n * (d_n + d_v), bias=False)
        self.o_proj = torch.nn.Linear(n * d_v, H, bias=False)
        self.scaling = yarn_scaling(g)

    @staticmethod
    def rope_interleave(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, h, s, d = x.shape
        y = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)  # de-interleave
        rotated = torch.cat((-y[..., d // 2:], y[..., : d // 2]), dim=-1)
        return y * cos + rotated * sin

    def forward(self, x, position_embeddings, mask):
        g = self.g
        B, S, _ = x.shape
        n, d_n, d_r, d_v = g["num_attention_heads"], g["qk_nope_head_dim"], g["qk_rope_head_dim"], g["v_head_dim"]
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, S, n, d_n + d_r).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [d_n, d_r], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        c, k_rot = torch.split(ckv, [g["kv_lora_rank"], d_r], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(B, S, n, d_n + d_v).transpose(1, 2)
        k_pass, value = torch.split(kv, [d_n, d_v], dim=-1)
        cos, sin = (t.unsqueeze(1) for t in position_embeddings)
        q_rot = self.rope_interleave(q_rot, cos, sin)
        k_rot = self.rope_interleave(k_rot.view(B, 1, S, d_r), cos, sin).expand(-1, n, -1, -1)
        query = torch.cat((q_pass, q_rot), dim=-1)
        key = torch.cat((k_pass, k_rot), dim=-1)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scaling
        if mask is not None:
            scores = scores + mask
        probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        out = torch.matmul(probs, value).transpose(1, 2).reshape(B, S, n * d_v)
        return self.o_proj(out), probs


def build(g: dict, dtype: torch.dtype, seed: int, plain: bool = False):
    """Returns (impl name, module, position_embeddings function)."""
    torch.manual_seed(seed)
    try:
        if plain:
            raise ImportError("--plain given")
        from transformers import DeepseekV3Config
        from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

        rope = {"rope_type": "yarn", "type": "yarn", "rope_theta": g["rope_theta"], "factor": g["factor"],
                "original_max_position_embeddings": g["original_max_position_embeddings"],
                "beta_fast": g["beta_fast"], "beta_slow": g["beta_slow"], "mscale": g["mscale"],
                "mscale_all_dim": g["mscale_all_dim"]}
        keys = {k: g[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "q_lora_rank",
                                   "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                   "max_position_embeddings")}
        try:
            cfg = DeepseekV3Config(**keys, rope_parameters=rope)  # transformers 5
        except TypeError:
            cfg = DeepseekV3Config(**keys, rope_theta=g["rope_theta"], rope_scaling=rope)  # 4.x
        cfg._attn_implementation = "eager"
        module = m.DeepseekV3Attention(cfg, layer_idx=0).eval()
        rotary = m.DeepseekV3RotaryEmbedding(cfg)  # kept fp32: inv_freq is an fp32 buffer
        impl = "transformers DeepseekV3Attention (eager)"

        def position_embeddings(x, position_ids):
            return rotary(x, position_ids)
    except ImportError:
        module = PlainMLA(g).eval()
        inv_freq = yarn_inv_freq(g)
        impl = "plain-torch MLA (" + ("--plain" if plain else "transformers not importable") + ")"

        def position_embeddings(x, position_ids):
            freqs = inv_freq[None, None, :] * position_ids[:, :, None].float()
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    with torch.no_grad():
        for p in module.parameters():  # bf16-valued weights ~ normal(0, 1/sqrt(in))
            if p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5).copy_(p.to(torch.bfloat16))
    return impl, module.to(dtype), position_embeddings


def time_forward(module, position_embeddings, g: dict, dtype: torch.dtype, seq_len: int, warmup: int,
                 reps: int, seed: int) -> list[float]:
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, seq_len, g["hidden_size"], generator=gen).to(dtype)
    position_ids = torch.arange(seq_len)[None, :]
    mask = torch.full((seq_len, seq_len), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]
    times = []
    with torch.inference_mode():
        for i in range(warmup + reps):
            t0 = time.perf_counter()
            cos_sin = position_embeddings(x, position_ids)  # part of the forward, as in the model
            out = module(x, cos_sin, mask)[0]
            t1 = time.perf_counter()
            if not torch.isfinite(out.float()).all():
                raise RuntimeError("PyTorch forward produced non-finite values")
            if i >= warmup:
                times.append(t1 - t0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plain", action="store_true", help="use the plain-torch module even if transformers exists")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    result = {"torch": torch.__version__, "transformers": tf_version, "threads": torch.get_num_threads(),
              "seq_len": args.seq_len, "warmup": args.warmup, "reps": args.reps}
    for name in args.precisions.split(","):
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
        t0 = time.perf_counter()
        impl, module, position_embeddings = build(KIMI, dtype, args.seed, args.plain)
        build_s = time.perf_counter() - t0
        times = time_forward(module, position_embeddings, KIMI, dtype, args.seq_len, args.warmup, args.reps, args.seed)
        result["impl"] = impl
        result[name] = {"median_s": statistics.median(times), "times_s": times, "build_s": build_s}
        print(f"bench_torch.py: {impl}, {name}, S={args.seq_len}, {args.threads} threads: median "
              f"{statistics.median(times):.3f} s over {len(times)} reps (build {build_s:.1f} s)", file=sys.stderr)
        del module
    print("BENCH_TORCH_JSON " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
