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

// The instruction set the fixed-order fp32 kernels run on this CPU: "avx512f", "avx2+fma" or
// "scalar std::fma" (the results are the same on each; only the speed differs).
const char* fixed_order_isa();
// Whether the AVX2+FMA paths may run (true on AVX-512 machines too).
bool fixed_order_avx2();
// Runs the kernels on `name` ("avx512bf16": the bf16 pair chains on vdpbf16ps, "avx512f",
// "avx2+fma", "scalar") from now on, for tests and benchmarks that compare the paths; false
// (nothing changed) when this CPU lacks it. A FixedOrderLinear keeps the path it was made on.
bool set_fixed_order_isa(const std::string& name);

// The kernel of the bf16 pair chains here: "vdpbf16ps" (AVX512-BF16), else the fp32 path that
// computes the same bits ("avx512f, FTZ+DAZ", "avx2+fma, FTZ+DAZ", "scalar std::fma, flushed").
const char* fixed_order_pair_kernel();
// What eval and the forward report as their engine: "fixed-order fp32 FMA chains (avx512f)" in
// fp32, "fixed-order bf16 pair chains (vdpbf16ps)" in bf16.
std::string fixed_order_engine_name(Precision precision);

// The engine of the whole-model forward (src/model/). Its kind() reports Gemm::Auto (it is not
// one of --gemm's choices).
std::unique_ptr<GemmEngine> make_fixed_order_engine();

// y[s, o] = dot(x[s, :], W[o, :]) (+ b[o] in fp32), bf16: rounded once. fp32: dot is the fma
// chain above; bf16: the pair chain (fixed_order.cpp, docs/cpu-gemm.md §11) of x and W rounded
// to bf16. The core of the engine's PreparedLinear, exposed for kernels that keep their own
// packed weights.
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
  void pack_panels(const float* w, int threads);
  void pack_pairs(const float* w, int threads);
  template <bool Pairs>
  void chains(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* acc, int64_t ld) const;
  void fma_chains(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* acc, int64_t ld) const;
  void pair_chains_emulated(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* acc,
                            int64_t ld) const;
  void pair_chains_native(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* acc,
                          int64_t ld) const;

  int64_t out_, in_, panels_;
  Precision precision_;
  bool pairs_ = false;         // bf16: the pair chain
  bool native_pairs_ = false;  // ... on vdpbf16ps (packed_pairs_), else on the fp32 kernels (packed_)
  std::unique_ptr<float[]> packed_;  // [panels][in][16], zero past `out` (written once, by the packing workers)
  std::unique_ptr<uint16_t[]> packed_pairs_;  // [panels][ceil(in/2)][16][2] bf16 bits, zero past `out` and `in`
  std::vector<float> bias_;    // [out] or empty
};

// e[i] = exp(x[i]) for i < count (x <= 88.7; exp(x) underflows to 0 below about -87.3).
void exp_lanes(const float* x, float* e, int64_t count);
float exp_fixed(float x);  // the same function on one value (same bits as a lane of exp_lanes)

// sum of x[0..count) with element j in lane j % 16, lanes summed in fp32 in order, then
// reduced ((l0+l8)+(l4+l12))+... by a fixed tree.
float sum_lanes(const float* x, int64_t count);

}  // namespace mla::cpu
