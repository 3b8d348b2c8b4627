#!/usr/bin/env python3
"""make_shipped_model_logits.py — transformers' logits of the shipped model models/tiny-mla.

Purpose
  The fixture tests/data/golden/whole-model-shipped-tiny-mla/logits.safetensors, read by the case
  shipped_model_against_transformers_logits of suite `model` (tests/unit/test_model.cpp): the
  logits transformers' DeepseekV3ForCausalLM (eager attention, CPU, 1 thread) gives on the trained
  model models/tiny-mla, once loaded in float32 and once in bfloat16, on one 1024-token window of
  the held-out text. The whole-model fixtures of make_whole_model_fixture.py are tiny random
  models at S = 20; this one is the trained 5-layer model at S = 1024, where the distance between
  torch's bf16 kernels and mla-h2o's fixed-order sums is measured (docs/math.md §15.4).

Input
  ids = [256] (BOS) + the first 1023 bytes of models/tiny-mla/eval/heldout.txt (byte-level vocab:
  ids 0-255 are bytes).

Output (safetensors; float tensors F32)
  input_ids     I64 [1024]
  logits_fp32   F32 [1024, 258]  the float32 model's logits
  logits_bf16   F32 [1024, 258]  the bfloat16 model's logits (bf16 values, widened exactly)
  metadata      producer, torch / transformers / safetensors / Python versions, torch's CPU
                capability, the CPU's model name, threads, the sha256 of model.safetensors and
                config.json, the input's description, and each precision's mean NLL (nats per
                token over the 1023 targets ids[1:], from the logits in float64)

torch's CPU bf16 kernels sum in an ISA-specific order (AVX2 vs AVX-512 / oneDNN), so logits_bf16
is a property of the CPU it was made on (recorded in the metadata), not only of the model.

Usage
  python3 reference/python/make_shipped_model_logits.py [--out PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys

SEQ_LEN = 1024
BOS = 256


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mean_nll(torch, logits, ids) -> float:
    lp = torch.log_softmax(logits.double(), dim=-1)
    return float(-lp[:-1].gather(1, ids[1:, None]).mean())


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.path.join(root, "models", "tiny-mla"))
    p.add_argument("--out", default=os.path.join(root, "tests", "data", "golden", "whole-model-shipped-tiny-mla",
                                                 "logits.safetensors"))
    args = p.parse_args(argv)

    import safetensors
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import DeepseekV3ForCausalLM

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)

    with open(os.path.join(args.model, "eval", "heldout.txt"), "rb") as f:
        text = f.read()[: SEQ_LEN - 1]
    if len(text) != SEQ_LEN - 1:
        sys.exit(f"make_shipped_model_logits: heldout.txt has only {len(text)} bytes")
    ids = torch.tensor([BOS] + list(text), dtype=torch.int64)

    tensors = {"input_ids": ids.clone()}
    meta = {
        "producer": "reference/python/make_shipped_model_logits.py",
        "model": "models/tiny-mla",
        "model_safetensors_sha256": sha256_of(os.path.join(args.model, "model.safetensors")),
        "config_json_sha256": sha256_of(os.path.join(args.model, "config.json")),
        "input": f"[{BOS}] (BOS) + first {SEQ_LEN - 1} bytes of models/tiny-mla/eval/heldout.txt",
        "seq_len": str(SEQ_LEN),
        "attn_implementation": "eager",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "python_version": platform.python_version(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": cpu_model_name(),
        "threads": str(torch.get_num_threads()),
    }
    for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        model = DeepseekV3ForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="eager").eval()
        logits = model(input_ids=ids[None], use_cache=False).logits[0]
        if logits.dtype != dtype or tuple(logits.shape) != (SEQ_LEN, model.config.vocab_size):
            sys.exit(f"make_shipped_model_logits: {tag}: logits {logits.dtype} {tuple(logits.shape)}")
        tensors[f"logits_{tag}"] = logits.float().contiguous()
        meta[f"mean_nll_{tag}"] = repr(mean_nll(torch, logits, ids))
        print(f"make_shipped_model_logits: {tag}: mean NLL {meta[f'mean_nll_{tag}']} nats/token over "
              f"{SEQ_LEN - 1} targets")
        del model

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_file(tensors, args.out, metadata=meta)
    print(f"make_shipped_model_logits: wrote {os.path.relpath(args.out, root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
