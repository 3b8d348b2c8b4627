// src/cpu/cpu_backend.cpp — the "cpu" backend: one MLA attention layer (HF
// DeepseekV3Attention, eager; docs/math.md §3) on the GEMM engine chosen at run time (oneDNN
// matmul where it has a kernel for the precision, else Eigen + OpenBLAS sgemm), in fp32 or in
// PyTorch-bf16 emulation (docs/math.md §7), multi-threaded, plus the H2O scores.
//
// Shape legend (config names):
//   S = sequence length, H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r.
//
// forward() runs the stages of cpu_stages.hpp in HF's order, each timed (StageRunner), in three
// passes over the tokens (see forward(); docs/long-context.md §1):
//   q_path    q latent = q_a_layernorm(q_a(x)) per row chunk, stored; q = q_b(latent) per query pass
//             (or q = q_proj(x))                                        [S, r_q] -> [rows, n*d_qk]
//   kv_path   compressed_kv = kv_a(x) = [latent | k_pe]; kv = kv_b(RMSNorm_kv(latent)), per chunk
//   rope      k_pe_roped per chunk, q's rope halves per query pass (HF order)
//   attend    keys/values stored in the run's precision, then streamed per head and block of
//             64 queries: p = softmax(mask(scaling q k^T)), attn_context_h = p v_h, and the
//             H2O column sums of p (double)                               [S, n*d_v], [n*S]
//   o_proj    attn_output = attn_context W_o^T (+ b), per row chunk       [S, H]
//   export    widening to double, token_scores = sum over heads, states on request
// The five projections run on the GEMM engine chosen in prepare (gemm_engine.hpp,
// docs/cpu-gemm.md: oneDNN matmul, or Eigen + OpenBLAS sgemm); attend hands (head, block) items
// to the workers, its two products on the same engine with one thread per item (oneDNN matmul
// primitives, onednn_attention.hpp, or single-threaded sgemm), its softmax rows on the vector
// kernels of the CPU (vector_kernels.hpp). With a causal mask, query block [r0, r0+64) only
// multiplies keys [0, r0+64): the skipped probabilities are exactly 0 in HF too
// (exp(min_float - max) underflows to 0), so skipping them changes no value. No [n, S, S] tensor
// exists unless keep_attn_weights asks for one (dumps); memory is O(S) otherwise:
// docs/long-context.md.
#include <Eigen/Core>

#include <algorithm>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cpu_kernels.hpp"
#include "cpu_stages.hpp"
#include "onednn_attention.hpp"
#include "streaming_attention.hpp"
#include "vector_kernels.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/h2o.hpp"
#include "mla/huge_pages.hpp"
#include "mla/rope.hpp"
#include "mla/stage_timer.hpp"
#include "mla/validate.hpp"
#include "mla_build_config.h"

namespace mla {
namespace cpu {
namespace {

// A validated projection weight (mla/validate.hpp) prepared once for the GEMM engine, with its
// bias when it has one (bf16 rounding in bf16 mode); null for an absent (empty) weight.
std::unique_ptr<PreparedLinear> prepare_linear(GemmEngine& engine, const TensorF& t, const char* name,
                                               const TensorF& bias, bool bf16, int threads) {
  if (t.empty()) return nullptr;
  return engine.prepare({name, t.ptr(), t.dim(0), t.dim(1), bias.empty() ? nullptr : bias.ptr()}, bf16, threads);
}

std::vector<float> prepare_vector(const TensorF& t, bool bf16) {
  std::vector<float> v = t.data;
  if (bf16) round_to_bf16_inplace(v.data(), static_cast<int64_t>(v.size()));
  return v;
}

}  // namespace

// ---- the stages (cpu_stages.hpp) ------------------------------------------------------------

PreparedWeights prepare_weights(const AttentionConfig& cfg, const LayerWeights& w, bool bf16, int threads, Gemm gemm) {
  std::string reason;
  const std::unique_ptr<GemmEngine> engine = make_gemm_engine(gemm, bf16, reason);
  return prepare_weights_on(*engine, gemm_name(gemm), reason, cfg, w, bf16, threads);
}

PreparedWeights prepare_weights_on(GemmEngine& engine, const std::string& requested, const std::string& reason,
                                   const AttentionConfig& /*cfg: validated against*/, const LayerWeights& w, bool bf16,
                                   int threads) {
  const TensorF none;  // q_b_proj, q_proj and kv_b_proj have no bias (HF)
  PreparedWeights p;
  p.q_a_proj = prepare_linear(engine, w.q_a_proj, "q_a_proj", w.q_a_proj_bias, bf16, threads);
  p.q_a_layernorm = prepare_vector(w.q_a_layernorm, bf16);
  p.q_b_proj = prepare_linear(engine, w.q_b_proj, "q_b_proj", none, bf16, threads);
  p.q_proj = prepare_linear(engine, w.q_proj, "q_proj", none, bf16, threads);
  p.kv_a_proj_with_mqa =
      prepare_linear(engine, w.kv_a_proj_with_mqa, "kv_a_proj_with_mqa", w.kv_a_proj_with_mqa_bias, bf16, threads);
  p.kv_a_layernorm = prepare_vector(w.kv_a_layernorm, bf16);
  p.kv_b_proj = prepare_linear(engine, w.kv_b_proj, "kv_b_proj", none, bf16, threads);
  p.o_proj = prepare_linear(engine, w.o_proj, "o_proj", w.o_proj_bias, bf16, threads);
  p.gemm = {requested, engine.name(), p.kv_b_proj->kernel(), reason};
  if (engine.kind() == Gemm::OneDnn) {
    p.attention_products = Gemm::OneDnn;
    p.attention_kernel = onednn_attention_kernel(bf16);
  }
  return p;
}

MatrixRM input_rows(const TensorF& hidden, bool bf16) { return input_rows(hidden, 0, hidden.dim(0), bf16); }

MatrixRM input_rows(const TensorF& hidden, int64_t row_begin, int64_t rows, bool bf16) {
  const int64_t H = hidden.dim(1);
  MatrixRM x = Eigen::Map<const MatrixRM>(hidden.ptr() + row_begin * H, rows, H);  // [rows, H]
  if (bf16) round_to_bf16_inplace(x.data(), x.size());
  return x;
}

MatrixRM q_latent(const Layer& L, const MatrixRM& x) {
  const PreparedWeights& w = L.w;
  const int64_t S = x.rows(), r_q = L.cfg.q_lora_rank;
  if (!L.cfg.has_q_lora()) {
    MatrixRM q;  // [S, n*d_qk]
    w.q_proj->run(x, L.threads, q);  // HF's q_proj has no bias
    return q;
  }
  MatrixRM q_a;  // [S, r_q]
  w.q_a_proj->run(x, L.threads, q_a);
  MatrixRM q_a_normed(S, r_q);  // [S, r_q]
  rms_norm(q_a.data(), r_q, S, r_q, w.q_a_layernorm.data(), L.latent_norm_eps, L.bf16, q_a_normed.data(), r_q);
  return q_a_normed;
}

MatrixRM q_from_latent(const Layer& L, const MatrixRM& latent) {
  if (!L.cfg.has_q_lora()) return latent;
  MatrixRM q;  // [S, n*d_qk]
  L.w.q_b_proj->run(latent, L.threads, q);
  return q;
}

MatrixRM q_path(const Layer& L, const MatrixRM& x) { return q_from_latent(L, q_latent(L, x)); }

KvPath kv_path(const Layer& L, const MatrixRM& x) {
  const PreparedWeights& w = L.w;
  const int64_t S = x.rows(), r_kv = L.cfg.kv_lora_rank, d_r = L.cfg.qk_rope_head_dim;
  KvPath out;
  w.kv_a_proj_with_mqa->run(x, L.threads, out.compressed_kv);
  out.latent_normed.resize(S, r_kv);  // kv_a_layernorm reads the first r_kv columns (the latent)
  rms_norm(out.compressed_kv.data(), r_kv + d_r, S, r_kv, w.kv_a_layernorm.data(), L.latent_norm_eps, L.bf16,
           out.latent_normed.data(), r_kv);
  w.kv_b_proj->run(out.latent_normed, L.threads, out.kv);
  return out;
}

namespace {

// cos/sin [S, d_r] for the positions, fp32 as HF's rotary module, rounded to bf16 in bf16 mode
// (DeepseekV3's `.to(x.dtype)`; DeepseekV2 multiplies by its fp32 freqs_cis unrounded).
RopeTables run_rope_tables(const Layer& L, const std::vector<int64_t>& positions) {
  RopeTables tables = rope_tables(L.cfg, positions);
  if (L.bf16 && L.cfg.rope_style() != RopeStyle::Complex) {
    round_to_bf16_inplace(tables.cos.data(), static_cast<int64_t>(tables.cos.size()));
    round_to_bf16_inplace(tables.sin.data(), static_cast<int64_t>(tables.sin.size()));
  }
  return tables;
}

}  // namespace

void rope_query(const Layer& L, const std::vector<int64_t>& positions, MatrixRM& q) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t S = q.rows(), n = cfg.num_attention_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_qk = d_n + d_r;
  const RopeTables tables = run_rope_tables(L, positions);
  std::vector<std::vector<float>> q_pe(static_cast<size_t>(L.threads), std::vector<float>(static_cast<size_t>(d_r)));
  parallel_for(S, L.threads, [&](int64_t s, int worker) {
    const float* cos = tables.cos.data() + s * d_r;
    const float* sin = tables.sin.data() + s * d_r;
    float* q_pe_s = q_pe[static_cast<size_t>(worker)].data();  // [d_r] one head's q_pe, before rotation
    for (int64_t h = 0; h < n; ++h) {
      float* q_rope_half = q.data() + s * n * d_qk + h * d_qk + d_n;
      std::copy_n(q_rope_half, d_r, q_pe_s);
      cpu::rope(q_pe_s, q_rope_half, cos, sin, d_r, cfg.rope_style(), L.bf16);
    }
  });
}

MatrixRM rope_key(const Layer& L, const std::vector<int64_t>& positions, const MatrixRM& compressed_kv) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t S = compressed_kv.rows(), r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  const RopeTables tables = run_rope_tables(L, positions);
  MatrixRM k_pe_roped(S, d_r);  // [S, d_r]  one roped key per token, shared by all heads
  parallel_for(S, L.threads, [&](int64_t s, int) {
    cpu::rope(compressed_kv.data() + s * (r_kv + d_r) + r_kv, k_pe_roped.data() + s * d_r, tables.cos.data() + s * d_r,
              tables.sin.data() + s * d_r, d_r, cfg.rope_style(), L.bf16);
  });
  return k_pe_roped;
}

MatrixRM rope(const Layer& L, const std::vector<int64_t>& positions, MatrixRM& q, const MatrixRM& compressed_kv) {
  rope_query(L, positions, q);
  return rope_key(L, positions, compressed_kv);
}

KeyValueStates key_value_states(const Layer& L, const MatrixRM& kv, const MatrixRM& k_pe_roped) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t S = kv.rows(), n = cfg.num_attention_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  KeyValueStates states(S, n, d_n, d_r, d_v, L.bf16);
  states.set_kv_rows(0, S, kv.data(), n * (d_n + d_v), L.threads);
  states.set_k_pe_rows(0, S, k_pe_roped.data(), d_r);
  return states;
}

Attention attend(const Layer& L, const MatrixRM& q, const KeyValueStates& kv, bool causal, bool keep_attn_weights,
                 const BlockProgress& progress) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t S = q.rows(), n = cfg.num_attention_heads, d_v = cfg.v_head_dim;
  const int64_t d_qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
  const float scaling = static_cast<float>(softmax_scale(cfg));  // a Python float, used as fp32 by torch
  Attention out;
  out.attn_context.resize(S, n * d_v);  // feature h*d_v + d (HF's transpose + reshape)
  out.head_scores.assign(static_cast<size_t>(n * S), 0.0);
  if (keep_attn_weights) out.attn_weights = TensorD("attn_weights", {n, S, S});
  streaming_attention(q.data(), n * d_qk, kv, causal, scaling, L.bf16, L.threads, L.w.attention_products, progress,
                      {out.attn_context.data(), n * d_v, out.head_scores.data(),
                       keep_attn_weights ? out.attn_weights.ptr() : nullptr});
  return out;
}

MatrixRM o_proj(const Layer& L, const MatrixRM& attn_context) {
  MatrixRM attn_output;  // [S, H]
  L.w.o_proj->run(attn_context, L.threads, attn_output);
  return attn_output;
}

ForwardFlops forward_flops(const AttentionConfig& cfg, int64_t seq_len, bool causal) {
  const double S = static_cast<double>(seq_len), H = static_cast<double>(cfg.hidden_size);
  const double n = static_cast<double>(cfg.num_attention_heads), r_q = static_cast<double>(cfg.q_lora_rank);
  const double r_kv = static_cast<double>(cfg.kv_lora_rank), d_r = static_cast<double>(cfg.qk_rope_head_dim);
  const double d_qk = static_cast<double>(cfg.qk_nope_head_dim) + d_r, d_v = static_cast<double>(cfg.v_head_dim);
  const double q = cfg.has_q_lora() ? H * r_q + r_q * n * d_qk : H * n * d_qk;
  const double kv = H * (r_kv + d_r) + r_kv * n * (static_cast<double>(cfg.qk_nope_head_dim) + d_v);
  ForwardFlops f;
  f.projections = 2.0 * S * (q + kv + n * d_v * H);
  const double pairs = causal ? S * (S + 1.0) / 2.0 : S * S;
  f.attention = pairs * n * 2.0 * (d_qk + d_v);
  return f;
}

void return_freed_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

namespace {

// dst[i * cols + j] = src[i * ld + j] widened to double, rows in parallel.
void widen_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, double* dst, int threads) {
  parallel_for(rows, threads, [&](int64_t i, int) {
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = static_cast<double>(src[i * ld + j]);
  });
}

// key_states [n, S, d_qk] = [key_nope[h] | k_pe_roped] and value_states [n, S, d_v], widened from
// the stored keys/values (exact: they are the values the attention reads).
void export_key_value_states(const KeyValueStates& kv, ForwardResult& r) {
  const int64_t S = kv.seq_len, n = kv.heads, d_n = kv.qk_nope_head_dim, d_r = kv.qk_rope_head_dim;
  const int64_t d_qk = d_n + d_r, d_v = kv.v_head_dim;
  r.key_states = TensorD("key_states", {n, S, d_qk});
  r.value_states = TensorD("value_states", {n, S, d_v});
  std::vector<float> key(static_cast<size_t>(S * d_qk)), value(static_cast<size_t>(S * d_v));
  kv.k_pe_roped.widen_rows(0, S, key.data() + d_n, d_qk);
  for (int64_t h = 0; h < n; ++h) {
    kv.key_nope[static_cast<size_t>(h)].widen_rows(0, S, key.data(), d_qk);
    kv.value[static_cast<size_t>(h)].widen_rows(0, S, value.data(), d_v);
    std::copy(key.begin(), key.end(), r.key_states.ptr() + h * S * d_qk);
    std::copy(value.begin(), value.end(), r.value_states.ptr() + h * S * d_v);
  }
}

// query_states[h, r0 + s, :] = q[s, h*d_qk : (h+1)*d_qk] (roped), for the rows of one pass.
void export_query_states(const MatrixRM& q, int64_t r0, int64_t S, int64_t n, int64_t d_qk, TensorD& query_states) {
  for (int64_t s = 0; s < q.rows(); ++s)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t d = 0; d < d_qk; ++d)
        query_states.ptr()[(h * S + r0 + s) * d_qk + d] = q(s, h * d_qk + d);
}

}  // namespace

std::string describe(const PreparedWeights* w, int threads) {
  const std::string eigen = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) +
                            "." + std::to_string(EIGEN_MINOR_VERSION);
#if MLA_HAVE_BLAS
  const std::string sgemm = eigen + " + OpenBLAS sgemm (" + std::string(blas_description()) + ")";
#else
  const std::string sgemm = eigen + ", its own GEMM kernel (built without OpenBLAS)";
#endif
  std::string d;
  if (w && w->gemm.engine.rfind("oneDNN", 0) == 0) {
    d = "projections: " + gemm_label(w->gemm.engine, w->gemm.kernel) + "; per-head products: ";
    d += w->attention_products == Gemm::OneDnn
             ? gemm_label(w->gemm.engine, w->attention_kernel) + " (one thread per block)"
             : sgemm;
  } else {
    d = sgemm;
  }
  // the softmax rows' instruction set, chosen at run time (vector_kernels.hpp)
  d += "; softmax rows: " + std::string(vector_kernels().name) + " vector kernels";
  d += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  return d;
}

ProjectedRows project_rows(const Layer& L, const TensorF& hidden, const std::vector<int64_t>& positions,
                           int64_t key_rows, const ProjectedChunk& projected, const StageRunner& stage) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t T = hidden.dim(0), n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim;
  const int64_t d_r = cfg.qk_rope_head_dim, d_qk = d_n + d_r, d_v = cfg.v_head_dim, P = key_rows;
  const int64_t latent_width = cfg.has_q_lora() ? cfg.q_lora_rank : n * d_qk;
  ProjectedRows out{PrecisionMatrix(T, latent_width, L.bf16), KeyValueStates(P, n, d_n, d_r, d_v, L.bf16)};
  for (int64_t r0 = 0; r0 < T; r0 += kRowChunk) {
    const int64_t rows = std::min(kRowChunk, T - r0), stored_rows = std::clamp<int64_t>(P - r0, 0, rows);
    const MatrixRM x = stage("q_path", [&] {  // (with the input rows it reads: the first stage)
      MatrixRM chunk = input_rows(hidden, r0, rows, L.bf16);  // [rows, H]
      const MatrixRM latent = q_latent(L, chunk);
      out.q_store.set_rows(r0, rows, latent.data(), latent_width, L.threads);
      return chunk;
    });
    // compressed_kv [rows, r_kv+d_r], latent_normed [rows, r_kv], kv [rows, n*(d_n+d_v)]
    const KvPath kvp = stage("kv_path", [&] { return kv_path(L, x); });
    const MatrixRM k_pe_roped = stage("rope", [&] {
      return rope_key(L, std::vector<int64_t>(positions.begin() + r0, positions.begin() + r0 + rows), kvp.compressed_kv);
    });
    if (stored_rows > 0)
      stage("attend", [&] {  // storing the keys/values is the attention's first step
        out.states.set_kv_rows(r0, stored_rows, kvp.kv.data(), n * (d_n + d_v), L.threads);
        out.states.set_k_pe_rows(r0, stored_rows, k_pe_roped.data(), d_r);
      });
    if (projected) projected(r0, rows, kvp, k_pe_roped);
  }
  return_freed_memory();  // the chunks' intermediates
  return out;
}

MatrixRM stored_queries(const Layer& L, const PrecisionMatrix& q_store, const std::vector<int64_t>& positions,
                        int64_t r0, int64_t rows, const StageRunner& stage) {
  const int64_t latent_width = q_store.cols();
  MatrixRM q = stage("q_path", [&] {  // [rows, n*d_qk]
    MatrixRM latent(rows, latent_width);
    q_store.widen_rows(r0, rows, latent.data(), latent_width, L.threads);
    return q_from_latent(L, latent);
  });
  stage("rope", [&] { rope_query(L, std::vector<int64_t>(positions.begin() + r0, positions.begin() + r0 + rows), q); });
  return q;
}

PrecisionMatrix attend_rows(const Layer& L, const ProjectedRows& projected, const std::vector<int64_t>& positions,
                            const AttendRows& a, const StageRunner& stage) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t n = cfg.num_attention_heads, d_qk = cfg.qk_head_dim(), d_v = cfg.v_head_dim;
  const int64_t P = projected.states.seq_len;
  PrecisionMatrix context(a.context ? P : 0, n * d_v, L.bf16);
  const float scaling = static_cast<float>(softmax_scale(cfg));  // a Python float, used as fp32 by torch
  // progress in FLOP of the products per computed query·key pair (2 d_qk for the scores, 2 d_v
  // more for P·V): the work, so the time left extrapolates correctly although causal blocks grow
  const int64_t flop_per_pair = 2 * (d_qk + (a.context ? d_v : 0));
  const int64_t total_pairs = streaming_pairs(P, n, a.causal);
  int64_t pairs_before = 0;
  const int64_t pass = query_pass_rows(P);
  for (int64_t r0 = 0; r0 < P; r0 += pass) {
    const int64_t rows = std::min(pass, P - r0);
    const MatrixRM q = stored_queries(L, projected.q_store, positions, r0, rows, stage);
    if (a.queries) a.queries(q, r0);
    stage("attend", [&] {
      MatrixRM ctx(a.context ? rows : 0, n * d_v);  // feature h*d_v + d (HF's transpose + reshape)
      BlockProgress progress;
      if (a.progress)
        progress = [&](int64_t done, int64_t) {
          a.progress(a.progress_label, (pairs_before + done) * flop_per_pair, total_pairs * flop_per_pair);
        };
      streaming_attention(q.data(), n * d_qk, projected.states, a.causal, scaling, L.bf16, L.threads,
                          L.w.attention_products, progress,
                          {a.context ? ctx.data() : nullptr, a.context ? n * d_v : 0, a.head_mass, a.attn_weights},
                          {r0, r0 + rows});
      if (a.context) context.set_rows(r0, rows, ctx.data(), n * d_v, L.threads);
    });
    pairs_before += streaming_pairs(P, n, a.causal, {r0, r0 + rows});
  }
  return context;
}

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  std::string description() const override { return describe(prepared_ ? &weights_ : nullptr, resolve_threads(prepared_ ? threads_ : 0)); }

  GemmInfo gemm_info() const override { return prepared_ ? weights_.gemm : GemmInfo{}; }

  void prepare(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) override {
    prepared_ = false;
    validate_layer(cfg, w, opt);
    const int threads = resolve_threads(opt.threads);
    weights_ = prepare_weights(cfg, w, opt.precision == Precision::BF16, threads, opt.gemm);
    cfg_ = cfg;
    precision_ = opt.precision;
    threads_ = threads;
    prepared_ = true;
  }

  // The forward in three passes over the tokens, so that nothing but the stored keys/values,
  // the q latent and the attention context is ever held for all S tokens (docs/long-context.md
  // §1, §3):
  //   1. projections, kRowChunk rows at a time (project_rows): x -> q latent (stored in the
  //      run's precision), kv_path -> keys/values (stored in the run's precision, KeyValueStates), rope of k_pe;
  //   2. attention, query_pass_rows(S) queries at a time (attend_rows): q = q_b_proj(latent) and
  //      its rope, then streaming_attention for those rows -> attn_context rows (run's precision);
  //   3. o_proj, kRowChunk rows at a time, widened into attn_output (double) as they come.
  // The stages keep their names and report their total over the chunks.
  ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) override {
    check_prepared(prepared_, precision_, opt);
    validate_input(cfg_, hidden, opt);
    const Layer L{cfg_, weights_, precision_ == Precision::BF16, opt.threads > 0 ? opt.threads : threads_,
                  static_cast<float>(opt.latent_norm_eps)};
    const AttentionConfig& cfg = cfg_;
    const int64_t S = hidden.dim(0), H = cfg.hidden_size, n = cfg.num_attention_heads;
    const int64_t r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim;
    const int64_t d_qk = d_n + d_r, d_v = cfg.v_head_dim;
    const std::vector<int64_t> positions = position_ids(opt.position_offset, S);
    StageSeconds stages;
    const StageRunner stage(stages);  // a stage run chunk after chunk reports its total
    ForwardResult result;
    result.computed_in_double = false;

    // 1. projections (project_rows), the latent cache rows as they come
    ProjectedChunk latent_cache_rows_of;
    if (opt.keep_latent_cache) {
      result.latent_cache = TensorD("latent_cache", {S, r_kv + d_r});
      latent_cache_rows_of = [&](int64_t r0, int64_t rows, const KvPath& kvp, const MatrixRM& k_pe_roped) {
        const TensorD part = latent_cache_rows(kvp.latent_normed.data(), k_pe_roped.data(), rows, r_kv, d_r);
        std::copy(part.ptr(), part.ptr() + rows * (r_kv + d_r), result.latent_cache.ptr() + r0 * (r_kv + d_r));
      };
    }
    ProjectedRows projected = project_rows(L, hidden, positions, S, latent_cache_rows_of, stage);
    if (opt.keep_states) export_key_value_states(projected.states, result);

    // 2. attention, one query pass at a time (attend_rows)
    result.head_scores.assign(static_cast<size_t>(n * S), 0.0);
    if (opt.keep_attn_weights) result.attn_weights = TensorD("attn_weights", {n, S, S});
    if (opt.keep_states) result.query_states = TensorD("query_states", {n, S, d_qk});
    AttendRows attend;
    attend.causal = opt.mask == Mask::Causal;
    attend.head_mass = result.head_scores.data();
    attend.attn_weights = opt.keep_attn_weights ? result.attn_weights.ptr() : nullptr;
    attend.progress = opt.progress;
    if (opt.keep_states)
      attend.queries = [&](const MatrixRM& q, int64_t r0) { export_query_states(q, r0, S, n, d_qk, result.query_states); };
    const PrecisionMatrix context = attend_rows(L, projected, positions, attend, stage);  // [S, n*d_v]
    projected = ProjectedRows{PrecisionMatrix(), KeyValueStates(0, 0, 0, 0, 0, false)};  // a lower peak
    return_freed_memory();

    // 3. o_proj, widened into attn_output as it comes
    result.attn_output = huge_page_tensor<double>("attn_output", {S, H});
    for (int64_t r0 = 0; r0 < S; r0 += kRowChunk) {
      const int64_t rows = std::min(kRowChunk, S - r0);
      const MatrixRM y = stage("o_proj", [&] {  // [rows, H]
        MatrixRM ctx(rows, n * d_v);
        context.widen_rows(r0, rows, ctx.data(), n * d_v, L.threads);
        return o_proj(L, ctx);
      });
      stage("export", [&] { widen_rows(y.data(), H, rows, H, result.attn_output.ptr() + r0 * H, L.threads); });
    }
    stage("export", [&] {
      check_attn_output_finite(result.attn_output, opt.precision);
      result.token_scores = token_scores_from_heads(result.head_scores, n);
    });
    result.stage_seconds = std::move(stages);
    return result;
  }

 private:
  bool prepared_ = false;
  AttentionConfig cfg_;
  PreparedWeights weights_;
  Precision precision_ = Precision::FP32;
  int threads_ = 0;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace mla
