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
// forward() runs the stages of cpu_stages.hpp in HF's order, each timed (StageTimer):
//   q_path    q = q_b(RMSNorm_q(q_a(x)))  or  q = q_proj(x)              [S, n*d_qk]
//   kv_path   compressed_kv = kv_a(x) = [latent | k_pe]; kv = kv_b(RMSNorm_kv(latent))
//   rope      q's rope halves in place, k_pe_roped [S, d_r] (HF order)
//   attend    keys/values stored in the run's precision, then streamed per head and block of
//             64 queries: p = softmax(mask(scaling q k^T)), attn_context_h = p v_h, and the
//             H2O column sums of p (double)                               [S, n*d_v], [n*S]
//   o_proj    attn_output = attn_context W_o^T (+ b)                      [S, H]
//   export    token_scores = sum over heads, widening to double, states on request
// The five projections run on the GEMM engine chosen in prepare (gemm_engine.hpp,
// docs/cpu-gemm.md: oneDNN matmul, or Eigen + OpenBLAS sgemm with its own threads); attend runs
// heads in parallel, its two per-head products on the same engine with one thread per worker
// (oneDNN matmul primitives, onednn_attention.hpp, or single-threaded sgemm). With a causal mask, query block [r0, r0+64) only multiplies keys
// [0, r0+64): the skipped probabilities are exactly 0 in HF too (exp(min_float - max)
// underflows to 0), so skipping them changes no value. No [n, S, S] tensor exists unless
// keep_attn_weights asks for one (dumps); memory is O(S) otherwise, and forward() frees each
// intermediate once it is used (x, then kv and q unless states are kept): docs/long-context.md.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cpu_kernels.hpp"
#include "cpu_stages.hpp"
#include "onednn_attention.hpp"
#include "streaming_attention.hpp"
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

// src widened to double (exact), on `threads` workers; the fresh buffer is faulted in first
// (mla/huge_pages.hpp: at S = 4096 attn_output is 235 MB of new memory).
TensorD widen(const std::string& name, std::vector<int64_t> shape, const float* src, int threads) {
  TensorD t = huge_page_tensor<double>(name, std::move(shape));
  const int64_t count = t.numel(), slices = std::max(threads, 1);
  parallel_for(slices, threads, [&](int64_t slice, int) {
    for (int64_t i = count * slice / slices; i < count * (slice + 1) / slices; ++i)
      t.data[static_cast<size_t>(i)] = static_cast<double>(src[i]);
  });
  return t;
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

MatrixRM input_rows(const TensorF& hidden, bool bf16) {
  MatrixRM x = Eigen::Map<const MatrixRM>(hidden.ptr(), hidden.dim(0), hidden.dim(1));  // [S, H]
  if (bf16) round_to_bf16_inplace(x.data(), x.size());
  return x;
}

MatrixRM q_path(const Layer& L, const MatrixRM& x) {
  const PreparedWeights& w = L.w;
  const int64_t S = x.rows(), r_q = L.cfg.q_lora_rank;
  MatrixRM q;  // [S, n*d_qk]
  if (!L.cfg.has_q_lora()) {
    w.q_proj->run(x, L.threads, q);  // HF's q_proj has no bias
    return q;
  }
  MatrixRM q_a;  // [S, r_q]
  w.q_a_proj->run(x, L.threads, q_a);
  MatrixRM q_a_normed(S, r_q);  // [S, r_q]
  rms_norm(q_a.data(), r_q, S, r_q, w.q_a_layernorm.data(), L.latent_norm_eps, L.bf16, q_a_normed.data(), r_q);
  w.q_b_proj->run(q_a_normed, L.threads, q);
  return q;
}

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

MatrixRM rope(const Layer& L, const std::vector<int64_t>& positions, MatrixRM& q, const MatrixRM& compressed_kv) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t S = q.rows(), n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_qk = d_n + d_r;
  RopeTables tables = rope_tables(cfg, positions);  // cos/sin [S, d_r] fp32, as HF's rotary module
  if (L.bf16) {
    round_to_bf16_inplace(tables.cos.data(), static_cast<int64_t>(tables.cos.size()));
    round_to_bf16_inplace(tables.sin.data(), static_cast<int64_t>(tables.sin.size()));
  }
  MatrixRM k_pe_roped(S, d_r);  // [S, d_r]  one roped key per token, shared by all heads
  std::vector<std::vector<float>> q_pe(static_cast<size_t>(L.threads), std::vector<float>(static_cast<size_t>(d_r)));
  parallel_for(S, L.threads, [&](int64_t s, int worker) {
    const float* cos = tables.cos.data() + s * d_r;
    const float* sin = tables.sin.data() + s * d_r;
    float* q_pe_s = q_pe[static_cast<size_t>(worker)].data();  // [d_r] one head's q_pe, before rotation
    for (int64_t h = 0; h < n; ++h) {
      float* q_rope_half = q.data() + s * n * d_qk + h * d_qk + d_n;
      std::copy_n(q_rope_half, d_r, q_pe_s);
      cpu::rope(q_pe_s, q_rope_half, cos, sin, d_r, cfg.rope_interleave, L.bf16);
    }
    cpu::rope(compressed_kv.data() + s * (r_kv + d_r) + r_kv, k_pe_roped.data() + s * d_r, cos, sin, d_r,
              cfg.rope_interleave, L.bf16);
  });
  return k_pe_roped;
}

KeyValueStates key_value_states(const Layer& L, const MatrixRM& kv, const MatrixRM& k_pe_roped) {
  const AttentionConfig& cfg = L.cfg;
  const int64_t S = kv.rows(), n = cfg.num_attention_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  KeyValueStates states(S, n, d_n, d_r, d_v, L.bf16);
  states.set_kv_rows(0, S, kv.data(), n * (d_n + d_v));
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

namespace {

// export: the result in double (exact widening), H2O token scores, states on request.
ForwardResult export_result(const AttentionConfig& cfg, const ForwardOptions& opt, const MatrixRM& q,
                            const KvPath& kvp, const MatrixRM& k_pe_roped, Attention&& att,
                            const MatrixRM& attn_output, int threads) {
  const int64_t S = attn_output.rows(), H = cfg.hidden_size, n = cfg.num_attention_heads;
  const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim, d_qk = d_n + d_r;
  ForwardResult result;
  result.computed_in_double = false;
  result.attn_output = widen("attn_output", {S, H}, attn_output.data(), threads);
  check_attn_output_finite(result.attn_output, opt.precision);
  result.head_scores = std::move(att.head_scores);
  result.token_scores = token_scores_from_heads(result.head_scores, n);
  result.attn_weights = std::move(att.attn_weights);
  if (opt.keep_latent_cache)  // [S, r_kv + d_r] = latent_normed | k_pe_roped
    result.latent_cache = latent_cache_rows(kvp.latent_normed.data(), k_pe_roped.data(), S, cfg.kv_lora_rank, d_r);
  if (!opt.keep_states) return result;
  result.query_states = TensorD("query_states", {n, S, d_qk});
  result.key_states = TensorD("key_states", {n, S, d_qk});
  result.value_states = TensorD("value_states", {n, S, d_v});
  for (int64_t h = 0; h < n; ++h) {
    for (int64_t s = 0; s < S; ++s) {
      double* qs = result.query_states.ptr() + (h * S + s) * d_qk;
      double* ks = result.key_states.ptr() + (h * S + s) * d_qk;
      double* vs = result.value_states.ptr() + (h * S + s) * d_v;
      const float* q_row = q.data() + s * n * d_qk + h * d_qk;
      const float* kv_row = kvp.kv.data() + s * n * (d_n + d_v) + h * (d_n + d_v);
      for (int64_t d = 0; d < d_qk; ++d) qs[d] = q_row[d];
      for (int64_t d = 0; d < d_n; ++d) ks[d] = kv_row[d];
      for (int64_t d = 0; d < d_r; ++d) ks[d_n + d] = k_pe_roped(s, d);
      for (int64_t d = 0; d < d_v; ++d) vs[d] = kv_row[d_n + d];
    }
  }
  return result;
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
             ? gemm_label(w->gemm.engine, w->attention_kernel) + " (one thread per head); softmax: " + eigen
             : sgemm;
  } else {
    d = sgemm;
  }
  d += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  return d;
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

  ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) override {
    check_prepared(prepared_, precision_, opt);
    validate_input(cfg_, hidden, opt);
    const Layer L{cfg_, weights_, precision_ == Precision::BF16, opt.threads > 0 ? opt.threads : threads_,
                  static_cast<float>(opt.latent_norm_eps)};
    StageSeconds stages;
    const StageRunner stage(stages);
    MatrixRM x = input_rows(hidden, L.bf16);  // [S, H]
    const int64_t S = x.rows();
    MatrixRM q = stage("q_path", [&] { return q_path(L, x); });      // [S, n*d_qk]
    // compressed_kv [S, r_kv+d_r], latent_normed [S, r_kv], kv [S, n*(d_n+d_v)]
    KvPath kvp = stage("kv_path", [&] { return kv_path(L, x); });
    x = MatrixRM();  // no longer needed
    // k_pe_roped [S, d_r]; q's rope halves are rotated in place
    const MatrixRM k_pe_roped = stage("rope", [&] { return rope(L, position_ids(opt.position_offset, S), q, kvp.compressed_kv); });
    // attn_context [S, n*d_v], head_scores [n*S], attn_weights [n, S, S] on request
    Attention att = stage("attend", [&] {
      const KeyValueStates states = key_value_states(L, kvp.kv, k_pe_roped);
      if (!opt.keep_states) kvp.kv = MatrixRM();  // fp32 copy no longer needed: a lower peak
      BlockProgress progress;
      if (opt.progress) progress = [&](int64_t done, int64_t total) { opt.progress("attention blocks", done, total); };
      return attend(L, q, states, opt.mask == Mask::Causal, opt.keep_attn_weights, progress);
    });
    if (!opt.keep_states) q = MatrixRM();  // no longer needed
    const MatrixRM attn_output = stage("o_proj", [&] { return o_proj(L, att.attn_context); });  // [S, H]
    ForwardResult result = stage("export", [&] {
      return export_result(cfg_, opt, q, kvp, k_pe_roped, std::move(att), attn_output, L.threads);
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
