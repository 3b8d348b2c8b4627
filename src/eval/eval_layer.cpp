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

void reconstruction_layer(decoder::PreparedLayer& layer, PromptLayer& prompt, const ReconstructionChunk& c,
                          MatrixRM& h_repeat, StageSeconds* stages) {
  const AttentionConfig& a = layer.config().attention;
  const int64_t P = prompt.keys.rows, R = h_repeat.rows(), n = a.num_attention_heads;
  if (static_cast<int64_t>(c.rows.size()) != R)
    fail(ErrorKind::Shape, "eval: kvzip's repeat has " + std::to_string(R) + " rows for a chunk of " + std::to_string(c.rows.size()));
  const bool whole = c.sinks == 0 && c.begin == 0 && c.end == P;  // its scores are the model's own attention
  cpu::RowKeys own;
  own.reset(n, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, P, R, layer.precision());
  const cpu::KeyView keys{&prompt.keys, &own, P};
  std::vector<cpu::RowScratch> scratch(static_cast<size_t>(std::max(layer.threads(), 1)));
  decoder::LayerPlugs plugs;
  plugs.attention.keys = [&](int64_t r0, int64_t rows, const cpu::KvPath& kvp, const MatrixRM& k_pe_roped) {
    own.set_rows(P + r0, rows, kvp.kv.data(), kvp.kv.cols(), k_pe_roped.data(), k_pe_roped.cols());
  };
  plugs.attention.attend = [&](const MatrixRM& q, int64_t r0, MatrixRM& ctx) {
    std::vector<float> probs, score_probs, unused(static_cast<size_t>(n * a.v_head_dim));
    for (int64_t s = 0; s < q.rows(); ++s) {
      const int64_t i = r0 + s;
      std::vector<int64_t> all(static_cast<size_t>(P + i + 1));
      std::iota(all.begin(), all.end(), 0);
      probs.resize(static_cast<size_t>(n) * all.size());
      cpu::attend_row_split(layer.attention_spec(), static_cast<int>(scratch.size()), q.data() + s * q.cols(), keys, all,
                            probs.data(), ctx.data() + s * ctx.cols(), scratch);
      const std::vector<int64_t> scored = whole ? all : reconstruction_keys(c, P, i);
      if (!whole) {
        score_probs.resize(static_cast<size_t>(n) * scored.size());
        cpu::attend_row_split(layer.attention_spec(), static_cast<int>(scratch.size()), q.data() + s * q.cols(), keys,
                              scored, score_probs.data(), unused.data(), scratch);
      }
      const std::vector<float>& p = whole ? probs : score_probs;
      add_reconstruction_row(prompt.reconstruction, c, scored, std::vector<double>(p.begin(), p.end()));
    }
  };
  plugs.stages = stages;
  plugs.stage_prefix = "kvzip repeat";
  std::vector<int64_t> positions(static_cast<size_t>(R));
  std::iota(positions.begin(), positions.end(), P);
  decoder::layer_forward(layer, h_repeat, positions, plugs);
}

TokenFeatures run_features(const AttentionConfig& cfg, const LayerWeights& w, const PromptLayer& prompt,
                           const MatrixRM& latent, const FeatureNeeds& needs, int threads) {
  if (!needs.any()) return {};
  const int64_t P = prompt.latent.rows(), N = latent.rows(), width = latent.cols();
  TensorD all("latent_cache", {P + N, width});  // [P + N, r_kv + d_r]
  for (int64_t i = 0; i < P * width; ++i) all.data[static_cast<size_t>(i)] = prompt.latent.data()[i];
  for (int64_t i = 0; i < N * width; ++i) all.data[static_cast<size_t>(P * width + i)] = latent.data()[i];
  TokenFeatures f = compute_token_features(cfg, w, all, P, needs, prompt.statistics, threads);
  if (needs.reconstruction) {
    if (prompt.reconstruction.tokens != P + N || prompt.reconstruction.heads != f.heads)
      fail(ErrorKind::InvalidArgument, "eval: kvzip's reconstruction scores were not computed at this layer");
    f.reconstruction = prompt.reconstruction.reconstruction;
  }
  return f;
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
