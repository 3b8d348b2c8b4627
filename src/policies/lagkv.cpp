// src/policies/lagkv.cpp — `lagkv`: kvpress's LagKVPress (LagKV, arXiv 2504.04704: lag-relative
// information): each partition of `lag` tokens after the sinks is scored against the next partition's
// key and value ranges.
//
//   partition c = [sinks + c lag, sinks + (c + 1) lag); per head h, token t in c, for x = k_h,t, v_h,t:
//     u = (x - min) / (max - min) per dim (min, max over partition c + 1's tokens)
//     p_x(t) = softmax over c's tokens of std(u)  (the unbiased std over the dims)
//     rank_h,t = (the rank of (p_k(t) + p_v(t)) / 2 among c's tokens, ascending) / lag   (TokenFeatures::lagkv)
//   score(t) = heads(rank_h,t) once partition c + 1 has arrived (sinks + (c + 2) lag <= x + 1),
//              else 1 (the largest: the newest one to two partitions stay, kvpress's tail)
// At the prefill cut (x = P - 1) this is kvpress's score: the sinks, the last complete partition and
// the incomplete tail score 1; a prompt shorter than sinks + 2 lag scores nothing (kvpress then ranks by
// position: with every token at 1 the tie rule evicts the oldest, the same order). Decoding, a
// partition is ranked once the next one is complete (LagKV's own streaming use). On MLA the key is
// the cache's k_h,t = [W_UK^h c_t | k_pe_t] (roped, as kvpress's keys) and v_h,t = W_UV^h c_t.
//   Settings: kvpress's: sinks 4 (n_sink), lag 128 (lag_size), no cross-scoring; recent 1, heads=mean.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class LagKVCache final : public StaticScore {
 public:
  LagKVCache(PolicySettings s, int64_t K, const PolicyContext& c) : StaticScore(std::move(s), K, c) {
    require({&TokenFeatures::lagkv}, "its partition ranks");
  }

 protected:
  double per_head(size_t at) const override {
    const int64_t t = static_cast<int64_t>(at) % ctx_.positions, sinks = settings_.sinks, lag = settings_.lag;
    if (t < sinks) return 1.0;
    const int64_t c = (t - sinks) / lag;  // (c + 2) lag <= t - sinks + 2 lag: no overflow
    return sinks + (c + 2) * lag <= x_ + 1 ? ctx_.features->lagkv[at] : 1.0;
  }
};

}  // namespace

PolicyEntry lagkv_entry() {
  PolicyEntry e;
  e.name = "lagkv";
  e.settings = base_settings(4, 1, HeadAggregation::Mean);
  e.settings.lag = 128;
  e.keys = {"sinks", "recent", "heads", "lag"};
  e.make = make_manager<LagKVCache>;
  // several settings in one run share one set of ranks: the same sinks and lag
  e.needs = [](const PolicySettings& s, FeatureNeeds& f) {
    if (f.lagkv && (s.sinks != f.lagkv_sinks || s.lag != f.lagkv_lag))
      bad("--policy: lagkv settings with different sinks or lag in one run are not supported");
    f.lagkv = true;
    f.lagkv_sinks = s.sinks;
    f.lagkv_lag = s.lag;
  };
  return e;
}

}  // namespace mla::policies
