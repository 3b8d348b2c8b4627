// src/model/decoder_layer.cpp — one DeepseekV3DecoderLayer (or DeepseekV2DecoderLayer) on
// the CPU (decoder_layer.hpp): norms, the attention's projections on the fixed-order engine,
// o_proj, residual adds, the dense SwiGLU MLP and the MoE (router, routed experts, shared
// experts). The two families differ only in RoPE (cpu::rope) and in the router's scores and
// selection (route_token, routing.cpp).
//
// transformers (modeling_deepseek_v3.py, experts_implementation "grouped_mm", its default):
//   DeepseekV3MLP          down_proj(act_fn(gate_proj(x)) * up_proj(x))
//   DeepseekV3TopkRouter   logits = F.linear(x.float(), weight.float()); scores = sigmoid(logits)
//                          choice = scores + e_score_correction_bias; group-limited top-k of choice
//                          w = scores[topk]; w /= (sum w + 1e-20) if norm_topk_prob; w *= routed_scaling_factor
//   DeepseekV2TopkRouter   the same logits; scores = softmax(logits); (group-limited) top-k of scores;
//                          w = scores[topk] * routed_scaling_factor
//   experts                out_e = down(silu(gate(x)) * up(x)) per routed row (bf16 in a bf16 model);
//                          sum over the k slots of fp32(out_e * w) in fp32, then .to(model dtype)
//   DeepseekV3MoE          routed + shared_experts(x)
//
// Shape legend: m rows, H hidden_size, I intermediate width, E experts, k experts per token.
#include "decoder_layer.hpp"

#include <algorithm>
#include <cmath>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "src/cpu/cpu_kernels.hpp"

namespace mla::decoder {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

std::unique_ptr<cpu::FixedOrderLinear> prepared_linear(const TensorF& w, Precision precision, int threads) {
  return std::make_unique<cpu::FixedOrderLinear>(w.ptr(), w.dim(0), w.dim(1), nullptr, precision, threads);
}

// silu(x) = x / (1 + exp(-x)) in fp32 (evaluated in double, rounded once: within 1 ulp of torch's
// vectorised fp32 silu)
float silu(float x) { return static_cast<float>(static_cast<double>(x) / (1.0 + std::exp(-static_cast<double>(x)))); }

// Row-wise over m rows in parallel (rows are independent).
void for_rows(int64_t rows, int threads, const std::function<void(int64_t, int64_t)>& body) {
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  cpu::parallel_for(chunks, threads, [&](int64_t c, int) { body(c * kChunk, std::min(rows, (c + 1) * kChunk)); });
}

// RMSNorm of every row of h [m, H] with `weight` [H] (cpu_kernels.hpp rms_norm), rows in parallel.
MatrixRM norm_rows(const Eigen::Ref<const MatrixRM>& h, const std::vector<float>& weight, float eps, Precision precision,
                   int threads) {
  const int64_t H = h.cols();
  MatrixRM out(h.rows(), H);
  for_rows(h.rows(), threads, [&](int64_t r0, int64_t r1) {
    cpu::rms_norm(h.data() + r0 * H, H, r1 - r0, H, weight.data(), eps, precision, out.data() + r0 * H, H);
  });
  return out;
}

}  // namespace

PreparedMlp prepare_mlp(const MlpWeights& w, Precision precision, int threads) {
  PreparedMlp m;
  m.gate_proj = prepared_linear(w.gate_proj, precision, threads);
  m.up_proj = prepared_linear(w.up_proj, precision, threads);
  m.down_proj = prepared_linear(w.down_proj, precision, threads);
  return m;
}

PreparedLayer::PreparedLayer(const ModelConfig& cfg, const DecoderLayerWeights& w, const LayerSettings& settings,
                             ExpertLoader loader)
    : cfg_(cfg),
      layer_(w.layer),
      moe_(w.moe),
      precision_(settings.precision),
      threads_(cpu::resolve_threads(settings.threads)),
      rms_eps_(static_cast<float>(cfg.attention.rms_norm_eps)),
      keep_experts_(settings.keep_experts),
      latent_eps_(static_cast<float>(settings.latent_norm_eps)),
      loader_(std::move(loader)) {
  const std::unique_ptr<cpu::GemmEngine> engine = cpu::make_fixed_order_engine();
  attention_ = cpu::prepare_weights_on(*engine, "fixed-order", "row-invariant sums (docs/math.md §15.4)",
                                       cfg.attention, w.self_attn, settings.precision, threads_);
  input_layernorm_ = cpu::prepare_vector(w.self_attn.input_layernorm, precision_);
  post_attention_layernorm_ = cpu::prepare_vector(w.post_attention_layernorm, precision_);
  spec_ = cpu::row_attention_spec(attention());
  if (!moe_) {
    dense_ = prepare_mlp(w.mlp, precision_, threads_);
    return;
  }
  // the router stays fp32 in a bf16 model (transformers' _keep_in_fp32_modules_strict)
  router_ = prepared_linear(w.gate.weight, Precision::FP32, threads_);
  if (cfg.router_has_correction_bias()) correction_bias_ = w.gate.e_score_correction_bias.data;
  if (cfg.n_shared_experts > 0) shared_ = prepare_mlp(w.shared_experts, precision_, threads_);
  experts_.resize(idx(cfg.n_routed_experts));
  if (!w.experts.empty()) {
    for (size_t e = 0; e < w.experts.size(); ++e)
      experts_[e] = std::make_unique<PreparedMlp>(prepare_mlp(w.experts[e], precision_, threads_));
    keep_experts_ = true;
  } else if (!loader_) {
    fail(ErrorKind::InvalidArgument, "layer " + std::to_string(layer_) + ": MoE layer prepared without experts or a loader");
  }
}

int64_t PreparedLayer::prepared_bytes() const {
  const auto linear = [](const std::unique_ptr<cpu::FixedOrderLinear>& l) -> int64_t {
    return l ? ((l->out_features() + 15) / 16) * 16 * l->in_features() * 4 : 0;
  };
  const auto mlp = [&](const PreparedMlp& m) { return linear(m.gate_proj) + linear(m.up_proj) + linear(m.down_proj); };
  int64_t b = mlp(dense_) + mlp(shared_) + linear(router_);
  for (const auto& e : experts_)
    if (e) b += mlp(*e);
  return b;
}

MatrixRM PreparedLayer::input_norm(const Eigen::Ref<const MatrixRM>& h) const {
  return norm_rows(h, input_layernorm_, rms_eps_, precision_, threads_);
}

MatrixRM PreparedLayer::post_norm(const MatrixRM& h) const {
  return norm_rows(h, post_attention_layernorm_, rms_eps_, precision_, threads_);
}

void PreparedLayer::residual_add(MatrixRM& h, const MatrixRM& delta) const {
  const int64_t H = h.cols();
  for_rows(h.rows(), threads_, [&](int64_t r0, int64_t r1) {
    float* a = h.data() + r0 * H;
    const float* b = delta.data() + r0 * H;
    for (int64_t i = 0; i < (r1 - r0) * H; ++i) a[i] = cpu::rounded(precision_, a[i] + b[i]);
  });
}

// down_proj(silu(gate_proj(x)) * up_proj(x)); bf16: each GEMM output, silu and the product rounded
MatrixRM PreparedLayer::swiglu(const PreparedMlp& m, const MatrixRM& x) const {
  MatrixRM gate, up, down;
  m.gate_proj->run(x, threads_, gate);
  m.up_proj->run(x, threads_, up);
  const int64_t I = gate.cols();
  for_rows(gate.rows(), threads_, [&](int64_t r0, int64_t r1) {
    float* g = gate.data() + r0 * I;
    const float* u = up.data() + r0 * I;
    for (int64_t i = 0; i < (r1 - r0) * I; ++i) g[i] = cpu::rounded(precision_, cpu::rounded(precision_, silu(g[i])) * u[i]);
  });
  m.down_proj->run(gate, threads_, down);
  return down;
}

Routing PreparedLayer::route(const MatrixRM& y) const {
  const int64_t m = y.rows(), k = cfg_.num_experts_per_tok;
  Routing r;
  r.k = k;
  MatrixRM logits;  // [m, E] fp32: x.float() @ weight.float().T
  router_->run(y, threads_, logits);
  r.logits.assign(logits.data(), logits.data() + logits.size());
  r.experts.resize(idx(m * k));
  r.weights.resize(idx(m * k));
  for_rows(m, threads_, [&](int64_t r0, int64_t r1) {
    for (int64_t s = r0; s < r1; ++s) {
      const TokenRoute<float> t = route_token(&logits(s, 0), correction_bias_.data(), cfg_);
      std::copy(t.experts.begin(), t.experts.end(), r.experts.begin() + s * k);
      std::copy(t.weights.begin(), t.weights.end(), r.weights.begin() + s * k);
    }
  });
  return r;
}

const PreparedMlp& PreparedLayer::expert(int64_t e) {
  std::unique_ptr<PreparedMlp>& slot = experts_[idx(e)];
  if (!slot) slot = std::make_unique<PreparedMlp>(prepare_mlp(loader_(e), precision_, threads_));
  return *slot;
}

MatrixRM PreparedLayer::moe(const MatrixRM& y, Routing* routing_out) {
  const int64_t m = y.rows(), H = y.cols(), E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  Routing r = route(y);
  // rows of each expert, ascending; the slot j of (row, expert)
  std::vector<std::vector<int64_t>> rows_of(idx(E));
  for (int64_t s = 0; s < m; ++s)
    for (int64_t j = 0; j < k; ++j) rows_of[idx(r.experts[idx(s * k + j)])].push_back(s * k + j);
  // routed[s] = sum over the k slots of fp32(out_e[s] * w) in fp32, slot after slot from +0. A row's
  // slots hold its experts in ascending order (route_token sorts them), so adding each expert's
  // products as the experts come, in ascending e, is that sum in slot order.
  MatrixRM routed = MatrixRM::Zero(m, H);
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t>& slots = rows_of[idx(e)];
    if (slots.empty()) continue;
    const PreparedMlp& ex = expert(e);
    const int64_t m_e = static_cast<int64_t>(slots.size());
    MatrixRM x(m_e, H);
    for_rows(m_e, threads_, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x.row(i) = y.row(slots[idx(i)] / k);
    });
    const MatrixRM out = swiglu(ex, x);  // [m_e, H], bf16 values in bf16 mode
    for_rows(m_e, threads_, [&](int64_t i0, int64_t i1) {  // each row of routed is one expert's slot once
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t slot = slots[idx(i)], s = slot / k;
        const float w = r.weights[idx(slot)];
        float* dst = routed.data() + s * H;
        const float* o = out.data() + i * H;
        for (int64_t c = 0; c < H; ++c) {
          const float product = o[c] * w;
          dst[c] = dst[c] + product;
        }
      }
    });
    if (!keep_experts_) experts_[idx(e)].reset();
  }
  // + shared, each sum rounded once
  const MatrixRM shared = cfg_.n_shared_experts > 0 ? swiglu(shared_, y) : MatrixRM::Zero(m, H);
  for_rows(m, threads_, [&](int64_t r0, int64_t r1) {
    for (int64_t s = r0; s < r1; ++s)
      for (int64_t c = 0; c < H; ++c)
        routed(s, c) = cpu::rounded(precision_, cpu::rounded(precision_, routed(s, c)) + shared(s, c));
  });
  if (routing_out) *routing_out = std::move(r);
  return routed;
}

MatrixRM PreparedLayer::mlp(const MatrixRM& y, Routing* routing) {
  if (!moe_) return swiglu(dense_, y);
  return moe(y, routing);
}

namespace {

// The attention pipeline's stages as the layer's parts: "projections" (q_path with input_norm,
// kv_path, rope), "attention" (attend: storing the keys and the plugged attention), "o_proj".
void add_attention_parts(const StageSeconds& pipeline, const std::string& prefix, StageSeconds& parts) {
  for (const auto& [name, seconds] : pipeline) {
    const char* part = name == "attend" ? "attention" : name == "o_proj" ? "o_proj" : "projections";
    add_seconds(parts, prefix + ": " + part, seconds);
  }
}

}  // namespace

void layer_forward(PreparedLayer& layer, MatrixRM& h, const std::vector<int64_t>& positions, const LayerPlugs& plugs) {
  const int64_t m = h.rows(), H = h.cols();
  if (static_cast<int64_t>(positions.size()) != m)
    fail(ErrorKind::Shape, "layer " + std::to_string(layer.layer()) + ": " + std::to_string(m) + " rows at " +
                               std::to_string(positions.size()) + " positions");
  StageSeconds untimed;  // each part is timed into plugs.stages when given
  StageSeconds& parts = plugs.stages ? *plugs.stages : untimed;
  MatrixRM attn_output(m, H);
  {
    StageSeconds pipeline;
    cpu::AttentionPlugs attention = plugs.attention;
    attention.output = [&](int64_t r0, const MatrixRM& y) { attn_output.middleRows(r0, y.rows()) = y; };
    cpu::attention_layer(layer.attention(), m,
                         [&](int64_t r0, int64_t rows) { return layer.input_norm(h.middleRows(r0, rows)); },
                         positions, attention, StageRunner(pipeline));
    add_attention_parts(pipeline, plugs.stage_prefix, parts);
  }
  if (plugs.attn_output) plugs.attn_output(attn_output);
  const StageRunner stage(parts);
  stage((plugs.stage_prefix + ": mlp").c_str(), [&] {
    layer.residual_add(h, attn_output);
    const MatrixRM mlp = layer.mlp(layer.post_norm(h), plugs.routing);
    layer.residual_add(h, mlp);
  });
}

PreparedHead::PreparedHead(const ModelConfig& cfg, const ModelHeadWeights& w, Precision precision, int threads)
    : precision_(precision),
      threads_(cpu::resolve_threads(threads)),
      eps_(static_cast<float>(cfg.attention.rms_norm_eps)),
      norm_(cpu::prepare_vector(w.norm, precision_)),
      lm_head_(prepared_linear(w.lm_head, precision_, threads_)) {}

MatrixRM PreparedHead::logits(const MatrixRM& h) const {
  MatrixRM out;
  lm_head_->run(norm_rows(h, norm_, eps_, precision_, threads_), threads_, out);
  return out;
}

MatrixRM embed(const Checkpoint& ckpt, const std::vector<int64_t>& ids, Precision precision) {
  const TensorF rows = ckpt.embed_rows(ids);  // [T, H]; errors name an id past the vocabulary
  MatrixRM h = Eigen::Map<const MatrixRM>(rows.ptr(), rows.dim(0), rows.dim(1));
  cpu::round_inplace(precision, h.data(), h.size());
  return h;
}

}  // namespace mla::decoder
