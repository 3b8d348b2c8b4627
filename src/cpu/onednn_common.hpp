// src/cpu/onednn_common.hpp — the oneDNN pieces shared by the projection engine
// (gemm_engine.cpp) and the per-head attention products (onednn_attention.cpp): the process-wide
// CPU engine and stream, the OpenMP thread count of oneDNN calls, and the library's version.
// Include only where MLA_HAVE_ONEDNN is set.
#pragma once

#include "mla_build_config.h"

#if MLA_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <string>

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

// "oneDNN 2.6.3"
inline std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace mla::cpu
#endif  // MLA_HAVE_ONEDNN
