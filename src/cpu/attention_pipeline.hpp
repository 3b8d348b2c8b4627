// src/cpu/attention_pipeline.hpp — THE attention layer on the CPU: one function, attention_layer,
// runs HF DeepseekV3Attention's stages (attention_stages.hpp) over the rows of every CPU caller, in three
// passes (docs/long-context.md §1, docs/backends.md §3):
//
//   1. projections, kRowChunk rows at a time: x = input(rows) -> q latent (stored for every row
//      in the run's precision), kv_path, rope of k_pe; each chunk's keys/values go to the
//      caller's key store (plugs.keys), its latent cache rows to plugs.latent
//   2. attention, one query pass at a time: q = q_b_proj(latent) and its rope (plugs.queries sees
//      them), then the pass's attention by the caller's kernel (plugs.attend) -> attn_context rows
//      (stored in the run's precision)
//   3. o_proj, kRowChunk rows at a time -> attn_output rows to plugs.output
//
// Its callers plug in their key store and attention:
//   run, sweep (cpu_backend.cpp), decode's prefill (cpu_decode.cpp)   TiledAttention: keys in
//       KeyValueStates, each pass by tiled_attention (block products on Eigen/oneDNN, head mass)
//   the whole-model forward, eval's prompt (src/model/, src/eval/)  CausalRowAttention: keys
//       in RowKeys, each row by attend_row over positions 0..s (fixed-order sums)
//   eval's decode rows of every run at once (src/eval/eval_loop.cpp)  each run's own keys, the
//       policies' step loop
// The GEMM engine is the prepared weights' (Layer::w): Eigen/oneDNN for the backend and decode,
// the fixed-order engine for the whole model and eval, so each caller keeps its bits. The reference
// (reference/mla_reference.cpp) keeps its own plain loops, the twin this is checked against.
//
// Shape legend (config names): T = rows, H = hidden_size, n = num_attention_heads,
//   r_q = q_lora_rank, r_kv = kv_lora_rank, d_n / d_r / d_v head dims, d_qk = d_n + d_r.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attention_stages.hpp"
#include "row_attention.hpp"
#include "tiled_attention.hpp"
#include "mla/decode.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla::cpu {

// The layer's input rows [r0, r0 + rows) as x [rows, H] in the run's precision (the backend:
// hidden rounded to bf16 in a bf16 run; the decoder: input_layernorm of its residual rows).
using InputRows = std::function<MatrixRM(int64_t r0, int64_t rows)>;

// What a caller plugs into attention_layer. keys and attend are required, the rest optional.
struct AttentionPlugs {
  // ---- pass 1 ----
  // The keys/values of rows [r0, r0 + rows) for the caller's store: kvp.kv [rows, n*(d_n+d_v)]
  // (head-major k_nope | value) and k_pe_roped [rows, d_r]. Timed as "attend".
  std::function<void(int64_t r0, int64_t rows, const KvPath& kvp, const MatrixRM& k_pe_roped)> keys;
  // The latent cache rows [rows, r_kv + d_r] of rows [r0, r0 + rows): kv_a_layernorm(c) | k_pe
  // roped, assembled by latent_cache_rows (mla/attention.hpp). See latent_cache_into.
  std::function<void(int64_t r0, const TensorD& latent)> latent;
  // After pass 1: every key stored, no query made yet.
  std::function<void()> keys_stored;
  // ---- pass 2 ----
  // Rows [0, attended_rows) are attended; rows [attended_rows, T) only get their queries made
  // (plugs.queries, kRowChunk rows at a time: decode's steps). -1: every row.
  int64_t attended_rows = -1;
  // Rows per query pass; 0: query_pass_rows(attended_rows). A pass begins at a multiple of it.
  int64_t pass_rows = 0;
  // Each pass's roped queries q [rows, n*d_qk] (HF order, head-major) of rows [r0, r0 + rows).
  std::function<void(const MatrixRM& q, int64_t r0)> queries;
  // The attention of the pass's rows: ctx [rows, n*d_v] (heads concatenated, bf16 values in a
  // bf16 run), given sized; [0, n*d_v] when `output` is not set (no P·V wanted). Timed as "attend".
  std::function<void(const MatrixRM& q, int64_t r0, MatrixRM& ctx)> attend;
  // After the attention passes, before o_proj: the caller may free its keys.
  std::function<void()> attended;
  // ---- pass 3 ----
  // attn_output rows [rows, H] of rows [r0, r0 + rows). Not set: no o_proj (and no P·V).
  std::function<void(int64_t r0, const MatrixRM& attn_output)> output;
};

// The attention layer over T rows at `positions` ([T]; row s at positions[s]), its stages timed by
// `stage` under the forward's names (q_path with the input rows, kv_path, rope, attend, o_proj; a
// stage run chunk after chunk adds to its one record). Only the q latent and the attention
// context are held for all rows here, beside what the caller's plugs keep.
void attention_layer(const Layer& L, int64_t T, const InputRows& input, const std::vector<int64_t>& positions,
                     const AttentionPlugs& plugs, const StageRunner& stage);

// A latent plug copying each chunk's rows into cache [T, r_kv + d_r] (sized by the caller).
std::function<void(int64_t, const TensorD&)> latent_cache_into(TensorD& cache);
std::function<void(int64_t, const TensorD&)> latent_cache_into(MatrixRM& cache);

// Rows [first, first + kept.rows()) of the queries, from each pass's q (rows [r0, r0 + q.rows())).
void keep_query_rows(const MatrixRM& q, int64_t r0, int64_t first, MatrixRM& kept);

// Query rows [first, end) kept from the passes in the run's precision (exact: the queries are
// bf16 values in a bf16 run), for expected-attention's statistics of the pre-RoPE queries.
class KeptQueries {
 public:
  KeptQueries(int64_t first, int64_t end, int64_t n, int64_t d_qk, Precision precision);
  void keep(const MatrixRM& q, int64_t r0, int threads);  // the pass's rows inside [first, end)
  // prerope_query_statistics (mla/decode.hpp) of the kept rows; positions: [end] of rows 0..end-1.
  QueryStatistics statistics(const AttentionConfig& cfg, const std::vector<int64_t>& positions) const;

 private:
  int64_t first_, n_, d_qk_;
  PrecisionMatrix rows_;  // [end - first, n*d_qk]
};

// The tiled kernel as the key store and attention (run, sweep, decode's prefill): the keys
// of rows [0, key_rows) in KeyValueStates (the run's precision), each pass's rows by
// tiled_attention on L.w.gemm.attention_products (tiled_attention.hpp), the mass per head into
// head_mass; the states freed after the last pass.
class TiledAttention {
 public:
  TiledAttention(const Layer& L, int64_t key_rows, bool causal);
  // Sets plugs.keys, plugs.attend and plugs.attended; this object must outlive the call.
  void plug(AttentionPlugs& plugs);
  const KeyValueStates& states() const { return states_; }

  double* head_mass = nullptr;     // [n, key_rows], set by the first pass (required before it)
  double* attn_weights = nullptr;  // [n, key_rows, key_rows] or nullptr (dumps)
  const char* progress_label = "attention FLOP";
  std::function<void(const char*, int64_t, int64_t)> progress;  // (label, FLOP done, FLOP in all)

 private:
  void store(int64_t r0, int64_t rows, const KvPath& kvp, const MatrixRM& k_pe_roped);
  void attend(const MatrixRM& q, int64_t r0, MatrixRM& ctx);

  Layer L_;
  KeyValueStates states_;
  bool causal_;
  int64_t pairs_before_ = 0;  // query·key pairs of the earlier passes (progress)
};

// The row kernel (row_attention.hpp) as the key store and attention of a causal prefill over
// rows [0, m) at positions 0..m-1 (the whole-model forward, eval's prompt): every row's keys in
// `keys` (reset here), row s of each pass attending positions 0..s (attend_causal), the mass per
// head into head_mass [n*m] (zeroed here) when given.
class CausalRowAttention {
 public:
  CausalRowAttention(const Layer& L, int64_t m, RowKeys& keys, std::vector<double>* head_mass = nullptr);
  // Sets plugs.keys and plugs.attend; this object must outlive the call.
  void plug(AttentionPlugs& plugs);

 private:
  Layer L_;
  int64_t m_;
  RowKeys& keys_;
  std::vector<double>* head_mass_;
};

// The row kernel's settings for a layer: the softmax scale as fp32, the run's precision.
RowAttentionSpec row_attention_spec(const Layer& L);

}  // namespace mla::cpu
