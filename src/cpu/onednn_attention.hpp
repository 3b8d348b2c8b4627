// src/cpu/onednn_attention.hpp — the per-head products of streaming_attention on oneDNN matmul
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

#include <memory>
#include <string>

#include "streaming_attention.hpp"

namespace mla::cpu {

// One worker's oneDNN products for heads of `kv` (bf16 operands when bf16). Throws
// Error(Unsupported) when oneDNN has no matmul for the shape (message names --gemm eigen).
std::unique_ptr<BlockProducts> make_onednn_block_products(const KeyValueStates& kv, bool bf16);

// The kernel oneDNN runs for a typical score product (64 rows, 256 keys, d_qk 192) in the
// precision, e.g. "brg:avx512_core_bf16"; "" when it has none.
std::string onednn_attention_kernel(bool bf16);

}  // namespace mla::cpu
