// src/cpu/attention_stages.hpp — the stages of the CPU attention layer, one function per stage of HF
// DeepseekV3Attention.forward, in the order the reference (reference/mla_reference.hpp) runs
// them; attention_pipeline.hpp composes them (the one CPU attention layer):
//
//   input     hidden [S, H] -> x (bf16 values in bf16 mode)
//   q_path    q = q_b_proj(q_a_layernorm(q_a_proj(x)))  or  q_proj(x)       docs/math.md §3.1, §3.2
//   kv_path   compressed_kv = kv_a_proj_with_mqa(x) = [latent | k_pe];
//             kv = kv_b_proj(kv_a_layernorm(latent))                          §3.3
//   rope      q's rope halves and k_pe rotated at the given positions         §3.4, §6
//   attend    the caller's kernel: tiled per head and block of 64 queries
//             (tiled_attention.hpp) or row by row (row_attention.hpp)     §3.6
//   o_proj    attn_output = o_proj(attn_context)                              §3.6 step 7
//   export    the backend's ForwardResult (widened to double; states on request)
//
// The row-wise stages (input, q_path, kv_path, rope, o_proj) take any number of rows with
// their own positions; on the fixed-order engine (fixed_order.hpp) a row's bits do not depend on
// the other rows, on oneDNN/Eigen the pipeline's kRowChunk chunks keep them.
//
// Shape legend (config names): S = rows (tokens), H = hidden_size, n = num_attention_heads,
//   r_q = q_lora_rank, r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim,
//   d_v = v_head_dim, d_qk = d_n + d_r. Every matrix is row-major (MatrixRM).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu_kernels.hpp"
#include "gemm_engine.hpp"
#include "tiled_attention.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla::cpu {

// One layer's weights as the GEMMs use them: each projection prepared once for the GEMM
// engine (gemm_engine.hpp, docs/cpu-gemm.md: Eigen keeps W [out, in] row-major, oneDNN its own
// blocked layout; bf16 values in bf16 mode; the engine holds the projection's bias), the norm
// weights as fp32. Absent projections (q_a/q_b or q_proj) are null.
struct PreparedWeights {
  std::unique_ptr<PreparedLinear> q_a_proj;            // [r_q, H] (+ bias [r_q])  (q_lora_rank set)
  std::vector<float> q_a_layernorm;                    // [r_q]
  std::unique_ptr<PreparedLinear> q_b_proj;            // [n*d_qk, r_q]
  std::unique_ptr<PreparedLinear> q_proj;              // [n*d_qk, H]              (q_lora_rank null)
  std::unique_ptr<PreparedLinear> kv_a_proj_with_mqa;  // [r_kv + d_r, H] (+ bias [r_kv + d_r])
  std::vector<float> kv_a_layernorm;                   // [r_kv]
  std::unique_ptr<PreparedLinear> kv_b_proj;           // [n*(d_n+d_v), r_kv]
  std::unique_ptr<PreparedLinear> o_proj;              // [H, n*d_v] (+ bias [H])
  GemmInfo gemm;                  // the engine, its kernel, why, and where attend's per-block products run
  std::string attention_kernel;  // the per-block products' kernel on oneDNN, e.g. "brg:avx512_core_bf16"
};

// What every stage reads: the geometry, the prepared weights and the run's settings.
struct Layer {
  const AttentionConfig& cfg;
  const PreparedWeights& w;
  Precision precision = Precision::FP32;  // BF16: PyTorch bf16 emulation (docs/math.md §7)
  int threads = 1;                        // workers (and OpenBLAS threads of the projections)
  float latent_norm_eps = 1e-6f;          // q_a_layernorm / kv_a_layernorm eps
};

// Prepares weights the validator accepted for cfg (mla/validate.hpp: validate_layer) for the
// GEMM engine `gemm` (make_gemm_engine: Eigen by default, the backend passes --gemm), rounded
// to bf16 in bf16 mode; absent tensors stay empty. attend's per-head products run on the same
// engine (oneDNN: onednn_attention.hpp).
// With `kept` (w itself, shared), engines may read weights in place (gemm_engine.hpp LinearWeight).
PreparedWeights prepare_weights(const AttentionConfig& cfg, const LayerWeights& w, Precision precision, int threads,
                                Gemm gemm = Gemm::Eigen, const std::shared_ptr<const LayerWeights>& kept = nullptr);
// The same on a given engine (the whole-model forward passes the fixed-order engine,
// fixed_order.hpp); `requested` and `reason` are reported in PreparedWeights::gemm.
PreparedWeights prepare_weights_on(GemmEngine& engine, const std::string& requested, const std::string& reason,
                                   const AttentionConfig& cfg, const LayerWeights& w, Precision precision,
                                   int threads, const std::shared_ptr<const LayerWeights>& kept = nullptr);
// A norm's weight vector as a run of `precision` reads it (rounded to bf16 values in bf16).
std::vector<float> prepare_vector(const TensorF& t, Precision precision);

// rows [row_begin, row_begin + rows) of hidden [S, H] fp32, validated (mla/validate.hpp:
// validate_hidden) -> x [rows, H]; bf16 mode rounds them (HF's input is a bf16 tensor).
MatrixRM input_rows(const TensorF& hidden, int64_t row_begin, int64_t rows, Precision precision);

// x [S, H] -> q [S, n*d_qk], head-major: feature h*d_qk + (nope d_n | rope d_r). In two steps,
// so the pipeline keeps the small latent and makes q from it later, rows at a time:
//   q_latent       x -> q_a_normed = q_a_layernorm(q_a_proj(x)) [S, r_q]  (q_lora_rank null: q_proj(x))
//   q_from_latent  q_a_normed -> q_b_proj(q_a_normed) [S, n*d_qk]         (q_lora_rank null: as is)
MatrixRM q_latent(const Layer& L, const MatrixRM& x);
MatrixRM q_from_latent(const Layer& L, const MatrixRM& latent);

struct KvPath {
  MatrixRM compressed_kv;  // [S, r_kv + d_r]   kv_a_proj_with_mqa(x): latent (r_kv) | k_pe (d_r)
  MatrixRM latent_normed;  // [S, r_kv]         kv_a_layernorm(latent)
  MatrixRM kv;             // [S, n*(d_n+d_v)]  kv_b_proj(latent_normed), head-major: k_nope | value
};
// x [S, H] -> KvPath
KvPath kv_path(const Layer& L, const MatrixRM& x);

// The rope (positions: [S], row s at positions[s]; cos/sin from the fp32 tables,
// src/math/rope.cpp, rounded to bf16 in bf16 mode): rope_query rotates q's rope halves in place
// (q: [S, n*d_qk], rope half of head h at h*d_qk + d_n, left in HF's de-interleaved order);
// rope_key returns k_pe_roped [S, d_r] (HF order, shared by all heads) from the k_pe columns of
// compressed_kv [S, r_kv + d_r].
void rope_query(const Layer& L, const std::vector<int64_t>& positions, MatrixRM& q);
MatrixRM rope_key(const Layer& L, const std::vector<int64_t>& positions, const MatrixRM& compressed_kv);

// What runs the stages: "projections: oneDNN ..., per-head products: ..., 2 threads" or
// "Eigen 3.4.0 + OpenBLAS sgemm (...), 1 thread" (w null: before any preparation). The cpu
// backend's description() and `mla-h2o decode`'s report name it.
std::string describe(const PreparedWeights* w, int threads);

// attn_context [S, n*d_v] -> attn_output [S, H]
MatrixRM o_proj(const Layer& L, const MatrixRM& attn_context);

// The passes over the rows (attention_pipeline.hpp, docs/long-context.md §1):
// Hands the heap's free pages back to the system between the passes: glibc keeps freed blocks
// below its mmap threshold (which grows up to 32 MiB) in its arenas, so the keys/values and the
// chunks' intermediates of the earlier passes would otherwise stay resident beside the later
// passes' buffers (measured at S = 4096 bf16: 260 MB more after the attention).
void return_freed_memory();

// kRowChunk rows per chunk of the projections and of o_proj: a multiple of the oneDNN engine's
// 512-row chunks, so a chunked projection gives the bits of one over all rows there, and small
// enough that a chunk's fp32 intermediates (x, kv: ~100 KB per row for Kimi) stay ~0.4 GB.
inline constexpr int64_t kRowChunk = 4096;
// Query rows per attention pass: the queries are made from the stored q latent one pass at a
// time (q_b_proj and rope), so only [rows, n*d_qk] of them exist at once. S/8 rounded up to a
// multiple of kRowChunk (so of the 64-row blocks), between 4096 and 16384: at most ~8 passes,
// each of which reloads every head's keys.
inline int64_t query_pass_rows(int64_t S) {
  const int64_t rows = (S / 8 + kRowChunk - 1) / kRowChunk * kRowChunk;
  return rows < kRowChunk ? kRowChunk : rows > 4 * kRowChunk ? 4 * kRowChunk : rows;
}

// The floating-point operations (multiply-add = 2) a forward of S tokens needs in its GEMMs:
// the five projections (q_a_proj, q_b_proj or q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj)
// and the attention's two products over the visible query·key pairs (causal: S(S+1)/2 per
// head; none: S^2), 2 (d_qk + d_v) per pair. What the long-context benchmark divides by the
// machine's GEMM rate for its bound (docs/long-context.md §5).
struct ForwardFlops {
  double projections = 0;
  double attention = 0;
  double total() const { return projections + attention; }
};
ForwardFlops forward_flops(const AttentionConfig& cfg, int64_t seq_len, bool causal);

}  // namespace mla::cpu
