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

namespace mla::cuda {

enum class Storage { F32, BF16 };  // element type of activations: fp32 or bf16 (RNE on store)

// rms_norm.cu — out[r, :] = w * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)), with HF's two bf16
// roundings in bf16 mode.  x: [rows, dim] with row stride x_row_stride; w: [dim]; out: [rows, dim].
cudaError_t launch_rms_norm(Storage st, const void* x, int64_t x_row_stride, const void* weight, void* out,
                            int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// rope.cu — query_states [n, S, d_qk] from q [S, n*d_qk] (head-major: nope | rope), RoPE on the
// rope half (de-interleaved first when `interleave`), cos/sin [S, d_r].
cudaError_t launch_build_query_states(Storage st, const void* q, const void* cos, const void* sin,
                                      void* query_states, int64_t seq_len, int64_t heads, int64_t d_nope,
                                      int64_t d_rope, bool interleave, cudaStream_t stream);

// rope.cu — key_states [n, S, d_qk] = cat(k_nope, RoPE(k_pe) broadcast over heads) and
// value_states [n, S, d_v] from kv [S, n*(d_n+d_v)] and ckv [S, r_kv+d_r] (k_pe = columns r_kv..).
cudaError_t launch_build_key_value_states(Storage st, const void* kv, const void* ckv, int64_t kv_lora_rank,
                                          const void* cos, const void* sin, void* key_states,
                                          void* value_states, int64_t seq_len, int64_t heads, int64_t d_nope,
                                          int64_t d_rope, int64_t d_v, bool interleave, cudaStream_t stream);

// softmax.cu — in place over scores [n, S, T]: p = softmax_fp32(round(round(s*scaling) + mask)),
// rounded to the storage type. causal: key t is hidden from query s iff t > s, and hidden
// entries get `mask_value` added (finfo(storage dtype).min, as HF's eager mask).
cudaError_t launch_scale_mask_softmax(Storage st, void* scores, int64_t heads, int64_t queries, int64_t keys,
                                      float scaling, bool causal, float mask_value, cudaStream_t stream);

// attention_mass.cu — head_scores[h, t] = sum_s probs[h, s, t] in double, s ascending.
cudaError_t launch_attention_mass(Storage st, const void* probs, double* head_scores, int64_t heads,
                                  int64_t queries, int64_t keys, cudaStream_t stream);

// layout.cu — out[r, c] = bias[c] (bias rows ahead of a beta = 1 GEMM: one rounding, as addmm).
cudaError_t launch_broadcast_rows(Storage st, const void* bias, void* out, int64_t rows, int64_t cols,
                                  cudaStream_t stream);

}  // namespace mla::cuda
