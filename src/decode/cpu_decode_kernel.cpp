// src/decode/cpu_decode_kernel.cpp — the cpu backend's decode attention (Eigen + OpenBLAS):
// one query row at a time against the latent cache, absorbed (docs/decode.md §3, as vLLM,
// SGLang and DeepSeek's inference code run MLA decode) or naive (per-head k/v, as HF).
//
// Cost: everything that does not depend on the cache subset is computed once —
//   absorbed: qc[x] = q~ | q_pe for every held query row (q~ = W_UK^T q_nope), one GEMM per head;
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
#include "src/cpu/cpu_kernels.hpp"

namespace mla {
namespace {

using cpu::MatrixRM;
using ConstStrided = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;
size_t idx(int64_t i) { return static_cast<size_t>(i); }

MatrixRM to_matrix(const double* src, int64_t rows, int64_t cols, bool bf16) {
  MatrixRM m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = static_cast<float>(src[i]);
  if (bf16) cpu::round_to_bf16_inplace(m.data(), m.size());
  return m;
}

MatrixRM weight_matrix(const TensorF& t, const char* name, int64_t rows, int64_t cols, bool bf16) {
  if (t.shape != std::vector<int64_t>{rows, cols} || static_cast<int64_t>(t.data.size()) != rows * cols)
    fail(ErrorKind::Shape, std::string("cpu decode: weight ") + name + " has shape " + shape_string(t.shape) +
                               ", expected " + shape_string({rows, cols}));
  MatrixRM m = Eigen::Map<const MatrixRM>(t.ptr(), rows, cols);
  if (bf16) cpu::round_to_bf16_inplace(m.data(), m.size());
  return m;
}

class CpuDecodeKernel final : public DecodeKernel {
 public:
  CpuDecodeKernel(const AttentionConfig& cfg, const LayerWeights& w, const DecodeInputs& in, const DecodeKernelSpec& spec)
      : absorbed_(spec.attention == DecodeAttention::Absorbed),
        bf16_(spec.precision == Precision::BF16),
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
    kv_b_ = weight_matrix(w.kv_b_proj, "kv_b_proj", n_ * w_head, r_kv_, bf16_);
    o_proj_ = weight_matrix(w.o_proj, "o_proj", H_, n_ * d_v_, bf16_);
    if (!w.o_proj_bias.empty()) {
      o_bias_ = w.o_proj_bias.data;
      if (bf16_) cpu::round_to_bf16_inplace(o_bias_.data(), static_cast<int64_t>(o_bias_.size()));
    }
    // The inputs are fp32 / bf16 values already; to_matrix copies them exactly.
    cache_ = to_matrix(in.latent_cache.ptr(), T_, r_kv_ + d_r_, false);  // [T, r_kv + d_r]
    queries_.resize(n_ * Q, d_qk);                                         // [n*Q, d_qk] head-major
    for (int64_t i = 0; i < n_ * Q * d_qk; ++i) queries_.data()[i] = static_cast<float>(in.query_states.data[idx(i)]);
    if (absorbed_) {
      // qc [Q, n*(r_kv + d_r)]: per head q~ = q_nope W_UK^h (-> bf16) | q_pe
      const int64_t width = r_kv_ + d_r_;
      qc_.resize(Q, n_ * width);
      for (int64_t h = 0; h < n_; ++h) {
        const ConstStrided q_nope(queries_.data() + h * Q * d_qk, Q, d_n_, Eigen::OuterStride<>(d_qk));
        const ConstStrided w_uk(kv_b_.data() + h * w_head * r_kv_, d_n_, r_kv_, Eigen::OuterStride<>(r_kv_));
        MatrixRM q_tilde = q_nope * w_uk;  // [Q, r_kv]
        if (bf16_) cpu::round_to_bf16_inplace(q_tilde.data(), q_tilde.size());
        qc_.block(0, h * width, Q, r_kv_) = q_tilde;
        qc_.block(0, h * width + r_kv_, Q, d_r_) =
            ConstStrided(queries_.data() + h * Q * d_qk + d_n_, Q, d_r_, Eigen::OuterStride<>(d_qk));
      }
      step_context_.resize(spec.slots, n_ * r_kv_);
    } else {
      // kv [T, n*(d_n+d_v)] = kv_b_proj(latent), HF's k_nope | v of every head (bf16: rounded)
      const MatrixRM latent = cache_.leftCols(r_kv_);
      cpu::linear(latent, kv_b_, nullptr, bf16_, threads_, kv_);
    }
    context_.assign(idx(spec.slots), MatrixRM::Zero(spec.rows, n_ * d_v_));
    step_slots_.clear();
  }

  int64_t heads() const override { return n_; }

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
        float v = dot[t];
        if (bf16_) v = round_to_bf16(round_to_bf16(v) * scale_);
        else v *= scale_;
        logits_(h, t) = v;
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
        if (bf16_ && !absorbed_) v = round_to_bf16(v);  // HF: the fp32 softmax result -> bf16
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
      if (bf16_) cpu::round_to_bf16_inplace(ctx.data(), ctx.size());
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
      for (int64_t d = 0; d < d_v_; ++d) out[h * d_v_ + d] = bf16_ ? round_to_bf16(acc[d]) : acc[d];
    });
  }

  void end_query() override {
    if (!absorbed_ || step_slots_.empty()) return;
    // o_h = W_UV^h context_h for every run of this step: per head [runs, r_kv] x [r_kv, d_v]
    const int64_t runs = static_cast<int64_t>(step_slots_.size()), w_head = d_n_ + d_v_;
    MatrixRM o(runs, d_v_);
    for (int64_t h = 0; h < n_; ++h) {
      const ConstStrided ctx(step_context_.data() + h * r_kv_, runs, r_kv_, Eigen::OuterStride<>(n_ * r_kv_));
      const ConstStrided w_uv(kv_b_.data() + (h * w_head + d_n_) * r_kv_, d_v_, r_kv_, Eigen::OuterStride<>(r_kv_));
      o.noalias() = ctx * w_uv.transpose();
      if (bf16_) cpu::round_to_bf16_inplace(o.data(), o.size());
      for (int64_t k = 0; k < runs; ++k)
        context_[idx(step_slots_[idx(k)].first)].block(step_slots_[idx(k)].second, h * d_v_, 1, d_v_) = o.row(k);
    }
    step_slots_.clear();
  }

  TensorD outputs(int64_t slot) override {
    MatrixRM out;  // [rows, H] = o_proj(attn_context)
    cpu::linear(context_[idx(slot)], o_proj_, o_bias_.empty() ? nullptr : o_bias_.data(), bf16_, threads_, out);
    TensorD t("attn_output", {out.rows(), out.cols()});
    for (int64_t i = 0; i < out.size(); ++i) t.data[idx(i)] = static_cast<double>(out.data()[i]);
    check_attn_output_finite(t, bf16_ ? Precision::BF16 : Precision::FP32);
    return t;
  }

 private:
  bool absorbed_, bf16_;
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

std::unique_ptr<DecodeKernel> make_cpu_decode_kernel(const AttentionConfig& cfg, const LayerWeights& w,
                                                     const DecodeInputs& in, const DecodeKernelSpec& spec) {
  return std::make_unique<CpuDecodeKernel>(cfg, w, in, spec);
}

}  // namespace mla
