#!/usr/bin/env python3
"""train_tiny_mla_recall.py — trains models/tiny-mla-recall, a small MLA model that copies and retrieves.

Why
  models/tiny-mla formed no copy (induction) heads: passkey at chance, a verbatim repeat predicted
  1 % better than its first occurrence. KV-cache eviction hurts most where a model retrieves, so a
  model without retrieval heads cannot show what eviction loses. This script trains a fresh model of
  the same family (transformers DeepseekV3ForCausalLM) with a curriculum built for copy heads to form
  quickly on a 2-core CPU. The C++ product never runs Python; this script is run by hand.

Model (build_config)
  byte-level vocabulary (0-255 bytes, 256 BOS, 257 EOS; "byte_level_vocab": true), hidden 256,
  4 layers: 0-2 dense SwiGLU (intermediate 768), layer 3 DeepseekV3MoE (8 routed experts in 2 groups, topk_group 1,
  2 per token, 1 shared, learned e_score_correction_bias by DeepSeek-V3's auxiliary-loss-free
  update; moe_intermediate 128); 8 heads, q_lora_rank 128, kv_lora_rank 64, qk_nope 32 / qk_rope 16 (Kimi's 2 : 1), v 48;
  YaRN (theta 10000, factor 8 over 512 original positions: 4096 positions).

Data
  The reST sources of the Python 3.11 documentation (Debian 12 package python3.11-doc, PSF License
  Version 2), files sorted by path, every 20th (index % 20 == 10) held out, as for tiny-mla.
  Each training row is BOS + L-1 bytes of training text, and one of:
    text      plain text, every byte a target;
    rcopy     1-4 random [A-Za-z0-9] strings (8-48 characters) written once and repeated verbatim
              later: the first occurrence is not a target, the repeat is (only a copy head predicts it);
    tcopy     a 32-256 byte span of the text repeated verbatim later (both occurrences targets);
    passkey   "The pass key is NNNNN. Remember it. NNNNN is the pass key." at a random depth and
              "What is the pass key? The pass key is NNNNN." at the end: the key in the needle is
              not a target, the rest is, and the five answer digits weigh `--answer-weight`.
  Loss = sum(w * nll) / sum(w) over the batch's target bytes.

Curriculum (stages; a stage ends at its step count)
  I  L 128,  batch 16, pure induction rows (BOS + a random [A-Za-z0-9] string of L/4-L/2 characters
             repeated to L; loss on the repeats only), lr 3e-3; ends early once the held-out
             induction repeat loss is below 1 nat (attempt 2: at step 800)
  A  L 256,  batch 16, the mix 35 % text, 40 % rcopy, 10 % tcopy, 15 % passkey, lr 2e-3 (warm-up 100)
  B  L 1024, batch 4,  the same mix with needles at every depth, lr 1e-3
  C  L 2048, batch 2,  the same, lr 5e-4
  (steps: A 1200, B 250, C 100; fp32 arithmetic: the AVX2 CPU it ran on has no bf16 instructions,
  and torch's emulated bf16 autocast ran 10x slower there)
  Every --eval-every steps the held-out probes are logged: bits per byte on held-out text, the copy
  ratio (NLL of a 128-byte held-out span's verbatim repeat / its first occurrence) and passkey
  accuracy at the stage's length. Stall rule: if at the end of stage A's --stall-check step the copy
  ratio is still above 0.8, recipe "A2" takes over stage A's remaining steps (65 % rcopy, loss on
  repeats only for those rows, lr halved); the log and the card say so.

Resumable: a checkpoint (model, optimizer, RNG states, log, stage and step) is written atomically
to OUT/train-state/state.pt every --save-minutes; rerunning the same command resumes from it.

Outputs (--out, default models/tiny-mla-recall)
  config.json, generation_config.json, model.safetensors   bf16 (router fp32, as transformers keeps it)
  training_log.csv, loss.svg, attention_stats.csv, copy_heads.csv, eval/ (held-out inputs), README.md

Attempts and their curves: docs/recall-model.md (attempt 1 formed no copy heads; attempt 2 is shipped).

Usage
  python reference/python/train_tiny_mla_recall.py [--out DIR] [--threads 2]   (venv of requirements.txt)
  python reference/python/train_tiny_mla_recall.py --finish-only --out DIR     (card from the last state)
  --smoke: a few steps of each stage into a scratch directory.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny_mla as base  # noqa: E402  (corpus, passkey format, balance tracker, svg, save)

SEED = 20261201
BOS, EOS, VOCAB = base.BOS, base.EOS, base.VOCAB
ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

STAGES = [  # name, seq_len, batch, steps, lr, warmup
    ("I", 128, 16, 3000, 3e-3, 100),  # pure induction; ends early once its probe's repeat loss < 1 nat
    ("A", 256, 16, 1200, 2e-3, 100),
    ("B", 1024, 4, 250, 1e-3, 20),
    ("C", 2048, 2, 100, 5e-4, 20),
]
MIX_I = {"induct": 1.0}
INDUCT_DONE_NATS = 1.0  # stage I ends when the held-out induction rows' repeat loss falls below this
MIX = {"text": 0.35, "rcopy": 0.40, "tcopy": 0.10, "passkey": 0.15}
MIX_A2 = {"text": 0.20, "rcopy": 0.65, "tcopy": 0.05, "passkey": 0.10}
# Recipe 3 (docs/recall-model.md, "What the next attempt should do"): stages A-C keep 10 % of
# stage I's induction rows, stage A starts at stage I's final lr without a fresh warm-up (attempt
# 2's copy ratio rose from 0.05 to 0.69 after a warm-up to 2e-3), and stage C, where the failing
# 2 k needles train, runs 300 steps instead of 100.
STAGES3 = [
    ("I", 128, 16, 3000, 3e-3, 100),
    ("A", 256, 16, 1200, 1e-3, 0),
    ("B", 1024, 4, 250, 1e-3, 20),
    ("C", 2048, 2, 300, 5e-4, 20),
]
MIX3 = {"text": 0.30, "rcopy": 0.35, "tcopy": 0.10, "passkey": 0.15, "induct": 0.10}
# Recipe 4 (attempt 4 of docs/recall-model.md): no training from scratch. It starts from the
# shipped attempt-2 weights (--init-from, their training log and events carried over, so the card
# and curves tell the whole history) and adds one stage D at L 2048, where attempt 2 failed (the
# shallow 2 k needles; stage C had 100 steps), with the mix moved to what the targets measure:
# text-span copy whose repeats weigh --copy-weight, and passkey rows, beside text.
STAGES4 = STAGES + [("D", 2048, 2, 1400, 3e-4, 20)]
MIX4 = {"text": 0.30, "rcopy": 0.10, "tcopy": 0.30, "passkey": 0.30}
# Recipe 5 (attempt 5): continues from the shipped attempt-4 weights (--init-from). Attempt 4's copy
# ratio stayed near 0.6 although random strings copy at 0.05-0.23 nats: text spans repeat bigrams
# the filler holds too, so a copy head must match a longer prefix. Stage T does for text what
# stage I did for random strings (a text span repeated to the row's end, every repeat a target, at
# L 512 where steps are cheap), beside text-span copy and passkey rows; stage E goes back to L 2048
# for the shallow 2 k needles. In both stages a third of the passkey rows put the needle at 2-40 %
# depth (SHALLOW_SHARE), the cells attempt 4 missed.
STAGES5 = STAGES + [("D", 2048, 2, 800, 3e-4, 20), ("T", 512, 8, 600, 5e-4, 20), ("E", 2048, 2, 600, 3e-4, 20)]
MIX5T = {"text": 0.15, "tinduct": 0.35, "tcopy": 0.30, "passkey": 0.20}
MIX5E = {"text": 0.25, "tinduct": 0.05, "tcopy": 0.35, "passkey": 0.35}
# Recipe 6 (attempt 6): continues from the shipped attempt-5 weights (--init-from). Attempt 5's copy
# ratio met the target at 512 bytes (0.199) but was 0.39 at the card's 1024, where a span's repeat
# sits ~600 bytes after it: stage T's repeats were at most 128 bytes apart. Stage U trains "far" text
# induction at L 1024 (a text span written, then repeated after text gaps of L/5 .. L/2 bytes, every
# repeat a target, the gaps weighing FAR_GAP_WEIGHT) beside text, short text induction and passkey
# rows; stage F at L 2048 keeps far induction in the mix so that the 2 k needles and text do not
# buy themselves back with the copy.
STAGES6 = STAGES5 + [("U", 1024, 4, 500, 4e-4, 20), ("F", 2048, 2, 300, 2e-4, 20)]
MIX6U = {"text": 0.20, "tfar": 0.40, "tinduct": 0.10, "passkey": 0.30}
MIX6F = {"text": 0.25, "tfar": 0.30, "tcopy": 0.10, "passkey": 0.35}
FAR_GAP_WEIGHT = 0.3
# Recipe 7 (attempt 7): continues from attempt 6's weights (--init-from). Attempt 6's copy probe at
# 1024 bytes fell from 0.39 to 0.25 in stage U and stopped there: stage U's gaps (L/5 .. L/2, 205-512
# bytes at L 1024) put a repeat closer to its first occurrence than the card's probe does (~590
# bytes), and every later repeat could copy from the nearest earlier one. Stage V trains one far
# repeat per row at the probe's distances (row_tspan: a 96-256 byte text span at 5-35 % of the row,
# its one verbatim repeat 300-800 bytes later, text around both), beside far induction, text and
# passkey rows; stage G at L 2048 keeps far single repeats in the mix for the 2 k needles.
STAGES7 = STAGES6 + [("V", 1024, 4, 800, 4e-4, 20), ("G", 2048, 2, 300, 2e-4, 20)]
MIX7V = {"text": 0.20, "tspan": 0.45, "tfar": 0.10, "passkey": 0.25}
MIX7G = {"text": 0.25, "tspan": 0.35, "tcopy": 0.05, "passkey": 0.35}
# Recipe 8 (attempt 8): continues from attempt 7's weights (--init-from). In attempts 6 and 7 every
# stage at L 1024 lowered the copy ratio at 1024 bytes (to 0.25, then 0.18) and every following
# stage at L 2048 raised it again (0.32, 0.31) while it kept the 2 k needles. Stage W alternates
# its steps: even steps are stage V's rows at L 1024 (batch 4), odd steps stage G's at L 2048
# (batch 2), so that neither length's circuit is trained away by the other.
STAGES8 = STAGES7 + [("W", 2048, 2, 400, 2e-4, 20)]
# Recipe 9 (attempt 9): continues from attempt 8's weights (--init-from). Stage W's alternation lowered
# the 1024-byte copy probe from 0.29 to 0.24 in its first 200 steps and kept the 2 k needles; stage X
# runs the same alternation 300 steps more at a slightly lower rate.
STAGES9 = STAGES8 + [("X", 2048, 2, 300, 1.5e-4, 20)]
ALTERNATE = {"W": (1024, 4, MIX7V), "X": (1024, 4, MIX7V)}  # a stage whose even steps run these (seq_len, batch, mix) instead
RECIPES = {"2": (STAGES, MIX), "3": (STAGES3, MIX3), "4": (STAGES4, MIX), "5": (STAGES5, MIX), "6": (STAGES6, MIX),
           "7": (STAGES7, MIX), "8": (STAGES8, MIX), "9": (STAGES9, MIX)}
STAGE_MIX = {"D": MIX4, "T": MIX5T, "E": MIX5E, "U": MIX6U, "F": MIX6F, "V": MIX7V, "G": MIX7G, "W": MIX7G, "X": MIX7G}  # a stage's own mix, where it has one (else the recipe's)
SHALLOW_SHARE = {"T": 1 / 3, "E": 1 / 3, "U": 1 / 3, "F": 1 / 3, "V": 1 / 3, "G": 1 / 3, "W": 1 / 3, "X": 1 / 3}  # a stage's share of passkey rows with the needle at 2-40 % depth
CONTINUES = {"4": len(STAGES), "5": len(STAGES) + 1, "6": len(STAGES5), "7": len(STAGES6), "8": len(STAGES7), "9": len(STAGES8)}  # recipes that start from a shipped model: stages already run


def build_config():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=768, moe_intermediate_size=128,
        num_hidden_layers=4, first_k_dense_replace=3,
        num_attention_heads=8, num_key_value_heads=8,
        n_shared_experts=1, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
        routed_scaling_factor=2.5, norm_topk_prob=True,
        q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=48,
        max_position_embeddings=4096, rms_norm_eps=1e-6, rope_interleave=True, attention_bias=False,
        tie_word_embeddings=False, initializer_range=0.02, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                         "original_max_position_embeddings": 512, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0},
    )
    cfg.byte_level_vocab = True
    return cfg


# ---- rows: bytes and per-byte target weights ---------------------------------------------------


def random_string(rng, lo=8, hi=48):
    n = int(rng.integers(lo, hi + 1))
    return bytes(np.frombuffer(ALPHABET, dtype=np.uint8)[rng.integers(0, len(ALPHABET), size=n)])


def assemble(filler, inserts):
    """filler with `inserts` = [(at, bytes, weight)] placed at filler offsets; returns (body, w)."""
    inserts = sorted(inserts, key=lambda t: t[0])
    body, w, prev = [], [], 0
    for at, b, wt in inserts:
        body.append(filler[prev:at]); w.append(np.ones(at - prev, np.float32))
        body.append(b); w.append(np.full(len(b), wt, np.float32))
        prev = at
    body.append(filler[prev:]); w.append(np.ones(len(filler) - prev, np.float32))
    return b"".join(body), np.concatenate(w)


def row_text(text, rng, n):
    return base.window(text, rng, n), np.ones(n, np.float32)


def row_rcopy(text, rng, n, repeat_only=False):
    wrapped = []  # 1-4 strings whose two copies take at most half the row
    for _ in range(int(rng.integers(1, 5))):
        b = b" " + random_string(rng) + b" "
        if 2 * (sum(len(x) for x in wrapped) + len(b)) > n // 2:
            break
        wrapped.append(b)
    if not wrapped:
        wrapped.append(b" " + random_string(rng, 8, 16) + b" ")
    filler = base.window(text, rng, n - 2 * sum(len(b) for b in wrapped))
    half = len(filler) // 2
    inserts = []
    for b in wrapped:
        inserts.append((int(rng.integers(0, half)), b, 0.0))
        inserts.append((int(rng.integers(half, len(filler) + 1)), b, 1.0))
    body, w = assemble(filler, inserts)
    if repeat_only:  # recipe A2: only the repeats are targets in these rows
        w = repeat_weights(filler, inserts)
    return body, w


def repeat_weights(filler, inserts):
    """the weights of assemble(filler, inserts) with the filler's bytes at 0."""
    ws, prev = [], 0
    for at, b, wt in sorted(inserts, key=lambda t: t[0]):
        ws.append(np.zeros(at - prev, np.float32))
        ws.append(np.full(len(b), wt, np.float32))
        prev = at
    ws.append(np.zeros(len(filler) - prev, np.float32))
    return np.concatenate(ws)


def row_induct(rng, n):
    """a random [A-Za-z0-9] string of n/8 .. n/4 characters repeated until n bytes: the first
    occurrence is not a target, every repeat is (the pure copy task of attempt 1's diagnostic)."""
    s = random_string(rng, max(4, n // 8), max(5, n // 4))
    body = (s * (n // len(s) + 1))[:n]
    w = np.zeros(n, np.float32)
    w[len(s):] = 1.0
    return body, w


def row_tinduct(text, rng, n):
    """a held-in text span of n/8 .. n/4 bytes repeated until n bytes (stage T of recipe 5): the
    first occurrence is not a target, every repeat is (stage I's task on text instead of random strings)."""
    s = base.window(text, rng, int(rng.integers(max(4, n // 8), max(5, n // 4) + 1)))
    body = (s * (n // len(s) + 1))[:n]
    w = np.zeros(n, np.float32)
    w[len(s):] = 1.0
    return body, w


def row_tfar(text, rng, n):
    """far text induction (stage U of recipe 6): a held-in text span of 96-256 bytes after a short
    text lead, then repeated after text gaps of n/5 .. n/2 bytes until n bytes. The lead, the gaps
    and the span's first occurrence weigh FAR_GAP_WEIGHT (language modelling kept, lightly), every
    repeat's bytes after its first weigh 1 (only a copy head over the gap predicts them)."""
    s = base.window(text, rng, int(rng.integers(96, min(257, n // 4) + 1)))
    parts, ws = [], []
    lead = base.window(text, rng, int(rng.integers(0, n // 8 + 1)))
    parts += [lead, s]
    ws += [np.full(len(lead) + len(s), FAR_GAP_WEIGHT, np.float32)]
    used = len(lead) + len(s)
    while used < n:
        gap = base.window(text, rng, min(n - used, int(rng.integers(n // 5, n // 2 + 1))))
        rep = s[:max(0, n - used - len(gap))]
        w = np.full(len(gap) + len(rep), FAR_GAP_WEIGHT, np.float32)
        w[len(gap) + 1:] = 1.0  # a repeat's first byte cannot be known; the rest can be copied
        parts += [gap, rep]
        ws.append(w)
        used += len(gap) + len(rep)
    return b"".join(parts), np.concatenate(ws)


def row_tspan(text, rng, n):
    """one far repeat (stage V of recipe 7): a held-in text span of 96-256 bytes at 5-35 % of the row
    and its one verbatim repeat 300-800 bytes after its end (the card's copy probe puts a 128-byte
    span's repeat ~590 bytes after it at 1024 bytes), text before, between and after. The text weighs
    FAR_GAP_WEIGHT, the span's first occurrence too, the repeat's bytes after its first weigh 1."""
    span = base.window(text, rng, int(rng.integers(96, min(257, n // 4) + 1)))
    start = int(rng.uniform(0.05, 0.35) * n)
    room = n - start - 2 * len(span)  # bytes of text left for the gap and the tail
    gap = int(rng.integers(min(300, room), min(800, room) + 1))
    lead = base.window(text, rng, start)
    between = base.window(text, rng, gap)
    tail = base.window(text, rng, n - start - 2 * len(span) - gap)
    body = lead + span + between + span + tail
    w = np.full(n, FAR_GAP_WEIGHT, np.float32)
    r0 = start + len(span) + gap  # the repeat's first byte
    w[r0 + 1:r0 + len(span)] = 1.0
    return body, w


def row_tcopy(text, rng, n, copy_weight=1.0):
    """filler with a 32-256 byte text span written twice; every byte a target, the repeat's bytes
    (after its first) weighing copy_weight (1.0 in recipes 2 and 3)."""
    span = base.window(text, rng, int(rng.integers(32, min(257, n // 3))))
    filler = base.window(text, rng, n - 2 * len(span) - 2)
    a = int(rng.integers(0, len(filler) // 2))
    b = int(rng.integers(len(filler) // 2, len(filler) + 1))
    body = filler[:a] + span + b"\n" + filler[a:b] + b"\n" + span + filler[b:]
    w = np.ones(len(body), np.float32)
    r0 = a + len(span) + 1 + (b - a) + 1  # the repeat's first byte
    w[r0 + 1:r0 + len(span)] = copy_weight
    return body, w


def passkey_parts(key):
    needle = (" " + base.NEEDLE.format(k=key) + " ").encode()
    question = ("\n" + base.QUESTION.format(k=key) + "\n").encode()
    return needle, question


def row_passkey(text, rng, n, answer_weight, depth=None, key=None):
    """n bytes: filler, the needle at `depth`, the question at the end. Returns (body, w, key, answer_at)."""
    key = key or base.random_digits(rng)
    needle, question = passkey_parts(key)
    filler = base.window(text, rng, n - len(needle) - len(question))
    depth = float(rng.uniform(0.02, 0.95)) if depth is None else depth
    at = int(depth * len(filler))
    body = filler[:at] + needle + filler[at:] + question
    w = np.ones(len(body), np.float32)
    k0 = at + needle.index(key.encode())  # the needle's two copies of the key are no targets
    w[k0:k0 + 5] = 0.0
    k1 = at + needle.index(key.encode(), needle.index(key.encode()) + 5)
    w[k1:k1 + 5] = 0.0
    answer_at = len(body) - len(b".\n") - 5  # first answer digit, as an index into body
    w[answer_at:answer_at + 5] = answer_weight
    return body, w, key, answer_at


def make_batch(text, rng, batch, seq_len, mix, answer_weight, repeat_only=False, copy_weight=1.0, shallow_share=0.0):
    """Returns ids [batch, seq_len], target weights [batch, seq_len] (weight of predicting ids[:, t])
    and each row's kind."""
    kinds, probs = list(mix), np.array([mix[k] for k in mix])
    ids = np.zeros((batch, seq_len), np.int64)
    wts = np.zeros((batch, seq_len), np.float32)
    n = seq_len - 1
    row_kinds = []
    for r in range(batch):
        kind = kinds[int(rng.choice(len(kinds), p=probs / probs.sum()))]
        row_kinds.append(kind)
        if kind == "induct":
            body, w = row_induct(rng, n)
        elif kind == "text":
            body, w = row_text(text, rng, n)
        elif kind == "rcopy":
            body, w = row_rcopy(text, rng, n, repeat_only)
        elif kind == "tcopy":
            body, w = row_tcopy(text, rng, n, copy_weight)
        elif kind == "tinduct":
            body, w = row_tinduct(text, rng, n)
        elif kind == "tfar":
            body, w = row_tfar(text, rng, n)
        elif kind == "tspan":
            body, w = row_tspan(text, rng, n)
        else:
            shallow = shallow_share > 0 and rng.random() < shallow_share  # the needle at 2-40 % depth
            body, w, _, _ = row_passkey(text, rng, n, answer_weight,
                                        depth=float(rng.uniform(0.02, 0.40)) if shallow else None)
        assert len(body) == n and len(w) == n, (kind, len(body), len(w))
        ids[r, 0] = BOS
        ids[r, 1:] = np.frombuffer(body, dtype=np.uint8)
        wts[r, 1:] = w
    return torch.from_numpy(ids), torch.from_numpy(wts), row_kinds


@torch.no_grad()
def probe_induct(model, seed, length, count=16):
    """mean NLL (nats) of the repeats of `count` held-out induction rows (a seed the training never draws)."""
    rng = np.random.default_rng(seed)
    x, w, _ = make_batch("", rng, count, length, MIX_I, 1.0)
    lp = torch.log_softmax(model(input_ids=x).logits[:, :-1].float(), -1)
    nll = -lp.gather(2, x[:, 1:, None])[..., 0]
    return float((nll * w[:, 1:]).sum() / w[:, 1:].sum())


# ---- probes (held-out) -----------------------------------------------------------------------


@torch.no_grad()
def nll_of(model, ids):
    """per-position NLL of ids[0, t] given ids[0, :t], t >= 1 (index t-1 of the result)."""
    lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return -lp[:-1].gather(1, ids[0, 1:, None])[:, 0]


@torch.no_grad()
def probe_copy(model, held, seed, length=1024, span=128, count=6):
    """(first, repeat) mean NLL nats/byte of a 128-byte held-out span and its verbatim repeat."""
    rng = np.random.default_rng(seed)
    first, second = [], []
    for _ in range(count):
        s = base.window(held, rng, span)
        filler = base.window(held, rng, length - 1 - 2 * span - 2)
        a = len(filler) // 5
        b = (4 * len(filler)) // 5
        body = filler[:a] + s + b"\n" + filler[a:b] + b"\n" + s + filler[b:]
        ids = torch.tensor([[BOS] + list(body)], dtype=torch.long)
        nll = nll_of(model, ids)
        s1 = a + 1  # index in ids of the span's first byte
        s2 = a + span + 1 + (b - a) + 1 + 1
        first.append(float(nll[s1 - 1 + 8: s1 - 1 + span].mean()))
        second.append(float(nll[s2 - 1 + 8: s2 - 1 + span].mean()))
    return float(np.mean(first)), float(np.mean(second))


@torch.no_grad()
def probe_passkey(model, held, seed, length, depths, per_depth):
    """fraction of passkey samples whose 5 answer digits are all top-1 (teacher-forced)."""
    rng = np.random.default_rng(seed)
    ok = 0
    total = 0
    for d in depths:
        for _ in range(per_depth):
            body, _, key, answer_at = row_passkey(held, rng, length - 1, 1.0, depth=d)
            ids = torch.tensor([[BOS] + list(body)], dtype=torch.long)
            pred = model(input_ids=ids).logits[0].argmax(-1)
            t0 = answer_at + 1  # index in ids of the first answer digit
            hit = all(int(pred[t0 + j - 1]) == int(ids[0, t0 + j]) for j in range(5))
            ok += int(hit)
            total += 1
    return ok / total


@torch.no_grad()
def heldout_bpb(model, windows):
    total, count = 0.0, 0
    for w in windows:
        ids = torch.tensor([[BOS] + list(w)], dtype=torch.long)
        nll = nll_of(model, ids)
        total += float(nll.sum())
        count += len(w)
    return total / count / math.log(2)


@torch.no_grad()
def copy_heads(model_dir, held, seed, span=128, length=1024):
    """Per (layer, head): mean attention from each byte of a verbatim repeat to the byte after its
    first occurrence (the induction target), over 4 held-out spans; and the same for a random
    string repeat. transformers eager attention, fp32."""
    from transformers import DeepseekV3ForCausalLM

    model = DeepseekV3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    rng = np.random.default_rng(seed)
    acc = None
    for _ in range(4):
        s = base.window(held, rng, span)
        filler = base.window(held, rng, length - 1 - 2 * span - 2)
        a, b = len(filler) // 5, (4 * len(filler)) // 5
        body = filler[:a] + s + b"\n" + filler[a:b] + b"\n" + s + filler[b:]
        ids = torch.tensor([[BOS] + list(body)], dtype=torch.long)
        out = model(input_ids=ids, output_attentions=True)
        s1 = a + 1
        s2 = a + span + 1 + (b - a) + 1 + 1
        q = torch.arange(s2 + 1, s2 + span)            # repeat bytes 1..span-1 as queries
        k = q - (s2 - s1) + 1                          # the byte after the same byte's first occurrence
        per = torch.stack([att[0][:, q, k].mean(-1) for att in out.attentions])  # [layers, heads]
        acc = per if acc is None else acc + per
    acc = acc / 4
    return [{"layer": l, "head": h, "induction_attention": float(acc[l, h])}
            for l in range(acc.shape[0]) for h in range(acc.shape[1])]


# ---- training --------------------------------------------------------------------------------


def lr_at(step, steps, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(steps - warmup, 1)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def weights_label(model_dir, log):
    """How a card names the weights a run continues: their path in the repository when they are
    shipped there, else the stage that ended them (the folder is the training machine's own)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rel = os.path.relpath(os.path.abspath(model_dir), repo)
    if not rel.startswith(".."):
        return rel
    return f"the weights of a run not shipped, ended by stage {log[-1]['stage']}"


def continue_from(model_dir, model, st, stages_done, recipe, next_stage):
    """Recipe 4's start: the weights of model_dir (an earlier attempt's save_pretrained output), its
    training log and events, so that step, token and time counts and the curves go on from there."""
    from transformers import DeepseekV3ForCausalLM
    earlier = DeepseekV3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(earlier.state_dict(), strict=False)
    if unexpected or [k for k in missing if "rotary" not in k]:
        sys.exit(f"error: {model_dir} does not hold this script's model (missing {missing}, unexpected {unexpected})")
    with open(os.path.join(model_dir, "training_log.csv"), newline="") as f:
        log = [{k: (v if v == "" or k in ("stage", "recipe") else (int(v) if k in ("step", "tokens") else float(v)))
                for k, v in r.items()} for r in csv.DictReader(f)]
    with open(os.path.join(model_dir, "results.json")) as f:
        earlier_res = json.load(f)
    events = earlier_res["events"]
    last = log[-1]
    st.update({"stage": stages_done, "step": 0, "global_step": last["step"], "tokens": last["tokens"],
               "wall_s": last["wall_s"], "log": log,
               "events": events + [f"recipe {recipe}: stage {next_stage} continues from {weights_label(model_dir, log)} (model.safetensors sha256 "
                                   f"{base.sha256(os.path.join(model_dir, 'model.safetensors'))[:16]}...) at step "
                                   f"{last['step']} (its {last['wall_s'] / 60:.0f} min ran on {earlier_res['threads']} "
                                   f"thread(s) of {earlier_res['cpu']}); the optimizer state starts afresh"]})
    print(f"continuing from {model_dir}: step {last['step']}, {last['tokens']:,} tokens, {last['wall_s'] / 60:.1f} min", flush=True)
    return st


def save_state(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/tiny-mla-recall")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--corpus", default=base.CORPUS_DIR)
    ap.add_argument("--answer-weight", type=float, default=4.0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--stall-check", type=int, default=600, help="stage-A step of the stall rule")
    ap.add_argument("--save-minutes", type=float, default=4.0)
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="2",
                    help="2: attempt 2; 3: induction rows kept, no stage-A warm-up, longer stage C; "
                         "4: attempt 2's weights (--init-from) and a stage D at L 2048; "
                         "5: attempt 4's weights (--init-from), text induction at L 512 (T), then L 2048 (E); "
                         "6: attempt 5's weights (--init-from), far text induction at L 1024 (U), then L 2048 (F); "
                         "7: attempt 6's weights (--init-from), one far text repeat per row at L 1024 (V), then L 2048 (G); "
                         "8: attempt 7's weights (--init-from), stage V's and G's rows on alternate steps (W)")
    ap.add_argument("--init-from", default="models/tiny-mla-recall",
                    help="recipes 4-8: the model directory (attempt 2's, 4's, 5's, 6's, 7's) whose weights, log and events it continues")
    ap.add_argument("--copy-weight", type=float, default=None,
                    help="weight of a text-span repeat's bytes (default 3.0 in recipes 4-8, else 1.0)")
    ap.add_argument("--stage-steps", default="", help="override the stages' step counts, e.g. 1200,250,100")
    ap.add_argument("--finish-only", action="store_true", help="write the shipped model and card from the state")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast on the CPU (fast only with AVX512-BF16 or AMX)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()

    import transformers
    from transformers import DeepseekV3ForCausalLM

    stages = [list(s) for s in RECIPES[args.recipe][0]]
    mix_main = RECIPES[args.recipe][1]
    args.stages, args.mix = stages, mix_main
    if args.copy_weight is None:
        args.copy_weight = 3.0 if args.recipe in CONTINUES else 1.0
    if args.stage_steps:
        for s, n in zip(stages, args.stage_steps.split(",")):
            s[3] = int(n)
    if args.smoke:
        for s in stages:
            s[3] = 4
        args.eval_every, args.stall_check = 4, 2
    torch.set_num_threads(args.threads)
    train_files, held_files = base.corpus_files(args.corpus)
    train_text, held_text = base.read_text(train_files), base.read_text(held_files)
    # probes read the first half of the held-out text; eval/ files the second half (never overlapping)
    probe_text = held_text[: len(held_text) // 2]
    eval_text = held_text[len(held_text) // 2:]
    windows = base.heldout_windows(probe_text, 1024, 2 if args.smoke else 12)

    state_dir = os.path.join(args.out, "train-state")
    os.makedirs(state_dir, exist_ok=True)
    state_path = os.path.join(state_dir, "state.pt")
    cfg = build_config()
    torch.manual_seed(args.seed)
    model = DeepseekV3ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    tracker = base.BalanceTracker(model)
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    st = {"stage": 0, "step": 0, "global_step": 0, "tokens": 0, "wall_s": 0.0, "log": [], "events": [],
          "recipe_a2": False, "recipe": args.recipe, "rng": np.random.default_rng(args.seed).bit_generator.state}
    if os.path.exists(state_path):
        saved = torch.load(state_path, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        torch.set_rng_state(saved["torch_rng"])
        st = saved["st"]
        if st.get("recipe", "2") != args.recipe:
            sys.exit(f"error: {state_path} was trained with --recipe {st.get('recipe', '2')}, not {args.recipe}")
        print(f"resumed: stage {stages[st['stage']][0] if st['stage'] < len(stages) else 'done'} step {st['step']}, "
              f"{st['tokens']:,} tokens, {st['wall_s'] / 60:.1f} min so far", flush=True)
    elif args.recipe in CONTINUES:
        done = CONTINUES[args.recipe]
        st = continue_from(args.init_from, model, st, done, args.recipe, stages[done][0])
    rng = np.random.default_rng()
    rng.bit_generator.state = st["rng"]

    def snapshot():
        st["rng"] = rng.bit_generator.state
        save_state(state_path, {"model": model.state_dict(), "opt": opt.state_dict(),
                                "torch_rng": torch.get_rng_state(), "st": st})

    last_save = time.time()
    t_start = time.time() - st["wall_s"]
    while st["stage"] < len(stages) and not args.finish_only:
        name, seq_len, batch, steps, lr, warmup = stages[st["stage"]]
        model.train()
        while st["step"] < steps:
            step = st["step"]
            mix = MIX_I if name == "I" else (MIX_A2 if (name == "A" and st["recipe_a2"]) else STAGE_MIX.get(name, mix_main))
            lr_now = lr_at(step, steps, lr * (0.5 if (name == "A" and st["recipe_a2"]) else 1.0), warmup)
            for g in opt.param_groups:
                g["lr"] = lr_now
            step_len, step_batch = seq_len, batch
            if name in ALTERNATE and step % 2 == 0:
                step_len, step_batch, mix = ALTERNATE[name]
            x, w, row_kinds = make_batch(train_text, rng, step_batch, step_len, mix, args.answer_weight,
                                         repeat_only=(name == "A" and st["recipe_a2"]), copy_weight=args.copy_weight,
                                         shallow_share=SHALLOW_SHARE.get(name, 0.0))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
                logits = model(input_ids=x).logits
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, VOCAB), x[:, 1:].reshape(-1),
                                                    reduction="none").view(step_batch, step_len - 1)
            wt = w[:, 1:]
            loss = (nll * wt).sum() / wt.sum()
            per_kind = {}  # the batch's loss per row kind (a stall shows in its own column)
            for kind in set(row_kinds):
                rows = torch.tensor([k == kind for k in row_kinds])
                per_kind[kind] = float(((nll[rows] * wt[rows]).sum() / wt[rows].sum().clamp_min(1e-9)).detach())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            ratios = tracker.update(0.001)
            st["step"] += 1
            st["global_step"] += 1
            st["tokens"] += step_batch * step_len
            st["wall_s"] = time.time() - t_start
            row = {"stage": name, "recipe": "A2" if (name == "A" and st["recipe_a2"]) else name,
                   "step": st["global_step"], "tokens": st["tokens"], "wall_s": round(st["wall_s"], 1),
                   "lr": lr_now, "train_loss": float(loss.detach()),
                   **{f"loss_{k}": round(per_kind.get(k, float("nan")), 4) for k in ("induct", "text", "rcopy", "tcopy", "tinduct", "tfar", "tspan", "passkey")},
                   "induct_probe": "",
                   "max_over_mean_load": max(ratios) if ratios else 0.0,
                   "heldout_bpb": "", "copy_first": "", "copy_repeat": "", "copy_ratio": "", "passkey": ""}
            if name == "I" and (st["step"] % 50 == 0 or st["step"] == steps):
                model.eval()
                row["induct_probe"] = probe_induct(model, args.seed + 11, seq_len)
                model.train()
                print(f"I {st['step']}/{steps} L{seq_len}  held-out induction repeat loss {row['induct_probe']:.3f} nats "
                      f"(chance {math.log(len(ALPHABET)):.2f})", flush=True)
                if row["induct_probe"] < INDUCT_DONE_NATS:
                    ev = (f"stage I done at step {st['step']}: held-out induction repeat loss "
                          f"{row['induct_probe']:.3f} < {INDUCT_DONE_NATS} nats")
                    st["events"].append(ev)
                    print(ev, flush=True)
                    steps = st["step"]  # ends the stage after this step
            elif st["step"] % args.eval_every == 0 or st["step"] == steps:
                model.eval()
                row["heldout_bpb"] = heldout_bpb(model, windows)
                # at the stage's own length (positions past it are untrained): 64-byte spans at 256
                f, r = probe_copy(model, probe_text, args.seed + 7, length=min(seq_len, 1024), span=min(128, seq_len // 4))
                row["copy_first"], row["copy_repeat"], row["copy_ratio"] = f, r, r / f
                row["passkey"] = probe_passkey(model, probe_text, args.seed + 9, seq_len,
                                               [0.1, 0.5, 0.9], 1 if args.smoke else 4)
                model.train()
                if name == "A" and not st["recipe_a2"] and st["step"] >= args.stall_check and r / f > 0.8:
                    st["recipe_a2"] = True
                    ev = (f"stage A stalled at step {st['step']} (copy ratio {r / f:.2f} > 0.8): "
                          f"recipe A2 (65 % random-string copy, repeat-only loss, lr halved) takes over")
                    st["events"].append(ev)
                    print(ev, flush=True)
            if st["step"] % 10 == 0 or row["heldout_bpb"] != "" or args.smoke:
                st["log"].append(row)
                el = st["wall_s"]
                extra = "  " + " ".join(f"{k}={v:.3f}" for k, v in sorted(per_kind.items()))
                if row["heldout_bpb"] != "":
                    extra = (f"  held-out {row['heldout_bpb']:.3f} bpb  copy {row['copy_first']:.2f}->"
                             f"{row['copy_repeat']:.2f} ({row['copy_ratio']:.2f})  passkey {row['passkey']:.2f}")
                print(f"{name} {st['step']}/{steps} L{seq_len}  loss {row['train_loss']:.3f}{extra}  "
                      f"{st['tokens'] / max(el, 1e-9):.0f} tok/s  {el / 60:.1f} min", flush=True)
            if time.time() - last_save > args.save_minutes * 60:
                snapshot()
                last_save = time.time()
        st["stage"] += 1
        st["step"] = 0
        snapshot()
        last_save = time.time()

    finish(args, cfg, model, tracker, st, train_files, held_files, train_text, held_text,
           probe_text, eval_text, windows, transformers.__version__)


def finish(args, cfg, model, tracker, st, train_files, held_files, train_text, held_text,
           probe_text, eval_text, windows, tf_version):
    from transformers import DeepseekV3ForCausalLM

    out = args.out
    log = st["log"]
    with open(os.path.join(out, "training_log.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(log[-1].keys()))
        w.writeheader()
        w.writerows(log)
    svg_log = [{"step": r["step"], "train_bpb": r["train_loss"] / math.log(2),
                "heldout_bpb": r["heldout_bpb"]} for r in log]
    base.loss_svg(svg_log, os.path.join(out, "loss.svg"))
    with open(os.path.join(out, "loss.svg")) as f:
        svg = f.read().replace("tiny-mla training", "tiny-mla-recall training").replace(
            "train (batch)", "train (weighted batch loss)")
    with open(os.path.join(out, "loss.svg"), "w") as f:
        f.write(svg)
    max_abs_bias = max(float(m.e_score_correction_bias.abs().max()) for _, m in tracker.routers)
    base.save_model(model, out)

    # held-out inputs for mla-h2o, from the half of the held-out text the probes never read
    erng = np.random.default_rng(args.seed + 11)
    os.makedirs(os.path.join(out, "eval"), exist_ok=True)
    with open(os.path.join(out, "eval", "heldout.txt"), "wb") as f:
        f.write(eval_text[:65536])
    for length in (1024, 2048):
        for i, depth in enumerate([0.1, 0.3, 0.5, 0.7, 0.9]):
            body, _, key, _ = row_passkey(eval_text, erng, length - 1, 1.0, depth=depth)
            with open(os.path.join(out, "eval", f"passkey-{length}-d{int(depth * 100):02d}.txt"), "wb") as f:
                f.write(body)

    # the shipped bf16 weights, loaded as a user would
    shipped = DeepseekV3ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="sdpa")
    shipped.eval()
    per_depth = 1 if args.smoke else 20
    depths = [0.1, 0.3, 0.5, 0.7, 0.9]
    pk = {}
    for length in (1024, 2048):
        pk[length] = {d: probe_passkey(shipped, eval_text, args.seed + 13 + length, length, [d], per_depth) for d in depths}
    bpb = heldout_bpb(shipped, base.heldout_windows(eval_text, 1024, 2 if args.smoke else 24))
    cf, cr = probe_copy(shipped, eval_text, args.seed + 17, length=1024, count=2 if args.smoke else 16)
    heads = copy_heads(out, eval_text, args.seed + 19)
    with open(os.path.join(out, "copy_heads.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(heads[0].keys()))
        w.writeheader()
        w.writerows(heads)
    stats = base.attention_stats(out, eval_text)
    with open(os.path.join(out, "attention_stats.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(stats[0].keys()))
        w.writeheader()
        w.writerows(stats)
    params = sum(p.numel() for p in shipped.parameters())
    joined = b"".join(base.heldout_windows(eval_text, 1024, 24))
    gz = 8 * len(gzip.compress(joined, 9)) / len(joined)
    results = {"heldout_bpb_bf16": bpb, "copy_first": cf, "copy_repeat": cr, "copy_ratio": cr / cf,
               "passkey": {str(k): {str(d): v for d, v in m.items()} for k, m in pk.items()},
               "params": params, "max_abs_bias": max_abs_bias, "gzip_bpb": gz,
               "tokens": st["tokens"], "wall_s": st["wall_s"], "events": st["events"],
               "cpu": base.cpu_name(), "threads": args.threads, "torch": torch.__version__, "transformers": tf_version,
               "python": platform.python_version(), "train_files": len(train_files), "held_files": len(held_files),
               "train_bytes": len(train_text), "held_bytes": len(held_text), "per_depth": per_depth}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_card(out, cfg, args, st, results, heads, stats)
    print(json.dumps({k: v for k, v in results.items() if k not in ("events",)}, indent=1))


def write_card(out, cfg, args, st, res, heads, stats):
    L = []
    a = L.append
    a("# tiny-mla-recall: a small trained MLA model that copies and retrieves")
    a("")
    a("A 4-layer transformers `DeepseekV3ForCausalLM` (the class of DeepSeek-V3 and Kimi K2) with")
    a("Multi-head Latent Attention, trained from scratch on 2-core CPUs by" if args.recipe in CONTINUES
      else "Multi-head Latent Attention, trained from scratch on a 2-core CPU by")
    a("`reference/python/train_tiny_mla_recall.py`, with a curriculum meant to form copy (induction) and")
    a("retrieval heads, so that KV-cache eviction has something to lose. A byte-level toy of Python's reST")
    a("documentation: evidence about MLA caches, not a measurement of Kimi K2.6.")
    a("")
    a("## Architecture (config.json)")
    a("")
    a("| key | value |")
    a("|---|---|")
    for k, v in [("vocab_size", "258 (bytes, BOS 256, EOS 257; `byte_level_vocab`)"),
                 ("hidden_size / layers / heads", f"{cfg.hidden_size} / {cfg.num_hidden_layers} / {cfg.num_attention_heads}"),
                 ("dense layers", f"0-{cfg.first_k_dense_replace - 1} (intermediate {cfg.intermediate_size}); MoE after"),
                 ("MoE", f"{cfg.n_routed_experts} routed in {cfg.n_group} groups, topk_group {cfg.topk_group}, "
                         f"{cfg.num_experts_per_tok} per token, {cfg.n_shared_experts} shared, moe_intermediate "
                         f"{cfg.moe_intermediate_size}, routed_scaling_factor {cfg.routed_scaling_factor}"),
                 ("q_lora_rank / kv_lora_rank", f"{cfg.q_lora_rank} / {cfg.kv_lora_rank}"),
                 ("qk_nope / qk_rope / v head dims", f"{cfg.qk_nope_head_dim} / {cfg.qk_rope_head_dim} / {cfg.v_head_dim}"),
                 ("rope", "yarn, theta 1e4, factor 8 over 512 original positions (4096)"),
                 ("parameters", f"{res['params']:,}")]:
        a(f"| {k} | {v} |")
    a("")
    a("Weights bf16, the MoE router (`gate.weight`, `e_score_correction_bias`) fp32 as transformers keeps")
    a(f"it. The correction bias was learned by DeepSeek-V3's auxiliary-loss-free update (max |bias| {res['max_abs_bias']:.3f}).")
    a("")
    a("## Data, split and curriculum")
    a("")
    a("- Source: reST sources of the Python 3.11 documentation, Debian 12 package `python3.11-doc`,")
    a("  **PSF License Version 2** (`/usr/share/doc/python3.11-doc/copyright`); `eval/` holds excerpts of it.")
    a(f"- Split: files sorted by path, every 20th held out: {res['train_files']} training files "
      f"({res['train_bytes']:,} bytes), {res['held_files']} held-out ({res['held_bytes']:,} bytes). The training")
    a("  probes read the first half of the held-out text; every figure below and `eval/` use the second half.")
    a("- Rows: text (every byte a target), random-string copy (1-4 strings of 8-48 [A-Za-z0-9] written once")
    a("  and repeated; only the repeat is a target), text-span copy (a 32-256 byte span repeated), passkey")
    a(f"  (the key in the needle is no target; the 5 answer digits weigh {args.answer_weight})"
      + ("; text induction (recipe 5: a text span of L/8-L/4 bytes repeated to the row's end, every repeat a target)"
         "; in stages T and E a third of the passkey needles at 2-40 % depth" if args.recipe in ("5", "6", "7") else "")
      + ("; far text induction (recipe 6: a 96-256 byte text span repeated after text gaps of L/5-L/2 bytes, every"
         f" repeat a target, the gaps weighing {FAR_GAP_WEIGHT}); in stages U and F a third of the needles at 2-40 % depth"
         if args.recipe in ("6", "7") else "")
      + ("; one far text repeat (recipe 7: a 96-256 byte text span at 5-35 % of the row and its one repeat 300-800"
         f" bytes after it, the repeat a target, the rest weighing {FAR_GAP_WEIGHT}); in stages V and G a third of the"
         " needles at 2-40 % depth" if args.recipe in ("7", "8") else "")
      + ("; stage W (recipe 8) runs stage V's rows at L 1024 on its even steps and stage G's at L 2048 on its odd"
         " steps" if args.recipe == "8" else "") + ".")
    a(f"- Recipe {args.recipe}. Stages: " + "; ".join(f"{s[0]}: L {s[1]}, batch {s[2]}, {s[3]} steps, lr {s[4]}, "
                                                  f"warm-up {s[5]}" for s in args.stages) + ".")
    a(f"  Mix {args.mix}" + "".join(f"; stage {k}: {v}" for k, v in STAGE_MIX.items() if k in [t[0] for t in args.stages])
      + (f"; text-span repeats weigh {args.copy_weight}" if args.copy_weight != 1.0 else "") + ".")
    for ev in res["events"] or ["the stall rule did not fire (recipe A ran as planned)"]:
        a(f"- {ev}")
    if args.recipe in CONTINUES:  # more than one machine: the earlier attempts' part, then this one's stages
        new = [s[0] for s in args.stages[CONTINUES[args.recipe]:]]
        before = [r for r in st["log"] if r["stage"] not in new][-1]
        a(f"- {res['tokens']:,} tokens in {res['wall_s'] / 60:.0f} min: {before['tokens']:,} in "
          f"{before['wall_s'] / 60:.0f} min before stage {new[0]} (the events above name those machines), then "
          f"{res['tokens'] - before['tokens']:,} in {(res['wall_s'] - before['wall_s']) / 60:.0f} min on "
          f"{res['threads']} thread(s) of {res['cpu']}")
        a("  (the machines also built and tested the C++ project meanwhile); AdamW (0.9, 0.95), weight decay 0.1,")
    else:
        a(f"- {res['tokens']:,} tokens in {res['wall_s'] / 60:.0f} min on {res['threads']} threads of {res['cpu']}"
          " (the machine also built and tested the C++ project meanwhile); AdamW (0.9, 0.95), weight decay 0.1,")
    a(f"  clip 1.0, fp32 arithmetic, sdpa attention; torch {res['torch']}, transformers {res['transformers']}, Python {res['python']}.")
    a("")
    a("## Results (shipped bf16 weights, held-out text the training never saw)")
    a("")
    a(f"- **held-out text: {res['heldout_bpb_bf16']:.3f} bits per byte** (24 windows of 1023 bytes; gzip -9: {res['gzip_bpb']:.2f})")
    a(f"- **copy**: a 128-byte held-out span costs {res['copy_first']:.3f} nats/byte at its first occurrence and "
      f"{res['copy_repeat']:.3f} at its verbatim repeat: **{100 * res['copy_ratio']:.1f} %** (16 spans, bytes 8-127)")
    a(f"- **passkey** (all 5 digits top-1, teacher-forced, full cache; {res['per_depth']} samples per cell):")
    a("")
    a("| context | " + " | ".join(f"depth {d}" for d in res["passkey"]["1024"]) + " | all |")
    a("|---" * (len(res["passkey"]["1024"]) + 2) + "|")
    for length, m in res["passkey"].items():
        a(f"| {length} | " + " | ".join(f"{100 * v:.0f} %" for v in m.values()) + f" | {100 * np.mean(list(m.values())):.1f} % |")
    a("")
    a("## Training curves (`training_log.csv`, `loss.svg`)")
    a("")
    a("| stage | recipe | step | tokens | min | held-out bpb | copy ratio | passkey |")
    a("|---|---|---|---|---|---|---|---|")
    for r in st["log"]:
        if r["heldout_bpb"] != "":
            a(f"| {r['stage']} | {r['recipe']} | {r['step']} | {r['tokens']:,} | {r['wall_s'] / 60:.0f} | "
              f"{r['heldout_bpb']:.3f} | {r['copy_ratio']:.3f} | {r['passkey']:.2f} |")
    a("")
    a("## Which heads copy (`copy_heads.csv`)")
    a("")
    a("Mean attention from each byte of a 128-byte repeat to the byte after the same byte's first")
    a("occurrence (the induction target), eager fp32, 4 held-out spans. 1/position ≈ 0.002 is uniform.")
    a("")
    nh = cfg.num_attention_heads
    a("| layer | " + " | ".join(f"head {h}" for h in range(nh)) + " |")
    a("|---" * (nh + 1) + "|")
    for l in range(cfg.num_hidden_layers):
        a(f"| {l} | " + " | ".join(f"{heads[l * nh + h]['induction_attention']:.3f}" for h in range(nh)) + " |")
    a("")
    a("## Attention statistics (`attention_stats.csv`)")
    a("")
    a("| layer | mass on token 0 | on tokens 0-3 | on the 32 most recent | entropy (bits) | uniform entropy |")
    a("|---|---|---|---|---|---|")
    for s in stats:
        a(f"| {s['layer']} | {s['sink_mass']:.3f} | {s['first4_mass']:.3f} | {s['recent32_mass']:.3f} | "
          f"{s['entropy_bits']:.2f} | {s['uniform_entropy_bits']:.2f} |")
    a("")
    a("## Files")
    a("")
    a("| file | sha256 |")
    a("|---|---|")
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        if os.path.isfile(p) and name != "README.md" and not name.endswith(".log"):  # not the run's own logs
            a(f"| `{name}` | `{base.sha256(p)}` |")
    for name in sorted(os.listdir(os.path.join(out, "eval"))):
        a(f"| `eval/{name}` | `{base.sha256(os.path.join(out, 'eval', name))}` |")
    a("")
    # the command that wrote these weights, as it was given (a run with --init-from continues another
    # run's weights: that run's own card gives its command; docs/recall-model.md lists the attempts)
    a("Reproduce: `python reference/python/train_tiny_mla_recall.py " + " ".join(sys.argv[1:]) + "` with the")
    a("venv of `reference/python/requirements.txt`; the script seeds every draw, and the same weights are to be")
    a("expected only with the same thread count on the same CPU class (not checked)." +
      (" It continues the weights of --init-from's run." if "--init-from" in sys.argv else ""))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
