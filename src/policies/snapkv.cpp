// src/policies/snapkv.cpp — `snapkv`: SnapKV (Li et al., 2024), as its
// SnapKVCluster and kvpress's SnapKVPress define it, extended to decode time.
//
//   sum[h, t]  = sum over the last w queries q that held t of p_q[h, t]   (prompt rows first, then decode rows)
//   score(t)   = heads( pool(sum[h, .])(t) ) over positions t <= x - w    (the window: kept, not pooled)
//   secondary  = heads( sum[h, t] )                                        (the tie rule: a flat pooled run keeps its peak)
//   pool       = avgN (zero padding counted, as torch's avg_pool1d) or maxN, N odd and centred
//   Settings: window 64, pool avg5 (SnapKVCluster's defaults); heads=mean (kvpress); the window
//   protected. snapkv-maxpool (snapkv_maxpool.cpp) is SnapKV at other settings.
//
// Also the sliding window of queries that pyramidkv and scissorhands derive from
// (WindowAttention, policy_entry.hpp).
#include <algorithm>
#include <limits>
#include <numeric>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {

WindowAttention::WindowAttention(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
  sum_.assign(idx(ctx_.heads * ctx_.positions), 0.0);
}

int64_t window_observation(const PolicySettings& s) { return s.window; }

void WindowAttention::observe_prompt_query(int64_t q, std::span<const double> probs) {
  if (q < ctx_.prompt_len - settings_.window || q >= ctx_.prompt_len) return;
  if (static_cast<int64_t>(probs.size()) != ctx_.heads * (q + 1))
    bad("cache manager: prompt query " + std::to_string(q) + " has " + std::to_string(probs.size()) + " probabilities");
  Query e;
  e.positions.resize(idx(q + 1));
  std::iota(e.positions.begin(), e.positions.end(), 0);
  e.view = probs;
  e.seen = q + 1;
  add(e, +1.0);
  window_.push_back(std::move(e));
}

void WindowAttention::after_prefill() {  // the prompt queries' views become copies of what is still held
  for (Query& e : window_) {
    Query kept;
    kept.seen = e.seen;
    const int64_t m = static_cast<int64_t>(e.positions.size());
    std::vector<int64_t> cols;
    for (int64_t j = 0; j < m; ++j)
      if (held(e.positions[idx(j)])) cols.push_back(j);
    const int64_t k = static_cast<int64_t>(cols.size());
    kept.probs.resize(idx(ctx_.heads * k));
    for (int64_t c = 0; c < k; ++c) kept.positions.push_back(e.positions[idx(cols[idx(c)])]);
    for (int64_t h = 0; h < ctx_.heads; ++h)
      for (int64_t c = 0; c < k; ++c) kept.probs[idx(h * k + c)] = e.view[idx(h * m + cols[idx(c)])];
    e = std::move(kept);
  }
}

void WindowAttention::observe(std::span<const double> p) {
  Query e;
  e.positions.assign(cache_.begin(), cache_.end());
  e.probs.assign(p.begin(), p.end());
  e.seen = static_cast<int64_t>(cache_.size());
  add(e, +1.0);
  window_.push_back(std::move(e));
  if (static_cast<int64_t>(window_.size()) > settings_.window) {  // the oldest query leaves
    add(window_.front(), -1.0);
    window_.erase(window_.begin());
  }
}

std::vector<int64_t> WindowAttention::evict(int64_t count, const std::vector<double>& primary,
                                            const std::vector<double>& secondary) {
  std::vector<int64_t> gone = CacheManager::evict(count, primary, secondary);
  for (int64_t t : gone)  // nothing attends to an evicted token any more
    for (int64_t h = 0; h < ctx_.heads; ++h) sum_[idx(h * ctx_.positions + t)] = 0.0;
  return gone;
}

bool WindowAttention::held(int64_t t) const { return std::binary_search(cache_.begin(), cache_.end(), t); }

void WindowAttention::add(const Query& e, double sign) {
  const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(e.positions.size());
  for (int64_t j = 0; j < m; ++j) {
    const int64_t t = e.positions[idx(j)];
    if (sign < 0 && !held(t)) continue;
    for (int64_t h = 0; h < n; ++h) sum_[idx(h * T + t)] += sign * value(e, h * m + j);
  }
}

void SnapKVCache::score(std::vector<double>& primary, std::vector<double>& secondary) const {
  const int64_t m = static_cast<int64_t>(cache_.size());
  secondary = aggregate(at_cache(sum_), m);
  if (settings_.pool == Pooling::None || settings_.pool_width == 1) {
    primary = secondary;
    secondary.clear();
    return;
  }
  primary = aggregate(pooled(), m);
}

void SnapKVCache::head_scores(std::vector<double>& per_head) const {
  per_head = settings_.pool == Pooling::None || settings_.pool_width == 1 ? at_cache(sum_) : pooled();
}

std::vector<double> SnapKVCache::pooled() const {
  const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(cache_.size());
  const int64_t half = settings_.pool_width / 2, last = x_ - settings_.window;  // pooled range [0, last]
  std::vector<double> out(idx(n * m), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t t = cache_[idx(j)];
      if (t > last) continue;  // the window: not evictable, not pooled
      const int64_t lo = std::max<int64_t>(0, t - half), hi = std::min(last, t + half);
      double acc = settings_.pool == Pooling::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t u = lo; u <= hi; ++u) {
        const double v = sum_[idx(h * T + u)];
        acc = settings_.pool == Pooling::Max ? std::max(acc, v) : acc + v;
      }
      // avg: the padding counts as zeros, as torch's avg_pool1d (count_include_pad) in SnapKV and kvpress
      out[idx(h * m + j)] = settings_.pool == Pooling::Max ? acc : acc / static_cast<double>(settings_.pool_width);
    }
  return out;
}

PolicyEntry snapkv_entry() {
  PolicyEntry e;
  e.name = "snapkv";
  e.settings = base_settings(0, 1, HeadAggregation::Mean);
  e.settings.window = 64;
  e.settings.pool = Pooling::Avg;
  e.settings.pool_width = 5;
  e.keys = {"sinks", "window", "pool", "heads"};
  e.observation_window = window_observation;
  e.has_window = true;
  e.window_is_recent = true;
  e.scorer = true;
  e.make = make_manager<SnapKVCache>;
  return e;
}

}  // namespace mla::policies
