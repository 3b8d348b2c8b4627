// cuda/device_math.cuh — the storage types of the kernels and where they round.
//
// Every kernel is a template over the activation storage type:
//   float          fp32 mode: storing is exact, round_to_storage() is the identity;
//   __nv_bfloat16  bf16 mode: storing rounds an fp32 value to bf16, round to nearest even
//                  (__float2bfloat16_rn = cvt.rn.bf16.f32; equal to mla::bf16::round_bits for
//                  every non-NaN input; a NaN stays a NaN), loading widens exactly.
// Arithmetic is always fp32 (PyTorch's "opmath" type for bf16 elementwise ops), so one HF
// bf16 elementwise op `c = a (op) b` is `round_to_storage<T>(load(a) (op) load(b))`.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

// The two places where a kernel file touches CUDA-only syntax go through macros, so that the
// same .cu text also compiles as plain C++ under the host SIMT emulator (tests/emulation,
// which defines MLA_SIMT_EMULATION and its own versions of both before including a .cu file):
//   MLA_DYNAMIC_SHARED(float, buf);            extern __shared__ float buf[];
//   MLA_LAUNCH(k, grid, block, smem, st)(args) k<<<grid, block, smem, st>>>(args)
#ifndef MLA_SIMT_EMULATION
#define MLA_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#define MLA_LAUNCH(kernel, grid, block, shared_bytes, stream) kernel<<<grid, block, shared_bytes, stream>>>
#endif

namespace mla::cuda {

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// The value an fp32 result has once written to a T tensor (PyTorch: `.to(dtype)`).
template <class T>
__device__ __forceinline__ float round_to_storage(float v);
template <>
__device__ __forceinline__ float round_to_storage<float>(float v) { return v; }
template <>
__device__ __forceinline__ float round_to_storage<__nv_bfloat16>(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// Deterministic block-wide sum/max: every thread contributes one value, the tree halves a
// power-of-two block (launch_geometry.hpp row_block_size), thread 0's slot holds the result.
// `shared` has blockDim.x floats. Returns the result to every thread.
__device__ __forceinline__ float block_reduce_sum(float v, float* shared) {
  const unsigned tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (tid < half) shared[tid] = shared[tid] + shared[tid + half];
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();  // shared[] may be reused by the next reduction
  return r;
}

__device__ __forceinline__ float block_reduce_max(float v, float* shared) {
  const unsigned tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (tid < half) shared[tid] = fmaxf(shared[tid], shared[tid + half]);
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

}  // namespace mla::cuda
