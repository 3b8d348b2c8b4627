// reference/mla_reference.cpp — the scalar double-precision reference of HF
// `DeepseekV3Attention` (eager), one function per equation of docs/math.md §3.
//
// Read top to bottom, `forward` is HF's DeepseekV3Attention.forward line by line:
//   q      = q_b_proj(q_a_layernorm(q_a_proj(x)))        (or q_proj(x) when q_lora_rank is null)
//   c|k_pe = split(kv_a_proj_with_mqa(x), [r_kv, d_r])
//   k|v    = split(kv_b_proj(kv_a_layernorm(c)).view(n, d_n + d_v), [d_n, d_v])
//   q_pe, k_pe = RoPE(q_pe, k_pe)                        (interleaved pairs, §6)
//   p      = softmax(q.k * scaling + mask)
//   out    = o_proj(p.v)
//
// Shape legend: S tokens, H hidden_size, n heads, r_q q_lora_rank, r_kv kv_lora_rank,
// d_n qk_nope_head_dim, d_r qk_rope_head_dim, d_v v_head_dim, d_qk = d_n + d_r.
// Precision: see mla_reference.hpp (fp32 = exact double math; bf16 = HF bf16 eager emulation,
// rounding points of docs/math.md §7, marked "§7 #k" below).
#include "reference/mla_reference.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/memory_plan.hpp"
#include "mla/rope.hpp"
#include "mla/validate.hpp"

namespace mla::ref {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

// Round a double to float (an fp32 tensor's value). See src/math/rope.cpp for why a double
// op on float operands rounded once equals the fp32 op.
double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

}  // namespace

double round_as(Precision p, double x) { return p == Precision::BF16 ? round_to_bf16(x) : x; }

// ---- inputs --------------------------------------------------------------------------------

void check_weights(const AttentionConfig& cfg, const LayerWeights& w) {
  validate_config(cfg);
  validate_weights(cfg, w, Precision::FP32);
}

TensorD widen_hidden(const TensorF& hidden, Precision p) {
  TensorD x("hidden_states", hidden.shape);
  for (size_t i = 0; i < hidden.data.size(); ++i) {
    const float v = hidden.data[i];
    // HF's bf16 run receives the hidden states as a bf16 tensor.
    x.data[i] = p == Precision::BF16 ? static_cast<double>(round_to_bf16(v)) : static_cast<double>(v);
  }
  return x;
}

// ---- one function per equation -------------------------------------------------------------

// y[s, o] = sum_i x[s, i] W[o, i] + b[o]                  torch: F.linear(x, W, b)
// x: [S, in], W: [out, in], b: [out] -> y: [S, out]       §7 #1, #3, #5, #7, #15
TensorD linear(const std::string& name, const TensorD& x, const TensorF& weight, const TensorF& bias, Precision p) {
  const int64_t S = x.dim(0), in = x.dim(1), out = weight.dim(0);
  if (weight.dim(1) != in)
    fail(ErrorKind::Shape, "linear " + name + ": input has " + std::to_string(in) + " features, weight " +
                               shape_string(weight.shape) + " expects " + std::to_string(weight.dim(1)));
  TensorD y(name, {S, out});
  std::vector<double> w_row(idx(in));  // [in] row o of W, as the run sees it (bf16 in bf16 mode)
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) w_row[idx(i)] = round_as(p, weight.data[idx(o * in + i)]);
    const double b = bias.empty() ? 0.0 : round_as(p, bias.data[idx(o)]);
    for (int64_t s = 0; s < S; ++s) {
      const double* xs = &x.data[idx(s * in)];
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i) acc += xs[i] * w_row[idx(i)];
      y.data[idx(s * out + o)] = round_as(p, acc + b);  // one rounding of the GEMM output
    }
  }
  return y;
}

// y = w * (x / sqrt(mean(x^2) + eps))                      §3.5, §7 #2, #6
// torch (DeepseekV3RMSNorm.forward):
//   x32 = x.to(float32); var = x32.pow(2).mean(-1, keepdim=True)
//   x32 = x32 * torch.rsqrt(var + eps); return weight * x32.to(input_dtype)
// x: [S, N], weight: [N] -> [S, N]
TensorD rms_norm(const std::string& name, const TensorD& x, const TensorF& weight, double eps, Precision p) {
  const int64_t S = x.dim(0), N = x.dim(1);
  TensorD y(name, {S, N});
  for (int64_t s = 0; s < S; ++s) {
    const double* xs = &x.data[idx(s * N)];
    double sum_sq = 0.0;
    for (int64_t i = 0; i < N; ++i) sum_sq += xs[i] * xs[i];
    if (p == Precision::FP32) {
      // exact: inv_rms = 1 / sqrt(mean(x^2) + eps)
      const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(N) + eps);
      for (int64_t i = 0; i < N; ++i) y.data[idx(s * N + i)] = static_cast<double>(weight.data[idx(i)]) * (xs[i] * inv_rms);
    } else {
      // bf16 input: squares exact in fp32; the mean, +eps and rsqrt are fp32 values.
      const double variance = f32(sum_sq / static_cast<double>(N));
      const double inv_rms = f32(1.0 / std::sqrt(f32(variance + f32(eps))));
      for (int64_t i = 0; i < N; ++i) {
        const double normed = round_to_bf16(f32(xs[i] * inv_rms));                         // rounding #1
        y.data[idx(s * N + i)] = round_to_bf16(round_to_bf16(weight.data[idx(i)]) * normed);  // rounding #2
      }
    }
  }
  return y;
}

// q [S, n*d_qk], feature h*d_qk + d (head-major, nope before rope inside each head)
QueryHeads split_query_heads(const AttentionConfig& cfg, const TensorD& q) {
  const int64_t S = q.dim(0), n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim,
                d_r = cfg.qk_rope_head_dim, d_qk = cfg.qk_head_dim();
  QueryHeads out{TensorD("q_nope", {n, S, d_n}), TensorD("q_pe", {n, S, d_r})};
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) {
      const double* row = &q.data[idx(s * n * d_qk + h * d_qk)];
      for (int64_t d = 0; d < d_n; ++d) out.q_nope.data[idx((h * S + s) * d_n + d)] = row[d];
      for (int64_t d = 0; d < d_r; ++d) out.q_pe.data[idx((h * S + s) * d_r + d)] = row[d_n + d];
    }
  return out;
}

// compressed_kv [S, r_kv + d_r] = [latent c | k_pe]   (§3.3 step 1, pitfall 2)
LatentAndKpe split_compressed_kv(const AttentionConfig& cfg, const TensorD& compressed_kv) {
  const int64_t S = compressed_kv.dim(0), r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim;
  LatentAndKpe out{TensorD("latent", {S, r_kv}), TensorD("k_pe", {S, d_r})};
  for (int64_t s = 0; s < S; ++s) {
    const double* row = &compressed_kv.data[idx(s * (r_kv + d_r))];
    for (int64_t c = 0; c < r_kv; ++c) out.latent.data[idx(s * r_kv + c)] = row[c];
    for (int64_t d = 0; d < d_r; ++d) out.k_pe.data[idx(s * d_r + d)] = row[r_kv + d];
  }
  return out;
}

// kv [S, n*(d_n+d_v)], feature h*(d_n+d_v) + d: k_nope (d < d_n) | v   (§3.3 step 3)
KvHeads split_kv_heads(const AttentionConfig& cfg, const TensorD& kv) {
  const int64_t S = kv.dim(0), n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim, d_v = cfg.v_head_dim;
  const int64_t width = d_n + d_v;
  KvHeads out{TensorD("k_nope", {n, S, d_n}), TensorD("value_states", {n, S, d_v})};
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) {
      const double* row = &kv.data[idx(s * n * width + h * width)];
      for (int64_t d = 0; d < d_n; ++d) out.k_nope.data[idx((h * S + s) * d_n + d)] = row[d];
      for (int64_t d = 0; d < d_v; ++d) out.value.data[idx((h * S + s) * d_v + d)] = row[d_n + d];
    }
  return out;
}

// cos/sin = HF rotary tables (fp32, src/math/rope.cpp), `.to(x.dtype)` for DeepseekV3;
// DeepseekV2's freqs_cis stays fp32                                          §4, §7 #8
CosSin rope_cos_sin(const AttentionConfig& cfg, const std::vector<int64_t>& positions, Precision p) {
  const RopeTables t = rope_tables(cfg, positions);
  const Precision table = cfg.rope_style() == RopeStyle::Complex ? Precision::FP32 : p;
  CosSin cs{TensorD("cos", {t.seq_len, t.rope_dim}), TensorD("sin", {t.seq_len, t.rope_dim})};
  for (size_t i = 0; i < t.cos.size(); ++i) {
    cs.cos.data[i] = round_as(table, t.cos[i]);
    cs.sin.data[i] = round_as(table, t.sin[i]);
  }
  return cs;
}

// DeepseekV3: out = y*cos + rotate_half(y)*sin, y = de-interleave(x) or x    §6, §7 #9
//   torch (interleave): b, h, s, d = q.shape
//                       q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
//                       q_embed = (q * cos) + (rotate_half(q) * sin)
// DeepseekV2: out[2j] + i out[2j+1] = (x[2j] + i x[2j+1]) (cos[j] + i sin[j])
//   torch: view_as_real(view_as_complex(x.float().reshape(..., -1, 2)) * freqs_cis).flatten(3).type_as(x)
//   in fp32 whatever the model dtype (each product and each sum an fp32 op), one rounding to
//   bf16 in bf16 mode; exact in the double reference.
// x: [..., S, d_r] -> same shape
TensorD apply_rope(const std::string& name, const TensorD& x, const CosSin& cs, RopeStyle style, Precision p) {
  const int64_t S = cs.cos.dim(0), d_r = cs.cos.dim(1), half = d_r / 2;
  const int64_t rows = x.numel() / d_r;
  TensorD out(name, x.shape);
  if (style == RopeStyle::Complex) {
    const auto fp32 = [&](double v) { return p == Precision::BF16 ? f32(v) : v; };  // the fp32 ops of a bf16 model
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t s = r % S;
      const double* xr = &x.data[idx(r * d_r)];
      for (int64_t j = 0; j < half; ++j) {
        const double a = xr[2 * j], b = xr[2 * j + 1];
        const double c = cs.cos.data[idx(s * d_r + j)], sn = cs.sin.data[idx(s * d_r + j)];
        const double re = fp32(fp32(a * c) - fp32(b * sn)), im = fp32(fp32(a * sn) + fp32(b * c));
        out.data[idx(r * d_r + 2 * j)] = round_as(p, re);
        out.data[idx(r * d_r + 2 * j + 1)] = round_as(p, im);
      }
    }
    return out;
  }
  const bool interleave = style == RopeStyle::Interleave;
  std::vector<double> y(idx(d_r)), rotated(idx(d_r));  // [d_r] each
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = r % S;
    const double* xr = &x.data[idx(r * d_r)];
    // 1. y: the pair (x[2j], x[2j+1]) becomes (y[j], y[half + j]) when interleaved.
    for (int64_t j = 0; j < half; ++j) {
      y[idx(j)] = interleave ? xr[2 * j] : xr[j];
      y[idx(half + j)] = interleave ? xr[2 * j + 1] : xr[half + j];
    }
    // 2. rotate_half(y) = cat(-y[half:], y[:half])  (negation is exact)
    for (int64_t j = 0; j < half; ++j) {
      rotated[idx(j)] = -y[idx(half + j)];
      rotated[idx(half + j)] = y[idx(j)];
    }
    // 3. y*cos + rotate_half(y)*sin, three roundings in bf16 mode.
    for (int64_t d = 0; d < d_r; ++d) {
      const double t1 = round_as(p, y[idx(d)] * cs.cos.data[idx(s * d_r + d)]);
      const double t2 = round_as(p, rotated[idx(d)] * cs.sin.data[idx(s * d_r + d)]);
      out.data[idx(r * d_r + d)] = round_as(p, t1 + t2);
    }
  }
  return out;
}

// scores[h, s, t] = (q[h, s, :] . k[h, t, :]) * scale             §3.6 step 2, §7 #10, #11
TensorD attention_scores(const TensorD& query, const TensorD& key, double scale, Precision p) {
  const int64_t n = query.dim(0), S = query.dim(1), d_qk = query.dim(2), T = key.dim(1);
  // `scores * self.scaling`: the python float enters the bf16 op as an fp32 scalar.
  const double scaling = p == Precision::BF16 ? f32(scale) : scale;
  TensorD scores("attn_scores", {n, S, T});
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &query.data[idx((h * S + s) * d_qk)];
        const double* k = &key.data[idx((h * T + t) * d_qk)];
        double dot = 0.0;
        for (int64_t d = 0; d < d_qk; ++d) dot += q[d] * k[d];
        scores.data[idx((h * S + s) * T + t)] = round_as(p, round_as(p, dot) * scaling);
      }
  return scores;
}

// scores + mask (causal: t > s hidden)                             §3.6 step 3, §7 #12, §8
TensorD apply_mask(const TensorD& scores, Mask mask, Precision p) {
  const int64_t n = scores.dim(0), S = scores.dim(1), T = scores.dim(2);
  TensorD out = scores;
  out.name = "attn_scores_masked";
  if (mask == Mask::None) return out;
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = s + 1; t < T; ++t) {
        double& v = out.data[idx((h * S + s) * T + t)];
        v = p == Precision::BF16 ? round_to_bf16(v + static_cast<double>(kBf16FinfoMin)) : -std::numeric_limits<double>::infinity();
      }
  return out;
}

// p = exp(x - max) / sum(exp(x - max)) per row                     §3.6 step 4, §7 #13
TensorD softmax_rows(const TensorD& masked_scores, Precision p) {
  const int64_t rows = masked_scores.dim(0) * masked_scores.dim(1), T = masked_scores.dim(2);
  TensorD probs("attn_weights", masked_scores.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = &masked_scores.data[idx(r * T)];
    double* out = &probs.data[idx(r * T)];
    // pass 1: the row maximum (numerical stability; exp of a hidden entry becomes exactly 0)
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < T; ++t) max = std::max(max, x[t]);
    // pass 2: exponentials and their sum
    double sum = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      out[t] = std::exp(x[t] - max);
      sum += out[t];
    }
    // pass 3: normalise (the fp32 softmax result -> bf16 in bf16 mode)
    for (int64_t t = 0; t < T; ++t) out[t] = round_as(p, out[t] / sum);
  }
  return probs;
}

// o[s, h*d_v + d] = sum_t p[h, s, t] v[h, t, d]                    §3.6 step 6, §7 #14
TensorD weighted_values(const TensorD& probs, const TensorD& value, Precision p) {
  const int64_t n = probs.dim(0), S = probs.dim(1), T = probs.dim(2), d_v = value.dim(2);
  TensorD o("attn_context", {S, n * d_v});
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < d_v; ++d) {
        double acc = 0.0;
        for (int64_t t = 0; t < T; ++t) acc += probs.data[idx((h * S + s) * T + t)] * value.data[idx((h * T + t) * d_v + d)];
        o.data[idx(s * n * d_v + h * d_v + d)] = round_as(p, acc);
      }
  return o;
}

// scores = (q~ . c + q_pe . k_pe) * scale, q~ = W_UK^T q_nope      §10
TensorD absorbed_scores(const AttentionConfig& cfg, const LayerWeights& w, const TensorD& q_nope,
                        const TensorD& q_pe_roped, const TensorD& latent_normed, const TensorD& k_pe_roped,
                        double scale) {
  const int64_t n = cfg.num_attention_heads, S = q_nope.dim(1), T = latent_normed.dim(0),
                r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim,
                width = cfg.qk_nope_head_dim + cfg.v_head_dim;
  TensorD scores("absorbed_scores", {n, S, T});
  std::vector<double> q_absorbed(idx(r_kv));  // [r_kv]  q~ for one (h, s)
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) {
      // 1. q~[c] = sum_d q_nope[h, s, d] W_UK^h[d, c],  W_UK^h[d, c] = kv_b_proj[h*(d_n+d_v) + d, c]
      for (int64_t c = 0; c < r_kv; ++c) {
        double acc = 0.0;
        for (int64_t d = 0; d < d_n; ++d)
          acc += q_nope.data[idx((h * S + s) * d_n + d)] * static_cast<double>(w.kv_b_proj.data[idx((h * width + d) * r_kv + c)]);
        q_absorbed[idx(c)] = acc;
      }
      // 2. latent part q~ . c_t plus rotary part q_pe . k_pe_t, then the scale
      for (int64_t t = 0; t < T; ++t) {
        double latent_dot = 0.0, rope_dot = 0.0;
        for (int64_t c = 0; c < r_kv; ++c) latent_dot += q_absorbed[idx(c)] * latent_normed.data[idx(t * r_kv + c)];
        for (int64_t d = 0; d < d_r; ++d)
          rope_dot += q_pe_roped.data[idx((h * S + s) * d_r + d)] * k_pe_roped.data[idx(t * d_r + d)];
        scores.data[idx((h * S + s) * T + t)] = (latent_dot + rope_dot) * scale;
      }
    }
  return scores;
}

void accumulate_scores(const TensorD& attn_weights, std::vector<double>& head_scores, std::vector<double>& token_scores) {
  const int64_t n = attn_weights.dim(0), S = attn_weights.dim(1), T = attn_weights.dim(2);
  head_scores.assign(idx(n * T), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < T; ++t) head_scores[idx(h * T + t)] += attn_weights.data[idx((h * S + s) * T + t)];
  token_scores = token_scores_from_heads(head_scores, n);
}

// ---- the stages ------------------------------------------------------------------------------

// q = q_b(RMSNorm_q(q_a(x))) or q = q_proj(x), split per head   (§3.1 / §3.2)
void q_path(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt, Activations& a) {
  const Precision p = opt.precision;
  const TensorF no_bias;
  if (cfg.has_q_lora()) {
    a.q_a = linear("q_a_proj", a.hidden, w.q_a_proj, w.q_a_proj_bias, p);                      // [S, r_q]
    a.q_a_normed = rms_norm("q_a_layernorm", a.q_a, w.q_a_layernorm, opt.latent_norm_eps, p);  // [S, r_q]
    a.q = linear("q_b_proj", a.q_a_normed, w.q_b_proj, no_bias, p);                           // [S, n*d_qk]
  } else {
    a.q = linear("q_proj", a.hidden, w.q_proj, no_bias, p);  // [S, n*d_qk] (q_proj: bias=False)
  }
  QueryHeads qh = split_query_heads(cfg, a.q);
  a.q_nope = std::move(qh.q_nope);  // [n, S, d_n]
  a.q_pe = std::move(qh.q_pe);      // [n, S, d_r]
}

// [c | k_pe] = kv_a(x); [k_nope | v] = kv_b(RMSNorm_kv(c)), split per head   (§3.3)
void kv_path(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt, Activations& a) {
  const Precision p = opt.precision;
  a.compressed_kv = linear("kv_a_proj_with_mqa", a.hidden, w.kv_a_proj_with_mqa, w.kv_a_proj_with_mqa_bias, p);  // [S, r_kv+d_r]
  LatentAndKpe split = split_compressed_kv(cfg, a.compressed_kv);
  a.latent = std::move(split.latent);                                                                  // [S, r_kv]
  a.k_pe = std::move(split.k_pe);                                                                      // [S, d_r]
  a.latent_normed = rms_norm("kv_a_layernorm", a.latent, w.kv_a_layernorm, opt.latent_norm_eps, p);  // [S, r_kv]
  a.kv = linear("kv_b_proj", a.latent_normed, w.kv_b_proj, TensorF(), p);                             // [S, n*(d_n+d_v)]
  KvHeads kvh = split_kv_heads(cfg, a.kv);
  a.k_nope = std::move(kvh.k_nope);        // [n, S, d_n]
  a.value_states = std::move(kvh.value);   // [n, S, d_v]
}

// RoPE at positions offset .. offset+S-1 (§3.4, §6); query = cat(q_nope, q_pe_roped),
// key = cat(k_nope, k_pe_roped expanded over heads) (exact copies)
void rope(const AttentionConfig& cfg, const ForwardOptions& opt, Activations& a) {
  const Precision p = opt.precision;
  const int64_t S = a.hidden.dim(0), n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim,
                d_r = cfg.qk_rope_head_dim, d_qk = cfg.qk_head_dim();
  CosSin cs = rope_cos_sin(cfg, position_ids(opt.position_offset, S), p);         // [S, d_r] each
  a.q_pe_roped = apply_rope("q_pe_roped", a.q_pe, cs, cfg.rope_style(), p);   // [n, S, d_r]
  a.k_pe_roped = apply_rope("k_pe_roped", a.k_pe, cs, cfg.rope_style(), p);   // [S, d_r]
  a.cos = std::move(cs.cos);
  a.sin = std::move(cs.sin);
  a.query_states = TensorD("query_states", {n, S, d_qk});
  a.key_states = TensorD("key_states", {n, S, d_qk});
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) {
      double* q = &a.query_states.data[idx((h * S + s) * d_qk)];
      double* k = &a.key_states.data[idx((h * S + s) * d_qk)];
      for (int64_t d = 0; d < d_n; ++d) {
        q[d] = a.q_nope.data[idx((h * S + s) * d_n + d)];
        k[d] = a.k_nope.data[idx((h * S + s) * d_n + d)];
      }
      for (int64_t d = 0; d < d_r; ++d) {
        q[d_n + d] = a.q_pe_roped.data[idx((h * S + s) * d_r + d)];
        k[d_n + d] = a.k_pe_roped.data[idx(s * d_r + d)];
      }
    }
}

// scores, mask, softmax, P.V (§3.6 steps 2-6)
void attend(const AttentionConfig& cfg, const ForwardOptions& opt, Activations& a) {
  const Precision p = opt.precision;
  a.scaling = softmax_scale(cfg);
  a.scores = attention_scores(a.query_states, a.key_states, a.scaling, p);  // [n, S, S]
  a.masked_scores = apply_mask(a.scores, opt.mask, p);                     // [n, S, S]
  a.attn_weights = softmax_rows(a.masked_scores, p);                        // [n, S, S]
  a.attn_context = weighted_values(a.attn_weights, a.value_states, p);      // [S, n*d_v]
}

// attn_output = o_proj(attn_context) (§3.6 step 7)
void o_proj(const LayerWeights& w, const ForwardOptions& opt, Activations& a) {
  a.attn_output = linear("attn_output", a.attn_context, w.o_proj, w.o_proj_bias, opt.precision);  // [S, H]
}

// ---- the whole layer -----------------------------------------------------------------------

Activations forward(const AttentionConfig& cfg, const LayerWeights& w, const TensorF& hidden,
                    const ForwardOptions& opt) {
  validate_layer(cfg, w, opt);
  validate_input(cfg, hidden, opt);
  Activations a;
  a.hidden = widen_hidden(hidden, opt.precision);  // [S, H]
  // progress after each stage, in millions of FLOP (estimated: mla/memory_plan.hpp)
  const auto stage_flops = reference_stage_flops(cfg, a.hidden.dim(0));
  double flops_total = 0, flops_done = 0;
  for (const auto& sf : stage_flops) flops_total += sf.second;
  const StageRunner stage(a.stage_seconds, [&](std::string_view name) {
    for (const auto& [stage_name, flops] : stage_flops)
      if (stage_name == name) flops_done += flops;
    if (opt.progress) opt.progress("reference MFLOP", static_cast<int64_t>(flops_done / 1e6), static_cast<int64_t>(flops_total / 1e6));
  });
  stage("q_path", [&] { q_path(cfg, w, opt, a); });
  stage("kv_path", [&] { kv_path(cfg, w, opt, a); });
  stage("rope", [&] { rope(cfg, opt, a); });
  stage("attend", [&] { attend(cfg, opt, a); });
  stage("o_proj", [&] { o_proj(w, opt, a); });
  return a;
}


// ---- the Backend wrapper -------------------------------------------------------------------
namespace {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string description() const override {
    return "scalar reference, double accumulation (fp32 = exact math; bf16 = HF bf16 eager rounding)";
  }
  void prepare(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) override {
    weights_.reset();
    validate_layer(cfg, w, opt);
    cfg_ = cfg;
    precision_ = opt.precision;
    // The weights are kept as given (fp32 values); bf16 mode reads them rounded to bf16.
    weights_ = std::make_unique<LayerWeights>(w);
  }
  ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) override {
    check_prepared(weights_ != nullptr, precision_, opt);
    Activations a = ref::forward(cfg_, *weights_, hidden, opt);
    StageSeconds stages = std::move(a.stage_seconds);
    ForwardResult r = StageRunner(stages)("export", [&] { return export_result(std::move(a), opt); });
    r.stage_seconds = std::move(stages);
    return r;
  }

 private:
  // export: the result fields of the activations (moved, not copied), and the H2O sums.
  static ForwardResult export_result(Activations&& a, const ForwardOptions& opt) {
    check_attn_output_finite(a.attn_output, opt.precision);
    ForwardResult r;
    r.computed_in_double = opt.precision == Precision::FP32;
    accumulate_scores(a.attn_weights, r.head_scores, r.token_scores);
    r.attn_output = std::move(a.attn_output);
    if (opt.keep_attn_weights) r.attn_weights = std::move(a.attn_weights);
    if (opt.keep_states) {
      r.query_states = std::move(a.query_states);
      r.key_states = std::move(a.key_states);
      r.value_states = std::move(a.value_states);
    }
    if (opt.keep_latent_cache) r.latent_cache = latent_cache_rows(a.latent_normed.ptr(), a.k_pe_roped.ptr(), a.latent_normed.dim(0),
                                                             a.latent_normed.dim(1), a.k_pe_roped.dim(1));
    return r;
  }

  AttentionConfig cfg_;
  Precision precision_ = Precision::FP32;
  std::unique_ptr<LayerWeights> weights_;
};

}  // namespace
}  // namespace mla::ref

namespace mla {
std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ref::ReferenceBackend>(); }
}  // namespace mla
