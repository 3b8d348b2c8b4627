// src/cpu/attention_pipeline.cpp — the CPU attention layer in three passes and its two kernels'
// plugs (attention_pipeline.hpp; docs/long-context.md §1).
//
// Shape legend: T rows, A attended rows, H hidden_size, n heads, r_q, r_kv, d_r, d_qk, d_v.
#include "attention_pipeline.hpp"

#include <algorithm>
#include <string>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"

namespace mla::cpu {
namespace {

std::vector<int64_t> slice(const std::vector<int64_t>& positions, int64_t r0, int64_t rows) {
  return {positions.begin() + r0, positions.begin() + r0 + rows};
}

// Pass 1, kRowChunk rows at a time over rows [0, T): the q latent of every row into the returned
// store [T, r_q] (q_proj's q [T, n*d_qk] without q_lora_rank) in the run's precision; each
// chunk's keys/values to plugs.keys and its latent cache rows to plugs.latent.
PrecisionMatrix project_chunks(const Layer& L, int64_t T, const InputRows& input, const std::vector<int64_t>& positions,
                               const AttentionPlugs& plugs, const StageRunner& stage) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  const int64_t latent_width = cfg.has_q_lora() ? cfg.q_lora_rank : cfg.num_attention_heads * cfg.qk_head_dim();
  PrecisionMatrix q_store(T, latent_width, L.precision);
  for (int64_t r0 = 0; r0 < T; r0 += kRowChunk) {
    const int64_t rows = std::min(kRowChunk, T - r0);
    const MatrixRM x = stage("q_path", [&] {  // (with the input rows it reads: the first stage)
      MatrixRM chunk = input(r0, rows);       // [rows, H]
      const MatrixRM latent = q_latent(L, chunk);
      q_store.set_rows(r0, rows, latent.data(), latent_width, L.threads);
      return chunk;
    });
    // compressed_kv [rows, r_kv+d_r], latent_normed [rows, r_kv], kv [rows, n*(d_n+d_v)]
    const KvPath kvp = stage("kv_path", [&] { return kv_path(L, x); });
    const MatrixRM k_pe_roped = stage("rope", [&] { return rope_key(L, slice(positions, r0, rows), kvp.compressed_kv); });
    stage("attend", [&] { plugs.keys(r0, rows, kvp, k_pe_roped); });  // storing the keys: the attention's first step
    if (plugs.latent) plugs.latent(r0, latent_cache_rows(kvp.latent_normed.data(), k_pe_roped.data(), rows, r_kv, d_r));
  }
  return q_store;
}

// q [rows, n*d_qk] of rows [r0, r0 + rows), roped at positions[r0 ..], from the stored latent.
MatrixRM stored_queries(const Layer& L, const PrecisionMatrix& q_store, const std::vector<int64_t>& positions,
                        int64_t r0, int64_t rows, const StageRunner& stage) {
  const int64_t latent_width = q_store.cols();
  MatrixRM q = stage("q_path", [&] {  // [rows, n*d_qk]
    MatrixRM latent(rows, latent_width);
    q_store.widen_rows(r0, rows, latent.data(), latent_width, L.threads);
    return q_from_latent(L, latent);
  });
  stage("rope", [&] { rope_query(L, slice(positions, r0, rows), q); });
  return q;
}

// Pass 2 over the attended rows [0, A), pass after pass: the returned attn_context [A, n*d_v]
// in the run's precision (empty without plugs.output).
PrecisionMatrix attend_passes(const Layer& L, const PrecisionMatrix& q_store, int64_t A,
                              const std::vector<int64_t>& positions, const AttentionPlugs& plugs,
                              const StageRunner& stage) {
  const int64_t n = L.cfg.num_attention_heads, d_v = L.cfg.v_head_dim;
  const bool context = static_cast<bool>(plugs.output);
  PrecisionMatrix attn_context(context ? A : 0, n * d_v, L.precision);
  const int64_t pass = plugs.pass_rows > 0 ? plugs.pass_rows : query_pass_rows(A);
  for (int64_t r0 = 0; r0 < A; r0 += pass) {
    const int64_t rows = std::min(pass, A - r0);
    const MatrixRM q = stored_queries(L, q_store, positions, r0, rows, stage);
    if (plugs.queries) plugs.queries(q, r0);
    stage("attend", [&] {
      MatrixRM ctx(context ? rows : 0, n * d_v);  // feature h*d_v + d (HF's transpose + reshape)
      plugs.attend(q, r0, ctx);
      if (ctx.rows() != (context ? rows : 0) || ctx.cols() != n * d_v)
        fail(ErrorKind::InvalidArgument, "attention layer: the attention of rows " + std::to_string(r0) + ".." +
                                      std::to_string(r0 + rows - 1) + " returned a context of " +
                                      std::to_string(ctx.rows()) + " x " + std::to_string(ctx.cols()));
      if (context) attn_context.set_rows(r0, rows, ctx.data(), n * d_v, L.threads);
    });
  }
  return attn_context;
}

// Pass 3, kRowChunk rows at a time: attn_output = o_proj(attn_context) to plugs.output.
void output_chunks(const Layer& L, const PrecisionMatrix& attn_context, const AttentionPlugs& plugs,
                   const StageRunner& stage) {
  const int64_t A = attn_context.rows(), width = attn_context.cols();
  for (int64_t r0 = 0; r0 < A; r0 += kRowChunk) {
    const int64_t rows = std::min(kRowChunk, A - r0);
    const MatrixRM y = stage("o_proj", [&] {  // [rows, H]
      MatrixRM ctx(rows, width);
      attn_context.widen_rows(r0, rows, ctx.data(), width, L.threads);
      return o_proj(L, ctx);
    });
    plugs.output(r0, y);
  }
}

}  // namespace

void attention_layer(const Layer& L, int64_t T, const InputRows& input, const std::vector<int64_t>& positions,
                     const AttentionPlugs& plugs, const StageRunner& stage) {
  const int64_t A = plugs.attended_rows < 0 ? T : plugs.attended_rows;
  if (!plugs.keys || !plugs.attend || static_cast<int64_t>(positions.size()) != T || A > T)
    fail(ErrorKind::InvalidArgument, "attention layer: " + std::to_string(T) + " rows at " +
                                  std::to_string(positions.size()) + " positions, " + std::to_string(A) +
                                  " attended, keys and attention plugged: " + (plugs.keys && plugs.attend ? "yes" : "no"));
  // 1. projections
  PrecisionMatrix q_store = project_chunks(L, T, input, positions, plugs, stage);
  return_freed_memory();  // the chunks' intermediates
  if (plugs.keys_stored) plugs.keys_stored();
  // 2. attention, then the queries of the rows past the attended ones
  const PrecisionMatrix attn_context = attend_passes(L, q_store, A, positions, plugs, stage);
  if (plugs.attended) plugs.attended();
  if (A == T) q_store = PrecisionMatrix();  // a lower peak for o_proj
  return_freed_memory();
  for (int64_t r0 = A; r0 < T; r0 += kRowChunk) {
    const MatrixRM q = stored_queries(L, q_store, positions, r0, std::min(kRowChunk, T - r0), stage);
    if (plugs.queries) plugs.queries(q, r0);
  }
  q_store = PrecisionMatrix();
  // 3. o_proj
  if (plugs.output) output_chunks(L, attn_context, plugs, stage);
}

std::function<void(int64_t, const TensorD&)> latent_cache_into(TensorD& cache) {
  return [&cache](int64_t r0, const TensorD& rows) {
    std::copy(rows.data.begin(), rows.data.end(), cache.ptr() + r0 * rows.dim(1));
  };
}

std::function<void(int64_t, const TensorD&)> latent_cache_into(MatrixRM& cache) {
  return [&cache](int64_t r0, const TensorD& rows) {  // the values are fp32 values: exact
    std::transform(rows.data.begin(), rows.data.end(), cache.data() + r0 * rows.dim(1),
                   [](double v) { return static_cast<float>(v); });
  };
}

void keep_query_rows(const MatrixRM& q, int64_t r0, int64_t first, MatrixRM& kept) {
  const int64_t s0 = std::max(r0, first), s1 = std::min(r0 + q.rows(), first + kept.rows());
  if (s1 > s0) kept.middleRows(s0 - first, s1 - s0) = q.middleRows(s0 - r0, s1 - s0);
}

KeptQueries::KeptQueries(int64_t first, int64_t end, int64_t n, int64_t d_qk, Precision precision)
    : first_(first), n_(n), d_qk_(d_qk), rows_(std::max<int64_t>(end - first, 0), n * d_qk, precision) {}

void KeptQueries::keep(const MatrixRM& q, int64_t r0, int threads) {
  const int64_t s0 = std::max(r0, first_), s1 = std::min(r0 + q.rows(), first_ + rows_.rows());
  if (s1 > s0) rows_.set_rows(s0 - first_, s1 - s0, q.data() + (s0 - r0) * q.cols(), q.cols(), threads);
}

QueryStatistics KeptQueries::statistics(const AttentionConfig& cfg, const std::vector<int64_t>& positions) const {
  return prerope_query_statistics(
      cfg,
      [&](int64_t s, int64_t h, float* out) {  // head h of row s, widened exactly
        const int64_t at = (s - first_) * n_ * d_qk_ + h * d_qk_;
        if (rows_.precision() == Precision::BF16) {
          for (int64_t d = 0; d < d_qk_; ++d) out[d] = bf16::from_bits(rows_.bits()[at + d]).to_float();
        } else {
          std::copy_n(rows_.values() + at, d_qk_, out);
        }
      },
      first_ + rows_.rows(), positions, first_);
}

// ---- the tiled kernel ---------------------------------------------------------------------

TiledAttention::TiledAttention(const Layer& L, int64_t key_rows, bool causal)
    : L_(L),
      states_(key_rows, L.cfg.num_attention_heads, L.cfg.qk_nope_head_dim, L.cfg.qk_rope_head_dim, L.cfg.v_head_dim,
              L.precision),
      causal_(causal) {}

void TiledAttention::plug(AttentionPlugs& plugs) {
  plugs.keys = [this](int64_t r0, int64_t rows, const KvPath& kvp, const MatrixRM& k_pe_roped) {
    store(r0, rows, kvp, k_pe_roped);
  };
  plugs.attend = [this](const MatrixRM& q, int64_t r0, MatrixRM& ctx) { attend(q, r0, ctx); };
  plugs.attended = [this] { states_ = KeyValueStates(0, 0, 0, 0, 0, Precision::FP32); };  // a lower peak
}

// the rows of [r0, r0 + rows) below key_rows, into the states (the run's precision: exact)
void TiledAttention::store(int64_t r0, int64_t rows, const KvPath& kvp, const MatrixRM& k_pe_roped) {
  const int64_t stored = std::clamp<int64_t>(states_.seq_len - r0, 0, rows);
  if (stored == 0) return;
  states_.set_kv_rows(r0, stored, kvp.kv.data(), kvp.kv.cols(), L_.threads);
  states_.set_k_pe_rows(r0, stored, k_pe_roped.data(), k_pe_roped.cols());
}

// query rows [r0, r0 + rows) against every stored key they see; P·V into ctx unless it has no rows
void TiledAttention::attend(const MatrixRM& q, int64_t r0, MatrixRM& ctx) {
  const AttentionConfig& cfg = L_.cfg;
  const int64_t n = cfg.num_attention_heads, d_qk = cfg.qk_head_dim(), d_v = cfg.v_head_dim;
  const int64_t P = states_.seq_len, rows = q.rows();
  const bool context = ctx.rows() > 0;
  if (head_mass == nullptr) fail(ErrorKind::InvalidArgument, "tiled attention: no head mass to write");
  const float scaling = static_cast<float>(softmax_scale(cfg));  // a Python float, used as fp32 by torch
  // progress in FLOP of the products per computed query·key pair (2 d_qk for the scores, 2 d_v
  // more for P·V): the work, so the time left extrapolates correctly although causal blocks grow
  const int64_t flop_per_pair = 2 * (d_qk + (context ? d_v : 0));
  const int64_t total_pairs = tiled_pairs(P, n, causal_);
  BlockProgress block_progress;
  if (progress)
    block_progress = [&](int64_t done, int64_t) {
      progress(progress_label, (pairs_before_ + done) * flop_per_pair, total_pairs * flop_per_pair);
    };
  tiled_attention(q.data(), n * d_qk, states_, causal_, scaling, L_.precision, L_.threads, L_.w.gemm.attention_products,
                      block_progress,
                      {context ? ctx.data() : nullptr, context ? n * d_v : 0, head_mass, attn_weights}, {r0, r0 + rows});
  pairs_before_ += tiled_pairs(P, n, causal_, {r0, r0 + rows});
}

// ---- the row kernel --------------------------------------------------------------------------

RowAttentionSpec row_attention_spec(const Layer& L) {
  return {static_cast<float>(softmax_scale(L.cfg)), L.precision};  // the scale: a Python float, used as fp32
}

CausalRowAttention::CausalRowAttention(const Layer& L, int64_t m, RowKeys& keys, std::vector<double>* head_mass)
    : L_(L), m_(m), keys_(keys), head_mass_(head_mass) {
  const AttentionConfig& a = L.cfg;
  keys_.reset(a.num_attention_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, 0, m, L.precision);
  if (head_mass_) head_mass_->assign(static_cast<size_t>(a.num_attention_heads * m), 0.0);
}

void CausalRowAttention::plug(AttentionPlugs& plugs) {
  plugs.keys = [this](int64_t r0, int64_t rows, const KvPath& kvp, const MatrixRM& k_pe_roped) {
    keys_.set_rows(r0, rows, kvp.kv.data(), kvp.kv.cols(), k_pe_roped.data(), k_pe_roped.cols());
  };
  plugs.attend = [this](const MatrixRM& q, int64_t r0, MatrixRM& ctx) {
    MatrixRM unused;  // the row kernel forms P·V with the probabilities: somewhere to put it
    if (ctx.rows() == 0) unused.resize(q.rows(), L_.cfg.num_attention_heads * L_.cfg.v_head_dim);
    attend_causal(row_attention_spec(L_), L_.threads, q.data(), q.cols(), r0, r0 + q.rows(),
                  KeyView{&keys_, nullptr, m_}, ctx.rows() ? ctx.data() : unused.data(),
                  head_mass_ ? head_mass_->data() : nullptr, m_);
  };
}

}  // namespace mla::cpu
