// mla/policy.hpp — KV-cache eviction policies on one layer's MLA latent cache, independent of
// how the attention is computed (docs/decode.md §2 gives every definition and its source). One
// file per preset in src/policies/, each opening with its score equation, source and settings;
// src/policies/registry.def lists them, and everything asked of a policy is answered by its entry.
//
// One CacheManager per (policy, settings, budget) and layer. It is told what the attention
// did and answers which tokens the next query attends over:
//
//   auto m = make_cache_manager(settings, K, context);
//   for q in [P - m->observation_window(), P):        // the last prompt queries it looks at
//     m->observe_prompt_query(q, probs_q);            //   probs_q [n, q+1]: causal attention of row q
//   m->prefill(head_mass);                            // [n, P] mass per head -> cut to <= K tokens
//   for x = P, P+1, ...:                              // decode step (teacher-forced row x)
//     cache = m->begin_step(x, full_probs);           // held tokens + x, ascending (oracle: its pick;
//                                                     //   full_probs [n, x+1] only if needs_full_attention())
//     ... attention of query x over `cache` -> probs [n, |cache|] ...
//     m->end_step(probs);                             // evicts down to <= K; cache() = what is held
//
// The managers of one run share nothing mutable, so a policy's decisions are the same alone
// and next to others. Per-token quantities that do not depend on eviction (key and value
// norms, expected attention) come precomputed in TokenFeatures (token_features.cpp fills
// them from a layer's latent cache and weights; tests fill them by hand).
//
// Tie rule (every policy, prefill cut and decode): evict the lowest score; on equal scores the
// lower secondary score (the unpooled score of a pooled policy, the window mass of
// scissorhands); on equal both, the older token. So the newer token stays, and pooling never
// drops the peak of a flat run it made.
//
// Shape legend: n = num_attention_heads, P = prompt rows, T = P + N positions, K = budget,
//   m = |cache|. Probabilities are row-major with row h = head h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

namespace policies {
class Wrapper;  // src/policies/policy_entry.hpp: drives its inner press's manager
}

// How per-head scores become one score per token (the latent is shared by all heads, so a
// token is kept or evicted for every head at once): sum over heads (H2O, TOVA as MLA engines
// share one decision), max (a token one head needs is kept), mean (kvpress's group mean).
enum class HeadAggregation { Sum, Max, Mean };
enum class Pooling { None, Max, Avg };

const char* head_aggregation_name(HeadAggregation a);  // "sum" | "max" | "mean"

// One policy at its settings. Presets (policy_preset) hold each paper's defaults; a setting
// that is not used by the policy is ignored (parse_policy_list rejects it). The preset names the
// registry entry that answers every question below (Error(InvalidArgument) for an unknown one).
struct PolicySettings {
  std::string preset = "full";  // the preset it started from: "h2o", "snapkv-maxpool", ...
  std::string label;           // its name in outputs: the preset, then ":key=value,..." for every
                               // setting given on the command line
  int64_t sinks = 0;           // positions [0, sinks) never evicted
  int64_t recent = 1;          // the `recent` newest positions never evicted (the new token included);
  int64_t recent_percent = 0;  //   or, when > 0, max(1, floor(K * recent_percent / 100))
  HeadAggregation heads = HeadAggregation::Sum;
  int64_t window = 0;          // snapkv/pyramidkv: observation window (the newest `window`
                               //   positions vote and are kept); scissorhands: history window
  Pooling pool = Pooling::None;
  int64_t pool_width = 1;      // odd, centred
  int64_t future = 512;        // expected-attention: future positions whose RoPE is averaged
  bool vnorm = true;           // expected-attention: score times ||v_h,t||
  int64_t beta = 20;           // pyramidkv: the pyramid's steepness
  uint64_t seed = 0;           // random; leverage: its Gaussian sketch's seed
  int64_t sketch = 48;         // leverage: the Gaussian sketch's width (0: exact leverage)
  std::string cur = "kv_product";  // cur: key | value | kv_avg | kv_product
  int64_t local = 16;          // cur: the local normalisation's window (0: none)
  int64_t lag = 128;           // lagkv: the partition (lag) size
  // chunkkv, criticalkv, adakv (the wrappers): the one inner press whose scores they re-rank
  // (`press=NAME`, its own settings `press.KEY=VALUE`). The protected set is the inner press's:
  // sinks, recent, recent_percent and window above mirror it.
  std::vector<PolicySettings> inner;
  int64_t chunk = 20;          // chunkkv: chunk length
  int64_t first_percent = 50;  // criticalkv: first_stage_ratio, as a share of the kept tokens
  int64_t alpha_percent = 20;  // adakv: alpha_safeguard, as a share of the kept tokens
};

// The presets, in the order `--policy all` runs them (src/policies/registry.def):
//   full, h2o, h2o-normalized, tova, streaming, snapkv, snapkv-maxpool, pyramidkv, knorm,
//   expected-attention, scissorhands, value-aware, keydiff, leverage, cur, lagkv, chunkkv, criticalkv, adakv,
//   random, kvzip, oracle
const std::vector<std::string>& policy_preset_names();
// Error(InvalidArgument) naming the unknown policy and listing the presets.
PolicySettings policy_preset(std::string_view name);
// The policy a preset is a setting of, as reports name it: the preset itself, but "snapkv" for
// snapkv-maxpool.
const char* policy_kind_name(const PolicySettings& s);
// The settings `key=value` accepted by its policy (e.g. {"sinks", "recent", "heads"} for h2o).
std::vector<std::string> policy_setting_keys(const PolicySettings& s);
// The largest integer setting (18 digits): a sum of two settings never overflows 64 bits.
inline constexpr int64_t kPolicySettingMax = 999'999'999'999'999'999;
// expected-attention's `future`: its mean RoPE rotation costs O(future) (about 3 s at 10^7 on a
// 2-core Xeon), and 10^7 positions lie far beyond any model's context.
inline constexpr int64_t kPolicyFutureMax = 10'000'000;
// leverage's `sketch`: the sketched rows have rank <= r_kv + d_r (576 on DeepSeek-V3), so a wider
// sketch adds nothing; the features cost O(T (r_kv + d_r) k + P k^2 + k^3) per layer.
inline constexpr int64_t kPolicySketchMax = 1024;
// The domain of a setting, one row per form of its value (docs/decode.md §2.2's settings table):
// `form` is "N" (an integer in [lo, hi]), "N%" (a share of the budget, N in [lo, hi]),
// "avgN|maxN|none" (N odd in [lo, hi]) or a choice "a|b|c" (lo and hi unused). Every value is
// checked against it, by apply_policy_setting, and nowhere else.
struct PolicySettingDomain {
  const char* key;
  const char* form;
  int64_t lo = 0, hi = 0;
};
const std::vector<PolicySettingDomain>& policy_setting_domains();
// Applies one `key=value` (Error(InvalidArgument), one line, for an unknown key or a value
// outside its domain, policy_setting_domains) and appends it to the label.
void apply_policy_setting(PolicySettings& s, std::string_view key, std::string_view value);

// "h2o,tova:sinks=0,recent=1,snapkv:window=64,pool=avg5" -> settings. Items are separated by
// commas; an item `name` or `name:key=value` starts a policy, an item `key=value` sets the
// previous one. "all" = every preset. Two identical labels are an error.
std::vector<PolicySettings> parse_policy_list(std::string_view list);

// Error(InvalidArgument) for the runs' lists of decode and eval: no budget, a budget < 1,
// budgets not strictly increasing, no policy, two policies with the same label.
void check_budgets_and_policies(const std::vector<int64_t>& budgets, const std::vector<PolicySettings>& policies);

// The tokens a policy protects at budget K: sinks + recent (recent_tokens), or sinks + window.
int64_t recent_tokens(const PolicySettings& s, int64_t budget);
int64_t protected_tokens(const PolicySettings& s, int64_t budget);
bool policy_window_is_recent(const PolicySettings& s);  // snapkv, pyramidkv: the window is the recent set
                                                        // (a wrapper: its inner press's answer)
bool policy_protects_nothing(const PolicySettings& s);  // full, oracle
// full: nothing is evicted. It is the reference every run is measured against, computed once
// whatever the budgets, and not a run of its own.
bool policy_is_full_cache(const PolicySettings& s);
// pyramidkv: its budget differs by layer (layer_budget), so it is checked with the layer.
bool policy_budget_depends_on_layer(const PolicySettings& s);
// oracle: each decode step also needs the query's attention over every token (begin_step's full_probs).
bool policy_needs_full_attention(const PolicySettings& s);
// Error(InvalidArgument) unless `layer_budget` (K on most policies; pyramidkv's on this layer,
// asked as K) holds more than the tokens `s` never evicts.
void check_budget_holds(const PolicySettings& s, int64_t budget, int64_t layer_budget);

// The runs of decode and eval: every budget x every policy but the full cache, budget-major, in
// the order the policies were given; `policy` indexes that list.
struct PolicyRun {
  size_t policy = 0;
  int64_t budget = 0;
};
std::vector<PolicyRun> policy_runs(const std::vector<int64_t>& budgets, const std::vector<PolicySettings>& policies);
// The policies that run at every budget (all but the full cache).
int64_t evicting_policy_count(const std::vector<PolicySettings>& policies);

// The one observation-window rule: how many of the last prompt queries a policy reads before
// its prefill cut (tova 1; snapkv, pyramidkv, scissorhands their window; others 0). A run set
// holds min(P, the largest over its policies) prompt queries (held_prompt_queries).
int64_t policy_observation_window(const PolicySettings& s);
int64_t held_prompt_queries(const std::vector<PolicySettings>& policies, int64_t prompt_len);

// The one layer-budget rule: the budget of `layer` (of `num_layers`) when the mean over layers is
// K; K for every policy but pyramidkv, whose pyramid_budget is raised to one more than it
// protects where the pyramid's smallest budget would leave nothing evictable. decode (one layer)
// and eval (every layer) both use it.
int64_t layer_budget(const PolicySettings& s, int64_t budget, int64_t layer, int64_t num_layers, int64_t prompt_len);

// PyramidKV's budget of `layer` (of `num_layers`) when the mean budget over layers is K, as
// kvpress's PyramidKVPress.get_layer_budget computes it (window w, steepness beta, prompt P):
//   min = K / beta, max = 2K - min; if max >= P - w: max = P - w, min = 2K - max;
//   unless P >= max >= min >= w (else K, SnapKV's budget): round(max - layer (max - min) / (num_layers - 1)).
// One layer gives K. The budgets of all layers average K (before rounding).
int64_t pyramid_budget(int64_t layer, int64_t num_layers, int64_t budget, int64_t window, int64_t beta,
                       int64_t prompt_len);

// ---- what a policy may read besides the attention ------------------------------------------

// Per-token quantities that do not depend on eviction, [n, T] each (row h = head h), for the
// policies that need them (empty otherwise). token_features.cpp defines them on MLA:
//   key_norm[h, t]            ||[W_UK^h c_t | k_pe_t]||          knorm
//   value_norm[h, t]          ||W_UV^h c_t||                      expected-attention (vnorm)
//   output_norm[h, t]         ||W_O^h W_UV^h c_t||               value-aware
//   expected_attention[h, t]  kvpress's expected attention of head h on token t
//   key_diff[h, t]            -cos(k_h,t, a_h), a_h = mean_{t<P} k_h,t/||k_h,t||   keydiff
//   leverage[t]               [T] (one per latent row, no head): the z-scored leverage of the
//                             pre-RoPE latent row [c_t | k_pe_t] among the prompt's rows   leverage
//   lagkv[h, t]               LagKV's rank of t in its lag partition (scored against the next one)  lagkv
//   reconstruction[h, t]      max over KVzip's repeat rows of their attention on t < P (0 at
//                             t >= P): add_reconstruction_row; the caller runs the repeat    kvzip
struct TokenFeatures {
  int64_t heads = 0, tokens = 0;  // n, T
  std::vector<double> key_norm, value_norm, output_norm, expected_attention, key_diff, leverage, lagkv, reconstruction;
};
struct FeatureNeeds {
  bool key_norm = false, value_norm = false, output_norm = false, expected_attention = false, key_diff = false,
       leverage = false, lagkv = false;
  bool reconstruction = false;   // kvzip: the caller runs the context's repeat (reconstruction_chunks)
  int64_t expected_sinks = 0;    // expected-attention: prompt rows [0, sinks) left out of the query statistics
  int64_t expected_future = 0;   // expected-attention: future positions averaged
  int64_t leverage_sinks = 0;    // leverage: prompt rows [0, sinks) left out of its statistics
  int64_t leverage_sketch = 0;   // leverage: the sketch's width (0: exact)
  uint64_t leverage_seed = 0;    // leverage: the sketch's seed
  int64_t lagkv_sinks = 0;       // lagkv: the partitions start after the sinks
  int64_t lagkv_lag = 0;         // lagkv: the partition size
  bool any() const {
    return key_norm || value_norm || output_norm || expected_attention || key_diff || leverage || lagkv || reconstruction;
  }
  // how many of the [n, T] arrays above are read (0..8; leverage's [T] counted as one): what a memory
  // plan holds for them
  int64_t arrays() const {
    return int64_t{key_norm} + value_norm + output_norm + expected_attention + key_diff + leverage + lagkv + reconstruction;
  }
};

// ---- KVzip's context reconstruction (src/policies/kvzip.cpp) ---------------------------------
// After the context [0, P), the model is asked to repeat it, chunk by chunk (kvpress's
// KVzipPress.prepare: chunks of 2048 tokens). The repeat of a chunk runs at positions P, P+1, ...
// over the whole context (the model's own attention), and kvzip's score of a context token is the
// largest attention any repeat row gives it, in a softmax over the sinks, the chunk and the
// repeat's own rows up to that row (kvpress's score_kvzip). The repeat's text (kvpress's prompts,
// tokenized by the caller):
inline constexpr const char* kReconstructionFirst = "\n\nRepeat the previous context exactly.";
inline constexpr const char* kReconstructionLater = "\n\nRepeat the part of the previous context exactly, starting with";
inline constexpr const char* kReconstructionSuffix = "\n";  // kvpress's suffix on a model without a chat template
inline constexpr int64_t kReconstructionChunk = 2048;       // context tokens per chunk
inline constexpr int64_t kReconstructionPostfix = 8;        // a later chunk's prompt ends with the previous chunk's last 8 tokens
inline constexpr int64_t kReconstructionSinks = 4;          // a later chunk's softmax also reads positions [0, 4)
// The repeat's text in the model's ids (empty: the repeat is the context's rows alone, as decode
// runs it on one layer's hidden states, which hold no row of that text).
struct ReconstructionText {
  std::vector<int64_t> first, later, suffix;  // kReconstructionFirst, kReconstructionLater, kReconstructionSuffix
};
// Its length's bound before the text is tokenized (memory and cost plans): one id per byte.
ReconstructionText reconstruction_text_bound();
struct ReconstructionChunk {
  int64_t begin = 0, end = 0;   // the context positions it scores
  int64_t sinks = 0;            // its softmax also reads positions [0, sinks)
  // its rows in order, at positions P, P+1, ...: >= 0 a copy of context row/token t, < 0 the text
  // token id -(v + 1): prompt text [+ the previous chunk's last 8 tokens], suffix text, the chunk
  std::vector<int64_t> rows;
};
std::vector<ReconstructionChunk> reconstruction_chunks(int64_t prompt_len, const ReconstructionText& text,
                                                       int64_t chunk = kReconstructionChunk);
int64_t reconstruction_rows(const std::vector<ReconstructionChunk>& chunks);  // the largest chunk's row count
int64_t reconstruction_total_rows(const std::vector<ReconstructionChunk>& chunks);  // every chunk's rows
// The keys repeat row i of chunk c scores over: [0, sinks) u [begin, end) u [P, P + i], ascending.
std::vector<int64_t> reconstruction_keys(const ReconstructionChunk& c, int64_t prompt_len, int64_t i);
// Adds one repeat row's attention probs [n, |keys|] over keys (reconstruction_keys) to
// f.reconstruction [n, T] (sized, zero, on first use): the max per head at the chunk's positions.
void add_reconstruction_row(TokenFeatures& f, const ReconstructionChunk& c, std::span<const int64_t> keys,
                            std::span<const double> probs);
// What the policies of a run need (several expected-attention settings must agree on sinks
// and future: Error(InvalidArgument) otherwise); add_feature_needs adds one policy's.
FeatureNeeds feature_needs(const std::vector<PolicySettings>& policies);
void add_feature_needs(const PolicySettings& s, FeatureNeeds& needs);

// What every manager of one layer is built with.
struct PolicyContext {
  int64_t heads = 0;       // n
  int64_t prompt_len = 0;  // P
  int64_t positions = 0;   // T: positions 0 .. T-1 may occur
  const TokenFeatures* features = nullptr;  // outlives the managers; may be null if nothing is needed
  // false: kvpress's protocol (eval --compress prefill, docs/eval.md §2.1): prefill() cuts the
  // prompt to K once, then every decoded position joins and end_step evicts nothing (the oracle
  // keeps its K best prompt tokens for the current query, plus every decoded one).
  bool evict_while_decoding = true;
};

class CacheManager {
 public:
  virtual ~CacheManager() = default;
  const PolicySettings& settings() const { return settings_; }
  int64_t budget() const { return budget_; }  // K held after every step (pyramidkv: its layer's)

  // Prefill. observation_window(): how many of the last prompt queries it reads (0: none), by
  // policy_observation_window.
  int64_t observation_window() const;
  // probs: [n, q+1], the causal attention of prompt row q over [0, q]; rows ascending. The
  // caller keeps probs alive until prefill() returns (a manager may keep a view).
  virtual void observe_prompt_query(int64_t q, std::span<const double> probs);
  // head_mass: [n, P], the attention mass each prompt token received in the causal prefill per
  // head (ForwardResult::head_scores). Cuts the prompt to at most K tokens (the tie rule).
  void prefill(std::span<const double> head_mass);
  // Both, as decode and eval feed a manager: the attention of the last min(P, observation_window())
  // prompt queries, ascending (probs_of(q): [n, q+1], alive until this returns), then prefill().
  void read_prompt(std::span<const double> head_mass, const std::function<std::span<const double>(int64_t q)>& probs_of);

  // Decode step at position x (x = P, P+1, ... in order): x joins; the cache it attends over.
  bool needs_full_attention() const { return needs_full_attention_; }  // policy_needs_full_attention
  // full_probs: [n, x+1], the attention of x over every token (only if needs_full_attention()).
  virtual std::span<const int64_t> begin_step(int64_t x, std::span<const double> full_probs = {});
  // probs: [n, |begin_step|], the attention over that cache. Evicts down to <= K and returns
  // the positions evicted (ascending; empty when none).
  std::vector<int64_t> end_step(std::span<const double> probs);

  std::span<const int64_t> cache() const { return cache_; }  // held positions, ascending

 protected:
  CacheManager(PolicySettings s, int64_t budget, const PolicyContext& ctx);
  // The per-token score of every cache entry (higher = kept) and an optional secondary score
  // (same size or empty), at the current position x_; only evictable entries are compared.
  virtual void scores(std::vector<double>& primary, std::vector<double>& secondary) = 0;
  // Prefill scores of the P prompt tokens (same convention); called once by prefill().
  virtual void prefill_scores(std::span<const double> head_mass, std::vector<double>& primary,
                              std::vector<double>& secondary) = 0;
  // Sees the attention of the step before eviction (cache_ still holds x).
  virtual void observe(std::span<const double> probs) { (void)probs; }
  // At the end of prefill(), after the cut.
  virtual void after_prefill() {}
  // Evicts `count` of the evictable entries (the tie rule); random overrides it.
  virtual std::vector<int64_t> evict(int64_t count, const std::vector<double>& primary, const std::vector<double>& secondary);
  // The per-head scores [n, m] whose heads() is the primary score, at the state scores() or
  // prefill_scores() last scored (adakv reads them; Error(InvalidArgument) where a policy has none).
  virtual void head_scores(std::vector<double>& per_head) const;
  bool evictable(int64_t position) const;  // not a sink, not in the recent window of x_
  // per-position values [n, T] -> [n, m] at the cache's positions
  std::vector<double> at_cache(const std::vector<double>& per_position) const;
  // per-head values [n, m] -> [m] by settings_.heads
  std::vector<double> aggregate(std::span<const double> per_head, int64_t m) const;

  PolicySettings settings_;
  int64_t budget_;
  PolicyContext ctx_;
  int64_t x_ = -1;                 // the latest query position seen (P - 1 after the prefill)
  int64_t protect_recent_ = 1;     // recent window at this budget
  std::vector<int64_t> cache_;     // ascending

 private:
  bool needs_full_attention_ = false;
  friend class policies::Wrapper;  // a wrapper's inner manager is driven by the wrapper
};

// Error(InvalidArgument) when the budget cannot hold what the policy protects.
std::unique_ptr<CacheManager> make_cache_manager(const PolicySettings& s, int64_t budget, const PolicyContext& ctx);

}  // namespace mla
