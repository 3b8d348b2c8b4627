// src/whole_model/routing.cpp — the group-limited top-k of DeepseekV3TopkRouter for one token
// (mla/model.hpp select_experts; docs/math.md §15.2), shared by the reference and the CPU forward.
//
// Shape legend: E = n_routed_experts, G = n_group, k = num_experts_per_tok.
#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "mla/model.hpp"

namespace mla {
namespace {
size_t idx(int64_t i) { return static_cast<size_t>(i); }
}  // namespace

template <class T>
std::vector<int32_t> select_experts(const T* choice, const ModelConfig& cfg) {
  const int64_t E = cfg.n_routed_experts, G = cfg.n_group, per = cfg.experts_per_group();
  // group score: the sum of the group's two largest values (in T's arithmetic)
  std::vector<T> group_score(idx(G));
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
    group_score[idx(g)] = static_cast<T>(first + second);
  }
  // the topk_group best groups (ties: lower group index)
  std::vector<int64_t> groups(idx(G));
  std::iota(groups.begin(), groups.end(), 0);
  std::stable_sort(groups.begin(), groups.end(),
                   [&](int64_t a, int64_t b) { return group_score[idx(a)] > group_score[idx(b)]; });
  std::vector<char> allowed(idx(E), 0);
  for (int64_t i = 0; i < cfg.topk_group; ++i)
    for (int64_t j = 0; j < per; ++j) allowed[idx(groups[idx(i)] * per + j)] = 1;
  // the k best experts of those groups (ties: lower expert index)
  std::vector<int32_t> experts;
  for (int64_t e = 0; e < E; ++e)
    if (allowed[idx(e)]) experts.push_back(static_cast<int32_t>(e));
  std::stable_sort(experts.begin(), experts.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
  experts.resize(idx(cfg.num_experts_per_tok));
  std::sort(experts.begin(), experts.end());
  return experts;
}
template std::vector<int32_t> select_experts<float>(const float*, const ModelConfig&);
template std::vector<int32_t> select_experts<double>(const double*, const ModelConfig&);

}  // namespace mla
