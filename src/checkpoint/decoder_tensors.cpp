// src/checkpoint/decoder_tensors.cpp — the tensors of a DeepseekV3 decoder layer beyond its attention
// (norms, dense MLP, router, shared and routed experts) and of the model head, loaded through
// Checkpoint::load_tensor by their plain names (mla/model.hpp lists them with their shapes).
//
// Shape legend: H = hidden_size, V = vocab_size, I = intermediate_size,
//   I_m = moe_intermediate_size, E = n_routed_experts.
#include <algorithm>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/memory_plan.hpp"
#include "mla/model.hpp"

namespace mla {
namespace {

// "mlp.gate_proj.weight" etc. of one SwiGLU MLP under `base` ("mlp.", "mlp.experts.3.",
// "mlp.shared_experts."), of width `width`.
MlpWeights load_mlp(const Checkpoint& ckpt, int64_t layer, const std::string& base, int64_t width,
                    const std::string& width_name, int64_t H, std::map<std::string, std::string>& dtypes) {
  MlpWeights m;
  const std::string in = "[" + width_name + ", hidden_size]", out = "[hidden_size, " + width_name + "]";
  m.gate_proj = ckpt.load_tensor(decoder_tensor_name(ckpt, layer, base + "gate_proj.weight"), {width, H}, in, &dtypes);
  m.up_proj = ckpt.load_tensor(decoder_tensor_name(ckpt, layer, base + "up_proj.weight"), {width, H}, in, &dtypes);
  m.down_proj = ckpt.load_tensor(decoder_tensor_name(ckpt, layer, base + "down_proj.weight"), {H, width}, out, &dtypes);
  return m;
}

std::string expert_base(int64_t expert) { return "mlp.experts." + std::to_string(expert) + "."; }

}  // namespace

std::string decoder_tensor_name(const Checkpoint& ckpt, int64_t layer, const std::string& suffix) {
  return ckpt.prefix() + "layers." + std::to_string(layer) + "." + suffix;
}

std::string lm_head_tensor_name(const Checkpoint& ckpt) {
  // lm_head sits beside the decoder ("model." -> "lm_head.weight",
  // "language_model.model." -> "language_model.lm_head.weight").
  std::string p = ckpt.prefix();
  static const std::string model = "model.";
  if (p.size() >= model.size() && p.compare(p.size() - model.size(), model.size(), model) == 0)
    p.resize(p.size() - model.size());
  return p + "lm_head.weight";
}

DecoderLayerWeights load_decoder_layer(const Checkpoint& ckpt, const ModelConfig& cfg, int64_t layer, bool experts) {
  const AttentionConfig& a = cfg.attention;
  if (layer < 0 || layer >= a.num_hidden_layers)
    fail(ErrorKind::Checkpoint, "layer " + std::to_string(layer) + " is out of range [0, " +
                                    std::to_string(a.num_hidden_layers) + ") (num_hidden_layers)");
  const int64_t H = a.hidden_size;
  DecoderLayerWeights w;
  w.layer = layer;
  w.moe = cfg.is_moe_layer(layer);
  w.self_attn = ckpt.load_layer(layer, /*with_input_layernorm=*/true);
  for (const auto& [name, dtype] : w.self_attn.source_dtype) w.source_dtype["self_attn." + name] = dtype;
  w.post_attention_layernorm = ckpt.load_tensor(decoder_tensor_name(ckpt, layer, "post_attention_layernorm.weight"), {H},
                                                "[hidden_size]", &w.source_dtype);
  if (!w.moe) {
    w.mlp = load_mlp(ckpt, layer, "mlp.", cfg.intermediate_size, "intermediate_size", H, w.source_dtype);
    return w;
  }
  const int64_t E = cfg.n_routed_experts;
  w.gate.weight = ckpt.load_tensor(decoder_tensor_name(ckpt, layer, "mlp.gate.weight"), {E, H},
                                   "[n_routed_experts, hidden_size]", &w.source_dtype);
  if (cfg.router_has_correction_bias())
    w.gate.e_score_correction_bias = ckpt.load_tensor(decoder_tensor_name(ckpt, layer, "mlp.gate.e_score_correction_bias"),
                                                      {E}, "[n_routed_experts]", &w.source_dtype);
  if (cfg.n_shared_experts > 0)
    w.shared_experts = load_mlp(ckpt, layer, "mlp.shared_experts.", cfg.shared_intermediate_size(),
                                "moe_intermediate_size * n_shared_experts", H, w.source_dtype);
  if (experts) {
    w.experts.reserve(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      w.experts.push_back(load_mlp(ckpt, layer, expert_base(e), cfg.moe_intermediate_size, "moe_intermediate_size", H,
                                   w.source_dtype));
  }
  return w;
}

MlpWeights load_expert(const Checkpoint& ckpt, const ModelConfig& cfg, int64_t layer, int64_t expert) {
  if (!cfg.is_moe_layer(layer) || expert < 0 || expert >= cfg.n_routed_experts)
    fail(ErrorKind::InvalidArgument, "layer " + std::to_string(layer) + " has no routed expert " + std::to_string(expert));
  std::map<std::string, std::string> dtypes;
  return load_mlp(ckpt, layer, expert_base(expert), cfg.moe_intermediate_size, "moe_intermediate_size",
                  cfg.attention.hidden_size, dtypes);
}

ModelHeadWeights load_model_head(const Checkpoint& ckpt, const ModelConfig& cfg) {
  const int64_t H = cfg.attention.hidden_size, V = cfg.attention.vocab_size;
  ModelHeadWeights w;
  w.norm = ckpt.load_tensor(ckpt.prefix() + "norm.weight", {H}, "[hidden_size]", &w.source_dtype);
  const std::string head = cfg.tie_word_embeddings ? ckpt.prefix() + "embed_tokens.weight" : lm_head_tensor_name(ckpt);
  w.lm_head = ckpt.load_tensor(head, {V, H}, "[vocab_size, hidden_size]", &w.source_dtype);
  return w;
}

void check_model_tensors(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& what) {
  std::vector<std::string> names = {ckpt.prefix() + "embed_tokens.weight"};
  for (int64_t L = 0; L < cfg.attention.num_hidden_layers; ++L) {
    names.push_back(decoder_tensor_name(ckpt, L, "self_attn.kv_a_proj_with_mqa.weight"));  // the rest: load_layer
    names.push_back(decoder_tensor_name(ckpt, L, "input_layernorm.weight"));
    names.push_back(decoder_tensor_name(ckpt, L, "post_attention_layernorm.weight"));
    std::vector<std::string> mlps;
    if (!cfg.is_moe_layer(L)) {
      mlps.push_back("mlp.");
    } else {
      names.push_back(decoder_tensor_name(ckpt, L, "mlp.gate.weight"));
      if (cfg.router_has_correction_bias())
        names.push_back(decoder_tensor_name(ckpt, L, "mlp.gate.e_score_correction_bias"));
      if (cfg.n_shared_experts > 0) mlps.push_back("mlp.shared_experts.");
      for (int64_t e = 0; e < cfg.n_routed_experts; ++e) mlps.push_back(expert_base(e));
    }
    for (const std::string& m : mlps)
      for (const char* p : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
        names.push_back(decoder_tensor_name(ckpt, L, m + p));
  }
  names.push_back(ckpt.prefix() + "norm.weight");
  if (!cfg.tie_word_embeddings) names.push_back(lm_head_tensor_name(ckpt));
  for (const std::string& n : names)
    if (!ckpt.has_tensor(n))
      fail(ErrorKind::TensorNotFound, what + ": checkpoint " + ckpt.path() + " has no tensor '" + n +
                                          "' (the whole-model forward needs every layer's attention, norms and MLP or "
                                          "experts, embed_tokens, norm and " +
                                          (cfg.tie_word_embeddings ? "embed_tokens as the tied lm_head)" : "lm_head)"));
  const std::vector<int64_t> present = ckpt.layers_present();
  for (int64_t L = 0; L < cfg.attention.num_hidden_layers; ++L)
    if (std::find(present.begin(), present.end(), L) == present.end())
      fail(ErrorKind::TensorNotFound, what + ": checkpoint " + ckpt.path() + " lacks attention tensors of layer " +
                                          std::to_string(L) + " (the whole-model forward needs every layer)");
}

int64_t model_parameter_count(const ModelConfig& cfg) {
  const AttentionConfig& a = cfg.attention;
  const int64_t H = a.hidden_size, V = a.vocab_size;
  int64_t n = V * H * (cfg.tie_word_embeddings ? 1 : 2) + H;  // embed_tokens (+ lm_head), norm
  for (int64_t L = 0; L < a.num_hidden_layers; ++L) {
    n += attention_parameter_count(a) + 2 * H;  // + input/post_attention_layernorm
    if (!cfg.is_moe_layer(L)) {
      n += 3 * H * cfg.intermediate_size;
    } else {
      n += cfg.n_routed_experts * (H + 1);  // router
      n += 3 * H * cfg.shared_intermediate_size();
      n += cfg.n_routed_experts * 3 * H * cfg.moe_intermediate_size;
    }
  }
  return n;
}

int64_t model_active_parameter_count(const ModelConfig& cfg) {
  const AttentionConfig& a = cfg.attention;
  int64_t moe_layers = 0;
  for (int64_t L = 0; L < a.num_hidden_layers; ++L) moe_layers += cfg.is_moe_layer(L);
  return model_parameter_count(cfg) -
         moe_layers * (cfg.n_routed_experts - cfg.num_experts_per_tok) * 3 * a.hidden_size * cfg.moe_intermediate_size;
}

}  // namespace mla
