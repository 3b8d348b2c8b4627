// src/eval/eval_layer.hpp — the pieces of `mla-h2o eval` at one layer (mla/eval.hpp), shared by
// the layer-by-layer loop (eval_loop.cpp) and the suite `eval`'s token-by-token loop that proves
// its order right: the prompt's causal prefill, a policy's cache managers, a decode row's
// attention over a cache.
//
// Shape legend: P = prompt rows, n = heads, d_qk, d_v, H = hidden_size, m = rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mla/decode.hpp"
#include "mla/model.hpp"
#include "mla/policy.hpp"
#include "src/cpu/row_attention.hpp"
#include "src/model/decoder_layer.hpp"

namespace mla::eval {

using cpu::MatrixRM;

// One layer's prompt rows [0, P), shared by every run (the prefill never evicts).
struct PromptLayer {
  cpu::RowKeys keys;               // positions [0, P)
  std::vector<double> head_mass;   // [n*P] attention mass each prompt token received, per head
  MatrixRM queries;                // [window, n*d_qk] query_states of the last `window` prompt rows
  int64_t window = 0;
  MatrixRM latent;                 // [P, r_kv + d_r] the latent cache rows (when features are needed)
  QueryStatistics statistics;      // of the pre-RoPE prompt queries (expected-attention), else empty
  TokenFeatures reconstruction;    // kvzip: heads, tokens and reconstruction [n, T] (reconstruction_layer)
};

// The causal forward of the prompt at `layer` (h_prompt [P, H] in place): decoder::layer_forward
// with cpu::CausalRowAttention plugged in, keeping its keys and per-head mass, and from its hooks
// the queries of its last `window` rows; with `needs` asking for features, its latent rows and
// (expected-attention) the statistics of its queries from row needs.expected_sinks on.
// `stages` (may be null): where the layer's time went, "prompt: ..." (decoder::LayerPlugs::stages).
PromptLayer prefill_layer(decoder::PreparedLayer& layer, MatrixRM& h_prompt, int64_t window, const FeatureNeeds& needs,
                          StageSeconds* stages = nullptr);

// kvzip's repeat of context chunk c at `layer` (mla/policy.hpp reconstruction_chunks), after the
// prompt's prefill_layer: its rows h_repeat [R, H] (in place) through decoder::layer_forward at
// positions P .. P+R-1, row i attending the prompt's keys [0, P) and the repeat's own [P, P+i]
// (the model's attention over the whole context: the rows of the next layer); and row i's
// attention over reconstruction_keys(c, P, i) (the same softmax when c is the whole context)
// into prompt.reconstruction (add_reconstruction_row). The repeat's keys are dropped after.
void reconstruction_layer(decoder::PreparedLayer& layer, PromptLayer& prompt, const ReconstructionChunk& c,
                          MatrixRM& h_repeat, StageSeconds* stages = nullptr);

// The per-token features of one run at one layer (mla/policy.hpp TokenFeatures): from the
// prompt's latent rows and the run's own decode rows `latent` [N, r_kv + d_r]; the same bits for
// any `threads`.
TokenFeatures run_features(const AttentionConfig& cfg, const LayerWeights& w, const PromptLayer& prompt,
                           const MatrixRM& latent, const FeatureNeeds& needs, int threads);

// The causal attention of prompt row q (P - window <= q < P) over [0, q]: [n*(q+1)] in double.
std::vector<double> prompt_query_probs(const decoder::PreparedLayer& layer, const PromptLayer& prompt, int64_t q);


// Reads the prompt into a policy's manager at one layer: the attention of its observation
// window's prompt queries, then the prefill cut by the prompt's per-head mass.
void prefill_manager(CacheManager& manager, const decoder::PreparedLayer& layer, const PromptLayer& prompt);

}  // namespace mla::eval
