// cuda/rms_norm.cu — RMSNorm of the latent vectors (q_a_layernorm, kv_a_layernorm).
//
// Equation (docs/math.md §3.5, HF DeepseekV3RMSNorm = LlamaRMSNorm), per row x of length dim:
//   var = mean(x32^2)                    fp32, deterministic tree sum (device_math.cuh)
//   y   = x32 * (1 / sqrt(var + eps))    fp32
//   yb  = round_T(y)                     bf16 rounding #1 (`.to(input_dtype)`), identity in fp32
//   out = round_T(w32 * yb)              bf16 rounding #2 (bf16 weight times bf16 activation)
// PyTorch:  h = x.float(); h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps);
//           out = weight * h.to(x.dtype)
// PyTorch's CUDA rsqrt is an approximate rsqrtf; this kernel uses the correctly rounded
// 1/sqrtf (no fast-math flags) so that it matches the CPU backends' fp32 arithmetic.
//
// Shapes: x [rows, dim] with row stride x_row_stride (the latent c is the first r_kv columns
// of ckv [S, r_kv + d_r]); weight [dim]; out [rows, dim] contiguous. One block per row.
#include "cuda/kernels.hpp"
#include "cuda/device_math.cuh"
#include "cuda/launch_geometry.hpp"

namespace mla::cuda {
namespace {

template <class T>
__global__ void rms_norm_kernel(const T* x, int64_t x_row_stride, const T* weight, T* out, int64_t dim,
                                float eps) {
  MLA_DYNAMIC_SHARED(float, shared);  // [blockDim.x]
  const int64_t row = blockIdx.x;
  const T* xr = x + row * x_row_stride;
  T* outr = out + row * dim;

  // pass 1: sum of squares, each thread over a strided subset, then the tree.
  float partial = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = load(xr + i);
    partial += v * v;
  }
  const float sum_sq = block_reduce_sum(partial, shared);
  const float var = sum_sq / static_cast<float>(dim);
  const float inv_rms = 1.0f / sqrtf(var + eps);

  // pass 2: normalise, round, weight, round.
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float yb = round_to_storage<T>(load(xr + i) * inv_rms);
    store(outr + i, load(weight + i) * yb);
  }
}

template <class T>
cudaError_t launch(const void* x, int64_t x_row_stride, const void* weight, void* out, int64_t rows, int64_t dim,
                   float eps, cudaStream_t stream) {
  const LaunchShape ls = row_launch(rows, dim);
  if (ls.grid == 0) return cudaSuccess;
  MLA_LAUNCH(rms_norm_kernel<T>, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block),
             static_cast<size_t>(ls.block) * sizeof(float), stream)(
      static_cast<const T*>(x), x_row_stride, static_cast<const T*>(weight), static_cast<T*>(out), dim, eps);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm(Storage st, const void* x, int64_t x_row_stride, const void* weight, void* out,
                            int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  return st == Storage::BF16 ? launch<__nv_bfloat16>(x, x_row_stride, weight, out, rows, dim, eps, stream)
                             : launch<float>(x, x_row_stride, weight, out, rows, dim, eps, stream);
}

}  // namespace mla::cuda
