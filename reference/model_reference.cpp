// reference/model_reference.cpp — the scalar double-precision reference of transformers'
// DeepseekV3ForCausalLM (model_reference.hpp), one function per equation of docs/math.md §15.
//
// Read top to bottom, model_forward is DeepseekV3ForCausalLM.forward:
//   h = embed_tokens(ids)
//   per layer: h = h + o_proj(attention(input_layernorm(h)));  h = h + mlp(post_attention_layernorm(h))
//              mlp = swiglu (dense) | routed_experts(router(x)) + swiglu_shared (MoE)
//   logits = lm_head(norm(h))
//
// Shape legend: S tokens, H hidden_size, V vocab_size, I width, E experts, k experts per token.
// Precision: see model_reference.hpp ("§15.3 #k" marks a bf16 rounding point).
#include "reference/model_reference.hpp"

#include <cmath>
#include <numeric>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"

namespace mla::ref {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

const TensorF kNoBias;

}  // namespace

TensorD embed(const Checkpoint& ckpt, const std::vector<int64_t>& ids, Precision p) {
  const TensorF rows = ckpt.embed_rows(ids);  // [S, H]
  TensorD h("hidden_states", rows.shape);
  for (size_t i = 0; i < rows.data.size(); ++i) h.data[i] = round_as(p, rows.data[i]);
  return h;
}

// h + delta                                                        §15.3 #3, #7
TensorD residual_add(const TensorD& h, const TensorD& delta, Precision p) {
  TensorD out("hidden_states", h.shape);
  for (size_t i = 0; i < h.data.size(); ++i) out.data[i] = round_as(p, h.data[i] + delta.data[i]);
  return out;
}

// silu(x) = x / (1 + exp(-x))                                      §15.3 #5
TensorD silu(const TensorD& x, Precision p) {
  TensorD out("silu", x.shape);
  for (size_t i = 0; i < x.data.size(); ++i) {
    const double v = x.data[i] / (1.0 + std::exp(-x.data[i]));
    out.data[i] = p == Precision::BF16 ? round_to_bf16(f32(v)) : v;
  }
  return out;
}

// down_proj(silu(gate_proj(x)) * up_proj(x))                       §15.3 #4-#6
TensorD swiglu(const std::string& name, const TensorD& x, const MlpWeights& w, Precision p) {
  const TensorD gate = linear(name + ".gate_proj", x, w.gate_proj, kNoBias, p);  // [S, I]
  const TensorD up = linear(name + ".up_proj", x, w.up_proj, kNoBias, p);        // [S, I]
  TensorD act = silu(gate, p);                                                  // [S, I]
  for (size_t i = 0; i < act.data.size(); ++i) act.data[i] = round_as(p, act.data[i] * up.data[i]);
  return linear(name + ".down_proj", act, w.down_proj, kNoBias, p);  // [S, H]
}

// DeepseekV3TopkRouter / DeepseekV2TopkRouter                     §15.2, §15.3 #8
RouterOutput router(const ModelConfig& cfg, const TensorD& x, const RouterWeights& w, Precision p) {
  const int64_t S = x.dim(0), H = x.dim(1), E = cfg.n_routed_experts, k = cfg.num_experts_per_tok;
  const bool fp32 = p == Precision::BF16;  // a bf16 model runs its router in fp32
  const auto op = [&](double v) { return fp32 ? f32(v) : v; };
  RouterOutput r;
  r.logits = TensorD("router_logits", {S, E});
  r.experts.resize(idx(S * k));
  r.weights.resize(idx(S * k));
  for (int64_t s = 0; s < S; ++s) {
    // 1. logits = x.float() @ weight.T (fp32 weights, never rounded to bf16)
    for (int64_t e = 0; e < E; ++e) {
      double acc = 0.0;
      for (int64_t i = 0; i < H; ++i) acc += x.data[idx(s * H + i)] * static_cast<double>(w.weight.data[idx(e * H + i)]);
      r.logits.data[idx(s * E + e)] = op(acc);
    }
    // 2. scores, selection, weights: the family's router
    const TokenRoute<double> t = route_token(&r.logits.data[idx(s * E)], w.e_score_correction_bias.data.data(), cfg, fp32);
    std::copy(t.experts.begin(), t.experts.end(), r.experts.begin() + s * k);
    std::copy(t.weights.begin(), t.weights.end(), r.weights.begin() + s * k);
  }
  return r;
}

// sum over the k slots (ascending expert) of expert_e(x) * weight   §15.3 #9
TensorD routed_experts(const ModelConfig& cfg, const TensorD& x, const RouterOutput& routing,
                       const std::vector<MlpWeights>& experts, Precision p) {
  const int64_t S = x.dim(0), H = x.dim(1), k = cfg.num_experts_per_tok;
  const bool bf16 = p == Precision::BF16;
  TensorD out("routed_experts", {S, H});
  TensorD row("x", {1, H});
  for (int64_t s = 0; s < S; ++s) {
    std::copy_n(x.data.begin() + static_cast<std::ptrdiff_t>(s * H), H, row.data.begin());
    std::vector<double> acc(idx(H), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = routing.experts[idx(s * k + j)];
      const TensorD y = swiglu("experts." + std::to_string(e), row, experts[idx(e)], p);  // [1, H]
      const double w = routing.weights[idx(s * k + j)];
      for (int64_t c = 0; c < H; ++c)
        acc[idx(c)] = bf16 ? f32(acc[idx(c)] + f32(y.data[idx(c)] * w)) : acc[idx(c)] + y.data[idx(c)] * w;
    }
    for (int64_t c = 0; c < H; ++c) out.data[idx(s * H + c)] = round_as(p, acc[idx(c)]);
  }
  return out;
}

// routed + shared                                                   §15.3 #10
TensorD moe(const ModelConfig& cfg, const TensorD& x, const DecoderLayerWeights& w, Precision p, RouterOutput* routing) {
  RouterOutput r = router(cfg, x, w.gate, p);
  TensorD out = routed_experts(cfg, x, r, w.experts, p);
  if (cfg.n_shared_experts > 0) out = residual_add(out, swiglu("shared_experts", x, w.shared_experts, p), p);
  if (routing) *routing = std::move(r);
  return out;
}

TensorD decoder_layer(const ModelConfig& cfg, const DecoderLayerWeights& w, const TensorD& h, Precision p,
                      double latent_norm_eps, RouterOutput* routing) {
  const AttentionConfig& a = cfg.attention;
  ForwardOptions opt;
  opt.mask = Mask::Causal;
  opt.precision = p;
  opt.latent_norm_eps = latent_norm_eps;
  // 1. h = h + self_attn(input_layernorm(h))
  Activations act;
  act.hidden = rms_norm("input_layernorm", h, w.self_attn.input_layernorm, a.rms_norm_eps, p);  // [S, H]
  q_path(a, w.self_attn, opt, act);
  kv_path(a, w.self_attn, opt, act);
  rope(a, opt, act);
  attend(a, opt, act);
  o_proj(w.self_attn, opt, act);
  const TensorD h1 = residual_add(h, act.attn_output, p);
  // 2. h = h + mlp(post_attention_layernorm(h))
  const TensorD y = rms_norm("post_attention_layernorm", h1, w.post_attention_layernorm, a.rms_norm_eps, p);
  const TensorD f = w.moe ? moe(cfg, y, w, p, routing) : swiglu("mlp", y, w.mlp, p);
  return residual_add(h1, f, p);
}

TensorD lm_head(const ModelConfig& cfg, const ModelHeadWeights& w, const TensorD& h, Precision p) {
  const TensorD normed = rms_norm("norm", h, w.norm, cfg.attention.rms_norm_eps, p);
  return linear("logits", normed, w.lm_head, kNoBias, p);
}

ModelActivations model_forward(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& ids,
                               Precision p, double latent_norm_eps) {
  check_model_tensors(ckpt, cfg, "forward");
  ModelActivations out;
  TensorD h = embed(ckpt, ids, p);
  for (int64_t L = 0; L < cfg.attention.num_hidden_layers; ++L) {
    out.hidden_states.push_back(h);
    const DecoderLayerWeights w = load_decoder_layer(ckpt, cfg, L, /*experts=*/true);
    RouterOutput routing;
    h = decoder_layer(cfg, w, h, p, latent_norm_eps, &routing);
    if (w.moe) {
      LayerRouting lr{L, cfg.num_experts_per_tok, routing.experts, {}};
      for (double v : routing.weights) lr.weights.push_back(static_cast<float>(v));
      out.routing.push_back(std::move(lr));
    }
    ckpt.release_mappings();
  }
  out.hidden_states.push_back(h);
  out.logits = lm_head(cfg, load_model_head(ckpt, cfg), h, p);
  return out;
}

}  // namespace mla::ref
