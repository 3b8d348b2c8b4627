// mla/model_forward.hpp — the whole-model forward of transformers' DeepseekV3ForCausalLM on
// token ids: logits, every layer's hidden states and MoE routing (docs/math.md §15).
//
// Layers stream one at a time (the `sweep` rule): layer L's tensors are read from the
// memory-mapped shards, prepared, run over all tokens and freed before layer L+1 is read, and
// the shards are unmapped after each load, so the resident set is one layer plus the
// activations whatever the model size (with resident_experts = false even one layer's routed
// experts are read one at a time, when a token is routed to them). estimate_model_memory
// (below) says beforehand what that needs.
//
// Two implementations of the same equations:
//   model_forward       CPU, fp32 or PyTorch-bf16 rounding, every sum a fixed-order fp32 fma
//                       chain (src/cpu/fixed_order.hpp): a row's values do not depend on the
//                       other rows, the thread count or the instruction set.
//   ref::model_forward  reference/model_reference.hpp: double loops, fp32 = exact math.
//
// Shape legend: T = tokens, H = hidden_size, V = vocab_size, k = num_experts_per_tok.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/memory_plan.hpp"
#include "mla/model.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla {

struct ModelForwardOptions {
  Precision precision = Precision::BF16;
  int threads = 0;                 // 0 = all cores
  double latent_norm_eps = 1e-6;   // q_a_layernorm / kv_a_layernorm (transformers: 1e-6)
  bool keep_hidden_states = false; // ModelForwardResult::hidden_states
  bool keep_routing = false;       // ModelForwardResult::routing
  bool resident_experts = true;    // false: each routed expert is read when first needed and freed after use
  // (stage, done, total) after each layer ("layers", L+1, num_hidden_layers); empty = none.
  std::function<void(const char* stage, int64_t done, int64_t total)> progress;
};

// The experts each token was routed to in one MoE layer.
struct LayerRouting {
  int64_t layer = 0;
  int64_t k = 0;
  std::vector<int32_t> experts;  // [T*k] token s's experts at s*k, ascending
  std::vector<float> weights;    // [T*k] their weights (normalised, times routed_scaling_factor)
};

struct ModelForwardResult {
  TensorF logits;                      // [T, V] (bf16 values in bf16 mode: transformers does not upcast them)
  std::vector<TensorF> hidden_states;  // keep_hidden_states: [num_hidden_layers + 1] of [T, H]:
                                       // [L] = the residual stream entering layer L (transformers'
                                       // output_hidden_states[L]); the last = the last layer's output,
                                       // before the final norm
  std::vector<LayerRouting> routing;   // keep_routing: every MoE layer, ascending
  StageSeconds stage_seconds;          // "embed", "layer L" (load + prepare + run), "head"
  std::string engine;                  // "fixed-order fp32 FMA chains (avx512f)"
};

// Token ids -> logits. Checks first (one Error naming what is wrong): every tensor present
// (check_model_tensors), token ids within embed_tokens.
ModelForwardResult model_forward(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& token_ids,
                                 const ModelForwardOptions& opt);

// ---- memory ------------------------------------------------------------------------------------
// ModelMemoryRequest and estimate_model_memory (defined in model_forward.cpp) are declared in
// mla/memory_plan.hpp beside eval's plan, which uses them.

}  // namespace mla
