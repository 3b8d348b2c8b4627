// src/cpu/cpu_kernels.hpp — the equations of one MLA attention layer (HF DeepseekV3Attention,
// eager) as Eigen/BLAS kernels, fp32 or PyTorch-bf16 emulation, used by the cpu backend
// (cpu_backend.cpp). One function per equation of docs/math.md (§3).
//
// Shape legend (config names; docs/math.md symbols in brackets):
//   S   = sequence length (tokens in this call)
//   H   = hidden_size
//   n   = num_attention_heads                    [n_h]
//   r_q = q_lora_rank                            [d_c']
//   r_kv= kv_lora_rank                           [d_c]
//   d_n = qk_nope_head_dim                       [d_h]
//   d_r = qk_rope_head_dim                       [d_h^R]
//   d_v = v_head_dim
//   d_qk= d_n + d_r                              (qk_head_dim)
//
// Layout: every matrix is row-major and contiguous (MatrixRM). A Linear weight is kept as
// stored, [out, in], so y = x W^T is one sgemm with W read transposed (no copy).
//
// bf16 mode ("bf16 inputs, fp32 accumulation"): weights and activations hold bf16 VALUES in
// fp32 storage. The product of two bf16 values is exact in fp32, so an sgemm on such floats
// followed by one rounding of its output is the bf16 GEMM PyTorch runs (docs/math.md §7). Each
// function below names the §7 rounding points it applies.
#pragma once

#include "mla/threads.hpp"
#include <cstdint>
#include <functional>
#include <vector>

#include <Eigen/Core>

#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/config.hpp"

namespace mla::cpu {

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// A row-major view with an explicit row stride (one head's columns inside [S, n*d]).
using StridedView = Eigen::Map<MatrixRM, 0, Eigen::OuterStride<>>;
using ConstStridedView = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;

// ---- threading ---------------------------------------------------------------------------

// The worker pool (mla/threads.hpp), by its names in this namespace.
using mla::parallel_for;
using mla::resolve_threads;

// While alive, OpenBLAS uses `threads` threads per sgemm (no effect without OpenBLAS).
class BlasThreads {
 public:
  explicit BlasThreads(int threads);
  ~BlasThreads();
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int saved_ = 0;
};

// "OpenBLAS 0.3.21 ... (sgemm)" or "Eigen's own GEMM kernel (no BLAS)".
const char* blas_description();

// ---- elementwise -------------------------------------------------------------------------

// x[i] = bf16(x[i]) for i < count (round to nearest even on the bits, mla/bf16.hpp; the
// vector kernels of vector_kernels.hpp).
void round_to_bf16_inplace(float* x, int64_t count);
// The same on a rows x cols block with row stride `ld`.
void round_to_bf16_block(float* x, int64_t rows, int64_t cols, int64_t ld);
// v as a run of precision p holds it: bf16(v) in bf16 (docs/math.md §7), v in fp32.
inline float rounded(Precision p, float v) { return p == Precision::BF16 ? round_to_bf16(v) : v; }
// x[i] = rounded(p, x[i]) for i < count (round_to_bf16_inplace in bf16; nothing in fp32).
void round_inplace(Precision p, float* x, int64_t count);

// ---- §3.1 / §3.3 / §3.6.7 Linear ----------------------------------------------------------

// y = x W^T (+ b)                                   torch: y = F.linear(x, W, b)
//   x: [S, in], weight: [out, in], bias: [out] or nullptr -> y: [S, out]
//   bf16: y = bf16(fp32 sum) (§7 rows 1, 3, 5, 7, 15; the bias joins the fp32 sum).
// The out-features are cut into fixed slices of kLinearSlice columns (the cut does not depend on
// `threads`), and each slice is one single-threaded product (OpenBLAS sgemm, or Eigen's kernel
// without BLAS) run by one of `threads` workers. So y is the same bits for every thread count:
// a multi-threaded sgemm partitions the product by the thread count, and its edge kernels sum
// in another order (seen with OPENBLAS_CORETYPE=Haswell on a Zen 4 core; docs/cpu-gemm.md §2).
inline constexpr int64_t kLinearSlice = 64;
void linear(const MatrixRM& x, Eigen::Ref<const MatrixRM> weight, const float* bias, Precision precision, int threads,
            MatrixRM& y);

// ---- §3.5 RMSNorm --------------------------------------------------------------------------

// out[s, i] = w[i] * (x[s, i] * rsqrt(mean_i x[s, i]^2 + eps))     torch: DeepseekV3RMSNorm
//   x: rows x width at `x` (row stride ld_x) -> out: rows x width (row stride ld_out)
//   mean of squares accumulated in double, rounded to fp32 (HF: fp32 mean); variance + eps
//   in fp32; rsqrt evaluated in double and rounded once to fp32.
//   bf16: yb = bf16(x * rsqrt(...)); out = bf16(w * yb)  (§7 rows 2 and 6: two roundings).
void rms_norm(const float* x, int64_t ld_x, int64_t rows, int64_t width, const float* weight,
              float eps, Precision precision, float* out, int64_t ld_out);

// ---- §3.4 / §6 RoPE -------------------------------------------------------------------------

// Rotates one d_r-wide vector x into out (mla/config.hpp RopeStyle; docs/math.md §6):
//   Split / Interleave (HF DeepseekV3 apply_rotary_pos_emb(_interleave)):
//     y = x (Split), or y[j] = x[2j], y[d_r/2 + j] = x[2j+1] (Interleave: de-interleave, exact)
//     out = y * cos + rotate_half(y) * sin,  rotate_half(y) = [-y[d_r/2:], y[:d_r/2]]
//     bf16: t1 = bf16(y*cos), t2 = bf16(rotate_half(y)*sin), out = bf16(t1 + t2)  (§7 row 9)
//     cos/sin: the token's d_r-wide table rows (already bf16 values in bf16 mode, §7 row 8);
//     out is in HF's (de-interleaved) order, as HF's query/key states hold it.
//   Complex (HF DeepseekV2 apply_rotary_emb): pair (a, b) = (x[2j], x[2j+1]) times c + i s,
//     c = cos[j], s = sin[j] (fp32 tables, never rounded to bf16):
//     out[2j] = fp32(fp32(a c) - fp32(b s)),  out[2j+1] = fp32(fp32(a s) + fp32(b c)),
//     then one bf16 rounding of each in bf16 mode (torch: x.float() * freqs_cis, .type_as(x)).
// out (d_r floats) must not overlap x.
void rope(const float* x, float* out, const float* cos, const float* sin, int64_t d_r, RopeStyle style,
          Precision precision);

// ---- §3.6 attention of one head ---------------------------------------------------------------

struct HeadViews {
  const float* query;  // [S, d_qk] row stride ld_query  (q_nope | roped q_rot)
  int64_t ld_query;
  const float* key;    // [S, d_qk] row stride ld_key    (k_nope | roped k_rot)
  int64_t ld_key;
  const float* value;  // [S, d_v]  row stride ld_value
  int64_t ld_value;
};

// Rows of one block of queries: with a causal mask, queries [row_begin, row_end) see keys
// [0, row_end) at most; the keys past each query are masked, their probabilities are exactly 0
// and are not computed. Without a mask a block sees every key.
constexpr int64_t kQueryRowBlock = 64;

// The attention of one head is computed per block of query rows by the functions
// below (tiled_attention.hpp runs them on every block, so no [S, S] matrix is needed).
// A block: query rows [row_begin, row_begin + rows) against keys [0, keys), where
//   keys = row_begin + rows (causal: later keys are masked for every row of the block) or S.
struct RowBlock {
  int64_t row_begin;
  int64_t rows;
  int64_t keys;
};

// probs[i, t] = softmax(mask(scaling * scores[i, t])) in place, for t < keys   (§3.6 steps 3-4)
//   probs: [rows, keys] row stride ld_probs >= keys, holding the fp32 sums scores = q k^T of the
//   block (any GEMM); masked entries t > row_begin+i become exactly 0. Each row is
//   vector_kernels.hpp softmax_row (the instruction set chosen at run time; the same bits on
//   every set): bf16(scores) (§7 row 10), bf16(scores * fp32(scaling)) (row 11), + 0 for visible
//   keys (row 12, exact), softmax in fp32, then bf16(p) (row 13); fp32: the same steps with fp32
//   results. Softmax per row: the max, e = exp(x - max) (fp32), the double sum of e, then
//   p = fp32(e * (1/sum)) (+ bf16).
void block_softmax(const RowBlock& block, bool causal, float scaling, Precision precision, float* probs,
                   int64_t ld_probs);

// logits[i, t] = query[row_begin+i] . key[t] for t < keys: one sgemm (fp32 accumulation) into
//   logits [rows, keys] (row stride ld >= keys).                                 (§3.6 step 2)
void block_scores(const HeadViews& head, int64_t qk_head_dim, const RowBlock& block, float* logits, int64_t ld);

// probs[i, t] = softmax(mask(scaling * query[row_begin+i] key[t]^T)) for t < keys  (§3.6 steps 2-4)
//   block_scores into probs [rows, keys] (row stride ld_probs >= keys), then block_softmax.
void block_scores_softmax(const HeadViews& head, int64_t qk_head_dim, const RowBlock& block, bool causal,
                          float scaling, Precision precision, float* probs, int64_t ld_probs);

// out[row_begin + i, :] = probs[i, 0:keys] value[0:keys, :]    (§3.6 step 6; fp32 accumulation,
//   one sgemm) out: the block's first row at `out` (row stride ld_out); bf16: out = bf16(fp32
//   sum) (§7 row 14).
void block_probs_value(const HeadViews& head, const float* probs, int64_t ld_probs, const RowBlock& block,
                       int64_t v_head_dim, Precision precision, float* out, int64_t ld_out);

// head_scores[t] += probs[i, t] for the block's rows in ascending order, in double (H2O: the
//   attention mass key t receives).
void block_column_sums(const float* probs, int64_t ld_probs, const RowBlock& block, bool causal,
                       double* head_scores);

}  // namespace mla::cpu
