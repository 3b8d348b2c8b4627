// src/cpu/onednn_common.hpp — the oneDNN pieces shared by the projection engine
// (gemm_engine.cpp) and the per-head attention products (onednn_attention.cpp): the process-wide
// CPU engine and stream, the OpenMP thread count of oneDNN calls, and the library's version.
// Include only where MLA_HAVE_ONEDNN is set.
#pragma once

#include "mla_build_config.h"

#if MLA_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mla/attention.hpp"

#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
// The OpenMP run time oneDNN's threads come from (libgomp); declared here rather than
// including omp.h, which a clang build may not have.
extern "C" {
void omp_set_num_threads(int num_threads);
int omp_get_max_threads(void);
}
#define MLA_ONEDNN_OMP 1
#endif

namespace mla::cpu {

// The process-wide CPU engine and stream (oneDNN objects are reference counted handles).
struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  static Dnnl& get() {
    static Dnnl d;
    return d;
  }
};

// While alive, oneDNN's OpenMP parallel regions on this thread use `threads` threads.
class DnnlThreads {
 public:
  explicit DnnlThreads([[maybe_unused]] int threads) {
#ifdef MLA_ONEDNN_OMP
    saved_ = omp_get_max_threads();
    omp_set_num_threads(std::max(threads, 1));
#endif
  }
  ~DnnlThreads() {
#ifdef MLA_ONEDNN_OMP
    omp_set_num_threads(saved_);
#endif
  }
  DnnlThreads(const DnnlThreads&) = delete;
  DnnlThreads& operator=(const DnnlThreads&) = delete;

 private:
  [[maybe_unused]] int saved_ = 0;
};

// The attributes of every primitive the backend makes: fpmath mode strict (f32 stays f32, no
// bf16/tf32 down-conversion) and a user scratchpad (each caller passes its own, so concurrent
// executions never share one).
inline dnnl::primitive_attr strict_user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_fpmath_mode(dnnl::fpmath_mode::strict);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// One caller's scratchpad, grown to the largest a primitive asked for, 64-byte aligned (a cache
// line, as oneDNN's own buffers).
class Scratchpad {
 public:
  dnnl::memory for_primitive(const dnnl::memory::desc& md, const dnnl::engine& engine) {
    const size_t bytes = md.get_size();
    bytes_.resize(std::max(bytes_.size(), bytes + kAlign));
    void* p = bytes_.data();
    size_t space = bytes_.size();
    return dnnl::memory(md, engine, std::align(kAlign, bytes, p, space));
  }

 private:
  static constexpr size_t kAlign = 64;
  std::vector<char> bytes_;
};

// Counts one reorder run outside a primitive into onednn_reorders() (gemm_engine.hpp), e.g.
// count_reorder(&OnednnReorders::per_block). Thread-safe.
void count_reorder(int64_t OnednnReorders::*kind);

// "oneDNN 2.6.3"
inline std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace mla::cpu
#endif  // MLA_HAVE_ONEDNN
