// src/cpu/cpu_decode.cpp — the cpu backend's part of `mla-h2o decode` (docs/decode.md §1, §3):
//
// compute_cpu_decode_inputs: the one CPU attention layer (attention_pipeline.hpp) over all T rows
//   at positions 0 .. T-1 — q_path, kv_path and rope, then attend over the P prompt rows
//   (causal) for the attention mass per head; no P·V and no o_proj (the prefill's attn_output is
//   not needed), which is ~40 % of the prefill's FLOPs for Kimi.
//
// The decode kernel (Eigen + OpenBLAS): one query row at a time against the latent cache,
// absorbed (as vLLM, SGLang and DeepSeek's inference code run MLA decode) or naive (per-head
// k/v, as HF).
//
// Cost: everything that does not depend on the cache subset is computed once —
//   absorbed: qc[x] = q~ | q_pe for every held query row (q~ = W_UK^T q_nope), fixed-order dots;
//             logits of x against ALL tokens, one GEMM [n, r_kv+d_r] x [r_kv+d_r, x+1] per step;
//             per (policy, budget): a softmax over its subset of those logits and the context
//             sum_t p c_t as one GEMM [n, m] x [m, r_kv]; W_UV for all runs of the step at once;
//             o_proj for all steps of a run at once (outputs()).
//   naive:    kv = kv_b_proj(latent) for all T tokens once; per step the logits per head
//             q . [k_nope | k_pe] over all tokens; per run the softmax and sum_t p v_h,t.
// Rounding (bf16 mode, docs/decode.md §3):
//   absorbed: q~ -> bf16; logits, softmax in fp32; context -> bf16; W_UV output -> bf16;
//             o_proj -> bf16.
//   naive:    HF bf16 eager: kv -> bf16; q.k -> bf16, * scale -> bf16; softmax fp32 -> bf16;
//             p.v -> bf16; o_proj -> bf16.
// fp32 mode: the same steps with fp32 results and no rounding to bf16.
//
// Shape legend: T rows, Q held query rows, n heads, r_kv kv_lora_rank, d_n, d_r, d_v,
// d_qk = d_n + d_r, w = d_n + d_v (kv_b_proj rows per head), m = tokens attended, H hidden.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "mla/validate.hpp"
#include "src/cpu/attention_pipeline.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/attention_stages.hpp"

namespace mla {
namespace {

using cpu::MatrixRM;
using ConstStrided = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;
size_t idx(int64_t i) { return static_cast<size_t>(i); }

// sum_c a[c] b[c] in a fixed order: 16 partial sums (lane j takes c = j mod 16), then a fixed
// pairwise reduction. The result depends only on a and b (no reassociation is allowed without
// -ffast-math, whatever the vectoriser does), not on where they lie or what else is computed;
// the clones are chosen once per machine at load time.
__attribute__((target_clones("avx512f", "avx2", "default"))) float dot_fixed(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[c + j] * b[c + j];
  for (int j = 0; c + j < n; ++j) acc[j] += a[c + j] * b[c + j];
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0];
}

// The clone of dot_fixed this CPU runs (the same choice the loader makes).
const char* dot_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "sse2";
}

// fp32 (or bf16) values held in double, copied exactly
MatrixRM to_matrix(const double* src, int64_t rows, int64_t cols) {
  MatrixRM m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = static_cast<float>(src[i]);
  return m;
}

MatrixRM weight_matrix(const TensorF& t, const char* name, int64_t rows, int64_t cols, Precision precision) {
  if (t.shape != std::vector<int64_t>{rows, cols} || static_cast<int64_t>(t.data.size()) != rows * cols)
    fail(ErrorKind::Shape, std::string("cpu decode: weight ") + name + " has shape " + shape_string(t.shape) +
                               ", expected " + shape_string({rows, cols}));
  MatrixRM m = Eigen::Map<const MatrixRM>(t.ptr(), rows, cols);
  cpu::round_inplace(precision, m.data(), m.size());
  return m;
}

class CpuDecodeKernel final : public DecodeKernel {
 public:
  CpuDecodeKernel(const AttentionConfig& cfg, const LayerWeights& w, const DecodeInputs& in, const DecodeKernelSpec& spec)
      : absorbed_(spec.attention == DecodeAttention::Absorbed),
        precision_(spec.precision),
        threads_(cpu::resolve_threads(spec.threads)),
        n_(cfg.num_attention_heads),
        r_kv_(cfg.kv_lora_rank),
        d_n_(cfg.qk_nope_head_dim),
        d_r_(cfg.qk_rope_head_dim),
        d_v_(cfg.v_head_dim),
        H_(cfg.hidden_size),
        T_(in.total_rows()),
        query_begin_(in.query_begin),
        scale_(static_cast<float>(softmax_scale(cfg))) {
    const int64_t w_head = d_n_ + d_v_, d_qk = d_n_ + d_r_, Q = T_ - query_begin_;
    if (in.latent_cache.shape != std::vector<int64_t>{T_, r_kv_ + d_r_} ||
        in.query_states.shape != std::vector<int64_t>{n_, Q, d_qk})
      fail(ErrorKind::Shape, "cpu decode: inputs have latent cache " + shape_string(in.latent_cache.shape) +
                                 " and queries " + shape_string(in.query_states.shape) + " for the config");
    kv_b_ = weight_matrix(w.kv_b_proj, "kv_b_proj", n_ * w_head, r_kv_, precision_);
    o_proj_ = weight_matrix(w.o_proj, "o_proj", H_, n_ * d_v_, precision_);
    if (!w.o_proj_bias.empty()) {
      o_bias_ = w.o_proj_bias.data;
      cpu::round_inplace(precision_, o_bias_.data(), static_cast<int64_t>(o_bias_.size()));
    }
    // The inputs are fp32 / bf16 values already; to_matrix copies them exactly.
    cache_ = to_matrix(in.latent_cache.ptr(), T_, r_kv_ + d_r_);  // [T, r_kv + d_r]
    queries_.resize(n_ * Q, d_qk);                                         // [n*Q, d_qk] head-major
    for (int64_t i = 0; i < n_ * Q * d_qk; ++i) queries_.data()[i] = static_cast<float>(in.query_states.data[idx(i)]);
    if (absorbed_) {
      // qc [Q, n*(r_kv + d_r)]: per head q~ = q_nope W_UK^h (-> bf16) | q_pe. Each q~ value is
      // one fixed-order dot (dot_fixed) of the row with a column of W_UK^h: a row's q~ does not
      // depend on how many rows are held (Q grows with the batch's largest observation window,
      // and a GEMM's kernel for a row depends on where the row falls in its panels).
      const int64_t width = r_kv_ + d_r_;
      MatrixRM w_uk_t(n_ * r_kv_, d_n_);  // [n*r_kv, d_n]: row h*r_kv + c = column c of W_UK^h
      for (int64_t h = 0; h < n_; ++h)
        w_uk_t.middleRows(h * r_kv_, r_kv_) =
            ConstStrided(kv_b_.data() + h * w_head * r_kv_, d_n_, r_kv_, Eigen::OuterStride<>(r_kv_)).transpose();
      qc_.resize(Q, n_ * width);
      cpu::parallel_for(Q, threads_, [&](int64_t q, int) {
        for (int64_t h = 0; h < n_; ++h) {
          const float* q_row = queries_.data() + (h * Q + q) * d_qk;  // [d_n | d_r]
          float* out = qc_.data() + q * qc_.cols() + h * width;
          for (int64_t c = 0; c < r_kv_; ++c) {
            const float v = dot_fixed(q_row, w_uk_t.data() + (h * r_kv_ + c) * d_n_, d_n_);
            out[c] = cpu::rounded(precision_, v);
          }
          std::copy_n(q_row + d_n_, d_r_, out + r_kv_);
        }
      });
      step_context_.resize(spec.slots, n_ * r_kv_);
    } else {
      // kv [T, n*(d_n+d_v)] = kv_b_proj(latent), HF's k_nope | v of every head (bf16: rounded)
      const MatrixRM latent = cache_.leftCols(r_kv_);
      cpu::linear(latent, kv_b_, nullptr, precision_, threads_, kv_);
    }
    context_.assign(idx(spec.slots), MatrixRM::Zero(spec.rows, n_ * d_v_));
    step_slots_.clear();
  }

  int64_t heads() const override { return n_; }

  std::string description() const override {
    std::string d = std::string("cpu, ") + (absorbed_ ? "absorbed" : "naive") + " (" + precision_name(precision_) +
                    "): logits and per-slot contexts in Eigen products";
    if (absorbed_) d += std::string(", W_UV one row at a time (fixed-order dot, ") + dot_kernel() + ")";
    return d + ", o_proj per slot; " + std::to_string(threads_) + (threads_ == 1 ? " thread" : " threads");
  }

  void begin_query(int64_t x) override {
    if (x < query_begin_ || x >= T_)
      fail(ErrorKind::InvalidArgument, "cpu decode: query row " + std::to_string(x) + " is not held (rows " +
                                           std::to_string(query_begin_) + ".." + std::to_string(T_ - 1) + ")");
    const int64_t q = x - query_begin_, Q = T_ - query_begin_, d_qk = d_n_ + d_r_;
    logits_.resize(n_, x + 1);  // [n, x+1]
    if (absorbed_) {
      // logits[h, t] = (q~_h . c_t + q_pe_h . k_pe_t) * scale, fp32
      const Eigen::Map<const MatrixRM> qc(qc_.data() + q * qc_.cols(), n_, r_kv_ + d_r_);
      logits_.noalias() = qc * cache_.topRows(x + 1).transpose();
      logits_ *= scale_;
      return;
    }
    // naive: logits[h, t] = (q_h . [k_nope_h,t | k_pe_t]) * scale; bf16: dot -> bf16, * scale -> bf16
    const int64_t w_head = d_n_ + d_v_;
    for (int64_t h = 0; h < n_; ++h) {
      const float* qh = queries_.data() + (h * Q + q) * d_qk;
      const ConstStrided k_nope(kv_.data() + h * w_head, x + 1, d_n_, Eigen::OuterStride<>(n_ * w_head));
      const ConstStrided k_pe(cache_.data() + r_kv_, x + 1, d_r_, Eigen::OuterStride<>(r_kv_ + d_r_));
      Eigen::VectorXf dot = k_nope * Eigen::Map<const Eigen::VectorXf>(qh, d_n_) +
                            k_pe * Eigen::Map<const Eigen::VectorXf>(qh + d_n_, d_r_);
      for (int64_t t = 0; t <= x; ++t) {
        logits_(h, t) = cpu::rounded(precision_, cpu::rounded(precision_, dot[t]) * scale_);
      }
    }
  }

  void attend(std::span<const int64_t> cache, std::vector<double>& probs, int64_t slot, int64_t row) override {
    const int64_t m = static_cast<int64_t>(cache.size());
    probs.assign(idx(n_ * m), 0.0);
    MatrixRM p(n_, m);  // [n, m] the probabilities the attention uses
    for (int64_t h = 0; h < n_; ++h) {
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < m; ++j) max = std::max(max, logits_(h, cache[idx(j)]));
      double sum = 0.0;
      for (int64_t j = 0; j < m; ++j) {
        p(h, j) = std::exp(logits_(h, cache[idx(j)]) - max);
        sum += p(h, j);
      }
      for (int64_t j = 0; j < m; ++j) {
        float v = static_cast<float>(p(h, j) / sum);
        if (!absorbed_) v = cpu::rounded(precision_, v);  // HF: the fp32 softmax result -> bf16
        p(h, j) = v;
        probs[idx(h * m + j)] = v;
      }
    }
    if (slot < 0) return;
    const bool contiguous = m > 0 && cache[0] == 0 && cache[idx(m - 1)] == m - 1;
    if (absorbed_) {
      // context[h] = sum_j p[h, j] c_{cache[j]}  -> [n, r_kv], one GEMM
      MatrixRM ctx(n_, r_kv_);
      if (contiguous) {
        ctx.noalias() = p * cache_.topRows(m).leftCols(r_kv_);
      } else {
        gathered_.resize(m, r_kv_);
        for (int64_t j = 0; j < m; ++j) gathered_.row(j) = cache_.row(cache[idx(j)]).head(r_kv_);
        ctx.noalias() = p * gathered_;
      }
      cpu::round_inplace(precision_, ctx.data(), ctx.size());
      step_context_.row(static_cast<int64_t>(step_slots_.size())) = Eigen::Map<const Eigen::RowVectorXf>(ctx.data(), ctx.size());
      step_slots_.push_back({slot, row});
      return;
    }
    // naive: o[h] = sum_j p[h, j] v_h,{cache[j]}  -> attn_context row [n*d_v]
    const int64_t w_head = d_n_ + d_v_;
    float* out = context_[idx(slot)].row(row).data();
    cpu::parallel_for(n_, threads_, [&](int64_t h, int) {
      Eigen::VectorXf acc = Eigen::VectorXf::Zero(d_v_);
      for (int64_t j = 0; j < m; ++j)
        acc += p(h, j) * Eigen::Map<const Eigen::VectorXf>(kv_.data() + cache[idx(j)] * kv_.cols() + h * w_head + d_n_, d_v_);
      for (int64_t d = 0; d < d_v_; ++d) out[h * d_v_ + d] = cpu::rounded(precision_, acc[d]);
    });
  }

  void end_query() override {
    if (!absorbed_ || step_slots_.empty()) return;
    // o_h = W_UV^h context_h for every run of this step, each row by itself (dot_fixed): a
    // run's output does not depend on which other runs share the step.
    const int64_t runs = static_cast<int64_t>(step_slots_.size()), w_head = d_n_ + d_v_;
    cpu::parallel_for(n_, threads_, [&](int64_t h, int) {
      for (int64_t d = 0; d < d_v_; ++d) {
        const float* w_uv = kv_b_.data() + (h * w_head + d_n_ + d) * r_kv_;  // row d of W_UV^h [r_kv]
        for (int64_t k = 0; k < runs; ++k) {
          const float v = dot_fixed(w_uv, step_context_.data() + k * n_ * r_kv_ + h * r_kv_, r_kv_);
          context_[idx(step_slots_[idx(k)].first)](step_slots_[idx(k)].second, h * d_v_ + d) = cpu::rounded(precision_, v);
        }
      }
    });
    step_slots_.clear();
  }

  TensorD outputs(int64_t slot) override {
    MatrixRM out;  // [rows, H] = o_proj(attn_context)
    cpu::linear(context_[idx(slot)], o_proj_, o_bias_.empty() ? nullptr : o_bias_.data(), precision_, threads_, out);
    TensorD t("attn_output", {out.rows(), out.cols()});
    for (int64_t i = 0; i < out.size(); ++i) t.data[idx(i)] = static_cast<double>(out.data()[i]);
    check_attn_output_finite(t, precision_);
    return t;
  }

 private:
  bool absorbed_;
  Precision precision_;
  int threads_;
  int64_t n_, r_kv_, d_n_, d_r_, d_v_, H_, T_, query_begin_;
  float scale_;
  MatrixRM kv_b_, o_proj_;      // weights [n*w, r_kv], [H, n*d_v] (bf16 values in bf16 mode)
  std::vector<float> o_bias_;   // [H] or empty
  MatrixRM cache_;              // [T, r_kv + d_r]
  MatrixRM queries_;            // [n*Q, d_qk]
  MatrixRM qc_;                 // absorbed: [Q, n*(r_kv + d_r)]
  MatrixRM kv_;                 // naive: [T, n*w]
  MatrixRM logits_;             // [n, x+1]
  MatrixRM gathered_;           // [m, r_kv]
  MatrixRM step_context_;       // absorbed: [slots, n*r_kv] contexts of this step
  std::vector<std::pair<int64_t, int64_t>> step_slots_;  // (slot, row) of each step_context_ row
  std::vector<MatrixRM> context_;  // [slots] of [rows, n*d_v] attn_context
};

}  // namespace

// The prefill through the one CPU attention layer (attention_pipeline.hpp, the backend's forward's
// passes; docs/long-context.md §1) with the tiled kernel plugged in, so that only the q latent,
// the prompt's keys/values (in the run's precision) and the latent cache are held for all rows:
//   1. projections, kRowChunk rows at a time over all T rows: the prompt rows' keys/values into
//      KeyValueStates [P], every row's latent cache row;
//   2. the causal attention of the P prompt rows, one query pass at a time: the mass per head,
//      without P·V and o_proj (the prefill's output is not needed); then the queries of the decode
//      rows [P, T). The roped queries of the statistics' rows and of the held rows >= query_begin
//      are kept as they come.
// The same numbers as one pass over all rows: chunked projections give the same bits
// (kRowChunk is a multiple of the engines' row chunks), the stores hold the run's values
// exactly, and query passes add up to one streamed call (suite tiled).
DecodeInputs compute_cpu_decode_inputs(const AttentionConfig& cfg, const LayerWeights& w, const TensorF& hidden,
                                       const DecodeInputsRequest& req, const ForwardOptions& opt) {
  validate_layer(cfg, w, opt);  // the same checks and messages as every backend's prepare + forward
  validate_input(cfg, hidden, opt);
  const int64_t T = hidden.dim(0), n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim,
                d_qk = cfg.qk_head_dim(), P = req.prompt_len;
  check_decode_inputs_request(req, T);
  const int64_t w_rows = std::clamp<int64_t>(req.query_window, 1, P), query_begin = P - w_rows, Q = T - query_begin;
  const int threads = cpu::resolve_threads(opt.threads);
  const cpu::PreparedWeights pw = cpu::prepare_weights(cfg, w, opt.precision, threads, opt.gemm);
  const cpu::Layer L{cfg, pw, opt.precision, threads, static_cast<float>(opt.latent_norm_eps)};

  DecodeInputs in;
  in.prompt_len = P;
  in.query_begin = query_begin;
  in.gemm = pw.gemm;
  in.backend = "cpu";
  in.description = cpu::describe(&pw, threads);
  in.latent_cache = TensorD("latent_cache", {T, r_kv + d_r});
  in.query_states = TensorD("query_states", {n, Q, d_qk});  // HF layout of rows query_begin .. T-1
  // rows [first, P) of the roped q (exact in the run's precision) for expected-attention's statistics
  const int64_t first = req.statistics_from;
  cpu::KeptQueries statistics_rows(first >= 0 ? first : P, P, n, d_qk, opt.precision);

  cpu::TiledAttention attention(L, P, /*causal=*/true);
  attention.progress_label = "prefill attention FLOP";
  attention.progress = opt.progress;
  cpu::AttentionPlugs plugs;
  attention.plug(plugs);
  plugs.latent = cpu::latent_cache_into(in.latent_cache);
  plugs.keys_stored = [&] {
    in.head_mass.assign(static_cast<size_t>(n * P), 0.0);
    attention.head_mass = in.head_mass.data();
  };
  plugs.attended_rows = P;
  // q [rows, n*d_qk] of rows [r0, r0 + rows): the statistics' rows, its rows >= query_begin into query_states
  plugs.queries = [&](const MatrixRM& q, int64_t r0) {
    statistics_rows.keep(q, r0, threads);
    for (int64_t s = std::max(r0, query_begin); s < r0 + q.rows(); ++s)
      for (int64_t h = 0; h < n; ++h)
        for (int64_t d = 0; d < d_qk; ++d)
          in.query_states.data[static_cast<size_t>((h * Q + s - query_begin) * d_qk + d)] = q(s - r0, h * d_qk + d);
  };
  StageSeconds stages;  // (not reported: decode times the whole prefill)
  cpu::attention_layer(L, T, [&](int64_t r0, int64_t rows) { return cpu::input_rows(hidden, r0, rows, opt.precision); },
                       position_ids(0, T), plugs, StageRunner(stages));
  if (first >= 0) in.query_statistics = statistics_rows.statistics(cfg, position_ids(0, P));
  return in;
}

std::unique_ptr<DecodeKernel> make_cpu_decode_kernel(const AttentionConfig& cfg, const LayerWeights& w,
                                                     const DecodeInputs& in, const DecodeKernelSpec& spec) {
  return std::make_unique<CpuDecodeKernel>(cfg, w, in, spec);
}

}  // namespace mla
