// src/model/model_forward.cpp — the whole-model forward on the CPU (mla/model_forward.hpp):
// embed_tokens, the decoder layers streamed one at a time (read, prepare, run over every token,
// free), the final norm and lm_head; and the memory estimate of such a run.
//
// Shape legend: T tokens, H hidden_size, V vocab_size, E experts, I widths.
#include "mla/model_forward.hpp"

#include <algorithm>
#include <numeric>

#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "src/model/decoder_layer.hpp"

namespace mla {
namespace {


TensorF to_tensor(const std::string& name, const cpu::MatrixRM& m) {
  TensorF t(name, {m.rows(), m.cols()});
  std::copy(m.data(), m.data() + m.size(), t.data.begin());
  return t;
}

}  // namespace

ModelForwardResult model_forward(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& token_ids,
                                 const ModelForwardOptions& opt) {
  check_model_tensors(ckpt, cfg, "forward");
  if (token_ids.empty()) fail(ErrorKind::InvalidArgument, "forward: no token ids");
  const int64_t L_count = cfg.attention.num_hidden_layers;
  ModelForwardResult out;
  out.engine = cpu::fixed_order_engine_name(opt.precision);
  decoder::LayerSettings settings;
  settings.precision = opt.precision;
  settings.threads = opt.threads;
  settings.latent_norm_eps = opt.latent_norm_eps;
  settings.keep_experts = opt.resident_experts;

  cpu::MatrixRM h = timed(out.stage_seconds, "embed", [&] { return decoder::embed(ckpt, token_ids, opt.precision); });
  for (int64_t L = 0; L < L_count; ++L) {
    StageTimer t(out.stage_seconds, "layer " + std::to_string(L));
    if (opt.keep_hidden_states) out.hidden_states.push_back(to_tensor("hidden_states." + std::to_string(L), h));
    std::unique_ptr<decoder::PreparedLayer> layer;
    {
      const DecoderLayerWeights w = load_decoder_layer(ckpt, cfg, L, opt.resident_experts);
      decoder::ExpertLoader loader;
      if (!opt.resident_experts) loader = [&ckpt, &cfg, L](int64_t e) { return load_expert(ckpt, cfg, L, e); };
      layer = std::make_unique<decoder::PreparedLayer>(cfg, w, settings, loader);
    }  // the fp32 copies read from the shards are freed here
    if (opt.resident_experts) ckpt.release_mappings();
    // the causal forward of every row: keys in RowKeys, each row over positions 0..s (attend_row)
    cpu::RowKeys keys;
    cpu::CausalRowAttention causal(layer->attention(), h.rows(), keys);
    decoder::Routing routing;
    decoder::LayerPlugs plugs;
    causal.plug(plugs.attention);
    plugs.routing = opt.keep_routing && layer->moe() ? &routing : nullptr;
    decoder::layer_forward(*layer, h, position_ids(0, h.rows()), plugs);
    if (opt.keep_routing && layer->moe()) out.routing.push_back(LayerRouting{L, routing.k, routing.experts, routing.weights});
    layer.reset();
    if (!opt.resident_experts) ckpt.release_mappings();
    if (opt.progress) opt.progress("layers", L + 1, L_count);
  }
  if (opt.keep_hidden_states) out.hidden_states.push_back(to_tensor("hidden_states." + std::to_string(L_count), h));
  {
    StageTimer t(out.stage_seconds, "head");
    const decoder::PreparedHead head(cfg, load_model_head(ckpt, cfg), opt.precision, opt.threads);
    out.logits = to_tensor("logits", head.logits(h));
    ckpt.release_mappings();
  }
  return out;
}

MemoryEstimate estimate_model_memory(const ModelConfig& cfg, const ModelMemoryRequest& req) {
  const AttentionConfig& a = cfg.attention;
  const int64_t H = a.hidden_size, V = a.vocab_size, T = req.tokens, n = a.num_attention_heads;
  const int64_t d_qk = a.qk_head_dim(), d_v = a.v_head_dim, w = a.qk_nope_head_dim + d_v;
  const int64_t f = 4;  // fp32 bytes
  // one layer's weights: read (fp32) and prepared (packed fp32 copies), the largest layer
  const int64_t attention = attention_parameter_count(a) + 2 * H;
  const int64_t dense = 3 * H * cfg.intermediate_size;
  const int64_t expert = 3 * H * cfg.moe_intermediate_size;
  const int64_t moe_fixed = cfg.n_routed_experts * (H + 1) + 3 * H * cfg.shared_intermediate_size();
  const int64_t moe = moe_fixed + (req.resident_experts ? cfg.n_routed_experts : 1) * expert;
  const int64_t layer_params = attention + std::max(cfg.first_k_dense_replace > 0 ? dense : 0,
                                                    cfg.first_k_dense_replace < a.num_hidden_layers ? moe : 0);
  // activations of T rows: h, x/y, q, kv, the latent row, ctx, attn_output, MLP widths (fp32),
  // and the keys in the kernel's layout (RowKeys: the run's precision)
  const int64_t width = std::max(cfg.intermediate_size, cfg.moe_intermediate_size * cfg.num_experts_per_tok);
  const int64_t per_row = (4 * H + n * d_qk + n * w + (a.kv_lora_rank + a.qk_rope_head_dim) + n * d_v + 3 * width +
                           cfg.num_experts_per_tok * H) * f +
                          n * (d_qk + d_v) * (req.precision == Precision::BF16 ? 2 : f);
  const int64_t rows = T + std::max<int64_t>(0, req.streams - 1) * req.stream_rows + req.extra_rows;
  MemoryPhase layer{"layer", {}};
  layer.parts.push_back({"layer weights as read (fp32)", layer_params * f});
  layer.parts.push_back({"layer weights prepared (fp32, packed)", layer_params * f});
  layer.parts.push_back({"activations of " + std::to_string(rows) + " rows", rows * per_row});
  layer.parts.push_back({"residual streams", rows * H * f});
  if (req.keep_hidden_states)
    layer.parts.push_back({"hidden_states of every layer", (a.num_hidden_layers + 1) * T * H * f});
  MemoryPhase head{"head", {}};
  head.parts.push_back({"lm_head (read and prepared)", 2 * V * H * f});
  head.parts.push_back({"logits", (rows - req.extra_rows) * V * f});
  head.parts.push_back({"residual streams", rows * H * f});
  (void)req.threads;
  // the process itself: fixed here (the layer commands measure theirs, process_allowance_bytes)
  return estimate_of_phases({layer, head}, 0, kModelProcessBytes);
}

}  // namespace mla
