// src/math/latent_cache.cpp — the latent cache rows every backend exports (mla/attention.hpp
// latent_cache_rows; docs/decode.md §1): kv_a_layernorm(c) | roped k_pe per token.
#include <algorithm>

#include "mla/attention.hpp"

namespace mla {
namespace {

template <class T>
TensorD rows(const T* latent_normed, const T* k_pe_roped, int64_t S, int64_t r_kv, int64_t d_r) {
  TensorD cache("latent_cache", {S, r_kv + d_r});  // [S, r_kv + d_r]
  for (int64_t s = 0; s < S; ++s) {
    double* row = cache.ptr() + s * (r_kv + d_r);
    std::copy(latent_normed + s * r_kv, latent_normed + (s + 1) * r_kv, row);
    std::copy(k_pe_roped + s * d_r, k_pe_roped + (s + 1) * d_r, row + r_kv);
  }
  return cache;
}

}  // namespace

TensorD latent_cache_rows(const float* latent_normed, const float* k_pe_roped, int64_t S, int64_t r_kv, int64_t d_r) {
  return rows(latent_normed, k_pe_roped, S, r_kv, d_r);
}

TensorD latent_cache_rows(const double* latent_normed, const double* k_pe_roped, int64_t S, int64_t r_kv, int64_t d_r) {
  return rows(latent_normed, k_pe_roped, S, r_kv, d_r);
}

}  // namespace mla
