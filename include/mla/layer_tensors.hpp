// mla/layer_tensors.hpp — the one table of a layer's attention tensors: HF name, shape from
// the config, and when HF DeepseekV3Attention holds it (docs/math.md §1.1, §12).
//
// Everything that needs to know which tensors a layer has reads this table: the checkpoint
// loader (names, shapes), LayerWeights::parameter_count, and the validator every backend calls
// first (mla/validate.hpp), so no backend keeps a list of its own.
//
//   tensor                      shape                                   present when
//   q_a_proj.weight             [q_lora_rank, hidden_size]              q_lora_rank set
//   q_a_layernorm.weight        [q_lora_rank]                           q_lora_rank set
//   q_b_proj.weight             [n*(d_n+d_r), q_lora_rank]              q_lora_rank set
//   q_proj.weight               [n*(d_n+d_r), hidden_size]              q_lora_rank null
//   kv_a_proj_with_mqa.weight   [kv_lora_rank+d_r, hidden_size]         always
//   kv_a_layernorm.weight       [kv_lora_rank]                          always
//   kv_b_proj.weight            [n*(d_n+d_v), kv_lora_rank]             always
//   o_proj.weight               [hidden_size, n*d_v]                    always
//   q_a_proj.bias               [q_lora_rank]                           attention_bias and q_lora_rank set
//   kv_a_proj_with_mqa.bias     [kv_lora_rank+d_r]                      attention_bias
//   o_proj.bias                 [hidden_size]                           attention_bias
// (n = num_attention_heads, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim.)
// Bias rule, as HF builds the module: q_a_proj, kv_a_proj_with_mqa and o_proj take
// `bias=config.attention_bias`; q_proj, q_b_proj and kv_b_proj never have a bias.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/tensor.hpp"

namespace mla {

enum class Presence { Always, QLora, NoQLora, Bias, QLoraBias };

struct LayerTensorSpec {
  const char* name;              // HF parameter name under self_attn: "q_a_proj.weight"
  const char* field;             // LayerWeights field, the key of source_dtype: "q_a_proj", "q_a_proj_bias"
  TensorF LayerWeights::*member;
  Presence presence;
  const char* shape_names;       // the shape in config names: "[q_lora_rank, hidden_size]"
  std::vector<int64_t> (*shape_of)(const AttentionConfig& cfg);

  bool present(const AttentionConfig& cfg) const;
  std::vector<int64_t> shape(const AttentionConfig& cfg) const { return shape_of(cfg); }
  std::string checkpoint_suffix() const { return std::string("self_attn.") + name; }
};

// All eleven rows above, in that order.
std::span<const LayerTensorSpec> layer_tensor_table();

// The rows present for `cfg`, in table order.
std::vector<const LayerTensorSpec*> layer_tensors(const AttentionConfig& cfg);

}  // namespace mla
