// src/io/huge_pages.cpp — fault_in_huge_pages (mla/huge_pages.hpp): a fresh buffer's 2 MiB-aligned
// interior faulted in one huge page at a time while they come quickly, else as 4 KiB pages.
#include "mla/huge_pages.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mla {

#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_POPULATE_WRITE)
namespace {

// A huge page that takes longer than this to fault in is slower than 512 small pages would be
// (on the development VM: 2 MiB of 4 KiB pages about 1.1 ms; a huge page the kernel has at hand
// 0.2-0.4 ms, one the VM's host must fault back in about 4.5 ms).
constexpr double kSlowSecondsPerHugePage = 1.5e-3;

// Set by the first slow huge page; from then on this process faults in 4 KiB pages only. (Going
// back and forth does not pay: 4 KiB pages taken from the blocks that came fast leave the slow
// ones for the next huge page.)
std::atomic<bool> huge_pages_slow{false};

bool advise(uintptr_t begin, size_t bytes, int advice) {
  return ::madvise(reinterpret_cast<void*>(begin), bytes, advice) == 0;
}

// MADV_POPULATE_WRITE on [begin, end) (2 MiB-aligned), split into one slice per core: on an idle
// machine page faults on two cores take about half the time (first touch by the parallel
// conversion loops had that for free). False when madvise failed.
bool populate_in_parallel(uintptr_t begin, uintptr_t end) {
  const size_t blocks = (end - begin) / kHugePageBytes;
  const size_t slices = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::min<size_t>(blocks, 16));
  std::atomic<bool> ok{true};
  auto slice = [&](size_t i) {
    const uintptr_t b = begin + blocks * i / slices * kHugePageBytes, e = begin + blocks * (i + 1) / slices * kHugePageBytes;
    if (!advise(b, e - b, MADV_POPULATE_WRITE)) ok.store(false);
  };
  std::vector<std::thread> pool;
  size_t i = 1;
  try {
    for (; i < slices; ++i) pool.emplace_back(slice, i);
  } catch (...) {  // no more threads: this one does the remaining slices
  }
  for (; i < slices; ++i) slice(i);
  slice(0);
  for (std::thread& t : pool) t.join();
  return ok.load();
}

}  // namespace

FaultedIn fault_in_huge_pages(void* p, size_t bytes) noexcept {
  FaultedIn done;
  if (p == nullptr) return done;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  if (end < begin) return done;  // wrapped: not a real buffer
  const uintptr_t first = (begin + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  const uintptr_t last = end & ~uintptr_t{kHugePageBytes - 1};
  if (first < begin || last <= first) return done;  // no aligned 2 MiB block inside
  uintptr_t at = first;
  // One huge page per call of madvise, timed (the two system calls cost ~1 us next to the fault).
  while (at < last && !huge_pages_slow.load(std::memory_order_relaxed)) {
    if (!advise(at, kHugePageBytes, MADV_HUGEPAGE)) break;  // THP `never` or unavailable
    const auto t0 = std::chrono::steady_clock::now();
    if (!advise(at, kHugePageBytes, MADV_POPULATE_WRITE)) return done;  // kernel < 5.14: first touch
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done.huge_bytes += kHugePageBytes;
    at += kHugePageBytes;
    if (seconds > kSlowSecondsPerHugePage) huge_pages_slow.store(true, std::memory_order_relaxed);
  }
  if (at < last && populate_in_parallel(at, last)) done.small_bytes = last - at;
  return done;
}
#else
FaultedIn fault_in_huge_pages(void*, size_t) noexcept { return {}; }
#endif

}  // namespace mla
