// src/whole_model/decoder_layer.hpp — one DeepseekV3DecoderLayer on the CPU, one function per
// equation (docs/math.md §15), every one row-wise in the fixed-order arithmetic of
// src/cpu/fixed_order.hpp, so that a row's result does not depend on which other rows are
// computed with it. One function composes them (layer_forward); the plain forward
// (model_forward.cpp) and `mla-h2o eval` (src/eval/) plug their attention into it:
//
//   x        = input_norm(h)                      input_layernorm, eps rms_norm_eps      [m, H]
//   proj     = project(x, positions)              q (roped), kv = kv_b_proj(kv_a_layernorm(latent)),
//                                                 k_pe roped (the attention's q_path/kv_path/rope)
//   ctx row  = cpu::attend_row(query row, keys, positions attended)                      [n*d_v]
//   a        = o_proj(ctx)                                                               [m, H]
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
#include "src/cpu/cpu_stages.hpp"
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
  bool bf16() const { return bf16_; }
  int threads() const { return threads_; }
  const ModelConfig& config() const { return cfg_; }
  const cpu::RowAttentionSpec& attention_spec() const { return spec_; }

  // ---- the equations ----
  MatrixRM input_norm(const MatrixRM& h) const;  // [m, H] -> [m, H]
  struct Projected {
    MatrixRM q;           // [m, n*d_qk]   query_states rows (rope halves rotated, HF order)
    MatrixRM kv;          // [m, n*(d_n+d_v)] kv_b_proj output: k_nope | value per head
    MatrixRM k_pe_roped;  // [m, d_r]
    MatrixRM latent;      // [m, r_kv + d_r] the latent cache row: kv_a_layernorm(c) | k_pe roped
  };
  Projected project(const MatrixRM& x, const std::vector<int64_t>& positions) const;
  MatrixRM o_proj(const MatrixRM& attn_context) const;  // [m, n*d_v] -> [m, H]
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
  bool moe_ = false, bf16_ = false;
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
PreparedMlp prepare_mlp(const MlpWeights& w, bool bf16, int threads = 1);


// The attention of rows [row_begin, row_end) of a causal prefill (each row s attends positions
// 0..s of `keys`), rows in parallel: ctx rows [rows, n*d_v]. head_mass (optional, [n*T] double,
// zeroed by the caller) receives sum over the rows of each head's probabilities per key, summed
// in row order per fixed chunk of rows and then over chunks (the same for any thread count).
void attend_causal(const PreparedLayer& layer, const MatrixRM& q, int64_t row_begin, int64_t row_end,
                   const cpu::KeyView& keys, MatrixRM& ctx, std::vector<double>* head_mass);

// What a caller plugs into the one composition of a layer (layer_forward): where the projected
// rows go, how their attention is computed, and what it reads of the attention output.
struct LayerPlugs {
  // After input_norm and project of every row: the caller takes what its attention needs (the
  // keys, the queries; moving them out frees the rest before the attention). Required.
  std::function<void(PreparedLayer::Projected&)> projected;
  // The attention of every row: ctx [m, n*d_v] (HF's attn_output before o_proj). Required.
  std::function<void(MatrixRM& ctx)> attend;
  // The attention output rows [m, H] before the residual add (eval's per-run errors). Optional.
  std::function<void(const MatrixRM& attn_output)> attn_output;
  Routing* routing = nullptr;  // receives the MoE routing (may be null)
  // Where the layer's time goes (may be null): "<stage_prefix>: projections" (input_norm and
  // project), ": attention" (plugs.attend), ": o_proj", ": mlp" (post_norm, MLP or MoE and both
  // residual adds), each added to its one record (add_seconds), so layers sum.
  StageSeconds* stages = nullptr;
  std::string stage_prefix;
};

// THE composition of one DeepseekV3DecoderLayer over m rows at `positions` (h [m, H] in place):
// input_norm, project -> plugs.projected, plugs.attend -> ctx, o_proj -> plugs.attn_output,
// residual, post_norm, mlp, residual. Every caller (the causal forward, eval's prompt and its
// decode rows of every run at once) goes through it; rows are independent, so a row's bits do
// not depend on the other rows computed with it.
void layer_forward(PreparedLayer& layer, MatrixRM& h, const std::vector<int64_t>& positions, const LayerPlugs& plugs);

// The causal forward of one layer over rows at positions 0..m-1 (h [m, H] in place): layer_forward
// with the attention attend_causal. keys receives the layer's keys and values of those positions;
// head_mass / routing as attend_causal / mlp (may be null); `also` (may be empty) sees the
// projected rows first (eval's prompt keeps its last queries and its latent rows).
// `stages` (may be null) as LayerPlugs::stages, under the prefix "prompt".
void forward_layer(PreparedLayer& layer, MatrixRM& h, cpu::RowKeys& keys, std::vector<double>* head_mass,
                   Routing* routing, const std::function<void(const PreparedLayer::Projected&)>& also = {},
                   StageSeconds* stages = nullptr);

// The final norm and lm_head (DeepseekV3Model.norm, DeepseekV3ForCausalLM.lm_head).
class PreparedHead {
 public:
  PreparedHead(const ModelConfig& cfg, const ModelHeadWeights& w, Precision precision, int threads);
  MatrixRM logits(const MatrixRM& h) const;  // [m, H] -> [m, V]

 private:
  bool bf16_;
  int threads_;
  float eps_;
  std::vector<float> norm_;
  std::unique_ptr<cpu::FixedOrderLinear> lm_head_;
};

// embed_tokens rows of `ids` as the model's first residual stream (bf16 values in bf16 mode).
MatrixRM embed(const Checkpoint& ckpt, const std::vector<int64_t>& ids, Precision precision);

}  // namespace mla::decoder
