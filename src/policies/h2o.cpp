// src/policies/h2o.cpp — `h2o`: Heavy-Hitter Oracle (Zhang et al., NeurIPS 2023; FMInference/H2O).
//
//   score(t) = heads( mass[h, t] ),  mass[h, t] = prefill mass[h, t] + sum_{decode q holding t} p_q[h, t]
//   prefill: the causal prefill's mass per head; step: the query's attention is added, then the
//   lowest score among the evictable tokens goes.
//   Paper settings: heavy-hitter budget = recent budget (heavy_ratio = recent_ratio), so recent =
//   50 % of K; no sinks; heads summed (one decision for all heads: MLA shares the latent).
//
// Also the accumulated-attention family that h2o-normalized and value-aware derive from
// (AccumulatedAttention, policy_entry.hpp).
#include <algorithm>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {

AccumulatedAttention::AccumulatedAttention(PolicySettings s, int64_t K, const PolicyContext& c)
    : CacheManager(std::move(s), K, c) {
  mass_.assign(idx(ctx_.heads * ctx_.positions), 0.0);
}

void AccumulatedAttention::prefill_scores(std::span<const double> head_mass, std::vector<double>& primary,
                                          std::vector<double>&) {
  const int64_t n = ctx_.heads, P = ctx_.prompt_len, T = ctx_.positions;
  for (int64_t h = 0; h < n; ++h)
    for (int64_t t = 0; t < P; ++t) mass_[idx(h * T + t)] = head_mass[idx(h * P + t)] * weight(h, t);
  score(primary);
}

void AccumulatedAttention::observe(std::span<const double> p) {
  const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(cache_.size());
  for (int64_t h = 0; h < n; ++h)
    for (int64_t j = 0; j < m; ++j) mass_[idx(h * T + cache_[idx(j)])] += p[idx(h * m + j)] * weight(h, cache_[idx(j)]);
}

void AccumulatedAttention::scores(std::vector<double>& primary, std::vector<double>&) { score(primary); }

void AccumulatedAttention::score(std::vector<double>& primary) const {
  primary = aggregate(at_cache(mass_), static_cast<int64_t>(cache_.size()));
  normalise(primary);
}

void AccumulatedAttention::head_scores(std::vector<double>& per_head) const {
  const size_t m = cache_.size();
  per_head = at_cache(mass_);
  std::vector<double> row(m);
  for (int64_t h = 0; h < ctx_.heads; ++h) {
    std::copy_n(per_head.begin() + static_cast<std::ptrdiff_t>(idx(h) * m), m, row.begin());
    normalise(row);
    std::copy(row.begin(), row.end(), per_head.begin() + static_cast<std::ptrdiff_t>(idx(h) * m));
  }
}

namespace {

class H2OCache final : public AccumulatedAttention {
 public:
  H2OCache(PolicySettings s, int64_t K, const PolicyContext& c) : AccumulatedAttention(std::move(s), K, c) {}
};

}  // namespace

PolicyEntry h2o_entry() {
  PolicyEntry e;
  e.name = "h2o";
  e.settings = base_settings(0, 1, HeadAggregation::Sum);
  e.settings.recent_percent = 50;  // heavy_ratio = recent_ratio: half of the cache is the recent window
  e.keys = {"sinks", "recent", "heads"};
  e.scorer = true;
  e.make = make_manager<H2OCache>;
  return e;
}

}  // namespace mla::policies
