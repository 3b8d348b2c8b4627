// src/decode/decode_loop.cpp — the decode step loop and the eviction policies
// (include/mla/decode.hpp; definitions in docs/decode.md §1-§2).
//
// run_decode only sees attention probabilities (DecodeKernel::attend), so the policies are
// testable on hand-made attention (tests/unit/test_decode.cpp). Per step i, x = P + i:
//   1. kernel.begin_query(x)                       logits of x against every token (once)
//   2. full:   attend(0..x)                        the reference output and p_full
//   3. each (policy, budget) run:
//        cache += x  (oracle: cache = the min(K+1, x+1) tokens with the most full mass)
//        attend(cache) -> p                        its output row and probabilities
//        mass_recall = mean_h sum_{t in cache} p_full[h, t] / sum_t p_full[h, t]
//        observe(p)                                h2o: mass[t] += sum_h p[h, t]
//        while |cache| > K: evict the victim       (not snapkv, not oracle)
// Victim = the evictable token (position >= sinks and <= x - recent) with the lowest score,
// the lower position on equal scores.
//
// Shape legend: P prompt rows, N steps, T = P + N, n heads, K budget.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/h2o.hpp"
#include "mla/random.hpp"

namespace mla {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

// Rng streams of the random policy (mla/random.hpp): prefill scores, decode picks.
constexpr uint64_t kRandomPrefillStream = 7001, kRandomDecodeStream = 7002;

struct Run {
  Policy policy = Policy::Full;
  int64_t budget = 0;                // K
  int64_t slot = 0;                  // kernel output stream
  std::vector<int64_t> cache;        // positions held, ascending
  std::vector<double> mass;          // [T] accumulated attention mass (h2o, h2o-normalized)
  std::vector<double> step_score;    // [|cache|] this step's sum_h p (tova)
  Rng rng{0};
  PolicyTrace trace;
};

// sum over heads of probs [n * m] (row h = head h) -> [m]
std::vector<double> head_sum(const std::vector<double>& probs, int64_t n, int64_t m) {
  std::vector<double> s(idx(m), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t j = 0; j < m; ++j) s[idx(j)] += probs[idx(h * m + j)];
  return s;
}

// SnapKV's pooling: out[t] = max of s over [t - pool/2, t + pool/2] clipped to [0, P).
std::vector<double> max_pool(const std::vector<double>& s, int64_t pool) {
  const int64_t P = static_cast<int64_t>(s.size()), half = pool / 2;
  std::vector<double> out(s.size());
  for (int64_t t = 0; t < P; ++t) {
    double m = s[idx(t)];
    for (int64_t u = std::max<int64_t>(0, t - half); u <= std::min(P - 1, t + half); ++u) m = std::max(m, s[idx(u)]);
    out[idx(t)] = m;
  }
  return out;
}

// Attention of prompt query q over the causal prefix [0, q], summed over heads -> [q + 1].
std::vector<double> prompt_query_mass(DecodeKernel& kernel, int64_t q) {
  std::vector<int64_t> prefix(idx(q + 1));
  std::iota(prefix.begin(), prefix.end(), 0);
  std::vector<double> probs;
  kernel.begin_query(q);
  kernel.attend(prefix, probs, -1, 0);
  return head_sum(probs, kernel.heads(), q + 1);
}

// The prefill scores each policy cuts the prompt by (higher = kept) -> [P].
std::vector<double> prefill_scores(Policy policy, const DecodeOptions& opt, const PrefillView& pre,
                                   DecodeKernel& kernel) {
  const int64_t P = pre.prompt_len;
  std::vector<double> s(idx(P), 0.0);
  switch (policy) {
    case Policy::H2O:  // mass received in the causal prefill
      return pre.token_scores;
    case Policy::H2ONormalized:  // ... divided by the queries that could see the token: P - t
      for (int64_t t = 0; t < P; ++t) s[idx(t)] = pre.token_scores[idx(t)] / static_cast<double>(P - t);
      return s;
    case Policy::Tova:  // attention from the last prompt query
      return prompt_query_mass(kernel, P - 1);
    case Policy::SnapKV: {  // attention from the last `window` prompt queries, max-pooled
      for (int64_t q = std::max<int64_t>(0, P - opt.snapkv_window); q < P; ++q) {
        const std::vector<double> m = prompt_query_mass(kernel, q);
        for (int64_t t = 0; t <= q; ++t) s[idx(t)] += m[idx(t)];
      }
      return max_pool(s, opt.snapkv_pool);
    }
    case Policy::Streaming:  // newest kept
      for (int64_t t = 0; t < P; ++t) s[idx(t)] = static_cast<double>(t);
      return s;
    case Policy::Random: {
      Rng rng(opt.seed, kRandomPrefillStream);
      for (double& v : s) v = rng.uniform();
      return s;
    }
    case Policy::Full:
    case Policy::Oracle:
      break;
  }
  return s;
}

// The prefill cut: the K tokens h2o_select keeps (sinks + recent + the best K - sinks - recent).
std::vector<int64_t> prefill_cut(const std::vector<double>& scores, const DecodeOptions& opt, int64_t K) {
  const int64_t P = static_cast<int64_t>(scores.size());
  if (P <= K) {
    std::vector<int64_t> all(idx(P));
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  return h2o_select(scores, H2OOptions{opt.sinks, opt.recent, K - opt.sinks - opt.recent}).kept_indices();
}

// The score of cache entry j at step x (lower = evicted first).
double eviction_score(const Run& r, size_t j, int64_t x) {
  const int64_t t = r.cache[j];
  switch (r.policy) {
    case Policy::H2O: return r.mass[idx(t)];
    case Policy::H2ONormalized: return r.mass[idx(t)] / static_cast<double>(x - t + 1);
    case Policy::Tova: return r.step_score[j];
    case Policy::Streaming: return static_cast<double>(t);
    default: return 0.0;
  }
}

// Removes one evictable token (positions [sinks, x - recent]) and returns its position.
int64_t evict_one(Run& r, const DecodeOptions& opt, int64_t x) {
  std::vector<size_t> candidates;  // indices into r.cache
  for (size_t j = 0; j < r.cache.size(); ++j)
    if (r.cache[j] >= opt.sinks && r.cache[j] <= x - opt.recent) candidates.push_back(j);
  if (candidates.empty())
    fail(ErrorKind::InvalidArgument, "decode: nothing evictable at step " + std::to_string(x) + " (budget too small)");
  size_t victim = candidates.front();
  if (r.policy == Policy::Random) {
    victim = candidates[std::min(candidates.size() - 1, static_cast<size_t>(r.rng.uniform() * static_cast<double>(candidates.size())))];
  } else {
    // lowest score; candidates are ascending in position, so `<` keeps the older on ties
    double best = eviction_score(r, victim, x);
    for (size_t j : candidates) {
      const double s = eviction_score(r, j, x);
      if (s < best) {
        best = s;
        victim = j;
      }
    }
  }
  const int64_t pos = r.cache[victim];
  r.cache.erase(r.cache.begin() + static_cast<std::ptrdiff_t>(victim));
  if (r.policy == Policy::Tova) r.step_score.erase(r.step_score.begin() + static_cast<std::ptrdiff_t>(victim));
  return pos;
}

// The oracle's cache at step x: the m tokens with the most full-cache mass (ties: newer kept).
std::vector<int64_t> oracle_cache(const std::vector<double>& full_mass, int64_t m) {
  std::vector<int64_t> order(full_mass.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double sa = full_mass[idx(a)], sb = full_mass[idx(b)];
    return sa != sb ? sa > sb : a > b;
  });
  order.resize(idx(m));
  std::sort(order.begin(), order.end());
  return order;
}

double norm(const double* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
  return std::sqrt(s);
}

}  // namespace

const char* decode_attention_name(DecodeAttention a) { return a == DecodeAttention::Absorbed ? "absorbed" : "naive"; }

const std::vector<Policy>& all_policies() {
  static const std::vector<Policy> all = {Policy::Full,      Policy::H2O,    Policy::H2ONormalized, Policy::Tova,
                                          Policy::Streaming, Policy::SnapKV, Policy::Random,        Policy::Oracle};
  return all;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::Full: return "full";
    case Policy::H2O: return "h2o";
    case Policy::H2ONormalized: return "h2o-normalized";
    case Policy::Tova: return "tova";
    case Policy::Streaming: return "streaming";
    case Policy::SnapKV: return "snapkv";
    case Policy::Random: return "random";
    case Policy::Oracle: return "oracle";
  }
  return "unknown";
}

Policy parse_policy(std::string_view name) {
  std::string known;
  for (Policy p : all_policies()) {
    if (name == policy_name(p)) return p;
    known += std::string(known.empty() ? "" : ", ") + policy_name(p);
  }
  fail(ErrorKind::InvalidArgument, "unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

void check_decode_flags(const DecodeOptions& opt) {
  auto bad = [](const std::string& what) { fail(ErrorKind::InvalidArgument, what); };
  if (opt.prompt_len < 1) bad("--prompt-len " + std::to_string(opt.prompt_len) + " must be >= 1");
  if (opt.sinks < 0 || opt.recent < 1) bad("--sinks must be >= 0 and --recent >= 1 (the recent window holds x)");
  if (opt.budgets.empty()) bad("--cache-budget: no budget given");
  int64_t kept = 0;  // sinks + recent, never evicted
  if (__builtin_add_overflow(opt.sinks, opt.recent, &kept))
    bad("--sinks " + std::to_string(opt.sinks) + " + --recent " + std::to_string(opt.recent) + " overflows 64 bits");
  for (size_t i = 0; i < opt.budgets.size(); ++i) {
    const int64_t K = opt.budgets[i];
    if (K <= kept)
      bad("--cache-budget " + std::to_string(K) + " must be > sinks + recent = " + std::to_string(opt.sinks) + " + " +
          std::to_string(opt.recent) + " (they are never evicted)");
    if (i > 0 && K <= opt.budgets[i - 1])
      bad("--cache-budget: budgets must be strictly increasing (" + std::to_string(opt.budgets[i - 1]) + " then " +
          std::to_string(K) + ")");
  }
  if (opt.policies.empty()) bad("--policy: no policy given");
  for (size_t i = 0; i < opt.policies.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (opt.policies[i] == opt.policies[j]) bad(std::string("--policy: '") + policy_name(opt.policies[i]) + "' given twice");
  if (opt.snapkv_window < 1 || opt.snapkv_pool < 1 || opt.snapkv_pool % 2 == 0)
    bad("snapkv window must be >= 1 and its pool width odd");
}

void check_decode_options(const DecodeOptions& opt, int64_t T) {
  auto bad = [](const std::string& what) { fail(ErrorKind::InvalidArgument, what); };
  check_decode_flags(opt);
  if (opt.prompt_len >= T)
    bad("--prompt-len " + std::to_string(opt.prompt_len) + " leaves no decode step: the input has " +
        std::to_string(T) + " rows (P must be < T)");
  if (opt.steps < 1) bad("--steps 0: nothing to measure (need at least one decode step)");
  if (opt.steps > T - opt.prompt_len)  // P + N > T, without the sum
    bad("--prompt-len " + std::to_string(opt.prompt_len) + " + --steps " + std::to_string(opt.steps) + " rows, but the input has " +
        std::to_string(T));
}

int64_t decode_slots(const DecodeOptions& opt) {
  const int64_t others = static_cast<int64_t>(
      std::count_if(opt.policies.begin(), opt.policies.end(), [](Policy p) { return p != Policy::Full; }));
  return 1 + static_cast<int64_t>(opt.budgets.size()) * others;
}

DecodeResult run_decode(const DecodeOptions& opt, const PrefillView& pre, DecodeKernel& kernel,
                        const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t P = opt.prompt_len, N = opt.steps, T = P + N, n = kernel.heads();
  check_decode_options(opt, T);
  if (pre.prompt_len != P || static_cast<int64_t>(pre.token_scores.size()) != P)
    fail(ErrorKind::InvalidArgument, "decode: prefill holds " + std::to_string(pre.token_scores.size()) +
                                         " token scores for a prompt of " + std::to_string(P));

  // ---- runs and their prefill cuts ----
  std::vector<Run> runs;  // non-full (policy, budget) pairs, budget-major
  std::map<Policy, std::vector<double>> scores_of;  // prefill scores, once per policy
  int64_t slot = 1;
  for (int64_t K : opt.budgets)
    for (Policy policy : opt.policies) {
      if (policy == Policy::Full) continue;
      Run r;
      r.policy = policy;
      r.budget = K;
      r.slot = slot++;
      r.rng = Rng(opt.seed, kRandomDecodeStream + static_cast<uint64_t>(K) * 16);
      if (policy == Policy::Oracle) {  // no cut: it picks from every token at each step
        r.cache.resize(idx(P));
        std::iota(r.cache.begin(), r.cache.end(), 0);
      } else {
        if (!scores_of.count(policy)) scores_of[policy] = prefill_scores(policy, opt, pre, kernel);
        r.cache = prefill_cut(scores_of[policy], opt, K);
      }
      r.trace.policy = policy;
      r.trace.budget = K;
      r.trace.prefill_kept = r.cache;
      r.mass.assign(idx(T), 0.0);
      if (policy == Policy::H2O || policy == Policy::H2ONormalized)
        for (int64_t t = 0; t < P; ++t) r.mass[idx(t)] = pre.token_scores[idx(t)];
      runs.push_back(std::move(r));
    }
  PolicyTrace full;
  full.policy = Policy::Full;

  // ---- the steps ----
  std::vector<double> p_full, p;  // [n * (x+1)], [n * |cache|]
  for (int64_t i = 0; i < N; ++i) {
    const int64_t x = P + i;
    kernel.begin_query(x);
    std::vector<int64_t> all(idx(x + 1));
    std::iota(all.begin(), all.end(), 0);
    kernel.attend(all, p_full, 0, i);
    std::vector<double> row_sum(idx(n), 0.0);  // per head: sum_t p_full[h, t]
    for (int64_t h = 0; h < n; ++h)
      for (int64_t t = 0; t <= x; ++t) row_sum[idx(h)] += p_full[idx(h * (x + 1) + t)];
    const std::vector<double> full_mass = head_sum(p_full, n, x + 1);  // [x+1]
    full.steps.push_back(DecodeStep{i, x, x + 1, -1, 0.0, 1.0, 1.0});
    full.attended.push_back(all);

    for (Run& r : runs) {
      if (r.policy == Policy::Oracle) r.cache = oracle_cache(full_mass, std::min(r.budget + 1, x + 1));
      else r.cache.push_back(x);
      const int64_t m = static_cast<int64_t>(r.cache.size());
      kernel.attend(r.cache, p, r.slot, i);
      DecodeStep st{i, x, m, -1, 0.0, 1.0, 0.0};
      for (int64_t h = 0; h < n; ++h) {
        double kept = 0.0;
        for (int64_t j = 0; j < m; ++j) kept += p_full[idx(h * (x + 1) + r.cache[idx(j)])];
        st.mass_recall += (row_sum[idx(h)] > 0 ? kept / row_sum[idx(h)] : 1.0) / static_cast<double>(n);
      }
      r.trace.attended.push_back(r.cache);
      // observe this step's attention
      const std::vector<double> got = head_sum(p, n, m);  // [m]
      if (r.policy == Policy::H2O || r.policy == Policy::H2ONormalized)
        for (int64_t j = 0; j < m; ++j) r.mass[idx(r.cache[idx(j)])] += got[idx(j)];
      if (r.policy == Policy::Tova) r.step_score = got;
      // evict down to the budget
      if (r.policy != Policy::SnapKV && r.policy != Policy::Oracle)
        while (static_cast<int64_t>(r.cache.size()) > r.budget) st.evicted = evict_one(r, opt, x);
      r.trace.steps.push_back(st);
    }
    kernel.end_query();
    if (progress) progress(i + 1, N);
  }

  // ---- outputs and errors against the full cache ----
  DecodeResult result;
  result.full_output = kernel.outputs(0);
  const int64_t H = result.full_output.dim(1);
  full.attn_output = result.full_output;
  size_t next = 0;
  for (int64_t K : opt.budgets)
    for (Policy policy : opt.policies) {
      if (policy == Policy::Full) {
        PolicyTrace t = full;
        t.budget = K;
        result.traces.push_back(std::move(t));
        continue;
      }
      Run& r = runs[next++];
      r.trace.attn_output = kernel.outputs(r.slot);
      for (DecodeStep& st : r.trace.steps) {
        const double* o = r.trace.attn_output.ptr() + st.step * H;
        const double* f = result.full_output.ptr() + st.step * H;
        double diff = 0, dot = 0;
        for (int64_t k = 0; k < H; ++k) {
          diff += (o[k] - f[k]) * (o[k] - f[k]);
          dot += o[k] * f[k];
        }
        const double nf = norm(f, H), no = norm(o, H);
        st.rel_error = nf > 0 ? std::sqrt(diff) / nf : (diff == 0 ? 0.0 : INFINITY);
        st.cosine = nf > 0 && no > 0 ? dot / (nf * no) : (diff == 0 ? 1.0 : 0.0);
      }
      result.traces.push_back(std::move(r.trace));
    }
  return result;
}

std::vector<DecodeSummary> summarize(const DecodeResult& r) {
  std::vector<DecodeSummary> out;
  for (const PolicyTrace& t : r.traces) {
    DecodeSummary s;
    s.policy = t.policy;
    s.budget = t.budget;
    const double N = static_cast<double>(t.steps.size());
    std::vector<double> errors;
    double rel = 0, cosine = 0, recall = 0, cache = 0;  // sums, divided once (a mean of equal values is exact)
    for (const DecodeStep& st : t.steps) {
      errors.push_back(st.rel_error);
      rel += st.rel_error;
      cosine += st.cosine;
      recall += st.mass_recall;
      cache += static_cast<double>(st.cache_len);
    }
    s.mean_rel_error = rel / N;
    s.mean_cosine = cosine / N;
    s.mean_mass_recall = recall / N;
    s.mean_cache_len = cache / N;
    std::sort(errors.begin(), errors.end());
    if (!errors.empty()) {
      // nearest rank: the smallest value with at least 95 % of the steps at or below it
      const size_t rank = static_cast<size_t>(std::ceil(0.95 * N));
      s.p95_rel_error = errors[std::max<size_t>(rank, 1) - 1];
      s.max_rel_error = errors.back();
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace mla
