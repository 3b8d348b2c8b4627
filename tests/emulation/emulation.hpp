// tests/emulation/emulation.hpp — what the tests can see and steer of the emulated device.
//
// host_runtime.cpp implements, on the host, the subset of the CUDA runtime and cuBLAS that
// cuda/cuda_backend.cpp calls (same names and signatures: it is compiled against the real
// headers). "Device" memory is host memory the runtime hands out and tracks; streams execute
// eagerly; events read a steady clock; GEMMs are a plain column-major loop with fp32
// accumulation and one rounding of each output to the C type, as the cuBLAS contract with
// CUBLAS_COMPUTE_32F states (TF32 mode rounds the inputs to TF32 first). Every argument is
// validated as cuBLAS documents it, and every pointer a copy or GEMM touches must lie inside
// one live allocation, so a wrong leading dimension, stride or workspace offset fails loudly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mla::emulation {

struct Counters {
  int64_t kernel_launches = 0;   // MLA_LAUNCH calls, rejected ones included
  int64_t gemm_calls = 0;        // cublasGemmEx
  int64_t host_syncs = 0;        // calls that block the host on the device: cudaStreamSynchronize,
                                 // cudaDeviceSynchronize, cudaMemcpy (synchronous copy)
  int64_t async_copies = 0;      // cudaMemcpyAsync
  int64_t mallocs = 0, frees = 0;
  int64_t bytes_in_use = 0;      // device bytes allocated now
  int64_t bytes_high_water = 0;  // the most ever allocated at once since reset_counters()
  int64_t live_streams = 0, live_events = 0, live_handles = 0;
  // Stream ordering as a real device sees it: a synchronous host-to-device cudaMemcpy runs on
  // the legacy default stream and, from pageable memory, may return before its data has
  // landed; a stream created with cudaStreamNonBlocking is not ordered after it. Until a
  // cudaDeviceSynchronize (or a synchronisation of the legacy stream) every launch, GEMM or
  // async copy on a non-blocking stream counts here (it may read the copy's destination early).
  int64_t stream_order_hazards = 0;
};
Counters counters();
void reset_counters();  // zeroes the call counts and sets the high-water mark to bytes_in_use

// The device the runtime reports (default: 1 device of compute capability 9.0).
void set_devices(int count, int cc_major, int cc_minor);

// Fault injection: the n-th call from now (1 = the next one) fails with an out-of-memory
// error (cudaMalloc) or CUBLAS_STATUS_EXECUTION_FAILED (GEMMs); 0 disarms.
void fail_nth_malloc(int64_t n);
void fail_nth_gemm(int64_t n);

}  // namespace mla::emulation
