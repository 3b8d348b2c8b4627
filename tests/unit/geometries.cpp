// tests/unit/geometries.cpp — test geometries and seeded random layers (see geometries.hpp).
#include "geometries.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "mla/bf16.hpp"
#include "mla/random.hpp"

namespace mla::test {
namespace {

AttentionConfig tiny() {
  AttentionConfig c;
  c.model_type = "test_tiny";
  c.hidden_size = 32;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.q_lora_rank = 24;
  c.kv_lora_rank = 16;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 8;
  c.num_hidden_layers = 1;
  c.vocab_size = 64;
  c.max_position_embeddings = 262144;
  c.rms_norm_eps = 1e-5;
  c.attention_bias = false;
  c.rope_interleave = true;
  c.rope.rope_type = "yarn";
  c.rope.rope_theta = 50000.0;
  c.rope.factor = 64.0;
  c.rope.original_max_position_embeddings = 4096;
  c.rope.beta_fast = 32.0;
  c.rope.beta_slow = 1.0;
  c.rope.mscale = 1.0;
  c.rope.mscale_all_dim = 1.0;
  return c;
}

AttentionConfig kimi() {
  AttentionConfig c = tiny();
  c.model_type = "kimi_k25";
  c.nested_text_config = true;
  c.hidden_size = 7168;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 64;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.num_hidden_layers = 61;
  c.vocab_size = 163840;
  c.max_position_embeddings = 262144;
  return c;
}

std::vector<Geometry> build_small() {
  std::vector<Geometry> g;
  g.push_back({"tiny", "Kimi-style YaRN (beta 32/1), interleaved rope, q_lora", tiny()});
  {
    AttentionConfig c = tiny();
    c.q_lora_rank = 0;
    g.push_back({"q_lora_null", "q_proj path (q_lora_rank null), no q norm", c});
  }
  {
    AttentionConfig c = tiny();
    c.hidden_size = 72;
    c.num_attention_heads = c.num_key_value_heads = 3;
    c.q_lora_rank = 20;
    c.kv_lora_rank = 40;
    c.qk_nope_head_dim = 12;
    c.qk_rope_head_dim = 6;
    c.v_head_dim = 10;
    g.push_back({"odd", "no power-of-two sizes, d_v != d_n, d_r 6", c});
  }
  {
    AttentionConfig c = tiny();
    c.rope = RopeConfig{};
    c.rope.rope_type = "default";
    c.rope.rope_theta = 10000.0;
    g.push_back({"rope_null", "rope_scaling null: plain RoPE, scale d_qk^-0.5", c});
  }
  {
    AttentionConfig c = tiny();
    c.rope_interleave = false;
    g.push_back({"no_interleave", "rope_interleave false: rotate_half on the raw vector", c});
  }
  {
    AttentionConfig c = tiny();
    c.rope.beta_fast = 1.0;
    c.rope.beta_slow = 1.0;
    g.push_back({"yarn_beta_1_1", "YaRN beta 1/1 (K2-0905 step ramp)", c});
  }
  {
    AttentionConfig c = tiny();
    c.attention_bias = true;
    g.push_back({"bias", "attention_bias true: q_a / kv_a / o_proj biases", c});
  }
  {
    AttentionConfig c = tiny();
    c.attention_bias = true;
    c.q_lora_rank = 0;
    g.push_back({"bias_q_lora_null", "attention_bias true with q_lora null: kv_a / o_proj biases, q_proj none", c});
  }
  {
    // DeepSeek-V2-Lite's conventions: q_proj, yarn factor 40 with mscale = mscale_all_dim = 0.707,
    // and V2's RoPE (pairs in place, one complex product in fp32)
    AttentionConfig c = tiny();
    c.model_type = "deepseek_v2";
    c.family = ModelFamily::DeepseekV2;
    c.q_lora_rank = 0;
    c.rope.rope_theta = 10000.0;
    c.rope.factor = 40.0;
    c.rope.mscale = 0.707;
    c.rope.mscale_all_dim = 0.707;
    g.push_back({"v2", "DeepseekV2: complex-pair RoPE in fp32, q_proj, yarn factor 40 mscale 0.707", c});
  }
  return g;
}

// Fills `t` (already shaped) from stream `stream` of `seed`, each value mean + std * normal,
// rounded to bf16.
void fill(TensorF& t, uint64_t seed, uint64_t stream, double mean, double std) {
  Rng rng(seed, stream);
  for (float& v : t.data) v = round_to_bf16(static_cast<float>(mean + std * rng.normal()));
}

TensorF linear_weight(const std::string& name, int64_t out, int64_t in, uint64_t seed, uint64_t stream) {
  TensorF t(name, {out, in});
  fill(t, seed, stream, 0.0, 1.0 / std::sqrt(static_cast<double>(in)));
  return t;
}

TensorF norm_weight(const std::string& name, int64_t n, uint64_t seed, uint64_t stream) {
  TensorF t(name, {n});
  fill(t, seed, stream, 1.0, 0.1);
  return t;
}

TensorF bias(const std::string& name, int64_t n, uint64_t seed, uint64_t stream) {
  TensorF t(name, {n});
  fill(t, seed, stream, 0.0, 0.02);
  return t;
}

}  // namespace

const std::vector<Geometry>& small_geometries() {
  static const std::vector<Geometry> g = build_small();
  return g;
}

AttentionConfig geometry(const std::string& name) {
  if (name == "kimi") return kimi();
  for (const Geometry& g : small_geometries())
    if (g.name == name) return g.cfg;
  throw std::invalid_argument("unknown test geometry '" + name + "'");
}

std::string vars(const AttentionConfig& c) {
  std::string s = "H=" + std::to_string(c.hidden_size) + " n=" + std::to_string(c.num_attention_heads) +
                  " r_q=" + std::to_string(c.q_lora_rank) + " r_kv=" + std::to_string(c.kv_lora_rank) +
                  " d_n=" + std::to_string(c.qk_nope_head_dim) + " d_r=" + std::to_string(c.qk_rope_head_dim) +
                  " d_v=" + std::to_string(c.v_head_dim);
  if (c.rope.is_yarn()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " rope=yarn(theta %g, f %g, beta %g/%g)", c.rope.rope_theta, c.rope.factor,
                  c.rope.beta_fast, c.rope.beta_slow);
    s += buf;
  } else {
    s += " rope=default(theta " + std::to_string(static_cast<int64_t>(c.rope.rope_theta)) + ")";
  }
  s += std::string(" ") + rope_style_name(c.rope_style());
  s += c.attention_bias ? " bias" : "";
  return s;
}

LayerWeights random_layer_weights(const AttentionConfig& c, uint64_t seed) {
  const int64_t H = c.hidden_size, n = c.num_attention_heads, r_q = c.q_lora_rank, r_kv = c.kv_lora_rank,
                d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim, d_v = c.v_head_dim, d_qk = c.qk_head_dim();
  LayerWeights w;
  // one stream per tensor, so that adding a tensor never changes the others
  if (c.has_q_lora()) {
    w.q_a_proj = linear_weight("q_a_proj.weight", r_q, H, seed, 1);
    w.q_a_layernorm = norm_weight("q_a_layernorm.weight", r_q, seed, 2);
    w.q_b_proj = linear_weight("q_b_proj.weight", n * d_qk, r_q, seed, 3);
  } else {
    w.q_proj = linear_weight("q_proj.weight", n * d_qk, H, seed, 4);
  }
  w.kv_a_proj_with_mqa = linear_weight("kv_a_proj_with_mqa.weight", r_kv + d_r, H, seed, 5);
  w.kv_a_layernorm = norm_weight("kv_a_layernorm.weight", r_kv, seed, 6);
  w.kv_b_proj = linear_weight("kv_b_proj.weight", n * (d_n + d_v), r_kv, seed, 7);
  w.o_proj = linear_weight("o_proj.weight", H, n * d_v, seed, 8);
  if (c.attention_bias) {
    if (c.has_q_lora()) w.q_a_proj_bias = bias("q_a_proj.bias", r_q, seed, 9);  // q_proj has none (HF)
    w.kv_a_proj_with_mqa_bias = bias("kv_a_proj_with_mqa.bias", r_kv + d_r, seed, 10);
    w.o_proj_bias = bias("o_proj.bias", H, seed, 11);
  }
  for (const TensorF* t : {&w.q_a_proj, &w.q_a_layernorm, &w.q_b_proj, &w.q_proj, &w.kv_a_proj_with_mqa,
                           &w.kv_a_layernorm, &w.kv_b_proj, &w.o_proj})
    if (!t->empty()) w.source_dtype[t->name.substr(0, t->name.find('.'))] = "BF16";
  return w;
}

TensorF random_hidden(int64_t seq_len, int64_t hidden_size, uint64_t seed) {
  TensorF t("hidden_states", {seq_len, hidden_size});
  fill(t, seed, 100, 0.0, 1.0);
  return t;
}

}  // namespace mla::test
