// src/cpu/kernel_check.hpp — no oneDNN kernel runs unchecked (docs/cpu-gemm.md §10).
//
// oneDNN picks its kernels by ISA and data type at run time, and a kernel or our description
// of its operands can be wrong on a CPU no suite ran on (it was: bf16 operands on gemm:jit's
// plain layout returned cosine 0.02 with exit 0 at ONEDNN_MAX_CPU_ISA=AVX512_CORE on Zen 4).
// So before a oneDNN engine serves a run, each product kind it will run is multiplied once on a
// small probe and compared with a reference:
//   projection   y [9, 144] = x [9, 64] W^T [64, 144] + b   (two column slices; bf16: bf16
//                values, one rounding of y) against the same sum in double
//   attention    the per-head products (scores = q k^T, P·V) of a causal tiled_attention,
//                2 heads x 80 tokens (a full and a partial 64-row block), d_qk 12, d_v 8,
//                against the Eigen products of the same call (suite tiled ties those to
//                the whole-matrix attention)
// A product whose result leaves its row of kKernelCheckTolerances is refused: the engine falls
// back (attention products to Eigen, a refused projection to the Eigen engine), the run's
// header and report.json say which kernel was refused and why, and an explicit --gemm onednn
// that cannot be honoured is one error line. The verdicts are computed once per process and
// precision (measured cost: docs/cpu-gemm.md §10).
#pragma once

#include <string>

namespace mla::cpu {

class GemmEngine;

// One row per product and precision: the largest normalized error ||got - ref|| / ||ref|| a
// correct kernel can give on the probe, and why.
struct KernelTolerance {
  const char* product;    // "projection" | "attention"
  bool bf16;
  double max_norm_error;
  const char* reason;
};
inline constexpr KernelTolerance kKernelCheckTolerances[] = {
    {"projection", false, 1e-5,
     "fp32 sums of 64 products in another order: |error| <= 64 u32 ~ 3.8e-6 of the sum of |terms| (typically "
     "sqrt(64) u32 = 4.8e-7 of the norm)"},
    {"projection", true, 1e-2,
     "the same sums, then one bf16 rounding each; an order change flips a rounding only near a boundary: at most "
     "one ulp (2^-7) on a few elements (~4e-3 when every element flipped by half an ulp)"},
    {"attention", false, 1e-4,
     "fp32 scores and P·V sums in another order (<= 80 terms), through the softmax (x ~3): ~1e-5"},
    {"attention", true, 5e-2,
     "bf16 roundings of the scores, probabilities and output (docs/math.md §7) flipped where the other order "
     "crosses a boundary: measured < 1e-2 on the probe; a wrong kernel gives O(1)"},
};

// "" when the product agrees with its reference within its row, else one sentence: the product,
// the precision, the error against the bound ("oneDNN's bf16 projection kernel gemm:jit
// disagrees with the reference on its probe: normalized error 1.06 > 0.01").
std::string check_projection_kernel(GemmEngine& engine, bool bf16);
std::string check_attention_kernel(bool bf16);

// Test hook: the environment variable MLA_TEST_KERNEL_CHECK_FAULT=projection|attention makes
// that product's probe result wrong (one element negated and scaled), so the refusal, the
// fallback and the messages can be tested on any machine.
inline constexpr const char* kKernelCheckFaultVariable = "MLA_TEST_KERNEL_CHECK_FAULT";

}  // namespace mla::cpu
