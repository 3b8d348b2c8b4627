// src/checkpoint/config.cpp — config.json -> AttentionConfig, the two built-in geometries, and
// AttentionConfig -> config.json.
//
// Purpose: read exactly the keys HF `DeepseekV3Attention` and its rotary module read
// (docs/math.md §1, §4, §5), from either layout a Kimi/DeepSeek checkpoint ships:
//   flat    {"model_type": "deepseek_v3" | "kimi_k2", "hidden_size": 7168, ...}
//   nested  {"model_type": "kimi_k25", "text_config": {"model_type": "kimi_k2", ...}}
// and RoPE under "rope_scaling" (transformers 4.x) or "rope_parameters" (transformers 5,
// which may hold rope_theta too), with the type under "type" or "rope_type".
//
// Rules (each mirrors HF; every deviation is an Error(Config) naming file and key):
//   * a key given twice counts with its last value (Python's json, so transformers);
//   * every count is bounded by what a real model can have (kConfigLimits, mla/config.hpp), so
//     an absurd value is refused here, naming the key, before anything walks or allocates by it;
//   * geometry keys are required integers; sizes must be > 0 (q_lora_rank may be null or 0,
//     meaning q_proj instead of q_a_proj/q_b_proj); qk_rope_head_dim must be even;
//     num_key_value_heads (default num_attention_heads, as HF) must equal num_attention_heads.
//   * rope_theta: rope_parameters.rope_theta if present (transformers 5), else the top-level
//     key; required either way (the base is never guessed).
//   * rope type "default" (or a null/absent rope dict) = plain RoPE; "yarn" needs "factor";
//     any other type is rejected.
//   * yarn: original_max_position_embeddings falls back to max_position_embeddings;
//     beta_fast / beta_slow: `get(k) or 32` / `get(k) or 1` (missing, null or 0 -> default);
//     mscale / mscale_all_dim: `get(k)` (missing or null -> 0); attention_factor optional;
//     truncate optional (default true).
//   * quantization_config (text_config's, else the top level's) is read only when its
//     quant_method is "compressed-tensors" (Kimi's INT4 experts, docs/checkpoints.md §6); its
//     values are checked when a packed tensor is read (PackQuantization::unsupported_reason).
//
// Shape legend (for the geometry fields): H = hidden_size, n = num_attention_heads,
//   r_q = q_lora_rank, r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim,
//   d_v = v_head_dim.
#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "mla/config.hpp"
#include "mla/error.hpp"
#include "mla/json_text.hpp"
#include "mla/model.hpp"
#include "mla/regular_file.hpp"

namespace mla {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Short JSON description of a value, for "got ..." in error messages.
std::string describe(const element& e) {
  switch (e.type()) {
    case element_type::ARRAY: return "an array";
    case element_type::OBJECT: return "an object";
    case element_type::INT64: return "integer " + std::to_string(int64_t(e));
    case element_type::UINT64: return "integer " + std::to_string(uint64_t(e));
    case element_type::DOUBLE: {
      std::ostringstream os;
      os << double(e);
      return "number " + os.str();
    }
    case element_type::STRING: return "string \"" + std::string(std::string_view(e)) + "\"";
    case element_type::BOOL: return bool(e) ? "true" : "false";
    case element_type::NULL_VALUE: return "null";
  }
  return "an unknown value";
}

// One JSON object of the config plus where it is ("text_config." / "rope_scaling.") so
// that every error names the file and the full key path.
struct Section {
  object obj;
  std::string source;  // file name, e.g. "/ckpt/config.json"
  std::string path;    // key prefix, e.g. "text_config."

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail(ErrorKind::Config, source + ": key '" + path + key + "' " + what);
  }
  // The value of `key`; when the key appears more than once, the last one, as Python's json
  // and transformers read it.
  bool find(const std::string& key, element& out) const {
    bool found = false;
    for (const auto field : obj) {
      if (field.key == key) {
        out = field.value;
        found = true;
      }
    }
    return found;
  }
  bool has(const std::string& key) const {
    element e;
    return find(key, e);
  }
  // present and not null
  bool has_value(const std::string& key) const {
    element e;
    return find(key, e) && e.type() != element_type::NULL_VALUE;
  }
  element get(const std::string& key) const {
    element e;
    if (!find(key, e)) bad(key, "is missing");
    return e;
  }

  int64_t integer(const std::string& key) const {
    element e = get(key);
    if (e.type() == element_type::INT64) return int64_t(e);
    if (e.type() == element_type::UINT64) bad(key, "is too large (" + describe(e) + ")");
    bad(key, "must be an integer, got " + describe(e));
  }
  // A size that must be > 0, and at most `limit` (what a real model can have).
  int64_t positive(const std::string& key, int64_t limit) const {
    int64_t v = integer(key);
    if (v <= 0) bad(key, "must be > 0, got " + std::to_string(v));
    within(key, v, limit);
    return v;
  }
  void within(const std::string& key, int64_t v, int64_t limit) const {
    if (v > limit)
      bad(key, "is " + std::to_string(v) + ", more than any model has (at most " + std::to_string(limit) + " here)");
  }
  double number(const std::string& key) const {
    element e = get(key);
    if (e.type() == element_type::INT64) return double(int64_t(e));
    if (e.type() == element_type::UINT64) return double(uint64_t(e));
    if (e.type() == element_type::DOUBLE) return double(e);
    bad(key, "must be a number, got " + describe(e));
  }
  double finite_number(const std::string& key) const {
    double v = number(key);
    if (!std::isfinite(v)) bad(key, "must be finite");
    return v;
  }
  bool boolean(const std::string& key) const {
    element e = get(key);
    if (e.type() != element_type::BOOL) bad(key, "must be true or false, got " + describe(e));
    return bool(e);
  }
  std::string string(const std::string& key) const {
    element e = get(key);
    if (e.type() != element_type::STRING) bad(key, "must be a string, got " + describe(e));
    return std::string(std::string_view(e));
  }
  Section child(const std::string& key) const {
    element e = get(key);
    if (e.type() != element_type::OBJECT) bad(key, "must be an object, got " + describe(e));
    return Section{object(e), source, path + key + "."};
  }
};

// The RoPE dictionary: rope_parameters (transformers 5) wins over rope_scaling (4.x).
// Returns false for plain RoPE (key absent or null).
bool find_rope_section(const Section& text, Section& out) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!text.has_value(key)) continue;
    out = text.child(key);
    return true;
  }
  return false;
}

// rope_theta, the rope type and (for yarn) every key of HF `_compute_yarn_parameters`.
RopeConfig parse_rope(const Section& text, int64_t max_position_embeddings) {
  RopeConfig rope;
  Section r;
  const bool has_rope_dict = find_rope_section(text, r);

  // rope_theta: transformers 5 keeps it inside rope_parameters; 4.x at the top level.
  if (has_rope_dict && r.has("rope_theta"))
    rope.rope_theta = r.finite_number("rope_theta");
  else
    rope.rope_theta = text.finite_number("rope_theta");
  if (rope.rope_theta <= 1.0)
    fail(ErrorKind::Config, text.source + ": key '" + text.path + "rope_theta' must be > 1");

  if (!has_rope_dict) return rope;  // "rope_scaling": null or absent -> plain RoPE

  // type under "rope_type" (transformers 5) or "type" (4.x); both may be present.
  std::string type;
  if (r.has_value("rope_type")) type = r.string("rope_type");
  if (r.has_value("type")) {
    std::string t = r.string("type");
    if (!type.empty() && t != type)
      r.bad("type", "is \"" + t + "\" but rope_type is \"" + type + "\"");
    type = t;
  }
  if (type.empty()) r.bad("rope_type", "is missing (neither 'rope_type' nor 'type' is given)");
  if (type == "default") return rope;
  if (type != "yarn")
    r.bad(r.has_value("rope_type") ? "rope_type" : "type",
          "is \"" + type + "\"; only \"default\" and \"yarn\" are supported (DeepSeek-V3 / Kimi use yarn)");
  rope.rope_type = "yarn";

  if (!r.has_value("factor")) r.bad("factor", "is missing (yarn needs a scaling factor)");
  rope.factor = r.finite_number("factor");
  if (rope.factor <= 0) r.bad("factor", "must be > 0");

  rope.original_max_position_embeddings = r.has_value("original_max_position_embeddings")
                                              ? r.finite_number("original_max_position_embeddings")
                                              : double(max_position_embeddings);
  if (rope.original_max_position_embeddings <= 0) r.bad("original_max_position_embeddings", "must be > 0");
  if (rope.original_max_position_embeddings > double(kConfigLimits.positions))
    r.within("original_max_position_embeddings", int64_t{kConfigLimits.positions} + 1, kConfigLimits.positions);

  // HF: `rope_parameters.get("beta_fast") or 32` — missing, null and 0 all give the default.
  auto number_or = [&](const char* key, double fallback) {
    if (!r.has_value(key)) return fallback;
    double v = r.finite_number(key);
    return v == 0.0 ? fallback : v;
  };
  rope.beta_fast = number_or("beta_fast", 32.0);
  rope.beta_slow = number_or("beta_slow", 1.0);
  // HF: `get("mscale")`, `get("mscale_all_dim")` — None when absent, falsy like 0.
  rope.mscale = r.has_value("mscale") ? r.finite_number("mscale") : 0.0;
  rope.mscale_all_dim = r.has_value("mscale_all_dim") ? r.finite_number("mscale_all_dim") : 0.0;
  if (r.has_value("attention_factor")) rope.attention_factor = r.finite_number("attention_factor");
  rope.truncate = r.has_value("truncate") ? r.boolean("truncate") : true;
  return rope;
}

// A list of strings ("ignore", "targets"); absent or null = empty.
std::vector<std::string> string_list(const Section& s, const std::string& key) {
  std::vector<std::string> out;
  if (!s.has_value(key)) return out;
  const element e = s.get(key);
  if (e.type() != element_type::ARRAY) s.bad(key, "must be a list of strings, got " + describe(e));
  for (element item : simdjson::dom::array(e)) {
    if (item.type() != element_type::STRING) s.bad(key, "must be a list of strings, holds " + describe(item));
    out.emplace_back(std::string_view(item));
  }
  return out;
}

// compressed-tensors' quantization_config (docs/checkpoints.md §6): text_config's, else the top
// level's; only quant_method "compressed-tensors". Keys have compressed-tensors' defaults
// (QuantizationArgs: num_bits 8, type int, symmetric true, strategy from group_size); a key of
// the wrong JSON type is an error here, a value this project cannot dequantize is kept and
// reported by unsupported_reason() when a packed tensor is read.
PackQuantization parse_quantization(const Section& top, const Section& text) {
  PackQuantization q;
  Section qs;
  if (text.has_value("quantization_config"))
    qs = text.child("quantization_config");
  else if (top.has_value("quantization_config"))
    qs = top.child("quantization_config");
  else
    return q;
  if (!qs.has_value("quant_method") || qs.string("quant_method") != "compressed-tensors") return q;
  q.present = true;
  const std::string top_format = qs.has_value("format") ? qs.string("format") : "";
  q.ignore = string_list(qs, "ignore");
  if (!qs.has_value("config_groups")) return q;  // no weight scheme: unsupported_reason() says so
  const Section groups = qs.child("config_groups");
  for (auto [key, value] : groups.obj) {
    if (value.type() == element_type::ARRAY) {  // {"W4A16": ["Linear"]}: a preset scheme by name
      q.preset_group = std::string(key);
      continue;
    }
    const Section g = groups.child(std::string(key));
    if (!g.has_value("weights")) continue;  // an activation-only group
    const Section w = g.child("weights");
    PackQuantization::Scheme s;
    s.format = g.has_value("format") ? g.string("format") : top_format;
    s.num_bits = w.has_value("num_bits") ? w.integer("num_bits") : 8;
    s.type = w.has_value("type") ? w.string("type") : "int";
    s.symmetric = w.has_value("symmetric") ? w.boolean("symmetric") : true;
    s.group_size = w.has_value("group_size") ? w.integer("group_size") : 0;
    s.strategy = w.has_value("strategy") ? w.string("strategy")
                 : s.group_size > 0       ? "group"
                 : s.group_size == -1     ? "channel"
                                          : "tensor";
    if (w.has_value("dynamic")) {
      const element d = w.get("dynamic");
      if (d.type() == element_type::BOOL) s.dynamic = bool(d);
      else if (d.type() == element_type::STRING) s.dynamic = true;  // "local"
      else w.bad("dynamic", "must be true, false or a string, got " + describe(d));
    }
    if (w.has_value("actorder")) {
      const element a = w.get("actorder");
      if (a.type() == element_type::BOOL) s.actorder = bool(a) ? "group" : "";
      else if (a.type() == element_type::STRING) s.actorder = std::string(std::string_view(a));
      else w.bad("actorder", "must be null, a boolean or a string, got " + describe(a));
    }
    if (q.weight_groups == 0) q.scheme = s;
    else if (!(s == q.scheme)) q.mixed_schemes = true;
    ++q.weight_groups;
    for (auto& t : string_list(g, "targets")) q.targets.push_back(std::move(t));
  }
  return q;
}

}  // namespace

std::string PackQuantization::unsupported_reason() const {
  const Scheme& s = scheme;
  if (!preset_group.empty())
    return "names a preset scheme ('" + preset_group + "') instead of its weights' keys; only explicit schemes are supported";
  if (weight_groups == 0) return "has no config group that quantizes weights";
  if (mixed_schemes) return "has config groups with different weight schemes; only one scheme is supported";
  if (s.format != "pack-quantized") return "has format '" + s.format + "'; only 'pack-quantized' is supported";
  if (s.type != "int") return "has weights type '" + s.type + "'; only 'int' is supported";
  if (s.num_bits != 4) return "has num_bits " + std::to_string(s.num_bits) + "; only 4 is supported";
  if (!s.symmetric) return "has symmetric false; only symmetric quantization is supported";
  if (s.strategy != "group") return "has strategy '" + s.strategy + "'; only 'group' is supported";
  if (s.group_size <= 0) return "has group_size " + std::to_string(s.group_size) + "; the group strategy needs one > 0";
  if (s.dynamic) return "has dynamic weight quantization; only static (stored) scales are supported";
  if (!s.actorder.empty() && s.actorder != "weight" && s.actorder != "static")
    return "has actorder '" + s.actorder + "' (a g_idx permutation); only null, 'weight' or 'static' is supported";
  return "";
}

namespace {

// The family of the language model's section: its model_type as transformers' AutoConfig reads
// it, else (no model_type) its architectures' first class.
bool names_deepseek_v2(const std::string& name) { return name == "deepseek_v2" || name == "DeepseekV2ForCausalLM"; }

ModelFamily model_family(const Section& text) {
  std::string name;
  if (text.has_value("model_type")) {
    name = text.string("model_type");
  } else if (text.has_value("architectures")) {
    const element e = text.get("architectures");
    if (e.type() == element_type::ARRAY)
      for (element item : simdjson::dom::array(e)) {
        if (item.type() == element_type::STRING) name = std::string(std::string_view(item));
        break;
      }
  }
  return names_deepseek_v2(name) ? ModelFamily::DeepseekV2 : ModelFamily::DeepseekV3;
}

}  // namespace

const char* family_class_name(ModelFamily family) {
  return family == ModelFamily::DeepseekV2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM";
}

const char* rope_style_name(RopeStyle style) {
  switch (style) {
    case RopeStyle::Split: return "split";
    case RopeStyle::Interleave: return "interleave";
    case RopeStyle::Complex: return "complex";
  }
  return "?";
}

AttentionConfig parse_config(std::string_view json, const std::string& source_name) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element root;
  if (auto err = parser.parse(padded).get(root))
    fail(ErrorKind::Config, source_name + ": not valid JSON (" + simdjson::error_message(err) + ")");
  if (root.type() != element_type::OBJECT)
    fail(ErrorKind::Config, source_name + ": the top level must be a JSON object, got " + describe(root));

  AttentionConfig cfg;
  Section top{object(root), source_name, ""};
  if (top.has_value("model_type")) cfg.model_type = top.string("model_type");

  // Kimi K2.5 / K2.6: the language model's keys live under "text_config".
  Section text = top;
  if (top.has_value("text_config")) {
    text = top.child("text_config");
    cfg.nested_text_config = true;
  }
  cfg.family = model_family(text);

  cfg.hidden_size = text.positive("hidden_size", kConfigLimits.hidden_size);
  cfg.num_attention_heads = text.positive("num_attention_heads", kConfigLimits.heads);
  cfg.num_key_value_heads = text.has_value("num_key_value_heads")
                                ? text.positive("num_key_value_heads", kConfigLimits.heads)
                                : cfg.num_attention_heads;
  if (cfg.num_key_value_heads != cfg.num_attention_heads)
    text.bad("num_key_value_heads", "is " + std::to_string(cfg.num_key_value_heads) +
                                        " but must equal num_attention_heads (" +
                                        std::to_string(cfg.num_attention_heads) + ") for MLA");
  // q_lora_rank: null (or 0) = no query compression, q_proj [n*(d_n+d_r), H].
  if (!text.has("q_lora_rank")) text.bad("q_lora_rank", "is missing (use null for q_proj without LoRA)");
  cfg.q_lora_rank = text.has_value("q_lora_rank") ? text.integer("q_lora_rank") : 0;
  if (cfg.q_lora_rank < 0) text.bad("q_lora_rank", "must be >= 0 or null, got " + std::to_string(cfg.q_lora_rank));
  text.within("q_lora_rank", cfg.q_lora_rank, kConfigLimits.rank);
  cfg.kv_lora_rank = text.positive("kv_lora_rank", kConfigLimits.rank);
  cfg.qk_nope_head_dim = text.positive("qk_nope_head_dim", kConfigLimits.head_dim);
  cfg.qk_rope_head_dim = text.positive("qk_rope_head_dim", kConfigLimits.head_dim);
  if (cfg.qk_rope_head_dim % 2 != 0)
    text.bad("qk_rope_head_dim", "must be even (RoPE rotates pairs), got " + std::to_string(cfg.qk_rope_head_dim));
  cfg.v_head_dim = text.positive("v_head_dim", kConfigLimits.head_dim);
  cfg.num_hidden_layers = text.positive("num_hidden_layers", kConfigLimits.layers);
  cfg.vocab_size = text.positive("vocab_size", kConfigLimits.vocab);
  cfg.max_position_embeddings = text.positive("max_position_embeddings", kConfigLimits.positions);
  // HF DeepseekV3Config defaults: rms_norm_eps 1e-6, attention_bias false, rope_interleave true.
  if (text.has_value("rms_norm_eps")) {
    cfg.rms_norm_eps = text.finite_number("rms_norm_eps");
    if (cfg.rms_norm_eps <= 0) text.bad("rms_norm_eps", "must be > 0");
  }
  if (text.has_value("attention_bias")) cfg.attention_bias = text.boolean("attention_bias");
  // DeepseekV2Config has no rope_interleave (its RoPE is RopeStyle::Complex): not read there
  if (cfg.family == ModelFamily::DeepseekV3 && text.has_value("rope_interleave"))
    cfg.rope_interleave = text.boolean("rope_interleave");
  cfg.rope = parse_rope(text, cfg.max_position_embeddings);
  cfg.quantization = parse_quantization(top, text);
  return cfg;
}

namespace {

// A token id key: an integer, null (-1), or a list of integers (its first; transformers allows
// several eos ids).
int64_t token_id(const Section& text, const std::string& key) {
  if (!text.has_value(key)) return -1;
  element e = text.get(key);
  if (e.type() == element_type::ARRAY) {
    simdjson::dom::array items;
    if (e.get(items)) text.bad(key, "is not a list");
    for (element item : items) {
      if (item.type() != element_type::INT64 || int64_t(item) < 0)
        text.bad(key, "must hold non-negative integers, got " + describe(item));
      return int64_t(item);
    }
    return -1;
  }
  const int64_t v = text.integer(key);
  if (v < 0) text.bad(key, "must be >= 0 or null, got " + std::to_string(v));
  return v;
}

// An optional count with transformers' default; must lie in [lo, hi].
int64_t count_or(const Section& text, const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!text.has_value(key)) return fallback;
  const int64_t v = text.integer(key);
  if (v < lo || v > hi)
    text.bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
  return v;
}

// DeepseekV2Config's defaults for the keys whose DeepseekV3Config default differs (what
// transformers uses for an absent key); num_experts_per_tok, n_group and topk_group are None
// there, so a V2 config must give what its routing reads.
void deepseek_v2_defaults(ModelConfig& m) {
  m.intermediate_size = 11008;
  m.moe_intermediate_size = 1407;
  m.first_k_dense_replace = 0;
  m.n_routed_experts = 64;
  m.n_shared_experts = 2;
  m.norm_topk_prob = false;
  m.routed_scaling_factor = 1.0;
  m.scoring_func = "softmax";
  m.topk_method = "greedy";
  m.n_group = 1;
  m.topk_group = 1;
}

// What DeepseekV3's router implements (transformers' DeepseekV3TopkRouter): sigmoid scores,
// bias-corrected group-limited top-k with a group scored by its top 2.
void check_deepseek_v3_routing(const Section& text, ModelConfig& m) {
  if (text.has_value("scoring_func")) m.scoring_func = text.string("scoring_func");
  if (m.scoring_func != "sigmoid")
    text.bad("scoring_func", "is \"" + m.scoring_func +
                                 "\"; DeepseekV3ForCausalLM routes with \"sigmoid\" only (\"softmax\" is DeepSeek-V2's: "
                                 "model_type deepseek_v2)");
  if (text.has_value("topk_method")) m.topk_method = text.string("topk_method");
  if (m.topk_method != "noaux_tc")
    text.bad("topk_method", "is \"" + m.topk_method +
                                "\"; DeepseekV3ForCausalLM implements only \"noaux_tc\" (group-limited top-k on bias-corrected "
                                "scores); \"greedy\" and \"group_limited_greedy\" are DeepSeek-V2's (model_type deepseek_v2)");
  if (m.experts_per_group() < 2)
    text.bad("n_group", "leaves " + std::to_string(m.experts_per_group()) +
                            " expert per group; a group's score is the sum of its top 2, so it needs at least 2");
}

// What DeepseekV2's router implements (transformers' DeepseekV2TopkRouter): softmax scores, top-k
// over all experts ("greedy") or within the topk_group groups of largest maximum score
// ("group_limited_greedy"), weights = scores * routed_scaling_factor, never normalised.
void check_deepseek_v2_routing(const Section& text, ModelConfig& m) {
  if (text.has_value("scoring_func")) m.scoring_func = text.string("scoring_func");
  if (m.scoring_func != "softmax")
    text.bad("scoring_func", "is \"" + m.scoring_func + "\"; DeepseekV2ForCausalLM routes with \"softmax\" only");
  if (text.has_value("topk_method")) m.topk_method = text.string("topk_method");
  if (m.topk_method != "greedy" && m.topk_method != "group_limited_greedy")
    text.bad("topk_method", "is \"" + m.topk_method +
                                "\"; DeepseekV2ForCausalLM implements \"greedy\" and \"group_limited_greedy\"");
  if (m.norm_topk_prob)
    text.bad("norm_topk_prob", "is true; transformers' DeepseekV2 never normalises the top-k weights (DeepSeek's own "
                               "V2 code normalises instead of scaling), so the two disagree; only false is supported");
  if (m.first_k_dense_replace < m.attention.num_hidden_layers && !text.has_value("num_experts_per_tok"))
    text.bad("num_experts_per_tok", "is missing (DeepseekV2Config has no default)");
  if (m.topk_method == "greedy") {
    m.n_group = 1;  // not read: the top k of all experts
    m.topk_group = 1;
    return;
  }
  for (const char* key : {"n_group", "topk_group"})
    if (!text.has_value(key)) text.bad(key, "is missing (group_limited_greedy needs it; DeepseekV2Config has no default)");
}

}  // namespace

ModelConfig parse_model_config(std::string_view json, const std::string& source_name) {
  ModelConfig m;
  m.attention = parse_config(json, source_name);  // validates the JSON and the attention keys
  const bool v2 = m.attention.family == ModelFamily::DeepseekV2;
  if (v2) deepseek_v2_defaults(m);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element root;
  if (parser.parse(padded).get(root)) fail(ErrorKind::Config, source_name + ": not valid JSON");  // parsed above
  Section top{object(root), source_name, ""};
  const Section text = top.has_value("text_config") ? top.child("text_config") : top;

  // Sizes: generous bounds (Kimi K2: 18432 / 2048 / 384 experts), so that an absurd value is one
  // clear line instead of a huge allocation.
  constexpr int64_t kMaxWidth = int64_t{1} << 20, kMaxExperts = 65536;
  m.intermediate_size = count_or(text, "intermediate_size", m.intermediate_size, 1, kMaxWidth);
  m.moe_intermediate_size = count_or(text, "moe_intermediate_size", m.moe_intermediate_size, 1, kMaxWidth);
  m.first_k_dense_replace = count_or(text, "first_k_dense_replace", m.first_k_dense_replace, 0, int64_t{1} << 30);
  m.n_routed_experts = count_or(text, "n_routed_experts", m.n_routed_experts, 1, kMaxExperts);
  m.n_shared_experts = count_or(text, "n_shared_experts", m.n_shared_experts, 0, 64);
  m.num_experts_per_tok = count_or(text, "num_experts_per_tok", m.num_experts_per_tok, 1, kMaxExperts);
  m.n_group = count_or(text, "n_group", m.n_group, 1, kMaxExperts);
  m.topk_group = count_or(text, "topk_group", m.topk_group, 1, kMaxExperts);
  if (text.has_value("norm_topk_prob")) m.norm_topk_prob = text.boolean("norm_topk_prob");
  if (text.has_value("routed_scaling_factor")) {
    m.routed_scaling_factor = text.finite_number("routed_scaling_factor");
    if (m.routed_scaling_factor <= 0) text.bad("routed_scaling_factor", "must be > 0");
  }
  if (text.has_value("tie_word_embeddings")) m.tie_word_embeddings = text.boolean("tie_word_embeddings");
  if (text.has_value("byte_level_vocab")) m.byte_level_vocab = text.boolean("byte_level_vocab");
  m.bos_token_id = token_id(text, "bos_token_id");
  m.eos_token_id = token_id(text, "eos_token_id");

  // What the forward implements (transformers' DeepseekV3 / DeepseekV2 code), refused otherwise.
  if (text.has_value("hidden_act")) m.hidden_act = text.string("hidden_act");
  if (m.hidden_act != "silu")
    text.bad("hidden_act", "is \"" + m.hidden_act + "\"; only \"silu\" (the SwiGLU of DeepSeek-V2 / V3 / Kimi) is implemented");
  if (text.has_value("moe_layer_freq") && text.integer("moe_layer_freq") != 1)
    text.bad("moe_layer_freq", "must be 1 (every layer from first_k_dense_replace on is MoE, as transformers builds it)");

  // Group-limited routing must be able to pick k experts (transformers' topk would fail or pick
  // masked experts otherwise).
  if (m.n_routed_experts % m.n_group != 0)
    text.bad("n_group", "(" + std::to_string(m.n_group) + ") must divide n_routed_experts (" +
                            std::to_string(m.n_routed_experts) + ")");
  if (v2) check_deepseek_v2_routing(text, m);
  else check_deepseek_v3_routing(text, m);
  if (m.topk_group > m.n_group)
    text.bad("topk_group", "(" + std::to_string(m.topk_group) + ") must be <= n_group (" + std::to_string(m.n_group) + ")");
  if (m.num_experts_per_tok > m.topk_group * m.experts_per_group())
    text.bad("num_experts_per_tok", "(" + std::to_string(m.num_experts_per_tok) + ") exceeds the " +
                                        std::to_string(m.topk_group * m.experts_per_group()) +
                                        " experts of the topk_group groups a token may use");
  return m;
}

ModelConfig load_model_config(const std::string& path) {
  // a regular file only (a FIFO would block), and config-sized
  return parse_model_config(read_regular_file(path, int64_t{16} << 20, ErrorKind::Config), path);
}

AttentionConfig load_config(const std::string& path) {
  // a regular file only (a FIFO would block), and config-sized
  return parse_config(read_regular_file(path, int64_t{16} << 20, ErrorKind::Config), path);
}

PackQuantization kimi_int4_quantization() {
  PackQuantization q;
  q.present = true;
  q.scheme = {"pack-quantized", 4, "int", true, "group", 32, false, ""};
  q.weight_groups = 1;
  q.targets = {"Linear"};
  q.ignore = {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
              "re:.*lm_head.*", "re:vision_tower.*", "re:mm_projector.*"};
  return q;
}

// The presets (kimi_k26_model() ...) are config.json files: src/checkpoint/presets/ (presets.cpp.in).

namespace {

// Shortest decimal that parses back to the same double, always with a '.' or exponent so
// Python reads a float ("50000.0", "1e-05").
std::string json_number(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void append_rope(std::ostringstream& os, const RopeConfig& r, const std::string& ind) {
  if (!r.is_yarn()) {
    os << ind << "\"rope_scaling\": null,\n";
    return;
  }
  os << ind << "\"rope_scaling\": {\n";
  os << ind << "  \"type\": \"yarn\",\n";
  os << ind << "  \"factor\": " << json_number(r.factor) << ",\n";
  os << ind << "  \"original_max_position_embeddings\": " << json_number(r.original_max_position_embeddings) << ",\n";
  os << ind << "  \"beta_fast\": " << json_number(r.beta_fast) << ",\n";
  os << ind << "  \"beta_slow\": " << json_number(r.beta_slow) << ",\n";
  if (r.attention_factor) os << ind << "  \"attention_factor\": " << json_number(*r.attention_factor) << ",\n";
  if (!r.truncate) os << ind << "  \"truncate\": false,\n";
  os << ind << "  \"mscale\": " << json_number(r.mscale) << ",\n";
  os << ind << "  \"mscale_all_dim\": " << json_number(r.mscale_all_dim) << "\n";
  os << ind << "},\n";
}

// compressed-tensors' layout of a quantization_config (the keys Kimi K2.5 / K2.6 publish).
void append_quantization(std::ostringstream& os, const PackQuantization& q, const std::string& ind) {
  const PackQuantization::Scheme& s = q.scheme;
  auto list = [](const std::vector<std::string>& v) {
    std::string text = "[";
    for (size_t i = 0; i < v.size(); ++i) text += (i ? ", " : "") + json_quote(v[i]);
    return text + "]";
  };
  os << ind << "\"quantization_config\": {\n";
  os << ind << "  \"config_groups\": {\n";
  os << ind << "    \"group_0\": {\n";
  os << ind << "      \"input_activations\": null,\n";
  os << ind << "      \"output_activations\": null,\n";
  os << ind << "      \"targets\": " << list(q.targets) << ",\n";
  os << ind << "      \"weights\": {\n";
  os << ind << "        \"actorder\": " << (s.actorder.empty() ? "null" : json_quote(s.actorder)) << ",\n";
  os << ind << "        \"block_structure\": null,\n";
  os << ind << "        \"dynamic\": " << (s.dynamic ? "true" : "false") << ",\n";
  os << ind << "        \"group_size\": " << s.group_size << ",\n";
  os << ind << "        \"num_bits\": " << s.num_bits << ",\n";
  os << ind << "        \"observer\": \"minmax\",\n";
  os << ind << "        \"observer_kwargs\": {},\n";
  os << ind << "        \"strategy\": " << json_quote(s.strategy) << ",\n";
  os << ind << "        \"symmetric\": " << (s.symmetric ? "true" : "false") << ",\n";
  os << ind << "        \"type\": " << json_quote(s.type) << "\n";
  os << ind << "      }\n";
  os << ind << "    }\n";
  os << ind << "  },\n";
  os << ind << "  \"format\": " << json_quote(s.format) << ",\n";
  os << ind << "  \"ignore\": " << list(q.ignore) << ",\n";
  os << ind << "  \"kv_cache_scheme\": null,\n";
  os << ind << "  \"quant_method\": \"compressed-tensors\",\n";
  os << ind << "  \"quantization_status\": \"compressed\"\n";
  os << ind << "},\n";
}

// The whole model's keys beyond the attention, as Kimi K2's and DeepSeek's config.json have them.
void append_decoder_keys(std::ostringstream& os, const ModelConfig& d, const std::string& ind) {
  os << ind << "\"intermediate_size\": " << d.intermediate_size << ",\n";
  os << ind << "\"moe_intermediate_size\": " << d.moe_intermediate_size << ",\n";
  os << ind << "\"first_k_dense_replace\": " << d.first_k_dense_replace << ",\n";
  os << ind << "\"moe_layer_freq\": 1,\n";
  os << ind << "\"n_routed_experts\": " << d.n_routed_experts << ",\n";
  os << ind << "\"n_shared_experts\": " << d.n_shared_experts << ",\n";
  os << ind << "\"num_experts_per_tok\": " << d.num_experts_per_tok << ",\n";
  os << ind << "\"n_group\": " << d.n_group << ",\n";
  os << ind << "\"topk_group\": " << d.topk_group << ",\n";
  os << ind << "\"norm_topk_prob\": " << (d.norm_topk_prob ? "true" : "false") << ",\n";
  os << ind << "\"routed_scaling_factor\": " << json_number(d.routed_scaling_factor) << ",\n";
  os << ind << "\"scoring_func\": " << json_quote(d.scoring_func) << ",\n";
  os << ind << "\"topk_method\": " << json_quote(d.topk_method) << ",\n";
  os << ind << "\"hidden_act\": " << json_quote(d.hidden_act) << ",\n";
  os << ind << "\"num_nextn_predict_layers\": 0,\n";
  os << ind << "\"tie_word_embeddings\": " << (d.tie_word_embeddings ? "true" : "false") << ",\n";
  if (d.byte_level_vocab) os << ind << "\"byte_level_vocab\": true,\n";
  for (const auto& [key, id] : {std::pair<const char*, int64_t>{"bos_token_id", d.bos_token_id}, {"eos_token_id", d.eos_token_id}})
    if (id >= 0) os << ind << "\"" << key << "\": " << id << ",\n";
}

void append_text_keys(std::ostringstream& os, const AttentionConfig& c, const std::string& ind,
                      const ModelConfig* decoder) {
  os << ind << "\"hidden_size\": " << c.hidden_size << ",\n";
  os << ind << "\"num_attention_heads\": " << c.num_attention_heads << ",\n";
  os << ind << "\"num_key_value_heads\": " << c.num_key_value_heads << ",\n";
  if (c.has_q_lora())
    os << ind << "\"q_lora_rank\": " << c.q_lora_rank << ",\n";
  else
    os << ind << "\"q_lora_rank\": null,\n";
  os << ind << "\"kv_lora_rank\": " << c.kv_lora_rank << ",\n";
  os << ind << "\"qk_nope_head_dim\": " << c.qk_nope_head_dim << ",\n";
  os << ind << "\"qk_rope_head_dim\": " << c.qk_rope_head_dim << ",\n";
  os << ind << "\"v_head_dim\": " << c.v_head_dim << ",\n";
  os << ind << "\"num_hidden_layers\": " << c.num_hidden_layers << ",\n";
  os << ind << "\"vocab_size\": " << c.vocab_size << ",\n";
  os << ind << "\"max_position_embeddings\": " << c.max_position_embeddings << ",\n";
  os << ind << "\"rms_norm_eps\": " << json_number(c.rms_norm_eps) << ",\n";
  os << ind << "\"attention_bias\": " << (c.attention_bias ? "true" : "false") << ",\n";
  if (c.family == ModelFamily::DeepseekV3)  // DeepseekV2Config has no such key
    os << ind << "\"rope_interleave\": " << (c.rope_interleave ? "true" : "false") << ",\n";
  append_rope(os, c.rope, ind);
  os << ind << "\"rope_theta\": " << json_number(c.rope.rope_theta) << ",\n";
  if (decoder) append_decoder_keys(os, *decoder, ind);
  if (c.quantization.present) append_quantization(os, c.quantization, ind);
  os << ind << "\"torch_dtype\": \"bfloat16\"";
}

// The config.json text: attention keys, and the decoder's when `decoder` is given.
std::string config_json(const AttentionConfig& cfg, bool nested, const ModelConfig* decoder) {
  std::ostringstream os;
  os << "{\n";
  if (nested) {
    const std::string outer = cfg.model_type.empty() ? "kimi_k25" : cfg.model_type;
    os << "  \"architectures\": [\"KimiK25ForConditionalGeneration\"],\n";
    os << "  \"model_type\": " << json_quote(outer) << ",\n";
    os << "  \"text_config\": {\n";
    os << "    \"architectures\": [\"" << family_class_name(cfg.family) << "\"],\n";
    os << "    \"model_type\": " << (cfg.family == ModelFamily::DeepseekV2 ? "\"deepseek_v2\"" : "\"kimi_k2\"") << ",\n";
    append_text_keys(os, cfg, "    ", decoder);
    os << "\n  }\n";
  } else {
    const bool v2 = cfg.family == ModelFamily::DeepseekV2;
    // The flat layout's model_type names the family (model_family reads it first): the one the
    // config came with if it names the same family, else the family's own (a nested config's outer
    // "kimi_k25" over a V2 text model is written flat as "deepseek_v2").
    const bool keeps = !cfg.model_type.empty() && names_deepseek_v2(cfg.model_type) == v2;
    const std::string type = keeps ? cfg.model_type : v2 ? "deepseek_v2" : "deepseek_v3";
    os << "  \"architectures\": [\"" << family_class_name(cfg.family) << "\"],\n";
    os << "  \"model_type\": " << json_quote(type) << ",\n";
    append_text_keys(os, cfg, "  ", decoder);
    os << "\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace

std::string config_to_json(const AttentionConfig& cfg, bool nested) { return config_json(cfg, nested, nullptr); }

std::string model_config_to_json(const ModelConfig& m, bool nested) { return config_json(m.attention, nested, &m); }

}  // namespace mla
