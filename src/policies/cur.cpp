// src/policies/cur.cpp — `cur`: kvpress's CURPress (CurDKV, arXiv 2509.15038: approximate leverage
// scores of the keys and values from a CUR decomposition): the tokens whose keys and values carry the
// least energy within their neighbourhood go.
//
//   k2_h,t = ||k_h,t||^2,  v2_h,t = ||v_h,t||^2   (TokenFeatures::key_norm, value_norm squared: on MLA
//            k_h,t = [W_UK^h c_t | k_pe_t], v_h,t = W_UV^h c_t, as knorm)
//   local normalisation (local = w > 0): k2'_h,t = k2_h,t / sum_{s in W(t)} k2_h,s, likewise v2',
//            W(t) = [a, min(a + w, max(P, t + 1))), a = w floor(t / w)  (w = 0: k2' = k2, v2' = v2)
//   r_h,t    = k2' v2' (cur=kv_product), (k2' + v2') / 2 (kv_avg), k2' (key) or v2' (value)
//   score(t) = heads( r_h,t / sum_{s < P} r_h,s )
// kvpress's windows are aligned blocks of the prompt, its last one cut at P (zero padding adds
// nothing); a decoded token's window is its block up to itself (the tokens after it have not
// arrived), and it is normalised by the prompt's sum, as expected-attention's normaliser. kvpress
// gives its first 4 tokens the score 1 (the largest): here they are 4 sinks. The random projection
// (use_random_leverage, off by default) is not offered. A zero sum gives 0.
//   Settings: kvpress's: sinks 4, cur=kv_product, local 16; recent 1 (the new token), heads=mean.
#include "src/policies/policy_entry.hpp"

namespace mla::policies {
namespace {

class CurCache final : public CacheManager {
 public:
  CurCache(PolicySettings s, int64_t K, const PolicyContext& c) : CacheManager(std::move(s), K, c) {
    const size_t size = idx(ctx_.heads * ctx_.positions);
    if (ctx_.features == nullptr || (uses_keys() && ctx_.features->key_norm.size() != size) ||
        (uses_values() && ctx_.features->value_norm.size() != size))
      bad("cache manager: " + settings_.preset + " needs the key and value norms of " + std::to_string(ctx_.positions) +
          " tokens");
    r_.assign(size, 0.0);
    z_.assign(idx(ctx_.heads), 0.0);
    run_k_.assign(idx(ctx_.heads), 0.0);
    run_v_.assign(idx(ctx_.heads), 0.0);
  }

 protected:
  void prefill_scores(std::span<const double>, std::vector<double>& primary, std::vector<double>&) override {
    const int64_t P = ctx_.prompt_len, w = settings_.local;
    for (int64_t h = 0; h < ctx_.heads; ++h) {
      for (int64_t a = 0; a < P; a += (w > 0 ? w : P)) {  // the prompt's blocks [a, min(a + w, P))
        const int64_t end = w > 0 ? std::min(a + w, P) : P;
        run_k_[idx(h)] = run_v_[idx(h)] = 0.0;
        for (int64_t t = a; t < end; ++t) run_k_[idx(h)] += k2(h, t), run_v_[idx(h)] += v2(h, t);
        for (int64_t t = a; t < end; ++t) r_[idx(h * ctx_.positions + t)] = combine(h, t);
      }
      for (int64_t t = 0; t < P; ++t) z_[idx(h)] += r_[idx(h * ctx_.positions + t)];
    }
    done_ = P;
    score(primary);
  }
  void scores(std::vector<double>& primary, std::vector<double>&) override {
    const int64_t w = settings_.local;
    for (; done_ <= x_; ++done_)  // each decoded token once, in order: its block's running sums
      for (int64_t h = 0; h < ctx_.heads; ++h) {
        if (w > 0 && done_ % w == 0) run_k_[idx(h)] = run_v_[idx(h)] = 0.0;
        run_k_[idx(h)] += k2(h, done_);
        run_v_[idx(h)] += v2(h, done_);
        r_[idx(h * ctx_.positions + done_)] = combine(h, done_);
      }
    score(primary);
  }

 private:
  bool uses_keys() const { return settings_.cur != "value"; }
  bool uses_values() const { return settings_.cur != "key"; }
  double k2(int64_t h, int64_t t) const {
    if (!uses_keys()) return 0.0;
    const double k = ctx_.features->key_norm[idx(h * ctx_.positions + t)];
    return k * k;
  }
  double v2(int64_t h, int64_t t) const {
    if (!uses_values()) return 0.0;
    const double v = ctx_.features->value_norm[idx(h * ctx_.positions + t)];
    return v * v;
  }
  // r_h,t from the running sums of t's window (no local normalisation: the raw energies)
  double combine(int64_t h, int64_t t) const {
    const bool local = settings_.local > 0;
    const double sk = run_k_[idx(h)], sv = run_v_[idx(h)];
    const double k = !local ? k2(h, t) : sk > 0 ? k2(h, t) / sk : 0.0;
    const double v = !local ? v2(h, t) : sv > 0 ? v2(h, t) / sv : 0.0;
    const std::string& c = settings_.cur;
    return c == "kv_product" ? k * v : c == "kv_avg" ? (k + v) / 2 : c == "key" ? k : v;
  }
  void score(std::vector<double>& primary) const {  // [n, m] at the cache, then heads
    const size_t m = cache_.size();
    std::vector<double> heads(idx(ctx_.heads) * m);
    for (int64_t h = 0; h < ctx_.heads; ++h)
      for (size_t j = 0; j < m; ++j) {
        const double z = z_[idx(h)];
        heads[idx(h) * m + j] = z > 0 ? r_[idx(h * ctx_.positions + cache_[j])] / z : 0.0;
      }
    primary = aggregate(heads, static_cast<int64_t>(m));
  }

  std::vector<double> r_;             // [n, T] r_h,t of the tokens done
  std::vector<double> z_;             // [n] sum over the prompt of r_h,t
  std::vector<double> run_k_, run_v_;  // [n] the running block sums of k2, v2
  int64_t done_ = 0;                  // tokens [0, done_) have r
};

}  // namespace

PolicyEntry cur_entry() {
  PolicyEntry e;
  e.name = "cur";
  e.settings = base_settings(4, 1, HeadAggregation::Mean);
  e.keys = {"sinks", "recent", "heads", "cur", "local"};
  e.make = make_manager<CurCache>;
  e.needs = [](const PolicySettings& s, FeatureNeeds& f) {
    if (s.cur != "value") f.key_norm = true;
    if (s.cur != "key") f.value_norm = true;
  };
  return e;
}

}  // namespace mla::policies
