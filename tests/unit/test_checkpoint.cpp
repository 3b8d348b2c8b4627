// tests/unit/test_checkpoint.cpp — suite `checkpoint`: Checkpoint::open / load_layer /
// embed_rows on sharded (index.json, 6-digit totals), single-file and file+config layouts,
// "model." / "language_model.model." / other prefixes, BF16/F16/F32 exact widening, FP8
// E4M3 block dequantization (with partial edge blocks) against hand-computed values, every
// error message; the f32 -> E4M3 encoder; synthesize_checkpoint (layout, determinism);
// `mla-h2o synth` and `mla-h2o inspect` through the CLI.
//
// Expected values come from the fixtures' own construction (values written by hand or by
// formulas in this file, decoded here with independent bit-level decoders), never from the
// loader under test.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/synth.hpp"
#include "mla/model.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"
#include "mla/fp8.hpp"
#include "mla/safetensors.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {
namespace fs = std::filesystem;
using mla::AttentionConfig;
using mla::Checkpoint;
using mla::DType;
using mla::ErrorKind;
using mla::LayerWeights;
using mla::TensorF;

// ---- independent decoders (bit formulas of bf16.hpp's header comment) --------------------
float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// E4M3FN: value = (e == 0) ? m * 2^-9 : (1 + m/8) * 2^(e-7), sign applied; NaN for 0x7F/0xFF.
float e4m3_value(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return static_cast<float>(s ? -mag : mag);
}

// f32 -> f16 bits, for values exactly representable as normal halves (or zero) only.
uint16_t f16_bits_exact(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7FFFFFFFu) == 0) return sign;
  const int e = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
  BOOST_REQUIRE(e > 0 && e < 31 && (u & 0x1FFFu) == 0);
  return static_cast<uint16_t>(sign | (e << 10) | ((u >> 13) & 0x3FFu));
}

std::vector<std::byte> bytes_of_u16(const std::vector<uint16_t>& v) {
  std::vector<std::byte> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Checks that `fn` throws mla::Error of `kind` whose message holds every part.
template <class Fn>
void expect_error(Fn&& fn, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    fn();
    BOOST_ERROR("no error thrown");
  } catch (const mla::Error& e) {
    BOOST_TEST((e.kind() == kind), "kind " << mla::error_kind_name(e.kind()) << ": " << e.what());
    const std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
  }
}

// ---- hand-made fixtures ------------------------------------------------------------------
// The tiny geometry, flat layout, no q LoRA variants etc. are set by the caller.
AttentionConfig flat_tiny() {
  AttentionConfig c = mla::tiny_model().attention;
  c.nested_text_config = false;
  c.model_type = "deepseek_v3";
  return c;
}

// A value exactly representable in BF16, F16 and F32: k/8 with |k| <= 120, from a formula.
float exact_value(size_t tensor, size_t i) {
  const int k = static_cast<int>((i * 37 + tensor * 11) % 241) - 120;
  return static_cast<float>(k) / 8.0f;
}

struct HandTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // what the loader must return
};

// The attention tensors of layer `L` for `c` under `prefix`, filled with exact_value().
std::vector<HandTensor> hand_layer(const AttentionConfig& c, const std::string& prefix, int64_t L) {
  const int64_t H = c.hidden_size, n = c.num_attention_heads;
  const std::string b = prefix + "layers." + std::to_string(L) + ".";
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"input_layernorm.weight", {H}},
      {"self_attn.q_a_proj.weight", {c.q_lora_rank, H}},
      {"self_attn.q_a_layernorm.weight", {c.q_lora_rank}},
      {"self_attn.q_b_proj.weight", {n * c.qk_head_dim(), c.q_lora_rank}},
      {"self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H}},
      {"self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}},
      {"self_attn.kv_b_proj.weight", {n * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}},
      {"self_attn.o_proj.weight", {H, n * c.v_head_dim}},
  };
  std::vector<HandTensor> out;
  for (size_t t = 0; t < specs.size(); ++t) {
    HandTensor h{b + specs[t].first, specs[t].second, {}};
    h.values.resize(static_cast<size_t>(TensorF::count(h.shape)));
    for (size_t i = 0; i < h.values.size(); ++i) h.values[i] = exact_value(t + static_cast<size_t>(L) * 10, i);
    out.push_back(std::move(h));
  }
  return out;
}

// Writes `tensors` to `path` in `dtype` (BF16 / F16 / F32).
void write_hand(const std::string& path, const std::vector<HandTensor>& tensors, DType dtype) {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<mla::TensorToWrite> entries;
  for (const auto& t : tensors) {
    if (dtype == DType::F32) {
      buffers.push_back(mla::encode_f32(t.values));
    } else if (dtype == DType::BF16) {
      buffers.push_back(mla::encode_bf16(t.values));  // exact: the values have <= 8 significant bits
    } else {
      std::vector<uint16_t> h;
      for (float v : t.values) h.push_back(f16_bits_exact(v));
      buffers.push_back(bytes_of_u16(h));
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    entries.push_back({tensors[i].name, dtype, std::vector<uint64_t>(tensors[i].shape.begin(), tensors[i].shape.end()),
                       buffers[i]});
  mla::write_safetensors(path, entries);
}

// The LayerWeights member a checkpoint tensor name loads into.
const TensorF& field(const LayerWeights& w, const std::string& s) {
  if (s.find("input_layernorm") != std::string::npos) return w.input_layernorm;
  if (s.find("q_a_proj.weight") != std::string::npos) return w.q_a_proj;
  if (s.find("q_a_layernorm") != std::string::npos) return w.q_a_layernorm;
  if (s.find("q_b_proj") != std::string::npos) return w.q_b_proj;
  if (s.find("kv_a_proj_with_mqa.weight") != std::string::npos) return w.kv_a_proj_with_mqa;
  if (s.find("kv_a_layernorm") != std::string::npos) return w.kv_a_layernorm;
  if (s.find("kv_b_proj") != std::string::npos) return w.kv_b_proj;
  return w.o_proj;
}

void check_layer_equals(const LayerWeights& w, const std::vector<HandTensor>& expected) {
  for (const auto& t : expected) {
    BOOST_TEST_CONTEXT(t.name) {
      const TensorF& got = field(w, t.name);
      BOOST_TEST(got.shape == t.shape);
      BOOST_TEST(got.data == t.values);  // exact widening: bit-equal
    }
  }
}

std::vector<std::byte> file_bytes(const std::string& path) {
  const std::string s = mla::test::read_text(path);
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint)

// ---- f32 -> E4M3FN encoder -----------------------------------------------------------------
BOOST_AUTO_TEST_CASE(fp8_encoder_round_trips_every_code) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((code & 0x7F) == 0x7F) continue;  // NaN codes
    BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(e4m3_value(code))) == c);
  }
}

BOOST_AUTO_TEST_CASE(fp8_encoder_rounds_to_nearest_even) {
  // Between each pair of adjacent positive codes: midpoint -> the even code, just above ->
  // the upper one, just below -> the lower one (midpoints are exact in f32).
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_value(static_cast<uint8_t>(c)), hi = e4m3_value(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;
    const int even = (c % 2 == 0) ? c : c + 1;
    BOOST_TEST_CONTEXT("codes " << c << ", " << c + 1) {
      BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(mid)) == even);
      BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(std::nextafter(mid, 1e9f))) == c + 1);
      BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(std::nextafter(mid, 0.0f))) == c);
      BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(-mid)) == (even | 0x80));
    }
  }
}

BOOST_AUTO_TEST_CASE(fp8_encoder_saturates_and_keeps_nan) {
  for (float v : {448.0f, 450.0f, 464.0f, 479.0f, 480.0f, 1e6f, INFINITY})
    BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(v)) == 0x7E, v);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(-1e6f)) == 0xFE);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(-INFINITY)) == 0xFE);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(NAN)) == 0x7F);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(-NAN)) == 0xFF);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(0.0f)) == 0x00);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(-0.0f)) == 0x80);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(1e-40f)) == 0x00);           // f32 subnormal
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(std::ldexp(1.0f, -10))) == 0);  // half of 2^-9: tie to 0
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(std::ldexp(1.5f, -10))) == 1);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(1.0f)) == 0x38);
  BOOST_TEST(static_cast<int>(mla::float_to_fp8_e4m3fn(-2.0f)) == 0xC0);
}

// ---- synthetic checkpoints -------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(synth_tiny_sharded_layout_and_load) {
  const std::string dir = mla::test::scratch_dir("synth-tiny");
  mla::SynthOptions o;
  o.preset = "tiny";
  o.out_dir = dir;
  o.layers = {0, 1};
  o.shards = 3;
  o.seed = 3;
  const AttentionConfig cfg = mla::synthesize_checkpoint(o).attention;
  BOOST_TEST(cfg.vocab_size == 97);
  for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-000003.safetensors",
                        "model-00002-of-000003.safetensors", "model-00003-of-000003.safetensors"})
    BOOST_TEST(fs::exists(dir + "/" + f), f);

  const Checkpoint ck = Checkpoint::open(dir);
  BOOST_TEST(ck.prefix() == "language_model.model.");
  BOOST_TEST(ck.shards().size() == 3u);
  BOOST_TEST((ck.layers_present() == std::vector<int64_t>{0, 1}));
  BOOST_TEST(ck.config().nested_text_config);
  BOOST_TEST(ck.config().model_type == "kimi_k25");
  BOOST_TEST((ck.config() == cfg));

  // index.json: total_size = the sum of all tensors' bytes; embed_tokens in the last shard.
  uint64_t total = 0;
  bool embed_last = false;
  for (const auto& t : ck.list_tensors()) {
    total += t.info.nbytes();
    if (t.name == "language_model.model.embed_tokens.weight")
      embed_last = fs::path(t.shard).filename() == "model-00003-of-000003.safetensors";
  }
  BOOST_TEST(embed_last);
  const std::string index = mla::test::read_text(dir + "/model.safetensors.index.json");
  BOOST_TEST(index.find("\"total_size\": " + std::to_string(total)) != std::string::npos, index);

  // Loaded values == the BF16 bytes in the shards, decoded here bit by bit.
  const LayerWeights w = ck.load_layer(1, true);
  BOOST_TEST(w.layer == 1);
  BOOST_TEST(w.parameter_count() == 18512);  // 48*64 + 48 + 96*48 + 40*64 + 32 + 128*32 + 64*64
  BOOST_TEST(w.source_dtype.at("q_b_proj") == "BF16");
  BOOST_TEST((w.kv_a_proj_with_mqa.shape == std::vector<int64_t>{40, 64}));
  BOOST_TEST(w.q_proj.empty());
  BOOST_TEST(w.o_proj_bias.empty());
  for (const auto& loc : ck.list_tensors()) {
    if (loc.name.find("layers.1.") == std::string::npos) continue;
    const auto f = mla::SafetensorsFile::open(loc.shard);
    const auto raw = f.bytes(*f.find(loc.name));
    std::vector<float> expect(raw.size() / 2);
    for (size_t i = 0; i < expect.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      expect[i] = bf16_bits_to_float(b);
    }
    BOOST_TEST_CONTEXT(loc.name) { BOOST_TEST(field(w, loc.name).data == expect); }
  }

  // embed_rows: rows of the last shard's embed_tokens, decoded here.
  const TensorF e = ck.embed_rows({96, 0, 5});
  BOOST_TEST((e.shape == std::vector<int64_t>{3, 64}));
  const auto f = mla::SafetensorsFile::open(dir + "/model-00003-of-000003.safetensors");
  const auto raw = f.bytes(f.at("language_model.model.embed_tokens.weight"));
  const int64_t ids[3] = {96, 0, 5};
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 64; ++j) {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * (ids[r] * 64 + j), 2);
      BOOST_TEST(e.data[static_cast<size_t>(r * 64 + j)] == bf16_bits_to_float(b));
    }
  expect_error([&] { ck.embed_rows({3, 97}); }, ErrorKind::InvalidArgument, {"token id 97", "97 rows"});
  expect_error([&] { ck.embed_rows({-1}); }, ErrorKind::InvalidArgument, {"token id -1"});
}

BOOST_AUTO_TEST_CASE(synth_is_deterministic) {
  auto make = [](uint64_t seed, const std::string& dtype) {
    const std::string dir = mla::test::scratch_dir("synth-det");
    mla::SynthOptions o;
    o.out_dir = dir;
    o.seed = seed;
    o.dtype = dtype;
    o.layers = {1};
    mla::synthesize_checkpoint(o);
    return dir;
  };
  const std::string a = make(11, "bf16"), b = make(11, "bf16"), c = make(12, "bf16");
  for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-000002.safetensors",
                        "model-00002-of-000002.safetensors"}) {
    BOOST_TEST((file_bytes(a + "/" + f) == file_bytes(b + "/" + f)), f);
  }
  BOOST_TEST((file_bytes(a + "/model-00001-of-000002.safetensors") != file_bytes(c + "/model-00001-of-000002.safetensors")));
  BOOST_TEST((file_bytes(a + "/model-00002-of-000002.safetensors") != file_bytes(c + "/model-00002-of-000002.safetensors")));
  const std::string f8a = make(11, "f8_e4m3"), f8b = make(11, "f8_e4m3");
  BOOST_TEST((file_bytes(f8a + "/model-00001-of-000002.safetensors") == file_bytes(f8b + "/model-00001-of-000002.safetensors")));
}

BOOST_AUTO_TEST_CASE(synth_dtypes_and_attention_structure) {
  // The same seed in f32, bf16 and f8_e4m3: bf16 = RNE(f32) exactly; f8 = the f32 value
  // quantized per 128x128 block, so |f8 - f32| <= half an E4M3 step: 2^-4 |f32| for normal
  // codes, or 2^-10 * scale_inv below the smallest normal (format bounds, not tolerances).
  auto make = [](const std::string& dtype) {
    const std::string dir = mla::test::scratch_dir("synth-" + dtype);
    mla::SynthOptions o;
    o.out_dir = dir;
    o.dtype = dtype;
    o.seed = 5;
    mla::synthesize_checkpoint(o);
    return Checkpoint::open(dir);
  };
  const Checkpoint c32 = make("f32"), c16 = make("bf16"), c8 = make("f8_e4m3");
  const LayerWeights w32 = c32.load_layer(0), w16 = c16.load_layer(0), w8 = c8.load_layer(0);
  BOOST_TEST(w8.source_dtype.at("q_a_proj") == "F8_E4M3");
  BOOST_TEST(w8.source_dtype.at("q_a_layernorm") == "BF16");
  BOOST_TEST(w32.source_dtype.at("o_proj") == "F32");
  for (size_t i = 0; i < w32.kv_b_proj.data.size(); ++i) {
    const float v = w32.kv_b_proj.data[i];
    BOOST_TEST(w16.kv_b_proj.data[i] == bf16_bits_to_float(static_cast<uint16_t>(
                                            (std::bit_cast<uint32_t>(v) + 0x7FFFu + ((std::bit_cast<uint32_t>(v) >> 16) & 1u)) >> 16)));
  }
  // scale_inv of the single kv_b block = amax / 448.
  float amax = 0;
  for (float v : w32.kv_b_proj.data) amax = std::max(amax, std::fabs(v));
  const float scale = amax / 448.0f;
  const mla::test::Tolerance& fp8 = mla::test::tolerance("kv_b_proj", "fp8-e4m3-vs-f32", "fp8");
  const float rel = static_cast<float>(fp8.rtol), sub = static_cast<float>(fp8.atol);  // 2^-4, 2^-10: exact in float
  for (size_t i = 0; i < w32.kv_b_proj.data.size(); ++i) {
    const float v = w32.kv_b_proj.data[i], q = w8.kv_b_proj.data[i];
    BOOST_TEST(std::fabs(q - v) <= std::fabs(v) * rel + scale * sub, i << ": " << v << " vs " << q);
  }
  BOOST_TEST(w32.parameter_count() == w8.parameter_count());
  // Recipe: the low-frequency half of each head's rope rows in q_b_proj has gain 3 over the
  // rest (tiny: d_r 8 -> rows 4..7 of the 8 rope rows); compare mean squares per row group.
  const AttentionConfig& cfg = c32.config();
  double sink = 0, other = 0;
  for (int64_t h = 0; h < cfg.num_attention_heads; ++h)
    for (int64_t r = 0; r < cfg.qk_rope_head_dim; ++r)
      for (int64_t j = 0; j < cfg.q_lora_rank; ++j) {
        const double v = w32.q_b_proj.data[static_cast<size_t>(((h * cfg.qk_head_dim()) + cfg.qk_nope_head_dim + r) *
                                                                   cfg.q_lora_rank + j)];
        (r >= cfg.qk_rope_head_dim / 2 ? sink : other) += v * v;
      }
  BOOST_TEST(sink > 4.0 * other);  // gain 3 -> 9x in expectation
}

BOOST_AUTO_TEST_CASE(kimi_layer0_parameter_count) {
  const std::string dir = mla::test::scratch_dir("synth-kimi");
  mla::SynthOptions o;
  o.preset = "kimi-k2.6";
  o.out_dir = dir;
  o.vocab = 16;
  o.shards = 64;  // real K2.6 naming: model-00001-of-000064.safetensors
  mla::synthesize_checkpoint(o);
  BOOST_TEST(fs::exists(dir + "/model-00064-of-000064.safetensors"));
  const Checkpoint ck = Checkpoint::open(dir);
  BOOST_TEST(ck.config().vocab_size == 16);
  const LayerWeights w = ck.load_layer(0);
  BOOST_TEST(w.parameter_count() == 101124096);  // docs/math.md §12
  BOOST_TEST((w.o_proj.shape == std::vector<int64_t>{7168, 8192}));
  BOOST_TEST((w.kv_b_proj.shape == std::vector<int64_t>{16384, 512}));
}

// synth --preset deepseek-v2-lite --experts: a DeepseekV2 whole model (its router has no
// e_score_correction_bias) that the whole-model loader reads with V2's routing.
BOOST_AUTO_TEST_CASE(synth_deepseek_v2_lite_is_a_v2_model) {
  const std::string dir = mla::test::scratch_dir("synth-v2-lite");
  mla::SynthOptions o;
  o.preset = "deepseek-v2-lite";
  o.out_dir = dir;
  o.vocab = 16;
  o.experts = 4;
  o.group_size = 64;
  o.layers = {0, 1};
  mla::synthesize_checkpoint(o);
  const Checkpoint ck = Checkpoint::open(dir);
  const mla::ModelConfig m = mla::load_model_config(ck.config_path());
  BOOST_TEST((m.attention.family == mla::ModelFamily::DeepseekV2));
  BOOST_TEST(m.topk_method == "greedy");
  BOOST_TEST(m.num_experts_per_tok == 4);  // the preset's 6, capped by the 4 experts written
  BOOST_TEST(ck.has_tensor("model.layers.1.mlp.gate.weight"));
  BOOST_TEST(!ck.has_tensor("model.layers.1.mlp.gate.e_score_correction_bias"));
  const mla::DecoderLayerWeights w = mla::load_decoder_layer(ck, m, 1, false);
  BOOST_TEST(w.moe);
  BOOST_TEST(w.gate.e_score_correction_bias.empty());
}

// ---- hand-made checkpoints -------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(single_file_layouts_and_prefixes) {
  const AttentionConfig c = flat_tiny();
  const std::string json = mla::config_to_json(c, false);
  for (const std::string prefix : {"model.", "language_model.model.", "", "x.y.z."}) {
    BOOST_TEST_CONTEXT("prefix '" << prefix << "'") {
      // (1) directory with model.safetensors + config.json
      const std::string dir = mla::test::scratch_dir("single");
      const auto tensors = hand_layer(c, prefix, 1);
      write_hand(dir + "/model.safetensors", tensors, DType::F32);
      mla::test::write_text(dir + "/config.json", json);
      const Checkpoint a = Checkpoint::open(dir);
      BOOST_TEST(a.prefix() == prefix);
      BOOST_TEST((a.layers_present() == std::vector<int64_t>{1}));
      check_layer_equals(a.load_layer(1, true), tensors);
      expect_error([&] { a.load_layer(0); }, ErrorKind::TensorNotFound, {"'" + prefix + "layers.0.self_attn.q_a_proj.weight'"});
      // (2) the .safetensors file + an explicit config elsewhere
      const std::string cdir = mla::test::scratch_dir("cfg");
      mla::test::write_text(cdir + "/my-config.json", json);
      const std::string file = mla::test::scratch_dir("file") + "/weights.safetensors";
      write_hand(file, tensors, DType::F32);
      const Checkpoint b = Checkpoint::open(file, cdir + "/my-config.json");
      BOOST_TEST(b.shards().size() == 1u);
      check_layer_equals(b.load_layer(1, true), tensors);
      // (3) a file with no config beside it and none given: a clear error
      expect_error([&] { Checkpoint::open(file); }, ErrorKind::Config, {file, "--config"});
      // (4) a file with config.json beside it
      const Checkpoint d = Checkpoint::open(dir + "/model.safetensors");
      BOOST_TEST(d.prefix() == prefix);
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_f16_f32_load_identically) {
  const AttentionConfig c = flat_tiny();
  const auto tensors = hand_layer(c, "model.", 0);
  std::vector<LayerWeights> loaded;
  for (DType d : {DType::BF16, DType::F16, DType::F32}) {
    const std::string dir = mla::test::scratch_dir("dtype");
    write_hand(dir + "/model.safetensors", tensors, d);
    mla::test::write_text(dir + "/config.json", mla::config_to_json(c, false));
    const LayerWeights w = Checkpoint::open(dir).load_layer(0, true);
    BOOST_TEST(w.source_dtype.at("o_proj") == std::string(mla::dtype_name(d)));
    BOOST_TEST(w.source_dtype.at("input_layernorm") == std::string(mla::dtype_name(d)));
    check_layer_equals(w, tensors);
  }
}

BOOST_AUTO_TEST_CASE(sharded_index_any_names_and_missing_shard) {
  // Layer 0 split over two shards with DeepSeek-style names (-of-000163), layer 1 in a
  // third; a fourth listed in the index does not exist.
  const AttentionConfig c = flat_tiny();
  const std::string dir = mla::test::scratch_dir("sharded");
  mla::test::write_text(dir + "/config.json", mla::config_to_json(c, false));
  const auto l0 = hand_layer(c, "model.", 0), l1 = hand_layer(c, "model.", 1);
  const std::vector<HandTensor> part_a(l0.begin(), l0.begin() + 4), part_b(l0.begin() + 4, l0.end());
  write_hand(dir + "/model-00001-of-000163.safetensors", part_a, DType::BF16);
  write_hand(dir + "/model-00002-of-000163.safetensors", part_b, DType::BF16);
  write_hand(dir + "/model-00007-of-000163.safetensors", l1, DType::BF16);
  std::string map;
  auto add = [&](const std::vector<HandTensor>& ts, const std::string& shard) {
    for (const auto& t : ts) map += (map.empty() ? "" : ",\n") + ("\"" + t.name + "\": \"" + shard + "\"");
  };
  add(part_a, "model-00001-of-000163.safetensors");
  add(part_b, "model-00002-of-000163.safetensors");
  add(l1, "model-00007-of-000163.safetensors");
  map += ",\n\"model.embed_tokens.weight\": \"model-00163-of-000163.safetensors\"";
  mla::test::write_text(dir + "/model.safetensors.index.json",
                        "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {" + map + "}}");
  const Checkpoint ck = Checkpoint::open(dir);
  BOOST_TEST(ck.shards().size() == 4u);
  BOOST_TEST(ck.prefix() == "model.");
  BOOST_TEST((ck.layers_present() == std::vector<int64_t>{0, 1}));
  check_layer_equals(ck.load_layer(0, true), l0);
  check_layer_equals(ck.load_layer(1, true), l1);
  expect_error([&] { ck.embed_rows({0}); }, ErrorKind::Checkpoint,
               {"model-00163-of-000163.safetensors", "missing", "model.embed_tokens.weight"});
  expect_error([&] { ck.list_tensors(); }, ErrorKind::Checkpoint, {"model-00163-of-000163.safetensors"});

  // Remove a shard a layer needs.
  fs::remove(dir + "/model-00002-of-000163.safetensors");
  const Checkpoint ck2 = Checkpoint::open(dir);
  expect_error([&] { ck2.load_layer(0); }, ErrorKind::Checkpoint, {"model-00002-of-000163.safetensors", "missing"});
  check_layer_equals(ck2.load_layer(1, true), l1);  // the other layer still loads

  // Index without an entry for a needed tensor, and one mapping a tensor to a shard that
  // does not hold it (shard 7 holds layer 1 only).
  mla::test::write_text(dir + "/model.safetensors.index.json",
                        "{\"weight_map\": {\"model.layers.0.self_attn.kv_a_proj_with_mqa.weight\": "
                        "\"model-00007-of-000163.safetensors\"}}");
  expect_error([&] { Checkpoint::open(dir).load_layer(0); }, ErrorKind::TensorNotFound,
               {"'model.layers.0.self_attn.q_a_proj.weight' not found", "no entry in"});
  mla::test::write_text(dir + "/model.safetensors.index.json",
                        "{\"weight_map\": {\"model.layers.0.self_attn.kv_a_proj_with_mqa.weight\": "
                        "\"model-00007-of-000163.safetensors\", \"model.layers.0.self_attn.q_a_proj.weight\": "
                        "\"model-00007-of-000163.safetensors\"}}");
  expect_error([&] { Checkpoint::open(dir).load_layer(0); }, ErrorKind::TensorNotFound,
               {"'model.layers.0.self_attn.q_a_proj.weight'", "model-00007-of-000163.safetensors", "does not hold it"});
  mla::test::write_text(dir + "/model.safetensors.index.json", "{\"metadata\": {}}");
  expect_error([&] { Checkpoint::open(dir); }, ErrorKind::Checkpoint, {"weight_map"});
  mla::test::write_text(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
  expect_error([&] { Checkpoint::open(dir); }, ErrorKind::Checkpoint, {"../x.safetensors"});
  expect_error([&] { Checkpoint::open(dir + "/nothing-here"); }, ErrorKind::Checkpoint, {"nothing-here", "does not exist"});
  const std::string empty = mla::test::scratch_dir("empty");
  expect_error([&] { Checkpoint::open(empty); }, ErrorKind::Checkpoint, {"model.safetensors.index.json", "model.safetensors"});
}

BOOST_AUTO_TEST_CASE(shape_and_range_errors) {
  const AttentionConfig c = flat_tiny();
  const std::string dir = mla::test::scratch_dir("shape");
  auto tensors = hand_layer(c, "model.", 0);
  tensors[3].shape = {48, 96};  // q_b_proj transposed
  write_hand(dir + "/model.safetensors", tensors, DType::F32);
  mla::test::write_text(dir + "/config.json", mla::config_to_json(c, false));
  const Checkpoint ck = Checkpoint::open(dir);
  expect_error([&] { ck.load_layer(0); }, ErrorKind::Shape,
               {"'model.layers.0.self_attn.q_b_proj.weight'", dir + "/model.safetensors", "[48, 96]", "expected [96, 48]",
                "q_lora_rank"});
  expect_error([&] { ck.load_layer(2); }, ErrorKind::Checkpoint, {"layer 2", "[0, 2)"});
  expect_error([&] { ck.load_layer(-1); }, ErrorKind::Checkpoint, {"layer -1", "[0, 2)"});

  // An unsupported dtype and a non-finite weight.
  const std::string dir2 = mla::test::scratch_dir("dtype-bad");
  mla::test::write_text(dir2 + "/config.json", mla::config_to_json(c, false));
  auto good = hand_layer(c, "model.", 0);
  good[5].values[3] = NAN;  // kv_a_layernorm
  write_hand(dir2 + "/model.safetensors", good, DType::F32);
  expect_error([&] { Checkpoint::open(dir2).load_layer(0); }, ErrorKind::InvalidValue,
               {"model.layers.0.self_attn.kv_a_layernorm.weight", "non-finite", "index 3"});
  std::vector<int32_t> ints(32, 1);
  std::vector<std::byte> ib(ints.size() * 4);
  std::memcpy(ib.data(), ints.data(), ib.size());
  std::vector<mla::TensorToWrite> entries;
  std::vector<std::vector<std::byte>> bufs;
  auto ok = hand_layer(c, "model.", 0);
  for (auto& t : ok) bufs.push_back(mla::encode_f32(t.values));
  for (size_t i = 0; i < ok.size(); ++i) {
    if (i == 5) {
      entries.push_back({ok[i].name, DType::I32, {32}, ib});
      continue;
    }
    entries.push_back({ok[i].name, DType::F32, std::vector<uint64_t>(ok[i].shape.begin(), ok[i].shape.end()), bufs[i]});
  }
  mla::write_safetensors(dir2 + "/model.safetensors", entries);
  expect_error([&] { Checkpoint::open(dir2).load_layer(0); }, ErrorKind::Shape, {"kv_a_layernorm", "I32"});
}

BOOST_AUTO_TEST_CASE(fp8_block_dequantization_with_partial_blocks) {
  // Geometry with a 576 x 200 kv_a_proj_with_mqa (scale grid [5, 2]: last row block 64 rows,
  // last column block 72 columns) and a 72 x 200 q_proj (no q LoRA; grid [1, 2]).
  AttentionConfig c = flat_tiny();
  c.hidden_size = 200;
  c.num_attention_heads = 1;
  c.num_key_value_heads = 1;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 8;
  const std::string dir = mla::test::scratch_dir("fp8");
  mla::test::write_text(dir + "/config.json", mla::config_to_json(c, false));

  struct Fp8Weight {
    std::string name;
    int64_t rows, cols;
    std::vector<uint8_t> codes;
    std::vector<float> scale;  // [ceil(rows/128), ceil(cols/128)]
  };
  auto make = [](const std::string& name, int64_t rows, int64_t cols, int salt) {
    Fp8Weight w{name, rows, cols, {}, {}};
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        auto code = static_cast<uint8_t>((i * 7 + j * 13 + salt) % 256);
        if ((code & 0x7F) == 0x7F) code = 0x3A;  // no NaN codes
        w.codes.push_back(code);
      }
    const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
    for (int64_t b = 0; b < br * bc; ++b) w.scale.push_back(0.0009765625f * static_cast<float>(b + 1) + 0.0003f * salt);
    return w;
  };
  const std::vector<Fp8Weight> fp8 = {make("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 576, 200, 1),
                                      make("model.layers.0.self_attn.q_proj.weight", 72, 200, 2)};
  // BF16 rest: kv_a_layernorm [512], kv_b_proj [16, 512], o_proj [200, 8].
  std::vector<HandTensor> rest = {
      {"model.layers.0.self_attn.kv_a_layernorm.weight", {512}, std::vector<float>(512, 1.5f)},
      {"model.layers.0.self_attn.kv_b_proj.weight", {16, 512}, std::vector<float>(16 * 512, -0.25f)},
      {"model.layers.0.self_attn.o_proj.weight", {200, 8}, std::vector<float>(1600, 0.5f)},
  };
  std::vector<std::vector<std::byte>> bufs;
  std::vector<mla::TensorToWrite> entries;
  bufs.reserve(16);
  for (const auto& w : fp8) {
    std::vector<std::byte> b(w.codes.size());
    std::memcpy(b.data(), w.codes.data(), b.size());
    bufs.push_back(std::move(b));
    entries.push_back({w.name, DType::F8_E4M3, {uint64_t(w.rows), uint64_t(w.cols)}, bufs.back()});
    bufs.push_back(mla::encode_f32(w.scale));
    entries.push_back({w.name + "_scale_inv", DType::F32,
                       {uint64_t((w.rows + 127) / 128), uint64_t((w.cols + 127) / 128)}, bufs.back()});
  }
  for (const auto& t : rest) {
    bufs.push_back(mla::encode_bf16(t.values));
    entries.push_back({t.name, DType::BF16, std::vector<uint64_t>(t.shape.begin(), t.shape.end()), bufs.back()});
  }
  mla::write_safetensors(dir + "/model.safetensors", entries);

  const LayerWeights w = Checkpoint::open(dir).load_layer(0);
  BOOST_TEST(w.source_dtype.at("kv_a_proj_with_mqa") == "F8_E4M3");
  BOOST_TEST(w.source_dtype.at("q_proj") == "F8_E4M3");
  BOOST_TEST(w.q_a_proj.empty());
  const TensorF* got[2] = {&w.kv_a_proj_with_mqa, &w.q_proj};
  for (int k = 0; k < 2; ++k) {
    const auto& f = fp8[static_cast<size_t>(k)];
    const int64_t bc = (f.cols + 127) / 128;
    int64_t mismatches = 0;
    for (int64_t i = 0; i < f.rows; ++i)
      for (int64_t j = 0; j < f.cols; ++j) {
        // W[i, j] = e4m3(code) * scale_inv[i / 128, j / 128], one f32 multiply.
        const float expect = e4m3_value(f.codes[static_cast<size_t>(i * f.cols + j)]) *
                             f.scale[static_cast<size_t>((i / 128) * bc + j / 128)];
        if (got[k]->data[static_cast<size_t>(i * f.cols + j)] != expect) ++mismatches;
      }
    BOOST_TEST(mismatches == 0, f.name);
  }
  // Spot checks written out by hand: kv_a row 575 (row block 4, the 64-row edge block),
  // column 199 (column block 1, the 72-column edge block): code (575*7 + 199*13 + 1) % 256
  // = 6613 % 256 = 213 = 0xD5 = -(1 + 5/8) * 2^(10-7) = -13; scale_inv[4, 1] = 10 * 2^-10 + 0.0003.
  BOOST_TEST(w.kv_a_proj_with_mqa.data[575 * 200 + 199] == -13.0f * (0.009765625f + 0.0003f));
  // Row 0, column 0: code 1 = 2^-9 (subnormal); scale_inv[0, 0] = 2^-10 + 0.0003.
  BOOST_TEST(w.kv_a_proj_with_mqa.data[0] == std::ldexp(1.0f, -9) * (0.0009765625f + 0.0003f));

  // Missing scale and wrong scale shape.
  entries.erase(entries.begin() + 1);  // kv_a's scale_inv
  mla::write_safetensors(dir + "/model.safetensors", entries);
  expect_error([&] { Checkpoint::open(dir).load_layer(0); }, ErrorKind::TensorNotFound,
               {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv", "F8_E4M3"});
  const std::vector<float> wrong(4, 1.0f);
  const auto wrong_bytes = mla::encode_f32(wrong);
  entries.insert(entries.begin() + 1, mla::TensorToWrite{fp8[0].name + "_scale_inv", DType::F32, {4, 1}, wrong_bytes});
  mla::write_safetensors(dir + "/model.safetensors", entries);
  expect_error([&] { Checkpoint::open(dir).load_layer(0); }, ErrorKind::Shape,
               {"weight_scale_inv", "[4, 1]", "expected [5, 2]"});
}

// ---- CLI: synth and inspect --------------------------------------------------------------------
BOOST_AUTO_TEST_CASE(cli_synth_and_inspect) {
  const std::string dir = mla::test::scratch_dir("cli-synth") + "/ckpt";
  auto r = mla::test::run_cli("synth --preset tiny --out '" + dir + "' --seed 9 --layers 0,1 --shards 2");
  BOOST_TEST(r.exit_code == 0, r.err);
  BOOST_TEST(r.out.find("wrote") != std::string::npos);

  r = mla::test::run_cli("inspect '" + dir + "'");
  BOOST_TEST(r.exit_code == 0, r.err);
  for (const char* s : {"model-00001-of-000002.safetensors", "language_model.model.layers.1.self_attn.kv_b_proj.weight",
                        "language_model.model.embed_tokens.weight", "[128, 32]", "kv_lora_rank", "softmax_scale",
                        "yarn_high", "layers present: 2 of 2: 0,1", "18,512"})
    BOOST_TEST(r.out.find(s) != std::string::npos, "'" << s << "' not in inspect output:\n" << r.out);

  // Progress on stderr (shown after MLA_PROGRESS_AFTER seconds, default 1; 0 = at once), and
  // stdout identical with and without it.
  const std::string plain = r.out;
  BOOST_TEST(r.err.empty(), r.err);
  ::setenv("MLA_PROGRESS_AFTER", "0", 1);
  r = mla::test::run_cli("inspect '" + dir + "'");
  BOOST_TEST(r.exit_code == 0, r.err);
  BOOST_TEST(r.out == plain);
  BOOST_TEST(r.err.find("\rinspect: reading shard header 1/2\rinspect: reading shard header 2/2") != std::string::npos, r.err);
  BOOST_TEST(r.err.find("\rinspect: read 2 shard headers in ") != std::string::npos, r.err);
  ::setenv("MLA_PROGRESS_AFTER", "soon", 1);
  r = mla::test::run_cli("inspect '" + dir + "'");
  BOOST_TEST(r.exit_code != 0);
  BOOST_TEST(r.err.find("MLA_PROGRESS_AFTER='soon'") != std::string::npos, r.err);
  ::unsetenv("MLA_PROGRESS_AFTER");

  r = mla::test::run_cli("inspect '" + dir + "' --json");
  BOOST_TEST(r.exit_code == 0, r.err);
  BOOST_TEST(r.out.find("\"kind\": \"checkpoint\"") != std::string::npos);
  BOOST_TEST(r.out.find("\"layer0_attention_parameters\": 18512") != std::string::npos);

  r = mla::test::run_cli("inspect '" + dir + "/model-00002-of-000002.safetensors'");
  BOOST_TEST(r.exit_code == 0, r.err);
  BOOST_TEST(r.out.find("language_model.model.embed_tokens.weight") != std::string::npos);
  BOOST_TEST(r.out.find("[97, 64]") != std::string::npos);
  BOOST_TEST(r.out.find("12,416") != std::string::npos);  // 97 * 64 * 2 bytes

  // A corrupt file: one error line on stderr, exit 1, nothing on stdout.
  const std::string bad = mla::test::scratch_dir("cli-bad") + "/broken.safetensors";
  // N = 16, but only 14 header bytes follow: the file ends inside the header.
  static const char kBroken[] = "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1,      ";
  mla::test::write_text(bad, std::string(kBroken, sizeof(kBroken) - 1));
  r = mla::test::run_cli("inspect '" + bad + "'");
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.out.empty());
  BOOST_TEST(r.err.find("mla-h2o inspect: error:") == 0u, r.err);
  BOOST_TEST(r.err.find("broken.safetensors") != std::string::npos, r.err);
  BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  r = mla::test::run_cli("synth --preset huge --out '" + dir + "'");
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(r.err.find("--preset") != std::string::npos, r.err);
  r = mla::test::run_cli("synth --preset tiny");
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(r.err.find("--out") != std::string::npos, r.err);
  r = mla::test::run_cli("synth --out '" + dir + "' --layers 0,7");
  BOOST_TEST(r.exit_code == 2);
  BOOST_TEST(r.err.find("layer 7") != std::string::npos, r.err);
  r = mla::test::run_cli("inspect");
  BOOST_TEST(r.exit_code == 2);
}

BOOST_AUTO_TEST_SUITE_END()
