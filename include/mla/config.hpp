// mla/config.hpp — the attention geometry and RoPE settings of a checkpoint's config.json.
//
// Field names are the config.json keys. Accepted layouts:
//   * flat (DeepSeek-V3, Kimi K2/K2-0905/K2-Thinking, Moonlight: model_type deepseek_v3 / kimi_k2;
//     DeepSeek-V2 / V2-Lite: model_type deepseek_v2)
//   * nested under "text_config" (Kimi K2.5 / K2.6: model_type kimi_k25)
//   * RoPE under "rope_scaling" (transformers 4.x) or "rope_parameters" (transformers 5,
//     which may also hold rope_theta); the type under "type" or "rope_type";
//     "rope_scaling": null means plain RoPE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mla {

struct RopeConfig {
  std::string rope_type = "default";  // "default" (plain RoPE) or "yarn"
  double rope_theta = 10000.0;        // base
  // yarn only:
  double factor = 1.0;
  double original_max_position_embeddings = 0;  // falls back to max_position_embeddings
  double beta_fast = 32.0;                      // `get(...) or 32`: missing or 0 -> 32
  double beta_slow = 1.0;                       // `get(...) or 1`
  double mscale = 1.0;                          // 0 when absent (HF: get("mscale"))
  double mscale_all_dim = 0.0;                  // 0 when absent
  std::optional<double> attention_factor;       // explicit override of the cos/sin multiplier
  bool truncate = true;
  bool is_yarn() const { return rope_type == "yarn"; }
  bool operator==(const RopeConfig&) const = default;
};

// config.json's compressed-tensors `quantization_config` (Kimi K2-Thinking, K2.5, K2.6: routed
// experts in pack-quantized INT4, docs/checkpoints.md §6). Read from
// text_config.quantization_config, else the top level, and only when its quant_method is
// "compressed-tensors" (DeepSeek-V3's {"quant_method": "fp8", ...} is the FP8 block format,
// read from the tensors themselves). The values are kept as written; whether this project can
// dequantize them is decided when a packed tensor is read (unsupported_reason()), so that the
// bf16 attention of a checkpoint whose experts use another scheme still loads.
struct PackQuantization {
  // One config group's weight scheme (Kimi has one group).
  struct Scheme {
    std::string format;       // "pack-quantized" (the group's own "format", else the top-level one)
    int64_t num_bits = 0;     // 4
    std::string type;         // "int"
    bool symmetric = true;
    std::string strategy;     // "group"
    int64_t group_size = 0;   // 32
    bool dynamic = false;
    std::string actorder;     // "" (null or false), "weight" / "static" (storage unchanged), "group" / "dynamic"
    bool operator==(const Scheme&) const = default;
  };
  bool present = false;
  Scheme scheme;             // the first weight group's
  int64_t weight_groups = 0; // config groups that quantize weights
  bool mixed_schemes = false;  // those groups' schemes differ
  std::string preset_group;  // a group given as a preset name ({"W4A16": ["Linear"]}), not read
  std::vector<std::string> ignore;  // module names or "re:" patterns kept unquantized
  std::vector<std::string> targets; // of the weight groups ("Linear")

  // "" when pack-quantized weights of this scheme can be dequantized here, else why not,
  // e.g. "has num_bits 8; only 4 is supported".
  std::string unsupported_reason() const;
  bool operator==(const PackQuantization&) const = default;
};

// The transformers model class a config.json names: it fixes how RoPE is applied and how the
// MoE router scores and picks experts (docs/math.md §6, §15.2). model_type "deepseek_v2" (or,
// without a model_type, architectures ["DeepseekV2ForCausalLM"]) is DeepseekV2; everything else
// this project reads (deepseek_v3, kimi_k2, kimi_k25) is DeepseekV3.
enum class ModelFamily { DeepseekV3, DeepseekV2 };
// "DeepseekV3ForCausalLM" / "DeepseekV2ForCausalLM"
const char* family_class_name(ModelFamily family);

// How the rope half (d_r values of q_pe / k_pe) is rotated (docs/math.md §6). Pair i turns by
// frequency i; where its two values sit before and after:
//   Split       DeepseekV3, rope_interleave false: (i, i + d_r/2) in and out (rotate_half)
//   Interleave  DeepseekV3, rope_interleave true:  (2i, 2i + 1) in, (i, i + d_r/2) out
//   Complex     DeepseekV2 (apply_rotary_emb):     (2i, 2i + 1) in and out, one complex product
//               in fp32 whatever the model dtype, rounded once to it
enum class RopeStyle { Split, Interleave, Complex };
// "split" / "interleave" / "complex"
const char* rope_style_name(RopeStyle style);

struct AttentionConfig {
  std::string model_type;          // as found (outer one for nested configs)
  ModelFamily family = ModelFamily::DeepseekV3;
  bool nested_text_config = false;  // true when read from "text_config"
  int64_t hidden_size = 0;          // H
  int64_t num_attention_heads = 0;  // n_h
  int64_t num_key_value_heads = 0;  // must equal num_attention_heads for MLA
  int64_t q_lora_rank = 0;          // d_c' ; 0 when null (q_proj instead of q_a/q_b)
  int64_t kv_lora_rank = 0;         // d_c
  int64_t qk_nope_head_dim = 0;     // d_h
  int64_t qk_rope_head_dim = 0;     // d_h^R
  int64_t v_head_dim = 0;
  int64_t num_hidden_layers = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool attention_bias = false;   // biases on q_a_proj / q_proj? / kv_a_proj_with_mqa / o_proj
  bool rope_interleave = true;   // HF DeepseekV3 default; Kimi configs don't set it; DeepseekV2 does not read it
  RopeConfig rope;
  PackQuantization quantization;  // present only for compressed-tensors checkpoints

  bool has_q_lora() const { return q_lora_rank > 0; }
  RopeStyle rope_style() const {
    if (family == ModelFamily::DeepseekV2) return RopeStyle::Complex;
    return rope_interleave ? RopeStyle::Interleave : RopeStyle::Split;
  }
  // Where pair i of the roped half sits: {i, i + d_r/2} for DeepseekV3, {2i, 2i + 1} for V2.
  std::pair<int64_t, int64_t> rope_pair(int64_t i) const {
    if (rope_style() == RopeStyle::Complex) return {2 * i, 2 * i + 1};
    return {i, i + qk_rope_head_dim / 2};
  }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const AttentionConfig&) const = default;  // field by field, exact
};

// The largest count config.json may give, far above any real model's (Kimi K2.6: hidden 7168,
// 64 heads, ranks 1536 / 512, head dims 128 / 64, 61 layers, vocab 163840, 262144 positions),
// and low enough that products of them cannot overflow 64 bits and that nothing walks a
// billion layers. A larger value is an Error(Config) naming the key.
struct ConfigLimits {
  int64_t hidden_size = int64_t{1} << 17;  // 131072
  int64_t heads = 4096;
  int64_t rank = int64_t{1} << 16;         // q_lora_rank, kv_lora_rank
  int64_t head_dim = 4096;                 // qk_nope / qk_rope / v head dims
  int64_t layers = 4096;                   // num_hidden_layers
  int64_t vocab = int64_t{1} << 24;        // 16,777,216
  int64_t positions = int64_t{1} << 32;    // max_position_embeddings (and yarn's original_)
};
inline constexpr ConfigLimits kConfigLimits{};

// Parses config.json text. Throws Error(Config) naming the missing/inconsistent key.
AttentionConfig parse_config(std::string_view json, const std::string& source_name = "config.json");
AttentionConfig load_config(const std::string& path);

// The presets (Kimi K2.6, DeepSeek-V3, DeepSeek-V2-Lite, Moonlight, tiny) are whole models, one
// function each: mla/model.hpp (kimi_k26_model() ...; .attention is the geometry).

// The compressed-tensors scheme of Kimi K2-Thinking / K2.5 / K2.6's routed experts: pack-quantized,
// int, 4 bits, symmetric, strategy group, group_size 32, targets Linear, Kimi's ignore list.
PackQuantization kimi_int4_quantization();

// Serializes a config in the nested Kimi K2.5/K2.6 layout (text_config, rope_scaling) or flat;
// a present `quantization` is written as compressed-tensors writes it, inside text_config when
// nested. mla/model.hpp's model_config_to_json adds a whole model's keys.
std::string config_to_json(const AttentionConfig& cfg, bool nested);

}  // namespace mla
