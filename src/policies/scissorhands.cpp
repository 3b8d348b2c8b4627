// src/policies/scissorhands.cpp — `scissorhands`: persistence of importance (Liu et al., NeurIPS
// 2023) over a history window of queries (the sliding window of snapkv.cpp).
//
//   count[h, t] = the number of the last w queries q that held t with p_q[h, t] < 1 / m_q
//                 (m_q = the tokens q attended over: q found t unimportant)
//   score(t)    = -heads( count[h, t] )       (the most often unimportant goes)
//   Settings: no sinks, recent 32, window 32, heads summed. No public code: the count of
//   "unimportant" marks and its 1/m threshold are our reading of the paper, the window and
//   recent sizes our choice.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class ScissorhandsCache final : public WindowAttention {
 public:
  ScissorhandsCache(PolicySettings s, int64_t K, const PolicyContext& c) : WindowAttention(std::move(s), K, c) {}

 protected:
  double value(const Query& e, int64_t i) const override { return e.p(i) < 1.0 / static_cast<double>(e.seen) ? 1.0 : 0.0; }
  void score(std::vector<double>& primary, std::vector<double>&) const override {
    primary = aggregate(at_cache(sum_), static_cast<int64_t>(cache_.size()));
    for (double& v : primary) v = -v;
  }
  void head_scores(std::vector<double>& per_head) const override {
    per_head = at_cache(sum_);
    for (double& v : per_head) v = -v;
  }
};

}  // namespace

PolicyEntry scissorhands_entry() {
  PolicyEntry e;
  e.name = "scissorhands";
  e.settings = base_settings(0, 32, HeadAggregation::Sum);
  e.settings.window = 32;
  e.keys = {"sinks", "recent", "window", "heads"};
  e.observation_window = window_observation;
  e.has_window = true;
  e.scorer = true;
  e.make = make_manager<ScissorhandsCache>;
  return e;
}

}  // namespace mla::policies
