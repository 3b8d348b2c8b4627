// src/cpu/vector_kernels.hpp — the elementwise and row kernels of the cpu backend's attention
// (the softmax rows, the H2O column sums, bf16 rounding and packing), compiled once per
// instruction set and chosen at run time (docs/long-context.md §2):
//
//   avx512    x86-64 with AVX-512 F/BW/DQ/VL       (vector_kernels_avx512.cpp, -mavx512f ...)
//   avx2      x86-64 with AVX2                       (vector_kernels_avx2.cpp, -mavx2)
//   baseline  what the library is built for (SSE2 on x86-64; any other CPU)  (vector_kernels_baseline.cpp)
//
// All three are the same source (vector_kernels_impl.hpp, GCC/Clang vector extensions of 16
// floats), compiled without floating-point contraction: every lane performs the same IEEE
// operations in the same order on every instruction set, and the reductions have a fixed lane
// structure, so the three give the same bits (suite vector_kernels checks it on this CPU's
// sets). `MLA_VECTOR_ISA=baseline|avx2|avx512` caps the choice (a set the CPU lacks is an error).
//
// The softmax exp: exp_f32 below, a float Cody-Waite reduction and a degree-6 polynomial
// (Cephes' coefficients) evaluated with separate multiplies and adds; accuracy against
// correctly rounded values and against std::exp is measured by suite vector_kernels and
// stated in docs/long-context.md §2.
#pragma once

#include <cstdint>

#include "mla/precision.hpp"

namespace mla::cpu {

enum class VectorIsa { Baseline, Avx2, Avx512 };

struct VectorKernels {
  VectorIsa isa;
  const char* name;  // "avx512" | "avx2" | "baseline"

  // y[i] = exp(x[i]) for i < n (the softmax's exp; y may equal x).
  void (*exp)(const float* x, float* y, int64_t n);

  // One softmax row (docs/math.md §3.6 steps 3-5, §7 rows 10-13). In: row[0:visible], the fp32
  // sums q·k of one query against its visible keys. Steps:
  //   x_t = BF16 ? bf16(bf16(row_t) * scaling) : row_t * scaling        (+ 0 mask: exact)
  //   m = max_t x_t;  e_t = exp(x_t - m) (fp32);  sum = Σ_t e_t in double, 16 partial sums
  //   (lane j adds t ≡ j mod 16 in ascending t) combined by a fixed pairwise tree;
  //   p_t = fp32(e_t * (1 / sum)) (the product in double), bf16(p_t) in bf16 mode.
  // Out (either may be null): probs[0:width] = p (in place when probs == row), bits[0:width]
  // = bf16 bits of p (bf16 mode only); both 0 on [visible, width). row is scratch.
  void (*softmax_row)(float* row, int64_t visible, int64_t width, float scaling, Precision precision, float* probs,
                      uint16_t* bits);

  // mass[t] += p[i, t] for i = 0 .. rows-1 in ascending order (double), t < cols; p row stride
  // ld. Zeros add nothing, so a causal block may pass its masked entries.
  void (*add_rows_to_mass)(const float* p, int64_t ld, int64_t rows, int64_t cols, double* mass);
  // The same from bf16 bits (exact widening).
  void (*add_bits_to_mass)(const uint16_t* bits, int64_t ld, int64_t rows, int64_t cols, double* mass);

  // x[i] = bf16(x[i]) (round to nearest even on the bits, NaN kept quiet: mla/bf16.hpp).
  void (*round_bf16)(float* x, int64_t n);
  // bits[i] = bf16 bits of x[i] (the same rounding).
  void (*to_bf16_bits)(const float* x, int64_t n, uint16_t* bits);
  // y[i] = the float value of bits[i] (exact).
  void (*from_bf16_bits)(const uint16_t* bits, int64_t n, float* y);
};

// The kernels for the best instruction set this CPU supports, capped by MLA_VECTOR_ISA (read
// once; an unknown value or a set the CPU lacks is an Error(InvalidArgument)).
const VectorKernels& vector_kernels();

// The kernels of one instruction set, or nullptr when the build or the CPU lacks it.
const VectorKernels* vector_kernels_for(VectorIsa isa);

// Defined by each instruction set's translation unit.
const VectorKernels& vector_kernels_baseline();
const VectorKernels& vector_kernels_avx2();
const VectorKernels& vector_kernels_avx512();

}  // namespace mla::cpu
