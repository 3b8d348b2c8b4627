// src/eval/eval_layer.cpp — the pieces of eval at one layer (eval_layer.hpp).
//
// Shape legend: P = prompt rows, n = heads, d_qk, H = hidden_size.
#include "eval_layer.hpp"

#include <algorithm>
#include <numeric>

#include "mla/error.hpp"

namespace mla::eval {

PromptLayer prefill_layer(decoder::PreparedLayer& layer, MatrixRM& h_prompt, int64_t window, const FeatureNeeds& needs,
                          StageSeconds* stages) {
  const AttentionConfig& a = layer.config().attention;
  const int64_t P = h_prompt.rows();
  PromptLayer out;
  out.window = std::clamp<int64_t>(window, 0, P);
  decoder::forward_layer(layer, h_prompt, out.keys, &out.head_mass, nullptr,
                         [&](const decoder::PreparedLayer::Projected& p) {
                           out.queries = p.q.bottomRows(out.window);
                           if (needs.any()) out.latent = p.latent;
                           if (needs.expected_attention) {
                             std::vector<int64_t> positions(static_cast<size_t>(P));
                             std::iota(positions.begin(), positions.end(), 0);
                             out.statistics = prerope_query_statistics(a, p.q.data(), P, positions,
                                                                       std::min(needs.expected_sinks, P - 1));
                           }
                         },
                         stages);
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
  const int64_t P = prompt.keys.rows, w = std::min(manager.observation_window(), prompt.window);
  if (manager.observation_window() > prompt.window)
    fail(ErrorKind::InvalidArgument, "eval: a policy reads " + std::to_string(manager.observation_window()) +
                                         " prompt queries but only " + std::to_string(prompt.window) + " were kept");
  std::vector<std::vector<double>> window_probs;  // alive until prefill() returns
  window_probs.reserve(static_cast<size_t>(w));
  for (int64_t q = P - w; q < P; ++q) {
    window_probs.push_back(prompt_query_probs(layer, prompt, q));
    manager.observe_prompt_query(q, window_probs.back());
  }
  manager.prefill(prompt.head_mass);
}

}  // namespace mla::eval
