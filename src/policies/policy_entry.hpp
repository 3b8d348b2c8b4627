// src/policies/policy_entry.hpp — what the policy files share (private to src/policies):
// the registry's entry type and the three score families that several policies derive from.
//
// Adding a policy: one file `NAME.cpp` that opens with its score equation and source and defines
// its class and `PolicyEntry NAME_entry()`, and one line `MLA_POLICY(NAME)` in registry.def (which
// both registry.cpp and meson.build read). What decode and eval ask of a policy (the full cache?
// a budget per layer? how many prompt queries? its full attention?) is answered by its entry.
//
// Shape legend: n heads, P prompt rows, T positions, K budget, m = |cache|, w window.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "mla/policy.hpp"

namespace mla::policies {

inline size_t idx(int64_t i) { return static_cast<size_t>(i); }
[[noreturn]] void bad(const std::string& what);  // Error(InvalidArgument)

using MakeManager = std::unique_ptr<CacheManager> (*)(const PolicySettings& s, int64_t budget, const PolicyContext& ctx);
template <class Manager>
std::unique_ptr<CacheManager> make_manager(const PolicySettings& s, int64_t budget, const PolicyContext& ctx) {
  return std::make_unique<Manager>(s, budget, ctx);
}

// One preset: its name, its paper's settings, the settings a user may change, and how its
// manager is made. Several presets may be settings of one policy (snapkv, snapkv-maxpool).
struct PolicyEntry {
  const char* name = "";            // the preset: NAME of its registry line, '_' written '-'
  const char* kind = nullptr;       // the policy it is a setting of (null: itself), policy_kind_name
  PolicySettings settings;          // the paper's defaults
  std::vector<std::string> keys;    // the `key=value` settings it accepts
  MakeManager make = nullptr;
  // the prompt queries it reads before the cut (null: none)
  int64_t (*observation_window)(const PolicySettings&) = nullptr;
  bool has_window = false;          // a `window` setting, checked >= 1
  bool window_is_recent = false;    // its window is what it protects (snapkv, pyramidkv): recent = window
  bool protects_nothing = false;    // full, oracle: no sinks or recent window
  bool full_cache = false;          // full: evicts nothing; the reference, computed once (not a run)
  bool needs_full_attention = false;  // oracle: begin_step reads the query's attention over every token
  // it evicts the lowest of scores() and has head_scores(): a wrapper's inner press may be it (the
  // choices of settings.cpp's `press` row are these presets)
  bool scorer = false;
  void (*needs)(const PolicySettings&, FeatureNeeds&) = nullptr;  // the token features it reads
  // its budget at `layer` of `num_layers` when the mean over layers is K (null: K at every layer;
  // set: the budget is checked per layer, policy_budget_depends_on_layer)
  int64_t (*layer_budget)(const PolicySettings&, int64_t K, int64_t layer, int64_t num_layers, int64_t P) = nullptr;
};

// A preset's settings from the three settings every policy has.
PolicySettings base_settings(int64_t sinks, int64_t recent, HeadAggregation heads);

// ---- accumulated attention (h2o.cpp): h2o, h2o-normalized, value-aware --------------------------
// mass_[h, t] = prefill mass * weight(h, t) + sum over the decode queries that held t of
// p[h, t] * weight(h, t); score = normalise(heads(mass)).
class AccumulatedAttention : public CacheManager {
 protected:
  AccumulatedAttention(PolicySettings s, int64_t K, const PolicyContext& c);
  void prefill_scores(std::span<const double> head_mass, std::vector<double>& primary, std::vector<double>&) override;
  void observe(std::span<const double> p) override;
  void scores(std::vector<double>& primary, std::vector<double>&) override;
  virtual double weight(int64_t h, int64_t t) const { (void)h; (void)t; return 1.0; }
  virtual void normalise(std::vector<double>& primary) const { (void)primary; }
  void head_scores(std::vector<double>& per_head) const override;  // mass per head, each head normalised

 private:
  void score(std::vector<double>& primary) const;
  std::vector<double> mass_;  // [n, T]
};

// ---- the last w queries' attention (snapkv.cpp): snapkv, pyramidkv, scissorhands ----------------
// A sliding window of the last w queries (prompt rows first, then decode rows). Per head and
// token, sum_[h, t] = sum over the window's queries that held t of value(p[h, t]), the entries
// of tokens not held zero; score() turns sum_ into the scores.
class WindowAttention : public CacheManager {
 public:
  // Keeps a view of probs until prefill() (the caller keeps them alive until then).
  void observe_prompt_query(int64_t q, std::span<const double> probs) override;

 protected:
  struct Query {
    std::vector<int64_t> positions;  // [m] the tokens it attended over, ascending
    std::vector<double> probs;       // [n, m] its attention (owned), or
    std::span<const double> view;    //        the caller's (a prompt query until prefill())
    int64_t seen = 0;                // tokens it attended over when it ran (scissorhands' 1/m)
    double p(int64_t i) const { return view.empty() ? probs[idx(i)] : view[idx(i)]; }
  };
  WindowAttention(PolicySettings s, int64_t K, const PolicyContext& c);
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>& secondary) override {
    score(primary, secondary);
  }
  void scores(std::vector<double>& primary, std::vector<double>& secondary) override { score(primary, secondary); }
  void after_prefill() override;
  void observe(std::span<const double> p) override;
  std::vector<int64_t> evict(int64_t count, const std::vector<double>& primary, const std::vector<double>& secondary) override;
  virtual double value(const Query& e, int64_t i) const = 0;  // the term query e adds for its entry i
  virtual void score(std::vector<double>& primary, std::vector<double>& secondary) const = 0;
  std::vector<double> sum_;  // [n, T]

 private:
  bool held(int64_t t) const;
  void add(const Query& e, double sign);  // +1: a query joins (all its tokens held); -1: it leaves
  std::vector<Query> window_;             // the last w queries, oldest first
};
int64_t window_observation(const PolicySettings& s);  // settings.window
PolicyEntry snapkv_entry();  // snapkv-maxpool and pyramidkv start from it

// SnapKV's score (snapkv.cpp), which PyramidKV shares: primary = heads(pool(sum)) over positions
// <= x - w (the window itself is neither pooled nor evictable), secondary = heads(sum).
class SnapKVCache : public WindowAttention {
 public:
  SnapKVCache(PolicySettings s, int64_t K, const PolicyContext& c) : WindowAttention(std::move(s), K, c) {}

 protected:
  double value(const Query& e, int64_t i) const override { return e.p(i); }
  void score(std::vector<double>& primary, std::vector<double>& secondary) const override;
  void head_scores(std::vector<double>& per_head) const override;  // [n, m] pool(sum), or sum unpooled

 private:
  std::vector<double> pooled() const;  // [n, m] pool(sum[h, .]) at the cache, 0 in the window
};

// ---- static per-token scores (knorm.cpp): knorm, keydiff, expected-attention ---------------------
// score = heads(per_head(h, t)) at the tokens the cache holds. The features are read when scored:
// a caller may write a token's features when it arrives (eval's token-by-token check does).
class StaticScore : public CacheManager {
 protected:
  StaticScore(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override { score(primary); }
  void scores(std::vector<double>& primary, std::vector<double>&) override { score(primary); }
  virtual double per_head(size_t at) const = 0;  // at = h * T + position
  void head_scores(std::vector<double>& per_head) const override;  // [n, m]
  // Error(InvalidArgument) unless every feature holds n * T values: "<preset> needs <what> of T tokens"
  void require(std::initializer_list<std::vector<double> TokenFeatures::*> features, const std::string& what) const;

 private:
  void score(std::vector<double>& primary) const;
};

// ---- wrappers (chunkkv.cpp): chunkkv, criticalkv, adakv --------------------------------------
// A wrapper re-ranks its inner press's scores. It holds the inner press's own manager (made by the
// registry at the same budget and context) and keeps it holding what the wrapper holds: the inner
// manager sees every prompt query and step, scores the cache, and evicts what the wrapper chose.
// The evictable set is the inner press's (the wrapper's settings mirror its sinks and recent).
class Wrapper : public CacheManager {
 public:
  void observe_prompt_query(int64_t q, std::span<const double> probs) override { inner_->observe_prompt_query(q, probs); }
  std::span<const int64_t> begin_step(int64_t x, std::span<const double> full_probs) override;

 protected:
  Wrapper(PolicySettings s, int64_t K, const PolicyContext& c);
  void prefill_scores(std::span<const double> head_mass, std::vector<double>& primary, std::vector<double>& secondary) override;
  void scores(std::vector<double>& primary, std::vector<double>& secondary) override { inner_->scores(primary, secondary); }
  void observe(std::span<const double> probs) override { inner_->observe(probs); }
  void after_prefill() override { inner_->after_prefill(); }
  std::vector<int64_t> evict(int64_t count, const std::vector<double>& primary, const std::vector<double>& secondary) final;
  // The wrapper's rule: from the inner press's scores of the cache [m] and `order` (inner_order),
  // the scores (key, key2) by which `count` of the evictable entries go: the lowest
  // (key, key2, order) first (the inner press's own tie order last, so that its secondary score
  // and the older-first rule still decide what the wrapper leaves tied).
  virtual void rank(int64_t count, const std::vector<double>& primary, const std::vector<double>& order,
                    std::vector<double>& key, std::vector<double>& key2) const = 0;
  // Each evictable entry's place in the inner press's tie order (score, secondary, position), 0 the
  // first to go; 0 for the others. [m]
  std::vector<double> inner_order(const std::vector<double>& primary, const std::vector<double>& secondary) const;
  void inner_head_scores(std::vector<double>& per_head) const { inner_->head_scores(per_head); }  // [n, m]
  std::vector<size_t> evictable_entries() const;  // indices into cache_, ascending

 private:
  std::unique_ptr<CacheManager> inner_;
};
// The entry every wrapper starts from: `name` wrapping `press` (kvpress's evaluation registry's
// inner press), settings {"press", own...}; observation window, feature needs and protected set
// its inner press's.
PolicyEntry wrapper_entry(const char* name, std::initializer_list<const char*> own);
void mirror_inner_press(PolicySettings& s);  // s's sinks, recent, recent_percent, window := its inner press's

}  // namespace mla::policies
