// src/io/huge_pages.cpp — madvise(MADV_HUGEPAGE) on a buffer's 2 MiB-aligned interior
// (mla/huge_pages.hpp).
#include "mla/huge_pages.hpp"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mla {

size_t advise_huge_pages([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p == nullptr) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  if (end < begin) return 0;  // wrapped: not a real buffer
  const uintptr_t first = (begin + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  const uintptr_t last = end & ~uintptr_t{kHugePageBytes - 1};
  if (first < begin || last <= first) return 0;  // no aligned 2 MiB block inside
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) != 0) return 0;
  return last - first;
#else
  return 0;
#endif
}

}  // namespace mla
