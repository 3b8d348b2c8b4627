#!/usr/bin/env python3
"""make_heldout_corpus.py — writes models/tiny-mla/eval/heldout-corpus/: the beginning of each of
tiny-mla's 25 held-out files, the input of the README's eviction table (`eval --text DIR --windows W`).

Why
  models/tiny-mla/eval/heldout.txt holds 8192 bytes: 16 windows of 512 bytes, one file's worth of
  text. A table with intervals wants at least 32 windows from several documents, so that windows
  differ in more than their offset.

What
  The held-out split of train_tiny_mla.py (the Python 3.11 reST documentation of Debian's
  python3.11-doc, files sorted by path, index % 20 == 10), never seen in training. For each held-out
  file, its first --bytes bytes (default 4096; the whole file when shorter), written as
  NN-<path with / as _> so that `--text DIR` reads them in the split's order. PSF License Version 2
  (redistribution with the notice: models/tiny-mla/README.md names it).

Usage (CI never runs it)
  python reference/python/make_heldout_corpus.py [--bytes 4096] [--out models/tiny-mla/eval/heldout-corpus]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny_mla as base  # noqa: E402  (the corpus and its split)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=base.CORPUS_DIR)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--out", default=os.path.join("models", "tiny-mla", "eval", "heldout-corpus"))
    args = ap.parse_args()
    _, held = base.corpus_files(args.corpus)
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for i, path in enumerate(held):
        data = open(path, "rb").read()[: args.bytes]
        rel = os.path.relpath(path, args.corpus).replace(os.sep, "_")
        with open(os.path.join(args.out, f"{i:02d}-{rel}"), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"wrote {len(held)} files, {total} bytes, into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
