// src/decode/policies.cpp — the eviction policies (include/mla/policy.hpp), each in one class:
// its prefill score, what it learns from each step's attention, and its decode score.
// docs/decode.md §2 states every definition with its source; tests/unit/test_policies.cpp
// works each one out by hand on 6 tokens.
//
// Shared by every policy (CacheManager):
//   prefill   cache = 0..P-1; if P > K: evict the P - K lowest-scored evictable tokens
//   step x    cache += x (begin_step); the attention is observed (end_step); then while
//             |cache| > K the lowest-scored evictable token goes
//   evictable = not a sink (position >= sinks) and not in the recent window (position <= x - recent)
//   tie rule  lowest (score, secondary score, position) goes first: the newer token stays
//
// Shape legend: n heads, P prompt rows, T positions, K budget, m = |cache|, w window.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "mla/error.hpp"
#include "mla/h2o.hpp"
#include "mla/policy.hpp"
#include "mla/random.hpp"

namespace mla {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

[[noreturn]] void bad(const std::string& what) { fail(ErrorKind::InvalidArgument, what); }

// Rng streams of the random policy (mla/random.hpp): prefill scores, decode picks.
constexpr uint64_t kRandomPrefillStream = 7001, kRandomDecodeStream = 7002;

// ---- settings ------------------------------------------------------------------------------

struct Preset {
  const char* name;
  PolicySettings settings;
};

PolicySettings make(PolicyKind kind, int64_t sinks, int64_t recent, HeadAggregation heads) {
  PolicySettings s;
  s.kind = kind;
  s.sinks = sinks;
  s.recent = recent;
  s.heads = heads;
  return s;
}

PolicySettings windowed(PolicyKind kind, int64_t window, Pooling pool, int64_t width) {
  PolicySettings s = make(kind, 0, 1, HeadAggregation::Mean);
  s.window = window;
  s.pool = pool;
  s.pool_width = width;
  return s;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = [] {
    std::vector<Preset> p;
    p.push_back({"full", make(PolicyKind::Full, 0, 1, HeadAggregation::Sum)});
    PolicySettings h2o = make(PolicyKind::H2O, 0, 1, HeadAggregation::Sum);
    h2o.recent_percent = 50;  // heavy_ratio = recent_ratio: half of the cache is the recent window
    p.push_back({"h2o", h2o});
    p.push_back({"h2o-normalized", make(PolicyKind::H2ONormalized, 0, 1, HeadAggregation::Mean)});
    p.push_back({"tova", make(PolicyKind::Tova, 0, 1, HeadAggregation::Mean)});
    p.push_back({"streaming", make(PolicyKind::Streaming, 4, 1, HeadAggregation::Sum)});
    p.push_back({"snapkv", windowed(PolicyKind::SnapKV, 64, Pooling::Avg, 5)});
    p.push_back({"snapkv-maxpool", windowed(PolicyKind::SnapKV, 32, Pooling::Max, 7)});
    p.push_back({"pyramidkv", windowed(PolicyKind::PyramidKV, 64, Pooling::Avg, 5)});
    p.push_back({"knorm", make(PolicyKind::Knorm, 0, 1, HeadAggregation::Mean)});
    p.push_back({"expected-attention", make(PolicyKind::ExpectedAttention, 4, 1, HeadAggregation::Mean)});
    PolicySettings sh = make(PolicyKind::Scissorhands, 0, 32, HeadAggregation::Sum);
    sh.window = 32;
    p.push_back({"scissorhands", sh});
    PolicySettings va = make(PolicyKind::ValueAware, 0, 1, HeadAggregation::Sum);
    va.recent_percent = 50;
    p.push_back({"value-aware", va});
    p.push_back({"random", make(PolicyKind::Random, 0, 1, HeadAggregation::Sum)});
    p.push_back({"oracle", make(PolicyKind::Oracle, 0, 0, HeadAggregation::Sum)});  // ranks every token
    for (Preset& q : p) {
      q.settings.preset = q.name;
      q.settings.label = q.name;
    }
    return p;
  }();
  return all;
}

bool uses_window(PolicyKind k) {
  return k == PolicyKind::SnapKV || k == PolicyKind::PyramidKV || k == PolicyKind::Scissorhands;
}
bool window_is_recent(PolicyKind k) { return k == PolicyKind::SnapKV || k == PolicyKind::PyramidKV; }

int64_t parse_int(std::string_view key, std::string_view v, int64_t lo) {
  int64_t out = 0;
  bool ok = !v.empty() && v.size() <= 18;  // <= kPolicySettingMax
  for (char c : v) {
    if (c < '0' || c > '9') ok = false;
    else out = out * 10 + (c - '0');
  }
  if (!ok || out < lo)
    bad("--policy: " + std::string(key) + "=" + std::string(v) + " is not an integer in [" + std::to_string(lo) + ", " +
        std::to_string(kPolicySettingMax) + "]");
  return out;
}

}  // namespace

const char* policy_kind_name(PolicyKind k) {
  switch (k) {
    case PolicyKind::Full: return "full";
    case PolicyKind::H2O: return "h2o";
    case PolicyKind::H2ONormalized: return "h2o-normalized";
    case PolicyKind::Tova: return "tova";
    case PolicyKind::Streaming: return "streaming";
    case PolicyKind::SnapKV: return "snapkv";
    case PolicyKind::PyramidKV: return "pyramidkv";
    case PolicyKind::Knorm: return "knorm";
    case PolicyKind::ExpectedAttention: return "expected-attention";
    case PolicyKind::Scissorhands: return "scissorhands";
    case PolicyKind::ValueAware: return "value-aware";
    case PolicyKind::Random: return "random";
    case PolicyKind::Oracle: return "oracle";
  }
  return "unknown";
}

const char* head_aggregation_name(HeadAggregation a) {
  return a == HeadAggregation::Sum ? "sum" : a == HeadAggregation::Max ? "max" : "mean";
}

const std::vector<std::string>& policy_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Preset& p : presets()) v.push_back(p.name);
    return v;
  }();
  return names;
}

PolicySettings policy_preset(std::string_view name) {
  std::string known;
  for (const Preset& p : presets()) {
    if (name == p.name) return p.settings;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  bad("unknown policy '" + std::string(name) + "' (known: " + known + ", all)");
}

std::vector<std::string> policy_setting_keys(PolicyKind k) {
  switch (k) {
    case PolicyKind::Full: return {};
    case PolicyKind::Oracle: return {"heads"};
    case PolicyKind::Streaming: return {"sinks"};
    case PolicyKind::SnapKV: return {"sinks", "window", "pool", "heads"};
    case PolicyKind::PyramidKV: return {"sinks", "window", "pool", "heads", "beta"};
    case PolicyKind::Scissorhands: return {"sinks", "recent", "window", "heads"};
    case PolicyKind::ExpectedAttention: return {"sinks", "recent", "heads", "future", "vnorm"};
    case PolicyKind::Random: return {"sinks", "recent", "seed"};
    case PolicyKind::H2O:
    case PolicyKind::H2ONormalized:
    case PolicyKind::Tova:
    case PolicyKind::Knorm:
    case PolicyKind::ValueAware: return {"sinks", "recent", "heads"};
  }
  return {};
}

void apply_policy_setting(PolicySettings& s, std::string_view key, std::string_view value) {
  const std::vector<std::string> keys = policy_setting_keys(s.kind);
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    bad("--policy: '" + std::string(key) + "' is not a setting of " + s.preset + " (its settings: " +
        (list.empty() ? "none" : list) + ")");
  }
  const std::string k(key), v(value);
  // one value per key: h2o:sinks=4,sinks=8 is refused, as h2o,h2o is (the label holds what was set)
  if (const std::string set = s.label.substr(std::min(s.label.size(), s.preset.size()));
      set.find(":" + k + "=") != std::string::npos || set.find("," + k + "=") != std::string::npos)
    bad("--policy: '" + k + "' given twice for " + s.preset + " (" + s.label + "," + k + "=" + v + ")");
  if (k == "sinks") {
    s.sinks = parse_int(k, v, 0);
  } else if (k == "recent") {
    if (!v.empty() && v.back() == '%') {
      s.recent_percent = parse_int(k, std::string_view(v).substr(0, v.size() - 1), 1);
      if (s.recent_percent > 99) bad("--policy: recent=" + v + " must be below 100%");
    } else {
      s.recent = parse_int(k, v, 1);
      s.recent_percent = 0;
    }
  } else if (k == "heads") {
    if (v == "sum") s.heads = HeadAggregation::Sum;
    else if (v == "max") s.heads = HeadAggregation::Max;
    else if (v == "mean") s.heads = HeadAggregation::Mean;
    else bad("--policy: heads=" + v + " is not sum, max or mean");
  } else if (k == "window") {
    s.window = parse_int(k, v, 1);
  } else if (k == "pool") {
    if (v == "none") {
      s.pool = Pooling::None;
      s.pool_width = 1;
    } else if (v.rfind("max", 0) == 0 || v.rfind("avg", 0) == 0) {
      s.pool = v[0] == 'm' ? Pooling::Max : Pooling::Avg;
      s.pool_width = parse_int(k, std::string_view(v).substr(3), 1);
      if (s.pool_width % 2 == 0) bad("--policy: pool=" + v + ": the pooling width must be odd (centred)");
    } else {
      bad("--policy: pool=" + v + " is not none, maxN or avgN (N odd, e.g. avg5)");
    }
  } else if (k == "future") {
    s.future = parse_int(k, v, 1);
  } else if (k == "vnorm") {
    if (v != "0" && v != "1") bad("--policy: vnorm=" + v + " is not 0 or 1");
    s.vnorm = v == "1";
  } else if (k == "beta") {
    s.beta = parse_int(k, v, 1);
  } else if (k == "seed") {
    s.seed = static_cast<uint64_t>(parse_int(k, v, 0));
  }
  s.label += (s.label == s.preset ? ":" : ",") + k + "=" + v;
}

std::vector<PolicySettings> parse_policy_list(std::string_view list) {
  std::vector<PolicySettings> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string_view item = list.substr(begin, end - begin);
    if (item.empty()) bad("--policy: empty item in '" + std::string(list) + "'");
    const size_t colon = item.find(':'), eq = item.find('=');
    if (eq != std::string_view::npos && (colon == std::string_view::npos || colon > eq)) {  // key=value of the last policy
      if (out.empty()) bad("--policy: '" + std::string(item) + "' comes before any policy name");
      apply_policy_setting(out.back(), item.substr(0, eq), item.substr(eq + 1));
    } else {
      const std::string_view name = item.substr(0, colon);
      if (name == "all") {
        if (colon != std::string_view::npos) bad("--policy: 'all' takes no settings");
        for (const Preset& p : presets()) out.push_back(p.settings);
      } else {
        out.push_back(policy_preset(name));
        if (colon != std::string_view::npos) {
          const std::string_view kv = item.substr(colon + 1);
          const size_t e = kv.find('=');
          if (e == std::string_view::npos) bad("--policy: '" + std::string(item) + "': expected name:key=value");
          apply_policy_setting(out.back(), kv.substr(0, e), kv.substr(e + 1));
        }
      }
    }
    begin = end + 1;
  }
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (out[i].label == out[j].label) bad("--policy: '" + out[i].label + "' given twice");
  return out;
}

int64_t recent_tokens(const PolicySettings& s, int64_t K) {
  if (window_is_recent(s.kind)) return s.window;
  // floor(K * pct / 100) without the product (K may be near 2^63): K = 100a + b
  if (s.recent_percent > 0) return std::max<int64_t>(1, K / 100 * s.recent_percent + K % 100 * s.recent_percent / 100);
  return s.recent;
}

void check_budgets_and_policies(const std::vector<int64_t>& budgets, const std::vector<PolicySettings>& policies) {
  if (budgets.empty()) bad("--cache-budget: no budget given");
  for (size_t i = 0; i < budgets.size(); ++i) {
    if (budgets[i] < 1) bad("--cache-budget " + std::to_string(budgets[i]) + " must be >= 1");
    if (i > 0 && budgets[i] <= budgets[i - 1])
      bad("--cache-budget: budgets must be strictly increasing (" + std::to_string(budgets[i - 1]) + " then " +
          std::to_string(budgets[i]) + ")");
  }
  if (policies.empty()) bad("--policy: no policy given");
  for (size_t i = 0; i < policies.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (policies[i].label == policies[j].label) bad("--policy: '" + policies[i].label + "' given twice");
}

int64_t protected_tokens(const PolicySettings& s, int64_t K) {
  if (s.kind == PolicyKind::Full || s.kind == PolicyKind::Oracle) return 0;
  int64_t p = 0;  // sinks + recent, saturated at 2^63 - 1 (flags near 2^63 never wrap into a pass)
  if (__builtin_add_overflow(s.sinks, recent_tokens(s, K), &p)) return std::numeric_limits<int64_t>::max();
  return p;
}

int64_t pyramid_budget(int64_t layer, int64_t num_layers, int64_t K, int64_t window, int64_t beta, int64_t P) {
  if (num_layers < 1 || layer < 0 || layer >= num_layers || K < 1 || window < 0 || beta < 1)
    bad("pyramid_budget: layer " + std::to_string(layer) + " of " + std::to_string(num_layers) + ", budget " +
        std::to_string(K) + ", window " + std::to_string(window) + ", beta " + std::to_string(beta) + " out of range");
  if (num_layers == 1) return K;
  const double k = static_cast<double>(K), w = static_cast<double>(window), p = static_cast<double>(P);
  double min_num = k / static_cast<double>(beta), max_num = 2.0 * k - min_num;
  if (max_num >= p - w) {
    max_num = p - w;
    min_num = 2.0 * k - max_num;
  }
  if (!(p >= max_num && max_num >= min_num && min_num >= w)) return K;  // infeasible: SnapKV's budget
  const double steps = (max_num - min_num) / static_cast<double>(num_layers - 1);
  return static_cast<int64_t>(std::nearbyint(max_num - static_cast<double>(layer) * steps));
}

FeatureNeeds feature_needs(const std::vector<PolicySettings>& policies) {
  FeatureNeeds f;
  bool ea = false;
  for (const PolicySettings& s : policies) {
    if (s.kind == PolicyKind::Knorm) f.key_norm = true;
    if (s.kind == PolicyKind::ValueAware) f.output_norm = true;
    if (s.kind == PolicyKind::ExpectedAttention) {
      if (ea && (s.sinks != f.expected_sinks || s.future != f.expected_future))
        bad("--policy: expected-attention settings with different sinks or future in one run are not supported");
      ea = true;
      f.expected_attention = true;
      f.expected_sinks = s.sinks;
      f.expected_future = s.future;
      if (s.vnorm) f.value_norm = true;
    }
  }
  return f;
}

// ---- the manager ------------------------------------------------------------------------------

CacheManager::CacheManager(PolicySettings s, int64_t budget, const PolicyContext& ctx)
    : settings_(std::move(s)), budget_(budget), ctx_(ctx), protect_recent_(recent_tokens(settings_, budget)) {
  if (ctx_.heads < 1 || ctx_.prompt_len < 1 || ctx_.positions < ctx_.prompt_len)
    bad("cache manager: " + std::to_string(ctx_.heads) + " heads, prompt " + std::to_string(ctx_.prompt_len) +
        ", positions " + std::to_string(ctx_.positions));
  if (budget_ <= protected_tokens(settings_, budget_))
    bad("--cache-budget " + std::to_string(budget_) + " must be > the " + std::to_string(protected_tokens(settings_, budget_)) +
        " tokens " + settings_.label + " never evicts (sinks " + std::to_string(settings_.sinks) +
        (window_is_recent(settings_.kind) ? " + observation window " : " + recent ") +
        std::to_string(recent_tokens(settings_, budget_)) + ")");
}

void CacheManager::observe_prompt_query(int64_t, std::span<const double>) {}

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
  std::vector<size_t> cand;  // indices into cache_ of the evictable entries
  for (size_t j = 0; j < cache_.size(); ++j)
    if (evictable(cache_[j])) cand.push_back(j);
  if (static_cast<int64_t>(cand.size()) < count)
    bad("cache manager: " + settings_.label + " must evict " + std::to_string(count) + " tokens at position " +
        std::to_string(x_) + " but only " + std::to_string(cand.size()) + " are evictable");
  // the tie rule: (score, secondary, position) ascending; cand is ascending in position
  std::stable_sort(cand.begin(), cand.end(), [&](size_t a, size_t b) {
    if (primary[a] != primary[b]) return primary[a] < primary[b];
    if (!secondary.empty() && secondary[a] != secondary[b]) return secondary[a] < secondary[b];
    return false;
  });
  cand.resize(idx(count));
  std::sort(cand.begin(), cand.end());
  std::vector<int64_t> gone;
  for (size_t k = cand.size(); k-- > 0;) {
    gone.push_back(cache_[cand[k]]);
    cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(cand[k]));
  }
  std::reverse(gone.begin(), gone.end());
  return gone;
}

namespace {

// ---- full: nothing evicted ----------------------------------------------------------------------
class FullCache final : public CacheManager {
 public:
  FullCache(PolicySettings s, const PolicyContext& c) : CacheManager(std::move(s), std::numeric_limits<int64_t>::max(), c) {}

 protected:
  void scores(std::vector<double>&, std::vector<double>&) override {}
  void prefill_scores(std::span<const double>, std::vector<double>&, std::vector<double>&) override {}
};

// ---- h2o, h2o-normalized, value-aware: accumulated attention --------------------------------
// mass_[h, t] = prefill mass + sum over the decode queries that held t of p[h, t]
// (value-aware: each term times output_norm[h, t]). Score = heads(mass) [/ (x - t + 1)].
class AccumulatedCache final : public CacheManager {
 public:
  AccumulatedCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
    mass_.assign(idx(ctx_.heads * ctx_.positions), 0.0);
    if (settings_.kind == PolicyKind::ValueAware) {
      if (!ctx_.features || ctx_.features->output_norm.size() != idx(ctx_.heads * ctx_.positions))
        bad("cache manager: value-aware needs the output norms of " + std::to_string(ctx_.positions) + " tokens");
      weight_ = ctx_.features->output_norm.data();
    }
  }

 protected:
  void prefill_scores(std::span<const double> head_mass, std::vector<double>& primary, std::vector<double>&) override {
    const int64_t n = ctx_.heads, P = ctx_.prompt_len, T = ctx_.positions;
    for (int64_t h = 0; h < n; ++h)
      for (int64_t t = 0; t < P; ++t) mass_[idx(h * T + t)] = head_mass[idx(h * P + t)] * w(h, t);
    score(primary);
  }
  void observe(std::span<const double> p) override {
    const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(cache_.size());
    for (int64_t h = 0; h < n; ++h)
      for (int64_t j = 0; j < m; ++j) mass_[idx(h * T + cache_[idx(j)])] += p[idx(h * m + j)] * w(h, cache_[idx(j)]);
  }
  void scores(std::vector<double>& primary, std::vector<double>&) override { score(primary); }

 private:
  double w(int64_t h, int64_t t) const { return weight_ ? weight_[idx(h * ctx_.positions + t)] : 1.0; }
  void score(std::vector<double>& primary) const {
    const int64_t m = static_cast<int64_t>(cache_.size());
    primary = aggregate(at_cache(mass_), m);
    if (settings_.kind == PolicyKind::H2ONormalized)  // the queries that could see t: t .. x
      for (int64_t j = 0; j < m; ++j) primary[idx(j)] /= static_cast<double>(x_ - cache_[idx(j)] + 1);
  }
  std::vector<double> mass_;  // [n, T]
  const double* weight_ = nullptr;
};

// ---- tova: the latest query's attention -------------------------------------------------------
class TovaCache final : public CacheManager {
 public:
  TovaCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}
  int64_t observation_window() const override { return 1; }
  void observe_prompt_query(int64_t q, std::span<const double> probs) override {
    if (q == ctx_.prompt_len - 1) last_ = aggregate(probs, q + 1);
  }

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override {
    if (static_cast<int64_t>(last_.size()) != ctx_.prompt_len) bad("cache manager: tova needs the last prompt query's attention");
    primary = last_;
  }
  void observe(std::span<const double> p) override { last_ = aggregate(p, static_cast<int64_t>(cache_.size())); }
  void scores(std::vector<double>& primary, std::vector<double>&) override { primary = last_; }

 private:
  std::vector<double> last_;  // [m] heads(p) of the latest query over the cache
};

// ---- streaming: position --------------------------------------------------------------------
class StreamingCache final : public CacheManager {
 public:
  StreamingCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override {
    scores_by_position(primary);
  }
  void scores(std::vector<double>& primary, std::vector<double>&) override { scores_by_position(primary); }

 private:
  void scores_by_position(std::vector<double>& primary) const {
    primary.resize(cache_.size());
    for (size_t j = 0; j < cache_.size(); ++j) primary[j] = static_cast<double>(cache_[j]);
  }
};

// ---- static per-token scores: knorm, expected-attention ---------------------------------------
// knorm: heads(-key_norm); expected-attention: heads(expected_attention [* value_norm]). The
// features are read when scored, only at the tokens the cache holds: a caller may write a token's
// features when it arrives (eval's token-by-token check does).
class StaticCache final : public CacheManager {
 public:
  StaticCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
    const TokenFeatures* f = ctx_.features;
    const size_t size = idx(ctx_.heads * ctx_.positions);
    if (settings_.kind == PolicyKind::Knorm) {
      if (!f || f->key_norm.size() != size) bad("cache manager: knorm needs the key norms of " + std::to_string(ctx_.positions) + " tokens");
    } else {
      if (!f || f->expected_attention.size() != size || (settings_.vnorm && f->value_norm.size() != size))
        bad("cache manager: expected-attention needs its scores" + std::string(settings_.vnorm ? " and the value norms" : "") +
            " of " + std::to_string(ctx_.positions) + " tokens");
    }
  }

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override { score(primary); }
  void scores(std::vector<double>& primary, std::vector<double>&) override { score(primary); }

 private:
  // per head [n, m] at the cache's positions, then aggregated over heads
  void score(std::vector<double>& primary) const {
    const TokenFeatures& f = *ctx_.features;
    const size_t m = cache_.size();
    std::vector<double> per_head(idx(ctx_.heads) * m);
    for (int64_t h = 0; h < ctx_.heads; ++h)
      for (size_t j = 0; j < m; ++j) {
        const size_t i = idx(h * ctx_.positions + cache_[j]);
        per_head[idx(h) * m + j] = settings_.kind == PolicyKind::Knorm
                                       ? -f.key_norm[i]
                                       : f.expected_attention[i] * (settings_.vnorm ? f.value_norm[i] : 1.0);
      }
    primary = aggregate(per_head, static_cast<int64_t>(m));
  }
};

// ---- the last w queries' attention: snapkv, pyramidkv, scissorhands ------------------------------
// A sliding window of the last w queries (prompt rows first, then decode rows). Per head and
// token, sum_[h, t] = sum over the window's queries that held t of v(p[h, t]), v(p) = p
// (snapkv) or 1[p < 1/m] (scissorhands: the query, which saw m tokens, found t unimportant).
// The entries of tokens not held are zero.
class WindowCache final : public CacheManager {
 public:
  WindowCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
    sum_.assign(idx(ctx_.heads * ctx_.positions), 0.0);
  }
  int64_t observation_window() const override { return settings_.window; }
  // Keeps a view of probs until prefill() (the caller keeps them alive until then).
  void observe_prompt_query(int64_t q, std::span<const double> probs) override {
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

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>& secondary) override {
    score(primary, secondary);
  }
  void after_prefill() override {  // the prompt queries' views become copies of what is still held
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
  void observe(std::span<const double> p) override {
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
  void scores(std::vector<double>& primary, std::vector<double>& secondary) override { score(primary, secondary); }
  std::vector<int64_t> evict(int64_t count, const std::vector<double>& primary, const std::vector<double>& secondary) override {
    std::vector<int64_t> gone = CacheManager::evict(count, primary, secondary);
    for (int64_t t : gone)  // nothing attends to an evicted token any more
      for (int64_t h = 0; h < ctx_.heads; ++h) sum_[idx(h * ctx_.positions + t)] = 0.0;
    return gone;
  }

 private:
  struct Query {
    std::vector<int64_t> positions;  // [m] the tokens it attended over, ascending
    std::vector<double> probs;       // [n, m] its attention (owned), or
    std::span<const double> view;    //        the caller's (a prompt query until prefill())
    int64_t seen = 0;                // tokens it attended over when it ran (scissorhands' 1/m)
    double p(int64_t i) const { return view.empty() ? probs[idx(i)] : view[idx(i)]; }
  };
  bool held(int64_t t) const { return std::binary_search(cache_.begin(), cache_.end(), t); }
  double value(const Query& e, int64_t i) const {
    const double p = e.p(i);
    if (settings_.kind == PolicyKind::Scissorhands) return p < 1.0 / static_cast<double>(e.seen) ? 1.0 : 0.0;
    return p;
  }
  // sign +1: a query joins (all its tokens are held); -1: it leaves (only held tokens change).
  void add(const Query& e, double sign) {
    const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(e.positions.size());
    for (int64_t j = 0; j < m; ++j) {
      const int64_t t = e.positions[idx(j)];
      if (sign < 0 && !held(t)) continue;
      for (int64_t h = 0; h < n; ++h) sum_[idx(h * T + t)] += sign * value(e, h * m + j);
    }
  }
  // snapkv: primary = heads(pool(sum)) over positions <= x - w (the window itself is neither
  // pooled nor evictable), secondary = heads(sum); scissorhands: primary = -heads(count).
  void score(std::vector<double>& primary, std::vector<double>& secondary) const {
    const int64_t n = ctx_.heads, T = ctx_.positions, m = static_cast<int64_t>(cache_.size());
    const std::vector<double> raw = at_cache(sum_);
    if (settings_.kind == PolicyKind::Scissorhands) {
      primary = aggregate(raw, m);
      for (double& v : primary) v = -v;
      return;
    }
    secondary = aggregate(raw, m);
    if (settings_.pool == Pooling::None || settings_.pool_width == 1) {
      primary = secondary;
      secondary.clear();
      return;
    }
    const int64_t half = settings_.pool_width / 2, last = x_ - settings_.window;  // pooled range [0, last]
    std::vector<double> pooled(idx(n * m), 0.0);
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
        pooled[idx(h * m + j)] = settings_.pool == Pooling::Max ? acc : acc / static_cast<double>(settings_.pool_width);
      }
    primary = aggregate(pooled, m);
  }
  std::vector<double> sum_;      // [n, T]
  std::vector<Query> window_;    // the last w queries, oldest first
};

// ---- random -----------------------------------------------------------------------------------
// Prefill: uniform scores from Rng(seed, 7001); decode: a uniform pick among the evictable
// tokens (position order) from Rng(seed, 7002 + 16 K).
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

// ---- oracle: the K + 1 tokens the current query's full attention favours -------------------------
// Not a cache (it re-reads every token): the bound on mass_recall of any K + 1 tokens. Ties
// keep the newer. It holds its K best after the step.
class OracleCache final : public CacheManager {
 public:
  OracleCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {}
  bool needs_full_attention() const override { return true; }
  std::span<const int64_t> begin_step(int64_t x, std::span<const double> full) override {
    if (static_cast<int64_t>(full.size()) != ctx_.heads * (x + 1))
      bad("cache manager: oracle needs the full attention [n, x+1] at position " + std::to_string(x));
    CacheManager::begin_step(x, {});
    last_ = aggregate(full, x + 1);  // [x+1]
    if (!ctx_.evict_while_decoding) {  // prefill protocol: the K best prompt tokens, then every decoded one
      const int64_t P = ctx_.prompt_len;
      std::vector<int64_t> order(idx(P));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return last_[idx(a)] != last_[idx(b)] ? last_[idx(a)] > last_[idx(b)] : a > b;
      });
      order.resize(idx(std::min(budget_, P)));
      std::sort(order.begin(), order.end());
      for (int64_t t = P; t <= x; ++t) order.push_back(t);
      cache_ = std::move(order);
      return cache_;
    }
    std::vector<int64_t> order(idx(x + 1));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return last_[idx(a)] != last_[idx(b)] ? last_[idx(a)] > last_[idx(b)] : a > b;
    });
    order.resize(idx(std::min(budget_, x) + 1));
    std::sort(order.begin(), order.end());
    cache_ = std::move(order);
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

std::unique_ptr<CacheManager> make_cache_manager(const PolicySettings& s, int64_t K, const PolicyContext& c) {
  if (s.kind != PolicyKind::Full && K < 1) bad("--cache-budget " + std::to_string(K) + " must be >= 1");
  if (uses_window(s.kind) && s.window < 1) bad("--policy " + s.label + ": window must be >= 1");
  switch (s.kind) {
    case PolicyKind::Full: return std::make_unique<FullCache>(s, c);
    case PolicyKind::H2O:
    case PolicyKind::H2ONormalized:
    case PolicyKind::ValueAware: return std::make_unique<AccumulatedCache>(s, K, c);
    case PolicyKind::Tova: return std::make_unique<TovaCache>(s, K, c);
    case PolicyKind::Streaming: return std::make_unique<StreamingCache>(s, K, c);
    case PolicyKind::SnapKV:
    case PolicyKind::PyramidKV:
    case PolicyKind::Scissorhands: return std::make_unique<WindowCache>(s, K, c);
    case PolicyKind::Knorm:
    case PolicyKind::ExpectedAttention: return std::make_unique<StaticCache>(s, K, c);
    case PolicyKind::Random: return std::make_unique<RandomCache>(s, K, c);
    case PolicyKind::Oracle: return std::make_unique<OracleCache>(s, K, c);
  }
  bad("unknown policy kind");
}

}  // namespace mla
