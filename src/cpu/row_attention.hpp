// src/cpu/row_attention.hpp — the attention of ONE query row over a list of cached positions,
// transformers' eager arithmetic (docs/math.md §3.6, the bf16 rounding points §7 #10-#14) in the
// fixed-order sums of fixed_order.hpp. The whole-model forward computes every causal row with it
// (the list 0..s: attend_causal), and `mla-h2o eval` every decode row (the list a policy's cache
// holds), so a row whose cache evicted nothing is the same arithmetic in both, bit for bit
// (docs/eval.md).
//
//   score[h, j] = dot(query_states[h], key_states[h, t_j])          fma chain over d = 0..d_qk-1
//                 bf16: bf16(bf16(score) * fp32(scaling)); fp32: score * fp32(scaling)
//   p[h, :]     = exp(score - max) / sum (fixed_order exp_lanes, sum_lanes), bf16: -> bf16
//   ctx[h, :]   = dot over j of p[h, j] v[h, t_j, :]                  fma chain over j in list order
//                 bf16: -> bf16
// (A masked key of HF's causal mask has probability exactly 0 there; here it is not in the list.)
// attend_causal runs it over the rows of a causal prefill (the attention_pipeline.hpp plug
// CausalRowAttention).
//
// Shape legend: n = heads, d_n / d_r / d_v head dims, d_qk = d_n + d_r, T = positions held,
//   m = positions attended.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mla/attention.hpp"
#include "tiled_attention.hpp"  // PrecisionMatrix

namespace mla::cpu {

// One layer's keys and values in the kernel's layout, for positions [first, first + rows), in the
// run's precision (PrecisionMatrix: a bf16 run's key_states and value_states are bf16 values, so
// holding them as bf16 is exact and halves the bytes every attended key costs; the kernels widen
// them as they read, bits << 16).
struct RowKeys {
  int64_t n = 0, d_n = 0, d_r = 0, d_v = 0, first = 0, rows = 0;
  PrecisionMatrix key;    // [rows, d_qk*n]  key_states, feature-major (the n heads of one feature together)
  PrecisionMatrix value;  // [rows, n*d_v]   value_states

  void reset(int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, int64_t first_position, int64_t count,
             Precision precision);
  int64_t d_qk() const { return d_n + d_r; }
  Precision precision() const { return key.precision(); }
  // positions [t0, t0 + count) from kv_b_proj's output kv [count, n*(d_n+d_v)] (head-major: k_nope |
  // v; row stride ld_kv) and the roped k_pe [count, d_r] (row stride ld_pe), values as they are
  // (bf16 values in a bf16 run).
  void set_rows(int64_t t0, int64_t count, const float* kv, int64_t ld_kv, const float* k_pe, int64_t ld_pe);
  // element offsets of position t's key row and value row in key / value
  int64_t key_offset(int64_t t) const { return (t - first) * d_qk() * n; }
  int64_t value_offset(int64_t t) const { return (t - first) * n * d_v; }
};

// The keys a row may attend: positions < split from `low`, the others from `high` (eval: the
// prompt's keys, shared by every policy, and one policy's own decode rows). high may be null
// when every position is in low.
struct KeyView {
  const RowKeys* low = nullptr;
  const RowKeys* high = nullptr;
  int64_t split = 0;
  const RowKeys& at(int64_t t) const { return t < split || high == nullptr ? *low : *high; }
};

struct RowAttentionSpec {
  float scaling = 1.0f;  // softmax scale as fp32 (torch multiplies by the Python float)
  Precision precision = Precision::FP32;
};

// Per-worker buffers (resized on use).
struct RowScratch {
  std::vector<float> query, scores, e;
  std::vector<const float*> value_rows;        // the attended positions' value rows: fp32 keys
  std::vector<const uint16_t*> value_rows_bf16;  // ... keys held as bf16 bits
};

// query: [n*d_qk] one row of query_states, head-major (head h at h*d_qk: q_nope | q_pe roped);
// positions: ascending, each held by keys. probs: [n*m] (row h = head h) the probabilities the
// row multiplies the values with; ctx: [n*d_v] (head h at h*d_v), HF's attn_output before o_proj.
// Only heads [h0, h1) are computed (h0 a multiple of 8; every head by default): a head's values
// depend on no other head, so a row split over workers by heads gives the same bits.
void attend_row(const RowAttentionSpec& spec, const float* query, const KeyView& keys,
                std::span<const int64_t> positions, float* probs, float* ctx, RowScratch& scratch, int64_t h0 = 0,
                int64_t h1 = -1);

// attend_row of one row with its heads split over `threads` workers (chunks of a multiple of 8
// heads), scratch[w] for worker w: the same bits as one call.
void attend_row_split(const RowAttentionSpec& spec, int threads, const float* query, const KeyView& keys,
                      std::span<const int64_t> positions, float* probs, float* ctx, std::span<RowScratch> scratch);

// The rows [row_begin, row_end) of a causal prefill, row s attending positions 0..s of `keys`
// (attend_row), rows in parallel on `threads` workers. q: row row_begin of the queries
// [rows, n*d_qk] (row stride ld_q); ctx: [rows, n*d_v] for those rows. head_mass (may be null;
// [n*key_rows], head h at h*key_rows) is added each head's probabilities per key, summed in row
// order per chunk of 64 rows counted from row_begin, then chunk after chunk: the same bits for
// any thread count, and for rows split into calls at multiples of 64.
void attend_causal(const RowAttentionSpec& spec, int threads, const float* q, int64_t ld_q, int64_t row_begin,
                   int64_t row_end, const KeyView& keys, float* ctx, double* head_mass, int64_t key_rows);

}  // namespace mla::cpu
