// src/cpu/vector_kernels_avx512.cpp — vector_kernels.hpp's kernels for the avx512 instruction set
// (src/cpu/meson.build gives this file its flags); the code is vector_kernels_impl.hpp.
#define MLA_VECTOR_NS avx512
#define MLA_VECTOR_BYTES 64
#include "vector_kernels_impl.hpp"

namespace mla::cpu {
const VectorKernels& vector_kernels_avx512() { return avx512::kernels(VectorIsa::Avx512, "avx512"); }
}  // namespace mla::cpu
