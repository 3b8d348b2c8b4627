// src/policies/expected_attention.cpp — `expected-attention`: kvpress's ExpectedAttentionPress,
// its MLA form (docs/decode.md §2.2; the statistics in src/kv_cache/token_features.cpp).
//
//   z_h,t    = s mu'_h . k_h,t + 1/2 s^2 k_h,t^T S'_h k_h,t   (mu', S': the prompt's pre-RoPE query
//              mean and covariance over rows [sinks, P), rotated by the mean RoPE of the next
//              `future` positions; s = the layer's softmax scale)
//   E_h,t    = softmax of z_h,t over the prompt tokens [sinks, P) (later tokens: the same normaliser)
//   score(t) = heads( E_h,t * ||v_h,t|| )      (vnorm=1; vnorm=0: E_h,t alone); static per token
//   Settings: sinks 4, recent 1, heads=mean, future 512, vnorm 1 (kvpress's defaults).
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class ExpectedAttentionCache final : public StaticScore {
 public:
  ExpectedAttentionCache(PolicySettings s, int64_t K, const PolicyContext& c) : StaticScore(std::move(s), K, c) {
    if (settings_.vnorm) require({&TokenFeatures::expected_attention, &TokenFeatures::value_norm}, "its scores and the value norms");
    else require({&TokenFeatures::expected_attention}, "its scores");
  }

 protected:
  double per_head(size_t at) const override {
    return ctx_.features->expected_attention[at] * (settings_.vnorm ? ctx_.features->value_norm[at] : 1.0);
  }
};

}  // namespace

PolicyEntry expected_attention_entry() {
  PolicyEntry e;
  e.name = "expected-attention";
  e.settings = base_settings(4, 1, HeadAggregation::Mean);
  e.keys = {"sinks", "recent", "heads", "future", "vnorm"};
  e.scorer = true;
  e.make = make_manager<ExpectedAttentionCache>;
  // several settings in one run share one set of query statistics: the same sinks and future
  e.needs = [](const PolicySettings& s, FeatureNeeds& f) {
    if (f.expected_attention && (s.sinks != f.expected_sinks || s.future != f.expected_future))
      bad("--policy: expected-attention settings with different sinks or future in one run are not supported");
    f.expected_attention = true;
    f.expected_sinks = s.sinks;
    f.expected_future = s.future;
    if (s.vnorm) f.value_norm = true;
  };
  return e;
}

}  // namespace mla::policies
