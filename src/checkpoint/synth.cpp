// src/checkpoint/synth.cpp — synthetic checkpoints with the real Kimi K2.6 layout (`mla-h2o synth`).
//
// Purpose: a deterministic stand-in for a real checkpoint, so every command can be run and
// tested without downloading 554 GB. Layout (docs/math.md §1.1, §13.15):
//   <out>/config.json                         nested Kimi K2.5/K2.6 layout (text_config) or flat
//   <out>/model.safetensors.index.json        {"metadata": {"total_size": B}, "weight_map": {..}}
//   <out>/model-00001-of-0000NN.safetensors   5-digit index, 6-digit total (as K2.5/K2.6)
// Tensor names: <prefix>layers.{L}.self_attn.<x>.weight, <prefix>layers.{L}.input_layernorm.weight,
// <prefix>embed_tokens.weight, prefix "language_model.model." (nested) or "model." (flat).
// Shards: the layers' tensors are spread over shards 1..N-1 in proportion to their bytes (a
// tensor goes to shard 1 + floor((bytes before it) * (N-1) / (all layer bytes)), so with
// N = 2 every layer sits in shard 1, as layer 0 does in K2.6; with more shards a layer can
// straddle two); embed_tokens is alone in the last shard. config.json's vocab_size is the
// number of embed_tokens rows written.
//
// Every shard's __metadata__ holds kSynthMetadataKey ("mla_h2o_synth": what wrote it), so a
// command can say that its figures come from synthetic weights (Checkpoint::synthetic_origin).
// Weight recipe ("scaled like a trained layer's"), all draws from mla::Rng:
//   linear W [out, in]:  W[o, i] = g_o * z[o, i] / sqrt(in),  z ~ N(0, 1)
//       g_o = exp(kRowSigma * u_o) * structure_o,  u_o ~ N(0, 1)   (log-normal row gains)
//   structure_o (1 unless listed):
//       q_b_proj / q_proj rows of head h:       head_gain[h]
//       their rope rows 2j, 2j+1 for the low-frequency half of the pairs,
//         j = d_r/4 .. d_r/2 - 1 (Kimi: 16..31; at least the last pair):      * kRopeSinkGainQ (3)
//       kv_a_proj_with_mqa rows r_kv + 2j, r_kv + 2j + 1 (k_pe, same pairs):    kRopeSinkGainK (3)
//       kv_b_proj rows of head h:               head_gain[h]
//   head_gain[h] = exp(kHeadSigma * u_h), and kHeavyHeads heads (drawn) get * kHeavyHeadGain.
//   norm weights (q_a_layernorm, kv_a_layernorm, input_layernorm): w = exp(kNormSigma * u).
//   biases (attention_bias only): N(0, 0.02^2).
//   embed_tokens [V, H]: N(0, kEmbedStd^2).
// Why: the low-frequency RoPE pairs barely rotate over a few hundred positions (YaRN
// divides them by `factor`; Kimi pair 16 turns < 0.4 rad over 256 positions), so they act
// like content channels shared by every head through the single k_pe. A key with a large
// k_pe component there is attractive to the queries of every head that point the same
// way, and a key with a small one loses to it everywhere: attention concentrates, and the
// H2O scores (mass received) become heavy-tailed like the real Kimi K2.6 layer-0 demo
// instead of nearly uniform, which is what i.i.d. weights give. The rest (log-normal row
// and head gains) adds the spread a trained layer has. Gain 3 on 16 pairs was chosen by
// measuring the Kimi layer 0 (seed 0; 256 x 7168 N(0,1) inputs from Rng(7, 99); fp32 cpu
// backend; no mask): scores 1.27 .. 494, mean 64, std 66 (the real layer: 0.336 .. 351,
// std 64); gain 4 on 1 pair gave std 116,
// range 88x; i.i.d. weights without any gain give 47.9 .. 87.7, std 7.3 (nearly uniform).
// Seed 1 with this recipe: 0.278 .. 519, std 67. (With a causal mask every variant is
// heavy-tailed already, because early keys are seen by more queries.)
//
// Random streams (Rng(seed, stream)); L = layer index:
//   stream 0                      embed_tokens: V*H normals, row-major
//   stream 1000*(L+1) + 20        layer structure: n normals (head gains), then kHeavyHeads
//                                 uniforms picking the heavy heads
//   stream 1000*(L+1) + k         tensor k of layer L: `out` row-gain normals, then out*in
//                                 element normals row-major (norms / biases: their normals)
//       k: 0 input_layernorm, 1 q_a_proj, 2 q_a_layernorm, 3 q_b_proj, 4 q_proj,
//          5 kv_a_proj_with_mqa, 6 kv_a_layernorm, 7 kv_b_proj, 8 o_proj,
//          9 q_a_proj.bias, 10 kv_a_proj_with_mqa.bias, 11 o_proj.bias
// Values are computed in double, rounded to f32, then stored as the chosen dtype:
//   bf16 (RNE), f32, or f8_e4m3: 2-D weights block-quantized per 128x128 block with
//   scale_inv = amax(block) / 448 (1 for an all-zero block), code = e4m3(W / scale_inv)
//   (RNE, saturating), `<name>_scale_inv` F32 [ceil(out/128), ceil(in/128)] written right
//   after the weight; norms and embed_tokens stay BF16 (as in DeepSeek-V3's FP8 release).
//
// The whole model (--experts E, Kimi K2-Thinking / K2.5 / K2.6's published layout): beside each
// layer's attention, <prefix>layers.{L}.
//   post_attention_layernorm.weight              [H]          norm recipe
//   mlp.{gate,up}_proj.weight / mlp.down_proj    [I, H] / [H, I]      L < first_k_dense_replace
//   mlp.gate.weight                              [E, H]       router, linear recipe
//   mlp.gate.e_score_correction_bias             [E]          F32, N(0, kRouterBiasStd^2)
//   mlp.shared_experts.{gate,up,down}_proj       [I_s, H] / [H, I_s], I_s = I_m * n_shared_experts
//   mlp.experts.{e}.{gate,up,down}_proj          [I_m, H] / [H, I_m]  INT4, below
// and <prefix>norm.weight [H] (norm recipe), lm_head.weight [V, H] beside the "model." part of the
// prefix (linear recipe); the model-level tensors go to the last shard with embed_tokens.
// Routed experts are drawn with the linear recipe, rounded to the dtype (bf16 as Kimi's were
// before quantization), then quantized as compressed-tensors does (int4::quantize: pack-quantized,
// symmetric, one scale per row and group of G inputs) and stored as
//   <stem>.weight_packed I32 [rows, ceil(cols/8)], <stem>.weight_scale <dtype> [rows, cols/G],
//   <stem>.weight_shape I32 [2]  (I32 as in Kimi's shards)
// so the weight the model sees is int4::dequantize of those (docs/checkpoints.md §6).
// Extra streams: 2 norm.weight, 3 lm_head; 1000*(L+1) + 30 post_attention_layernorm, + 31..33
// dense gate/up/down, + 34 router weight, + 35 router bias, + 36..38 shared gate/up/down;
// routed expert e of layer L, projection p (0 gate, 1 up, 2 down): 2^40 + 2^20*L + 4*e + p.
//
// Shape legend: H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r, V = vocab rows written, I = intermediate_size, I_m = moe_intermediate_size,
//   E = routed experts written, G = INT4 group size.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/checkpoint.hpp"
#include "mla/error.hpp"
#include "mla/fp8.hpp"
#include "mla/int4.hpp"
#include "mla/memory_plan.hpp"
#include "mla/output_set.hpp"
#include "mla/random.hpp"
#include "mla/safetensors.hpp"
#include "mla/synth.hpp"

namespace mla {

namespace {

// ---- recipe constants (see the header comment) ---------------------------------------
constexpr double kRowSigma = 0.35;       // log-normal spread of linear row gains
constexpr double kHeadSigma = 0.25;      // log-normal spread of per-head gains
constexpr int kHeavyHeadsPer64 = 4;      // heads with extra gain, per 64 heads (at least 1)
constexpr double kHeavyHeadGain = 1.6;
constexpr double kRopeSinkGainQ = 3.0;   // q rows of the low-frequency half of the rope pairs
constexpr double kRopeSinkGainK = 3.0;   // k_pe rows of the same pairs
constexpr double kNormSigma = 0.2;       // norm weights exp(N(0, 0.2^2))
constexpr double kBiasStd = 0.02;
constexpr double kEmbedStd = 0.05;
constexpr double kRouterBiasStd = 0.05;  // e_score_correction_bias: N(0, 0.05^2), so routing is biased
constexpr int64_t kFp8Block = 128;

constexpr uint64_t kEmbedStream = 0;
constexpr uint64_t kNormStream = 2;
constexpr uint64_t kLmHeadStream = 3;
constexpr uint64_t kStructureStream = 20;

enum TensorKind : uint64_t {
  kInputLayernorm = 0, kQAProj = 1, kQALayernorm = 2, kQBProj = 3, kQProj = 4, kKvAProj = 5,
  kKvALayernorm = 6, kKvBProj = 7, kOProj = 8, kQABias = 9, kKvABias = 10, kOBias = 11,
  // whole model (--experts)
  kPostAttentionLayernorm = 30, kMlpGate = 31, kMlpUp = 32, kMlpDown = 33, kRouter = 34, kRouterBias = 35,
  kSharedGate = 36, kSharedUp = 37, kSharedDown = 38,
};

uint64_t tensor_stream(int64_t layer, uint64_t kind) {
  return 1000u * static_cast<uint64_t>(layer + 1) + kind;
}

// Routed expert e of layer L, projection p (0 gate_proj, 1 up_proj, 2 down_proj).
uint64_t expert_stream(int64_t layer, int64_t expert, int64_t proj) {
  return (uint64_t{1} << 40) + (static_cast<uint64_t>(layer) << 20) + 4u * static_cast<uint64_t>(expert) +
         static_cast<uint64_t>(proj);
}

// How a tensor's values are drawn (see the header).
enum class Recipe { kEmbed, kLinear, kNorm, kBias, kRouterBias };

// Per-layer structure shared by several tensors.
struct LayerStructure {
  std::vector<double> head_gain;  // [n]
};

LayerStructure layer_structure(const AttentionConfig& c, int64_t layer, uint64_t seed) {
  const int64_t n = c.num_attention_heads;
  Rng rng(seed, tensor_stream(layer, kStructureStream));
  LayerStructure s;
  s.head_gain.resize(static_cast<size_t>(n));
  for (auto& g : s.head_gain) g = std::exp(kHeadSigma * rng.normal());
  const int64_t heavy = std::max<int64_t>(1, n * kHeavyHeadsPer64 / 64);
  for (int64_t k = 0; k < heavy; ++k) {
    const auto h = static_cast<size_t>(rng.uniform() * static_cast<double>(n));
    s.head_gain[std::min(h, s.head_gain.size() - 1)] *= kHeavyHeadGain;
  }
  return s;
}

// One tensor to synthesize: name, kind, shape and the per-row structural gain.
struct PlannedTensor {
  std::string name;
  int64_t layer = -1;        // -1 for the model-level tensors (embed_tokens, norm, lm_head)
  uint64_t stream = 0;       // its Rng stream
  Recipe recipe = Recipe::kNorm;
  std::vector<int64_t> shape;
  bool is_linear = false;    // 2-D weight of a layer (quantized in f8 mode)
  bool int4 = false;         // routed expert: pack-quantized INT4 whatever the dtype
  bool f32 = false;          // stored F32 whatever the dtype (e_score_correction_bias)
  std::vector<double> row_structure;  // [out] (linears only)
  uint64_t stored_bytes = 0;          // in the output dtype (weight + scale_inv)
  size_t shard = 0;                   // 1-based
};

// Row gains structure_o of a linear (see header): head gains, and the rope sink pair.
std::vector<double> row_structure(const AttentionConfig& c, const LayerStructure& s, TensorKind kind) {
  const int64_t n = c.num_attention_heads, d_qk = c.qk_head_dim(), d_n = c.qk_nope_head_dim;
  const int64_t d_r = c.qk_rope_head_dim, d_v = c.v_head_dim, r_kv = c.kv_lora_rank;
  const int64_t n_sink = std::max<int64_t>(1, d_r / 4);  // low-frequency half of the d_r/2 pairs
  std::vector<double> g;
  switch (kind) {
    case kQBProj:
    case kQProj:
      g.assign(static_cast<size_t>(n * d_qk), 1.0);
      for (int64_t h = 0; h < n; ++h) {
        for (int64_t d = 0; d < d_qk; ++d) g[static_cast<size_t>(h * d_qk + d)] = s.head_gain[static_cast<size_t>(h)];
        for (int64_t t = d_r - 2 * n_sink; t < d_r; ++t) g[static_cast<size_t>(h * d_qk + d_n + t)] *= kRopeSinkGainQ;
      }
      break;
    case kKvAProj:
      g.assign(static_cast<size_t>(r_kv + d_r), 1.0);
      for (int64_t t = d_r - 2 * n_sink; t < d_r; ++t) g[static_cast<size_t>(r_kv + t)] = kRopeSinkGainK;
      break;
    case kKvBProj:
      g.assign(static_cast<size_t>(n * (d_n + d_v)), 1.0);
      for (int64_t h = 0; h < n; ++h)
        for (int64_t d = 0; d < d_n + d_v; ++d)
          g[static_cast<size_t>(h * (d_n + d_v) + d)] = s.head_gain[static_cast<size_t>(h)];
      break;
    default: break;
  }
  return g;
}

// f32 values of one tensor, from its stream (see header).
std::vector<float> generate_values(const PlannedTensor& t, uint64_t seed) {
  Rng rng(seed, t.stream);
  const int64_t numel = Tensor<float>::count(t.shape);
  std::vector<float> v(static_cast<size_t>(numel));
  if (t.recipe == Recipe::kEmbed) {
    for (auto& x : v) x = static_cast<float>(kEmbedStd * rng.normal());
  } else if (t.recipe == Recipe::kLinear) {
    const int64_t out = t.shape[0], in = t.shape[1];
    std::vector<double> gain(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      const double structure = t.row_structure.empty() ? 1.0 : t.row_structure[static_cast<size_t>(o)];
      gain[static_cast<size_t>(o)] = std::exp(kRowSigma * rng.normal()) * structure / std::sqrt(double(in));
    }
    for (int64_t o = 0; o < out; ++o) {
      const double g = gain[static_cast<size_t>(o)];
      float* row = v.data() + o * in;
      for (int64_t i = 0; i < in; ++i) row[i] = static_cast<float>(g * rng.normal());
    }
  } else if (t.recipe == Recipe::kBias) {
    for (auto& x : v) x = static_cast<float>(kBiasStd * rng.normal());
  } else if (t.recipe == Recipe::kRouterBias) {
    for (auto& x : v) x = static_cast<float>(kRouterBiasStd * rng.normal());
  } else {  // norm weights
    for (auto& x : v) x = static_cast<float>(std::exp(kNormSigma * rng.normal()));
  }
  return v;
}

// Encoded payloads of one planned tensor (one entry, or weight + scale_inv in f8 mode).
struct Encoded {
  std::vector<TensorToWrite> entries;  // spans point into `buffers`
  std::vector<std::vector<std::byte>> buffers;
};

// "<stem>weight" -> "<stem>" (the names compressed-tensors derives the packed tensors' from).
std::string weight_stem(const std::string& name) { return name.substr(0, name.size() - std::string("weight").size()); }

// The names a planned tensor is stored under (what the index maps to its shard).
std::vector<std::string> stored_names(const PlannedTensor& t, const std::string& dtype) {
  if (t.int4) {
    const std::string stem = weight_stem(t.name);
    return {stem + "weight_packed", stem + "weight_scale", stem + "weight_shape"};
  }
  if (dtype == "f8_e4m3" && t.is_linear) return {t.name, t.name + "_scale_inv"};
  return {t.name};
}

void encode_tensor(const PlannedTensor& t, const std::string& dtype, uint64_t seed, int64_t group_size, Encoded& out) {
  std::vector<float> v = generate_values(t, seed);
  const std::vector<uint64_t> shape(t.shape.begin(), t.shape.end());
  out.buffers.clear();
  out.entries.clear();
  if (t.int4) {
    // The weight in the dtype it had before quantization, then compressed-tensors' quantizer.
    const DType wdtype = dtype == "f32" ? DType::F32 : DType::BF16;
    for (float& x : v) x = int4::round_to(wdtype, x);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    int4::Packed p = int4::quantize(v, wdtype, rows, cols, group_size);
    const std::vector<int64_t> ps = int4::packed_shape(rows, cols), ss = int4::scale_shape(rows, cols, group_size);
    const int32_t dims[2] = {static_cast<int32_t>(rows), static_cast<int32_t>(cols)};
    std::vector<std::byte> shape_bytes(sizeof dims);
    std::memcpy(shape_bytes.data(), dims, sizeof dims);  // little-endian hosts only (as the reader)
    out.buffers.push_back(std::move(p.packed));
    out.buffers.push_back(std::move(p.scale));
    out.buffers.push_back(std::move(shape_bytes));
    const std::vector<std::string> names = stored_names(t, dtype);
    out.entries.push_back({names[0], DType::I32, {static_cast<uint64_t>(ps[0]), static_cast<uint64_t>(ps[1])}, out.buffers[0]});
    out.entries.push_back({names[1], wdtype, {static_cast<uint64_t>(ss[0]), static_cast<uint64_t>(ss[1])}, out.buffers[1]});
    out.entries.push_back({names[2], DType::I32, {2}, out.buffers[2]});
    return;
  }
  if (dtype == "f8_e4m3" && t.is_linear) {
    // Per 128x128 block: scale_inv = amax / 448, code = e4m3(W / scale_inv).
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t brows = (rows + kFp8Block - 1) / kFp8Block, bcols = (cols + kFp8Block - 1) / kFp8Block;
    std::vector<float> scale(static_cast<size_t>(brows * bcols), 0.0f);  // [brows, bcols]
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float& s = scale[static_cast<size_t>((i / kFp8Block) * bcols + j / kFp8Block)];
        s = std::max(s, std::fabs(v[static_cast<size_t>(i * cols + j)]));
      }
    for (float& s : scale) s = s > 0.0f ? s / kFp8E4m3Max : 1.0f;
    std::vector<std::byte> codes(v.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t k = static_cast<size_t>(i * cols + j);
        const float s = scale[static_cast<size_t>((i / kFp8Block) * bcols + j / kFp8Block)];
        codes[k] = static_cast<std::byte>(float_to_fp8_e4m3fn(v[k] / s));
      }
    out.buffers.push_back(std::move(codes));
    out.buffers.push_back(encode_f32(scale));
    out.entries.push_back({t.name, DType::F8_E4M3, shape, out.buffers[0]});
    out.entries.push_back({t.name + "_scale_inv", DType::F32,
                           {static_cast<uint64_t>(brows), static_cast<uint64_t>(bcols)}, out.buffers[1]});
    return;
  }
  if (dtype == "f32" || t.f32) {
    out.buffers.push_back(encode_f32(v));
    out.entries.push_back({t.name, DType::F32, shape, out.buffers[0]});
  } else {  // bf16, and the norms / embeddings of f8_e4m3
    out.buffers.push_back(encode_bf16(v));
    out.entries.push_back({t.name, DType::BF16, shape, out.buffers[0]});
  }
}

uint64_t stored_bytes(const PlannedTensor& t, const std::string& dtype, int64_t group_size) {
  const auto numel = static_cast<uint64_t>(Tensor<float>::count(t.shape));
  if (t.int4) {
    const auto rows = static_cast<uint64_t>(t.shape[0]), cols = static_cast<uint64_t>(t.shape[1]);
    return 4 * rows * ((cols + 7) / 8) + (dtype == "f32" ? 4 : 2) * rows * (cols / static_cast<uint64_t>(group_size)) + 8;
  }
  if (t.f32) return 4 * numel;
  if (dtype == "f8_e4m3" && t.is_linear) {
    const uint64_t brows = (static_cast<uint64_t>(t.shape[0]) + 127) / 128;
    const uint64_t bcols = (static_cast<uint64_t>(t.shape[1]) + 127) / 128;
    return numel + 4 * brows * bcols;
  }
  if (dtype == "f32") return 4 * numel;
  return 2 * numel;
}

std::vector<PlannedTensor> plan_layer(const AttentionConfig& c, int64_t L, uint64_t seed, const std::string& prefix,
                                      const ModelConfig* d) {
  const int64_t H = c.hidden_size, n = c.num_attention_heads, r_q = c.q_lora_rank, r_kv = c.kv_lora_rank;
  const int64_t d_qk = c.qk_head_dim(), d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim, d_v = c.v_head_dim;
  const LayerStructure s = layer_structure(c, L, seed);
  const std::string base = prefix + "layers." + std::to_string(L) + ".";
  std::vector<PlannedTensor> p;
  auto add = [&](const std::string& suffix, TensorKind kind, std::vector<int64_t> shape) {
    PlannedTensor t;
    t.name = base + suffix;
    t.layer = L;
    t.stream = tensor_stream(L, kind);
    t.is_linear = shape.size() == 2;
    t.recipe = t.is_linear ? Recipe::kLinear
               : (kind == kQABias || kind == kKvABias || kind == kOBias) ? Recipe::kBias
               : kind == kRouterBias ? Recipe::kRouterBias
                                     : Recipe::kNorm;
    t.f32 = kind == kRouterBias;
    t.shape = std::move(shape);
    if (t.is_linear) t.row_structure = row_structure(c, s, kind);
    p.push_back(std::move(t));
  };
  add("input_layernorm.weight", kInputLayernorm, {H});
  if (c.has_q_lora()) {
    add("self_attn.q_a_proj.weight", kQAProj, {r_q, H});
    if (c.attention_bias) add("self_attn.q_a_proj.bias", kQABias, {r_q});
    add("self_attn.q_a_layernorm.weight", kQALayernorm, {r_q});
    add("self_attn.q_b_proj.weight", kQBProj, {n * d_qk, r_q});
  } else {
    add("self_attn.q_proj.weight", kQProj, {n * d_qk, H});
  }
  add("self_attn.kv_a_proj_with_mqa.weight", kKvAProj, {r_kv + d_r, H});
  if (c.attention_bias) add("self_attn.kv_a_proj_with_mqa.bias", kKvABias, {r_kv + d_r});
  add("self_attn.kv_a_layernorm.weight", kKvALayernorm, {r_kv});
  add("self_attn.kv_b_proj.weight", kKvBProj, {n * (d_n + d_v), r_kv});
  add("self_attn.o_proj.weight", kOProj, {H, n * d_v});
  if (c.attention_bias) add("self_attn.o_proj.bias", kOBias, {H});
  if (!d) return p;
  // The whole model: the layer's MLP (dense, or router + shared expert + routed experts).
  add("post_attention_layernorm.weight", kPostAttentionLayernorm, {H});
  if (L < d->first_k_dense_replace) {
    const int64_t I = d->intermediate_size;
    add("mlp.gate_proj.weight", kMlpGate, {I, H});
    add("mlp.up_proj.weight", kMlpUp, {I, H});
    add("mlp.down_proj.weight", kMlpDown, {H, I});
    return p;
  }
  const int64_t E = d->n_routed_experts, I_m = d->moe_intermediate_size, I_s = I_m * d->n_shared_experts;
  add("mlp.gate.weight", kRouter, {E, H});
  if (c.family == ModelFamily::DeepseekV3) add("mlp.gate.e_score_correction_bias", kRouterBias, {E});  // V2: none
  if (I_s > 0) {
    add("mlp.shared_experts.gate_proj.weight", kSharedGate, {I_s, H});
    add("mlp.shared_experts.up_proj.weight", kSharedUp, {I_s, H});
    add("mlp.shared_experts.down_proj.weight", kSharedDown, {H, I_s});
  }
  static const char* const kProj[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < 3; ++k) {
      PlannedTensor t;
      t.name = base + "mlp.experts." + std::to_string(e) + "." + kProj[k] + ".weight";
      t.layer = L;
      t.stream = expert_stream(L, e, k);
      t.recipe = Recipe::kLinear;
      t.is_linear = true;
      t.int4 = true;
      t.shape = k == 2 ? std::vector<int64_t>{H, I_m} : std::vector<int64_t>{I_m, H};
      p.push_back(std::move(t));
    }
  return p;
}

std::string shard_file_name(size_t index, size_t total) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%06zu.safetensors", index, total);
  return buf;
}

// Encodes the shard's tensors (in parallel; each has its own stream, so the bytes do not
// depend on the thread count) and writes the shard.
void write_shard(const std::string& path, const std::vector<const PlannedTensor*>& tensors, const std::string& dtype,
                 uint64_t seed, int64_t group_size, const std::string& origin) {
  std::vector<Encoded> encoded(tensors.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < tensors.size(); k = next++) encode_tensor(*tensors[k], dtype, seed, group_size, encoded[k]);
  };
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(1, tensors.size()));
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  std::vector<TensorToWrite> entries;
  for (const auto& e : encoded) entries.insert(entries.end(), e.entries.begin(), e.entries.end());
  write_safetensors(path, entries, {{"format", "pt"}, {kSynthMetadataKey, origin}});
}

// "0,1,...,L-1"
std::string layer_range_text(int64_t L) {
  std::string t;
  for (int64_t i = 0; i < L; ++i) t += (i ? "," : "") + std::to_string(i);
  return t;
}

// What synth writes for a set of options: the config (vocabulary and, for the whole model,
// layer count and quantization set), the whole model's config (whole model only) and every tensor.
struct CheckpointPlan {
  ModelConfig model;   // its attention is what config.json says; the decoder keys count when `whole`
  bool whole = false;  // the whole model (opts.experts > 0), else attention only
  std::vector<PlannedTensor> tensors;
  uint64_t total_bytes = 0;
};

// The whole model's checks (--experts > 0) and its keys: layers 0 .. L-1, the routed experts and
// Kimi's INT4 quantization set.
void plan_whole_model(const SynthOptions& opts, const std::set<int64_t>& seen, CheckpointPlan& plan) {
  ModelConfig& d = plan.model;
  AttentionConfig& cfg = d.attention;
  const std::string E = std::to_string(opts.experts), G = std::to_string(opts.group_size);
  if (opts.dtype == "f8_e4m3")
    fail(ErrorKind::InvalidArgument, "synth: --experts writes Kimi's layout (INT4 routed experts, the rest bf16 or f32); "
                                     "--dtype f8_e4m3 is not part of it");
  // The layers of a whole model are 0 .. L-1 (the forward reads them all).
  const auto L = static_cast<int64_t>(seen.size());
  if (*seen.rbegin() != L - 1) {
    int64_t missing = 0;
    while (seen.count(missing)) ++missing;
    fail(ErrorKind::InvalidArgument, "synth: --experts writes a whole model, whose layers are 0 .. L-1; --layers lacks layer " +
                                         std::to_string(missing));
  }
  if (L <= d.first_k_dense_replace)
    fail(ErrorKind::InvalidArgument, "synth: --layers writes only the dense layers 0 .. " + std::to_string(L - 1) +
                                         " (first_k_dense_replace " + std::to_string(d.first_k_dense_replace) +
                                         "), so no routed expert; list more layers, e.g. --layers " + layer_range_text(L + 1));
  if (opts.experts % d.n_group != 0)
    fail(ErrorKind::InvalidArgument, "synth: --experts " + E + " is not divisible by n_group " + std::to_string(d.n_group) +
                                         " (experts are routed in n_group equal groups)");
  if (d.topk_method == "noaux_tc" && opts.experts / d.n_group < 2)
    fail(ErrorKind::InvalidArgument, "synth: --experts " + E + " leaves " + std::to_string(opts.experts / d.n_group) +
                                         " expert per group of n_group " + std::to_string(d.n_group) +
                                         "; a group's score is the sum of its top 2, so it needs at least 2");
  if (opts.group_size <= 0) fail(ErrorKind::InvalidArgument, "synth: --group-size must be > 0, got " + G);
  if (cfg.hidden_size % opts.group_size != 0)
    fail(ErrorKind::InvalidArgument, "synth: --group-size " + G + " does not divide hidden_size " +
                                         std::to_string(cfg.hidden_size) + " (the input width of gate_proj and up_proj)");
  if (d.moe_intermediate_size % opts.group_size != 0)
    fail(ErrorKind::InvalidArgument, "synth: --group-size " + G + " does not divide moe_intermediate_size " +
                                         std::to_string(d.moe_intermediate_size) + " (the input width of down_proj)");
  d.n_routed_experts = opts.experts;
  // A token picks k among the experts of its topk_group groups; fewer experts than the
  // preset's k leave k at what they allow.
  d.num_experts_per_tok = std::min(d.num_experts_per_tok, d.topk_group * (opts.experts / d.n_group));
  cfg.num_hidden_layers = L;
  cfg.quantization = kimi_int4_quantization();
  cfg.quantization.scheme.group_size = opts.group_size;
  plan.whole = true;
}

// Every tensor of the listed layers, then the model-level ones (embedding; norm and lm_head for
// the whole model).
void plan_tensors(const SynthOptions& opts, const std::set<int64_t>& seen, CheckpointPlan& plan) {
  const AttentionConfig& cfg = plan.model.attention;
  const std::string prefix = cfg.nested_text_config ? "language_model.model." : "model.";
  const ModelConfig* d = plan.whole ? &plan.model : nullptr;
  for (int64_t L : seen) {
    auto p = plan_layer(cfg, L, opts.seed, prefix, d);
    plan.tensors.insert(plan.tensors.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
  }
  PlannedTensor embed;
  embed.name = prefix + "embed_tokens.weight";
  embed.stream = kEmbedStream;
  embed.recipe = Recipe::kEmbed;
  embed.shape = {cfg.vocab_size, cfg.hidden_size};
  plan.tensors.push_back(embed);
  if (d) {
    PlannedTensor norm;
    norm.name = prefix + "norm.weight";
    norm.stream = kNormStream;
    norm.recipe = Recipe::kNorm;
    norm.shape = {cfg.hidden_size};
    plan.tensors.push_back(norm);
    // lm_head sits beside the "model." part of the prefix (transformers' DeepseekV3ForCausalLM).
    PlannedTensor head;
    head.name = prefix.substr(0, prefix.size() - std::string("model.").size()) + "lm_head.weight";
    head.stream = kLmHeadStream;
    head.recipe = Recipe::kLinear;
    head.shape = {cfg.vocab_size, cfg.hidden_size};
    plan.tensors.push_back(head);
  }
}

// Shard assignment: layers over 1..N-1 by cumulative bytes, the model-level tensors in N.
void assign_shards(const SynthOptions& opts, CheckpointPlan& plan) {
  const auto N = static_cast<size_t>(opts.shards);
  uint64_t layer_bytes = 0;
  for (auto& t : plan.tensors) {
    // The model-level tensors and the norms stay BF16 in f8 mode (is_linear is false for them).
    t.stored_bytes = stored_bytes(t, opts.dtype, opts.group_size);
    plan.total_bytes += t.stored_bytes;
    if (t.layer >= 0) layer_bytes += t.stored_bytes;
  }
  uint64_t before = 0;
  for (auto& t : plan.tensors) {
    if (t.layer < 0) {
      t.shard = N;
      continue;
    }
    t.shard = 1 + static_cast<size_t>(before * (N - 1) / layer_bytes);  // < 2^64: bytes < 2^47, N < 2^17
    before += t.stored_bytes;
  }
}

// Checks the options against the config (one error line each, before anything is written) and
// plans every tensor with its shard.
CheckpointPlan plan_checkpoint(const SynthOptions& opts, const ModelConfig& model_in) {
  if (opts.dtype != "bf16" && opts.dtype != "f32" && opts.dtype != "f8_e4m3")
    fail(ErrorKind::InvalidArgument, "synth: dtype '" + opts.dtype + "' is not one of bf16, f32, f8_e4m3");
  if (opts.shards < 2) fail(ErrorKind::InvalidArgument, "synth: --shards must be >= 2 (index + shards layout), got " +
                                                            std::to_string(opts.shards));
  if (opts.shards > kSynthMaxShards)
    fail(ErrorKind::InvalidArgument, "synth: --shards must be <= " + std::to_string(kSynthMaxShards));
  if (opts.layers.empty()) fail(ErrorKind::InvalidArgument, "synth: no layers requested (--layers)");
  CheckpointPlan plan;
  plan.model = model_in;
  AttentionConfig& cfg = plan.model.attention;
  if (opts.vocab < 0) fail(ErrorKind::InvalidArgument, "synth: --vocab must be > 0");
  if (opts.vocab > 0) cfg.vocab_size = opts.vocab;
  if (cfg.vocab_size <= 0 || cfg.hidden_size <= 0 || cfg.num_attention_heads <= 0 || cfg.kv_lora_rank <= 0 ||
      cfg.qk_rope_head_dim < 2 || cfg.qk_rope_head_dim % 2 != 0 || cfg.qk_nope_head_dim <= 0 || cfg.v_head_dim <= 0)
    fail(ErrorKind::InvalidArgument, "synth: the config's geometry is invalid (sizes must be > 0, qk_rope_head_dim even)");
  if (opts.experts < 0) fail(ErrorKind::InvalidArgument, "synth: --experts must be > 0");
  const bool whole = opts.experts > 0;
  std::set<int64_t> seen;
  for (int64_t L : opts.layers) {
    if (L < 0 || (!whole && L >= cfg.num_hidden_layers))
      fail(ErrorKind::InvalidArgument, "synth: layer " + std::to_string(L) + " is out of range [0, " +
                                           std::to_string(cfg.num_hidden_layers) + ")");
    if (!seen.insert(L).second) fail(ErrorKind::InvalidArgument, "synth: layer " + std::to_string(L) + " listed twice");
  }
  if (whole) plan_whole_model(opts, seen, plan);
  plan_tensors(opts, seen, plan);
  assign_shards(opts, plan);
  return plan;
}

}  // namespace

std::vector<float> synthesized_values(const SynthOptions& opts, const ModelConfig& model, const std::string& name) {
  const CheckpointPlan plan = plan_checkpoint(opts, model);
  for (const PlannedTensor& t : plan.tensors)
    if (t.name == name) return generate_values(t, opts.seed);
  fail(ErrorKind::TensorNotFound, "synth: writes no tensor '" + name + "'");
}

namespace {

// The planned checkpoint's files into an open output set.
void write_planned(const SynthOptions& opts, const CheckpointPlan& plan, OutputSet& out) {
  const AttentionConfig& cfg = plan.model.attention;
  const auto N = static_cast<size_t>(opts.shards);

  // Shards, index, config, into the output set: the directory gets the whole checkpoint or
  // keeps what it held.
  std::map<std::string, std::string> weight_map;
  for (size_t s = 1; s <= N; ++s) {
    std::vector<const PlannedTensor*> in_shard;
    for (const auto& t : plan.tensors)
      if (t.shard == s) in_shard.push_back(&t);
    const std::string file = shard_file_name(s, N);
    std::string origin = "mla-h2o synth: model_type " + cfg.model_type + ", dtype " + opts.dtype;
    if (plan.whole) origin += ", " + std::to_string(opts.experts) + " routed experts INT4 group size " + std::to_string(opts.group_size);
    write_shard(out.add(file), in_shard, opts.dtype, opts.seed, opts.group_size, origin + ", seed " + std::to_string(opts.seed));
    for (const auto* t : in_shard)
      for (const std::string& name : stored_names(*t, opts.dtype)) weight_map[name] = file;
  }
  std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(plan.total_bytes) +
                      "\n  },\n  \"weight_map\": {\n";
  size_t k = 0;
  for (const auto& [name, file] : weight_map)
    index += "    \"" + name + "\": \"" + file + "\"" + (++k < weight_map.size() ? ",\n" : "\n");
  index += "  }\n}\n";
  out.write("model.safetensors.index.json", index);
  out.write("config.json", plan.whole ? model_config_to_json(plan.model, cfg.nested_text_config)
                                      : config_to_json(cfg, cfg.nested_text_config));
}

// The options' plan, refused with one line when a shard cannot be built in memory (memory_plan.cpp).
CheckpointPlan plan_within_memory(const SynthOptions& opts, const ModelConfig& model) {
  CheckpointPlan plan = plan_checkpoint(opts, model);
  const MemoryPlan mp = plan_synth_memory(opts, model, host_memory_budget());
  if (!mp.fits) fail(ErrorKind::Unsupported, mp.refusal);
  return plan;
}

}  // namespace

MemoryEstimate estimate_synth_memory(const SynthOptions& opts, const ModelConfig& model) {
  const CheckpointPlan plan = plan_checkpoint(opts, model);
  const auto N = static_cast<size_t>(opts.shards);
  std::vector<int64_t> shard_bytes(N + 1, 0);
  for (const auto& t : plan.tensors) shard_bytes[t.shard] += static_cast<int64_t>(t.stored_bytes);  // < 2^47 bytes
  std::vector<MemoryPhase> phases;
  for (size_t i = 1; i <= N; ++i)
    phases.push_back({"shard " + shard_file_name(i, N) + " built in memory before it is written",
                      {{"its tensors as stored (" + opts.dtype + ")", shard_bytes[i]}}});
  return estimate_of_phases(std::move(phases), 0, kSynthProcessBytes);
}

void write_synthetic_checkpoint(const SynthOptions& opts, const ModelConfig& model, OutputSet& out) {
  write_planned(opts, plan_within_memory(opts, model), out);
}

namespace {

void synthesize_planned(const SynthOptions& opts, const CheckpointPlan& plan) {
  if (opts.out_dir.empty()) fail(ErrorKind::InvalidArgument, "synth: no output directory given (--out DIR)");
  OutputSet out(opts.out_dir, "synth");
  write_planned(opts, plan, out);
  out.commit();
}

}  // namespace

// a bad option fails (in plan_checkpoint) before the directory is touched
void synthesize_checkpoint(const SynthOptions& opts, const ModelConfig& model) {
  synthesize_planned(opts, plan_within_memory(opts, model));
}

const std::vector<std::string>& synth_presets() {
  static const std::vector<std::string> names = {"kimi-k2.6", "deepseek-v3", "deepseek-v2-lite", "moonlight-16b-a3b", "tiny"};
  return names;
}

std::string synth_preset_names() {
  std::string s;
  for (const std::string& n : synth_presets()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

ModelConfig synth_preset_model(const SynthOptions& opts) {
  ModelConfig m;
  int64_t default_vocab = 1024;  // a real vocabulary (~100-160 k rows) would dominate the file
  if (opts.preset == "kimi-k2.6") m = kimi_k26_model();
  else if (opts.preset == "deepseek-v3") m = deepseek_v3_model();
  else if (opts.preset == "deepseek-v2-lite") m = deepseek_v2_lite_model();
  else if (opts.preset == "moonlight-16b-a3b") m = moonlight_model();
  else if (opts.preset == "tiny") {
    m = tiny_model();
    default_vocab = 97;
  } else {
    fail(ErrorKind::InvalidArgument, "synth: preset '" + opts.preset + "' is not one of " + synth_preset_names());
  }
  m.attention.vocab_size = opts.vocab > 0 ? opts.vocab : default_vocab;
  // the special tokens of a real vocabulary are past the rows written
  if (m.bos_token_id >= m.attention.vocab_size) m.bos_token_id = -1;
  if (m.eos_token_id >= m.attention.vocab_size) m.eos_token_id = -1;
  return m;
}

ModelConfig synthesize_checkpoint(const SynthOptions& opts) {
  SynthOptions o = opts;
  const ModelConfig m = synth_preset_model(opts);
  o.vocab = m.attention.vocab_size;
  const CheckpointPlan plan = plan_within_memory(o, m);  // attention only unless opts.experts > 0
  synthesize_planned(o, plan);
  return plan.model;
}

}  // namespace mla
