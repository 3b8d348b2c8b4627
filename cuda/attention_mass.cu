// cuda/attention_mass.cu — the H2O statistic: attention mass each key receives, per head.
//
// Equation (H2O, Zhang et al. 2023, accumulated attention score), for head h and key t:
//   head_scores[h, t] = sum_{s = 0}^{S-1} p[h, s, t]     summed in double, s ascending
// PyTorch:  head_scores = attn_weights[0].double().sum(dim=1)      # [n, T]
//           token_scores = head_scores.sum(dim=0)                  # [T] (done on the host)
// p is the stored probability (bf16 in bf16 mode: exactly the attn_weights HF returns).
// No atomics: one thread owns one (h, t) column and adds its S values in a fixed order, so the
// result is bit-identical run to run. Adjacent threads read adjacent t (coalesced).
//
// Shapes: probs [n, S, T]; head_scores [n, T] (double). One thread per column (n*T threads).
#include "cuda/kernels.hpp"
#include "cuda/device_math.cuh"
#include "cuda/launch_geometry.hpp"

namespace mla::cuda {
namespace {

template <class T>
__global__ void attention_mass_kernel(const T* probs, double* head_scores, int64_t heads, int64_t S, int64_t keys) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // = h * T + t
  if (col >= heads * keys) return;
  const int64_t h = col / keys, t = col % keys;
  const T* p = probs + h * S * keys + t;  // p[h, 0, t]
  double acc = 0.0;
  for (int64_t s = 0; s < S; ++s) acc += static_cast<double>(load(p + s * keys));
  head_scores[col] = acc;
}

template <class T>
cudaError_t launch(const void* probs, double* head_scores, int64_t heads, int64_t queries, int64_t keys,
                   cudaStream_t stream) {
  const LaunchShape ls = column_launch(heads * keys);
  if (ls.grid == 0) return cudaSuccess;
  MLA_LAUNCH(attention_mass_kernel<T>, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block), 0, stream)(
      static_cast<const T*>(probs), head_scores, heads, queries, keys);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_mass(Storage st, const void* probs, double* head_scores, int64_t heads,
                                  int64_t queries, int64_t keys, cudaStream_t stream) {
  return st == Storage::BF16 ? launch<__nv_bfloat16>(probs, head_scores, heads, queries, keys, stream)
                             : launch<float>(probs, head_scores, heads, queries, keys, stream);
}

}  // namespace mla::cuda
