// cuda/gemm_plan.hpp — the cuBLAS arguments of every GEMM of the forward (the projections: the
// attention's products are in tiled_attention.cu), derived once from the row-major shapes.
// Plain C++ (no CUDA headers) so the suite cuda_host checks the arithmetic on machines without
// a GPU; cuda_backend.cpp turns a GemmPlan into one cublasGemmEx call.
//
// The one rule used everywhere: cuBLAS is column-major, the project is row-major, and a
// row-major [R, C] matrix with row stride ld is, byte for byte, the column-major [C, R]
// matrix (its transpose) with leading dimension ld. So to get a row-major Y = A·B we ask
// cuBLAS for the column-major Y^T = B^T·A^T, i.e. we swap the operands and reuse the buffers
// unchanged.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "mla/error.hpp"

namespace mla::cuda {

enum class Op { N, T };  // CUBLAS_OP_N / CUBLAS_OP_T

struct GemmPlan {
  std::string what;         // named in errors, e.g. "q_a_proj"
  Op op_a = Op::N, op_b = Op::N;
  int64_t m = 0, n = 0, k = 0;          // column-major C [m, n] = op(A) [m, k] · op(B) [k, n]
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// cuBLAS takes m, n, k and ld* as int; refuse anything larger with a clear error
// instead of letting the value wrap.
inline void check_gemm_fits(const GemmPlan& g) {
  const int64_t vals[] = {g.m, g.n, g.k, g.lda, g.ldb, g.ldc};
  for (int64_t v : vals) {
    if (v < 0 || v > INT_MAX)
      fail(ErrorKind::Unsupported, "cuda: GEMM '" + g.what + "' has a dimension of " + std::to_string(v) +
                                       ", beyond cuBLAS's int range (2^31 - 1)");
  }
}

// Linear layer y = x·W^T (nn.Linear, W stored [out, in] row-major as in the checkpoint).
//   x: [rows, in] row-major, W: [out, in] row-major, y: [rows, out] row-major.
// Row-major y [rows, out]  == column-major y^T [out, rows], ldc = out.
//   y^T = W · x^T.
//   W   row-major [out, in] == column-major [in, out] (ld in); op T turns it into [out, in].
//   x   row-major [rows, in] == column-major [in, rows] (ld in); op N keeps x^T [in, rows].
// => cublasGemmEx(OP_T, OP_N, m = out, n = rows, k = in, A = W, lda = in, B = x, ldb = in,
//                 C = y, ldc = out).
inline GemmPlan linear_plan(const std::string& what, int64_t rows, int64_t in, int64_t out) {
  GemmPlan g;
  g.what = what;
  g.op_a = Op::T;
  g.op_b = Op::N;
  g.m = out;
  g.n = rows;
  g.k = in;
  g.lda = in;
  g.ldb = in;
  g.ldc = out;
  check_gemm_fits(g);
  return g;
}

}  // namespace mla::cuda
