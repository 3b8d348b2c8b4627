// src/policies/kvzip.cpp — `kvzip`: KVzip (Kim et al., 2025, "KVzip: Query-agnostic KV cache
// compression with context reconstruction", arXiv 2505.23416), as kvpress's KVzipPress scores it.
//
// After the context [0, P) the model is asked to repeat it, one chunk of 2048 context tokens at a
// time (reconstruction_chunks): chunk c's repeat is, at positions P, P+1, ...,
//   c = 0:  "\n\nRepeat the previous context exactly."                 + "\n" + context[begin, end)
//   c > 0:  "\n\nRepeat the part of the previous context exactly, starting with" + context[begin-8, begin)
//                                                                       + "\n" + context[begin, end)
// run through the model over the whole (uncompressed) context cache. At each layer, repeat row i
// of chunk c scores with its own softmax over the keys [0, s) u [begin, end) u [P, P + i]
// (s = min(4, begin): sinks; the repeat's self-attention included, causal):
//   rec[h, t] = max over the chunk's repeat rows i of p_i[h, t],   t in [begin, end)   (add_reconstruction_row)
//   score(t)  = heads( rec[h, t] )                                 heads=max: kvpress's max over the
//                                                                  group of the one KV head (MLA's latent
//                                                                  is read by all n heads)
// The repeat's keys and rows are dropped afterwards; the lowest scores go at the prefill cut.
// Decoded tokens have no reconstruction score: under the decode protocol (--compress decode) the
// context's scores stay those of the prefill and a decoded token ranks above every context token
// (per head 2, above any probability: evicted last, the older first). The caller runs the repeat
// and fills TokenFeatures::reconstruction (decode: the context's own rows at its layer, no text
// rows; eval: the whole repeat through every layer; docs/decode.md §2.2).
// Settings: no sinks, recent 1 (kvpress's n_sink = 4 only marks a chat template's prefix, which
// these prompts do not have), heads=max. kvpress's default layerwise=False spreads one budget over
// the layers by the scores; here every layer holds K (its layerwise=True). kvzip+ normalization off
// (kvpress's default).
#include <algorithm>
#include <string_view>

#include "src/policies/policy_entry.hpp"

namespace mla {

std::vector<ReconstructionChunk> reconstruction_chunks(int64_t P, const ReconstructionText& text, int64_t chunk) {
  if (P < 1 || chunk < 1) policies::bad("kvzip: reconstruction of " + std::to_string(P) + " tokens in chunks of " + std::to_string(chunk));
  auto as_text = [](std::vector<int64_t>& rows, const std::vector<int64_t>& ids) {
    for (int64_t v : ids) rows.push_back(-(v + 1));
  };
  std::vector<ReconstructionChunk> out;
  for (int64_t begin = 0; begin < P; begin += chunk) {
    ReconstructionChunk c;
    c.begin = begin;
    c.end = std::min(P, begin + chunk);
    c.sinks = std::min(kReconstructionSinks, begin);
    if (begin == 0) {
      as_text(c.rows, text.first);
    } else {
      as_text(c.rows, text.later);
      for (int64_t t = std::max(begin - chunk, begin - kReconstructionPostfix); t < begin; ++t) c.rows.push_back(t);
    }
    as_text(c.rows, text.suffix);
    for (int64_t t = c.begin; t < c.end; ++t) c.rows.push_back(t);
    out.push_back(std::move(c));
  }
  return out;
}

int64_t reconstruction_rows(const std::vector<ReconstructionChunk>& chunks) {
  int64_t most = 0;
  for (const ReconstructionChunk& c : chunks) most = std::max(most, static_cast<int64_t>(c.rows.size()));
  return most;
}

int64_t reconstruction_total_rows(const std::vector<ReconstructionChunk>& chunks) {
  int64_t all = 0;
  for (const ReconstructionChunk& c : chunks) all += static_cast<int64_t>(c.rows.size());
  return all;
}

ReconstructionText reconstruction_text_bound() {
  ReconstructionText t;
  t.first.assign(std::string_view(kReconstructionFirst).size(), 0);
  t.later.assign(std::string_view(kReconstructionLater).size(), 0);
  t.suffix.assign(std::string_view(kReconstructionSuffix).size(), 0);
  return t;
}

std::vector<int64_t> reconstruction_keys(const ReconstructionChunk& c, int64_t P, int64_t i) {
  std::vector<int64_t> keys;
  for (int64_t t = 0; t < c.sinks; ++t) keys.push_back(t);
  for (int64_t t = c.begin; t < c.end; ++t) keys.push_back(t);
  for (int64_t t = P; t <= P + i; ++t) keys.push_back(t);
  return keys;
}

void add_reconstruction_row(TokenFeatures& f, const ReconstructionChunk& c, std::span<const int64_t> keys,
                            std::span<const double> probs) {
  const int64_t n = f.heads, T = f.tokens, m = static_cast<int64_t>(keys.size());
  if (n < 1 || static_cast<int64_t>(probs.size()) != n * m)
    policies::bad("kvzip: a repeat row's attention holds " + std::to_string(probs.size()) + " values for " +
                  std::to_string(n) + " heads x " + std::to_string(m) + " keys");
  if (f.reconstruction.empty()) f.reconstruction.assign(policies::idx(n * T), 0.0);
  for (int64_t j = 0; j < m; ++j) {
    const int64_t t = keys[policies::idx(j)];
    if (t < c.begin || t >= c.end) continue;  // sinks and repeat rows: in the softmax, not scored
    for (int64_t h = 0; h < n; ++h) {
      double& r = f.reconstruction[policies::idx(h * T + t)];
      r = std::max(r, probs[policies::idx(h * m + j)]);
    }
  }
}

namespace policies {
namespace {

class KVzipCache final : public StaticScore {
 public:
  static constexpr double kDecoded = 2.0;  // a decoded token's score per head: above any probability
  KVzipCache(PolicySettings s, int64_t K, const PolicyContext& c) : StaticScore(std::move(s), K, c) {
    require({&TokenFeatures::reconstruction}, "the context reconstruction's attention");
  }

 protected:
  double per_head(size_t at) const override {  // at = h * T + t
    const int64_t t = static_cast<int64_t>(at % idx(ctx_.positions));
    return t < ctx_.prompt_len ? ctx_.features->reconstruction[at] : kDecoded;
  }
};

}  // namespace

PolicyEntry kvzip_entry() {
  PolicyEntry e;
  e.name = "kvzip";
  e.settings = base_settings(0, 1, HeadAggregation::Max);
  e.keys = {"sinks", "recent", "heads"};
  e.make = make_manager<KVzipCache>;
  e.needs = [](const PolicySettings&, FeatureNeeds& f) { f.reconstruction = true; };
  return e;
}

}  // namespace policies
}  // namespace mla
