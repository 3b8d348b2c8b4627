// src/decode/decode_loop.cpp — the decode step loop (include/mla/decode.hpp; docs/decode.md §1,
// §4). The policies themselves live in src/policies/ behind CacheManager; this file drives them
// with a DecodeKernel's attention and measures what their caches do to the output:
//
//   prefill  the last w prompt queries' attention (w = the largest observation window), once,
//            shown to every manager; then each manager cuts the prompt (prefill(head_mass))
//   steps    the one step loop (mla/step_loop.hpp) with the kernel's attention: at x = P + i
//            kernel.begin_query(x); full: attend(0..x) -> p_full (slot 0); each manager:
//            cache = begin_step(x [, p_full]); attend(cache) -> p (its slot); mass recall from
//            p_full; end_step(p) evicts; kernel.end_query()
//   outputs  per slot: attn_output (o_proj) -> rel_error, cosine, residual_error; the
//            outputs are kept only with keep_outputs
//
// A slot's arithmetic reads only its own cache (the kernels compute every row of a product
// independently), so a policy's figures do not depend on what else runs.
//
// Shape legend: P prompt rows, N steps, T = P + N, n heads, K budget, H hidden.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/stats.hpp"
#include "mla/step_loop.hpp"

namespace mla {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

// The (budget, policy) runs other than full, budget-major, with their slots 1, 2, ...
struct Run {
  size_t policy = 0;  // index into opt.policies
  int64_t budget = 0;
  int64_t slot = 0;
  std::unique_ptr<CacheManager> cache;
  PolicyTrace trace;
};

}  // namespace

const char* decode_attention_name(DecodeAttention a) { return a == DecodeAttention::Absorbed ? "absorbed" : "naive"; }

int64_t layer_budget(const PolicySettings& s, int64_t K, const DecodeOptions& opt) {
  return layer_budget(s, K, opt.layer, opt.num_layers, opt.prompt_len);
}

void check_decode_flags(const DecodeOptions& opt) {
  auto bad = [](const std::string& what) { fail(ErrorKind::InvalidArgument, what); };
  if (opt.prompt_len < 1) bad("--prompt-len " + std::to_string(opt.prompt_len) + " must be >= 1");
  if (opt.steps < 0) bad("--steps " + std::to_string(opt.steps) + ": nothing to measure (need at least one decode step)");
  check_budgets_and_policies(opt.budgets, opt.policies);
  for (const PolicySettings& s : opt.policies) {
    int64_t sum = 0;
    for (int64_t K : opt.budgets)
      if (__builtin_add_overflow(s.sinks, recent_tokens(s, K), &sum))
        bad("--policy " + s.label + ": sinks " + std::to_string(s.sinks) + " + recent " + std::to_string(recent_tokens(s, K)) +
            " overflows 64 bits (--sinks, --recent or the policy's settings)");
    if (policy_budget_depends_on_layer(s)) continue;  // checked with the layer (check_decode_options)
    for (int64_t K : opt.budgets) check_budget_holds(s, K, K);
  }
}

void check_decode_options(const DecodeOptions& opt, int64_t T) {
  auto bad = [](const std::string& what) { fail(ErrorKind::InvalidArgument, what); };
  check_decode_flags(opt);
  if (opt.prompt_len >= T)
    bad("--prompt-len " + std::to_string(opt.prompt_len) + " leaves no decode step: the input has " +
        std::to_string(T) + " rows (P must be < T)");
  if (opt.steps < 1) bad("--steps 0: nothing to measure (need at least one decode step)");
  if (opt.steps > T - opt.prompt_len)  // P + N > T, without the sum
    bad("--prompt-len " + std::to_string(opt.prompt_len) + " + --steps " + std::to_string(opt.steps) +
        " rows, but the input has " + std::to_string(T));
  if (opt.layer < 0 || opt.layer >= opt.num_layers)
    bad("decode: layer " + std::to_string(opt.layer) + " of " + std::to_string(opt.num_layers));
  for (const PolicySettings& s : opt.policies)
    for (int64_t K : opt.budgets) check_budget_holds(s, K, layer_budget(s, K, opt));
}

int64_t prompt_query_window(const DecodeOptions& opt) { return held_prompt_queries(opt.policies, opt.prompt_len); }

int64_t decode_slots(const DecodeOptions& opt) { return 1 + static_cast<int64_t>(policy_runs(opt.budgets, opt.policies).size()); }

namespace {

// The (budget, policy) runs other than full, budget-major, each with its manager and slot.
std::vector<Run> make_runs(const DecodeOptions& opt, const DecodeContext& dc, int64_t n) {
  const int64_t P = opt.prompt_len, T = P + opt.steps;
  const PolicyContext pc{n, P, T, dc.features};
  std::vector<Run> runs;
  for (const PolicyRun& pr : policy_runs(opt.budgets, opt.policies)) {
    const PolicySettings& s = opt.policies[pr.policy];
    Run r;
    r.policy = pr.policy;
    r.budget = pr.budget;
    r.slot = static_cast<int64_t>(runs.size()) + 1;
    r.cache = make_cache_manager(s, layer_budget(s, pr.budget, opt), pc);
    r.trace.policy = s;
    r.trace.budget = pr.budget;
    r.trace.layer_budget = r.cache->budget();
    runs.push_back(std::move(r));
  }
  return runs;
}

// The prompt queries the managers read (once, by the kernel), then each manager's cut.
void prefill_runs(const DecodeOptions& opt, const DecodeContext& dc, DecodeKernel& kernel, std::vector<Run>& runs) {
  const int64_t P = opt.prompt_len, w = prompt_query_window(opt);
  std::vector<std::vector<double>> probs(idx(w));  // [w] of [n, q+1]; alive until every manager has read them
  for (int64_t k = 0; k < w; ++k) {
    const int64_t q = P - w + k;
    std::vector<int64_t> prefix(idx(q + 1));
    std::iota(prefix.begin(), prefix.end(), 0);
    kernel.begin_query(q);
    kernel.attend(prefix, probs[idx(k)], -1, 0);
  }
  for (Run& r : runs) {
    r.cache->read_prompt(dc.head_mass, [&](int64_t q) { return std::span<const double>(probs[idx(q - (P - w))]); });
    r.trace.prefill_kept.assign(r.cache->cache().begin(), r.cache->cache().end());
  }
}

// The kernel's attention for the step loop: slot 0 is full, run k has its slot.
class KernelSteps final : public StepAttention {
 public:
  KernelSteps(DecodeKernel& k, const std::vector<Run>& r, int64_t P) : kernel_(k), runs_(r), P_(P) {}
  void begin_position(int64_t x) override { kernel_.begin_query(x); }
  void full(int64_t x, std::vector<double>& probs) override {
    std::vector<int64_t> all(idx(x + 1));
    std::iota(all.begin(), all.end(), 0);
    kernel_.attend(all, probs, 0, x - P_);
  }
  void attend(size_t run, int64_t x, std::span<const int64_t> cache, std::vector<double>& probs, int) override {
    kernel_.attend(cache, probs, runs_[run].slot, x - P_);
  }
  void end_position(int64_t) override { kernel_.end_query(); }

 private:
  DecodeKernel& kernel_;
  const std::vector<Run>& runs_;
  int64_t P_;
};

// The steps of every run (mla/step_loop.hpp); returns the full run's trace.
PolicyTrace step_runs(const DecodeOptions& opt, DecodeKernel& kernel, std::vector<Run>& runs,
                      const std::function<void(int64_t, int64_t)>& progress, const AttendObserver& observe) {
  const int64_t P = opt.prompt_len, N = opt.steps, n = kernel.heads();
  KernelSteps steps(kernel, runs, P);
  std::vector<CacheManager*> managers;
  for (Run& r : runs) managers.push_back(r.cache.get());
  StepLoopOptions so;
  so.prompt_len = P;
  so.steps = N;
  so.heads = n;
  so.threads = 1;  // the kernel keeps one position's state
  so.progress = progress;
  so.observe = observe;
  const std::vector<std::vector<StepFigures>> figures = run_steps(managers, steps, so);
  PolicyTrace full;
  full.policy = policy_preset("full");
  for (int64_t i = 0; i < N; ++i) {
    const int64_t x = P + i;
    DecodeStep fs;
    fs.step = i;
    fs.position = x;
    fs.cache_len = fs.held = x + 1;
    full.steps.push_back(fs);
    for (size_t k = 0; k < runs.size(); ++k) {
      const StepFigures& f = figures[k][idx(i)];
      DecodeStep st;
      st.step = i;
      st.position = x;
      st.cache_len = f.cache_len;
      st.visible = static_cast<double>(f.cache_len) / static_cast<double>(x + 1);
      st.mass_recall = f.mass_recall;
      st.mass_recall_min = f.mass_recall_min;
      st.mass_recall_p5 = f.mass_recall_p5;
      st.evicted = f.evicted;
      st.held = f.held;
      runs[k].trace.steps.push_back(st);
    }
  }

  return full;
}

// Every run's outputs (o_proj) and their errors against the full cache, in the runs' order.
DecodeResult measure_outputs(const DecodeOptions& opt, const DecodeContext& dc, DecodeKernel& kernel, std::vector<Run>& runs,
                             PolicyTrace& full) {
  DecodeResult result;
  TensorD full_output = kernel.outputs(0);
  const int64_t H = full_output.dim(1);
  for (DecodeStep& st : full.steps) st.residual_error = dc.residual_norm.empty() ? std::nan("") : 0.0;
  size_t next = 0;
  for (int64_t K : opt.budgets)
    for (const PolicySettings& s : opt.policies) {
      if (policy_is_full_cache(s)) {
        PolicyTrace t;
        t.policy = s;
        t.budget = K;
        t.layer_budget = K;
        t.steps = full.steps;
        if (opt.keep_outputs) t.attn_output = full_output;
        result.traces.push_back(std::move(t));
        continue;
      }
      Run& r = runs[next++];
      TensorD out = kernel.outputs(r.slot);  // [N, H]
      for (DecodeStep& st : r.trace.steps) {
        const RowDeviation e = row_deviation(out.ptr() + st.step * H, full_output.ptr() + st.step * H, H);
        st.rel_error = e.rel_error;
        st.cosine = e.cosine;
        st.residual_error = dc.residual_norm.empty() ? std::nan("")
                            : dc.residual_norm[idx(st.step)] > 0 ? e.distance / dc.residual_norm[idx(st.step)]
                                                                  : (e.distance == 0 ? 0.0 : INFINITY);
      }
      if (opt.keep_outputs) r.trace.attn_output = std::move(out);
      result.traces.push_back(std::move(r.trace));
    }
  if (opt.keep_outputs) result.full_output = std::move(full_output);
  return result;
}

}  // namespace

DecodeResult run_decode(const DecodeOptions& opt, const DecodeContext& dc, DecodeKernel& kernel,
                        const std::function<void(int64_t, int64_t)>& progress, const AttendObserver& observe) {
  const int64_t P = opt.prompt_len, N = opt.steps, T = P + N, n = kernel.heads();
  check_decode_options(opt, T);
  if (static_cast<int64_t>(dc.head_mass.size()) != n * P)
    fail(ErrorKind::InvalidArgument, "decode: the prefill mass holds " + std::to_string(dc.head_mass.size()) +
                                         " values for " + std::to_string(n) + " heads x " + std::to_string(P) + " tokens");
  if (!dc.residual_norm.empty() && static_cast<int64_t>(dc.residual_norm.size()) != N)
    fail(ErrorKind::InvalidArgument, "decode: " + std::to_string(dc.residual_norm.size()) + " residual norms for " +
                                         std::to_string(N) + " steps");

  std::vector<Run> runs = make_runs(opt, dc, n);
  prefill_runs(opt, dc, kernel, runs);
  PolicyTrace full = step_runs(opt, kernel, runs, progress, observe);
  return measure_outputs(opt, dc, kernel, runs, full);
}

std::vector<DecodeSummary> summarize(const DecodeResult& r) {
  std::vector<DecodeSummary> out;
  for (const PolicyTrace& t : r.traces) {
    DecodeSummary s;
    s.policy = t.policy.label;
    s.budget = t.budget;
    const double N = static_cast<double>(t.steps.size());
    std::vector<double> errors;
    // sums, divided once (a mean of equal values is exact)
    double rel = 0, res = 0, cosine = 0, recall = 0, recall_min = 0, recall_p5 = 0, visible = 0, cache = 0, held = 0;
    for (const DecodeStep& st : t.steps) {
      errors.push_back(st.rel_error);
      rel += st.rel_error;
      res += st.residual_error;
      cosine += st.cosine;
      recall += st.mass_recall;
      recall_min += st.mass_recall_min;
      recall_p5 += st.mass_recall_p5;
      visible += st.visible;
      cache += static_cast<double>(st.cache_len);
      held += static_cast<double>(st.held);
    }
    s.mean_rel_error = rel / N;
    s.mean_residual_error = res / N;
    s.mean_cosine = cosine / N;
    s.mean_mass_recall = recall / N;
    s.mean_mass_recall_min = recall_min / N;
    s.mean_mass_recall_p5 = recall_p5 / N;
    s.mean_visible = visible / N;
    s.mean_cache_len = cache / N;
    s.mean_held = held / N;
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
