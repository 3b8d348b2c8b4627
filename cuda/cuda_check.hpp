// cuda/cuda_check.hpp — every CUDA runtime / cuBLAS status becomes Error(Cuda) naming the
// failing call (its source text), file:line, the code's name and its description.
//   MLA_CUDA_CHECK(cudaMalloc(&p, n));   MLA_CUBLAS_CHECK(cublasCreate(&h));
// Host C++ only (compiled with cuda_dep); message wording lives in error_text.hpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/error_text.hpp"
#include "mla/error.hpp"

namespace mla::cuda {

// A failed runtime call also leaves its code as the thread's "last error", which the next
// cudaGetLastError() returns: the launch check after the next kernel would then report this
// old failure as its own. So the error is read and cleared here, before throwing (a sticky
// error — a crashed context — stays, and every later call reports it).
inline void clear_last_error() { static_cast<void>(cudaGetLastError()); }

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  clear_last_error();
  fail(ErrorKind::Cuda, failure_message(call, file, line, static_cast<int>(status), cudaGetErrorName(status),
                                        cudaGetErrorString(status)));
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(ErrorKind::Cuda, failure_message(call, file, line, static_cast<int>(status), cublasGetStatusName(status),
                                        cublasGetStatusString(status)));
}

}  // namespace mla::cuda

#define MLA_CUDA_CHECK(call) ::mla::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define MLA_CUBLAS_CHECK(call) ::mla::cuda::check_cublas((call), #call, __FILE__, __LINE__)
