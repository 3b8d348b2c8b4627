// src/cpu/tiled_attention.hpp — the attention of every head (docs/math.md §3.6) and its
// H2O attention mass without the [n, S, S] probabilities: per head and block of query rows,
// the block's logits [rows, keys] are computed into a per-worker buffer, then each row in turn
// (vector_kernels.hpp softmax_row, while the row is in cache):
//   pass 1: the scaled scores and their max
//   pass 2: e = exp(x - max) and their double sum
//   pass 3: p = fp32(e / sum) (bf16(p) in bf16 mode)
// then the block's P·V into attn_context and the per-head attention mass (column sums, double).
// Memory is O(S): keys/values in the run's precision (KeyValueStates) plus, per head being
// worked on (at most one per worker), its keys/values widened to fp32 [S, d_qk + d_v] (oneDNN
// products: its keys [S, d_qk] in the run's precision) and per worker one logits block
// [64, S] (oneDNN bf16: and its probabilities as bf16 bits). Only a
// dump asks for the [n, S, S] probabilities (TiledOutputs::attn_weights), which are then
// copied out block by block: the values do not depend on whether they are kept.
// The two products of each block (scores = q k^T, P·V) run on the engine of the run's
// projections (BlockProducts): Eigen + OpenBLAS sgemm (cpu_kernels.hpp's block_scores and
// block_probs_value) or oneDNN matmul primitives (onednn_attention.hpp: bf16 operands read from
// the stored bits); the softmax rows and the column sums are the same code for both
// (vector_kernels.hpp, chosen for the CPU at run time). Suite streaming checks the Eigen result equals the attention computed on
// each head's whole [S, S] probability matrix, and bounds the oneDNN one's difference from it;
// see docs/long-context.md.
//
// Shape legend: S = tokens, n = num_attention_heads, d_n = qk_nope_head_dim,
// d_r = qk_rope_head_dim, d_v = v_head_dim, d_qk = d_n + d_r.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cpu_kernels.hpp"
#include "mla/attention.hpp"

namespace mla::cpu {

// One row-major [rows, cols] matrix stored in the run's precision: bf16 bits (a bf16 run,
// whose values are bf16 values: storing them is exact and halves the memory) or fp32.
class PrecisionMatrix {
 public:
  PrecisionMatrix() = default;
  PrecisionMatrix(int64_t rows, int64_t cols, Precision precision);
  // this[row_begin + i, j] = src[i * ld_src + j] for i < rows, j < cols (in bf16 mode the
  // source values must be bf16 values; rounding them is then exact). Rows split over `threads`.
  void set_rows(int64_t row_begin, int64_t rows, const float* src, int64_t ld_src, int threads = 1);
  // dst[i * ld_dst + j] = this[row_begin + i, j] as fp32 (exact widening). Rows split over `threads`.
  void widen_rows(int64_t row_begin, int64_t rows, float* dst, int64_t ld_dst, int threads = 1) const;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  Precision precision() const { return precision_; }
  const uint16_t* bits() const { return bits_.data(); }   // bf16 run: [rows, cols] row-major
  const float* values() const { return values_.data(); }  // fp32 run: [rows, cols] row-major
  int64_t bytes() const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  Precision precision_ = Precision::FP32;
  std::vector<uint16_t> bits_;  // bf16 run
  std::vector<float> values_;   // fp32 run
};

// The keys and values of every head as the attention reads them, in the run's precision:
//   key_nope[h]  [S, d_n]   (kv_b_proj output, head h's first d_n features)
//   k_pe_roped   [S, d_r]   (the one roped rope key shared by every head)
//   value[h]     [S, d_v]   (kv_b_proj output, head h's last d_v features)
// key_states[h] = [key_nope[h] | k_pe_roped] (HF's layout, without repeating k_pe n times).
struct KeyValueStates {
  KeyValueStates(int64_t seq_len, int64_t heads, int64_t qk_nope_head_dim, int64_t qk_rope_head_dim,
                 int64_t v_head_dim, Precision precision);
  // Token rows [row_begin, row_begin + rows) of kv [rows, n*(d_n+d_v)] (row stride ld_kv;
  // head h at column h*(d_n+d_v): k_nope | value), so kv_b_proj may run in row chunks; heads
  // split over `threads`.
  void set_kv_rows(int64_t row_begin, int64_t rows, const float* kv, int64_t ld_kv, int threads = 1);
  // Token rows of k_pe_roped [rows, d_r] (row stride ld).
  void set_k_pe_rows(int64_t row_begin, int64_t rows, const float* k_pe_roped, int64_t ld);
  int64_t bytes() const;

  int64_t seq_len, heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  std::vector<PrecisionMatrix> key_nope;  // [n] x [S, d_n]
  PrecisionMatrix k_pe_roped;             // [S, d_r]
  std::vector<PrecisionMatrix> value;     // [n] x [S, d_v]
};

// Called after each finished (head, row block) with the query·key pairs computed so far in
// this call and the call's total (tiled_pairs): the work, so the time left can be
// extrapolated (causal blocks grow with their row). Calls come from the worker threads one at
// a time (under a lock), `done` strictly increasing.
using BlockProgress = std::function<void(int64_t done, int64_t total)>;

// The keys and values of one head as an engine's products read them, for keys [0, keys);
// loaded once per head (and call) and shared by every worker on that head.
class HeadOperands {
 public:
  virtual ~HeadOperands() = default;
  virtual void load(const KeyValueStates& kv, int64_t h, int64_t keys) = 0;
};

// One worker's two products of a block (its own buffers and scratchpad), on one engine:
// Gemm::Eigen (Eigen + OpenBLAS sgemm on the keys/values widened to fp32, cpu_kernels.hpp
// block_scores / block_probs_value) or Gemm::OneDnn (onednn_attention.hpp).
class BlockProducts {
 public:
  virtual ~BlockProducts() = default;
  // A head's operands in the layout this engine reads.
  virtual std::unique_ptr<HeadOperands> make_operands() const = 0;
  // The keys the products compute for a block: block.keys, or more (the engine's shapes are
  // rounded up; the extra keys are masked: probability exactly 0).
  virtual int64_t columns(const RowBlock& block) const = 0;
  // The row stride of a block's [rows, columns] logits / probabilities buffer (>= columns).
  virtual int64_t ld_probs(const RowBlock& block) const = 0;
  // True when probs_value reads the probabilities as bf16 bits (a bf16 run on oneDNN).
  virtual bool takes_bits() const = 0;
  // logits [rows, columns] (row stride ld) = q_block k^T, fp32 sums. query: the block's first row
  // [rows, d_qk] (row stride ld_query: q_nope | roped q_rot).
  virtual void scores(const HeadOperands& head, const float* query, int64_t ld_query, const RowBlock& block,
                      float* logits, int64_t ld) = 0;
  // out [rows, d_v] (row stride ld_out) = p value[0:columns] (bf16: one rounding), p the block's
  // probabilities [rows, columns] (0 past each row's visible keys): fp32 at probs, or bf16 bits
  // at bits when takes_bits() (row stride ld).
  virtual void probs_value(const HeadOperands& head, const RowBlock& block, const float* probs, const uint16_t* bits,
                           int64_t ld, float* out, int64_t ld_out) = 0;
};

// One worker's products on `engine` (Gemm::Eigen or Gemm::OneDnn) for the heads of kv.
std::unique_ptr<BlockProducts> make_block_products(Gemm engine, const KeyValueStates& kv, Precision precision);

struct TiledOutputs {
  float* attn_context;     // [rows, n*d_v] the call's query rows, row stride ld_context; head h at
  int64_t ld_context;      //   column h*d_v (bf16 values in bf16 mode); nullptr: P·V not computed
  double* head_scores;     // [n*S] attention mass key t receives from head h: head_scores[h*S + t]
                           //   (set by a call whose rows start at 0, added to by later calls)
  double* attn_weights = nullptr;  // [n, S, S] the probabilities (dumps only: O(S^2)); nullptr = not kept
};

// The attention of all heads for query rows [row_begin, row_end) of the S tokens, streamed.
// query: row row_begin of [S, n*d_qk] (row stride ld_query; head h at column h*d_qk: q_nope |
// roped q_rot); kv: every token's keys/values. Causal blocks above the diagonal are skipped
// (block [r, r+64) reads keys [0, r+64) only); blocks are kQueryRowBlock rows counted from 0,
// so row_begin must be a multiple of kQueryRowBlock. Work items are (head, block) pairs, head
// by head, handed to `threads` workers as they come free (so every worker is busy whatever the
// number of heads); the workers of one head share its operands, and each head's mass is added
// block after block in row order, whichever worker computed the block, so the result does not
// depend on the threads. The products run on `products` (Gemm::Eigen or Gemm::OneDnn), the
// softmax rows on vector_kernels.hpp.
struct QueryRows {
  int64_t begin = 0;
  int64_t end = -1;  // -1: S
};
void tiled_attention(const float* query, int64_t ld_query, const KeyValueStates& kv, bool causal,
                         float scaling, Precision precision, int threads, Gemm products, const BlockProgress& progress,
                         const TiledOutputs& out, QueryRows rows = {});

// Query·key pairs tiled_attention computes for query rows [row_begin, row_end) of S tokens
// and n heads (causal: each block against keys [0, its last row + 1)); what it reports progress in.
int64_t tiled_pairs(int64_t seq_len, int64_t heads, bool causal, QueryRows rows = {});

}  // namespace mla::cpu
