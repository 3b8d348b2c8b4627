// src/model/decoder_layer.hpp — one DeepseekV3DecoderLayer on the CPU, one function per
// equation (docs/math.md §15), every one row-wise in the fixed-order arithmetic of
// src/cpu/fixed_order.hpp, so that a row's result does not depend on which other rows are
// computed with it. One function composes them (layer_forward); the plain forward
// (model_forward.cpp) and `mla-h2o eval` (src/eval/) plug their keys and attention into it:
//
//   x        = input_norm(h)                      input_layernorm, eps rms_norm_eps      [m, H]
//   a        = cpu::attention_layer(x, positions) the one CPU attention layer             [m, H]
//              (src/cpu/attention_pipeline.hpp: projections by row chunks on the fixed-order
//              engine, the caller's attention by query passes, e.g. cpu::CausalRowAttention:
//              cpu::attend_row per row over the positions it attends, o_proj by row chunks)
//   h        = residual_add(h, a)                 bf16: bf16(h + a)
//   y        = post_norm(h)                       post_attention_layernorm               [m, H]
//   f        = mlp(y)                             dense_mlp or moe                        [m, H]
//   h        = residual_add(h, f)
//
// bf16 rounding points beyond the attention's (docs/math.md §15.3): every Linear output, both
// RMSNorm roundings, silu(gate), silu(gate)*up, each residual add; the router in fp32 (fp32
// weights, fp32 logits and sigmoid or softmax); each routed expert's output times its fp32 weight in fp32,
// the k products summed in fp32 in ascending expert order and rounded once; + the shared expert
// rounded.
//
// Shape legend (config names): m = rows, H = hidden_size, n = num_attention_heads, d_qk, d_v,
//   r_kv = kv_lora_rank, d_r = qk_rope_head_dim, E = n_routed_experts, k = num_experts_per_tok.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mla/attention.hpp"
#include "mla/model.hpp"
#include "src/cpu/attention_pipeline.hpp"
#include "src/cpu/attention_stages.hpp"
#include "src/cpu/fixed_order.hpp"
#include "src/cpu/row_attention.hpp"

namespace mla::decoder {

using cpu::MatrixRM;

// The routing of m rows through one MoE layer (what transformers' router returns, per row).
struct Routing {
  int64_t k = 0;
  std::vector<int32_t> experts;  // [m*k] the k experts of row s at s*k, ascending
  std::vector<float> weights;    // [m*k] their weights (normalised, times routed_scaling_factor)
  std::vector<float> logits;     // [m*E] router logits (fp32)
};

// One SwiGLU MLP on the fixed-order engine.
struct PreparedMlp {
  std::unique_ptr<cpu::FixedOrderLinear> gate_proj, up_proj, down_proj;
};

// Loads routed expert e's weights on demand (the plain forward of a model larger than RAM loads
// each expert when a token is routed to it and frees it after).
using ExpertLoader = std::function<MlpWeights(int64_t expert)>;

struct LayerSettings {
  Precision precision = Precision::BF16;
  int threads = 1;
  double latent_norm_eps = 1e-6;  // q_a_layernorm / kv_a_layernorm (transformers: 1e-6)
  bool keep_experts = true;       // keep an expert prepared once loaded (false: free after use)
};

class PreparedLayer {
 public:
  // w's experts may be empty: then `loader` supplies each expert when first needed.
  PreparedLayer(const ModelConfig& cfg, const DecoderLayerWeights& w, const LayerSettings& settings,
                ExpertLoader loader = {});

  int64_t layer() const { return layer_; }
  bool moe() const { return moe_; }
  Precision precision() const { return precision_; }
  int threads() const { return threads_; }
  const ModelConfig& config() const { return cfg_; }
  const cpu::RowAttentionSpec& attention_spec() const { return spec_; }
  // The attention's weights on the fixed-order engine, for cpu::attention_layer and its kernels.
  cpu::Layer attention() const { return {cfg_.attention, attention_, precision(), threads_, latent_eps_}; }

  // ---- the equations ----
  MatrixRM input_norm(const Eigen::Ref<const MatrixRM>& h) const;  // [m, H] -> [m, H]
  void residual_add(MatrixRM& h, const MatrixRM& delta) const;
  MatrixRM post_norm(const MatrixRM& h) const;
  // dense SwiGLU or DeepseekV3MoE; routing (may be null) receives the MoE routing.
  MatrixRM mlp(const MatrixRM& y, Routing* routing);

  // Weights held now (prepared copies), for the memory report.
  int64_t prepared_bytes() const;

 private:
  MatrixRM swiglu(const PreparedMlp& m, const MatrixRM& x) const;
  Routing route(const MatrixRM& y) const;
  MatrixRM moe(const MatrixRM& y, Routing* routing);
  const PreparedMlp& expert(int64_t e);

  const ModelConfig& cfg_;
  int64_t layer_ = 0;
  bool moe_ = false;
  Precision precision_ = Precision::BF16;
  int threads_ = 1;
  float rms_eps_ = 1e-6f;
  bool keep_experts_ = true;
  cpu::PreparedWeights attention_;
  std::vector<float> input_layernorm_, post_attention_layernorm_;  // [H]
  cpu::RowAttentionSpec spec_;
  float latent_eps_ = 1e-6f;
  PreparedMlp dense_, shared_;
  std::unique_ptr<cpu::FixedOrderLinear> router_;  // [E, H] fp32 (never rounded to bf16)
  std::vector<float> correction_bias_;             // [E]
  std::vector<std::unique_ptr<PreparedMlp>> experts_;  // [E], null until loaded
  ExpertLoader loader_;
};

// Prepares one SwiGLU MLP (bf16: weights rounded to bf16 values), packed on `threads` workers.
PreparedMlp prepare_mlp(const MlpWeights& w, Precision precision, int threads = 1);


// What a caller plugs into the one composition of a layer (layer_forward).
struct LayerPlugs {
  // The attention's key store and kernel (cpu::attention_layer): keys and attend required (e.g.
  // cpu::CausalRowAttention::plug), hooks optional; `output` is the layer's own (set by
  // layer_forward: the residual add).
  cpu::AttentionPlugs attention;
  // The attention output rows [m, H] before the residual add (eval's per-run errors). Optional.
  std::function<void(const MatrixRM& attn_output)> attn_output;
  Routing* routing = nullptr;  // receives the MoE routing (may be null)
  // Where the layer's time goes (may be null): "<stage_prefix>: projections" (input_norm, q_path,
  // kv_path and rope), ": attention" (storing the keys and the plugged attention), ": o_proj",
  // ": mlp" (post_norm, MLP or MoE and both residual adds), each added to its one record
  // (add_seconds), so layers sum.
  StageSeconds* stages = nullptr;
  std::string stage_prefix;
};

// THE composition of one DeepseekV3DecoderLayer over m rows at `positions` (h [m, H] in place):
// cpu::attention_layer(input_norm(h)) with plugs.attention -> attn_output -> plugs.attn_output,
// residual, post_norm, mlp, residual. Every whole-model caller (the causal forward and eval's
// prompt with cpu::CausalRowAttention, eval's decode rows of every run at once with its policies'
// attention) goes through it; rows are independent, so a row's bits do not depend on the other
// rows computed with it.
void layer_forward(PreparedLayer& layer, MatrixRM& h, const std::vector<int64_t>& positions, const LayerPlugs& plugs);

// The final norm and lm_head (DeepseekV3Model.norm, DeepseekV3ForCausalLM.lm_head).
class PreparedHead {
 public:
  PreparedHead(const ModelConfig& cfg, const ModelHeadWeights& w, Precision precision, int threads);
  MatrixRM logits(const MatrixRM& h) const;  // [m, H] -> [m, V]

 private:
  Precision precision_;
  int threads_;
  float eps_;
  std::vector<float> norm_;
  std::unique_ptr<cpu::FixedOrderLinear> lm_head_;
};

// embed_tokens rows of `ids` as the model's first residual stream (bf16 values in bf16 mode).
MatrixRM embed(const Checkpoint& ckpt, const std::vector<int64_t>& ids, Precision precision);

}  // namespace mla::decoder
