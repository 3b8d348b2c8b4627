// src/model/synth.cpp — synthetic checkpoints with the real Kimi K2.6 layout (`mla-h2o synth`).
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
// Shape legend: H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r, V = vocab rows written.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/checkpoint.hpp"
#include "mla/error.hpp"
#include "mla/fp8.hpp"
#include "mla/random.hpp"
#include "mla/safetensors.hpp"

namespace mla {
namespace fs = std::filesystem;

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
constexpr int64_t kFp8Block = 128;

constexpr uint64_t kEmbedStream = 0;
constexpr uint64_t kStructureStream = 20;

enum TensorKind : uint64_t {
  kInputLayernorm = 0, kQAProj = 1, kQALayernorm = 2, kQBProj = 3, kQProj = 4, kKvAProj = 5,
  kKvALayernorm = 6, kKvBProj = 7, kOProj = 8, kQABias = 9, kKvABias = 10, kOBias = 11,
};

uint64_t tensor_stream(int64_t layer, uint64_t kind) {
  return 1000u * static_cast<uint64_t>(layer + 1) + kind;
}

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
  int64_t layer = -1;        // -1 for embed_tokens
  TensorKind kind = kInputLayernorm;
  std::vector<int64_t> shape;
  bool is_linear = false;    // 2-D weight (quantized in f8 mode)
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
  const uint64_t stream = t.layer < 0 ? kEmbedStream : tensor_stream(t.layer, t.kind);
  Rng rng(seed, stream);
  const int64_t numel = Tensor<float>::count(t.shape);
  std::vector<float> v(static_cast<size_t>(numel));
  if (t.layer < 0) {  // embed_tokens
    for (auto& x : v) x = static_cast<float>(kEmbedStd * rng.normal());
  } else if (t.is_linear) {
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
  } else if (t.kind == kQABias || t.kind == kKvABias || t.kind == kOBias) {
    for (auto& x : v) x = static_cast<float>(kBiasStd * rng.normal());
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

void encode_tensor(const PlannedTensor& t, const std::string& dtype, uint64_t seed, Encoded& out) {
  const std::vector<float> v = generate_values(t, seed);
  const std::vector<uint64_t> shape(t.shape.begin(), t.shape.end());
  out.buffers.clear();
  out.entries.clear();
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
  if (dtype == "f32") {
    out.buffers.push_back(encode_f32(v));
    out.entries.push_back({t.name, DType::F32, shape, out.buffers[0]});
  } else {  // bf16, and the norms / embeddings of f8_e4m3
    out.buffers.push_back(encode_bf16(v));
    out.entries.push_back({t.name, DType::BF16, shape, out.buffers[0]});
  }
}

uint64_t stored_bytes(const PlannedTensor& t, const std::string& dtype) {
  const auto numel = static_cast<uint64_t>(Tensor<float>::count(t.shape));
  if (dtype == "f8_e4m3" && t.is_linear) {
    const uint64_t brows = (static_cast<uint64_t>(t.shape[0]) + 127) / 128;
    const uint64_t bcols = (static_cast<uint64_t>(t.shape[1]) + 127) / 128;
    return numel + 4 * brows * bcols;
  }
  if (dtype == "f32") return 4 * numel;
  return 2 * numel;
}

std::vector<PlannedTensor> plan_layer(const AttentionConfig& c, int64_t L, uint64_t seed, const std::string& prefix) {
  const int64_t H = c.hidden_size, n = c.num_attention_heads, r_q = c.q_lora_rank, r_kv = c.kv_lora_rank;
  const int64_t d_qk = c.qk_head_dim(), d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim, d_v = c.v_head_dim;
  const LayerStructure s = layer_structure(c, L, seed);
  const std::string base = prefix + "layers." + std::to_string(L) + ".";
  std::vector<PlannedTensor> p;
  auto add = [&](const std::string& suffix, TensorKind kind, std::vector<int64_t> shape) {
    PlannedTensor t;
    t.name = base + suffix;
    t.layer = L;
    t.kind = kind;
    t.is_linear = shape.size() == 2;
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
  return p;
}

std::string shard_file_name(size_t index, size_t total) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%06zu.safetensors", index, total);
  return buf;
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(ErrorKind::Io, "cannot write '" + path.string() + "'");
  f << text;
  f.close();
  if (!f) fail(ErrorKind::Io, "write error on '" + path.string() + "'");
}

// Encodes the shard's tensors (in parallel; each has its own stream, so the bytes do not
// depend on the thread count) and writes the shard.
void write_shard(const fs::path& path, const std::vector<const PlannedTensor*>& tensors, const std::string& dtype,
                 uint64_t seed, const std::string& origin) {
  std::vector<Encoded> encoded(tensors.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < tensors.size(); k = next++) encode_tensor(*tensors[k], dtype, seed, encoded[k]);
  };
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(1, tensors.size()));
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  std::vector<TensorToWrite> entries;
  for (const auto& e : encoded) entries.insert(entries.end(), e.entries.begin(), e.entries.end());
  write_safetensors(path.string(), entries, {{"format", "pt"}, {kSynthMetadataKey, origin}});
}

}  // namespace

void synthesize_checkpoint(const SynthOptions& opts, const AttentionConfig& cfg_in) {
  if (opts.out_dir.empty()) fail(ErrorKind::InvalidArgument, "synth: no output directory given (--out DIR)");
  if (opts.dtype != "bf16" && opts.dtype != "f32" && opts.dtype != "f8_e4m3")
    fail(ErrorKind::InvalidArgument, "synth: dtype '" + opts.dtype + "' is not one of bf16, f32, f8_e4m3");
  if (opts.shards < 2) fail(ErrorKind::InvalidArgument, "synth: --shards must be >= 2 (index + shards layout), got " +
                                                            std::to_string(opts.shards));
  if (opts.shards > 99999) fail(ErrorKind::InvalidArgument, "synth: --shards must be <= 99999");
  if (opts.layers.empty()) fail(ErrorKind::InvalidArgument, "synth: no layers requested (--layers)");
  AttentionConfig cfg = cfg_in;
  if (opts.vocab < 0) fail(ErrorKind::InvalidArgument, "synth: --vocab must be > 0");
  if (opts.vocab > 0) cfg.vocab_size = opts.vocab;
  if (cfg.vocab_size <= 0 || cfg.hidden_size <= 0 || cfg.num_attention_heads <= 0 || cfg.kv_lora_rank <= 0 ||
      cfg.qk_rope_head_dim < 2 || cfg.qk_rope_head_dim % 2 != 0 || cfg.qk_nope_head_dim <= 0 || cfg.v_head_dim <= 0)
    fail(ErrorKind::InvalidArgument, "synth: the config's geometry is invalid (sizes must be > 0, qk_rope_head_dim even)");
  std::set<int64_t> seen;
  for (int64_t L : opts.layers) {
    if (L < 0 || L >= cfg.num_hidden_layers)
      fail(ErrorKind::InvalidArgument, "synth: layer " + std::to_string(L) + " is out of range [0, " +
                                           std::to_string(cfg.num_hidden_layers) + ")");
    if (!seen.insert(L).second) fail(ErrorKind::InvalidArgument, "synth: layer " + std::to_string(L) + " listed twice");
  }

  const std::string prefix = cfg.nested_text_config ? "language_model.model." : "model.";
  std::vector<PlannedTensor> plan;
  for (int64_t L : seen) {
    auto p = plan_layer(cfg, L, opts.seed, prefix);
    plan.insert(plan.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
  }
  PlannedTensor embed;
  embed.name = prefix + "embed_tokens.weight";
  embed.shape = {cfg.vocab_size, cfg.hidden_size};
  plan.push_back(embed);

  // Shard assignment: layers over 1..N-1 by cumulative bytes, embed_tokens in N.
  const auto N = static_cast<size_t>(opts.shards);
  uint64_t layer_bytes = 0, total_bytes = 0;
  for (auto& t : plan) {
    // embed_tokens and norms stay BF16 in f8 mode (is_linear is false for the embedding).
    t.stored_bytes = stored_bytes(t, opts.dtype);
    total_bytes += t.stored_bytes;
    if (t.layer >= 0) layer_bytes += t.stored_bytes;
  }
  uint64_t before = 0;
  for (auto& t : plan) {
    if (t.layer < 0) {
      t.shard = N;
      continue;
    }
    t.shard = 1 + static_cast<size_t>(before * (N - 1) / layer_bytes);  // < 2^64: bytes < 2^47, N < 2^17
    before += t.stored_bytes;
  }

  const fs::path dir(opts.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) fail(ErrorKind::Io, "synth: cannot create directory '" + opts.out_dir + "'");

  // Shards, index, config — written in that order so that a complete config.json means a
  // complete checkpoint.
  std::map<std::string, std::string> weight_map;
  for (size_t s = 1; s <= N; ++s) {
    std::vector<const PlannedTensor*> in_shard;
    for (const auto& t : plan)
      if (t.shard == s) in_shard.push_back(&t);
    const std::string file = shard_file_name(s, N);
    write_shard(dir / file, in_shard, opts.dtype, opts.seed,
                "mla-h2o synth: model_type " + cfg.model_type + ", dtype " + opts.dtype + ", seed " + std::to_string(opts.seed));
    for (const auto* t : in_shard) {
      weight_map[t->name] = file;
      if (opts.dtype == "f8_e4m3" && t->is_linear) weight_map[t->name + "_scale_inv"] = file;
    }
  }
  std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_bytes) +
                      "\n  },\n  \"weight_map\": {\n";
  size_t k = 0;
  for (const auto& [name, file] : weight_map)
    index += "    \"" + name + "\": \"" + file + "\"" + (++k < weight_map.size() ? ",\n" : "\n");
  index += "  }\n}\n";
  write_text_file(dir / "model.safetensors.index.json", index);
  write_text_file(dir / "config.json", config_to_json(cfg, cfg.nested_text_config));
}

AttentionConfig synthesize_checkpoint(const SynthOptions& opts) {
  AttentionConfig cfg;
  int64_t default_vocab = 0;
  if (opts.preset == "kimi-k2.6") {
    cfg = kimi_k26_config();
    default_vocab = 1024;
  } else if (opts.preset == "tiny") {
    cfg = tiny_config();
    default_vocab = 97;
  } else {
    fail(ErrorKind::InvalidArgument, "synth: preset '" + opts.preset + "' is not one of kimi-k2.6, tiny");
  }
  cfg.vocab_size = opts.vocab > 0 ? opts.vocab : default_vocab;
  SynthOptions o = opts;
  o.vocab = cfg.vocab_size;
  synthesize_checkpoint(o, cfg);
  return cfg;
}

}  // namespace mla
