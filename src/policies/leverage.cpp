// src/policies/leverage.cpp — `leverage`: kvpress's LeverageScorePress (Chari & Van Durme, 2025,
// "Compactor: Calibrated Query-Agnostic KV Cache Compression with Approximate Leverage Scores",
// arXiv 2507.08143): keep the tokens whose keys are statistical outliers of the prompt's keys.
//
//   x_t      = [c_t | k_pe_t]  pre-RoPE (the one cached latent row, k_pe un-rotated)   [d = r_kv + d_r]
//   y_t      = (x_t - mean_{s in [sinks, P)} x_s) Phi,  Phi [d, k] Gaussian / sqrt(k)   (k = sketch)
//   l_t      = y_t^T (Y^T Y + j I)^{-1} y_t,  Y = the rows y_s, s in [sinks, P)        (j: jitter 1e-2)
//   score(t) = (l_t - mean) / std over [sinks, P)   (z-scored as kvpress); static per token
// (TokenFeatures::leverage, src/kv_cache/token_features.cpp). On MLA the latent row is the key: every
// head's key k_h,t = [W_UK^h c_t | k_pe_t] is a fixed linear map of it, so the latent's leverage is
// the leverage in the span of all heads' keys together, one score per token (no head aggregation),
// and its Gram is (r_kv + d_r)^2 whatever the heads. A decoded token is scored against the prompt's
// statistics (out of sample), as keydiff's anchor.
//   Settings: kvpress's: sketch 48 (sketch=0: exact leverage, Phi = I), no sinks, recent 1 (the new
//   token), seed 0 (the sketch's: Rng(seed, 7101); kvpress draws torch.randn unseeded).
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class LeverageCache final : public CacheManager {
 public:
  LeverageCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
    if (ctx_.features == nullptr || ctx_.features->leverage.size() != idx(ctx_.positions))
      bad("cache manager: " + settings_.preset + " needs the leverage scores of " + std::to_string(ctx_.positions) + " tokens");
  }

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override { score(primary); }
  void scores(std::vector<double>& primary, std::vector<double>&) override { score(primary); }

 private:
  void score(std::vector<double>& primary) const {  // [m]: one latent row, one score
    primary.resize(cache_.size());
    for (size_t j = 0; j < cache_.size(); ++j) primary[j] = ctx_.features->leverage[idx(cache_[j])];
  }
};

}  // namespace

PolicyEntry leverage_entry() {
  PolicyEntry e;
  e.name = "leverage";
  e.settings = base_settings(0, 1, HeadAggregation::Mean);
  e.settings.sketch = 48;
  e.keys = {"sinks", "recent", "sketch", "seed"};
  e.make = make_manager<LeverageCache>;
  // several settings in one run share one set of leverage scores: the same sinks, sketch and seed
  e.needs = [](const PolicySettings& s, FeatureNeeds& f) {
    if (f.leverage && (s.sinks != f.leverage_sinks || s.sketch != f.leverage_sketch || s.seed != f.leverage_seed))
      bad("--policy: leverage settings with different sinks, sketch or seed in one run are not supported");
    f.leverage = true;
    f.leverage_sinks = s.sinks;
    f.leverage_sketch = s.sketch;
    f.leverage_seed = s.seed;
  };
  return e;
}

}  // namespace mla::policies
