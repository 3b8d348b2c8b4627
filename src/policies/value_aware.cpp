// src/policies/value_aware.cpp — `value-aware`: accumulated attention weighted by what the token's
// value adds to the output, in the line of VATP (Guo et al., 2024: attention x ||v||_1) and
// CriticalKV (Feng et al., 2025: x ||W_O v||_1); here ||.||_2, which bounds the output error
// attn_output is measured in.
//
//   score(t) = heads( sum_q p_q[h, t] * ||W_O^h W_UV^h c_t|| )   (the prefill mass weighted alike)
//   Settings: no sinks, recent 50 % of K (as h2o), heads summed.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class ValueAwareCache final : public AccumulatedAttention {
 public:
  ValueAwareCache(PolicySettings s, int64_t K, const PolicyContext& c) : AccumulatedAttention(std::move(s), K, c) {
    if (!ctx_.features || ctx_.features->output_norm.size() != idx(ctx_.heads * ctx_.positions))
      bad("cache manager: value-aware needs the output norms of " + std::to_string(ctx_.positions) + " tokens");
    norm_ = ctx_.features->output_norm.data();
  }

 protected:
  double weight(int64_t h, int64_t t) const override { return norm_[idx(h * ctx_.positions + t)]; }

 private:
  const double* norm_ = nullptr;  // [n, T] output_norm
};

}  // namespace

PolicyEntry value_aware_entry() {
  PolicyEntry e;
  e.name = "value-aware";
  e.settings = base_settings(0, 1, HeadAggregation::Sum);
  e.settings.recent_percent = 50;
  e.keys = {"sinks", "recent", "heads"};
  e.scorer = true;
  e.make = make_manager<ValueAwareCache>;
  e.needs = [](const PolicySettings&, FeatureNeeds& f) { f.output_norm = true; };
  return e;
}

}  // namespace mla::policies
