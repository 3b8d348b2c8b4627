// src/policies/chunkkv.cpp — `chunkkv`: ChunkKV (Liu et al., 2025, arXiv 2502.00299) as kvpress's
// ChunkKVPress: a wrapper that keeps whole chunks of consecutive tokens, ranked by its inner
// press's scores, instead of single tokens.
//
//   chunk(t)  = floor(t / L)                       (fixed chunks of L positions from position 0)
//   key(t)    = sum over the held evictable u with chunk(u) = chunk(t) of s(u), divided by
//               |chunk(t) ∩ [0, x]|                (kvpress: the mean score of the chunk)
//   s(u)      = the inner press's score (heads aggregated as the inner press does)
//   the lowest (key, the inner press's tie order) go first: the lowest chunks go whole, the boundary chunk keeps its
//   best tokens (kvpress keeps floor(chunks x (1 - ratio)) whole chunks, which may miss K; here
//   exactly K are kept). While decoding a drained chunk's sum falls, so its rest goes next.
//   Settings: press=snapkv (kvpress's evaluation registry), chunk=20 (chunk_length); the inner
//   press's protected set, observation window and features.
//
// Also the wrapper family that criticalkv and adakv derive from (Wrapper, policy_entry.hpp).
#include <algorithm>

#include "src/policies/policy_entry.hpp"

namespace mla::policies {

Wrapper::Wrapper(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
  if (settings_.inner.size() != 1) bad("--policy " + settings_.label + ": a wrapper needs one inner press (press=NAME)");
  inner_ = make_cache_manager(settings_.inner.front(), K, c);
}

void Wrapper::prefill_scores(std::span<const double> head_mass, std::vector<double>& primary, std::vector<double>& secondary) {
  inner_->x_ = x_;  // the inner press holds the prompt too (CacheManager::prefill)
  inner_->cache_ = cache_;
  inner_->prefill_scores(head_mass, primary, secondary);
}

std::span<const int64_t> Wrapper::begin_step(int64_t x, std::span<const double> full_probs) {
  CacheManager::begin_step(x, {});
  inner_->begin_step(x, full_probs);
  return cache_;
}

std::vector<int64_t> Wrapper::evict(int64_t count, const std::vector<double>& primary, const std::vector<double>& secondary) {
  if (count <= 0) return {};
  const std::vector<double> order = inner_order(primary, secondary);
  std::vector<double> key, key2;
  rank(count, primary, order, key, key2);
  std::vector<size_t> cand = evictable_entries();
  if (static_cast<int64_t>(cand.size()) < count)
    bad("cache manager: " + settings_.label + " must evict " + std::to_string(count) + " tokens at position " +
        std::to_string(x_) + " but only " + std::to_string(cand.size()) + " are evictable");
  // (key, key2, order) ascending: a total order (order is a permutation), so one set however found
  std::sort(cand.begin(), cand.end(), [&](size_t a, size_t b) {
    if (key[a] != key[b]) return key[a] < key[b];
    if (key2[a] != key2[b]) return key2[a] < key2[b];
    return order[a] < order[b];
  });
  cand.resize(idx(count));
  std::sort(cand.begin(), cand.end());
  std::vector<int64_t> gone;  // ascending
  for (size_t j : cand) gone.push_back(cache_[j]);
  for (size_t k = cand.size(); k-- > 0;) cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(cand[k]));
  // the inner press evicts the same tokens by its own evict: they score 0, every other 1
  std::vector<double> mark(inner_->cache_.size(), 1.0);
  for (size_t j = 0; j < mark.size(); ++j)
    if (std::binary_search(gone.begin(), gone.end(), inner_->cache_[j])) mark[j] = 0.0;
  inner_->evict(count, mark, {});
  if (inner_->cache_ != cache_) bad("cache manager: " + settings_.label + "'s inner press holds other tokens than it");
  return gone;
}

std::vector<double> Wrapper::inner_order(const std::vector<double>& primary, const std::vector<double>& secondary) const {
  std::vector<size_t> held = evictable_entries();
  std::sort(held.begin(), held.end(), [&](size_t a, size_t b) {  // CacheManager::evict's tie rule
    if (primary[a] != primary[b]) return primary[a] < primary[b];
    if (!secondary.empty() && secondary[a] != secondary[b]) return secondary[a] < secondary[b];
    return a < b;
  });
  std::vector<double> order(cache_.size(), 0.0);
  for (size_t r = 0; r < held.size(); ++r) order[held[r]] = static_cast<double>(r);
  return order;
}

std::vector<size_t> Wrapper::evictable_entries() const {
  std::vector<size_t> out;
  for (size_t j = 0; j < cache_.size(); ++j)
    if (evictable(cache_[j])) out.push_back(j);
  return out;
}

PolicyEntry wrapper_entry(const char* name, std::initializer_list<const char*> own) {
  PolicyEntry e;
  e.name = name;
  e.settings = base_settings(0, 1, HeadAggregation::Sum);
  PolicySettings press = snapkv_entry().settings;
  press.preset = press.label = "snapkv";
  e.settings.inner = {press};
  mirror_inner_press(e.settings);
  e.keys = {"press"};
  for (const char* k : own) e.keys.emplace_back(k);
  e.observation_window = [](const PolicySettings& s) { return policy_observation_window(s.inner.at(0)); };
  e.needs = [](const PolicySettings& s, FeatureNeeds& f) { add_feature_needs(s.inner.at(0), f); };
  return e;
}

namespace {

class ChunkKVCache final : public Wrapper {
 public:
  ChunkKVCache(PolicySettings s, int64_t K, const PolicyContext& c) : Wrapper(std::move(s), K, c) {}

 protected:
  void rank(int64_t, const std::vector<double>& primary, const std::vector<double>& order, std::vector<double>& key,
            std::vector<double>& key2) const override {
    const int64_t L = settings_.chunk;
    key.assign(cache_.size(), 0.0);
    key2 = order;  // within a chunk, the inner press's order
    const std::vector<size_t> held = evictable_entries();  // ascending: a chunk's entries are consecutive
    for (size_t a = 0; a < held.size();) {
      const int64_t c = cache_[held[a]] / L;
      size_t b = a;
      double sum = 0.0;  // in position order
      for (; b < held.size() && cache_[held[b]] / L == c; ++b) sum += primary[held[b]];
      const double span = static_cast<double>(std::min(L, x_ + 1 - c * L));  // the chunk's positions so far
      for (; a < b; ++a) key[held[a]] = sum / span;
    }
  }
};

}  // namespace

PolicyEntry chunkkv_entry() {
  PolicyEntry e = wrapper_entry("chunkkv", {"chunk"});
  e.make = make_manager<ChunkKVCache>;
  return e;
}

}  // namespace mla::policies
