// src/policies/oracle.cpp — `oracle`: not a cache but a bound. At each step the query attends over
// the min(K + 1, x + 1) tokens its own full-cache attention (heads aggregated) favours most, ties
// keeping the newer; it may re-admit any token, then holds its K best. Its mass_recall is the
// largest any cache of that size can have.
//
//   score(t) = heads( p_full,x[h, t] )     prefill: heads(the causal prefill's mass)
//   Under --compress prefill (no eviction while decoding): the K best prompt tokens for the
//   current query, plus every decoded one.
#include <algorithm>
#include <numeric>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class OracleCache final : public CacheManager {
 public:
  OracleCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}
  std::span<const int64_t> begin_step(int64_t x, std::span<const double> full) override {
    if (static_cast<int64_t>(full.size()) != ctx_.heads * (x + 1))
      bad("cache manager: oracle needs the full attention [n, x+1] at position " + std::to_string(x));
    CacheManager::begin_step(x, {});
    last_ = aggregate(full, x + 1);  // [x+1]
    // the first `keep` of `candidates` tokens by last_ (ties: the newer), ascending
    const auto best = [&](int64_t candidates, int64_t keep) {
      std::vector<int64_t> order(idx(candidates));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return last_[idx(a)] != last_[idx(b)] ? last_[idx(a)] > last_[idx(b)] : a > b;
      });
      order.resize(idx(keep));
      std::sort(order.begin(), order.end());
      return order;
    };
    if (!ctx_.evict_while_decoding) {  // prefill protocol: the K best prompt tokens, then every decoded one
      const int64_t P = ctx_.prompt_len;
      cache_ = best(P, std::min(budget_, P));
      for (int64_t t = P; t <= x; ++t) cache_.push_back(t);
      return cache_;
    }
    cache_ = best(x + 1, std::min(budget_, x) + 1);
    return cache_;
  }

 protected:
  void prefill_scores(std::span<const double> head_mass, std::vector<double>& primary, std::vector<double>&) override {
    primary = aggregate(head_mass, ctx_.prompt_len);
  }
  void scores(std::vector<double>& primary, std::vector<double>&) override {
    primary.resize(cache_.size());
    for (size_t j = 0; j < cache_.size(); ++j) primary[j] = last_[idx(cache_[j])];
  }

 private:
  std::vector<double> last_;  // [x+1] heads(full attention)
};

}  // namespace

PolicyEntry oracle_entry() {
  PolicyEntry e;
  e.name = "oracle";
  e.settings = base_settings(0, 0, HeadAggregation::Sum);  // ranks every token
  e.keys = {"heads"};
  e.protects_nothing = true;
  e.needs_full_attention = true;
  e.make = make_manager<OracleCache>;
  return e;
}

}  // namespace mla::policies
