// cuda/gemm_plan.hpp — the cuBLAS arguments of every GEMM of the forward, derived once from
// the row-major shapes. Plain C++ (no CUDA headers) so the suite cuda_host checks the
// arithmetic on machines without a GPU; cuda_backend.cpp turns a GemmPlan into one
// cublasGemmEx / cublasGemmStridedBatchedEx call.
//
// Shape legend: S = tokens (queries = keys, no cache), H = hidden_size, n = heads,
//   d_qk = qk_nope_head_dim + qk_rope_head_dim, d_v = v_head_dim.
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
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batches
  int64_t batch = 1;
};

// cuBLAS takes m, n, k, ld* and batchCount as int; refuse anything larger with a clear error
// instead of letting the value wrap.
inline void check_gemm_fits(const GemmPlan& g) {
  const int64_t vals[] = {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch};
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

// Scores, per head h (HF: torch.matmul(query, key.transpose(2, 3))):
//   scores_h [S, T] = Q_h [S, d_qk] · K_h^T,  Q_h, K_h row-major in [n, S, d_qk] buffers.
// Row-major scores_h [S, T] == column-major [T, S], ldc = T.
//   scores_h^T = K_h · Q_h^T.
//   K_h row-major [T, d_qk] == column-major [d_qk, T] (ld d_qk); op T gives [T, d_qk].
//   Q_h row-major [S, d_qk] == column-major [d_qk, S] (ld d_qk); op N keeps it.
// => cublasGemmStridedBatchedEx(OP_T, OP_N, m = T, n = S, k = d_qk, A = key_states, lda = d_qk,
//    strideA = T*d_qk, B = query_states, ldb = d_qk, strideB = S*d_qk, C = scores, ldc = T,
//    strideC = S*T, batch = n).  alpha = 1: the softmax scale is applied afterwards, as HF does.
inline GemmPlan scores_plan(int64_t heads, int64_t queries, int64_t keys, int64_t qk_head_dim) {
  GemmPlan g;
  g.what = "scores = query_states . key_states^T";
  g.op_a = Op::T;
  g.op_b = Op::N;
  g.m = keys;
  g.n = queries;
  g.k = qk_head_dim;
  g.lda = qk_head_dim;
  g.ldb = qk_head_dim;
  g.ldc = keys;
  g.stride_a = keys * qk_head_dim;
  g.stride_b = queries * qk_head_dim;
  g.stride_c = queries * keys;
  g.batch = heads;
  check_gemm_fits(g);
  return g;
}

// Weighted values, per head h (HF: torch.matmul(attn_weights, value_states), then
// transpose(1, 2).reshape(S, n*d_v)):
//   O_h [S, d_v] = P_h [S, T] · V_h [T, d_v].
// The output is written straight into the merged [S, n*d_v] layout that o_proj reads: element
// (s, e) of head h sits at s*(n*d_v) + h*d_v + e, i.e. a row-major [S, d_v] block with row
// stride n*d_v starting at h*d_v (the transpose+reshape is a pure copy, so this is exact).
// Row-major O_h (row stride n*d_v) == column-major [d_v, S] with ldc = n*d_v.
//   O_h^T = V_h^T · P_h^T.
//   V_h row-major [T, d_v] == column-major [d_v, T] (ld d_v); op N.
//   P_h row-major [S, T]   == column-major [T, S] (ld T);     op N.
// => cublasGemmStridedBatchedEx(OP_N, OP_N, m = d_v, n = S, k = T, A = value_states, lda = d_v,
//    strideA = T*d_v, B = probs, ldb = T, strideB = S*T, C = attn_flat, ldc = n*d_v,
//    strideC = d_v, batch = n).
inline GemmPlan pv_plan(int64_t heads, int64_t queries, int64_t keys, int64_t v_head_dim) {
  GemmPlan g;
  g.what = "attn = probs . value_states";
  g.op_a = Op::N;
  g.op_b = Op::N;
  g.m = v_head_dim;
  g.n = queries;
  g.k = keys;
  g.lda = v_head_dim;
  g.ldb = keys;
  g.ldc = heads * v_head_dim;
  g.stride_a = keys * v_head_dim;
  g.stride_b = queries * keys;
  g.stride_c = v_head_dim;
  g.batch = heads;
  check_gemm_fits(g);
  return g;
}

// Offset (in elements, from the matrix start) of row-major element (r, c) as the column-major
// GEMM sees it: column-major (i, j) of C^T lives at i + j*ldc, and (i, j) = (c, r).
constexpr int64_t colmajor_offset(int64_t row, int64_t col, int64_t ld) { return col + row * ld; }

}  // namespace mla::cuda
