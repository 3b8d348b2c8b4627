// mla/eval_cost.hpp — what an `mla-h2o eval` costs, counted from the config before any work
// (docs/eval.md §9): the floating-point operations of every layer of every run, and the
// per-token-layer counts of the cost table.
//
// Counted as eval computes (mla/eval.hpp): per layer, the P prompt rows once (shared by every
// run), then N decode rows for each of the R + 1 runs (R = policies other than full × budgets, +
// the full run); a multiply-add is 2 FLOPs. Per row and layer:
//   linear     2 × (the attention's projection weights + the MLP's active weights): a dense layer
//              3·H·I, a MoE layer the router E·H and (k + n_shared) experts of 3·H·I_m
//   attention  2 · n · (d_qk + d_v) per key the row attends (scores and the weighted values)
// Keys attended: prompt row x: x + 1; decode step i of the full run: P + i + 1; of a policy at
// budget K: min(P + i + 1, K + 1) (--compress decode) or min(P, K) + i + 1 (prefill).
// Then lm_head on the N rows of every run: 2 · V · H each.
//
// The time eval prints before the work (eval_time) adds the parts outside those products, each
// from its count here and a rate measured on this machine just before (measure_eval_rates): the
// attention per (row, key), one row at a time for the windowed policies' prompt queries and
// side by side for the prompt rows, the runs and the full run's row (its heads split); the step loop's policy work
// per (run, key); each run's prefill of its manager; loading and packing per weight element.
// docs/eval.md §9 compares it with measured times.
//
// Shape legend: P = prompt_len, N = steps, H = hidden_size, I = intermediate_size, I_m =
//   moe_intermediate_size, E = n_routed_experts, k = num_experts_per_tok, V = vocab_size.
#pragma once

#include <cstdint>

#include "mla/eval.hpp"
#include "mla/model.hpp"

namespace mla {

// FLOPs of one token through one layer's weights (no attention over keys).
double layer_linear_flops(const ModelConfig& cfg, bool moe);
// FLOPs of one query row per key it attends, in one layer.
double attention_flops_per_key(const AttentionConfig& cfg);

struct EvalCost {
  double linear = 0;     // every layer's projections and MLPs, all rows
  double attention = 0;  // every layer's scores and weighted values
  double head = 0;       // lm_head of every run's decode rows
  int64_t runs = 0;      // R + 1 (the full run included)
  int64_t rows_per_layer = 0;  // P + (R + 1) N, + kvzip's repeat rows
  double total() const { return linear + attention + head; }
  // for the time (summed over the layers): (query row, key) pairs attended
  double prompt_keys = 0;  // the prompt rows' (rows side by side)
  double full_keys = 0;    // the full run's decode rows (one row per step, its heads over the workers)
  double run_keys = 0;     // the policies' decode rows, and the oracle's full attention (runs side by side)
  double window_keys = 0;  // the prompt queries each windowed policy's run attends again (one at a time)
  double run_layers = 0;   // (policy run, layer) pairs: each prefills its manager
  double features = 0;     // FLOPs of the token features' products, for the runs whose policy reads them
  double weights = 0;      // weight elements loaded and packed (every routed expert of a MoE layer, lm_head)
  double int4_weights = 0; // of those, stored as INT4 (the routed experts of a quantized checkpoint)
  EvalCost& operator+=(const EvalCost& o);  // the costs of several windows, added
};
EvalCost eval_cost(const ModelConfig& cfg, const EvalOptions& opt);

// What the parts outside the products cost on this machine, measured just before the run on the
// model's widths with synthetic values (about 0.1-0.5 s): the estimate's rates.
struct EvalRates {
  int threads = 1;          // the run's --threads, resolved
  double gemm = 0;          // FLOP/s of the fixed-order engine on [rows, H] x [H, H]^T, `threads` workers
  double key_alone = 0;     // seconds per (row, key) of cpu::attend_row, one row at a time
  double key_parallel = 0;  // seconds per (row, key) with `threads` rows at once (sharing the keys)
  double step_key = 0;      // seconds per (run, key) of the step loop besides the attention (the
                            //   policies' scores and evictions, the mass recall), the job's policies
  double run_prefill = 0;   // seconds per (run, layer): a manager reads the prompt (window, cut)
  double weight = 0;        // seconds per weight element read, converted and packed
  double int4_weight = 0;   // seconds per INT4 element dequantized (besides `weight`)
};
EvalRates measure_eval_rates(const ModelConfig& cfg, const EvalOptions& opt, int threads);
// EvalRates::gemm alone: FLOP/s of the fixed-order engine on [rows, H] x [H, H]^T with `threads`
// workers, the median of 3 probes of about 1 GFLOP each (run, sweep and decode's --max-hours).
double measure_gemm_rate(int64_t hidden_size, Precision precision, int threads);

// The estimate, seconds per part.
struct EvalTime {
  double products = 0;   // (linear + lm_head + features) / gemm
  double attention = 0;  // every (row, key) at key_alone or key_parallel
  double policies = 0;   // run_keys * step_key + run_layers * run_prefill
  double loading = 0;    // weights * weight + int4_weights * int4_weight
  double total() const { return products + attention + policies + loading; }
};
// `workers` windows at once, each with the threads `r` was measured with (cmd_eval: --threads /
// workers): the parts divided by them.
EvalTime eval_time(const EvalCost& c, const EvalRates& r, int64_t workers = 1);
// "7.73 TFLOP (linear 7.64, attention 0.057, lm_head 0.034): about 4.6 min (products 3.9 min at
// the 33 GFLOP/s this machine's fixed-order kernels measure, attention 30 s, policies 2 s, loading
// 15 s)" — the plan eval prints before any work.
std::string eval_cost_line(const EvalCost& c, const EvalTime& t, const EvalRates& r);

}  // namespace mla
