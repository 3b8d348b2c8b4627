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
// forward() runs the one CPU attention layer (attention_pipeline.hpp: three passes over the
// tokens, docs/long-context.md §1) with the tiled kernel plugged in. Its stages (attention_stages.hpp,
// implemented in attention_stages.cpp), in HF's order, each timed (StageRunner):
//   q_path    q latent = q_a_layernorm(q_a(x)) per row chunk, stored; q = q_b(latent) per query pass
//             (or q = q_proj(x))                                        [S, r_q] -> [rows, n*d_qk]
//   kv_path   compressed_kv = kv_a(x) = [latent | k_pe]; kv = kv_b(RMSNorm_kv(latent)), per chunk
//   rope      k_pe_roped per chunk, q's rope halves per query pass (HF order)
//   attend    keys/values stored in the run's precision, then tiled per head and block of
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

namespace mla {
namespace cpu {

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
    d += w->gemm.attention_products == Gemm::OneDnn
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

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  std::string description() const override { return describe(prepared_ ? &weights_ : nullptr, resolve_threads(prepared_ ? threads_ : 0)); }

  // The engine, with the oneDNN reorders run since prepare() began (process-wide counts).
  GemmInfo gemm_info() const override {
    if (!prepared_) return {};
    GemmInfo g = weights_.gemm;
    g.reorders = onednn_reorders() - reorders_at_prepare_;
    return g;
  }

  void prepare(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) override {
    prepare_from(cfg, w, nullptr, opt);
  }
  // The engines read weights of `w` in place where they can (gemm_engine.hpp LinearWeight::owner).
  void prepare_shared(const AttentionConfig& cfg, std::shared_ptr<const LayerWeights> w,
                      const ForwardOptions& opt) override {
    prepare_from(cfg, *w, w, opt);
  }

  // The forward: the CPU attention layer (attention_pipeline.hpp: projections by row chunks,
  // attention by query passes, o_proj by row chunks; docs/long-context.md §1, §3) with the
  // tiled kernel plugged in, so that nothing but the stored keys/values, the q latent and the
  // attention context is ever held for all S tokens; each chunk's output widened into
  // attn_output (double) as it comes. The stages keep their names and report their total over
  // the chunks.
  ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) override {
    check_prepared(prepared_, precision_, opt);
    validate_input(cfg_, hidden, opt);
    const Layer L{cfg_, weights_, precision_, opt.threads > 0 ? opt.threads : threads_,
                  static_cast<float>(opt.latent_norm_eps)};
    const int64_t S = hidden.dim(0), H = cfg_.hidden_size, n = cfg_.num_attention_heads, d_qk = cfg_.qk_head_dim();
    StageSeconds stages;
    const StageRunner stage(stages);  // a stage run chunk after chunk reports its total
    ForwardResult result;
    result.computed_in_double = false;
    TiledAttention attention(L, S, opt.mask == Mask::Causal);
    attention.progress = opt.progress;
    AttentionPlugs plugs;
    attention.plug(plugs);
    if (opt.keep_latent_cache) {
      result.latent_cache = TensorD("latent_cache", {S, cfg_.kv_lora_rank + cfg_.qk_rope_head_dim});
      plugs.latent = latent_cache_into(result.latent_cache);
    }
    plugs.keys_stored = [&] {  // the attention's outputs, allocated once the projections are done
      if (opt.keep_states) export_key_value_states(attention.states(), result);
      result.head_scores.assign(static_cast<size_t>(n * S), 0.0);
      attention.head_mass = result.head_scores.data();
      if (opt.keep_attn_weights) {
        result.attn_weights = TensorD("attn_weights", {n, S, S});
        attention.attn_weights = result.attn_weights.ptr();
      }
      if (opt.keep_states) result.query_states = TensorD("query_states", {n, S, d_qk});
    };
    if (opt.keep_states)
      plugs.queries = [&](const MatrixRM& q, int64_t r0) { export_query_states(q, r0, S, n, d_qk, result.query_states); };
    plugs.output = [&](int64_t r0, const MatrixRM& y) {  // [rows, H], widened as it comes
      if (r0 == 0) result.attn_output = huge_page_tensor<double>("attn_output", {S, H});  // (the keys freed by now)
      stage("export", [&] { widen_rows(y.data(), H, y.rows(), H, result.attn_output.ptr() + r0 * H, L.threads); });
    };
    attention_layer(L, S, [&](int64_t r0, int64_t rows) { return input_rows(hidden, r0, rows, L.precision); },
                    position_ids(opt.position_offset, S), plugs, stage);
    stage("export", [&] {
      check_attn_output_finite(result.attn_output, opt.precision);
      result.token_scores = token_scores_from_heads(result.head_scores, n);
    });
    result.stage_seconds = std::move(stages);
    return result;
  }

 private:
  void prepare_from(const AttentionConfig& cfg, const LayerWeights& w, const std::shared_ptr<const LayerWeights>& kept,
                    const ForwardOptions& opt) {
    prepared_ = false;
    reorders_at_prepare_ = onednn_reorders();
    validate_layer(cfg, w, opt);
    const int threads = resolve_threads(opt.threads);
    weights_ = prepare_weights(cfg, w, opt.precision, threads, opt.gemm, kept);
    cfg_ = cfg;
    precision_ = opt.precision;
    threads_ = threads;
    prepared_ = true;
  }

  bool prepared_ = false;
  AttentionConfig cfg_;
  PreparedWeights weights_;
  Precision precision_ = Precision::FP32;
  int threads_ = 0;
  OnednnReorders reorders_at_prepare_;  // onednn_reorders() when prepare() began
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace mla
