// reference/mla_decode.cpp — the scalar double-precision reference of one MLA decode step
// against a (possibly evicted) latent cache, in the absorbed form (docs/math.md §10) and the
// naive form (HF's per-head k/v, docs/math.md §3.6). Plain loops, one function per equation;
// the cpu decode kernel (src/cpu/cpu_decode.cpp) is tested against it.
//
// For query row x and a cache S (positions, ascending), per head h:
//   absorbed   q~_h       = W_UK^h^T q_nope_h                              absorb_query
//              logit_h,t  = (q~_h . c_t + q_pe_h . k_pe_t) * scale   t <= x  absorbed_logits
//   naive      k_h,t      = [W_UK^h c_t | k_pe_t], v_h,t = W_UV^h c_t         (kv_b_proj, once)
//              logit_h,t  = (q_h . k_h,t) * scale                         t <= x  naive_logits
//   both       p_h        = softmax over t in S of logit_h,t               softmax_over
//   absorbed   context_h  = sum_{t in S} p_h,t c_t ;  o_h = W_UV^h context_h  latent_context, value_up
//   naive      o_h        = sum_{t in S} p_h,t v_h,t                         naive_context
//   both       attn_output = o_proj(concat_h o_h)   for all steps of a run    (ref::linear)
// W_UK^h = kv_b_proj rows h*(d_n+d_v) + [0, d_n), W_UV^h = rows h*(d_n+d_v) + d_n + [0, d_v).
//
// Precision (docs/decode.md §3): fp32 = exact math in double (no rounding at all).
// bf16: weights and inputs are bf16 values;
//   absorbed: q~ -> bf16; logits in fp32 (the dot rounded to fp32, times fp32(scale) rounded
//             to fp32); softmax in fp32; context -> bf16; o_h -> bf16; o_proj -> bf16
//             (the rounding of a bf16 absorbed MLA decode kernel: fp32 accumulation and
//             softmax inside the kernel, bf16 tensors between ops);
//   naive:    HF bf16 eager (docs/math.md §7): kv -> bf16; dot -> bf16, * scale -> bf16;
//             softmax -> bf16; p.v -> bf16; o_proj -> bf16.
//
// Shape legend: T rows, Q held query rows, n heads, r_kv kv_lora_rank, d_n qk_nope_head_dim,
// d_r qk_rope_head_dim, d_v v_head_dim, d_qk = d_n + d_r, m = |S|, N steps, H hidden_size.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "reference/mla_reference.hpp"

namespace mla::ref {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }
double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// A weight as the run reads it: the loaded value, or that value rounded to bf16 (bf16 mode).
double weight_value(const TensorF& w, int64_t i, Precision p) { return round_as(p, static_cast<double>(w.data[idx(i)])); }

// q~_h[c] = sum_d q_nope_h[d] W_UK^h[d, c]    -> [n, r_kv]   (bf16: -> bf16)
// query: [n, d_qk] (one row: q_nope | q_pe per head)
std::vector<double> absorb_query(const AttentionConfig& cfg, const LayerWeights& w, const std::vector<double>& query,
                                 Precision p) {
  const int64_t n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim,
                d_qk = cfg.qk_head_dim(), width = cfg.qk_nope_head_dim + cfg.v_head_dim;
  std::vector<double> q_tilde(idx(n * r_kv));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t c = 0; c < r_kv; ++c) {
      double acc = 0.0;
      for (int64_t d = 0; d < d_n; ++d) acc += query[idx(h * d_qk + d)] * weight_value(w.kv_b_proj, (h * width + d) * r_kv + c, p);
      q_tilde[idx(h * r_kv + c)] = round_as(p, acc);
    }
  return q_tilde;
}

// logit[h, t] = (q~_h . c_t + q_pe_h . k_pe_t) * scale, t in [0, x]    -> [n, x+1]
// bf16: fp32(fp32(dot) * fp32(scale)) (fp32 logits); fp32 mode: exact.
std::vector<double> absorbed_logits(const AttentionConfig& cfg, const std::vector<double>& q_tilde,
                                    const std::vector<double>& query, const TensorD& cache, int64_t x, double scale,
                                    Precision p) {
  const int64_t n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim,
                d_r = cfg.qk_rope_head_dim, d_qk = cfg.qk_head_dim();
  const bool bf16 = p == Precision::BF16;
  std::vector<double> logits(idx(n * (x + 1)));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t t = 0; t <= x; ++t) {
      const double* c = &cache.data[idx(t * (r_kv + d_r))];
      double dot = 0.0;
      for (int64_t k = 0; k < r_kv; ++k) dot += q_tilde[idx(h * r_kv + k)] * c[k];
      for (int64_t d = 0; d < d_r; ++d) dot += query[idx(h * d_qk + d_n + d)] * c[r_kv + d];
      logits[idx(h * (x + 1) + t)] = bf16 ? f32(f32(dot) * f32(scale)) : dot * scale;
    }
  return logits;
}

// logit[h, t] = (q_h . [k_nope_h,t | k_pe_t]) * scale, t in [0, x]     -> [n, x+1]
// kv: [T, n*(d_n+d_v)] = kv_b_proj(latent). bf16: HF's bf16(bf16(dot) * fp32(scale)).
std::vector<double> naive_logits(const AttentionConfig& cfg, const std::vector<double>& query, const TensorD& kv,
                                 const TensorD& cache, int64_t x, double scale, Precision p) {
  const int64_t n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim,
                d_r = cfg.qk_rope_head_dim, d_qk = cfg.qk_head_dim(), width = cfg.qk_nope_head_dim + cfg.v_head_dim;
  const double scaling = p == Precision::BF16 ? f32(scale) : scale;
  std::vector<double> logits(idx(n * (x + 1)));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t t = 0; t <= x; ++t) {
      const double* k_nope = &kv.data[idx(t * n * width + h * width)];
      const double* k_pe = &cache.data[idx(t * (r_kv + d_r) + r_kv)];
      double dot = 0.0;
      for (int64_t d = 0; d < d_n; ++d) dot += query[idx(h * d_qk + d)] * k_nope[d];
      for (int64_t d = 0; d < d_r; ++d) dot += query[idx(h * d_qk + d_n + d)] * k_pe[d];
      logits[idx(h * (x + 1) + t)] = round_as(p, round_as(p, dot) * scaling);
    }
  return logits;
}

// p[h, j] = exp(l[h, S_j] - max) / sum_j exp(l[h, S_j] - max)           -> [n, m]
// `round` applied to each result (fp32 or bf16 of the softmax output, identity in fp32 mode).
std::vector<double> softmax_over(const std::vector<double>& logits, int64_t n, int64_t x, std::span<const int64_t> cache,
                                 double (*round)(double)) {
  const int64_t m = static_cast<int64_t>(cache.size());
  std::vector<double> probs(idx(n * m));
  for (int64_t h = 0; h < n; ++h) {
    const double* l = &logits[idx(h * (x + 1))];
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < m; ++j) max = std::max(max, l[cache[idx(j)]]);
    double sum = 0.0;
    for (int64_t j = 0; j < m; ++j) sum += std::exp(l[cache[idx(j)]] - max);
    for (int64_t j = 0; j < m; ++j) probs[idx(h * m + j)] = round(std::exp(l[cache[idx(j)]] - max) / sum);
  }
  return probs;
}

// context_h[c] = sum_j p[h, j] c_{S_j}[c]                              -> [n, r_kv] (bf16: -> bf16)
std::vector<double> latent_context(const AttentionConfig& cfg, const std::vector<double>& probs,
                                   std::span<const int64_t> cache, const TensorD& latent_cache, Precision p) {
  const int64_t n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  const int64_t m = static_cast<int64_t>(cache.size());
  std::vector<double> ctx(idx(n * r_kv));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t c = 0; c < r_kv; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < m; ++j) acc += probs[idx(h * m + j)] * latent_cache.data[idx(cache[idx(j)] * (r_kv + d_r) + c)];
      ctx[idx(h * r_kv + c)] = round_as(p, acc);
    }
  return ctx;
}

// o_h[d] = sum_c W_UV^h[d, c] context_h[c]                              -> [n*d_v] (bf16: -> bf16)
std::vector<double> value_up(const AttentionConfig& cfg, const LayerWeights& w, const std::vector<double>& ctx, Precision p) {
  const int64_t n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim,
                d_v = cfg.v_head_dim, width = d_n + d_v;
  std::vector<double> o(idx(n * d_v));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t d = 0; d < d_v; ++d) {
      double acc = 0.0;
      for (int64_t c = 0; c < r_kv; ++c) acc += weight_value(w.kv_b_proj, (h * width + d_n + d) * r_kv + c, p) * ctx[idx(h * r_kv + c)];
      o[idx(h * d_v + d)] = round_as(p, acc);
    }
  return o;
}

// o_h[d] = sum_j p[h, j] v_h,{S_j}[d]                                  -> [n*d_v] (bf16: -> bf16)
std::vector<double> naive_context(const AttentionConfig& cfg, const std::vector<double>& probs,
                                  std::span<const int64_t> cache, const TensorD& kv, Precision p) {
  const int64_t n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim, d_v = cfg.v_head_dim, width = d_n + d_v;
  const int64_t m = static_cast<int64_t>(cache.size());
  std::vector<double> o(idx(n * d_v));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t d = 0; d < d_v; ++d) {
      double acc = 0.0;
      for (int64_t j = 0; j < m; ++j) acc += probs[idx(h * m + j)] * kv.data[idx(cache[idx(j)] * n * width + h * width + d_n + d)];
      o[idx(h * d_v + d)] = round_as(p, acc);
    }
  return o;
}

double identity(double v) { return v; }
double to_f32(double v) { return f32(v); }
double to_bf16(double v) { return round_to_bf16(v); }

class ReferenceDecodeKernel final : public DecodeKernel {
 public:
  ReferenceDecodeKernel(const AttentionConfig& cfg, const LayerWeights& w, const DecodeInputs& in, const DecodeKernelSpec& spec)
      : cfg_(cfg), w_(w), in_(in), spec_(spec), scale_(softmax_scale(cfg)) {
    check_weights(cfg, w);
    const int64_t T = in.total_rows(), n = cfg.num_attention_heads, d_v = cfg.v_head_dim;
    if (in.latent_cache.shape != std::vector<int64_t>{T, cfg.kv_lora_rank + cfg.qk_rope_head_dim} ||
        in.query_states.shape != std::vector<int64_t>{n, T - in.query_begin, cfg.qk_head_dim()})
      fail(ErrorKind::Shape, "reference decode: inputs have latent cache " + shape_string(in.latent_cache.shape) +
                                 " and queries " + shape_string(in.query_states.shape) + " for the config");
    if (spec.attention == DecodeAttention::Naive) {
      // kv [T, n*(d_n+d_v)] = kv_b_proj(latent_normed), as HF's forward computes it
      TensorD latent("latent_normed", {T, cfg.kv_lora_rank});
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < cfg.kv_lora_rank; ++c)
          latent.data[idx(t * cfg.kv_lora_rank + c)] = in.latent_cache.data[idx(t * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) + c)];
      kv_ = linear("kv_b_proj", latent, w.kv_b_proj, TensorF(), spec.precision);
    }
    context_.assign(idx(spec.slots), TensorD("attn_context", {spec.rows, n * d_v}));
  }

  int64_t heads() const override { return cfg_.num_attention_heads; }
  std::string description() const override {
    return std::string("reference, ") + decode_attention_name(spec_.attention) + ": scalar double loops";
  }

  void begin_query(int64_t x) override {
    const int64_t n = cfg_.num_attention_heads, d_qk = cfg_.qk_head_dim(), Q = in_.total_rows() - in_.query_begin;
    if (x < in_.query_begin || x >= in_.total_rows())
      fail(ErrorKind::InvalidArgument, "reference decode: query row " + std::to_string(x) + " is not held");
    x_ = x;
    query_.assign(idx(n * d_qk), 0.0);  // [n, d_qk] row x of every head
    for (int64_t h = 0; h < n; ++h)
      for (int64_t d = 0; d < d_qk; ++d)
        query_[idx(h * d_qk + d)] = in_.query_states.data[idx((h * Q + x - in_.query_begin) * d_qk + d)];
    const Precision p = spec_.precision;
    logits_ = spec_.attention == DecodeAttention::Absorbed
                  ? absorbed_logits(cfg_, absorb_query(cfg_, w_, query_, p), query_, in_.latent_cache, x, scale_, p)
                  : naive_logits(cfg_, query_, kv_, in_.latent_cache, x, scale_, p);
  }

  void attend(std::span<const int64_t> cache, std::vector<double>& probs, int64_t slot, int64_t row) override {
    const Precision p = spec_.precision;
    const bool bf16 = p == Precision::BF16, absorbed = spec_.attention == DecodeAttention::Absorbed;
    probs = softmax_over(logits_, cfg_.num_attention_heads, x_, cache, !bf16 ? identity : absorbed ? to_f32 : to_bf16);
    if (slot < 0) return;
    const std::vector<double> o = absorbed ? value_up(cfg_, w_, latent_context(cfg_, probs, cache, in_.latent_cache, p), p)
                                           : naive_context(cfg_, probs, cache, kv_, p);
    TensorD& ctx = context_[idx(slot)];
    std::copy(o.begin(), o.end(), ctx.data.begin() + row * ctx.dim(1));
  }

  TensorD outputs(int64_t slot) override {
    return linear("attn_output", context_[idx(slot)], w_.o_proj, w_.o_proj_bias, spec_.precision);
  }

 private:
  const AttentionConfig& cfg_;
  const LayerWeights& w_;
  const DecodeInputs& in_;
  DecodeKernelSpec spec_;
  double scale_;
  TensorD kv_;                     // naive: [T, n*(d_n+d_v)]
  std::vector<TensorD> context_;   // [slots] of [rows, n*d_v]
  std::vector<double> query_, logits_;
  int64_t x_ = 0;
};

}  // namespace
}  // namespace mla::ref

namespace mla {
std::unique_ptr<DecodeKernel> make_reference_decode_kernel(const AttentionConfig& cfg, const LayerWeights& w,
                                                           const DecodeInputs& in, const DecodeKernelSpec& spec) {
  return std::make_unique<ref::ReferenceDecodeKernel>(cfg, w, in, spec);
}
}  // namespace mla
