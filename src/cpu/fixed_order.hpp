// src/cpu/fixed_order.hpp — the fixed-order arithmetic of the whole-model forward on the CPU
// (docs/math.md §15.4): every sum is one fp32 fused multiply-add chain in a fixed index order,
//
//   dot(a, b) = fma(a[K-1], b[K-1], ... fma(a[1], b[1], fma(a[0], b[0], +0.0f)))
//
// so a value depends only on its own operands — not on the other rows of a batch, the row's
// place in it, the number of rows, the thread count or the instruction set (AVX-512, AVX2+FMA
// and the scalar std::fma path give the same bits). This is what lets `mla-h2o eval` promise
// logits bit-identical to the plain forward for a cache that evicted nothing: a decode row
// computed alone, in a batch of decode rows, or inside the causal prefill of all rows is the
// same arithmetic (the GEMMs of oneDNN / OpenBLAS pick kernels and summation orders by shape).
//
//   FixedOrderEngine  y = x W^T (+ b) as a GemmEngine (gemm_engine.hpp): each output one chain
//                     over the in-features in order; W packed once in panels of 16 outputs.
//   exp_lanes         e[i] = exp(x[i]) with one polynomial evaluated identically in every lane
//                     and in scalar code (Cody-Waite reduction, degree-6 minimax, ~1 ulp).
//   sum_lanes         sum of a row as 16 interleaved fp32 partial sums (element j -> lane
//                     j mod 16) reduced by a fixed tree: the same bits for the same row.
//
// Shape legend: S = rows, in = in-features (K), out = out-features.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gemm_engine.hpp"

namespace mla::cpu {

// The instruction set the fixed-order kernels run on this CPU: "avx512f", "avx2+fma" or "scalar
// std::fma" (the results are the same on each; only the speed differs).
const char* fixed_order_isa();
// Whether the AVX2+FMA paths may run (true on AVX-512 machines too).
bool fixed_order_avx2();
// Runs the kernels on `name` ("avx512f", "avx2+fma", "scalar") from now on, for tests and
// benchmarks that compare the paths; false (nothing changed) when this CPU lacks it.
bool set_fixed_order_isa(const std::string& name);

// The engine of the whole-model forward (src/model/). Its kind() reports Gemm::Auto (it is not
// one of --gemm's choices); name() is "fixed-order fp32 FMA chains".
std::unique_ptr<GemmEngine> make_fixed_order_engine();

// y[s, o] = dot(x[s, :], W[o, :]) (+ b[o] in fp32), bf16: rounded once. The core of the engine's
// PreparedLinear, exposed for kernels that keep their own packed weights.
class FixedOrderLinear final : public PreparedLinear {
 public:
  // w: [out, in] row-major fp32 values (rounded to bf16 values first in bf16); bias [out] or null.
  // Packed on `threads` workers (the packing is the same for any number).
  FixedOrderLinear(const float* w, int64_t out, int64_t in, const float* bias, Precision precision, int threads = 1);
  void run(const MatrixRM& x, int threads, MatrixRM& y) override;
  // x: rows x in (row stride ld_x) -> y: rows x out (row stride ld_y).
  void run_rows(const float* x, int64_t rows, int64_t ld_x, float* y, int64_t ld_y, int threads) const;
  std::string kernel() const override;
  std::vector<int64_t> slice_bounds() const override;  // its 16-column panels
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }

 private:
  int64_t out_, in_, panels_;
  Precision precision_;
  std::unique_ptr<float[]> packed_;  // [panels][in][16], zero past `out` (written once, by the packing workers)
  std::vector<float> bias_;    // [out] or empty
};

// e[i] = exp(x[i]) for i < count (x <= 88.7; exp(x) underflows to 0 below about -87.3).
void exp_lanes(const float* x, float* e, int64_t count);
float exp_fixed(float x);  // the same function on one value (same bits as a lane of exp_lanes)

// sum of x[0..count) with element j in lane j % 16, lanes summed in fp32 in order, then
// reduced ((l0+l8)+(l4+l12))+... by a fixed tree.
float sum_lanes(const float* x, int64_t count);

}  // namespace mla::cpu
