// reference/mla_reference.hpp — the scalar double-precision reference of one MLA attention
// layer, exactly as Hugging Face transformers' `DeepseekV3Attention` (eager) computes it.
//
// This is the project's ground truth (the role llm.c's train_gpt2.c plays for its kernels):
// plain loops, double accumulation, no Eigen, no CUDA, one function per equation. Every
// other backend is tested against it; it is tested against closed forms, identities and
// PyTorch dumps. Spec: docs/math.md (section numbers below refer to it).
//
// Two precisions (ForwardOptions::precision):
//   FP32  the exact math: everything in double, no rounding at all. The only fp32 values
//         are the parameters HF itself holds in fp32: the weights as loaded and the
//         rotary cos/sin tables built from the fp32 `inv_freq` buffer (src/math/rope.cpp).
//   BF16  emulation of a bf16 HF eager run: weights and hidden states are bf16 values,
//         products are accumulated in double, and values are rounded to bf16 (via fp32,
//         as PyTorch's `.to(bfloat16)` of an fp32 result) at exactly the points of §7.
//
// Shape legend (names from config.json):
//   S    = tokens in this call (no cache: keys = the same S tokens, T = S)
//   H    = hidden_size            n   = num_attention_heads
//   r_q  = q_lora_rank            r_kv = kv_lora_rank
//   d_n  = qk_nope_head_dim       d_r = qk_rope_head_dim      d_v = v_head_dim
//   d_qk = d_n + d_r (qk_head_dim)
// All tensors are row-major TensorD (double); [n, S, d] means head-major as HF's
// [B, heads, seq, dim] with B = 1 dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla::ref {

// bf16 mode: the value an fp32 PyTorch result holds after `.to(torch.bfloat16)`
// (round to fp32, then to bf16, both nearest-even). fp32 mode: x unchanged (exact math).
double round_as(Precision p, double x);


// ---- inputs --------------------------------------------------------------------------------

// Inputs are checked by the validator every backend shares (mla/validate.hpp); forward()
// calls it first. check_weights(cfg, w) = validate_config + validate_weights (fp32 values).
void check_weights(const AttentionConfig& cfg, const LayerWeights& w);

// hidden: [S, H] fp32 (valid) -> [S, H] double, rounded to bf16 in bf16 mode (HF's bf16 input).
TensorD widen_hidden(const TensorF& hidden, Precision p);

// ---- one function per equation -------------------------------------------------------------

// y = x W^T (+ b)                                   torch: F.linear(x, weight, bias)
// x: [S, in], weight: [out, in], bias: [out] or empty -> y: [S, out]; one rounding of y (bf16).
// In bf16 mode the weight is read as bf16 values (a no-op for a BF16 checkpoint).
TensorD linear(const std::string& name, const TensorD& x, const TensorF& weight, const TensorF& bias, Precision p);

// y = w * x / sqrt(mean(x^2) + eps)                   torch: DeepseekV3RMSNorm (§3.5)
// x: [S, N], weight: [N] -> [S, N]. bf16 mode: statistics in fp32, x * rsqrt -> bf16, then
// w * that -> bf16 (two roundings).
TensorD rms_norm(const std::string& name, const TensorD& x, const TensorF& weight, double eps, Precision p);

// q [S, n*d_qk] -> q_nope [n, S, d_n], q_pe [n, S, d_r] (checkpoint order, not yet rotated)
//   torch: q.view(1, S, n, d_qk).transpose(1, 2); q_pass, q_rot = split(q, [d_n, d_r], -1)
struct QueryHeads {
  TensorD q_nope;  // [n, S, d_n]
  TensorD q_pe;    // [n, S, d_r]
};
QueryHeads split_query_heads(const AttentionConfig& cfg, const TensorD& q);

// compressed_kv [S, r_kv + d_r] -> latent c [S, r_kv] | k_pe [S, d_r]
//   torch: k_pass, k_rot = torch.split(compressed_kv, [kv_lora_rank, qk_rope_head_dim], -1)
struct LatentAndKpe {
  TensorD latent;  // [S, r_kv]
  TensorD k_pe;    // [S, d_r]  (not normalised; one rotary key per token, shared by all heads)
};
LatentAndKpe split_compressed_kv(const AttentionConfig& cfg, const TensorD& compressed_kv);

// kv [S, n*(d_n+d_v)] -> k_nope [n, S, d_n], value [n, S, d_v]
//   torch: kv.view(1, S, n, d_n + d_v).transpose(1, 2); k_pass, v = split(kv, [d_n, d_v], -1)
struct KvHeads {
  TensorD k_nope;  // [n, S, d_n]
  TensorD value;   // [n, S, d_v]
};
KvHeads split_kv_heads(const AttentionConfig& cfg, const TensorD& kv);

// cos/sin [S, d_r] from HF's fp32 tables (rope_tables), rounded to bf16 in bf16 mode (§7 #8).
struct CosSin {
  TensorD cos;  // [S, d_r]
  TensorD sin;  // [S, d_r]
};
CosSin rope_cos_sin(const AttentionConfig& cfg, const std::vector<int64_t>& positions, Precision p);

// DeepseekV3: out = y*cos + rotate_half(y)*sin, rotate_half(y) = cat(-y[d_r/2:], y[:d_r/2])
//   Interleave: y = de-interleaved x (y[j] = x[2j], y[d_r/2 + j] = x[2j+1]),
//               torch: apply_rotary_pos_emb_interleave (§6)
//   Split:      y = x,  torch: apply_rotary_pos_emb
//   bf16 mode: t1 = bf16(y*cos), t2 = bf16(rotate_half(y)*sin), out = bf16(t1 + t2) (§7 #9).
// DeepseekV2 (Complex): pair (x[2j], x[2j+1]) times cos[j] + i sin[j], in place of the pair, in
//   fp32 whatever the dtype, one bf16 rounding in bf16 mode (torch: apply_rotary_emb).
// x: [..., S, d_r] (last two dims; row r is position r % S) -> same shape, in HF's order.
TensorD apply_rope(const std::string& name, const TensorD& x, const CosSin& cs, RopeStyle style, Precision p);

// scores[h, s, t] = (q[h, s, :] . k[h, t, :]) * scale
//   torch: attn_weights = torch.matmul(query, key.transpose(2, 3)) * self.scaling
// query: [n, S, d_qk], key: [n, T, d_qk] -> [n, S, T]. bf16 mode: the dot -> bf16, then
// bf16(dot * fp32(scale)) (§7 #10, #11).
TensorD attention_scores(const TensorD& query, const TensorD& key, double scale, Precision p);

// scores + mask; causal: key t is hidden from query s iff t > s.
//   torch: attn_weights = attn_weights + causal_mask   (mask 0 / finfo(bf16).min, §8)
// bf16 mode: hidden entries become bf16(s + kBf16FinfoMin); fp32 mode: -infinity (exact zero
// probability either way). [n, S, T] -> [n, S, T].
TensorD apply_mask(const TensorD& scores, Mask mask, Precision p);

// p[h, s, :] = exp(x - max) / sum(exp(x - max))
//   torch: nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
// [n, S, T] -> [n, S, T]; bf16 mode: the result -> bf16 (§7 #13).
TensorD softmax_rows(const TensorD& masked_scores, Precision p);

// o[s, h*d_v + d] = sum_t p[h, s, t] v[h, t, d]
//   torch: torch.matmul(attn_weights, value_states).transpose(1, 2).reshape(1, S, n*d_v)
// probs: [n, S, T], value: [n, T, d_v] -> [S, n*d_v]; bf16 mode: -> bf16 (§7 #14).
TensorD weighted_values(const TensorD& probs, const TensorD& value, Precision p);

// The absorbed (latent-cache) form of the scores (§10), exact double, no rounding:
//   q~[h, s, :] = W_UK^h^T q_nope[h, s, :]        W_UK^h = kv_b_proj rows h*(d_n+d_v) + [0, d_n)
//   scores[h, s, t] = (q~[h, s, :] . c[t, :] + q_pe[h, s, :] . k_pe[t, :]) * scale
//   torch (official absorb): einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :d_n]), then
//     (einsum("bshc,btc->bsht", q, kv_cache) + einsum("bshr,btr->bsht", q_pe, pe_cache)) * scale
// q_nope [n, S, d_n], q_pe_roped [n, S, d_r], latent_normed [T, r_kv], k_pe_roped [T, d_r]
// (q_pe/k_pe in any common order) -> [n, S, T]. Equals attention_scores in exact arithmetic.
TensorD absorbed_scores(const AttentionConfig& cfg, const LayerWeights& w, const TensorD& q_nope,
                        const TensorD& q_pe_roped, const TensorD& latent_normed, const TensorD& k_pe_roped,
                        double scale);

// ---- the intermediates --------------------------------------------------------------------

// Every intermediate of one forward, named as in HF's DeepseekV3Attention.forward.
struct Activations {
  TensorD hidden;          // [S, H]          input (bf16 values in bf16 mode)
  TensorD q_a;             // [S, r_q]        q_a_proj(x)               (empty without q_lora)
  TensorD q_a_normed;      // [S, r_q]        q_a_layernorm(q_a)        (empty without q_lora)
  TensorD q;               // [S, n*d_qk]     q_b_proj(...) or q_proj(x)
  TensorD q_nope;          // [n, S, d_n]     q split per head: HF q_pass
  TensorD q_pe;            // [n, S, d_r]     HF q_rot, checkpoint order (not yet rotated)
  TensorD compressed_kv;   // [S, r_kv + d_r] kv_a_proj_with_mqa(x)
  TensorD latent;          // [S, r_kv]       c, first r_kv features of compressed_kv (HF k_pass)
  TensorD latent_normed;   // [S, r_kv]       kv_a_layernorm(c)
  TensorD k_pe;            // [S, d_r]        last d_r features of compressed_kv (HF k_rot, checkpoint order)
  TensorD kv;              // [S, n*(d_n+d_v)] kv_b_proj(latent_normed)
  TensorD k_nope;          // [n, S, d_n]     kv split per head: HF k_pass
  TensorD cos, sin;        // [S, d_r]        rotary tables (bf16 in bf16 mode)
  TensorD q_pe_roped;      // [n, S, d_r]     HF order (de-interleaved if rope_interleave; V2: pairs in place)
  TensorD k_pe_roped;      // [S, d_r]        HF order, shared by all heads
  TensorD query_states;    // [n, S, d_qk]    cat(q_nope, q_pe_roped)
  TensorD key_states;      // [n, S, d_qk]    cat(k_nope, k_pe_roped expanded over heads)
  TensorD value_states;    // [n, S, d_v]
  TensorD scores;          // [n, S, S]       scaled q.k, before the mask
  TensorD masked_scores;   // [n, S, S]
  TensorD attn_weights;    // [n, S, S]       softmax(masked_scores)
  TensorD attn_context;    // [S, n*d_v]      P.V, heads concatenated (o_proj input)
  TensorD attn_output;     // [S, H]          o_proj(attn_context)
  double scaling = 0;      // softmax scale used
  StageSeconds stage_seconds;
};

// ---- the stages of forward, in order; each fills its part of Activations -------------------
// Shapes as in Activations; `a.hidden` must hold the widened input (widen_hidden).

// q_a, q_a_normed, q, q_nope, q_pe                        (§3.1 / §3.2)
void q_path(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt, Activations& a);
// compressed_kv, latent, k_pe, latent_normed, kv, k_nope, value_states   (§3.3)
void kv_path(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt, Activations& a);
// cos, sin, q_pe_roped, k_pe_roped, query_states, key_states  (§3.4, §6), positions
// opt.position_offset .. + S - 1
void rope(const AttentionConfig& cfg, const ForwardOptions& opt, Activations& a);
// scaling, scores, masked_scores, attn_weights, attn_context  (§3.6 steps 2-6)
void attend(const AttentionConfig& cfg, const ForwardOptions& opt, Activations& a);
// attn_output                                              (§3.6 step 7)
void o_proj(const LayerWeights& w, const ForwardOptions& opt, Activations& a);

// ---- the whole layer -----------------------------------------------------------------------

// One layer's forward with every intermediate kept (the stages above, each timed). Positions
// are opt.position_offset .. opt.position_offset + S - 1.
Activations forward(const AttentionConfig& cfg, const LayerWeights& w, const TensorF& hidden,
                    const ForwardOptions& opt);

// H2O accumulated scores of attn_weights [n, S, T]: head_scores[h*T + t] = sum_s p[h, s, t],
// token_scores[t] = sum_h head_scores[h*T + t] (double sums, token_scores_from_heads).
void accumulate_scores(const TensorD& attn_weights, std::vector<double>& head_scores, std::vector<double>& token_scores);

}  // namespace mla::ref
