#!/usr/bin/env python3
"""bench_tokenizer_peer.py — the reference libraries' speed on the same text as bench_tokenizer.

HF tokenizers on DeepSeek-V3's tokenizer.json (encode, add_special_tokens=False) and tiktoken on Kimi
K2's tiktoken.model with Kimi's pattern (encode, allowed_special="all"), one thread each, median of
--reps after one warm-up. Prints one line "PEER {json}" with MB/s; exits 77 when either library is
not importable (the benchmark then reports SKIP for the peer).
Usage: bench_tokenizer_peer.py --dir UNPACKED_FIXTURE_DIR --text FILE [--reps 3]
"""
import argparse
import base64
import json
import os
import statistics
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
try:
    import tiktoken
    import tokenizers
except ImportError as e:
    print(f"bench_tokenizer_peer: {e}", file=sys.stderr)
    sys.exit(77)


def timed(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8", newline="").read()
    mb = len(text.encode()) / 1e6
    hf = tokenizers.Tokenizer.from_file(os.path.join(a.dir, "deepseek-v3", "tokenizer.json"))
    t_hf = timed(lambda: hf.encode(text, add_special_tokens=False), a.reps)
    ranks = {}
    with open(os.path.join(a.dir, "kimi-k2", "tiktoken.model")) as f:
        for line in f:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    cfg = json.load(open(os.path.join(a.dir, "kimi-k2", "tokenizer_config.json")))
    special = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    pattern = open(os.path.join(a.dir, "kimi-k2", "pattern.txt")).read()
    enc = tiktoken.Encoding("kimi_k2", pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)
    t_tt = timed(lambda: enc.encode(text, allowed_special="all"), a.reps)
    print("PEER " + json.dumps({"hf_tokenizers_deepseek_v3_mb_s": mb / t_hf, "tiktoken_kimi_k2_mb_s": mb / t_tt,
                                "tokenizers": tokenizers.__version__, "tiktoken": tiktoken.__version__}))


if __name__ == "__main__":
    main()
