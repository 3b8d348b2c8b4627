// src/cpu/attention_stages.cpp — the stages of the cpu backend's attention layer
// (attention_stages.hpp: q_path, kv_path, rope, o_proj, prepare_weights), each one equation of
// docs/math.md §3 on the GEMM engine chosen at prepare (gemm_engine.hpp); cpu_backend.cpp and
// the whole-model forward (src/model) run them.
//
// Shape legend (config names):
//   S = sequence length, H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r.
#include <Eigen/Core>

#include <algorithm>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention_pipeline.hpp"
#include "cpu_kernels.hpp"
#include "attention_stages.hpp"
#include "onednn_attention.hpp"
#include "tiled_attention.hpp"
#include "vector_kernels.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/huge_pages.hpp"
#include "mla/rope.hpp"
#include "mla/stage_timer.hpp"
#include "mla/validate.hpp"
#include "mla_build_config.h"


namespace mla::cpu {
namespace {

// A validated projection weight (mla/validate.hpp) prepared once for the GEMM engine, with its
// bias when it has one (bf16 rounding in bf16 mode); null for an absent (empty) weight. With
// `kept` (the layer t belongs to, shared), the engine may read t in place (gemm_engine.hpp).
std::unique_ptr<PreparedLinear> prepare_linear(GemmEngine& engine, const TensorF& t, const char* name,
                                               const TensorF& bias, Precision precision, int threads,
                                               const std::shared_ptr<const LayerWeights>& kept) {
  if (t.empty()) return nullptr;
  LinearWeight w{name, t.ptr(), t.dim(0), t.dim(1), bias.empty() ? nullptr : bias.ptr()};
  if (kept) {
    w.owner = std::shared_ptr<const void>(kept, t.ptr());
    const auto dtype = kept->source_dtype.find(name);
    w.bf16_values = dtype != kept->source_dtype.end() && dtype->second == "BF16";  // widened exactly by the loader
  }
  // gemm_engine.hpp's prepare still takes a bool (left to its owner; docs/backends.md §8)
  return engine.prepare(w, precision == Precision::BF16, threads);
}

}  // namespace

std::vector<float> prepare_vector(const TensorF& t, Precision precision) {
  std::vector<float> v = t.data;
  round_inplace(precision, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

// ---- the stages (attention_stages.hpp) ------------------------------------------------------------

PreparedWeights prepare_weights(const AttentionConfig& cfg, const LayerWeights& w, Precision precision, int threads,
                                Gemm gemm, const std::shared_ptr<const LayerWeights>& kept) {
  std::string reason;
  const std::unique_ptr<GemmEngine> engine = make_gemm_engine(gemm, precision == Precision::BF16, reason);
  return prepare_weights_on(*engine, gemm_name(gemm), reason, cfg, w, precision, threads, kept);
}

PreparedWeights prepare_weights_on(GemmEngine& engine, const std::string& requested, const std::string& reason,
                                   const AttentionConfig& /*cfg: validated against*/, const LayerWeights& w,
                                   Precision precision, int threads, const std::shared_ptr<const LayerWeights>& kept) {
  if (kept && kept.get() != &w) fail(ErrorKind::InvalidArgument, "prepare_weights_on: kept is not the layer prepared");
  const TensorF none;  // q_b_proj, q_proj and kv_b_proj have no bias (HF)
  PreparedWeights p;
  p.q_a_proj = prepare_linear(engine, w.q_a_proj, "q_a_proj", w.q_a_proj_bias, precision, threads, kept);
  p.q_a_layernorm = prepare_vector(w.q_a_layernorm, precision);
  p.q_b_proj = prepare_linear(engine, w.q_b_proj, "q_b_proj", none, precision, threads, kept);
  p.q_proj = prepare_linear(engine, w.q_proj, "q_proj", none, precision, threads, kept);
  p.kv_a_proj_with_mqa =
      prepare_linear(engine, w.kv_a_proj_with_mqa, "kv_a_proj_with_mqa", w.kv_a_proj_with_mqa_bias, precision, threads, kept);
  p.kv_a_layernorm = prepare_vector(w.kv_a_layernorm, precision);
  p.kv_b_proj = prepare_linear(engine, w.kv_b_proj, "kv_b_proj", none, precision, threads, kept);
  p.o_proj = prepare_linear(engine, w.o_proj, "o_proj", w.o_proj_bias, precision, threads, kept);
  p.gemm = {requested, engine.name(), p.kv_b_proj->kernel(), reason, engine.holdings().attention_products, engine.refused, {}};
  if (p.gemm.attention_products == Gemm::OneDnn) p.attention_kernel = onednn_attention_kernel(precision == Precision::BF16);
  return p;
}

MatrixRM input_rows(const TensorF& hidden, int64_t row_begin, int64_t rows, Precision precision) {
  const int64_t H = hidden.dim(1);
  MatrixRM x = Eigen::Map<const MatrixRM>(hidden.ptr() + row_begin * H, rows, H);  // [rows, H]
  round_inplace(precision, x.data(), x.size());
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
  rms_norm(q_a.data(), r_q, S, r_q, w.q_a_layernorm.data(), L.latent_norm_eps, L.precision, q_a_normed.data(), r_q);
  return q_a_normed;
}

MatrixRM q_from_latent(const Layer& L, const MatrixRM& latent) {
  if (!L.cfg.has_q_lora()) return latent;
  MatrixRM q;  // [S, n*d_qk]
  L.w.q_b_proj->run(latent, L.threads, q);
  return q;
}

KvPath kv_path(const Layer& L, const MatrixRM& x) {
  const PreparedWeights& w = L.w;
  const int64_t S = x.rows(), r_kv = L.cfg.kv_lora_rank, d_r = L.cfg.qk_rope_head_dim;
  KvPath out;
  w.kv_a_proj_with_mqa->run(x, L.threads, out.compressed_kv);
  out.latent_normed.resize(S, r_kv);  // kv_a_layernorm reads the first r_kv columns (the latent)
  rms_norm(out.compressed_kv.data(), r_kv + d_r, S, r_kv, w.kv_a_layernorm.data(), L.latent_norm_eps, L.precision,
           out.latent_normed.data(), r_kv);
  w.kv_b_proj->run(out.latent_normed, L.threads, out.kv);
  return out;
}

namespace {

// cos/sin [S, d_r] for the positions, fp32 as HF's rotary module, rounded to bf16 in bf16 mode
// (DeepseekV3's `.to(x.dtype)`; DeepseekV2 multiplies by its fp32 freqs_cis unrounded).
RopeTables run_rope_tables(const Layer& L, const std::vector<int64_t>& positions) {
  RopeTables tables = rope_tables(L.cfg, positions);
  if (L.precision == Precision::BF16 && L.cfg.rope_style() != RopeStyle::Complex) {
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
      cpu::rope(q_pe_s, q_rope_half, cos, sin, d_r, cfg.rope_style(), L.precision);
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
              tables.sin.data() + s * d_r, d_r, cfg.rope_style(), L.precision);
  });
  return k_pe_roped;
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

}  // namespace mla::cpu
