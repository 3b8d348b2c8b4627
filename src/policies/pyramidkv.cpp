// src/policies/pyramidkv.cpp — `pyramidkv`: PyramidKV (Cai et al., 2024) as kvpress's
// PyramidKVPress: SnapKV's scores (snapkv.cpp) with a budget per layer that falls linearly from
// the first layer to the last and averages K.
//
//   pyramid_budget(l of L, K, w, beta, P): min = K / beta, max = 2K - min;
//     if max >= P - w: max = P - w, min = 2K - max;
//     unless P >= max >= min >= w (else K: SnapKV's budget): round(max - l (max - min) / (L - 1))
//   Settings: window 64, pool avg5, heads=mean (as snapkv), beta 20.
#include <cmath>

#include "src/policies/policy_entry.hpp"

namespace mla {

int64_t pyramid_budget(int64_t layer, int64_t num_layers, int64_t K, int64_t window, int64_t beta, int64_t P) {
  if (num_layers < 1 || layer < 0 || layer >= num_layers || K < 1 || window < 0 || beta < 1)
    policies::bad("pyramid_budget: layer " + std::to_string(layer) + " of " + std::to_string(num_layers) + ", budget " +
                  std::to_string(K) + ", window " + std::to_string(window) + ", beta " + std::to_string(beta) +
                  " out of range");
  if (num_layers == 1) return K;
  const double k = static_cast<double>(K), w = static_cast<double>(window), p = static_cast<double>(P);
  double min_num = k / static_cast<double>(beta), max_num = 2.0 * k - min_num;
  if (max_num >= p - w) {
    max_num = p - w;
    min_num = 2.0 * k - max_num;
  }
  if (!(p >= max_num && max_num >= min_num && min_num >= w)) return K;  // infeasible: SnapKV's budget
  const double steps = (max_num - min_num) / static_cast<double>(num_layers - 1);
  return static_cast<int64_t>(std::nearbyint(max_num - static_cast<double>(layer) * steps));
}

namespace policies {

PolicyEntry pyramidkv_entry() {
  PolicyEntry e = snapkv_entry();
  e.name = "pyramidkv";
  e.keys.push_back("beta");
  e.scorer = false;  // its budget is set per layer: no wrapper's inner press  // snapkv's settings, and the pyramid's steepness
  // the pyramid's smallest budget may equal the window it protects (min = 2K - (P - w) = w): a
  // cache that holds only what it never evicts has no choice left, so it gets one token more
  e.layer_budget = [](const PolicySettings& s, int64_t K, int64_t layer, int64_t num_layers, int64_t P) {
    const int64_t pyramid = pyramid_budget(layer, num_layers, K, s.window, s.beta, P);
    return pyramid > protected_tokens(s, K) ? pyramid : protected_tokens(s, K) + 1;
  };
  return e;
}

}  // namespace policies
}  // namespace mla
