// src/cpu/gemm_engine.hpp — the GEMM engines behind the cpu backend's projections
// (q_a_proj, q_b_proj / q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj; docs/cpu-gemm.md).
//
//   Eigen engine   y = x W^T with Eigen 3.4 (+ OpenBLAS sgemm when built with it); the weight
//                  is kept [out, in] row-major, fp32 values (bf16 values in bf16 mode).
//   oneDNN engine  one oneDNN matmul primitive per (weight, S), created on first use and kept;
//                  the weight is reordered ONCE in prepare into the blocked layout the
//                  primitive picks (the layout does not depend on S), in bf16 when the
//                  library has a bf16 matmul kernel for this CPU (brgemm: avx512_core_bf16,
//                  AMX), else the engine is not used for bf16 (the Eigen engine runs, and
//                  the reason is reported).
//
// Numerical contract, identical for both engines (docs/math.md §7):
//   fp32: fp32 operands, fp32 accumulation (oneDNN fpmath mode strict: no bf16/tf32 downconvert).
//   bf16: x and W hold bf16 values; products exact in fp32, fp32 accumulation, + bias in fp32,
//         then ONE rounding of each output to bf16. Only the summation order differs between
//         engines (measured in docs/cpu-gemm.md).
//
// Shape legend: S = rows of x (tokens), in = in_features, out = out_features.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu_kernels.hpp"
#include "mla/attention.hpp"

namespace mla::cpu {

// One Linear layer y = x W^T (+ b) prepared for an engine.
class PreparedLinear {
 public:
  virtual ~PreparedLinear() = default;
  // x: [S, in] (bf16 values in bf16 mode) -> y: [S, out], resized.
  virtual void run(const MatrixRM& x, int threads, MatrixRM& y) = 0;
  // The kernel that runs, e.g. "brg:avx512_core_bf16" or "OpenBLAS sgemm".
  virtual std::string kernel() const = 0;
  // The first output feature of each column slice, then out: one product per slice, each on
  // one worker. A function of the weight's shape alone, never of --threads (docs/cpu-gemm.md §4).
  virtual std::vector<int64_t> slice_bounds() const = 0;
};

// The source of one weight: [out, in] row-major fp32 (the loader's values), bias [out] or null.
struct LinearWeight {
  const char* name;  // "q_a_proj", for error messages
  const float* weight;
  int64_t out_features;
  int64_t in_features;
  const float* bias;
  // When set, keeps `weight` alive: an engine that takes W [out, in] as it is (Eigen, oneDNN's
  // plain layouts) reads it in place instead of copying it, where no rounding would change it:
  // fp32, or bf16 with bf16_values. Null: the engine copies what it keeps.
  std::shared_ptr<const void> owner = nullptr;
  bool bf16_values = false;  // every value of `weight` is a bf16 value (a BF16 checkpoint's)
};

// Whether an engine that takes W as it is may read `w` in place in this precision.
inline bool readable_in_place(const LinearWeight& w, bool bf16) { return w.owner && (!bf16 || w.bf16_values); }

struct GemmHoldings {
  Precision weights = Precision::FP32;  // each prepared weight element is held in this precision
  // a [min(S, 512), n_j] f32 output buffer per slice, for weights cut into two or more slices
  bool slice_buffers = false;
  bool input_copy = false;  // x as bf16 bits [rows, in] during each product
  // takes W [out, in] as stored (Eigen; oneDNN's plain layouts): a layer kept by prepare_shared
  // is read in place where readable_in_place allows, and no copy is held
  bool weights_as_stored = false;
  // the per-head products: OneDnn where oneDNN multiplies operands of the run's precision, else
  // Eigen (+ OpenBLAS): bf16 values on oneDNN's fp32 kernel keep the Eigen products (cpu-gemm.md §1)
  Gemm attention_products = Gemm::Eigen;
};

class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  virtual Gemm kind() const = 0;
  // "oneDNN 2.6.3" | "Eigen 3.4.0 + OpenBLAS sgemm" | "Eigen 3.4.0"
  virtual std::string name() const = 0;
  // The kernel of a typical projection in the engine's precision ("brg:avx512_core_bf16").
  virtual std::string kernel() const = 0;
  // Converts a validated weight once (mla/validate.hpp: finite, also once rounded to bf16):
  // bf16 rounding in bf16 mode; oneDNN: packed into the primitive's layout.
  virtual std::unique_ptr<PreparedLinear> prepare(const LinearWeight& w, bool bf16, int threads) = 0;
  // What the engine holds besides the outputs (the memory plan, src/cpu/cpu_memory.cpp), and
  // where the attention's per-head products run beside it.
  virtual GemmHoldings holdings() const = 0;
  // The kernel the kernel check refused for this run and why (kernel_check.hpp): "" when none.
  std::string refused;
};

// The engine for `choice` and precision. Auto: oneDNN when it was built in and has a brgemm
// kernel for this CPU and precision, else Eigen. OneDnn: oneDNN when it has ANY kernel for
// the precision, else Eigen (e.g. bf16 on an AVX2-only CPU). `why` receives one sentence
// saying why this engine runs. Error(Unsupported) for OneDnn in a build without oneDNN.
std::unique_ptr<GemmEngine> make_gemm_engine(Gemm choice, bool bf16, std::string& why);

// True when the build links oneDNN.
bool onednn_built();

// The number of column slices of the oneDNN engine's projection with `out` output features: a
// function of out alone, never of --threads (docs/cpu-gemm.md §4). 1 below 128 features. Their
// boundaries lie on multiples of kOnednnSliceQuantum (the blocked layouts' N block).
inline constexpr int64_t kOnednnSliceQuantum = 64;
// ... and on multiples of this where the kernel takes W plain (gemm:jit): no N block to respect.
inline constexpr int64_t kPlainSliceQuantum = 16;
int64_t onednn_slice_count(int64_t out);

// The reorders the oneDNN engines (this file's projections, onednn_attention.hpp's per-head
// products) have run outside their primitives since the process started, by kind
// (mla/attention.hpp OnednnReorders; docs/cpu-gemm.md §9). All 0 in a build without oneDNN.
OnednnReorders onednn_reorders();

// [0, width, 2 width, ..., out]: the slice_bounds of an engine whose slices have one fixed width.
std::vector<int64_t> fixed_width_bounds(int64_t out, int64_t width);

}  // namespace mla::cpu
