// src/policies/streaming.cpp — `streaming`: StreamingLLM (Xiao et al., 2024).
//
//   score(t) = t (the oldest evictable token goes): attention sinks + a sliding window
//   Paper settings: 4 sinks, every other held token recent.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class StreamingCache final : public CacheManager {
 public:
  StreamingCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override {
    by_position(primary);
  }
  void scores(std::vector<double>& primary, std::vector<double>&) override { by_position(primary); }
  void head_scores(std::vector<double>& per_head) const override {  // every head's score is the position
    std::vector<double> one;
    by_position(one);
    per_head.clear();
    for (int64_t h = 0; h < ctx_.heads; ++h) per_head.insert(per_head.end(), one.begin(), one.end());
  }

 private:
  void by_position(std::vector<double>& primary) const {
    primary.resize(cache_.size());
    for (size_t j = 0; j < cache_.size(); ++j) primary[j] = static_cast<double>(cache_[j]);
  }
};

}  // namespace

PolicyEntry streaming_entry() {
  PolicyEntry e;
  e.name = "streaming";
  e.settings = base_settings(4, 1, HeadAggregation::Sum);
  e.keys = {"sinks"};
  e.scorer = true;
  e.make = make_manager<StreamingCache>;
  return e;
}

}  // namespace mla::policies
