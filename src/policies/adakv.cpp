// src/policies/adakv.cpp — `adakv`: Ada-KV (Feng et al., 2024, arXiv 2407.11550) as kvpress's
// AdaKVPress: a wrapper whose budget is shared by the heads adaptively, a head that scores a
// token higher claiming it, with each head guaranteed its own best tokens.
//
//   k          = the evictable tokens kept (held evictable - count), s[h, t] the inner press's
//                per-head score (head_scores)
//   safeguard  safe_h = head h's floor(k * alpha) best evictable tokens (ties: the newer)
//   kvpress    the n k best (head, token) pairs over all heads, safe pairs first, each head
//              keeping its own; on MLA every head reads the one latent row, so a token costs its
//              row if any head keeps it. Here the pairs are walked in that order and a token is
//              kept when its first pair comes, until k tokens are kept (the union of the heads'
//              choices, its size held to the budget):
//   key(t)     = 1 if t is in some safe_h, else 0
//   key2(t)    = max over the heads h with t in safe_h (key 1) or over every head (key 0) of s[h, t]
//   the lowest (key, key2, the inner press's tie order) go.
//   Settings: press=snapkv (kvpress's evaluation registry: adakv_snapkv), alpha=20%
//   (alpha_safeguard 0.20); the inner press's protected set, observation window and features.
#include <algorithm>
#include <limits>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class AdaKVCache final : public Wrapper {
 public:
  AdaKVCache(PolicySettings s, int64_t K, const PolicyContext& c) : Wrapper(std::move(s), K, c) {}

 protected:
  void rank(int64_t count, const std::vector<double>&, const std::vector<double>&, std::vector<double>& key,
            std::vector<double>& key2) const override {
    const size_t m = cache_.size();
    const std::vector<size_t> held = evictable_entries();
    const int64_t kept = static_cast<int64_t>(held.size()) - count;
    const size_t safe = idx(kept * settings_.alpha_percent / 100);
    std::vector<double> s;  // [n, m]
    inner_head_scores(s);
    if (s.size() != idx(ctx_.heads) * m) bad("cache manager: adakv's inner press gave " + std::to_string(s.size()) + " head scores");
    const double lowest = -std::numeric_limits<double>::infinity();
    key.assign(m, 0.0);
    key2.assign(m, lowest);
    std::vector<double> any(m, lowest);
    std::vector<size_t> order;
    for (int64_t h = 0; h < ctx_.heads; ++h) {
      const double* row = s.data() + idx(h) * m;
      for (size_t j : held) any[j] = std::max(any[j], row[j]);
      if (safe == 0) continue;
      order = held;  // head h's best first; ties: the newer
      std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(safe - 1), order.end(),
                       [&](size_t a, size_t b) { return row[a] != row[b] ? row[a] > row[b] : a > b; });
      for (size_t r = 0; r < safe; ++r) {
        key[order[r]] = 1.0;
        key2[order[r]] = std::max(key2[order[r]], row[order[r]]);
      }
    }
    for (size_t j : held)
      if (key[j] == 0.0) key2[j] = any[j];
  }
};

}  // namespace

PolicyEntry adakv_entry() {
  PolicyEntry e = wrapper_entry("adakv", {"alpha"});
  e.make = make_manager<AdaKVCache>;
  return e;
}

}  // namespace mla::policies
