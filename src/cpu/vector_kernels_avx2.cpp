// src/cpu/vector_kernels_avx2.cpp — vector_kernels.hpp's kernels for the avx2 instruction set
// (src/cpu/meson.build gives this file its flags); the code is vector_kernels_impl.hpp.
#define MLA_VECTOR_NS avx2
#define MLA_VECTOR_BYTES 32
#include "vector_kernels_impl.hpp"

namespace mla::cpu {
const VectorKernels& vector_kernels_avx2() { return avx2::kernels(VectorIsa::Avx2, "avx2"); }
}  // namespace mla::cpu
