// src/cpu/cpu_kernels.cpp — the Eigen/BLAS kernels of the cpu backend; see cpu_kernels.hpp for
// each equation, its shapes and its bf16 rounding points (docs/math.md §3, §7).
//
// Shape legend: S = sequence length, d_qk = qk_head_dim, d_v = v_head_dim (as in the header).
#include "cpu_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "mla/bf16.hpp"
#include "mla_build_config.h"
#include "vector_kernels.hpp"

#if MLA_HAVE_BLAS
// OpenBLAS's run-time thread control (cblas.h of the pthread build). Declared here rather
// than including cblas.h next to Eigen's own BLAS prototypes.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
}
#endif

namespace mla::cpu {

#if MLA_HAVE_BLAS
BlasThreads::BlasThreads(int threads) : saved_(openblas_get_num_threads()) {
  openblas_set_num_threads(std::max(threads, 1));
}
BlasThreads::~BlasThreads() { openblas_set_num_threads(saved_); }
const char* blas_description() { return openblas_get_config(); }
#else
BlasThreads::BlasThreads(int threads) : saved_(threads) {}
BlasThreads::~BlasThreads() = default;
const char* blas_description() { return "Eigen's own GEMM kernel (no BLAS)"; }
#endif

// ---- elementwise -------------------------------------------------------------------------

void round_to_bf16_inplace(float* x, int64_t count) { vector_kernels().round_bf16(x, count); }

void round_inplace(Precision p, float* x, int64_t count) {
  if (p == Precision::BF16) round_to_bf16_inplace(x, count);
}

void round_to_bf16_block(float* x, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) round_to_bf16_inplace(x + r * ld, cols);
}

// ---- Linear ------------------------------------------------------------------------------

void linear(const MatrixRM& x, Eigen::Ref<const MatrixRM> weight, const float* bias, Precision precision, int threads,
            MatrixRM& y) {
  const int64_t seq_len = x.rows(), out_features = weight.rows();
  y.resize(seq_len, out_features);
  // Slices of kLinearSlice out-features, fixed whatever `threads` is; one product each, on one
  // thread (OpenBLAS's own threads off while the workers run).
  const int64_t slices = (out_features + kLinearSlice - 1) / kLinearSlice;
  {
    BlasThreads one_blas_thread_per_worker(1);
    parallel_for(slices, threads, [&](int64_t slice, int) {
      const int64_t begin = slice * kLinearSlice, width = std::min(kLinearSlice, out_features - begin);
      y.middleCols(begin, width).noalias() = x * weight.middleRows(begin, width).transpose();
    });
  }
  // epilogue: + bias, then one bf16 rounding of the output; rows split over the workers
  if (bias == nullptr && precision == Precision::FP32) return;
  const int64_t row_slices = std::min<int64_t>(std::max(threads, 1), seq_len);
  parallel_for(row_slices, threads, [&](int64_t slice, int) {
    const int64_t begin = seq_len * slice / row_slices, end = seq_len * (slice + 1) / row_slices;
    for (int64_t s = begin; s < end; ++s) {
      float* row = y.data() + s * out_features;
      if (bias != nullptr) {
        for (int64_t o = 0; o < out_features; ++o) row[o] += bias[o];
      }
      round_inplace(precision, row, out_features);
    }
  });
}

// ---- RMSNorm -------------------------------------------------------------------------------

void rms_norm(const float* x, int64_t ld_x, int64_t rows, int64_t width, const float* weight,
              float eps, Precision precision, float* out, int64_t ld_out) {
  for (int64_t s = 0; s < rows; ++s) {
    const float* xs = x + s * ld_x;
    float* ys = out + s * ld_out;
    // pass 1: variance = mean(x^2)  (fp32 value; accumulated in double)
    double sum_sq = 0.0;
    for (int64_t i = 0; i < width; ++i) sum_sq += static_cast<double>(xs[i]) * static_cast<double>(xs[i]);
    const float variance = static_cast<float>(sum_sq / static_cast<double>(width));
    // pass 2: inv_rms = rsqrt(variance + eps)  (fp32 sum, one fp32 rounding of the rsqrt)
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + eps)));
    // pass 3: out = w * (x * inv_rms), rounded twice in bf16 mode
    for (int64_t i = 0; i < width; ++i) {
      ys[i] = rounded(precision, weight[i] * rounded(precision, xs[i] * inv_rms));
    }
  }
}

// ---- RoPE ------------------------------------------------------------------------------------

void rope(const float* x, float* out, const float* cos, const float* sin, int64_t d_r, RopeStyle style,
          Precision precision) {
  const int64_t half = d_r / 2;
  if (style == RopeStyle::Complex) {
    for (int64_t j = 0; j < half; ++j) {
      const float a = x[2 * j], b = x[2 * j + 1], c = cos[j], s = sin[j];
      const float ac = a * c, bs = b * s, as = a * s, bc = b * c;  // four fp32 products, then one add each
      const float re = ac - bs, im = as + bc;
      out[2 * j] = rounded(precision, re);
      out[2 * j + 1] = rounded(precision, im);
    }
    return;
  }
  const bool interleave = style == RopeStyle::Interleave;
  // y = the de-interleaved view of x, read in place (no copy, so no size limit)
  auto y = [&](int64_t i) { return !interleave ? x[i] : i < half ? x[2 * i] : x[2 * (i - half) + 1]; };
  for (int64_t i = 0; i < d_r; ++i) {
    const float rotated = i < half ? -y(half + i) : y(i - half);  // rotate_half(y)[i]
    const float t1 = rounded(precision, y(i) * cos[i]);
    const float t2 = rounded(precision, rotated * sin[i]);
    out[i] = rounded(precision, t1 + t2);
  }
}

// ---- attention of one head --------------------------------------------------------------------

void block_softmax(const RowBlock& block, bool causal, float scaling, Precision precision, float* probs,
                   int64_t ld_probs) {
  const VectorKernels& k = vector_kernels();
  for (int64_t i = 0; i < block.rows; ++i) {
    float* row = probs + i * ld_probs;
    const int64_t visible = causal ? block.row_begin + i + 1 : block.keys;
    k.softmax_row(row, visible, block.keys, scaling, precision, row, nullptr);
  }
}

void block_scores(const HeadViews& head, int64_t qk_head_dim, const RowBlock& block, float* logits, int64_t ld) {
  const ConstStridedView query(head.query + block.row_begin * head.ld_query, block.rows, qk_head_dim,
                               Eigen::OuterStride<>(head.ld_query));
  const ConstStridedView key(head.key, block.keys, qk_head_dim, Eigen::OuterStride<>(head.ld_key));
  StridedView p(logits, block.rows, block.keys, Eigen::OuterStride<>(ld));
  p.noalias() = query * key.transpose();  // one sgemm, fp32 accumulation
}

void block_scores_softmax(const HeadViews& head, int64_t qk_head_dim, const RowBlock& block, bool causal,
                          float scaling, Precision precision, float* probs, int64_t ld_probs) {
  block_scores(head, qk_head_dim, block, probs, ld_probs);
  block_softmax(block, causal, scaling, precision, probs, ld_probs);
}

void block_probs_value(const HeadViews& head, const float* probs, int64_t ld_probs, const RowBlock& block,
                       int64_t v_head_dim, Precision precision, float* out, int64_t ld_out) {
  const ConstStridedView value(head.value, block.keys, v_head_dim, Eigen::OuterStride<>(head.ld_value));
  const ConstStridedView p(probs, block.rows, block.keys, Eigen::OuterStride<>(ld_probs));
  StridedView o(out, block.rows, v_head_dim, Eigen::OuterStride<>(ld_out));
  o.noalias() = p * value;
  if (precision == Precision::BF16) round_to_bf16_block(out, block.rows, v_head_dim, ld_out);
}

void block_column_sums(const float* probs, int64_t ld_probs, const RowBlock& block, bool causal,
                       double* head_scores) {
  for (int64_t i = 0; i < block.rows; ++i) {
    const float* row = probs + i * ld_probs;
    const int64_t visible = causal ? block.row_begin + i + 1 : block.keys;
    for (int64_t t = 0; t < visible; ++t) head_scores[t] += static_cast<double>(row[t]);
  }
}

}  // namespace mla::cpu
