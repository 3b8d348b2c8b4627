// src/policies/full.cpp — `full`: nothing is evicted. The pipeline's check: its attention is
// the full cache's, so every error against it is exactly 0.
#include <limits>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class FullCache final : public CacheManager {
 public:
  FullCache(PolicySettings s, const PolicyContext& c) : CacheManager(std::move(s), std::numeric_limits<int64_t>::max(), c) {}

 protected:
  void scores(std::vector<double>&, std::vector<double>&) override {}
  void prefill_scores(std::span<const double>, std::vector<double>&, std::vector<double>&) override {}
};

}  // namespace

PolicyEntry full_entry() {
  PolicyEntry e;
  e.name = "full";
  e.settings = base_settings(0, 1, HeadAggregation::Sum);
  e.protects_nothing = true;
  e.full_cache = true;
  e.make = [](const PolicySettings& s, int64_t, const PolicyContext& c) -> std::unique_ptr<CacheManager> {
    return std::make_unique<FullCache>(s, c);
  };
  return e;
}

}  // namespace mla::policies
