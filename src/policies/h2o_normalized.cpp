// src/policies/h2o_normalized.cpp — `h2o-normalized`: the accumulated attention divided by the
// number of queries that could see the token (kvpress ObservedAttentionPress; OpenVINO GenAI's
// NORM_SUM).
//
//   score(t) = heads( mass[h, t] ) / (x - t + 1)      (mass as h2o; prefill: x = P - 1)
//   Settings: no sinks, recent 1, heads=mean (kvpress's mean over a head group).
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class H2ONormalizedCache final : public AccumulatedAttention {
 public:
  H2ONormalizedCache(PolicySettings s, int64_t K, const PolicyContext& c) : AccumulatedAttention(std::move(s), K, c) {}

 protected:
  void normalise(std::vector<double>& primary) const override {  // the queries that could see t: t .. x
    for (size_t j = 0; j < cache_.size(); ++j) primary[j] /= static_cast<double>(x_ - cache_[j] + 1);
  }
};

}  // namespace

PolicyEntry h2o_normalized_entry() {
  PolicyEntry e;
  e.name = "h2o-normalized";
  e.settings = base_settings(0, 1, HeadAggregation::Mean);
  e.keys = {"sinks", "recent", "heads"};
  e.scorer = true;
  e.make = make_manager<H2ONormalizedCache>;
  return e;
}

}  // namespace mla::policies
