// mla/huge_pages.hpp — large buffers backed by transparent huge pages (2 MiB) where the kernel
// allows it (docs/cpu-gemm.md §5).
//
// The loaded layer and the engines' packed weights are hundreds of MB of fresh memory; touching
// it for the first time costs one page fault per 4 KiB page (and, in a virtual machine, often a
// fault in the host as well). With THP in `madvise` mode (the usual default) the kernel backs a
// region with 2 MiB pages only when asked, and only pages not yet touched: advise first, then
// write.
//
//   advise_huge_pages(p, bytes)     madvise(MADV_HUGEPAGE) on the 2 MiB-aligned interior of
//                                   [p, p + bytes); the edges (and a buffer too small to hold
//                                   an aligned 2 MiB block) keep 4 KiB pages.
//   huge_page_vector<T>(n)          std::vector<T> of n value-initialized (zero) elements whose
//                                   storage was advised before the zeroing touched it.
//   huge_page_tensor<T>(name, s)    the same for a Tensor<T> of shape s.
//
// Only a hint: on other systems, with THP `never`, or when madvise fails, nothing changes
// (the contents are the same either way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mla/tensor.hpp"

namespace mla {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64 / arm64 PMD page

// Bytes advised: the 2 MiB-aligned interior of [p, p + bytes), 0 when it is empty, the
// system is not Linux or madvise failed. Never throws.
size_t advise_huge_pages(void* p, size_t bytes) noexcept;

template <class T>
std::vector<T> huge_page_vector(size_t n) {
  std::vector<T> v;
  v.reserve(n);  // allocated, not yet touched (a large block is a fresh mmap)
  advise_huge_pages(v.data(), n * sizeof(T));
  v.resize(n);
  return v;
}

template <class T>
Tensor<T> huge_page_tensor(std::string name, std::vector<int64_t> shape) {
  Tensor<T> t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.data = huge_page_vector<T>(static_cast<size_t>(Tensor<T>::count(t.shape)));
  return t;
}

}  // namespace mla
