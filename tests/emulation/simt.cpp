// tests/emulation/simt.cpp — the fiber scheduler behind simt.hpp.
//
// One OS thread runs everything. A launch walks the blocks in order; for each block it gives
// every CUDA thread a ucontext fiber with its own stack, then repeats "resume every runnable
// fiber once, in thread order" until all have returned. A fiber gives control back when it
// reaches __syncthreads() (it then waits for the next round) or returns. After each round the
// block's state must be uniform: all fibers at the barrier (release them, next round) or all
// returned (block done); anything else is a divergent barrier.
// Under AddressSanitizer every switch is announced with __sanitizer_{start,finish}_switch_fiber
// so that ASan knows which stack is live (otherwise it reports false stack overflows).
#include "simt.hpp"

#include <ucontext.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MLA_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLA_SIMT_ASAN 1
#endif
#endif
#ifdef MLA_SIMT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace mla::simt {
namespace {

// A kernel's frames are small (a lambda, std::apply, the kernel); ASan clears a switched-to
// stack's shadow on every swapcontext, so the stacks are kept small.
constexpr size_t kStackBytes = size_t(64) << 10;
constexpr size_t kMaxDynamicShared = size_t(48) << 10;  // default limit without cudaFuncSetAttribute
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxGridX = 2147483647u;

enum class FiberState { Runnable, AtBarrier, Returned };

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<unsigned char[]> stack;
  FiberState state = FiberState::Runnable;
};

struct Scheduler {
  ThreadOrder order = ThreadOrder::Ascending;
  ucontext_t main_ctx{};
  std::vector<Fiber> fibers;      // one per thread of the running block (stacks reused)
  std::vector<unsigned char> shared;
  const std::function<void()>* body = nullptr;
  unsigned current = 0;           // thread index of the running fiber
  bool in_kernel = false;
  bool direct = false;            // threads run as plain calls on the main stack (see run_block)
  unsigned direct_barriers = 0;   // __syncthreads() calls seen in direct mode
  std::vector<std::string> log;
#ifdef MLA_SIMT_ASAN
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
#endif
};

Scheduler& sched() {
  static Scheduler s;
  return s;
}

// Fiber entry: run the kernel body for the current thread, mark it returned, and let uc_link
// switch back to the scheduler.
void fiber_entry() {
  Scheduler& s = sched();
#ifdef MLA_SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s.main_stack_bottom, &s.main_stack_size);
#endif
  (*s.body)();
  s.fibers[s.current].state = FiberState::Returned;
#ifdef MLA_SIMT_ASAN
  // Leaving this fiber for good: no fake stack to keep.
  __sanitizer_start_switch_fiber(nullptr, s.main_stack_bottom, s.main_stack_size);
#endif
}

// Gives `f` a fresh context that starts in fiber_entry on its own stack. Kept out of line:
// getcontext "returns twice", which makes GCC warn about (and forbids keeping) the caller's
// loop variables in registers (-Wclobbered).
[[gnu::noinline]] void init_fiber(Fiber& f, ucontext_t* link) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = link;
  makecontext(&f.ctx, fiber_entry, 0);
}

// Makes `tid` the running thread: what threadIdx and the barrier bookkeeping see.
void enter_thread(Scheduler& s, unsigned tid) {
  s.current = tid;
  threadIdx.x = tid;
  threadIdx.y = 0;
  threadIdx.z = 0;
}

// Scheduler -> fiber `tid`, returning when the fiber yields or returns.
void resume(Scheduler& s, unsigned tid) {
  enter_thread(s, tid);
#ifdef MLA_SIMT_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, s.fibers[tid].stack.get(), kStackBytes);
#endif
  swapcontext(&s.main_ctx, &s.fibers[tid].ctx);
#ifdef MLA_SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

}  // namespace

void set_thread_order(ThreadOrder order) { sched().order = order; }
ThreadOrder thread_order() { return sched().order; }

void syncthreads() {
  Scheduler& s = sched();
  if (s.direct) {  // the block's first thread returned without a barrier: this one diverges
    ++s.direct_barriers;
    return;
  }
  Fiber& f = s.fibers[s.current];
  f.state = FiberState::AtBarrier;
#ifdef MLA_SIMT_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, s.main_stack_bottom, s.main_stack_size);
#endif
  swapcontext(&f.ctx, &s.main_ctx);
#ifdef MLA_SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake, &s.main_stack_bottom, &s.main_stack_size);
#endif
}

void* dynamic_shared() { return sched().shared.data(); }
void log_call(std::string entry) { sched().log.push_back(std::move(entry)); }
const std::vector<std::string>& call_log() { return sched().log; }
void clear_call_log() { sched().log.clear(); }

cudaError_t run_grid(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                     const std::function<void()>& body) {
  Scheduler& s = sched();
  s.log.push_back(std::string("launch ") + kernel);
  note_stream_work(stream, kernel);
  if (s.in_kernel) {
    std::fprintf(stderr, "simt: %s launched from inside a kernel (dynamic parallelism is not emulated)\n", kernel);
    return cudaErrorLaunchFailure;
  }
  if (block.x == 0 || block.x > kMaxThreadsPerBlock || block.y != 1 || block.z != 1 || grid.x == 0 ||
      grid.x > kMaxGridX || grid.y != 1 || grid.z != 1 || shared_bytes > kMaxDynamicShared) {
    std::fprintf(stderr, "simt: %s: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u) shared %zu bytes\n",
                 kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes);
    return cudaErrorInvalidConfiguration;
  }
  s.in_kernel = true;
  s.body = &body;
  gridDim = grid;
  blockDim = block;
  if (s.fibers.size() < block.x) s.fibers.resize(block.x);
  for (unsigned t = 0; t < block.x; ++t)
    if (!s.fibers[t].stack) s.fibers[t].stack = std::make_unique<unsigned char[]>(kStackBytes);

  cudaError_t status = cudaSuccess;
  for (unsigned i = 0; i < grid.x && status == cudaSuccess; ++i) {
    const unsigned b = s.order == ThreadOrder::Ascending ? i : grid.x - 1 - i;  // blocks too
    blockIdx.x = b;
    blockIdx.y = 0;
    blockIdx.z = 0;
    s.shared.assign(shared_bytes, 0xFF);
    auto thread_at = [&](unsigned k) { return s.order == ThreadOrder::Ascending ? k : block.x - 1 - k; };

    // The block's first thread runs as a fiber. If it returns without reaching a barrier,
    // no other thread may reach one either (uniform barriers), so the others run as plain
    // calls, in order, on this stack — far cheaper than a context switch each; a barrier
    // reached in that mode is a divergent barrier.
    const unsigned first = thread_at(0);
    s.fibers[first].state = FiberState::Runnable;
    init_fiber(s.fibers[first], &s.main_ctx);
    resume(s, first);
    if (s.fibers[first].state == FiberState::Returned) {
      s.direct = true;
      s.direct_barriers = 0;
      for (unsigned k = 1; k < block.x; ++k) {
        enter_thread(s, thread_at(k));
        body();
      }
      s.direct = false;
      if (s.direct_barriers != 0) {
        std::fprintf(stderr,
                     "simt: %s block %u: thread %u returned without __syncthreads() while other threads reached "
                     "%u barrier(s) (divergent barrier)\n",
                     kernel, b, first, s.direct_barriers);
        status = cudaErrorLaunchFailure;
      }
      continue;
    }
    for (unsigned k = 1; k < block.x; ++k) {
      const unsigned t = thread_at(k);
      s.fibers[t].state = FiberState::Runnable;
      init_fiber(s.fibers[t], &s.main_ctx);
    }
    for (;;) {
      for (unsigned k = 0; k < block.x; ++k) {
        const unsigned t = thread_at(k);
        if (s.fibers[t].state == FiberState::Runnable) resume(s, t);
      }
      unsigned at_barrier = 0, returned = 0;
      for (unsigned t = 0; t < block.x; ++t) {
        at_barrier += s.fibers[t].state == FiberState::AtBarrier;
        returned += s.fibers[t].state == FiberState::Returned;
      }
      if (returned == block.x) break;
      if (at_barrier == block.x) {
        for (unsigned t = 0; t < block.x; ++t) s.fibers[t].state = FiberState::Runnable;
        continue;
      }
      std::fprintf(stderr,
                   "simt: %s block %u: __syncthreads() reached by %u of %u threads while %u had returned "
                   "(divergent barrier)\n",
                   kernel, b, at_barrier, block.x, returned);
      status = cudaErrorLaunchFailure;
      break;
    }
  }
  s.in_kernel = false;
  s.body = nullptr;
  return status;
}

}  // namespace mla::simt
