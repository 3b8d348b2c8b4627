// src/kv_cache/cache_manager.cpp — what every policy shares (CacheManager, mla/policy.hpp):
//
//   prefill   cache = 0..P-1; if P > K: evict the P - K lowest-scored evictable tokens
//   step x    cache += x (begin_step); the attention is observed (end_step); then while
//             |cache| > K the lowest-scored evictable token goes
//   evictable = not a sink (position >= sinks) and not in the recent window (position <= x - recent)
//   tie rule  lowest (score, secondary score, position) goes first: the newer token stays
//
// Shape legend: n heads, P prompt rows, T positions, K budget, m = |cache|.
#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "src/policies/policy_entry.hpp"

namespace mla {

using policies::bad;
using policies::idx;

CacheManager::CacheManager(PolicySettings s, int64_t budget, const PolicyContext& ctx)
    : settings_(std::move(s)),
      budget_(budget),
      ctx_(ctx),
      protect_recent_(recent_tokens(settings_, budget)),
      needs_full_attention_(policy_needs_full_attention(settings_)) {
  if (ctx_.heads < 1 || ctx_.prompt_len < 1 || ctx_.positions < ctx_.prompt_len)
    bad("cache manager: " + std::to_string(ctx_.heads) + " heads, prompt " + std::to_string(ctx_.prompt_len) +
        ", positions " + std::to_string(ctx_.positions));
  check_budget_holds(settings_, budget_, budget_);
}

int64_t CacheManager::observation_window() const { return policy_observation_window(settings_); }

void CacheManager::observe_prompt_query(int64_t, std::span<const double>) {}

void CacheManager::read_prompt(std::span<const double> head_mass,
                               const std::function<std::span<const double>(int64_t q)>& probs_of) {
  const int64_t P = ctx_.prompt_len;
  for (int64_t q = P - std::min(P, observation_window()); q < P; ++q) observe_prompt_query(q, probs_of(q));
  prefill(head_mass);
}

void CacheManager::head_scores(std::vector<double>&) const {
  bad("cache manager: " + settings_.preset + " has no per-head scores");
}

bool CacheManager::evictable(int64_t t) const { return t >= settings_.sinks && t <= x_ - protect_recent_; }

std::vector<double> CacheManager::at_cache(const std::vector<double>& per_position) const {
  const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(cache_.size());
  std::vector<double> out(idx(n * m));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t j = 0; j < m; ++j) out[idx(h * m + j)] = per_position[idx(h * T + cache_[idx(j)])];
  return out;
}

std::vector<double> CacheManager::aggregate(std::span<const double> per_head, int64_t m) const {
  const int64_t n = ctx_.heads;
  if (settings_.heads == HeadAggregation::Max) {
    std::vector<double> out(idx(m), -std::numeric_limits<double>::infinity());
    for (int64_t h = 0; h < n; ++h)
      for (int64_t j = 0; j < m; ++j) out[idx(j)] = std::max(out[idx(j)], per_head[idx(h * m + j)]);
    return out;
  }
  std::vector<double> out = token_scores_from_heads(per_head.subspan(0, idx(n * m)), n);
  if (settings_.heads == HeadAggregation::Mean)
    for (double& v : out) v /= static_cast<double>(n);
  return out;
}

void CacheManager::prefill(std::span<const double> head_mass) {
  const int64_t P = ctx_.prompt_len;
  if (static_cast<int64_t>(head_mass.size()) != ctx_.heads * P)
    bad("cache manager: prefill mass holds " + std::to_string(head_mass.size()) + " values for " +
        std::to_string(ctx_.heads) + " heads x " + std::to_string(P) + " tokens");
  x_ = P - 1;
  cache_.resize(idx(P));
  std::iota(cache_.begin(), cache_.end(), 0);
  std::vector<double> primary, secondary;
  prefill_scores(head_mass, primary, secondary);
  if (P > budget_) evict(P - budget_, primary, secondary);
  after_prefill();
}

std::span<const int64_t> CacheManager::begin_step(int64_t x, std::span<const double>) {
  if (x != x_ + 1 || x >= ctx_.positions)
    bad("cache manager: step at position " + std::to_string(x) + " after " + std::to_string(x_));
  x_ = x;
  cache_.push_back(x);
  return cache_;
}

std::vector<int64_t> CacheManager::end_step(std::span<const double> probs) {
  const int64_t m = static_cast<int64_t>(cache_.size());
  if (static_cast<int64_t>(probs.size()) != ctx_.heads * m)
    bad("cache manager: " + std::to_string(probs.size()) + " probabilities for " + std::to_string(ctx_.heads) +
        " heads x " + std::to_string(m) + " cached tokens");
  observe(probs);
  if (!ctx_.evict_while_decoding || m <= budget_) return {};
  std::vector<double> primary, secondary;
  scores(primary, secondary);
  return evict(m - budget_, primary, secondary);
}

std::vector<int64_t> CacheManager::evict(int64_t count, const std::vector<double>& primary,
                                         const std::vector<double>& secondary) {
  if (count <= 0) return {};
  std::vector<size_t> cand;  // indices into cache_ of the evictable entries
  for (size_t j = 0; j < cache_.size(); ++j)
    if (evictable(cache_[j])) cand.push_back(j);
  if (static_cast<int64_t>(cand.size()) < count)
    bad("cache manager: " + settings_.label + " must evict " + std::to_string(count) + " tokens at position " +
        std::to_string(x_) + " but only " + std::to_string(cand.size()) + " are evictable");
  // the tie rule: (score, secondary, position) ascending, a total order (cache_ is ascending in
  // position, so an index stands for its position): the `count` first are one set however they
  // are found. One at a time while decoding: a scan, not a sort.
  const auto before = [&](size_t a, size_t b) {
    if (primary[a] != primary[b]) return primary[a] < primary[b];
    if (!secondary.empty() && secondary[a] != secondary[b]) return secondary[a] < secondary[b];
    return a < b;
  };
  if (count == 1) {
    cand = {*std::min_element(cand.begin(), cand.end(), before)};
  } else {
    std::nth_element(cand.begin(), cand.begin() + (count - 1), cand.end(), before);
    cand.resize(idx(count));
    std::sort(cand.begin(), cand.end());
  }
  std::vector<int64_t> gone;
  for (size_t k = cand.size(); k-- > 0;) {
    gone.push_back(cache_[cand[k]]);
    cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(cand[k]));
  }
  std::reverse(gone.begin(), gone.end());
  return gone;
}

}  // namespace mla
