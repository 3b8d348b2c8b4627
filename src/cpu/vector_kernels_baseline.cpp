// src/cpu/vector_kernels_baseline.cpp — vector_kernels.hpp's kernels for the baseline instruction set
// (src/cpu/meson.build gives this file its flags); the code is vector_kernels_impl.hpp.
#define MLA_VECTOR_NS baseline
#define MLA_VECTOR_BYTES 16
#include "vector_kernels_impl.hpp"

namespace mla::cpu {
const VectorKernels& vector_kernels_baseline() { return baseline::kernels(VectorIsa::Baseline, "baseline"); }
}  // namespace mla::cpu
