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
  int64_t rows_per_layer = 0;  // P + (R + 1) N
  double total() const { return linear + attention + head; }
};
EvalCost eval_cost(const ModelConfig& cfg, const EvalOptions& opt);

// The rate eval's own arithmetic runs at here, measured before the run: the fixed-order engine
// (src/cpu/fixed_order.hpp) on one [64, H] x [H, H]^T product of the model's width, best of 2,
// with `threads` workers (0 = all cores); about 0.1-0.3 s at H = 7168. FLOP/s.
double measured_eval_rate(int64_t hidden_size, int threads);
// "7.73 TFLOP (linear 7.64, attention 0.057, lm_head 0.034): about 4.6 min at the 28 GFLOP/s this
// machine's fixed-order kernels measure" — the plan eval prints before any work.
std::string eval_cost_line(const EvalCost& c, double flops_per_second);

}  // namespace mla
