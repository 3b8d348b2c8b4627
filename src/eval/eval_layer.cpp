// src/eval/eval_layer.cpp — the pieces of eval at one layer (eval_layer.hpp).
//
// Shape legend: P = prompt rows, n = heads, d_qk, H = hidden_size.
#include "eval_layer.hpp"

#include <algorithm>
#include <numeric>

#include "mla/error.hpp"
#include "mla/rope.hpp"

namespace mla::eval {

PromptLayer prefill_layer(decoder::PreparedLayer& layer, MatrixRM& h_prompt, int64_t window, const FeatureNeeds& needs,
                          StageSeconds* stages) {
  const AttentionConfig& a = layer.config().attention;
  const int64_t P = h_prompt.rows(), n = a.num_attention_heads, d_qk = a.qk_head_dim();
  const std::vector<int64_t> positions = position_ids(0, P);
  PromptLayer out;
  out.window = std::clamp<int64_t>(window, 0, P);
  out.queries.resize(out.window, n * d_qk);
  // expected-attention's statistics read the queries of rows [first, P)
  const int64_t first = needs.expected_attention ? std::min(needs.expected_sinks, P - 1) : P;
  cpu::KeptQueries statistics_rows(first, P, n, d_qk, layer.precision());
  cpu::CausalRowAttention causal(layer.attention(), P, out.keys, &out.head_mass);
  decoder::LayerPlugs plugs;
  causal.plug(plugs.attention);
  if (needs.any()) {
    out.latent.resize(P, a.kv_lora_rank + a.qk_rope_head_dim);
    plugs.attention.latent = cpu::latent_cache_into(out.latent);
  }
  plugs.attention.queries = [&](const MatrixRM& q, int64_t r0) {
    cpu::keep_query_rows(q, r0, P - out.window, out.queries);
    statistics_rows.keep(q, r0, layer.threads());
  };
  plugs.stages = stages;
  plugs.stage_prefix = "prompt";
  decoder::layer_forward(layer, h_prompt, positions, plugs);
  if (needs.expected_attention) out.statistics = statistics_rows.statistics(a, positions);
  return out;
}

std::vector<double> prompt_query_probs(const decoder::PreparedLayer& layer, const PromptLayer& prompt, int64_t q) {
  const AttentionConfig& a = layer.config().attention;
  const int64_t P = prompt.keys.rows, row = q - (P - prompt.window);
  if (row < 0 || q >= P)
    fail(ErrorKind::InvalidArgument, "eval: prompt query " + std::to_string(q) + " is outside the observation window");
  std::vector<int64_t> positions(static_cast<size_t>(q + 1));
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> probs(static_cast<size_t>(a.num_attention_heads * (q + 1))),
      ctx(static_cast<size_t>(a.num_attention_heads * a.v_head_dim));
  cpu::RowScratch scratch;
  cpu::attend_row(layer.attention_spec(), prompt.queries.data() + row * prompt.queries.cols(),
                  cpu::KeyView{&prompt.keys, nullptr, P}, positions, probs.data(), ctx.data(), scratch);
  return {probs.begin(), probs.end()};
}

TokenFeatures run_features(const AttentionConfig& cfg, const LayerWeights& w, const PromptLayer& prompt,
                           const MatrixRM& latent, const FeatureNeeds& needs, int threads) {
  if (!needs.any()) return {};
  const int64_t P = prompt.latent.rows(), N = latent.rows(), width = latent.cols();
  TensorD all("latent_cache", {P + N, width});  // [P + N, r_kv + d_r]
  for (int64_t i = 0; i < P * width; ++i) all.data[static_cast<size_t>(i)] = prompt.latent.data()[i];
  for (int64_t i = 0; i < N * width; ++i) all.data[static_cast<size_t>(P * width + i)] = latent.data()[i];
  return compute_token_features(cfg, w, all, P, needs, prompt.statistics, threads);
}

void prefill_manager(CacheManager& manager, const decoder::PreparedLayer& layer, const PromptLayer& prompt) {
  std::vector<std::vector<double>> window_probs;  // alive until read_prompt returns (prompt_query_probs
  window_probs.reserve(static_cast<size_t>(prompt.window));  // fails for a query outside the window kept)
  manager.read_prompt(prompt.head_mass, [&](int64_t q) -> std::span<const double> {
    window_probs.push_back(prompt_query_probs(layer, prompt, q));
    return window_probs.back();
  });
}

}  // namespace mla::eval
