// src/cpu/onednn_attention.hpp — the per-head products of tiled_attention on oneDNN matmul
// primitives, used when the run's GEMM engine is oneDNN (docs/cpu-gemm.md §9):
//
//   scores       = query_block key^T   [rows, keys] = [rows, d_qk] x [d_qk, keys]   docs/math.md §3.6 step 2
//   attn_context = probs value         [rows, d_v]  = [rows, keys] x [keys, d_v]    §3.6 step 6
//
// bf16 run: bf16 operands (the keys/values are KeyValueStates' stored bf16 bits, copied as bits,
// never widened; the query holds bf16 values and converts exactly; the probabilities come as
// the bf16 bits vector_kernels.hpp softmax_row writes), fp32 accumulation, fp32 dst; then
// exactly the roundings of the Eigen path (docs/math.md §7 rows 10-14: the softmax rows round
// the scores, the scaled scores and the probabilities; the P·V output is rounded once). fp32 run: f32 operands, fpmath mode strict.
// Only the summation order differs from the Eigen path (measured in docs/cpu-gemm.md §2).
//
// oneDNN 2.6.3's brgemm kernels take dense operands with fixed dims only (strided operands or
// runtime dims fall back to gemm:jit), so each head's keys are copied into a dense [S, d_qk]
// buffer and each block's query rows into a dense [rows, d_qk] one, the probabilities of a block
// are dense [rows, keys], and there is one primitive per (precision, product, rows, keys),
// created on first use and kept for the process (a causal run of S tokens uses S/64 key counts;
// at most 512 primitives are kept, ~46 MB). Each worker executes with one OpenMP thread, its own
// stream and its own scratchpad (user scratchpad mode), so the backend's threads run heads
// concurrently.
//
// Shape legend: S = tokens, d_qk = qk_nope_head_dim + qk_rope_head_dim, d_v = v_head_dim,
// rows <= 64 query rows of a block, keys = the keys the block sees.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "tiled_attention.hpp"

namespace mla::cpu {

// One worker's oneDNN products for heads of `kv` (bf16 operands when bf16). Throws
// Error(Unsupported) when oneDNN has no matmul for the shape (message names --gemm eigen).
std::unique_ptr<BlockProducts> make_onednn_block_products(const KeyValueStates& kv, bool bf16);

// The kernel oneDNN runs for a typical score product (64 rows, 256 keys, d_qk 192) in the
// precision, e.g. "brg:avx512_core_bf16"; "" when it has none.
std::string onednn_attention_kernel(bool bf16);

// One matmul primitive's shape, dst [rows, n] = src [rows, k] x weights [k, n] (one precision
// per run, so the shape is the cache's key).
struct MatmulShape {
  int64_t rows = 0, k = 0, n = 0;
  auto operator<=>(const MatmulShape&) const = default;
};

// The shapes a causal forward of S tokens asks these products for: the score and P·V shapes of
// every 64-row block of every query pass (query_pass_rows) and the packing shape of each pass's
// operands. A run without the causal mask asks for fewer.
std::set<MatmulShape> onednn_attention_shapes(int64_t S, int64_t d_qk, int64_t d_v);

// How many primitives that makes, with onednn_attention_kernel's probe: the memory plan counts
// each one's JIT code and descriptors (kAttentionPrimitiveBytes, cpu_memory.cpp).
int64_t onednn_attention_primitives(int64_t S, int64_t d_qk, int64_t d_v);

// Test hook: every shape asked of the primitive cache since the log was last cleared (clear =
// true empties it after the copy).
std::set<MatmulShape> onednn_attention_shape_log(bool clear);

// Resident bytes of one such primitive, JIT code and descriptors: measured 89 KB in bf16 and
// 76 KB in fp32 (oneDNN 2.6.3, brgemm on AVX-512, RSS growth over 512 primitives), rounded up.
inline constexpr int64_t kAttentionPrimitiveBytes = int64_t{96} << 10;

// The most primitives alive at once: oneDNN's own primitive cache keeps up to 1024 (its default
// DNNL_PRIMITIVE_CACHE_CAPACITY) after this file's cache of 640 starts over.
inline constexpr int64_t kAttentionPrimitivesAlive = 1024;

}  // namespace mla::cpu
