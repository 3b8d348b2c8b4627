// mla/step_loop.hpp — the one decode step loop: a set of runs, each with its own CacheManager
// (mla/policy.hpp), stepped through the decode positions x = P .. P+N-1 of one layer. `decode`
// (one layer, DecodeKernel) and `eval` (every layer, its row attention) both call it; what
// differs between them is only how attention is computed (StepAttention).
//
//   for x = P .. P+N-1:
//     attention.begin_position(x)
//     p_full = attention.full(x)                           [n, x+1] the full cache's attention
//     every run k (in parallel when threads > 1):
//       cache = manager_k.begin_step(x [, the full attention its own query gives: oracle])
//       p = attention.attend(k, x, cache)                  [n, |cache|]
//       mass recall of the cache under p_full (per head, then mean / worst / 5th percentile)
//       manager_k.end_step(p)                              evicts down to its budget
//     attention.end_position(x)
//
// A run reads only its own manager and its own attention: its figures do not depend on the
// other runs or on how many workers step them.
//
// Shape legend: n heads, P prompt rows, N steps, x position, m = |cache|.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "mla/policy.hpp"

namespace mla {

// One run at one decode step.
struct StepFigures {
  int64_t cache_len = 0;        // tokens the query attended over (x included)
  int64_t held = 0;             // tokens held after the step's eviction
  int64_t evicted = -1;         // the first position evicted after the step (-1: none)
  double mass_recall = 1;       // mean over heads of sum_{t in cache} p_full[h, t] / sum_t p_full[h, t]
  double mass_recall_min = 1;   // the worst head's
  double mass_recall_p5 = 1;    // the 5th percentile over heads (nearest rank)
};

// How the attention of one layer is computed for the step loop.
class StepAttention {
 public:
  virtual ~StepAttention() = default;
  virtual void begin_position(int64_t x) { (void)x; }
  // probs [n, x+1]: the full cache's attention at x (the full run's, whose output it also keeps).
  virtual void full(int64_t x, std::vector<double>& probs) = 0;
  // The attention run `run`'s own query gives every token at x (for a manager that
  // needs_full_attention: the oracle). Default: the full run's (one layer: every run has x's query).
  virtual std::span<const double> own_full(size_t run, int64_t x, std::span<const double> p_full, int worker,
                                           std::vector<double>& scratch) {
    (void)run, (void)x, (void)worker, (void)scratch;
    return p_full;
  }
  // probs [n, |cache|]: run `run`'s attention at x over `cache` (and its output). `worker` < the
  // loop's threads: a worker's buffers are its own.
  virtual void attend(size_t run, int64_t x, std::span<const int64_t> cache, std::vector<double>& probs, int worker) = 0;
  virtual void end_position(int64_t x) { (void)x; }
};

struct StepLoopOptions {
  int64_t prompt_len = 0;  // P
  int64_t steps = 0;       // N
  int64_t heads = 0;       // n
  int threads = 1;         // runs stepped at once (1 when the attention is not thread-safe)
  std::function<void(int64_t done, int64_t total)> progress;              // after each position
  std::function<void(size_t run, int64_t step, std::span<const int64_t> cache)> observe;  // each attended cache
};

// figures[k][i]: run k at step i. Every manager has had its prefill().
std::vector<std::vector<StepFigures>> run_steps(std::span<CacheManager* const> managers, StepAttention& attention,
                                                const StepLoopOptions& opt);

}  // namespace mla
