// tests/emulation/simt.hpp — a host SIMT emulator: runs the project's CUDA kernels (the very
// text of cuda/*.cu) on the CPU, one block at a time, every CUDA thread a fiber.
//
// Why: the development and CI machines have no GPU. Compiling the .cu files as C++ against
// this header, and the CUDA backend against the host runtime of host_runtime.cpp, executes the
// whole GPU path — launch shapes, indexing, __syncthreads placement, rounding points, cuBLAS
// argument plans, workspace offsets, error mapping — without a device. What it cannot check:
// device intrinsics' last-bit accuracy (expf, division), real cuBLAS summation order, memory
// coalescing and speed. See docs/backends.md §5.
//
// Semantics (stricter than a GPU where a GPU is undefined):
//   * Blocks run one after another; the threads of a block are cooperative fibers run in a
//     fixed order between barriers. set_thread_order(Descending) reverses both the block order
//     and the thread order. Running a kernel in both orders and comparing is a race detector: a
//     read and a write of the same location by two threads (or two blocks) with no barrier
//     between them gives order-dependent results.
//   * __syncthreads() must be reached by every thread of the block that has not returned and by
//     none that has: a barrier reached by only some threads (undefined on a GPU) is reported as
//     a launch error naming the kernel. (When the block's first thread returns without a
//     barrier, the other threads run as plain calls instead of fibers; same order, same checks.)
//   * Dynamic shared memory starts filled with 0xFF bytes (a NaN for floats) in every block, so
//     a kernel reading shared memory it did not write produces NaNs instead of luck.
//   * Launch configuration is validated as the CUDA runtime does (block 1..1024 threads, grid
//     1..2^31-1 blocks, dynamic shared memory <= 48 KiB without opt-in); a bad one makes
//     cudaGetLastError() return cudaErrorInvalidConfiguration and runs nothing.
// Only gridDim.x/blockDim.x (1-D launches) are used by the project's kernels; y and z are 1.
#pragma once

#ifndef MLA_SIMT_EMULATION
#define MLA_SIMT_EMULATION 1
#endif

#include <math.h>  // expf, sqrtf, fmaxf, INFINITY in the global namespace, as nvcc provides them

#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>  // dim3, uint3, cudaStream_t, cudaError_t (types only)

namespace mla::simt {

enum class ThreadOrder { Ascending, Descending };
void set_thread_order(ThreadOrder order);
ThreadOrder thread_order();

// Runs `body` for every thread of a grid x block launch (body reads the built-ins below).
// Returns cudaSuccess, cudaErrorInvalidConfiguration, or cudaErrorLaunchFailure (divergent
// barrier; the message goes to stderr with the kernel name). Also records the launch.
cudaError_t run_grid(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                     const std::function<void()>& body);

// The emulated device's call log, in program order: "launch <kernel>" for every MLA_LAUNCH
// (the macro's text, e.g. "launch rms_norm_kernel<T>", rejected launches included) and the
// entries host_runtime.cpp adds for runtime/cuBLAS calls ("gemm ...", "sync ...", "copy ...").
// Tests read one forward's sequence from it (launch counts, no host sync between launches).
void log_call(std::string entry);
const std::vector<std::string>& call_log();
void clear_call_log();

void syncthreads();      // the barrier of the running block
void* dynamic_shared();  // the running block's dynamic shared memory

// Defined by host_runtime.cpp: what the next cudaGetLastError() returns, and the launch counter.
void set_last_launch_error(cudaError_t st);
void note_launch();
// Work enqueued on `stream` (a launch, a GEMM, an async copy): checks its ordering against a
// host-to-device cudaMemcpy that may still be in flight (emulation.hpp, stream_order_hazards).
void note_stream_work(cudaStream_t stream, const char* what);

// MLA_LAUNCH(kernel, grid, block, smem, stream)(args...) — the <<< >>> of the emulator.
template <class... Params>
struct Launch {
  const char* name;
  void (*kernel)(Params...);
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  template <class... Args>
  void operator()(Args&&... args) const {
    // Kernel parameters are passed by value, as on a GPU: converted once, shared by all threads.
    const std::tuple<Params...> params(std::forward<Args>(args)...);
    const cudaError_t st =
        run_grid(name, grid, block, shared_bytes, stream, [&] { std::apply(kernel, params); });
    note_launch();
    if (st != cudaSuccess) set_last_launch_error(st);
  }
};
template <class... Params>
Launch<Params...> make_launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                              cudaStream_t stream) {
  return Launch<Params...>{name, kernel, grid, block, shared_bytes, stream};
}

}  // namespace mla::simt

// ---- the CUDA built-ins a kernel uses, as the emulator provides them ---------------------------
// (Set by the scheduler before it resumes each fiber; the project's kernels use only .x.)
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

inline void __syncthreads() { ::mla::simt::syncthreads(); }

#define MLA_DYNAMIC_SHARED(type, name) type* const name = static_cast<type*>(::mla::simt::dynamic_shared())
#define MLA_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::mla::simt::make_launch(#kernel, &kernel, grid, block, shared_bytes, stream)
