// src/eval/eval_cost.cpp — the FLOP count of an eval (mla/eval_cost.hpp, docs/eval.md §9).
#include "mla/eval_cost.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "mla/memory_plan.hpp"
#include "mla/random.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/fixed_order.hpp"

namespace mla {

double layer_linear_flops(const ModelConfig& cfg, bool moe) {
  const double H = static_cast<double>(cfg.attention.hidden_size);
  const double attention = static_cast<double>(attention_parameter_count(cfg.attention));
  double mlp = 3.0 * H * static_cast<double>(cfg.intermediate_size);  // gate, up, down
  if (moe) {
    const double experts = static_cast<double>(cfg.num_experts_per_tok + cfg.n_shared_experts);
    mlp = H * static_cast<double>(cfg.n_routed_experts) + experts * 3.0 * H * static_cast<double>(cfg.moe_intermediate_size);
  }
  return 2.0 * (attention + mlp);
}

double attention_flops_per_key(const AttentionConfig& cfg) {
  return 2.0 * static_cast<double>(cfg.num_attention_heads) * static_cast<double>(cfg.qk_head_dim() + cfg.v_head_dim);
}

EvalCost eval_cost(const ModelConfig& cfg, const EvalOptions& opt) {
  const AttentionConfig& a = cfg.attention;
  const double P = static_cast<double>(opt.prompt_len), N = static_cast<double>(opt.steps);
  const int64_t policies = evicting_policy_count(opt.policies);
  EvalCost c;
  c.runs = 1 + policies * static_cast<int64_t>(opt.budgets.size());
  c.rows_per_layer = opt.prompt_len + c.runs * opt.steps;
  // keys attended by one layer's rows, summed over the prompt and every run's steps
  double keys = P * (P + 1) / 2 + (N * P + N * (N + 1) / 2);  // the prompt rows, the full run
  for (const int64_t K : opt.budgets)
    for (int64_t i = 0; i < opt.steps; ++i) {
      const double attended = opt.compress == Compression::Prefill
                                  ? static_cast<double>(std::min(opt.prompt_len, K) + i + 1)
                                  : static_cast<double>(std::min(opt.prompt_len + i + 1, K + 1));
      keys += static_cast<double>(policies) * attended;
    }
  for (int64_t L = 0; L < a.num_hidden_layers; ++L) {
    c.linear += static_cast<double>(c.rows_per_layer) * layer_linear_flops(cfg, cfg.is_moe_layer(L));
    c.attention += keys * attention_flops_per_key(a);
  }
  c.head = static_cast<double>(c.runs) * N * 2.0 * static_cast<double>(a.vocab_size) * static_cast<double>(a.hidden_size);
  return c;
}

double measured_eval_rate(int64_t hidden_size, int threads) {
  const int64_t H = std::max<int64_t>(hidden_size, 64), rows = 64;
  Rng rng(17, 3);
  std::vector<float> w(static_cast<size_t>(H * H));
  for (float& v : w) v = static_cast<float>(rng.normal());
  cpu::MatrixRM x(rows, H), y;
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(rng.normal());
  const cpu::FixedOrderLinear linear(w.data(), H, H, nullptr, true);
  const int workers = cpu::resolve_threads(threads);
  double best = 0;
  for (int r = 0; r < 2; ++r) {
    y.resize(rows, H);
    const auto t0 = std::chrono::steady_clock::now();
    linear.run_rows(x.data(), rows, H, y.data(), H, workers);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(rows) * static_cast<double>(H) * static_cast<double>(H) / s);
  }
  return best;
}

std::string eval_cost_line(const EvalCost& c, double flops_per_second) {
  char text[256];
  const double seconds = flops_per_second > 0 ? c.total() / flops_per_second : 0;
  char when[64];
  if (seconds < 120) std::snprintf(when, sizeof when, "%.0f s", seconds);
  else if (seconds < 7200) std::snprintf(when, sizeof when, "%.1f min", seconds / 60);
  else std::snprintf(when, sizeof when, "%.1f h", seconds / 3600);
  std::snprintf(text, sizeof text,
                "%.3g TFLOP (linear %.3g, attention %.3g, lm_head %.3g): about %s at the %.0f GFLOP/s this "
                "machine's fixed-order kernels measure",
                c.total() / 1e12, c.linear / 1e12, c.attention / 1e12, c.head / 1e12, when, flops_per_second / 1e9);
  return text;
}

}  // namespace mla
