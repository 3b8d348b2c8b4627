// src/policies/knorm.cpp — `knorm`: kvpress's KnormPress (Devoto et al., 2024: a low key norm
// goes with high attention).
//
//   score(t) = heads( -||k_h,t|| ),  k_h,t = [W_UK^h c_t | k_pe_t]   (the key head h dots with on MLA)
//   static per token: the same at the prefill cut and at every step.
//   Settings: no sinks, recent 1, heads=mean (kvpress).
//
// Also the static-score family that keydiff and expected-attention derive from (StaticScore,
// policy_entry.hpp).
#include "src/policies/policy_entry.hpp"

namespace mla::policies {

void StaticScore::require(std::initializer_list<std::vector<double> TokenFeatures::*> features, const std::string& what) const {
  bool ok = ctx_.features != nullptr;
  for (auto f : features) ok = ok && (ctx_.features->*f).size() == idx(ctx_.heads * ctx_.positions);
  if (!ok) bad("cache manager: " + settings_.preset + " needs " + what + " of " + std::to_string(ctx_.positions) + " tokens");
}

// per head [n, m] at the cache's positions, then aggregated over heads
void StaticScore::head_scores(std::vector<double>& heads) const {
  const size_t m = cache_.size();
  heads.resize(idx(ctx_.heads) * m);
  for (int64_t h = 0; h < ctx_.heads; ++h)
    for (size_t j = 0; j < m; ++j) heads[idx(h) * m + j] = per_head(idx(h * ctx_.positions + cache_[j]));
}

void StaticScore::score(std::vector<double>& primary) const {
  std::vector<double> heads;
  head_scores(heads);
  primary = aggregate(heads, static_cast<int64_t>(cache_.size()));
}

namespace {

class KnormCache final : public StaticScore {
 public:
  KnormCache(PolicySettings s, int64_t K, const PolicyContext& c) : StaticScore(std::move(s), K, c) {
    require({&TokenFeatures::key_norm}, "the key norms");
  }

 protected:
  double per_head(size_t at) const override { return -ctx_.features->key_norm[at]; }
};

}  // namespace

PolicyEntry knorm_entry() {
  PolicyEntry e;
  e.name = "knorm";
  e.settings = base_settings(0, 1, HeadAggregation::Mean);
  e.keys = {"sinks", "recent", "heads"};
  e.scorer = true;
  e.make = make_manager<KnormCache>;
  e.needs = [](const PolicySettings&, FeatureNeeds& f) { f.key_norm = true; };
  return e;
}

}  // namespace mla::policies
