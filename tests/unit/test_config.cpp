// tests/unit/test_config.cpp — suite `config`: config.json parsing (flat DeepSeek-V3 / Kimi
// K2 layout, nested Kimi K2.5/K2.6 text_config, rope_scaling vs rope_parameters, type vs
// rope_type, null rope, null q_lora_rank, yarn key fallbacks), every error naming its key
// and file, the built-in Kimi K2.6 / tiny geometries, and config_to_json round trips.
// Expected values are the literal numbers written in the JSON texts below (and in
// docs/math.md §1 for Kimi), never values produced by the code under test.
#include <boost/test/unit_test.hpp>

#include <map>
#include <string>
#include <vector>

#include <filesystem>

#include "../fuzz/config_round_trip.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"
#include "mla/model.hpp"
#include "test_util.hpp"

namespace {

using mla::AttentionConfig;
using mla::ErrorKind;
using mla::parse_config;

// A flat DeepSeek-V3-layout config as key -> raw JSON value, so a test can drop or replace
// one key. Values: Kimi K2-Instruct-0905 geometry and rope (docs/math.md §1).
std::map<std::string, std::string> flat_keys() {
  return {
      {"model_type", "\"kimi_k2\""},
      {"architectures", "[\"DeepseekV3ForCausalLM\"]"},
      {"hidden_size", "7168"},
      {"num_attention_heads", "64"},
      {"num_key_value_heads", "64"},
      {"q_lora_rank", "1536"},
      {"kv_lora_rank", "512"},
      {"qk_nope_head_dim", "128"},
      {"qk_rope_head_dim", "64"},
      {"v_head_dim", "128"},
      {"num_hidden_layers", "61"},
      {"vocab_size", "163840"},
      {"max_position_embeddings", "262144"},
      {"rms_norm_eps", "1e-05"},
      {"attention_bias", "false"},
      {"rope_theta", "50000.0"},
      {"rope_scaling",
       "{\"type\": \"yarn\", \"factor\": 64.0, \"original_max_position_embeddings\": 4096, "
       "\"beta_fast\": 1.0, \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}"},
      {"intermediate_size", "18432"},  // an unrelated key, ignored
  };
}

std::string to_json(const std::map<std::string, std::string>& keys) {
  std::string s = "{";
  for (const auto& [k, v] : keys) s += (s.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  return s + "}";
}

// Nested K2.5/K2.6 layout around a set of text keys.
std::string nested_json(const std::map<std::string, std::string>& text_keys) {
  return "{\"architectures\": [\"KimiK25ForConditionalGeneration\"], \"model_type\": \"kimi_k25\", "
         "\"vision_config\": {\"hidden_size\": 1152}, \"text_config\": " + to_json(text_keys) + "}";
}

// Runs parse_config and checks it throws Error(Config) whose message holds every `parts`.
void expect_config_error(const std::string& json, const std::vector<std::string>& parts,
                         const std::string& source = "cfg.json") {
  try {
    parse_config(json, source);
    BOOST_ERROR("no error for: " + json);
  } catch (const mla::Error& e) {
    BOOST_TEST((e.kind() == ErrorKind::Config), "kind " << mla::error_kind_name(e.kind()) << ": " << e.what());
    const std::string msg = e.what();
    BOOST_TEST(msg.find(source) != std::string::npos, "message does not name the file: " << msg);
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(flat_kimi_k2_layout) {
  const AttentionConfig c = parse_config(to_json(flat_keys()), "cfg.json");
  BOOST_TEST(c.model_type == "kimi_k2");
  BOOST_TEST(!c.nested_text_config);
  BOOST_TEST(c.hidden_size == 7168);
  BOOST_TEST(c.num_attention_heads == 64);
  BOOST_TEST(c.num_key_value_heads == 64);
  BOOST_TEST(c.q_lora_rank == 1536);
  BOOST_TEST(c.has_q_lora());
  BOOST_TEST(c.kv_lora_rank == 512);
  BOOST_TEST(c.qk_nope_head_dim == 128);
  BOOST_TEST(c.qk_rope_head_dim == 64);
  BOOST_TEST(c.qk_head_dim() == 192);
  BOOST_TEST(c.v_head_dim == 128);
  BOOST_TEST(c.num_hidden_layers == 61);
  BOOST_TEST(c.vocab_size == 163840);
  BOOST_TEST(c.max_position_embeddings == 262144);
  BOOST_TEST(c.rms_norm_eps == 1e-5);
  BOOST_TEST(!c.attention_bias);
  BOOST_TEST(c.rope_interleave);  // HF default when the key is absent
  BOOST_TEST(c.rope.rope_type == "yarn");
  BOOST_TEST(c.rope.is_yarn());
  BOOST_TEST(c.rope.rope_theta == 50000.0);
  BOOST_TEST(c.rope.factor == 64.0);
  BOOST_TEST(c.rope.original_max_position_embeddings == 4096.0);
  BOOST_TEST(c.rope.beta_fast == 1.0);
  BOOST_TEST(c.rope.beta_slow == 1.0);
  BOOST_TEST(c.rope.mscale == 1.0);
  BOOST_TEST(c.rope.mscale_all_dim == 1.0);
  BOOST_TEST(!c.rope.attention_factor.has_value());
  BOOST_TEST(c.rope.truncate);
}

BOOST_AUTO_TEST_CASE(flat_deepseek_v3_layout) {
  // DeepSeek-V3's own config.json values (128 heads, theta 1e4, factor 40, beta 32/1).
  auto k = flat_keys();
  k["model_type"] = "\"deepseek_v3\"";
  k["num_attention_heads"] = "128";
  k["num_key_value_heads"] = "128";
  k["vocab_size"] = "129280";
  k["max_position_embeddings"] = "163840";
  k["rms_norm_eps"] = "1e-06";
  k["rope_theta"] = "10000";
  k["rope_scaling"] =
      "{\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
      "\"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}";
  const AttentionConfig c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.model_type == "deepseek_v3");
  BOOST_TEST(c.num_attention_heads == 128);
  BOOST_TEST(c.rope.rope_theta == 10000.0);
  BOOST_TEST(c.rope.factor == 40.0);
  BOOST_TEST(c.rope.beta_fast == 32.0);
  BOOST_TEST(c.rope.beta_slow == 1.0);
  BOOST_TEST(c.rms_norm_eps == 1e-6);
}

BOOST_AUTO_TEST_CASE(nested_kimi_k25_layout) {
  auto k = flat_keys();
  k["rope_scaling"] =
      "{\"type\": \"yarn\", \"factor\": 64.0, \"original_max_position_embeddings\": 4096, "
      "\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}";
  k["quantization_config"] = "{\"quant_method\": \"compressed-tensors\", \"ignore\": [\"re:.*self_attn.*\"]}";
  const AttentionConfig c = parse_config(nested_json(k), "cfg.json");
  BOOST_TEST(c.model_type == "kimi_k25");  // the outer one
  BOOST_TEST(c.nested_text_config);
  BOOST_TEST(c.hidden_size == 7168);
  BOOST_TEST(c.q_lora_rank == 1536);
  BOOST_TEST(c.rope.beta_fast == 32.0);
  BOOST_TEST(c.rope.factor == 64.0);

  // Errors inside text_config name the full key path.
  auto bad = flat_keys();
  bad.erase("kv_lora_rank");
  expect_config_error(nested_json(bad), {"'text_config.kv_lora_rank'", "missing"});
}

BOOST_AUTO_TEST_CASE(rope_parameters_transformers5) {
  // transformers 5: rope_parameters holds rope_theta and both rope_type and type.
  auto k = flat_keys();
  k.erase("rope_scaling");
  k.erase("rope_theta");
  k["rope_parameters"] =
      "{\"rope_type\": \"yarn\", \"type\": \"yarn\", \"rope_theta\": 50000.0, \"factor\": 64.0, "
      "\"original_max_position_embeddings\": 4096, \"beta_fast\": 32.0, \"beta_slow\": 1.0, "
      "\"mscale\": 1.0, \"mscale_all_dim\": 1.0}";
  AttentionConfig c = parse_config(nested_json(k), "cfg.json");
  BOOST_TEST(c.rope.is_yarn());
  BOOST_TEST(c.rope.rope_theta == 50000.0);
  BOOST_TEST(c.rope.beta_fast == 32.0);

  // rope_theta inside rope_parameters wins over a top-level one.
  k["rope_theta"] = "12345.0";
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.rope_theta == 50000.0);

  // rope_parameters wins over rope_scaling when both are given.
  k["rope_scaling"] = "{\"type\": \"yarn\", \"factor\": 8.0}";
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.factor == 64.0);

  // Plain RoPE under rope_parameters: only rope_type "default" and the base.
  k.erase("rope_scaling");
  k.erase("rope_theta");
  k["rope_parameters"] = "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}";
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.rope_type == "default");
  BOOST_TEST(!c.rope.is_yarn());
  BOOST_TEST(c.rope.rope_theta == 10000.0);
}

BOOST_AUTO_TEST_CASE(rope_scaling_null_is_plain_rope) {
  auto k = flat_keys();
  k["rope_scaling"] = "null";
  k["rope_theta"] = "10000.0";
  AttentionConfig c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.rope_type == "default");
  BOOST_TEST(c.rope.rope_theta == 10000.0);
  BOOST_TEST(c.rope.factor == 1.0);
  // Absent altogether: the same.
  k.erase("rope_scaling");
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.rope_type == "default");
}

BOOST_AUTO_TEST_CASE(q_lora_rank_null_means_q_proj) {
  auto k = flat_keys();
  k["q_lora_rank"] = "null";
  AttentionConfig c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.q_lora_rank == 0);
  BOOST_TEST(!c.has_q_lora());
  k["q_lora_rank"] = "0";
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(!c.has_q_lora());
}

BOOST_AUTO_TEST_CASE(yarn_key_fallbacks_follow_hf) {
  auto k = flat_keys();
  // beta_fast 0 -> 32 and beta_slow null -> 1 (`get(..) or 32` / `or 1`); original_max
  // missing -> max_position_embeddings; mscale / mscale_all_dim missing -> 0.
  k["rope_scaling"] = "{\"type\": \"yarn\", \"factor\": 40, \"beta_fast\": 0, \"beta_slow\": null}";
  AttentionConfig c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.beta_fast == 32.0);
  BOOST_TEST(c.rope.beta_slow == 1.0);
  BOOST_TEST(c.rope.original_max_position_embeddings == 262144.0);
  BOOST_TEST(c.rope.mscale == 0.0);
  BOOST_TEST(c.rope.mscale_all_dim == 0.0);
  BOOST_TEST(c.rope.truncate);
  // Explicit attention_factor, truncate false, rope_type spelling, rope_interleave false.
  k["rope_scaling"] =
      "{\"rope_type\": \"yarn\", \"factor\": 4, \"attention_factor\": 0.75, \"truncate\": false, "
      "\"mscale\": 0.707, \"mscale_all_dim\": 0.707}";
  k["rope_interleave"] = "false";
  k["attention_bias"] = "true";
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.rope.is_yarn());
  BOOST_TEST(c.rope.attention_factor.has_value());
  BOOST_TEST(*c.rope.attention_factor == 0.75);
  BOOST_TEST(!c.rope.truncate);
  BOOST_TEST(c.rope.mscale == 0.707);
  BOOST_TEST(!c.rope_interleave);
  BOOST_TEST(c.attention_bias);
  // num_key_value_heads absent -> num_attention_heads (HF default).
  k.erase("num_key_value_heads");
  c = parse_config(to_json(k), "cfg.json");
  BOOST_TEST(c.num_key_value_heads == 64);
}

BOOST_AUTO_TEST_CASE(missing_keys_are_named) {
  for (const char* key : {"hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                          "qk_rope_head_dim", "v_head_dim", "num_hidden_layers", "vocab_size",
                          "max_position_embeddings", "rope_theta"}) {
    BOOST_TEST_CONTEXT("key " << key) {
      auto k = flat_keys();
      k.erase(key);
      expect_config_error(to_json(k), {std::string("'") + key + "'", "missing"});
    }
  }
  auto k = flat_keys();
  k["rope_scaling"] = "{\"type\": \"yarn\", \"beta_fast\": 32}";
  expect_config_error(to_json(k), {"'rope_scaling.factor'", "missing"});
  k["rope_scaling"] = "{\"factor\": 4}";
  expect_config_error(to_json(k), {"rope_scaling.rope_type", "missing"});
}

BOOST_AUTO_TEST_CASE(wrong_types_and_values_are_named) {
  struct Case {
    const char* key;
    const char* value;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"hidden_size", "\"7168\"", {"'hidden_size'", "integer", "string \"7168\""}},
      {"num_attention_heads", "64.5", {"'num_attention_heads'", "integer"}},
      {"kv_lora_rank", "-512", {"'kv_lora_rank'", "> 0", "-512"}},
      {"v_head_dim", "0", {"'v_head_dim'", "> 0"}},
      {"q_lora_rank", "-1", {"'q_lora_rank'", ">= 0"}},
      {"q_lora_rank", "\"1536\"", {"'q_lora_rank'", "integer"}},
      {"num_key_value_heads", "8", {"'num_key_value_heads'", "8", "64"}},
      {"qk_rope_head_dim", "63", {"'qk_rope_head_dim'", "even"}},
      {"attention_bias", "\"no\"", {"'attention_bias'", "true or false"}},
      {"rope_interleave", "1", {"'rope_interleave'", "true or false"}},
      {"rms_norm_eps", "\"1e-6\"", {"'rms_norm_eps'", "number"}},
      {"rms_norm_eps", "-1e-6", {"'rms_norm_eps'", "> 0"}},
      {"rope_theta", "[1]", {"'rope_theta'", "number", "array"}},
      {"vocab_size", "1e20", {"'vocab_size'", "integer"}},
      {"max_position_embeddings", "18446744073709551615", {"'max_position_embeddings'", "too large"}},
      {"rope_scaling", "\"yarn\"", {"'rope_scaling'", "object"}},
      {"rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", {"'rope_scaling.type'", "linear"}},
      {"rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2}", {"'rope_scaling.rope_type'", "dynamic"}},
      {"rope_scaling", "{\"type\": \"yarn\", \"rope_type\": \"default\", \"factor\": 2}", {"'rope_scaling.type'", "default"}},
      {"rope_scaling", "{\"type\": \"yarn\", \"factor\": \"64\"}", {"'rope_scaling.factor'", "number"}},
      {"rope_scaling", "{\"type\": \"yarn\", \"factor\": -1}", {"'rope_scaling.factor'", "> 0"}},
      {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 64, \"beta_fast\": \"32\"}", {"'rope_scaling.beta_fast'"}},
      {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 64, \"truncate\": 1}", {"'rope_scaling.truncate'"}},
      {"model_type", "7", {"'model_type'", "string"}},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.key << " = " << c.value) {
      auto k = flat_keys();
      k[c.key] = c.value;
      expect_config_error(to_json(k), c.parts);
    }
  }
  expect_config_error("{\"hidden_size\": 7168,", {"not valid JSON"});
  expect_config_error("[1, 2]", {"top level", "object"});
  expect_config_error("{\"model_type\": \"kimi_k25\", \"text_config\": 5}", {"'text_config'", "object"});
}

BOOST_AUTO_TEST_CASE(load_config_from_file) {
  const std::string dir = mla::test::scratch_dir("config");
  mla::test::write_text(dir + "/config.json", to_json(flat_keys()));
  const AttentionConfig c = mla::load_config(dir + "/config.json");
  BOOST_TEST(c.hidden_size == 7168);
  try {
    mla::load_config(dir + "/nope.json");
    BOOST_ERROR("no error for a missing file");
  } catch (const mla::Error& e) {
    BOOST_TEST((e.kind() == ErrorKind::Config));
    BOOST_TEST(std::string(e.what()).find(dir + "/nope.json") != std::string::npos);
  }
  // Errors in a loaded file name that file.
  auto k = flat_keys();
  k.erase("v_head_dim");
  mla::test::write_text(dir + "/bad.json", to_json(k));
  try {
    mla::load_config(dir + "/bad.json");
    BOOST_ERROR("no error");
  } catch (const mla::Error& e) {
    BOOST_TEST(std::string(e.what()).find(dir + "/bad.json: key 'v_head_dim' is missing") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(kimi_k26_and_tiny_geometries) {
  const AttentionConfig k = mla::kimi_k26_model().attention;
  BOOST_TEST(k.hidden_size == 7168);
  BOOST_TEST(k.num_attention_heads == 64);
  BOOST_TEST(k.num_key_value_heads == 64);
  BOOST_TEST(k.q_lora_rank == 1536);
  BOOST_TEST(k.kv_lora_rank == 512);
  BOOST_TEST(k.qk_nope_head_dim == 128);
  BOOST_TEST(k.qk_rope_head_dim == 64);
  BOOST_TEST(k.v_head_dim == 128);
  BOOST_TEST(k.num_hidden_layers == 61);
  BOOST_TEST(k.max_position_embeddings == 262144);
  BOOST_TEST(k.rms_norm_eps == 1e-5);
  BOOST_TEST(k.rope.rope_type == "yarn");
  BOOST_TEST(k.rope.rope_theta == 50000.0);
  BOOST_TEST(k.rope.factor == 64.0);
  BOOST_TEST(k.rope.original_max_position_embeddings == 4096.0);
  BOOST_TEST(k.rope.beta_fast == 32.0);
  BOOST_TEST(k.rope.beta_slow == 1.0);
  BOOST_TEST(k.rope.mscale == 1.0);
  BOOST_TEST(k.rope.mscale_all_dim == 1.0);
  BOOST_TEST(k.nested_text_config);
  BOOST_TEST(k.model_type == "kimi_k25");
  // docs/math.md §12: 101,124,096 attention parameters per layer, from the shapes.
  const int64_t params = k.q_lora_rank * k.hidden_size + k.q_lora_rank +
                         k.num_attention_heads * k.qk_head_dim() * k.q_lora_rank +
                         (k.kv_lora_rank + k.qk_rope_head_dim) * k.hidden_size + k.kv_lora_rank +
                         k.num_attention_heads * (k.qk_nope_head_dim + k.v_head_dim) * k.kv_lora_rank +
                         k.hidden_size * k.num_attention_heads * k.v_head_dim;
  BOOST_TEST(params == 101124096);

  const AttentionConfig t = mla::tiny_model().attention;
  BOOST_TEST(t.hidden_size == 64);
  BOOST_TEST(t.num_attention_heads == 4);
  BOOST_TEST(t.q_lora_rank == 48);
  BOOST_TEST(t.kv_lora_rank == 32);
  BOOST_TEST(t.qk_nope_head_dim == 16);
  BOOST_TEST(t.qk_rope_head_dim == 8);
  BOOST_TEST(t.v_head_dim == 16);
  BOOST_TEST(t.num_hidden_layers == 2);
  BOOST_TEST(t.vocab_size == 97);
  BOOST_TEST(t.rope.is_yarn());
}

BOOST_AUTO_TEST_CASE(config_to_json_round_trips) {
  std::vector<std::pair<AttentionConfig, bool>> cases;
  cases.push_back({mla::kimi_k26_model().attention, true});
  cases.push_back({mla::tiny_model().attention, true});
  AttentionConfig flat = mla::kimi_k26_model().attention;
  flat.model_type = "deepseek_v3";
  flat.nested_text_config = false;
  flat.rope.beta_fast = 1.0;
  cases.push_back({flat, false});
  AttentionConfig odd = mla::tiny_model().attention;
  odd.q_lora_rank = 0;
  odd.attention_bias = true;
  odd.rope_interleave = false;
  odd.rms_norm_eps = 1e-6;
  odd.rope.attention_factor = 0.8125;
  odd.rope.truncate = false;
  odd.rope.mscale = 0.707;
  odd.rope.mscale_all_dim = 0.1 + 0.2;  // not a short decimal: must still round-trip exactly
  cases.push_back({odd, true});
  AttentionConfig plain = mla::tiny_model().attention;
  plain.rope = mla::RopeConfig{};
  plain.rope.rope_theta = 10000.0;
  plain.nested_text_config = false;
  plain.model_type = "deepseek_v3";
  cases.push_back({plain, false});
  for (size_t i = 0; i < cases.size(); ++i) {
    BOOST_TEST_CONTEXT("case " << i) {
      const std::string json = mla::config_to_json(cases[i].first, cases[i].second);
      const AttentionConfig back = parse_config(json, "roundtrip.json");
      BOOST_TEST((back == cases[i].first), json);
      BOOST_TEST((json.find("\"text_config\"") != std::string::npos) == cases[i].second);
    }
  }
  // DeepseekV2 in both layouts: the family comes back, and a rope_interleave of the input is not
  // read (DeepseekV2Config has none), so it cannot be lost on the way (found by fuzz_config)
  std::string v2_text = mla::config_to_json(mla::deepseek_v2_lite_model().attention, false);
  v2_text.insert(v2_text.find('{') + 1, "\n  \"rope_interleave\": false,");
  const AttentionConfig v2 = parse_config(v2_text, "v2.json");
  BOOST_TEST(v2.rope_interleave);
  BOOST_TEST((v2.family == mla::ModelFamily::DeepseekV2));
  for (const bool nested : {false, true}) {
    AttentionConfig back = parse_config(mla::config_to_json(v2, nested), "v2 round trip");
    back.nested_text_config = v2.nested_text_config;
    BOOST_TEST((back == v2), "nested " << nested);
  }
  const std::string nested = mla::config_to_json(mla::kimi_k26_model().attention, true);
  BOOST_TEST(nested.find("\"KimiK25ForConditionalGeneration\"") != std::string::npos);
  BOOST_TEST(nested.find("\"DeepseekV3ForCausalLM\"") != std::string::npos);
  BOOST_TEST(nested.find("\"model_type\": \"kimi_k25\"") != std::string::npos);
}

// Every seed of the config fuzzer (tests/data/fuzz_seeds/config/, the findings among them) under
// the fuzzer's own rule: rejected with mla::Error, or accepted and round-tripping in both layouts.
// The findings were: a V2 config's rope_interleave read and then lost; a nested config whose outer
// model_type ("kimi_k25") was written as the flat model_type over a V2 text model, read back as V3.
BOOST_AUTO_TEST_CASE(every_fuzz_seed_round_trips) {
  int accepted = 0, seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(mla::test::data_dir() + "/fuzz_seeds/config")) {
    ++seeds;
    const std::string text = mla::test::read_text(entry.path().string());
    AttentionConfig cfg;
    try {
      cfg = parse_config(text, entry.path().filename().string());
    } catch (const mla::Error&) {
      continue;
    }
    ++accepted;
    BOOST_TEST(mla::fuzz::config_round_trip_failure(cfg) == "", entry.path().filename());
  }
  BOOST_TEST(seeds >= 6);
  BOOST_TEST(accepted >= 6);  // every seed is a config the parser accepts
}

// The whole models of `synth --preset` (values from each model's published config.json) written
// as config.json and read back by the whole-model parser: every attention field, the family and
// the decoder keys come back as written; V2's config names DeepseekV2ForCausalLM, softmax routing
// and no rope_interleave.
BOOST_AUTO_TEST_CASE(published_presets_round_trip_as_whole_models) {
  const std::vector<std::pair<const char*, mla::ModelConfig>> presets = {
      {"kimi-k2.6", mla::kimi_k26_model()},
      {"deepseek-v3", mla::deepseek_v3_model()},
      {"deepseek-v2-lite", mla::deepseek_v2_lite_model()},
      {"moonlight-16b-a3b", mla::moonlight_model()},
      {"tiny", mla::tiny_model()},
  };
  for (const auto& [name, m] : presets) {
    BOOST_TEST_CONTEXT(name) {
      const std::string json = mla::model_config_to_json(m, m.attention.nested_text_config);
      const mla::ModelConfig back = mla::parse_model_config(json, std::string(name) + ".json");
      BOOST_TEST((back.attention == m.attention), json);
      BOOST_TEST(back.intermediate_size == m.intermediate_size);
      BOOST_TEST(back.moe_intermediate_size == m.moe_intermediate_size);
      BOOST_TEST(back.first_k_dense_replace == m.first_k_dense_replace);
      BOOST_TEST(back.n_routed_experts == m.n_routed_experts);
      BOOST_TEST(back.n_shared_experts == m.n_shared_experts);
      BOOST_TEST(back.num_experts_per_tok == m.num_experts_per_tok);
      BOOST_TEST(back.n_group == m.n_group);
      BOOST_TEST(back.topk_group == m.topk_group);
      BOOST_TEST(back.norm_topk_prob == m.norm_topk_prob);
      BOOST_TEST(back.routed_scaling_factor == m.routed_scaling_factor);
      BOOST_TEST(back.topk_method == m.topk_method);
      BOOST_TEST(back.scoring_func == m.scoring_func);
      BOOST_TEST(back.bos_token_id == m.bos_token_id);
      BOOST_TEST(back.eos_token_id == m.eos_token_id);
      const bool v2 = m.attention.family == mla::ModelFamily::DeepseekV2;
      BOOST_TEST(m.scoring_func == (v2 ? "softmax" : "sigmoid"));
      BOOST_TEST((json.find("\"DeepseekV2ForCausalLM\"") != std::string::npos) == v2);
      BOOST_TEST((json.find("\"rope_interleave\"") != std::string::npos) == !v2);
    }
  }
  // the three published ones as their config.json files give them
  BOOST_TEST(mla::deepseek_v3_model().attention.num_attention_heads == 128);
  BOOST_TEST(mla::deepseek_v2_lite_model().attention.rope.mscale_all_dim == 0.707);
  BOOST_TEST(!mla::moonlight_model().attention.rope.is_yarn());
  BOOST_TEST(mla::moonlight_model().attention.rope.rope_theta == 50000.0);
}


// The presets are config.json files (src/checkpoint/presets/), read by the one config reader:
// each file reads and writes back exactly, the preset functions return what the file says, and
// the values match what docs/checkpoints.md §4 quotes for each model.
BOOST_AUTO_TEST_CASE(presets_are_config_json_files_with_the_published_values) {
  struct Quoted {
    const char* file;
    mla::ModelConfig (*preset)();
    int64_t hidden, heads, q_lora, kv_lora, layers, experts, expert_width, per_token, dense_width;
    double eps, theta;
  };
  const Quoted quoted[] = {
      {"kimi-k2.6", mla::kimi_k26_model, 7168, 64, 1536, 512, 61, 384, 2048, 8, 18432, 1e-5, 50000},
      {"deepseek-v3", mla::deepseek_v3_model, 7168, 128, 1536, 512, 61, 256, 2048, 8, 18432, 1e-6, 10000},
      {"deepseek-v2-lite", mla::deepseek_v2_lite_model, 2048, 16, 0, 512, 27, 64, 1408, 6, 10944, 1e-6, 10000},
      {"moonlight-16b-a3b", mla::moonlight_model, 2048, 16, 0, 512, 27, 64, 1408, 6, 11264, 1e-5, 50000},
      {"tiny", mla::tiny_model, 64, 4, 48, 32, 2, 8, 32, 2, 96, 1e-5, 50000},
  };
  const std::string dir = mla::test::data_dir() + "/../../src/checkpoint/presets/";
  for (const Quoted& q : quoted) {
    BOOST_TEST_CONTEXT(q.file) {
      const std::string text = mla::test::read_text(dir + q.file + ".json");
      const mla::ModelConfig m = mla::parse_model_config(text, q.file);
      std::string back = mla::model_config_to_json(m, m.attention.nested_text_config);
      BOOST_TEST((back == text || back + "\n" == text));
      BOOST_TEST(mla::model_config_to_json(q.preset(), m.attention.nested_text_config) == back);
      const mla::AttentionConfig& c = m.attention;
      BOOST_TEST(c.hidden_size == q.hidden);
      BOOST_TEST(c.num_attention_heads == q.heads);
      BOOST_TEST(c.q_lora_rank == q.q_lora);
      BOOST_TEST(c.kv_lora_rank == q.kv_lora);
      BOOST_TEST(c.qk_nope_head_dim == (q.hidden == 64 ? 16 : 128));
      BOOST_TEST(c.qk_rope_head_dim == (q.hidden == 64 ? 8 : 64));
      BOOST_TEST(c.v_head_dim == (q.hidden == 64 ? 16 : 128));
      BOOST_TEST(c.num_hidden_layers == q.layers);
      BOOST_TEST(c.rms_norm_eps == q.eps);
      BOOST_TEST(c.rope.rope_theta == q.theta);
      BOOST_TEST(m.n_routed_experts == q.experts);
      BOOST_TEST(m.moe_intermediate_size == q.expert_width);
      BOOST_TEST(m.num_experts_per_tok == q.per_token);
      BOOST_TEST(m.intermediate_size == q.dense_width);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
