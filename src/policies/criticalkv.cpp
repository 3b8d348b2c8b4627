// src/policies/criticalkv.cpp — `criticalkv`: CriticalKV (Feng et al., 2025, arXiv 2502.03805) as
// kvpress's CriticalKVPress: a wrapper that reweights its inner press's scores by what each value
// adds to the output, after keeping the inner press's best tokens outright.
//
//   k         = the evictable tokens kept (held evictable - count)
//   stage 1   the floor(k * first) best evictable tokens by the inner press's tie order are kept
//   stage 2   key(t) = (s(t) + epsilon) * mean_h ||W_O^h W_UV^h c_t||  for the rest; the lowest
//             goes (ties: the inner press's tie order)
//   s(t)      = the inner press's score (heads aggregated as it does). On MLA every head reads the
//               one latent row, as one KV head (MQA) in kvpress, whose CriticalKV multiplies the
//               group mean score by the group mean of ||W_O v||_1; here the mean over all heads of
//               the output norm value-aware reads (TokenFeatures::output_norm, ||.||_2, not ||.||_1).
//   Settings: press=snapkv (kvpress's evaluation registry: critical_snapkv), first=50%
//   (first_stage_ratio 0.5), epsilon 1e-4 (fixed, kvpress's default). Signed scores (knorm,
//   keydiff, scissorhands) are multiplied as kvpress multiplies them.
#include <limits>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

constexpr double kCriticalEpsilon = 1e-4;  // kvpress CriticalKVPress.epsilon

class CriticalKVCache final : public Wrapper {
 public:
  CriticalKVCache(PolicySettings s, int64_t K, const PolicyContext& c) : Wrapper(std::move(s), K, c) {
    if (!ctx_.features || ctx_.features->output_norm.size() != idx(ctx_.heads * ctx_.positions))
      bad("cache manager: criticalkv needs the output norms of " + std::to_string(ctx_.positions) + " tokens");
  }

 protected:
  void rank(int64_t count, const std::vector<double>& primary, const std::vector<double>& order,
            std::vector<double>& key, std::vector<double>& key2) const override {
    const std::vector<size_t> held = evictable_entries();
    const int64_t kept = static_cast<int64_t>(held.size()) - count;
    const int64_t first = kept * settings_.first_percent / 100;  // stage 1's tokens: the last `first` of the order
    const double stage1 = static_cast<double>(static_cast<int64_t>(held.size()) - first);
    key.assign(cache_.size(), 0.0);
    key2 = order;
    const int64_t n = ctx_.heads, T = ctx_.positions;
    for (size_t j : held) {
      if (order[j] >= stage1) {
        key[j] = std::numeric_limits<double>::infinity();
        continue;
      }
      double norm = 0.0;  // heads in order
      for (int64_t h = 0; h < n; ++h) norm += ctx_.features->output_norm[idx(h * T + cache_[j])];
      key[j] = (primary[j] + kCriticalEpsilon) * (norm / static_cast<double>(n));
    }
  }
};

}  // namespace

PolicyEntry criticalkv_entry() {
  PolicyEntry e = wrapper_entry("criticalkv", {"first"});
  e.make = make_manager<CriticalKVCache>;
  e.needs = [](const PolicySettings& s, FeatureNeeds& f) {
    add_feature_needs(s.inner.at(0), f);
    f.output_norm = true;
  };
  return e;
}

}  // namespace mla::policies
