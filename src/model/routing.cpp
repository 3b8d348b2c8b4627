// src/model/routing.cpp — one token's MoE routing (mla/model.hpp route_token; docs/math.md
// §15.2), for both router families, shared by the reference and the CPU forward.
//
// transformers:
//   DeepseekV3TopkRouter  scores = sigmoid(logits); choice = scores + e_score_correction_bias
//                         group score = sum of the group's top 2 choice values; keep topk_group groups
//                         experts = top k of choice in them; w = scores[experts]
//                         w /= (sum w + 1e-20) if norm_topk_prob; w *= routed_scaling_factor
//   DeepseekV2TopkRouter  scores = softmax(logits) (fp32)
//                         greedy: experts = top k of scores
//                         group_limited_greedy: group score = the group's max score; keep topk_group
//                         groups (the others' scores masked to 0); experts = top k of scores
//                         w = scores[experts] * routed_scaling_factor (never normalised)
// Ties go to the lower index (torch.topk leaves them unspecified).
//
// Arithmetic: in T (float, or double for the reference), each result passed through `round`
// (identity, or rounding to fp32 so that double reproduces fp32's correctly rounded ops).
//
// Shape legend: E = n_routed_experts, G = n_group, k = num_experts_per_tok.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "mla/model.hpp"

namespace mla {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

// The score of each group, by the family's rule.
template <class T, class Round>
std::vector<T> group_scores(const T* choice, const ModelConfig& cfg, Round round) {
  const int64_t G = cfg.n_group, per = cfg.experts_per_group();
  const bool top2 = cfg.topk_method == "noaux_tc";
  std::vector<T> score(idx(G));
  for (int64_t g = 0; g < G; ++g) {
    T first = -std::numeric_limits<T>::infinity(), second = first;
    for (int64_t j = 0; j < per; ++j) {
      const T v = choice[g * per + j];
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    score[idx(g)] = top2 ? round(first + second) : first;
  }
  return score;
}

template <class T, class Round>
std::vector<int32_t> select(const T* choice, const ModelConfig& cfg, Round round) {
  const int64_t E = cfg.n_routed_experts, per = cfg.experts_per_group();
  std::vector<char> allowed(idx(E), 1);
  if (cfg.topk_method != "greedy") {
    const std::vector<T> score = group_scores(choice, cfg, round);
    // the topk_group best groups (ties: lower group index)
    std::vector<int64_t> groups(idx(cfg.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) { return score[idx(a)] > score[idx(b)]; });
    std::fill(allowed.begin(), allowed.end(), 0);
    for (int64_t i = 0; i < cfg.topk_group; ++i)
      for (int64_t j = 0; j < per; ++j) allowed[idx(groups[idx(i)] * per + j)] = 1;
  }
  // the k best experts of the allowed ones (ties: lower expert index)
  std::vector<int32_t> experts;
  for (int64_t e = 0; e < E; ++e)
    if (allowed[idx(e)]) experts.push_back(static_cast<int32_t>(e));
  std::stable_sort(experts.begin(), experts.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
  experts.resize(idx(cfg.num_experts_per_tok));
  std::sort(experts.begin(), experts.end());
  return experts;
}

// scores [E]: sigmoid (V3) or softmax (V2) of the logits, each value through `round`.
template <class T, class Round>
std::vector<T> router_scores(const T* logits, const ModelConfig& cfg, Round round) {
  const int64_t E = cfg.n_routed_experts;
  std::vector<T> scores(idx(E));
  if (cfg.scoring_func == "sigmoid") {
    for (int64_t e = 0; e < E; ++e) scores[idx(e)] = round(T(1) / (T(1) + std::exp(-static_cast<double>(logits[e]))));
    return scores;
  }
  // softmax as torch's last-dim kernel: exp(x - max), their sum, times its reciprocal
  T max = logits[0];
  for (int64_t e = 1; e < E; ++e) max = std::max(max, logits[e]);
  T sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    scores[idx(e)] = round(static_cast<T>(std::exp(static_cast<double>(round(logits[e] - max)))));
    sum = round(sum + scores[idx(e)]);
  }
  const T inverse = round(T(1) / sum);
  for (int64_t e = 0; e < E; ++e) scores[idx(e)] = round(scores[idx(e)] * inverse);
  return scores;
}

template <class T, class Round>
TokenRoute<T> route(const T* logits, const float* correction_bias, const ModelConfig& cfg, Round round, T epsilon) {
  const int64_t E = cfg.n_routed_experts, k = cfg.num_experts_per_tok;
  const std::vector<T> scores = router_scores(logits, cfg, round);
  std::vector<T> choice = scores;
  if (cfg.router_has_correction_bias())
    for (int64_t e = 0; e < E; ++e) choice[idx(e)] = round(scores[idx(e)] + static_cast<T>(correction_bias[e]));
  TokenRoute<T> r;
  r.experts = select(choice.data(), cfg, round);
  T sum = 0;
  for (int64_t j = 0; j < k; ++j) sum = round(sum + scores[idx(r.experts[idx(j)])]);
  const T denominator = round(sum + epsilon);
  const T scaling = round(static_cast<T>(cfg.routed_scaling_factor));
  r.weights.resize(idx(k));
  for (int64_t j = 0; j < k; ++j) {
    T w = scores[idx(r.experts[idx(j)])];
    if (cfg.norm_topk_prob) w = round(w / denominator);
    r.weights[idx(j)] = round(w * scaling);
  }
  return r;
}

double to_fp32(double v) { return static_cast<double>(static_cast<float>(v)); }

}  // namespace

TokenRoute<float> route_token(const float* logits, const float* correction_bias, const ModelConfig& cfg) {
  return route(logits, correction_bias, cfg, [](float v) { return v; }, 1e-20f);
}

TokenRoute<double> route_token(const double* logits, const float* correction_bias, const ModelConfig& cfg, bool fp32) {
  if (fp32) return route(logits, correction_bias, cfg, to_fp32, static_cast<double>(1e-20f));
  return route(logits, correction_bias, cfg, [](double v) { return v; }, 1e-20);
}

}  // namespace mla
