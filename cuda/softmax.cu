// cuda/softmax.cu — scale, mask and softmax of the attention scores, in place.
//
// Equations (docs/math.md §3.6 steps 2-4, §7 rows 11-13), for head h, query s, key t:
//   a[t] = round_T(score[t] * scaling)           scaling = fp32(softmax_scale) (PyTorch casts the
//                                                 Python float to the fp32 opmath type)
//   b[t] = round_T(a[t] + mask[s, t])             causal only: mask = 0 if t <= s else mask_value
//                                                 (finfo(bf16).min = -3.3895313892515355e38 in bf16
//                                                  mode, finfo(fp32).min in fp32 mode); no mask: b = a
//   m    = max_t b[t];  z = sum_t exp(b[t] - m)   fp32, deterministic tree reductions
//   p[t] = round_T(exp(b[t] - m) / z)            softmax(dtype=float32) then .to(query.dtype)
// PyTorch (HF eager_attention_forward):
//   attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
//   attn_weights = attn_weights + causal_mask
//   attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
// The score itself was rounded to T when the QK^T GEMM stored it (§7 row 10).
//
// Shapes: scores [n, S, T] (T = S keys), overwritten by the probabilities. One block per row
// (h, s); each thread reads and later writes only its own strided elements of the row, and
// every pass ends in a block reduction (__syncthreads), so the in-place update is safe.
#include "cuda/kernels.hpp"
#include "cuda/device_math.cuh"
#include "cuda/launch_geometry.hpp"

namespace mla::cuda {
namespace {

template <class T>
__device__ __forceinline__ float masked_scaled(const T* row, int64_t t, int64_t s, float scaling, bool causal,
                                               float mask_value) {
  const float a = round_to_storage<T>(load(row + t) * scaling);
  if (!causal) return a;
  return round_to_storage<T>(a + (t <= s ? 0.0f : mask_value));
}

template <class T>
__global__ void scale_mask_softmax_kernel(T* scores, int64_t S, int64_t keys, float scaling, bool causal,
                                          float mask_value) {
  MLA_DYNAMIC_SHARED(float, shared);  // [blockDim.x]
  const int64_t row = blockIdx.x;    // = h * S + s
  const int64_t s = row % S;
  T* r = scores + row * keys;

  // pass 1: row maximum.
  float m = -INFINITY;
  for (int64_t t = threadIdx.x; t < keys; t += blockDim.x) m = fmaxf(m, masked_scaled(r, t, s, scaling, causal, mask_value));
  m = block_reduce_max(m, shared);

  // pass 2: normaliser z = sum exp(b - m).
  float z = 0.0f;
  for (int64_t t = threadIdx.x; t < keys; t += blockDim.x) z += expf(masked_scaled(r, t, s, scaling, causal, mask_value) - m);
  z = block_reduce_sum(z, shared);

  // pass 3: probabilities, rounded to the storage type, written over the scores.
  for (int64_t t = threadIdx.x; t < keys; t += blockDim.x) {
    const float e = expf(masked_scaled(r, t, s, scaling, causal, mask_value) - m);
    store(r + t, e / z);
  }
}

template <class T>
cudaError_t launch(void* scores, int64_t heads, int64_t queries, int64_t keys, float scaling, bool causal,
                   float mask_value, cudaStream_t stream) {
  const LaunchShape ls = row_launch(heads * queries, keys);
  if (ls.grid == 0 || keys == 0) return cudaSuccess;
  MLA_LAUNCH(scale_mask_softmax_kernel<T>, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block),
             static_cast<size_t>(ls.block) * sizeof(float), stream)(
      static_cast<T*>(scores), queries, keys, scaling, causal, mask_value);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_scale_mask_softmax(Storage st, void* scores, int64_t heads, int64_t queries, int64_t keys,
                                      float scaling, bool causal, float mask_value, cudaStream_t stream) {
  return st == Storage::BF16
             ? launch<__nv_bfloat16>(scores, heads, queries, keys, scaling, causal, mask_value, stream)
             : launch<float>(scores, heads, queries, keys, scaling, causal, mask_value, stream);
}

}  // namespace mla::cuda
