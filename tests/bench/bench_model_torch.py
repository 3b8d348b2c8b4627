#!/usr/bin/env python3
"""bench_model_torch.py — the transformers peer of bench_model: the whole DeepseekV3ForCausalLM
forward on the same checkpoint and token ids, timed the same way (warm-up, then repetitions, median).

Purpose
  tests/bench/bench_model.cpp runs this script in the same benchmark run and prints its medians
  next to mla-h2o's full-cache forward, so both are measured on the same machine under the same
  load. Alone:  python3 tests/bench/bench_model_torch.py --checkpoint models/tiny-mla --tokens ids.txt

What runs
  DeepseekV3ForCausalLM.from_pretrained(DIR, dtype=float32|bfloat16, attn_implementation="eager")
  (experts_implementation: transformers' default), eval mode, no cache, one sequence, positions
  0..T-1, under torch.no_grad(); torch.set_num_threads(--threads). The timed call is
  model(input_ids=ids, use_cache=False): embeddings to logits, as mla-h2o's forward.

Output
  Human-readable lines on stderr, and ONE line on stdout starting with "BENCH_MODEL_TORCH_JSON "
  followed by {"torch": ..., "transformers": ..., "threads": 2, "tokens": T, "reps": 3,
  "experts_implementation": ..., "fp32": {"median_s": ..., "times_s": [...]}, "bf16": {...}}.
  Exit status 77 (meson SKIP) when torch or transformers is not importable.

Shape legend: T = tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

try:
    import torch
    import transformers
    from transformers import DeepseekV3ForCausalLM
except ImportError as exc:  # meson: exit code 77 = SKIP
    print(f"bench_model_torch.py: {exc}; skipping the transformers peer", file=sys.stderr)
    sys.exit(77)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--tokens", required=True, help="file of token ids (commas, spaces or newlines)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precisions", default="bf16,fp32")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    with open(args.tokens, encoding="utf-8") as f:
        ids = [int(t) for t in f.read().replace(",", " ").split()]
    input_ids = torch.tensor([ids], dtype=torch.long)
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": args.threads,
           "tokens": len(ids), "reps": args.reps}
    for tag in args.precisions.split(","):
        dtype = torch.bfloat16 if tag == "bf16" else torch.float32
        model = DeepseekV3ForCausalLM.from_pretrained(args.checkpoint, dtype=dtype, attn_implementation="eager").eval()
        out["experts_implementation"] = str(model.config._experts_implementation)
        times = []
        with torch.no_grad():
            for r in range(args.warmup + args.reps):
                t0 = time.perf_counter()
                model(input_ids=input_ids, use_cache=False)
                dt = time.perf_counter() - t0
                if r >= args.warmup:
                    times.append(dt)
        out[tag] = {"median_s": statistics.median(times), "times_s": times}
        print(f"bench_model_torch: {tag}: median {statistics.median(times):.3f} s over {args.reps} "
              f"(T = {len(ids)}, {args.threads} threads)", file=sys.stderr)
        del model
    print("BENCH_MODEL_TORCH_JSON " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
