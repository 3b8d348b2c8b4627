// src/policies/random.cpp — `random`: the baseline. Its picks come from mla/random.hpp's
// generator, so they can be reproduced in any language.
//
//   prefill: scores uniform(0, 1) from Rng(seed, 7001), the lowest go
//   step:    a uniform pick among the evictable tokens (position order) from Rng(seed, 7002 + 16 K)
//   Settings: no sinks, recent 1, seed 0.
#include <algorithm>

#include "mla/random.hpp"
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

constexpr uint64_t kRandomPrefillStream = 7001, kRandomDecodeStream = 7002;

class RandomCache final : public CacheManager {
 public:
  RandomCache(PolicySettings s, int64_t K, const PolicyContext& c)
      : CacheManager(std::move(s), K, c), rng_(settings_.seed, kRandomDecodeStream + static_cast<uint64_t>(K) * 16) {}

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override {
    Rng rng(settings_.seed, kRandomPrefillStream);
    primary.resize(cache_.size());
    for (double& v : primary) v = rng.uniform();
  }
  void scores(std::vector<double>&, std::vector<double>&) override {}
  std::vector<int64_t> evict(int64_t count, const std::vector<double>& primary, const std::vector<double>& secondary) override {
    if (x_ < ctx_.prompt_len) return CacheManager::evict(count, primary, secondary);
    std::vector<int64_t> gone;
    for (int64_t k = 0; k < count; ++k) {
      std::vector<size_t> cand;
      for (size_t j = 0; j < cache_.size(); ++j)
        if (evictable(cache_[j])) cand.push_back(j);
      if (cand.empty()) bad("cache manager: random has nothing evictable at position " + std::to_string(x_));
      const size_t pick = cand[std::min(cand.size() - 1, static_cast<size_t>(rng_.uniform() * static_cast<double>(cand.size())))];
      gone.push_back(cache_[pick]);
      cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    std::sort(gone.begin(), gone.end());
    return gone;
  }

 private:
  Rng rng_;
};

}  // namespace

PolicyEntry random_entry() {
  PolicyEntry e;
  e.name = "random";
  e.settings = base_settings(0, 1, HeadAggregation::Sum);
  e.keys = {"sinks", "recent", "seed"};
  e.make = make_manager<RandomCache>;
  return e;
}

}  // namespace mla::policies
