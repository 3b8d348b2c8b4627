// cuda/kernels.hpp — launchers of the hand-written kernels (one .cu file each), called by
// cuda_backend.cpp. Pointers are device pointers; `Storage` says whether they hold fp32 or
// bf16 values (the forward's activation type). Every launcher enqueues on `stream`, returns
// cudaGetLastError() (the caller wraps it in MLA_CUDA_CHECK, which names the launcher) and
// never synchronises.
//
// Shape legend: S = tokens (queries), T = keys (= S, no cache), n = num_attention_heads,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r.
//
// This header holds only CUDA runtime types (no library headers: docs/backends.md §4).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "mla/config.hpp"

namespace mla::cuda {

enum class Storage { F32, BF16 };  // element type of activations: fp32 or bf16 (RNE on store)

// rms_norm.cu — out[r, :] = w * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)), with HF's two bf16
// roundings in bf16 mode.  x: [rows, dim] with row stride x_row_stride; w: [dim]; out: [rows, dim].
cudaError_t launch_rms_norm(Storage st, const void* x, int64_t x_row_stride, const void* weight, void* out,
                            int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// rope.cu — query_states [n, S, d_qk] from q [S, n*d_qk] (head-major: nope | rope), RoPE on the
// rope half in `style` (mla/config.hpp; de-interleaved first for Interleave). cos/sin: [S, d_r] in
// T-storage for Split / Interleave; [S, d_r/2] fp32 for Complex (DeepseekV2).
cudaError_t launch_build_query_states(Storage st, const void* q, const void* cos, const void* sin,
                                      void* query_states, int64_t seq_len, int64_t heads, int64_t d_nope,
                                      int64_t d_rope, RopeStyle style, cudaStream_t stream);

// rope.cu — key_states [n, S, d_qk] = cat(k_nope, RoPE(k_pe) broadcast over heads) and
// value_states [n, S, d_v] from kv [S, n*(d_n+d_v)] and ckv [S, r_kv+d_r] (k_pe = columns r_kv..).
cudaError_t launch_build_key_value_states(Storage st, const void* kv, const void* ckv, int64_t kv_lora_rank,
                                          const void* cos, const void* sin, void* key_states,
                                          void* value_states, int64_t seq_len, int64_t heads, int64_t d_nope,
                                          int64_t d_rope, int64_t d_v, RopeStyle style, cudaStream_t stream);

// tiled_attention.cu — the attention of every head without an [n, S, S] tensor (docs/math.md
// §3.6, docs/backends.md §4): from query_states / key_states [n, S, d_qk] and value_states
// [n, S, d_v] (T), attn_context [S, n*d_v] (T) = merge_heads(P · V) and head_scores [n, S]
// (double) = the H2O mass each key receives per head, with P = softmax(mask(round(round(q k^T)
// * scaling))) rounded to T; P itself is written to attn_weights [n, S, S] (T) only when that
// pointer is not null. mass_partials: [n, C, S] doubles of scratch for C = mass_chunks >= 1
// chunks of query tiles (the backend's C is attention_mass_chunks, launch_geometry.hpp; any C
// gives a valid result, C fixes the mass's summation order). causal: key t is hidden from
// query s iff t > s. Two launches.
struct TiledAttention {
  const void* query_states = nullptr;
  const void* key_states = nullptr;
  const void* value_states = nullptr;
  void* attn_context = nullptr;
  double* mass_partials = nullptr;
  double* head_scores = nullptr;
  void* attn_weights = nullptr;  // null: the probabilities are not kept
  int64_t seq_len = 0, heads = 0, qk_head_dim = 0, v_head_dim = 0;
  int64_t mass_chunks = 1;  // C
  float scaling = 1.0f;  // fp32(softmax_scale), as PyTorch's scalar multiply uses it
  bool causal = true;
};
cudaError_t launch_tiled_attention(Storage st, const TiledAttention& in, cudaStream_t stream);

// layout.cu — out[r, c] = bias[c] (bias rows ahead of a beta = 1 GEMM: one rounding, as addmm).
cudaError_t launch_broadcast_rows(Storage st, const void* bias, void* out, int64_t rows, int64_t cols,
                                  cudaStream_t stream);

}  // namespace mla::cuda
