// src/policies/tova.cpp — `tova`: Token Omission Via Attention (Oren et al., 2024;
// schwartz-lab-NLP/TOVA).
//
//   score(t) = heads( p_x[h, t] ), the current query's attention over the cache
//   prefill: the last prompt query's attention; step: the new query's, then the lowest goes.
//   Paper settings: no sinks, no window (recent 1: the new token), the mean over heads.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class TovaCache final : public CacheManager {
 public:
  TovaCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}
  void observe_prompt_query(int64_t q, std::span<const double> probs) override {
    if (q != ctx_.prompt_len - 1) return;
    last_ = aggregate(probs, q + 1);
    last_heads_.assign(probs.begin(), probs.end());
  }

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override {
    if (static_cast<int64_t>(last_.size()) != ctx_.prompt_len) bad("cache manager: tova needs the last prompt query's attention");
    primary = last_;
  }
  void observe(std::span<const double> p) override {
    last_ = aggregate(p, static_cast<int64_t>(cache_.size()));
    last_heads_.assign(p.begin(), p.end());
  }
  void scores(std::vector<double>& primary, std::vector<double>&) override { primary = last_; }
  void head_scores(std::vector<double>& per_head) const override { per_head = last_heads_; }

 private:
  std::vector<double> last_;        // [m] heads(p) of the latest query over the cache
  std::vector<double> last_heads_;  // [n, m] p itself
};

}  // namespace

PolicyEntry tova_entry() {
  PolicyEntry e;
  e.name = "tova";
  e.settings = base_settings(0, 1, HeadAggregation::Mean);
  e.keys = {"sinks", "recent", "heads"};
  e.observation_window = [](const PolicySettings&) -> int64_t { return 1; };
  e.scorer = true;
  e.make = make_manager<TovaCache>;
  return e;
}

}  // namespace mla::policies
