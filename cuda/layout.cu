// cuda/layout.cu — small layout kernels.
//
// broadcast_rows:  out[r, c] = bias[c]
//   Used before a Linear with bias: the GEMM then runs with beta = 1, so y = round_T(x.W^T + b)
//   is rounded ONCE, as PyTorch's addmm (F.linear with bias) does.
// PyTorch:  out = bias.expand(rows, cols).clone()
// Shapes: bias [cols], out [rows, cols]. One thread per output element.
// (The other layout steps of the forward — the [S, n, d] -> [n, S, d] transposes and the splits
// and concatenations — are folded into rope.cu and into the P.V GEMM's output stride.)
#include "cuda/kernels.hpp"
#include "cuda/device_math.cuh"
#include "cuda/launch_geometry.hpp"

namespace mla::cuda {
namespace {

template <class T>
__global__ void broadcast_rows_kernel(const T* bias, T* out, int64_t rows, int64_t cols) {
  const int64_t count = rows * cols;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x)
    out[idx] = bias[idx % cols];
}

template <class T>
cudaError_t launch(const void* bias, void* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const LaunchShape ls = elementwise_launch(rows * cols);
  if (ls.grid == 0) return cudaSuccess;
  MLA_LAUNCH(broadcast_rows_kernel<T>, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block), 0, stream)(
      static_cast<const T*>(bias), static_cast<T*>(out), rows, cols);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_broadcast_rows(Storage st, const void* bias, void* out, int64_t rows, int64_t cols,
                                  cudaStream_t stream) {
  return st == Storage::BF16 ? launch<__nv_bfloat16>(bias, out, rows, cols, stream)
                             : launch<float>(bias, out, rows, cols, stream);
}

}  // namespace mla::cuda
