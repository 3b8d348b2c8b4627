// src/checkpoint/layer_tensors.cpp — the table of mla/layer_tensors.hpp.
#include "mla/layer_tensors.hpp"

#include <array>

namespace mla {
namespace {

using Shape = std::vector<int64_t>;
using C = AttentionConfig;

const std::array<LayerTensorSpec, 11> kTable = {{
    {"q_a_proj.weight", "q_a_proj", &LayerWeights::q_a_proj, Presence::QLora, "[q_lora_rank, hidden_size]",
     [](const C& c) { return Shape{c.q_lora_rank, c.hidden_size}; }},
    {"q_a_layernorm.weight", "q_a_layernorm", &LayerWeights::q_a_layernorm, Presence::QLora, "[q_lora_rank]",
     [](const C& c) { return Shape{c.q_lora_rank}; }},
    {"q_b_proj.weight", "q_b_proj", &LayerWeights::q_b_proj, Presence::QLora,
     "[num_attention_heads*(qk_nope_head_dim+qk_rope_head_dim), q_lora_rank]",
     [](const C& c) { return Shape{c.num_attention_heads * c.qk_head_dim(), c.q_lora_rank}; }},
    {"q_proj.weight", "q_proj", &LayerWeights::q_proj, Presence::NoQLora,
     "[num_attention_heads*(qk_nope_head_dim+qk_rope_head_dim), hidden_size]",
     [](const C& c) { return Shape{c.num_attention_heads * c.qk_head_dim(), c.hidden_size}; }},
    {"kv_a_proj_with_mqa.weight", "kv_a_proj_with_mqa", &LayerWeights::kv_a_proj_with_mqa, Presence::Always,
     "[kv_lora_rank+qk_rope_head_dim, hidden_size]",
     [](const C& c) { return Shape{c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size}; }},
    {"kv_a_layernorm.weight", "kv_a_layernorm", &LayerWeights::kv_a_layernorm, Presence::Always, "[kv_lora_rank]",
     [](const C& c) { return Shape{c.kv_lora_rank}; }},
    {"kv_b_proj.weight", "kv_b_proj", &LayerWeights::kv_b_proj, Presence::Always,
     "[num_attention_heads*(qk_nope_head_dim+v_head_dim), kv_lora_rank]",
     [](const C& c) { return Shape{c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}; }},
    {"o_proj.weight", "o_proj", &LayerWeights::o_proj, Presence::Always, "[hidden_size, num_attention_heads*v_head_dim]",
     [](const C& c) { return Shape{c.hidden_size, c.num_attention_heads * c.v_head_dim}; }},
    {"q_a_proj.bias", "q_a_proj_bias", &LayerWeights::q_a_proj_bias, Presence::QLoraBias, "[q_lora_rank]",
     [](const C& c) { return Shape{c.q_lora_rank}; }},
    {"kv_a_proj_with_mqa.bias", "kv_a_proj_with_mqa_bias", &LayerWeights::kv_a_proj_with_mqa_bias, Presence::Bias,
     "[kv_lora_rank+qk_rope_head_dim]", [](const C& c) { return Shape{c.kv_lora_rank + c.qk_rope_head_dim}; }},
    {"o_proj.bias", "o_proj_bias", &LayerWeights::o_proj_bias, Presence::Bias, "[hidden_size]",
     [](const C& c) { return Shape{c.hidden_size}; }},
}};

}  // namespace

bool LayerTensorSpec::present(const AttentionConfig& cfg) const {
  switch (presence) {
    case Presence::Always: return true;
    case Presence::QLora: return cfg.has_q_lora();
    case Presence::NoQLora: return !cfg.has_q_lora();
    case Presence::Bias: return cfg.attention_bias;
    case Presence::QLoraBias: return cfg.attention_bias && cfg.has_q_lora();
  }
  return false;
}

std::span<const LayerTensorSpec> layer_tensor_table() { return kTable; }

std::vector<const LayerTensorSpec*> layer_tensors(const AttentionConfig& cfg) {
  std::vector<const LayerTensorSpec*> out;
  for (const LayerTensorSpec& t : kTable)
    if (t.present(cfg)) out.push_back(&t);
  return out;
}

}  // namespace mla
