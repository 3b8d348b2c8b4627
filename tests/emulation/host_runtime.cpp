// tests/emulation/host_runtime.cpp — the CUDA runtime and cuBLAS calls of cuda_backend.cpp,
// implemented on the host (see emulation.hpp for the contract). Compiled against the real
// <cuda_runtime_api.h> and <cublas_v2.h>, so every signature is checked by the compiler; the
// emulated test program links this file instead of libcudart and libcublas.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <new>
#include <string>

#include "emulation.hpp"
#include "mla/bf16.hpp"
#include "simt.hpp"

namespace mla::emulation {
namespace {

struct State {
  std::map<uintptr_t, size_t> allocations;  // base address -> bytes
  Counters c;
  int device_count = 1, cc_major = 9, cc_minor = 0;
  int64_t malloc_countdown = 0, gemm_countdown = 0;
  cudaError_t last_error = cudaSuccess;
  bool legacy_copy_in_flight = false;  // a host-to-device cudaMemcpy not yet waited for (Counters)
};

State& state() {
  static State s;
  return s;
}

// True when [p, p + bytes) lies inside one live allocation.
bool in_device_memory(const void* p, size_t bytes) {
  const auto& a = state().allocations;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(addr);
  if (it == a.begin()) return false;
  --it;
  return addr >= it->first && addr - it->first + bytes <= it->second;
}

bool countdown_fires(int64_t& countdown) {
  if (countdown <= 0) return false;
  return --countdown == 0;
}

// Every failing runtime call also becomes the thread's "last error" (cudaGetLastError), as
// in the real runtime.
cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) state().last_error = e;
  return e;
}

cudaError_t fail_call(cudaError_t e, const char* what) {
  std::fprintf(stderr, "emulated cuda runtime: %s\n", what);
  return ret(e);
}

// The tokens handed out for streams, events and cuBLAS handles: distinct heap objects.
struct StreamToken { bool non_blocking = false; };
struct EventToken { std::chrono::steady_clock::time_point t{}; bool recorded = false; };

}  // namespace

Counters counters() {
  return state().c;
}

void reset_counters() {
  State& s = state();
  const Counters keep = s.c;
  s.c = Counters{};
  s.c.bytes_in_use = keep.bytes_in_use;
  s.c.bytes_high_water = keep.bytes_in_use;
  s.c.live_streams = keep.live_streams;
  s.c.live_events = keep.live_events;
  s.c.live_handles = keep.live_handles;
}

void set_devices(int count, int cc_major, int cc_minor) {
  state().device_count = count;
  state().cc_major = cc_major;
  state().cc_minor = cc_minor;
}
void fail_nth_malloc(int64_t n) { state().malloc_countdown = n; }
void fail_nth_gemm(int64_t n) { state().gemm_countdown = n; }

}  // namespace mla::emulation

using mla::emulation::state;

void mla::simt::set_last_launch_error(cudaError_t st) { state().last_error = st; }
void mla::simt::note_launch() { ++state().c.kernel_launches; }
void mla::simt::note_stream_work(cudaStream_t stream, const char* what) {
  auto& s = state();
  // The legacy default stream (0 or cudaStreamLegacy) and blocking streams are ordered after it.
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return;
  if (!reinterpret_cast<mla::emulation::StreamToken*>(stream)->non_blocking || !s.legacy_copy_in_flight) return;
  ++s.c.stream_order_hazards;
  std::fprintf(stderr, "emulated cuda runtime: %s on a non-blocking stream is not ordered after a host-to-device "
               "cudaMemcpy on the legacy default stream (no cudaDeviceSynchronize in between)\n", what);
}

// ---- CUDA runtime ---------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (state().device_count <= 0) {
    *count = 0;
    return mla::emulation::ret(cudaErrorNoDevice);
  }
  *count = state().device_count;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < state().device_count ? cudaSuccess
                                                      : mla::emulation::fail_call(cudaErrorInvalidDevice, "cudaSetDevice: no such device");
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= state().device_count) return mla::emulation::ret(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = state().cc_major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = state().cc_minor; return cudaSuccess;
    default: return mla::emulation::ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= state().device_count) return mla::emulation::ret(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "SIMT emulator on the host");
  prop->major = state().cc_major;
  prop->minor = state().cc_minor;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = state().last_error;
  state().last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return state().last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "emulated runtime error";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  auto& s = state();
  *ptr = nullptr;
  if (mla::emulation::countdown_fires(s.malloc_countdown))
    return mla::emulation::fail_call(cudaErrorMemoryAllocation, "cudaMalloc: injected out-of-memory");
  // 256-byte alignment, as cudaMalloc guarantees; the size is exact so that ASan and the
  // range checks see any access past the end.
  void* p = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(256), std::nothrow);
  if (!p) return mla::emulation::fail_call(cudaErrorMemoryAllocation, "cudaMalloc: host allocation failed");
  std::memset(p, 0xFF, bytes);  // NaN-filled: reading memory nobody wrote shows up in results
  s.allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  mla::simt::log_call("malloc " + std::to_string(bytes));
  ++s.c.mallocs;
  s.c.bytes_in_use += static_cast<int64_t>(bytes);
  if (s.c.bytes_in_use > s.c.bytes_high_water) s.c.bytes_high_water = s.c.bytes_in_use;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto& s = state();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end()) return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaFree: not a device allocation");
  s.c.bytes_in_use -= static_cast<int64_t>(it->second);
  ++s.c.frees;
  s.allocations.erase(it);
  mla::simt::log_call("free");
  ::operator delete(ptr, std::align_val_t(256));
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const size_t total = size_t(141) << 30;  // an H200's 141 GB, for the benchmark's arithmetic
  *total_bytes = total;
  *free_bytes = total - static_cast<size_t>(state().c.bytes_in_use);
  return cudaSuccess;
}

namespace {
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  using mla::emulation::in_device_memory;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
    return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaMemcpy: only explicit copy kinds are emulated");
  if (bytes == 0) return cudaSuccess;
  if (dst_dev && !in_device_memory(dst, bytes))
    return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaMemcpy: destination range is not inside one device allocation");
  if (src_dev && !in_device_memory(src, bytes))
    return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaMemcpy: source range is not inside one device allocation");
  if (!dst_dev && in_device_memory(dst, 1))
    return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaMemcpy: host destination is device memory");
  if (!src_dev && in_device_memory(src, 1))
    return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaMemcpy: host source is device memory");
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  ++state().c.host_syncs;
  mla::simt::log_call("sync cudaMemcpy");
  const cudaError_t st = copy(dst, src, bytes, kind);
  // From pageable memory the call may return once the data is staged, before it lands.
  if (st == cudaSuccess && kind == cudaMemcpyHostToDevice && bytes > 0) state().legacy_copy_in_flight = true;
  return st;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  ++state().c.async_copies;
  mla::simt::log_call("copy cudaMemcpyAsync");
  mla::simt::note_stream_work(stream, "cudaMemcpyAsync");
  return copy(dst, src, bytes, kind);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking)
    return mla::emulation::fail_call(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: unknown flags");
  *stream = reinterpret_cast<cudaStream_t>(new mla::emulation::StreamToken{flags == cudaStreamNonBlocking});
  ++state().c.live_streams;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<mla::emulation::StreamToken*>(stream);
  --state().c.live_streams;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ++state().c.host_syncs;
  mla::simt::log_call("sync cudaStreamSynchronize");
  // Waiting for the legacy stream waits for its copies; waiting for another stream does not.
  if (stream == nullptr || stream == cudaStreamLegacy) state().legacy_copy_in_flight = false;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  ++state().c.host_syncs;
  mla::simt::log_call("sync cudaDeviceSynchronize");
  state().legacy_copy_in_flight = false;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new mla::emulation::EventToken);
  ++state().c.live_events;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<mla::emulation::EventToken*>(event);
  --state().c.live_events;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  auto* e = reinterpret_cast<mla::emulation::EventToken*>(event);
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const auto* a = reinterpret_cast<const mla::emulation::EventToken*>(start);
  const auto* b = reinterpret_cast<const mla::emulation::EventToken*>(end);
  if (!a->recorded || !b->recorded) return mla::emulation::ret(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

// ---- cuBLAS ---------------------------------------------------------------------------------

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  ++state().c.live_handles;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  --state().c.live_handles;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetVersion(cublasHandle_t, int* version) {
  *version = 0;  // "cuBLAS 0": the emulator
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (bytes > 0 && !mla::emulation::in_device_memory(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute (injected)";
    default: return "unknown cuBLAS status";
  }
}

namespace {

// One operand of a column-major GEMM: element (row, col) of op(X), widened to fp32.
struct Operand {
  const unsigned char* base;
  cudaDataType type;
  int ld;
  bool transposed;
  float at(int64_t row, int64_t col) const {
    const int64_t idx = transposed ? col + row * int64_t(ld) : row + col * int64_t(ld);
    float v;
    if (type == CUDA_R_32F) {
      std::memcpy(&v, base + idx * 4, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, base + idx * 2, 2);
      v = mla::bf16::from_bits(b).to_float();
    }
    return v;
  }
};

// TF32: fp32 with the mantissa rounded to 10 bits (round to nearest, ties away, as the
// tensor cores' conversion does); exponent range unchanged.
float to_tf32(float v) {
  if (!std::isfinite(v)) return v;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&v, &u, 4);
  return v;
}

size_t elem_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// Bytes an m x n column-major matrix with leading dimension ld spans: (n-1)*ld + m elements.
size_t span_bytes(int64_t rows, int64_t cols, int64_t ld, cudaDataType t) {
  if (rows == 0 || cols == 0) return 0;
  return static_cast<size_t>((cols - 1) * ld + rows) * elem_size(t);
}

cublasStatus_t gemm_ex(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void* alpha_p, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                       int ldb, const void* beta_p, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute) {
  auto& s = state();
  ++s.c.gemm_calls;
  mla::simt::log_call("gemm cublasGemmEx");
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  mla::simt::note_stream_work(handle->stream, "a cuBLAS GEMM");
  if (mla::emulation::countdown_fires(s.gemm_countdown)) return CUBLAS_STATUS_EXECUTION_FAILED;
  // Argument rules of cublasGemmEx (cuBLAS docs): sizes >= 0, lda >= max(1, rows of A as
  // stored), same for B, ldc >= max(1, m); the types this project uses all agree.
  const bool a_t = ta == CUBLAS_OP_T, b_t = tb == CUBLAS_OP_T;
  if ((ta != CUBLAS_OP_N && !a_t) || (tb != CUBLAS_OP_N && !b_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = a_t ? k : m, a_cols = a_t ? m : k;
  const int b_rows = b_t ? n : k, b_cols = b_t ? k : n;
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  if (at != bt || at != ct || (at != CUDA_R_32F && at != CUDA_R_16BF)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (compute != CUBLAS_COMPUTE_32F && !tf32) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (tf32 && at != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  const size_t es = elem_size(at);
  const auto* a = static_cast<const unsigned char*>(A);
  const auto* bb = static_cast<const unsigned char*>(B);
  auto* c = static_cast<unsigned char*>(C);
  using mla::emulation::in_device_memory;
  if ((k > 0 && m > 0 && !in_device_memory(a, span_bytes(a_rows, a_cols, lda, at))) ||
      (k > 0 && n > 0 && !in_device_memory(bb, span_bytes(b_rows, b_cols, ldb, bt))) ||
      (m > 0 && n > 0 && !in_device_memory(c, span_bytes(m, n, ldc, ct)))) {
    std::fprintf(stderr, "emulated cuBLAS: an %dx%dx%d GEMM reaches outside device memory\n", m, n, k);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Operand opa{a, at, lda, a_t}, opb{bb, bt, ldb, b_t};
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;  // fp32 accumulation, p ascending
      for (int64_t p = 0; p < k; ++p) {
        float x = opa.at(i, p), y = opb.at(p, j);
        if (tf32) {
          x = to_tf32(x);
          y = to_tf32(y);
        }
        acc += x * y;
      }
      unsigned char* out = c + (i + j * int64_t(ldc)) * int64_t(es);
      float v = alpha * acc;
      if (beta != 0.0f) {  // beta == 0: C is not read (it may hold NaNs), as cuBLAS documents
        Operand oc{c, ct, ldc, false};
        v += beta * oc.at(i, j);
      }
      if (ct == CUDA_R_32F) {
        std::memcpy(out, &v, 4);
      } else {
        const uint16_t h = mla::bf16::round_bits(v);
        std::memcpy(out, &h, 2);
      }
    }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                            int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  return gemm_ex(handle, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute);
}
