// mla/huge_pages.hpp — large fresh buffers faulted in on transparent huge pages (2 MiB) where
// the kernel hands them out quickly, else on 4 KiB pages (docs/cpu-gemm.md §5).
//
// The loaded layer and the engines' packed weights are hundreds of MB of fresh memory. Its first
// touch costs one page fault per 4 KiB page; with THP in `madvise` mode (the usual default) the
// kernel backs an advised region with 2 MiB pages, one fault each, but only pages not yet
// touched: advise first, then write. In a virtual machine whose host takes back the guest's free
// 2 MiB blocks (virtio-balloon free page reporting), a huge page the host must fault back in
// costs about 4x more per byte than 4 KiB pages (docs/cpu-gemm.md §5). So the memory is faulted
// in here, one huge page at a time while they come quickly; after the first slow one the
// process uses 4 KiB pages (faulted in by madvise(MADV_POPULATE_WRITE) on one thread per core,
// faster than page faults on first touch).
//
//   fault_in_huge_pages(p, bytes)   faults in the 2 MiB-aligned interior of fresh (never
//                                   touched) memory [p, p + bytes), as above; the edges (and a
//                                   buffer too small to hold an aligned 2 MiB block) are left
//                                   to fault on first touch as usual.
//   huge_page_vector<T>(n)          std::vector<T> of n value-initialized (zero) elements
//                                   whose storage was faulted in that way before the zeroing.
//   huge_page_tensor<T>(name, s)    the same for a Tensor<T> of shape s.
//
// Only a performance hint: the contents are the same either way (memory already touched keeps
// its pages and values). On other systems, with THP `never`, or where madvise fails, the memory
// faults in on first touch as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mla/tensor.hpp"

namespace mla {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64 / arm64 PMD page

// What fault_in_huge_pages did: bytes faulted in on huge pages (asked for; the kernel may
// still have used 4 KiB pages) and on 4 KiB pages. Both 0 for a buffer without an aligned
// 2 MiB block, on other systems, or where madvise failed. Never throws.
struct FaultedIn {
  size_t huge_bytes = 0;
  size_t small_bytes = 0;
};
FaultedIn fault_in_huge_pages(void* p, size_t bytes) noexcept;

template <class T>
std::vector<T> huge_page_vector(size_t n) {
  std::vector<T> v;
  v.reserve(n);  // allocated, not yet touched (a large block is a fresh mmap)
  fault_in_huge_pages(v.data(), n * sizeof(T));
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
