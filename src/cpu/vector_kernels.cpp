// src/cpu/vector_kernels.cpp — the run-time choice of vector_kernels.hpp's instruction set:
// the best one the CPU (and the OS: __builtin_cpu_supports checks the saved register state)
// supports, capped by MLA_VECTOR_ISA.
#include "vector_kernels.hpp"

#include <cstdlib>
#include <string>

#include "mla/error.hpp"
#include "mla_build_config.h"

namespace mla::cpu {
namespace {

bool cpu_has(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Baseline: return true;
#if MLA_HAVE_X86_VECTOR_KERNELS
    case VectorIsa::Avx2: return __builtin_cpu_supports("avx2");
    case VectorIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    default: return false;
#endif
  }
  return false;
}

const VectorKernels& choose() {
  VectorIsa cap = VectorIsa::Avx512;
  if (const char* v = std::getenv("MLA_VECTOR_ISA"); v != nullptr && *v != '\0') {
    const std::string s = v;
    if (s == "baseline") {
      cap = VectorIsa::Baseline;
    } else if (s == "avx2") {
      cap = VectorIsa::Avx2;
    } else if (s == "avx512") {
      cap = VectorIsa::Avx512;
    } else {
      fail(ErrorKind::InvalidArgument, "environment variable MLA_VECTOR_ISA='" + s + "' is not baseline, avx2 or avx512");
    }
    if (vector_kernels_for(cap) == nullptr)
      fail(ErrorKind::InvalidArgument, "environment variable MLA_VECTOR_ISA=" + s + ": this CPU or build has no " + s);
  }
  for (const VectorIsa isa : {VectorIsa::Avx512, VectorIsa::Avx2}) {
    if (static_cast<int>(isa) > static_cast<int>(cap)) continue;
    if (const VectorKernels* k = vector_kernels_for(isa)) return *k;
  }
  return vector_kernels_baseline();
}

}  // namespace

const VectorKernels* vector_kernels_for(VectorIsa isa) {
  if (!cpu_has(isa)) return nullptr;
  switch (isa) {
    case VectorIsa::Baseline: return &vector_kernels_baseline();
#if MLA_HAVE_X86_VECTOR_KERNELS
    case VectorIsa::Avx2: return &vector_kernels_avx2();
    case VectorIsa::Avx512: return &vector_kernels_avx512();
#else
    default: return nullptr;
#endif
  }
  return nullptr;
}

const VectorKernels& vector_kernels() {
  static const VectorKernels& k = choose();
  return k;
}

}  // namespace mla::cpu
