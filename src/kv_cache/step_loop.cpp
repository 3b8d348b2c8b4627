// src/kv_cache/step_loop.cpp — the one decode step loop (mla/step_loop.hpp).
//
// Shape legend: n heads, x position, m = |cache|.
#include "mla/step_loop.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "mla/error.hpp"
#include "mla/threads.hpp"

namespace mla {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

// The full-cache mass on `cache`, per head, in the order row_sum adds it; then its mean, worst
// head and 5th percentile.
void mass_recall(std::span<const double> p_full, std::span<const double> row_sum, int64_t x,
                 std::span<const int64_t> cache, std::vector<double>& recall, StepFigures& out) {
  const int64_t n = static_cast<int64_t>(row_sum.size());
  recall.resize(idx(n));
  // a share of the mass: in [0, 1] (kept adds in the cache's order, row_sum in index order, so a
  // cache holding every token could otherwise give 1 + 2^-52), exactly 1 for the whole row
  const bool whole = static_cast<int64_t>(cache.size()) == x + 1;
  for (int64_t h = 0; h < n; ++h) {
    double kept = 0.0;
    for (int64_t t : cache) kept += p_full[idx(h * (x + 1) + t)];
    recall[idx(h)] = row_sum[idx(h)] > 0 && !whole ? std::clamp(kept / row_sum[idx(h)], 0.0, 1.0) : 1.0;
  }
  out.mass_recall = std::accumulate(recall.begin(), recall.end(), 0.0) / static_cast<double>(n);
  std::sort(recall.begin(), recall.end());
  out.mass_recall_min = recall.front();
  out.mass_recall_p5 = recall[idx(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(0.05 * static_cast<double>(n)))) - 1)];
}

}  // namespace

std::vector<std::vector<StepFigures>> run_steps(std::span<CacheManager* const> managers, StepAttention& attention,
                                                const StepLoopOptions& opt) {
  const int64_t P = opt.prompt_len, N = opt.steps, n = opt.heads, R = static_cast<int64_t>(managers.size());
  if (P < 1 || N < 0 || n < 1 || opt.threads < 1)
    fail(ErrorKind::InvalidArgument, "step loop: prompt " + std::to_string(P) + ", steps " + std::to_string(N) + ", heads " +
                                         std::to_string(n) + ", threads " + std::to_string(opt.threads));
  std::vector<std::vector<StepFigures>> figures(idx(R), std::vector<StepFigures>(idx(N)));
  const int workers = static_cast<int>(std::min<int64_t>(opt.threads, std::max<int64_t>(R, 1)));
  std::vector<std::vector<double>> probs(idx(workers)), own(idx(workers)), recall(idx(workers));
  std::vector<double> p_full, row_sum(idx(n));  // [n, x+1], [n]
  for (int64_t i = 0; i < N; ++i) {
    const int64_t x = P + i;
    attention.begin_position(x);
    attention.full(x, p_full);
    if (static_cast<int64_t>(p_full.size()) != n * (x + 1))
      fail(ErrorKind::Shape, "step loop: the full attention at " + std::to_string(x) + " has " +
                                    std::to_string(p_full.size()) + " values");
    std::fill(row_sum.begin(), row_sum.end(), 0.0);  // per head: sum_t p_full[h, t]
    for (int64_t h = 0; h < n; ++h)
      for (int64_t t = 0; t <= x; ++t) row_sum[idx(h)] += p_full[idx(h * (x + 1) + t)];
    const auto step = [&](int64_t k, int worker) {
      CacheManager& m = *managers[idx(k)];
      const std::span<const int64_t> cache =
          m.needs_full_attention() ? m.begin_step(x, attention.own_full(idx(k), x, p_full, worker, own[idx(worker)]))
                                   : m.begin_step(x);
      std::vector<double>& p = probs[idx(worker)];
      attention.attend(idx(k), x, cache, p, worker);
      if (opt.observe) opt.observe(idx(k), i, cache);
      StepFigures& f = figures[idx(k)][idx(i)];
      f.cache_len = static_cast<int64_t>(cache.size());
      mass_recall(p_full, row_sum, x, cache, recall[idx(worker)], f);
      const std::vector<int64_t> gone = m.end_step(p);
      f.evicted = gone.empty() ? -1 : gone.front();
      f.held = static_cast<int64_t>(m.cache().size());
    };
    parallel_for(R, workers, step);  // inline, in run order, for one worker
    attention.end_position(x);
    if (opt.progress) opt.progress(i + 1, N);
  }
  return figures;
}

}  // namespace mla
