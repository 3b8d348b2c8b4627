// reference/model_reference.hpp — the scalar double-precision reference of the whole
// transformers `DeepseekV3ForCausalLM` (embed_tokens, decoder layers, norm, lm_head), one
// function per equation as reference/mla_reference.hpp does for the attention, which it calls
// stage by stage. Spec: docs/math.md §15.
//
// Precisions (as mla_reference.hpp):
//   FP32  exact math in double (the router included), no rounding; only the stored weights and
//         the rotary tables are fp32 values.
//   BF16  a bf16 transformers run: bf16 weights and activations, sums in double, rounded where
//         PyTorch rounds (docs/math.md §15.3); the router as transformers runs it, in fp32 (fp32
//         weights, logits and sigmoid rounded to fp32).
//
// Shape legend: S = tokens, H = hidden_size, V = vocab_size, I = an MLP's width,
//   E = n_routed_experts, k = num_experts_per_tok.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/model.hpp"
#include "mla/model_forward.hpp"
#include "mla/tensor.hpp"
#include "reference/mla_reference.hpp"

namespace mla::ref {

// ---- one function per equation -------------------------------------------------------------

// h[s] = embed_tokens[ids[s]]                      torch: self.embed_tokens(input_ids)
// -> [S, H] (bf16 values in bf16 mode)
TensorD embed(const Checkpoint& ckpt, const std::vector<int64_t>& ids, Precision p);

// h + delta                                        torch: residual + hidden_states (bf16: rounded)
TensorD residual_add(const TensorD& h, const TensorD& delta, Precision p);

// silu(x) = x / (1 + exp(-x)) elementwise          torch: ACT2FN["silu"] (bf16: computed in fp32, rounded)
TensorD silu(const TensorD& x, Precision p);

// down_proj(silu(gate_proj(x)) * up_proj(x))       torch: DeepseekV3MLP.forward
// x: [S, H] -> [S, H]; bf16: every Linear output, silu and the product rounded.
TensorD swiglu(const std::string& name, const TensorD& x, const MlpWeights& w, Precision p);

// DeepseekV3TopkRouter / DeepseekV2TopkRouter.forward: logits = x W^T (fp32 weights), then the
// family's scores, selection and weights (route_token, mla/model.hpp).
// bf16: every step an fp32 op (logits the fp32 rounding of the exact dot). x: [S, H].
struct RouterOutput {
  TensorD logits;                // [S, E]
  std::vector<int32_t> experts;  // [S*k] ascending per token
  std::vector<double> weights;   // [S*k]
};
RouterOutput router(const ModelConfig& cfg, const TensorD& x, const RouterWeights& w, Precision p);

// The routed experts' weighted sum: out[s] = sum over the k experts e of token s (ascending e)
// of expert_e(x[s]) * weight; bf16: each expert output rounded (its GEMM), times the fp32 weight
// in fp32, summed in fp32, the sum rounded once (transformers' grouped_mm experts).
TensorD routed_experts(const ModelConfig& cfg, const TensorD& x, const RouterOutput& routing,
                       const std::vector<MlpWeights>& experts, Precision p);

// DeepseekV3MoE.forward: routed_experts(x) + shared_experts(x) (bf16: rounded).
TensorD moe(const ModelConfig& cfg, const TensorD& x, const DecoderLayerWeights& w, Precision p, RouterOutput* routing);

// One DeepseekV3DecoderLayer over tokens at positions 0..S-1 (causal):
//   h = h + self_attn(input_layernorm(h));  h = h + mlp(post_attention_layernorm(h))
// The attention is mla_reference's stages (q_path, kv_path, rope, attend, o_proj).
TensorD decoder_layer(const ModelConfig& cfg, const DecoderLayerWeights& w, const TensorD& h, Precision p,
                      double latent_norm_eps, RouterOutput* routing);

// logits = lm_head(norm(h))                         torch: lm_head(self.norm(hidden_states))
TensorD lm_head(const ModelConfig& cfg, const ModelHeadWeights& w, const TensorD& h, Precision p);

// ---- the whole model ------------------------------------------------------------------------

struct ModelActivations {
  TensorD logits;                      // [S, V]
  std::vector<TensorD> hidden_states;  // [num_hidden_layers + 1] of [S, H] (as ModelForwardResult)
  std::vector<LayerRouting> routing;   // every MoE layer
};
// Layers streamed one at a time (all experts of a layer at once).
ModelActivations model_forward(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& ids,
                               Precision p, double latent_norm_eps);

}  // namespace mla::ref
