// src/cpu/cpu_stages.hpp — the stages of the cpu backend's forward (eigen_backend.cpp), one
// function per stage of HF DeepseekV3Attention.forward, in the order the reference
// (reference/mla_reference.hpp) runs them:
//
//   input     hidden [S, H] -> x (bf16 values in bf16 mode)
//   q_path    q = q_b_proj(q_a_layernorm(q_a_proj(x)))  or  q_proj(x)       docs/math.md §3.1, §3.2
//   kv_path   compressed_kv = kv_a_proj_with_mqa(x) = [latent | k_pe];
//             kv = kv_b_proj(kv_a_layernorm(latent))                          §3.3
//   rope      q's rope halves and k_pe rotated at the given positions         §3.4, §6
//   attend    per head: softmax(mask(scaling q k^T)) v, and the H2O column sums  §3.6
//   o_proj    attn_output = o_proj(attn_context)                              §3.6 step 7
//   export    ForwardResult (widened to double; query/key/value states on request)
//
// The row-wise stages (input, q_path, kv_path, rope, o_proj) take any number of rows with
// their own positions, so a caller that processes new tokens against a cache reuses them as
// they are. attend is the no-cache case: queries and keys are the same S tokens.
//
// Shape legend (config names): S = rows (tokens), H = hidden_size, n = num_attention_heads,
//   r_q = q_lora_rank, r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim,
//   d_v = v_head_dim, d_qk = d_n + d_r. Every matrix is row-major (MatrixRM).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu_kernels.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/tensor.hpp"

namespace mla::cpu {

// One layer's weights as the GEMMs use them: Linear weights [out, in] row-major as stored
// (= W^T column-major for sgemm), fp32 values as loaded or rounded to bf16 values in bf16 mode.
struct PreparedWeights {
  MatrixRM q_a_proj;                           // [r_q, H]             (q_lora_rank set)
  std::vector<float> q_a_layernorm;            // [r_q]
  MatrixRM q_b_proj;                           // [n*d_qk, r_q]
  MatrixRM q_proj;                             // [n*d_qk, H]          (q_lora_rank null)
  MatrixRM kv_a_proj_with_mqa;                 // [r_kv + d_r, H]
  std::vector<float> kv_a_layernorm;           // [r_kv]
  MatrixRM kv_b_proj;                          // [n*(d_n+d_v), r_kv]
  MatrixRM o_proj;                             // [H, n*d_v]
  std::vector<float> q_a_proj_bias;            // [r_q]        attention_bias with q_lora_rank; else empty
  std::vector<float> kv_a_proj_with_mqa_bias;  // [r_kv + d_r] attention_bias; else empty
  std::vector<float> o_proj_bias;              // [H]          attention_bias; else empty
};

// What every stage reads: the geometry, the prepared weights and the run's settings.
struct Layer {
  const AttentionConfig& cfg;
  const PreparedWeights& w;
  bool bf16 = false;              // PyTorch bf16 emulation (docs/math.md §7)
  int threads = 1;                // workers (and OpenBLAS threads of the projections)
  float latent_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm eps
};

// Copies weights the validator accepted for cfg (mla/validate.hpp: validate_layer), rounded
// to bf16 in bf16 mode; absent tensors stay empty.
PreparedWeights prepare_weights(const AttentionConfig& cfg, const LayerWeights& w, bool bf16, int threads);

// hidden [S, H] fp32, validated (mla/validate.hpp: validate_hidden) -> x [S, H]; bf16 mode
// rounds it (HF's input is a bf16 tensor).
MatrixRM input_rows(const TensorF& hidden, bool bf16);

// x [S, H] -> q [S, n*d_qk], head-major: feature h*d_qk + (nope d_n | rope d_r)
MatrixRM q_path(const Layer& L, const MatrixRM& x);

struct KvPath {
  MatrixRM compressed_kv;  // [S, r_kv + d_r]   kv_a_proj_with_mqa(x): latent (r_kv) | k_pe (d_r)
  MatrixRM latent_normed;  // [S, r_kv]         kv_a_layernorm(latent)
  MatrixRM kv;             // [S, n*(d_n+d_v)]  kv_b_proj(latent_normed), head-major: k_nope | value
};
// x [S, H] -> KvPath
KvPath kv_path(const Layer& L, const MatrixRM& x);

// Rotates q's rope halves in place (q: [S, n*d_qk], rope half of head h at h*d_qk + d_n, left
// in HF's de-interleaved order) and returns k_pe_roped [S, d_r] (HF order, shared by all
// heads) from the k_pe columns of compressed_kv [S, r_kv + d_r]. positions: [S], row s at
// positions[s]; cos/sin from the fp32 tables (src/math/rope.cpp), rounded to bf16 in bf16 mode.
MatrixRM rope(const Layer& L, const std::vector<int64_t>& positions, MatrixRM& q, const MatrixRM& compressed_kv);

struct Attention {
  MatrixRM attn_context;             // [S, n*d_v]  P.V, heads concatenated (o_proj input)
  std::vector<double> head_scores;   // [n*S]       head_scores[h*S + t] = sum_s p[h, s, t] (double)
  TensorD attn_weights;              // [n, S, S]   post-softmax probabilities (keep_attn_weights only)
};
// q (roped) [S, n*d_qk], kv [S, n*(d_n+d_v)], k_pe_roped [S, d_r] -> Attention. Heads run in
// parallel in chunks whose probabilities fit a fixed budget (unless keep_attn_weights).
Attention attend(const Layer& L, const MatrixRM& q, const MatrixRM& kv, const MatrixRM& k_pe_roped, bool causal,
                 bool keep_attn_weights);

// attn_context [S, n*d_v] -> attn_output [S, H]
MatrixRM o_proj(const Layer& L, const MatrixRM& attn_context);

}  // namespace mla::cpu
