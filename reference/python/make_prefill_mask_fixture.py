#!/usr/bin/env python3
"""make_prefill_mask_fixture.py — transformers' logits under the 4D mask that `eval --compress
prefill` with the streaming policy amounts to, for tests/unit/test_eval.cpp.

What it checks
  Under kvpress's protocol (docs/eval.md §2.1) the prompt cache of every layer is cut to K once and
  each decoded position then attends over what was kept plus every decoded position. For
  `streaming` (sinks s, then the K - s newest prompt tokens) the kept set is the same in every
  layer and every head and does not depend on the model's values, so the whole run is one
  transformers forward with a 4D attention mask:
      row q <  P: causal, [0, q]
      row q >= P: [0, s) U [P - (K - s), P) U [P, q]
  The suite runs eval on the same checkpoint and ids and compares its logits at P .. P+N-1 with
  these (tolerance row model-cpu-vs-hf fp32).

Inputs and outputs
  The whole-model fixture tests/data/golden/whole-model/model and its tokens.txt (20 ids):
  P = 12, N = 7, K = 6, s = 2. Writes tests/data/golden/whole-model/streaming-prefill.safetensors:
  input_ids [S] I64, mask [S, S] U8 (1 = attended), logits [S, V] F32 (fp32 run, eager attention).
  Before writing, it checks that the same code with the plain causal mask passed as a 4D mask
  gives transformers' own causal logits bit for bit, so the mask is read as intended.

Usage (the venv of requirements.txt; CI never runs it)
  python reference/python/make_prefill_mask_fixture.py
"""

from __future__ import annotations

import os
import sys

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3ForCausalLM
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "tests", "data", "golden", "whole-model")
P, N, K, SINKS = 12, 7, 6, 2


def additive(allowed: torch.Tensor) -> torch.Tensor:
    """[S, S] bool -> [1, 1, S, S] fp32 additive mask (0 where attended, the dtype's min elsewhere)."""
    m = torch.zeros(allowed.shape, dtype=torch.float32)
    m[~allowed] = torch.finfo(torch.float32).min
    return m[None, None]


def main() -> int:
    torch.set_num_threads(1)
    ids = [int(t) for t in open(os.path.join(FIXTURE, "tokens.txt")).read().replace(",", " ").split()]
    S = len(ids)
    if S != P + N + 1:
        sys.exit(f"tokens.txt holds {S} ids, expected P + N + 1 = {P + N + 1}")
    model = DeepseekV3ForCausalLM.from_pretrained(os.path.join(FIXTURE, "model"), dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    x = torch.tensor([ids])
    pos = torch.arange(S)[None]
    causal = torch.tril(torch.ones(S, S, dtype=torch.bool))
    with torch.no_grad():
        plain = model(input_ids=x, position_ids=pos).logits[0]
        as_4d = model(input_ids=x, position_ids=pos, attention_mask=additive(causal)).logits[0]
    if not torch.equal(plain, as_4d):
        sys.exit("a causal 4D mask does not reproduce the causal run: the mask is not read as intended")
    allowed = causal.clone()
    for q in range(P, S):
        row = torch.zeros(S, dtype=torch.bool)
        row[:SINKS] = True
        row[P - (K - SINKS):P] = True
        row[P:q + 1] = True
        allowed[q] = row
    with torch.no_grad():
        logits = model(input_ids=x, position_ids=pos, attention_mask=additive(allowed)).logits[0]
    out = os.path.join(FIXTURE, "streaming-prefill.safetensors")
    save_file({"input_ids": torch.tensor(ids, dtype=torch.int64), "mask": allowed.to(torch.uint8).contiguous(),
               "logits": logits.to(torch.float32).contiguous()}, out,
              metadata={"producer": "reference/python/make_prefill_mask_fixture.py",
                        "transformers": transformers.__version__, "torch": torch.__version__,
                        "prompt_len": str(P), "steps": str(N), "budget": str(K), "sinks": str(SINKS),
                        "dtype": "float32", "attn_implementation": "eager"})
    print(f"wrote {out}: S = {S}, max |logit| {logits.abs().max().item():.4f}, "
          f"max |masked - causal| at decoded rows {(logits[P:] - plain[P:]).abs().max().item():.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
