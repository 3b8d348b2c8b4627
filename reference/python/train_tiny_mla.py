#!/usr/bin/env python3
"""train_tiny_mla.py — trains the small MLA model shipped in models/tiny-mla/.

Purpose
  Every figure mla-h2o printed before this model came from synthetic random weights. This script
  trains a real (if tiny) transformers DeepseekV3ForCausalLM — the class of the Kimi K2 family —
  on this repository's 2-core CPU in about an hour, so that `mla-h2o eval` and the demo can
  measure what KV-cache eviction does to a trained model's predictions. The C++ product never
  runs Python: this script, like the fixture writers beside it, is run by hand.

Model (config.json; MLA geometry in Kimi's proportions, scaled down)
  byte-level vocabulary: ids 0-255 are the bytes, 256 = BOS, 257 = EOS (vocab_size 258;
  config key "byte_level_vocab": true tells mla-h2o that --text may be used);
  hidden 256, 5 decoder layers: layer 0 dense SwiGLU (first_k_dense_replace 1), layers 1-4
  DeepseekV3MoE with 8 routed experts in 2 groups (topk_group 1: each token's experts come from
  one group), 2 experts per token, 1 shared expert, routed_scaling_factor 2.5, norm_topk_prob;
  8 heads, q_lora_rank 128, kv_lora_rank 64, qk_nope_head_dim 32 and qk_rope_head_dim 16
  (Kimi's 2 : 1), v_head_dim 48 (= qk_head_dim, so torch's fused CPU attention trains it),
  YaRN RoPE (theta 10000, factor 4 over an original 512 positions: 2048 positions).
  The router's e_score_correction_bias is learned by DeepSeek-V3's auxiliary-loss-free
  balancing: after each step, bias_i += gamma * sign(mean load - load_i).

Data
  The reST sources of the Python 3.11 documentation from Debian 12's package python3.11-doc
  (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt, PSF License Version 2). Files sorted by
  path; every 20th file (index % 20 == 10) is held out, the rest trains. Each training sequence
  is BOS + 1535 bytes: 70 % a random window of the training text, 15 % a passkey sequence
  (training text with "The pass key is NNNNN. Remember it. NNNNN is the pass key." at a random
  depth and "What is the pass key? The pass key is NNNNN." at its end), 15 % a copy sequence
  (a 32-256 byte span of the text repeated verbatim later in the window). That is phase 1
  (900 steps). Phase 2 (300 steps, from the phase-1 weights) shifts the mix towards retrieval:
  30 % text, 25 % passkey, 20 % copy, 25 % random-string copy (random [A-Za-z0-9] strings repeated
  verbatim, which only a copy head can predict), so that retrieval (induction) heads form and
  eviction has something to lose.

Outputs (--out, default models/tiny-mla)
  config.json, generation_config.json, model.safetensors   save_pretrained; bf16 weights except
                                                           the router (gate.weight and
                                                           e_score_correction_bias, fp32, as
                                                           transformers keeps them)
  training_log.csv    step, tokens, lr, train loss, held-out loss and bits per byte
  loss.svg            the loss curve
  attention_stats.csv per layer: sink mass, first-4 mass, recent-32 mass, entropy (held-out text)
  eval/heldout.txt    held-out text for `mla-h2o eval` and the demo
  eval/passkey-*.txt  passkey inputs built from held-out text (needle at 10/35/60/85 % depth)
  README.md           the model card (written from the figures above)

Usage
  /path/to/venv/bin/python reference/python/train_tiny_mla.py [--out DIR] [--steps 900] [--phase2-steps 300]
  (the venv of reference/python/requirements.txt; --smoke runs 3 + 3 steps into a scratch dir;
  --start-from DIR runs phase 2 only, from a phase-1 output saved earlier)
"""

from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import math
import os
import platform
import time

import numpy as np
import torch

SEED = 20261130
CORPUS_DIR = "/usr/share/doc/python3.11/html/_sources"
BOS, EOS, VOCAB = 256, 257, 258
NEEDLE = "The pass key is {k}. Remember it. {k} is the pass key."
QUESTION = "What is the pass key? The pass key is {k}."


def build_config():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=768,
        moe_intermediate_size=128,
        num_hidden_layers=5,
        first_k_dense_replace=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        n_shared_experts=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        q_lora_rank=128,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=48,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        rope_interleave=True,
        attention_bias=False,
        tie_word_embeddings=False,
        initializer_range=0.02,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=None,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 512,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    )
    cfg.byte_level_vocab = True
    return cfg


# ---- data ------------------------------------------------------------------------------------


def corpus_files(root):
    files = sorted(glob.glob(os.path.join(root, "**", "*.rst.txt"), recursive=True))
    if not files:
        raise SystemExit(f"train_tiny_mla: no *.rst.txt under {root} (apt-get install python3.11-doc)")
    train = [f for i, f in enumerate(files) if i % 20 != 10]
    held = [f for i, f in enumerate(files) if i % 20 == 10]
    return train, held


def read_text(files):
    parts = []
    for f in files:
        with open(f, "rb") as fh:
            parts.append(fh.read())
    return b"\n\n".join(parts)


def random_digits(rng):
    return "".join(str(d) for d in rng.integers(0, 10, size=5))


def window(text, rng, length):
    start = int(rng.integers(0, len(text) - length))
    return text[start : start + length]


def passkey_sequence(text, rng, length, depth=None, key=None):
    """length bytes: filler with the needle at `depth` (fraction) and the question at the end."""
    key = key or random_digits(rng)
    needle = (" " + NEEDLE.format(k=key) + " ").encode()
    question = ("\n" + QUESTION.format(k=key) + "\n").encode()
    filler = window(text, rng, length - len(needle) - len(question))
    depth = float(rng.uniform(0.02, 0.9)) if depth is None else depth
    at = int(depth * len(filler))
    return filler[:at] + needle + filler[at:] + question, key


def copy_sequence(text, rng, length):
    span = window(text, rng, int(rng.integers(32, 257)))
    filler = window(text, rng, length - 2 * len(span) - 2)
    a = int(rng.integers(0, len(filler) // 2))
    b = int(rng.integers(len(filler) // 2, len(filler) + 1))
    return filler[:a] + span + b"\n" + filler[a:b] + b"\n" + span + filler[b:]


def training_batch(text, rng, batch, seq_len):
    rows = []
    for _ in range(batch):
        u = rng.random()
        if u < 0.70:
            body = window(text, rng, seq_len - 1)
        elif u < 0.85:
            body, _ = passkey_sequence(text, rng, seq_len - 1)
        else:
            body = copy_sequence(text, rng, seq_len - 1)
        assert len(body) == seq_len - 1
        rows.append([BOS] + list(body))
    return torch.tensor(rows, dtype=torch.long)


def heldout_windows(text, seq_len, count):
    step = (len(text) - seq_len) // max(count - 1, 1)
    return [text[i * step : i * step + seq_len - 1] for i in range(count)]


# ---- MoE balancing (DeepSeek-V3 §2.1.2, auxiliary-loss-free) ---------------------------------


class BalanceTracker:
    """Counts how many tokens each router sends to each expert during the forward."""

    def __init__(self, model):
        self.loads = {}
        self.routers = []
        for name, mod in model.named_modules():
            if type(mod).__name__ == "DeepseekV3TopkRouter":
                self.routers.append((name, mod))
                mod.register_forward_hook(self._hook(name))

    def _hook(self, name):
        def hook(_mod, _inp, out):
            idx = out[2].detach().reshape(-1)
            counts = torch.bincount(idx, minlength=_mod.num_experts).to(torch.float32)
            self.loads[name] = self.loads.get(name, 0) + counts

        return hook

    def update(self, gamma):
        """bias_i += gamma * sign(mean load - load_i); returns the max/mean load ratio per router."""
        ratios = []
        for name, mod in self.routers:
            load = self.loads.get(name)
            if load is None:
                continue
            with torch.no_grad():
                mod.e_score_correction_bias += gamma * torch.sign(load.mean() - load)
            ratios.append(float(load.max() / load.mean()))
        self.loads = {}
        return ratios


# ---- evaluation ------------------------------------------------------------------------------


@torch.no_grad()
def heldout_loss(model, windows):
    """mean NLL (nats) per predicted byte over the windows (BOS is never a target)."""
    model.eval()
    total, count = 0.0, 0
    for w in windows:
        ids = torch.tensor([[BOS] + list(w)], dtype=torch.long)
        logits = model(input_ids=ids).logits.float()
        nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
        total += float(nll)
        count += ids.shape[1] - 1
    model.train()
    return total / count


@torch.no_grad()
def attention_stats(model_dir, text, seq_len=1024):
    """Per layer, from transformers' eager attention on one held-out window: mean over heads and
    queries of the mass on token 0, on tokens 0-3, on the 32 most recent tokens, and the mean
    entropy (bits) of the attention rows."""
    from transformers import DeepseekV3ForCausalLM

    model = DeepseekV3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids = torch.tensor([[BOS] + list(text[: seq_len - 1])], dtype=torch.long)
    out = model(input_ids=ids, output_attentions=True)
    rows = []
    S = ids.shape[1]
    q = torch.arange(S)
    k = torch.arange(S)
    recent = ((q[:, None] - k[None, :]) < 32) & (k[None, :] <= q[:, None])
    for layer, a in enumerate(out.attentions):
        p = a[0].double()  # [n, S, S]
        ent = -(p.clamp_min(1e-300).log2() * p).sum(-1).mean()
        rows.append(
            {
                "layer": layer,
                "sink_mass": float(p[:, :, 0].mean()),
                "first4_mass": float(p[:, :, :4].sum(-1).mean()),
                "recent32_mass": float((p * recent).sum(-1).mean()),
                "entropy_bits": float(ent),
                "uniform_entropy_bits": float(torch.log2(q.double() + 1).mean()),
            }
        )
    return rows


# ---- outputs ---------------------------------------------------------------------------------


def loss_svg(log, path):
    w, h, m = 640, 360, 50
    steps = [r["step"] for r in log]
    train = [r["train_bpb"] for r in log]
    held = [(r["step"], r["heldout_bpb"]) for r in log if r["heldout_bpb"] != ""]
    ymax = max(train + [b for _, b in held]) * 1.05
    ymin = 0.0
    xmax = max(steps)

    def xy(s, v):
        return m + (w - 2 * m) * s / xmax, h - m - (h - 2 * m) * (v - ymin) / (ymax - ymin)

    def poly(points, color):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(s, v) for s, v in points))
        return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="20" text-anchor="middle">tiny-mla training: bits per byte (trained weights)</text>',
        f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
        f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
        f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">step</text>',
    ]
    for i in range(5):
        v = ymin + (ymax - ymin) * i / 4
        x, y = xy(0, v)
        parts.append(f'<text x="{x - 6}" y="{y + 4}" text-anchor="end">{v:.2f}</text>')
    for i in range(5):
        s = xmax * i / 4
        x, y = xy(s, ymin)
        parts.append(f'<text x="{x}" y="{y + 16}" text-anchor="middle">{int(s)}</text>')
    parts.append(poly(list(zip(steps, train)), "#1f77b4"))
    if held:
        parts.append(poly(held, "#d62728"))
    parts.append(f'<text x="{w - m}" y="{m}" text-anchor="end" fill="#1f77b4">train (batch)</text>')
    parts.append(f'<text x="{w - m}" y="{m + 16}" text-anchor="end" fill="#d62728">held-out</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def save_model(model, out):
    """bf16 weights, the router kept in fp32 as transformers keeps it (_keep_in_fp32_modules_strict)."""
    state_dtypes = {}
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        keep = name.endswith("gate.weight") or name.endswith("e_score_correction_bias")
        if p.dtype.is_floating_point and not keep:
            p.data = p.data.to(torch.bfloat16)
        state_dtypes[name] = p.dtype
    model.config.dtype = "bfloat16"
    model.save_pretrained(out, safe_serialization=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_card(out, args, cfg, log, stats, summary):
    last = [r for r in log if r["heldout_bpb"] != ""][-1]
    lines = []
    a = lines.append
    a("# tiny-mla: a small trained MLA model for mla-h2o")
    a("")
    a("A 5-layer transformers `DeepseekV3ForCausalLM` (the model class of DeepSeek-V3 and the Kimi K2")
    a("family) with Multi-head Latent Attention, trained from scratch on this repository's 2-core CPU by")
    a("`reference/python/train_tiny_mla.py`. It exists so that `mla-h2o eval` and `mla-h2o demo --model tiny`")
    a("measure KV-cache eviction on **trained** attention instead of random weights. It is a toy: a")
    a("byte-level model of Python's reST documentation, not a language model anyone should use.")
    a("")
    a("## Architecture (config.json)")
    a("")
    a("| key | value | note |")
    a("|---|---|---|")
    rows = [
        ("vocab_size", cfg.vocab_size, "bytes 0-255, BOS 256, EOS 257 (`byte_level_vocab`: true)"),
        ("hidden_size", cfg.hidden_size, ""),
        ("num_hidden_layers", cfg.num_hidden_layers, "layer 0 dense (`first_k_dense_replace` 1), 1-4 MoE"),
        ("num_attention_heads", cfg.num_attention_heads, ""),
        ("q_lora_rank / kv_lora_rank", f"{cfg.q_lora_rank} / {cfg.kv_lora_rank}", "latent cache: 64 + 16 values per token per layer"),
        ("qk_nope_head_dim / qk_rope_head_dim / v_head_dim", f"{cfg.qk_nope_head_dim} / {cfg.qk_rope_head_dim} / {cfg.v_head_dim}", "nope : rope = 2 : 1 as in Kimi K2"),
        ("intermediate_size / moe_intermediate_size", f"{cfg.intermediate_size} / {cfg.moe_intermediate_size}", ""),
        ("n_routed_experts / n_group / topk_group", f"{cfg.n_routed_experts} / {cfg.n_group} / {cfg.topk_group}", "group-limited routing excludes a group per token"),
        ("num_experts_per_tok / n_shared_experts", f"{cfg.num_experts_per_tok} / {cfg.n_shared_experts}", ""),
        ("routed_scaling_factor / norm_topk_prob", f"{cfg.routed_scaling_factor} / {cfg.norm_topk_prob}", ""),
        ("rope", "yarn, theta 1e4, factor 4, original 512", "2048 positions; mscale = mscale_all_dim = 1"),
        ("parameters", f"{summary['params']:,}", f"{summary['active_params']:,} active per token"),
    ]
    for k, v, n in rows:
        a(f"| `{k}` | {v} | {n} |")
    a("")
    a("Weights are stored in bf16 except the MoE routers (`gate.weight`, `e_score_correction_bias`), kept in")
    a("fp32 as transformers keeps them. `e_score_correction_bias` was learned by DeepSeek-V3's")
    a("auxiliary-loss-free balancing update (bias += 0.001 · sign(mean load − load) after each step), so it")
    a(f"is not zero (max |bias| {summary['max_abs_bias']:.3f}).")
    a("")
    a("## Data")
    a("")
    a("- **Source**: the reST sources of the Python 3.11 documentation in Debian 12's package")
    a("  `python3.11-doc` (3.11.2-6+deb12u9), `/usr/share/doc/python3.11/html/_sources/**/*.rst.txt`.")
    a("  License: **PSF License Version 2** (see `/usr/share/doc/python3.11-doc/copyright`); the")
    a("  excerpts in `eval/` are that text, redistributed under that license.")
    a(f"- **Split**: {summary['files']} files sorted by path; every 20th (index mod 20 = 10) is held out:")
    a(f"  {summary['train_files']} training files ({summary['train_bytes']:,} bytes), {summary['held_files']} held-out files ({summary['held_bytes']:,} bytes).")
    a("- **Sequences**: BOS + 1535 bytes; 70 % random windows of the training text, 15 % passkey")
    a("  sequences (a 5-digit key stated at a random depth, asked for at the end), 15 % copy sequences")
    a("  (a 32-256 byte span repeated later in the window).")
    a("")
    a("## Training")
    a("")
    meta = summary["meta"]
    a(f"- seed {args.seed}; batches of {args.batch} × {args.seq_len} tokens; {summary['tokens']:,} tokens in all")
    a(f"- **phase 1**: {args.steps} steps, peak lr {args.lr}, {args.warmup} warm-up steps then cosine to 10 %: the mix above")
    a(f"- **phase 2**: {args.phase2_steps} steps from the phase-1 weights as saved (bf16, widened to fp32), fresh")
    a(f"  optimizer, peak lr {args.phase2_lr}, 20 warm-up steps then cosine: 30 % text, 25 % passkey, 20 % copy,")
    a("  25 % random-string copy (1-3 random [A-Za-z0-9] strings of 12-48 characters, each repeated verbatim")
    a("  later in the window). Phase 1 alone left the model without copy heads (table below), so")
    a("  phase 2 was meant to teach retrieval; whether it did is measured below, not assumed.")
    a("- AdamW (β 0.9/0.95, weight decay 0.1 on matrices), gradient clip 1.0, bf16 autocast on the CPU")
    a("  (fp32 master weights), torch's fused CPU attention (sdpa)")
    w1, w2 = meta.get("phase1_wall_s"), meta.get("phase2_wall_s")
    a(f"- {summary['threads']} threads on {summary['cpu']}; wall time phase 1 {w1 / 60:.0f} min (load average"
      f" {meta.get('phase1_loadavg', 0):.0f}), phase 2 {w2 / 60:.0f} min (load average {meta.get('phase2_loadavg', 0):.0f}):"
      " the machine was shared with other jobs. Unloaded, one step takes about 4 s on this CPU"
      f" (~{(args.steps + args.phase2_steps) * 4 / 60:.0f} min for both phases).")
    a(f"- torch {torch.__version__}, transformers {summary['transformers']}, Python {platform.python_version()}")
    a("")
    c1, c2 = summary["copy"]["phase1"], summary["copy"]["final"]
    a("### Copying (induction) check")
    a("")
    a("Mean NLL (nats/byte) of a 128-byte held-out span at its first occurrence and at its verbatim repeat")
    a("about 700 bytes later (8 spans; a model that copies predicts the repeat far better):")
    a("")
    a("| weights | first occurrence | repeat |")
    a("|---|---|---|")
    a(f"| after phase 1 | {c1[0]:.3f} | {c1[1]:.3f} |")
    a(f"| shipped (after phase 2) | {c2[0]:.3f} | {c2[1]:.3f} |")
    a("")
    copies = c2[1] < 0.5 * c2[0]  # a copy head predicts most of a verbatim repeat
    if copies:
        a("The repeat costs less than half the first occurrence: the model has formed copy (induction) heads.")
    else:
        a(f"The repeat costs {100 * (1 - c2[1] / c2[0]):.0f} % less than the first occurrence: **no copy (induction)")
        a("heads formed** in this training budget (a copying model would predict the repeat almost free). Its")
        a("attention is trained but mostly local (table below), and the passkey result is at chance (1 digit in 10).")
    a("")
    a("### Loss curve (`training_log.csv`, `loss.svg`)")
    a("")
    a("| phase | step | tokens | train bits/byte (batch) | held-out bits/byte |")
    a("|---|---|---|---|---|")
    for r in log:
        if r["heldout_bpb"] != "":
            a(f"| {r['phase']} | {r['step']} | {r['tokens']:,} | {r['train_bpb']:.3f} | {r['heldout_bpb']:.3f} |")
    a("")
    a(f"**Held-out: {last['heldout_bpb']:.3f} bits per byte** ({summary['held_windows']} windows of 1535 bytes spread over the held-out files,")
    a("fp32 weights before the bf16 rounding; after rounding to bf16, as shipped: ")
    a(f"{summary['heldout_bpb_bf16']:.3f} bits per byte). For scale: gzip -9 of the held-out text gives {summary['gzip_bpb']:.2f}.")
    a("")
    a(f"Passkey retrieval (the 4 `eval/passkey-*.txt` inputs, teacher-forced, full cache): {summary['passkey_digits']}")
    a("of the 5-digit keys' digits predicted top-1.")
    a("")
    a("## Attention statistics (`attention_stats.csv`)")
    a("")
    a("transformers' eager attention, fp32, one held-out window of 1024 tokens; means over heads and queries.")
    a("")
    a("| layer | mass on token 0 (sink) | on tokens 0-3 | on the 32 most recent | entropy (bits) | uniform entropy |")
    a("|---|---|---|---|---|---|")
    for s in stats:
        a(f"| {s['layer']} | {s['sink_mass']:.3f} | {s['first4_mass']:.3f} | {s['recent32_mass']:.3f} | {s['entropy_bits']:.2f} | {s['uniform_entropy_bits']:.2f} |")
    a("")
    a("## What it can and cannot tell about Kimi K2.6")
    a("")
    a("It has Kimi's attention *structure* (a low-rank query, a 64+16-value latent cache shared by all heads,")
    a("decoupled RoPE keys, YaRN, MoE with group-limited sigmoid routing), trained attention patterns")
    a("(" + ("sinks, local heads, copy heads" if copies else "a broad layer 0, sharply local middle layers, no copy heads")
      + ") and a residual stream through")
    a("which an eviction's error reaches the logits. It has none of Kimi's scale: 8 heads instead of 64,")
    a("5 layers instead of 61, 1.5 k contexts instead of 256 k, bytes instead of a 160 k-token vocabulary,")
    a("and minutes of training on one corpus. Rankings of eviction policies on it are evidence about MLA")
    a("caches in general, not a measurement of Kimi.")
    a("")
    a("## Files")
    a("")
    a("| file | sha256 |")
    a("|---|---|")
    for f in summary["files_sha"]:
        a(f"| `{f[0]}` | `{f[1]}` |")
    a("")
    a("Reproduce: `python reference/python/train_tiny_mla.py --out models/tiny-mla` (both phases) with the venv of")
    a("`reference/python/requirements.txt` on a 2-thread CPU (the same machine class and thread count give")
    a("the same weights; another CPU's kernels may round differently).")
    a("")
    a("`eval/heldout-corpus/` (written by `reference/python/make_heldout_corpus.py`, not by training):")
    a("the first 4096 bytes of each of the 25 held-out files, for `mla-h2o eval --text DIR --windows W`.")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def random_copy_sequence(text, rng, length):
    """Natural text with 1-3 random [A-Za-z0-9] strings (12-48 chars), each written once in the
    first half of the window and repeated verbatim later: only an induction (copy) head can
    predict the repeat, so these sequences teach retrieval."""
    alphabet = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    strings = [bytes(alphabet[rng.integers(0, len(alphabet), size=int(rng.integers(12, 49)))])
               for _ in range(int(rng.integers(1, 4)))]
    inserts = [b" " + s + b" " for s in strings]
    filler = window(text, rng, length - 2 * sum(len(b) for b in inserts))
    half = len(filler) // 2
    cuts = []
    for b in inserts:
        a = int(rng.integers(0, half))
        c = int(rng.integers(half, len(filler) + 1))
        cuts.append((a, b))
        cuts.append((c, b))
    cuts.sort(key=lambda t: t[0])
    out, prev = [], 0
    for at, b in cuts:
        out.append(filler[prev:at])
        out.append(b)
        prev = at
    out.append(filler[prev:])
    return b"".join(out)


def retrieval_batch(text, rng, batch, seq_len):
    """Phase 2's mix: 30 % text windows, 25 % passkey, 20 % copy, 25 % random-string copy."""
    rows = []
    for _ in range(batch):
        u = rng.random()
        if u < 0.30:
            body = window(text, rng, seq_len - 1)
        elif u < 0.55:
            body, _ = passkey_sequence(text, rng, seq_len - 1)
        elif u < 0.75:
            body = copy_sequence(text, rng, seq_len - 1)
        else:
            body = random_copy_sequence(text, rng, seq_len - 1)
        assert len(body) == seq_len - 1
        rows.append([BOS] + list(body))
    return torch.tensor(rows, dtype=torch.long)


def train_phase(model, tracker, make_batch, steps, lr, warmup, windows, args, phase, log):
    """AdamW with linear warm-up then cosine to 10 % of lr; logs into `log`; returns wall seconds."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):
        if step < warmup:
            return lr * (step + 1) / warmup
        t = (step - warmup) / max(steps - warmup, 1)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    base_step = log[-1]["step"] if log else 0
    base_tokens = log[-1]["tokens"] if log else 0
    t0 = time.time()
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x = make_batch()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ratios = tracker.update(0.001)
        done = step + 1
        loss = float(out.loss.detach())
        row = {"phase": phase, "step": base_step + done, "tokens": base_tokens + done * args.batch * args.seq_len,
               "lr": lr_at(step), "train_loss": loss, "train_bpb": loss / math.log(2),
               "max_over_mean_load": max(ratios) if ratios else 0.0, "heldout_loss": "", "heldout_bpb": ""}
        if done % args.eval_every == 0 or done == steps:
            hl = heldout_loss(model, windows)
            row["heldout_loss"], row["heldout_bpb"] = hl, hl / math.log(2)
        if done % 10 == 0 or row["heldout_bpb"] != "" or args.smoke:
            log.append(row)
            el = time.time() - t0
            print(f"phase {phase} step {done}/{steps}  loss {loss:.3f}  bpb {row['train_bpb']:.3f}"
                  + (f"  held-out bpb {row['heldout_bpb']:.3f}" if row["heldout_bpb"] != "" else "")
                  + f"  load max/mean {row['max_over_mean_load']:.2f}  {el:.0f} s, ~{el / done * (steps - done):.0f} s left",
                  flush=True)
    return time.time() - t0


def upcast(model):
    for p in list(model.parameters()) + list(model.buffers()):
        if p.dtype.is_floating_point:
            p.data = p.data.to(torch.float32)


@torch.no_grad()
def copy_gain(model, text, seed, count=8, span=128):
    """Induction check: mean NLL (nats/byte) of a 128-byte held-out span at its first occurrence
    and at its verbatim repeat ~700 bytes later (bytes 8.. of each, after the copy is cued)."""
    rng = np.random.default_rng(seed)
    first, second = [], []
    for _ in range(count):
        s = window(text, rng, span)
        filler = window(text, rng, 1535 - 2 * span - 2)
        a, b = 300, 1000
        body = filler[:a] + s + b"\n" + filler[a:b] + b"\n" + s + filler[b:]
        ids = torch.tensor([[BOS] + list(body)], dtype=torch.long)
        lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        nll = -lp[:-1].gather(1, ids[0, 1:, None])[:, 0]
        s1, s2 = a, a + span + 1 + (b - a) + 1
        first.append(float(nll[s1 + 8 : s1 + span].mean()))
        second.append(float(nll[s2 + 8 : s2 + span].mean()))
    return float(np.mean(first)), float(np.mean(second))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/tiny-mla")
    ap.add_argument("--steps", type=int, default=900, help="phase 1 steps (mostly natural text)")
    ap.add_argument("--phase2-steps", type=int, default=300, help="phase 2 steps (retrieval-heavy mix)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1536)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--phase2-lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--corpus", default=CORPUS_DIR)
    ap.add_argument("--start-from", default="",
                    help="skip phase 1: DIR holds its saved output (model, training_log.csv, training_meta.json)")
    ap.add_argument("--smoke", action="store_true", help="3 + 3 steps, 2 held-out windows (a quick check of the script)")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.phase2_steps, args.eval_every = 3, 3, 3

    import gzip
    import json
    import shutil

    import transformers
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    os.makedirs(os.path.join(args.out, "eval"), exist_ok=True)

    train_files, held_files = corpus_files(args.corpus)
    train_text, held_text = read_text(train_files), read_text(held_files)
    windows = heldout_windows(held_text, args.seq_len, 2 if args.smoke else 24)

    # held-out inputs for mla-h2o (from held-out files only)
    eval_rng = np.random.default_rng(args.seed + 1)
    with open(os.path.join(args.out, "eval", "heldout.txt"), "wb") as f:
        f.write(held_text[len(held_text) // 3 : len(held_text) // 3 + 8192])
    passkeys = []
    for i, depth in enumerate([0.10, 0.35, 0.60, 0.85]):
        body, key = passkey_sequence(held_text, eval_rng, args.seq_len - 1, depth=depth)
        passkeys.append((body, key))
        with open(os.path.join(args.out, "eval", f"passkey-{i + 1}.txt"), "wb") as f:
            f.write(body)

    cfg = build_config()
    meta = {}
    log = []
    if args.start_from:
        # phase 1 as an earlier run of this script saved it (bf16 weights, fp32 router)
        with open(os.path.join(args.start_from, "training_meta.json")) as f:
            meta = json.load(f)
        with open(os.path.join(args.start_from, "training_log.csv")) as f:
            for r in csv.DictReader(f):
                row = {"phase": int(r.get("phase") or 1)}
                for k in ("step", "tokens"):
                    row[k] = int(r[k])
                for k in ("lr", "train_loss", "train_bpb", "max_over_mean_load"):
                    row[k] = float(r[k])
                for k in ("heldout_loss", "heldout_bpb"):
                    row[k] = float(r[k]) if r[k] != "" else ""
                log.append(row)
        log = [r for r in log if r["phase"] == 1]
        phase1_dir = args.start_from
    else:
        model = DeepseekV3ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
        tracker = BalanceTracker(model)
        wall1 = train_phase(model, tracker, lambda: training_batch(train_text, rng, args.batch, args.seq_len),
                            args.steps, args.lr, args.warmup, windows, args, 1, log)
        meta = {"phase1_wall_s": wall1, "phase1_loadavg": os.getloadavg()[0]}
        phase1_dir = os.path.join(args.out, "phase1")
        save_model(model, phase1_dir)
        del model
    # phase 2 starts from the phase-1 weights as saved (bf16, router fp32), widened to fp32
    rng2 = np.random.default_rng(args.seed + 2)
    torch.manual_seed(args.seed + 2)
    model = DeepseekV3ForCausalLM.from_pretrained(phase1_dir, dtype=torch.float32, attn_implementation="sdpa")
    upcast(model)
    p1_first, p1_second = copy_gain(model, held_text, args.seed + 3)
    tracker = BalanceTracker(model)
    wall2 = train_phase(model, tracker, lambda: retrieval_batch(train_text, rng2, args.batch, args.seq_len),
                        args.phase2_steps, args.phase2_lr, 20, windows, args, 2, log)
    meta.update({"phase2_wall_s": wall2, "phase2_loadavg": os.getloadavg()[0]})
    if not args.start_from:
        shutil.rmtree(phase1_dir, ignore_errors=True)

    with open(os.path.join(args.out, "training_log.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(log[-1].keys()))
        w.writeheader()
        w.writerows(log)
    loss_svg(log, os.path.join(args.out, "loss.svg"))

    max_abs_bias = max(float(m.e_score_correction_bias.abs().max()) for _, m in tracker.routers)
    save_model(model, args.out)

    # the shipped (bf16) weights, loaded back as a user would
    shipped = DeepseekV3ForCausalLM.from_pretrained(args.out, dtype=torch.float32, attn_implementation="sdpa")
    shipped.eval()
    bpb_bf16 = heldout_loss(shipped, windows) / math.log(2)
    correct = 0
    with torch.no_grad():
        for body, key in passkeys:
            ids = torch.tensor([[BOS] + list(body)], dtype=torch.long)
            pred = shipped(input_ids=ids).logits[0].argmax(-1)
            start = len(body) - len(b".\n") - len(key) + 1  # position (in ids) of the first key digit
            for j in range(len(key)):
                correct += int(pred[start + j - 1] == ids[0, start + j])
    p2_first, p2_second = copy_gain(shipped, held_text, args.seed + 3)
    stats = attention_stats(args.out, held_text[len(held_text) // 3 :])
    with open(os.path.join(args.out, "attention_stats.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(stats[0].keys()))
        w.writeheader()
        w.writerows(stats)

    params = sum(p.numel() for p in shipped.parameters())
    expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
    active = params - (cfg.num_hidden_layers - cfg.first_k_dense_replace) * (cfg.n_routed_experts - cfg.num_experts_per_tok) * expert
    held_join = b"".join(windows)
    files_sha = []
    for name in sorted(os.listdir(args.out)):
        p = os.path.join(args.out, name)
        if os.path.isfile(p) and name != "README.md":
            files_sha.append((name, sha256(p)))
    summary = {
        "params": params, "active_params": active, "max_abs_bias": max_abs_bias,
        "files": len(train_files) + len(held_files), "train_files": len(train_files), "held_files": len(held_files),
        "train_bytes": len(train_text), "held_bytes": len(held_text), "tokens": log[-1]["tokens"],
        "threads": args.threads, "cpu": cpu_name(), "meta": meta, "transformers": transformers.__version__,
        "heldout_bpb_bf16": bpb_bf16, "held_windows": len(windows),
        "gzip_bpb": 8 * len(gzip.compress(held_join, 9)) / len(held_join),
        "passkey_digits": f"{correct} / {5 * len(passkeys)}", "files_sha": files_sha,
        "copy": {"phase1": (p1_first, p1_second), "final": (p2_first, p2_second)},
    }
    write_card(args.out, args, cfg, log, stats, summary)
    print(f"wrote {args.out}: held-out {log[-1]['heldout_bpb']:.3f} bits/byte (bf16 {bpb_bf16:.3f}), "
          f"passkey digits {summary['passkey_digits']}, copy {p2_first:.3f} -> {p2_second:.3f} nats/byte")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
