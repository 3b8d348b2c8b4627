#!/usr/bin/env python3
"""dump_hidden_states.py — every decoder layer's inputs and attention weights from transformers'
DeepseekV3ForCausalLM (or DeepseekV2ForCausalLM, for a model_type deepseek_v2 config), in the safetensors layout `mla-h2o sweep` and `mla-h2o run --residual` read.

Purpose
  `mla-h2o run --tokens` feeds embed_tokens rows to the layer it runs, which is the real
  model's input only for layer 0. The input of layer L > 0 is the residual stream after
  layers 0..L-1 (attention AND the MLP/MoE blocks, which mla-h2o does not implement). This
  script runs the whole model once, in transformers (eager attention), on token ids and
  writes, per decoder layer L:

    hidden_states.L         [S, H]     the residual stream entering layer L, i.e. transformers'
                                       output_hidden_states[L] (layer 0: the embeddings);
                                       hidden_states.<num_hidden_layers> is the last layer's
                                       output (the final norm's input)
    normed_hidden_states.L  [S, H]     input_layernorm(hidden_states.L): what layer L's
                                       self_attn receives
    attn_weights.L          [n, S, S]  layer L's post-softmax attention probabilities
                                       (output_attentions; omitted with --no-attentions)
    token_scores.L          [S]  F64   attn_weights.L summed over heads and queries (the H2O score)
    routed_experts.L        [S, k] I64 MoE layers: the experts each token is routed to, ascending
    routing_weights.L       [S, k]     their weights (normalised, times routed_scaling_factor), same order
    router_logits.L         [S, E]     the router's logits (fp32)
  and input_ids [S] (I64), logits [S, V] (the model's output, as computed: bf16 values in a bf16 run). Batch dimension dropped; float tensors are F32 (a bf16 run's
  values are exact in F32). Metadata: producer, versions, dtype, mask "causal", seq_len,
  num_hidden_layers, layers written, the checkpoint path and its config.json text.

  Then, for example (one layer at a time, only attention tensors read):
    mla-h2o sweep --checkpoint DIR --layers all --input states.safetensors --residual --precision bf16
    mla-h2o run   --checkpoint DIR --layer 5    --input states.safetensors --residual --dump-tensors
  (`--residual` picks hidden_states.L for layer L and applies that layer's input_layernorm;
  `--input-tensor normed_hidden_states` without --residual feeds the normalized rows as they are.)

How the model is run
  DeepseekV3ForCausalLM.from_pretrained(DIR, dtype=float32|bfloat16, attn_implementation="eager"),
  eval mode, no cache, one sequence, position ids 0..S-1, the model's own causal mask.
  The residual inputs and normalized inputs are captured by forward pre-hooks on each decoder
  layer and on its self_attn, and the residual inputs are checked bit for bit against
  output_hidden_states[L], so what is written is what the model computed.
  A nested Kimi K2.5/K2.6 config.json (text_config) is read through its text_config and the
  tensor names `language_model.model.*` are mapped to `model.*`. (Untested on real Kimi
  weights: their routed experts are INT4 compressed-tensors, which transformers must be able
  to load on your machine; --device-map auto spreads a big model over the available devices.)

Shape legend: S = tokens, H = hidden_size, n = num_attention_heads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def parse_tokens(arg: str) -> list[int]:
    """'3,17,250' or a file of ids separated by commas, spaces or newlines (as mla-h2o --tokens)."""
    text = arg
    if os.path.isfile(arg):
        with open(arg, encoding="utf-8") as f:
            text = f.read()
    ids = [int(t) for t in text.replace(",", " ").split()]
    if not ids or any(i < 0 for i in ids):
        sys.exit(f"dump_hidden_states: --tokens {arg!r}: expected non-negative token ids like 3,17,250")
    return ids


def model_class(raw: dict):
    """DeepseekV2ForCausalLM for a config whose model_type is deepseek_v2, else DeepseekV3ForCausalLM
    (the rule mla-h2o applies, mla/config.hpp ModelFamily)."""
    from transformers import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM

    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    name = text.get("model_type") or (text.get("architectures") or [""])[0]
    return DeepseekV2ForCausalLM if name in ("deepseek_v2", "DeepseekV2ForCausalLM") else DeepseekV3ForCausalLM


def load_model(torch, checkpoint: str, dtype, device_map: str | None, experts: str | None = None):
    """DeepseekV3ForCausalLM (or DeepseekV2ForCausalLM) in `dtype`, eager attention, eval mode
    (experts: transformers' experts_implementation, None = its default, grouped_mm)."""

    kwargs = {"dtype": dtype, "attn_implementation": "eager"}
    if experts:
        kwargs["experts_implementation"] = experts
    if device_map:
        kwargs["device_map"] = device_map
    with open(os.path.join(checkpoint, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    if isinstance(raw.get("text_config"), dict):  # Kimi K2.5/K2.6: nested text model
        from make_golden import build_hf_config

        kwargs["config"] = build_hf_config(raw["text_config"])
        kwargs["key_mapping"] = {r"^language_model\.model\.": "model.", r"^language_model\.lm_head\.": "lm_head."}
    model = model_class(raw).from_pretrained(checkpoint, **kwargs).eval()
    if model.config._attn_implementation != "eager":
        sys.exit(f"dump_hidden_states: attention implementation is {model.config._attn_implementation!r}, not eager")
    return model


def run_model(torch, model, ids: list[int], with_attentions: bool) -> dict:
    """One forward pass; returns {name: tensor} in the layout described above (batch dropped)."""
    layers = model.model.layers
    residual, normed = {}, {}

    def layer_hook(idx):
        def hook(module, args, kwargs):
            residual[idx] = (args[0] if args else kwargs["hidden_states"]).detach()
        return hook

    def attn_hook(idx):
        def hook(module, args, kwargs):
            normed[idx] = (args[0] if args else kwargs["hidden_states"]).detach()
        return hook

    routed = {}

    def router_hook(idx):
        def hook(module, args, output):
            routed[idx] = output  # (router_logits, topk_weights, topk_indices)
        return hook

    final = {}

    def norm_hook(module, args, kwargs):
        final["h"] = (args[0] if args else kwargs["hidden_states"]).detach()

    handles = []
    for idx, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(layer_hook(idx), with_kwargs=True))
        handles.append(layer.self_attn.register_forward_pre_hook(attn_hook(idx), with_kwargs=True))
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "top_k"):  # the MoE router (DeepseekV3 or V2)
            handles.append(gate.register_forward_hook(router_hook(idx)))
    handles.append(model.model.norm.register_forward_pre_hook(norm_hook, with_kwargs=True))
    device = model.model.embed_tokens.weight.device
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, output_hidden_states=True, output_attentions=with_attentions,
                        use_cache=False)
    finally:
        for h in handles:
            h.remove()

    n_layers = len(layers)
    if len(residual) != n_layers or len(normed) != n_layers:
        sys.exit(f"dump_hidden_states: captured {len(residual)} layer inputs and {len(normed)} attention inputs "
                 f"for {n_layers} layers")
    if out.hidden_states is None or len(out.hidden_states) < n_layers:
        sys.exit("dump_hidden_states: the model returned no output_hidden_states")
    f32 = lambda t: t.detach()[0].to("cpu", torch.float32).contiguous()  # noqa: E731  exact widening
    tensors = {"input_ids": input_ids[0].to("cpu").contiguous()}
    for L in range(n_layers):
        # output_hidden_states[L] is the residual stream entering layer L: check it is the
        # tensor the layer received.
        if not torch.equal(out.hidden_states[L], residual[L]):
            sys.exit(f"dump_hidden_states: output_hidden_states[{L}] differs from the input of decoder layer {L}")
        tensors[f"hidden_states.{L}"] = f32(residual[L])
        tensors[f"normed_hidden_states.{L}"] = f32(normed[L])
        if with_attentions:
            w = out.attentions[L]
            if w is None:
                sys.exit(f"dump_hidden_states: layer {L} returned no attention weights (not eager?)")
            tensors[f"attn_weights.{L}"] = f32(w)
            tensors[f"token_scores.{L}"] = w[0].to("cpu", torch.float64).sum(dim=(0, 1)).contiguous()
        if L in routed:
            # the k experts of each token ascending, their weights in the same order
            logits, weights, indices = routed[L]
            order = indices.argsort(dim=-1)
            tensors[f"routed_experts.{L}"] = indices.gather(-1, order).to("cpu", torch.int64).contiguous()
            tensors[f"routing_weights.{L}"] = weights.gather(-1, order).to("cpu", torch.float32).contiguous()
            tensors[f"router_logits.{L}"] = logits.to("cpu", torch.float32).contiguous()
    # the last layer's output (the final norm's input) and the logits
    tensors[f"hidden_states.{n_layers}"] = f32(final["h"])
    tensors["logits"] = f32(out.logits)
    return tensors


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (config.json + safetensors)")
    p.add_argument("--tokens", required=True, help="token ids: 3,17,250 or a file of ids")
    p.add_argument("--out", required=True, help="output .safetensors file")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16",
                   help="model dtype (bfloat16 = the checkpoint's own; pair with mla-h2o --precision bf16)")
    p.add_argument("--no-attentions", action="store_true",
                   help="skip attn_weights/token_scores (they are [n, S, S] per layer: large for long inputs)")
    p.add_argument("--device-map", default=None, help="passed to from_pretrained (e.g. auto, cuda:0); default CPU")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU (1 = fixed order)")
    p.add_argument("--experts-implementation", default=None,
                   help="transformers' experts_implementation (default: its own, grouped_mm; eager sums in bf16)")
    args = p.parse_args(argv)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # make_golden.build_hf_config
    import safetensors
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    ids = parse_tokens(args.tokens)
    model = load_model(torch, args.checkpoint, dtype, args.device_map, args.experts_implementation)
    vocab = model.model.embed_tokens.weight.shape[0]
    if max(ids) >= vocab:
        sys.exit(f"dump_hidden_states: token id {max(ids)} is out of range: embed_tokens has {vocab} rows")
    tensors = run_model(torch, model, ids, not args.no_attentions)
    with open(os.path.join(args.checkpoint, "config.json"), encoding="utf-8") as f:
        config_text = f.read()
    n_layers = len(model.model.layers)
    meta = {
        "producer": f"reference/python/dump_hidden_states.py (HF {type(model).__name__}, eager)",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "dtype": args.dtype,
        "precision": "fp32" if dtype == torch.float32 else "bf16",
        "mask": "causal",
        "position_offset": "0",
        "seq_len": str(len(ids)),
        "num_hidden_layers": str(n_layers),
        "attentions": "no" if args.no_attentions else "yes",
        "checkpoint": args.checkpoint,
        "config_json": config_text,
        "torch_threads": str(args.threads),
        "experts_implementation": str(model.config._experts_implementation),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_file(tensors, args.out, metadata=meta)
    print(f"dump_hidden_states: wrote {args.out} ({n_layers} layers, {len(ids)} tokens, {args.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
