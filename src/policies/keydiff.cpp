// src/policies/keydiff.cpp — `keydiff`: KeyDiff (Park et al., 2025, arXiv 2504.15364) as kvpress's
// KeyDiffPress: keep the tokens whose keys differ most from the average key direction.
//
//   a_h      = mean over the prompt tokens t < P of k_h,t / ||k_h,t||     (the anchor, per head)
//   score(t) = heads( -cos(k_h,t, a_h) ),  k_h,t = [W_UK^h c_t | k_pe_t]   (the key on MLA, as knorm)
//   static per token (TokenFeatures::key_diff, src/kv_cache/token_features.cpp): kvpress scores the
//   prompt's keys once against the prompt's anchor; a decoded token is scored against the same
//   anchor. (KeyDiff's paper recomputes the anchor over the cache block by block; not done here.)
//   Settings: kvpress's: no sinks, no window (recent 1: the new token), heads=mean.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class KeyDiffCache final : public StaticScore {
 public:
  KeyDiffCache(PolicySettings s, int64_t K, const PolicyContext& c) : StaticScore(std::move(s), K, c) {
    require({&TokenFeatures::key_diff}, "the key-to-anchor cosines");
  }

 protected:
  double per_head(size_t at) const override { return ctx_.features->key_diff[at]; }
};

}  // namespace

PolicyEntry keydiff_entry() {
  PolicyEntry e;
  e.name = "keydiff";
  e.settings = base_settings(0, 1, HeadAggregation::Mean);
  e.keys = {"sinks", "recent", "heads"};
  e.scorer = true;
  e.make = make_manager<KeyDiffCache>;
  e.needs = [](const PolicySettings&, FeatureNeeds& f) { f.key_diff = true; };
  return e;
}

}  // namespace mla::policies
