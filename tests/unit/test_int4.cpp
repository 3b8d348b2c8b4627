// tests/unit/test_int4.cpp — suite `int4`: compressed-tensors pack-quantized INT4 (Kimi
// K2-Thinking / K2.5 / K2.6 routed experts, docs/checkpoints.md §6).
//
// Expected values come from compressed-tensors itself: tests/data/int4/ was written by
// reference/python/make_int4_fixture.py (PyPI compressed-tensors 0.20.1 compressing a few
// weights in bf16, fp32 and fp16, then decompressing them), and the loader's output must equal
// its decompressed weights bit for bit; the quantizer of `mla-h2o synth` must turn the
// fixture's source weights into the very bytes compressed-tensors wrote. One word is also
// worked by hand. Every malformed packed weight or scheme is one error naming the tensor.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/policy.hpp"
#include "mla/int4.hpp"
#include "mla/model.hpp"
#include "mla/synth.hpp"
#include "mla/model_forward.hpp"
#include "mla/safetensors.hpp"
#include "compare.hpp"
#include "reference/model_reference.hpp"
#include "test_util.hpp"

namespace {
namespace fs = std::filesystem;
using mla::Checkpoint;
using mla::DType;
using mla::ErrorKind;

std::string fixture_dir() { return mla::test::data_dir() + "/int4"; }

// Every quantized weight of the fixture (make_int4_fixture.py's QUANTIZED).
const std::vector<std::string> kQuantized = {
    "model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.0.up_proj",
    "model.layers.1.mlp.experts.0.down_proj", "model.layers.1.mlp.experts.1.gate_proj",
    "model.layers.1.mlp.experts.1.up_proj",   "model.layers.1.mlp.experts.1.down_proj",
};
const std::vector<std::string> kIgnored = {"model.layers.1.mlp.shared_experts.gate_proj",
                                           "model.layers.1.self_attn.o_proj"};

std::vector<int64_t> shape_of(const mla::TensorInfo& t) { return {t.shape.begin(), t.shape.end()}; }

// A float's bits, so that == is exact (and tells -0 from +0).
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

BOOST_AUTO_TEST_SUITE(int4)

// config.json as compressed-tensors' ModelCompressor.update_config wrote it.
BOOST_AUTO_TEST_CASE(fixture_config_is_read) {
  const mla::AttentionConfig c = mla::load_config(fixture_dir() + "/config.json");
  BOOST_TEST(c.quantization.present);
  BOOST_TEST(c.quantization.weight_groups == 1);
  BOOST_TEST(!c.quantization.mixed_schemes);
  BOOST_TEST((c.quantization.targets == std::vector<std::string>{"Linear"}));
  BOOST_TEST((c.quantization.ignore == kIgnored));
  BOOST_TEST(c.quantization.unsupported_reason().empty());
  const mla::PackQuantization::Scheme& q = c.quantization.scheme;
  BOOST_TEST(q.format == "pack-quantized");
  BOOST_TEST(q.num_bits == 4);
  BOOST_TEST(q.type == "int");
  BOOST_TEST(q.symmetric);
  BOOST_TEST(q.strategy == "group");
  BOOST_TEST(q.group_size == 32);
  BOOST_TEST(!q.dynamic);
  BOOST_TEST(q.actorder.empty());
}

// One row worked by hand: the word 0x76543210 holds codes 0..7 (q = -8..-1) from its lowest
// nibble up, 0xFEDCBA98 codes 8..15 (q = 0..7). The bf16 scale s = 1 + 2^-7 = 1.0000001 b has 8
// significant bits, so q * s needs rounding for q = 3, 5, 6, 7:
//   3s = 1.1000001|1 b * 2    tie -> even 1.1000010 b * 2 = 3.03125
//   5s = 1.0100001|01 b * 4   down -> 5.03125
//   6s = 1.1000001|1 b * 4    tie -> even 6.0625
//   7s = 1.1100001|11 b * 4   up -> 7.0625
// and the negative codes mirror them. A truncating conversion gives 3.015625 for 3s, and keeping
// the f32 product gives 3.0234375: both fail.
BOOST_AUTO_TEST_CASE(one_row_by_hand) {
  const uint32_t words[2] = {0x76543210u, 0xFEDCBA98u};  // 16 codes, one group of 16
  std::vector<std::byte> packed(8);
  for (int w = 0; w < 2; ++w)
    for (int b = 0; b < 4; ++b) packed[static_cast<size_t>(4 * w + b)] = static_cast<std::byte>(words[w] >> (8 * b));
  const float s = 1.0f + 0x1p-7f;  // a bf16 value (bits 0x3F81)
  const std::vector<float> scale = {s};
  std::vector<float> out(16);
  mla::int4::dequantize(packed, scale, DType::BF16, 1, 16, 16, out);
  const float want[16] = {-8 * s, -7.0625f, -6.0625f, -5.03125f, -4 * s, -3.03125f, -2 * s,   -s,
                          0.0f,   s,        2 * s,    3.03125f,  4 * s,  5.03125f,  6.0625f, 7.0625f};
  for (size_t k = 0; k < 16; ++k) BOOST_TEST(bits(out[k]) == bits(want[k]), "code " << k << ": " << out[k] << " vs " << want[k]);
  // The same codes with an F32 scale: one fp32 rounding of the product (exact here).
  mla::int4::dequantize(packed, scale, DType::F32, 1, 16, 16, out);
  for (size_t k = 0; k < 16; ++k) BOOST_TEST(out[k] == static_cast<float>(static_cast<int>(k) - 8) * s);
  // Odd group sizes start groups on either nibble of a byte: groups of 1, 3 and 5 (scales 1, 2, ...)
  // give element k = (code k - 8) * scale of its group.
  for (const int64_t G : {1, 3, 5}) {
    std::vector<float> scales;
    for (int64_t g = 0; g < 15 / G; ++g) scales.push_back(static_cast<float>(g + 1));
    std::vector<float> got(15);
    mla::int4::dequantize(std::span<const std::byte>(packed).first(8), scales, DType::F32, 1, 15, G, got);
    for (int64_t k = 0; k < 15; ++k)
      BOOST_TEST(got[static_cast<size_t>(k)] == static_cast<float>(k - 8) * static_cast<float>(k / G + 1),
                 "group size " << G << ", element " << k);
  }
}

// The loader (Checkpoint::load_tensor under the plain `.weight` name) against compressed-tensors'
// decompression, bit for bit, for bf16, fp32 and fp16 scales; the ignored Linears load as stored.
BOOST_AUTO_TEST_CASE(loader_matches_compressed_tensors) {
  const Checkpoint ck = Checkpoint::open(fixture_dir() + "/model.safetensors", fixture_dir() + "/config.json");
  const mla::SafetensorsFile expected = mla::SafetensorsFile::open(fixture_dir() + "/expected.safetensors");
  std::map<DType, int> scale_dtypes;
  size_t rounded = 0;  // elements where round_to(dtype, q * s) != q * s: the rounding is exercised
  for (const std::string& stem : kQuantized) {
    const std::string name = stem + ".weight";
    const mla::TensorInfo& e = expected.at(name);
    BOOST_TEST_REQUIRE(ck.has_tensor(name));
    BOOST_TEST(ck.stored_dtype(name) == "INT4");
    const mla::TensorF got = ck.load_tensor(name, shape_of(e), "the fixture's shape");
    const std::vector<float> want = expected.to_float(e);  // exact widening of bf16 / f32 / f16
    BOOST_TEST_REQUIRE(got.data.size() == want.size());
    size_t diff = 0;
    for (size_t k = 0; k < want.size(); ++k) diff += bits(got.data[k]) != bits(want[k]);
    BOOST_TEST(diff == 0u, name << ": " << diff << " of " << want.size() << " elements differ");
    ++scale_dtypes[e.dtype];
    // how many products needed rounding: compare with the unrounded product in double
    const mla::SafetensorsFile model = mla::SafetensorsFile::open(fixture_dir() + "/model.safetensors");
    const std::vector<float> scale = model.to_float(model.at(stem + ".weight_scale"));
    const auto packed = model.bytes(model.at(stem + ".weight_packed"));
    const int64_t cols = shape_of(e)[1], words = (cols + 7) / 8;
    for (size_t k = 0; k < want.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k) / cols, j = static_cast<int64_t>(k) % cols;
      const auto byte = static_cast<uint8_t>(packed[static_cast<size_t>(i * words * 4 + j / 2)]);
      const int q = ((j & 1) ? byte >> 4 : byte & 0xF) - 8;
      rounded += static_cast<double>(want[k]) != q * static_cast<double>(scale[static_cast<size_t>(i * (cols / 32) + j / 32)]);
    }
  }
  BOOST_TEST(scale_dtypes[DType::BF16] == 4);
  BOOST_TEST(scale_dtypes[DType::F32] == 1);
  BOOST_TEST(scale_dtypes[DType::F16] == 1);
  BOOST_TEST(rounded > 100u);
  for (const std::string& stem : kIgnored) {
    const std::string name = stem + ".weight";
    BOOST_TEST(ck.stored_dtype(name) == "BF16");
    const mla::TensorInfo& e = expected.at(name);
    const mla::TensorF got = ck.load_tensor(name, shape_of(e), "the fixture's shape");
    const std::vector<float> want = expected.to_float(e);
    BOOST_TEST(std::memcmp(got.data.data(), want.data(), want.size() * 4) == 0, name);
  }
}

// synth's quantizer on the fixture's source weights gives compressed-tensors' bytes.
BOOST_AUTO_TEST_CASE(quantizer_matches_compressed_tensors) {
  const mla::SafetensorsFile source = mla::SafetensorsFile::open(fixture_dir() + "/source.safetensors");
  const mla::SafetensorsFile model = mla::SafetensorsFile::open(fixture_dir() + "/model.safetensors");
  for (const std::string& stem : kQuantized) {
    const mla::TensorInfo& w = source.at(stem + ".weight");
    const std::vector<int64_t> shape = shape_of(w);
    const mla::int4::Packed p = mla::int4::quantize(source.to_float(w), w.dtype, shape[0], shape[1], 32);
    const auto packed = model.bytes(model.at(stem + ".weight_packed"));
    const auto scale = model.bytes(model.at(stem + ".weight_scale"));
    BOOST_TEST_REQUIRE(p.packed.size() == packed.size());
    BOOST_TEST_REQUIRE(p.scale.size() == scale.size());
    BOOST_TEST(std::memcmp(p.scale.data(), scale.data(), scale.size()) == 0, stem << ": weight_scale differs");
    BOOST_TEST(std::memcmp(p.packed.data(), packed.data(), packed.size()) == 0, stem << ": weight_packed differs");
  }
}

// ---- bad input ---------------------------------------------------------------------------

// The fixture's config.json with its quantization_config's text edited by `edit`.
std::string config_with(const std::function<void(std::string&)>& edit) {
  std::string text = mla::test::read_text(fixture_dir() + "/config.json");
  edit(text);
  return text;
}

void replace_once(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  BOOST_TEST_REQUIRE(at != std::string::npos, "'" << from << "' not in the text");
  s.replace(at, from.size(), to);
}

// A checkpoint holding one pack-quantized weight (the fixture's experts.0.gate_proj, [6, 96],
// bf16 scales) after `mutate` edits its tensors, with `config` as config.json.
struct Case {
  std::string what;
  std::function<void(std::map<std::string, mla::TensorToWrite>&, std::vector<std::vector<std::byte>>&)> mutate;
  std::string config;  // "" = the fixture's
  ErrorKind kind;
  std::string message;  // a part of the error text
};

const std::string kStem = "model.layers.1.mlp.experts.0.gate_proj.";

void run_case(const Case& c) {
  const mla::SafetensorsFile model = mla::SafetensorsFile::open(fixture_dir() + "/model.safetensors");
  std::map<std::string, mla::TensorToWrite> tensors;
  std::vector<std::vector<std::byte>> storage;
  storage.reserve(16);
  for (const char* part : {"weight_packed", "weight_scale", "weight_shape"}) {
    const mla::TensorInfo& t = model.at(kStem + part);
    const auto b = model.bytes(t);
    storage.emplace_back(b.begin(), b.end());
    tensors[kStem + part] = {kStem + part, t.dtype, t.shape, storage.back()};
  }
  c.mutate(tensors, storage);
  const std::string dir = mla::test::scratch_dir("int4-bad");
  std::vector<mla::TensorToWrite> list;
  for (auto& [name, t] : tensors) list.push_back(t);
  mla::write_safetensors(dir + "/model.safetensors", list);
  mla::test::write_text(dir + "/config.json",
                        c.config.empty() ? mla::test::read_text(fixture_dir() + "/config.json") : c.config);
  try {
    const Checkpoint ck = Checkpoint::open(dir);
    (void)ck.load_tensor(kStem + "weight", {6, 96}, "[rows, cols]");
    BOOST_ERROR(c.what << ": no error");
  } catch (const mla::Error& e) {
    const std::string msg = e.what();
    BOOST_TEST((e.kind() == c.kind), c.what << ": kind " << mla::error_kind_name(e.kind()) << " (" << msg << ")");
    BOOST_TEST(msg.find(c.message) != std::string::npos, c.what << ": '" << msg << "' lacks '" << c.message << "'");
    BOOST_TEST(msg.find('\n') == std::string::npos, c.what << ": more than one line");
  }
}

BOOST_AUTO_TEST_CASE(bad_packed_weights_and_schemes) {
  using Tensors = std::map<std::string, mla::TensorToWrite>;
  using Storage = std::vector<std::vector<std::byte>>;
  const auto none = [](Tensors&, Storage&) {};
  const auto drop = [](const std::string& part) { return [part](Tensors& t, Storage&) { t.erase(kStem + part); }; };
  const std::vector<Case> cases = {
      {"packed of the wrong shape",
       [](Tensors& t, Storage& s) {
         s.emplace_back(6 * 11 * 4);
         t[kStem + "weight_packed"] = {kStem + "weight_packed", DType::I32, {6, 11}, s.back()};
       },
       "", ErrorKind::Shape, "has shape [6, 11], expected [6, 12] = [rows, ceil(cols/8)]"},
      {"packed of the wrong dtype",
       [](Tensors& t, Storage&) {
         t[kStem + "weight_packed"].dtype = DType::F32;
       },
       "", ErrorKind::Shape, "expected I32"},
      {"missing scale", drop("weight_scale"), "", ErrorKind::TensorNotFound, "has no scale '" + kStem + "weight_scale'"},
      {"missing weight_shape", drop("weight_shape"), "", ErrorKind::TensorNotFound, "has no '" + kStem + "weight_shape'"},
      {"weight_shape disagrees",
       [](Tensors& t, Storage& s) {
         const int64_t v[2] = {6, 64};
         s.emplace_back(16);
         std::memcpy(s.back().data(), v, 16);
         t[kStem + "weight_shape"].data = s.back();
       },
       "", ErrorKind::Shape, "says [6, 64], expected [6, 96]"},
      {"scale of the wrong shape",
       [](Tensors& t, Storage& s) {
         s.emplace_back(6 * 2 * 2);
         t[kStem + "weight_scale"] = {kStem + "weight_scale", DType::BF16, {6, 2}, s.back()};
       },
       "", ErrorKind::Shape, "expected [6, 3] = [rows, cols/group_size]"},
      {"scale of an integer dtype",
       [](Tensors& t, Storage& s) {
         s.emplace_back(6 * 3 * 4);
         t[kStem + "weight_scale"] = {kStem + "weight_scale", DType::I32, {6, 3}, s.back()};
       },
       "", ErrorKind::Shape, "expected BF16, F16 or F32"},
      {"infinite scale",
       [](Tensors& t, Storage& s) {
         s.push_back(s[1]);
         const uint16_t inf = 0x7F80;
         std::memcpy(s.back().data() + 2, &inf, 2);
         t[kStem + "weight_scale"].data = s.back();
       },
       "", ErrorKind::InvalidValue, "dequantizes to a non-finite value"},
      {"a zero point in a symmetric scheme",
       [](Tensors& t, Storage& s) {
         s.emplace_back(6 * 3);
         t[kStem + "weight_zero_point"] = {kStem + "weight_zero_point", DType::I8, {6, 3}, s.back()};
       },
       "", ErrorKind::Unsupported, "weight_zero_point"},
      {"plain and packed both",
       [](Tensors& t, Storage& s) {
         s.emplace_back(6 * 96 * 2);
         t[kStem + "weight"] = {kStem + "weight", DType::BF16, {6, 96}, s.back()};
       },
       "", ErrorKind::Checkpoint, "both as it is and pack-quantized"},
      {"num_bits 8", none, config_with([](std::string& s) { replace_once(s, "\"num_bits\": 4", "\"num_bits\": 8"); }),
       ErrorKind::Unsupported, "quantization_config has num_bits 8; only 4 is supported"},
      {"unknown format", none,
       config_with([](std::string& s) {
         replace_once(s, "\"format\": \"pack-quantized\"", "\"format\": \"nvfp4-pack-quantized\"");
       }),
       ErrorKind::Unsupported, "has format 'nvfp4-pack-quantized'; only 'pack-quantized' is supported"},
      {"unknown strategy", none,
       config_with([](std::string& s) { replace_once(s, "\"strategy\": \"group\"", "\"strategy\": \"channel\""); }),
       ErrorKind::Unsupported, "has strategy 'channel'; only 'group' is supported"},
      {"asymmetric", none,
       config_with([](std::string& s) { replace_once(s, "\"symmetric\": true", "\"symmetric\": false"); }),
       ErrorKind::Unsupported, "has symmetric false"},
      {"float type", none, config_with([](std::string& s) { replace_once(s, "\"type\": \"int\"", "\"type\": \"float\""); }),
       ErrorKind::Unsupported, "has weights type 'float'"},
      {"a group size that does not divide the row", none,
       config_with([](std::string& s) { replace_once(s, "\"group_size\": 32", "\"group_size\": 40"); }),
       ErrorKind::Shape, "group_size 40 does not divide its row length 96"},
      {"no quantization_config", none,
       config_with([](std::string& s) {
         replace_once(s, "\"quant_method\": \"compressed-tensors\"", "\"quant_method\": \"fp8\"");
       }),
       ErrorKind::Config, "has no compressed-tensors quantization_config to dequantize it with"},
  };
  for (const Case& c : cases) run_case(c);
}

// Wrong JSON types in quantization_config are errors when config.json is read; DeepSeek-V3's
// FP8 quantization_config is not compressed-tensors' and is left alone.
BOOST_AUTO_TEST_CASE(config_parsing) {
  const auto expect_error = [](const std::string& text, const std::string& part) {
    try {
      (void)mla::parse_config(text, "config.json");
      BOOST_ERROR("no error for " << part);
    } catch (const mla::Error& e) {
      BOOST_TEST((e.kind() == ErrorKind::Config));
      BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, e.what());
    }
  };
  const std::string base = mla::test::read_text(fixture_dir() + "/config.json");
  std::string t = base;
  replace_once(t, "\"num_bits\": 4", "\"num_bits\": \"4\"");
  expect_error(t, "key 'quantization_config.config_groups.group_0.weights.num_bits' must be an integer");
  t = base;
  replace_once(t, "\"ignore\": [", "\"ignore\": [7, ");
  expect_error(t, "key 'quantization_config.ignore' must be a list of strings");
  t = base;
  replace_once(t, "\"config_groups\": {", "\"config_groups\": {\"g\": 3, ");
  expect_error(t, "key 'quantization_config.config_groups.g' must be an object");

  t = base;
  replace_once(t, "\"quant_method\": \"compressed-tensors\"", "\"quant_method\": \"fp8\"");
  BOOST_TEST(!mla::parse_config(t).quantization.present);
  // No weight scheme, or a preset named instead of written out: read, refused at a packed weight.
  t = base;
  replace_once(t, "\"config_groups\": {", "\"config_groups\": null, \"unused\": {");
  BOOST_TEST(mla::parse_config(t).quantization.present);
  BOOST_TEST(mla::parse_config(t).quantization.unsupported_reason() == "has no config group that quantizes weights");
  t = base;
  replace_once(t, "\"config_groups\": {", "\"config_groups\": {\"W4A16\": [\"Linear\"], ");
  BOOST_TEST(mla::parse_config(t).quantization.unsupported_reason().find("preset scheme ('W4A16')") != std::string::npos);

  // Kimi K2.5 / K2.6: inside text_config; written by config_to_json and read back the same.
  mla::AttentionConfig kimi = mla::kimi_k26_model().attention;
  kimi.quantization = mla::kimi_int4_quantization();
  const std::string json = mla::config_to_json(kimi, true);
  BOOST_TEST(json.find("\"text_config\"") < json.find("\"quantization_config\""));
  const mla::AttentionConfig back = mla::parse_config(json);
  BOOST_TEST((back.quantization == kimi.quantization));
  BOOST_TEST((back == kimi));
  BOOST_TEST(back.quantization.unsupported_reason().empty());
  // K2-Thinking: flat, at the top level.
  kimi.nested_text_config = false;
  kimi.model_type = "kimi_k2";
  BOOST_TEST((mla::parse_config(mla::config_to_json(kimi, false)) == kimi));
}

// `inspect` shows the scheme and counts the packed weights.
BOOST_AUTO_TEST_CASE(inspect_shows_the_scheme) {
  const auto r = mla::test::run_cli("inspect '" + fixture_dir() + "/model.safetensors' --config '" + fixture_dir() +
                                    "/config.json'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(r.out.find("\nquantization (config.json quantization_config):\n") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("  group_size                         32\n") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("  supported                          true\n") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("  pack_quantized_weights             6\n") != std::string::npos, r.out);
  const auto j = mla::test::run_cli("inspect '" + fixture_dir() + "/model.safetensors' --config '" + fixture_dir() +
                                    "/config.json' --json");
  BOOST_TEST_REQUIRE(j.exit_code == 0, j.err);
  simdjson::dom::parser parser;
  const simdjson::dom::element q = parser.parse(j.out)["quantization"];
  BOOST_TEST(int64_t(q["num_bits"]) == 4);
  BOOST_TEST(bool(q["symmetric"]));
  BOOST_TEST(std::string_view(q["strategy"]) == "group");
  BOOST_TEST(int64_t(q["group_size"]) == 32);
  BOOST_TEST(bool(q["supported"]));
  BOOST_TEST(int64_t(q["pack_quantized_weights"]) == 6);
}


// ---- `mla-h2o synth --experts`: a whole model in Kimi K2.6's published layout -------------------

// The tiny whole model of the cases below: tiny_model().attention geometry nested as Kimi K2.6, layer 0
// dense, layer 1 MoE with 4 routed experts (2 groups of 2) in INT4, vocab 97.
mla::SynthOptions tiny_whole_model_options(const std::string& out) {
  mla::SynthOptions o;
  o.preset = "tiny";
  o.out_dir = out;
  o.layers = {0, 1};
  o.experts = 4;
  o.seed = 5;
  o.vocab = 97;
  return o;
}

// Bits of a loaded tensor against the values expected, exactly.
size_t differing(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  size_t d = 0;
  for (size_t k = 0; k < want.size(); ++k) d += bits(got[k]) != bits(want[k]);
  return d;
}

std::vector<float> rounded_bf16(std::vector<float> v) {
  for (float& x : v) x = mla::round_to_bf16(x);
  return v;
}

// The weight a loader must see for a bf16 weight w [rows, cols] that synth stored in INT4 (group
// size 32): compressed-tensors' quantization (int4::quantize, checked byte for byte above), then its
// dequantization (int4::dequantize, checked bit for bit above).
// With dtype F32 (synth --dtype f32) the weight and its scales are F32.
std::vector<float> intended_int4(const std::vector<float>& w, int64_t rows, int64_t cols, DType dtype = DType::BF16) {
  const mla::int4::Packed q = mla::int4::quantize(w, dtype, rows, cols, 32);
  std::vector<float> scale(q.scale.size() / (dtype == DType::F32 ? 4 : 2));
  for (size_t k = 0; k < scale.size(); ++k) {
    if (dtype == DType::F32) {
      std::memcpy(&scale[k], q.scale.data() + 4 * k, 4);
      continue;
    }
    uint16_t b = 0;
    std::memcpy(&b, q.scale.data() + 2 * k, 2);
    scale[k] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
  }
  std::vector<float> out(w.size());
  mla::int4::dequantize(q.packed, scale, dtype, rows, cols, 32, out);
  return out;
}

// Every tensor of the synthesized whole model reads back as synth intended: the routed experts
// through the INT4 path (pack-quantized, dequantized to exactly int4::dequantize(int4::quantize(
// the bf16 weight))), everything else as BF16 (the router bias F32), under the names and shapes
// transformers' DeepseekV3ForCausalLM reads (mla/model.hpp of the whole-model forward).
BOOST_AUTO_TEST_CASE(synth_whole_model_reads_back_exactly) {
  const std::string dir = mla::test::scratch_dir("int4-whole") + "/ckpt";
  const mla::SynthOptions o = tiny_whole_model_options(dir);
  const mla::ModelConfig model = mla::tiny_model();
  const mla::AttentionConfig& tiny = model.attention;
  mla::synthesize_checkpoint(o, model);

  // config.json: Kimi's nesting, the decoder keys with the reduced expert count, Kimi's scheme.
  const std::string json = mla::test::read_text(dir + "/config.json");
  for (const char* key : {"\"text_config\": {", "\"n_routed_experts\": 4,", "\"num_experts_per_tok\": 2,",
                          "\"n_group\": 2,", "\"topk_group\": 1,", "\"first_k_dense_replace\": 1,",
                          "\"moe_intermediate_size\": 32,", "\"intermediate_size\": 96,", "\"n_shared_experts\": 1,",
                          "\"routed_scaling_factor\": 2.827,", "\"scoring_func\": \"sigmoid\",",
                          "\"topk_method\": \"noaux_tc\",", "\"num_hidden_layers\": 2,", "\"tie_word_embeddings\": false,",
                          "\"quant_method\": \"compressed-tensors\","})
    BOOST_TEST(json.find(key) != std::string::npos, key);
  const Checkpoint ck = Checkpoint::open(dir);
  BOOST_TEST((ck.config().quantization == mla::kimi_int4_quantization()));
  BOOST_TEST(ck.config().num_hidden_layers == 2);
  BOOST_TEST(ck.config().nested_text_config);
  BOOST_TEST(ck.synthetic_origin().find("4 routed experts INT4 group size 32") != std::string::npos, ck.synthetic_origin());

  const int64_t H = tiny.hidden_size, I = model.intermediate_size, I_m = model.moe_intermediate_size, V = 97;
  const std::string p = "language_model.model.layers.";
  auto check_plain = [&](const std::string& name, const std::vector<int64_t>& shape, const std::string& dtype) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(ck.stored_dtype(name) == dtype);
      const std::vector<float> v = mla::synthesized_values(o, model, name);
      const std::vector<float> want = dtype == "F32" ? v : rounded_bf16(v);
      BOOST_TEST(differing(ck.load_tensor(name, shape, "synth's shape").data, want) == 0u);
    }
  };
  check_plain(p + "0.post_attention_layernorm.weight", {H}, "BF16");
  check_plain(p + "0.mlp.gate_proj.weight", {I, H}, "BF16");
  check_plain(p + "0.mlp.up_proj.weight", {I, H}, "BF16");
  check_plain(p + "0.mlp.down_proj.weight", {H, I}, "BF16");
  check_plain(p + "1.self_attn.kv_b_proj.weight",
              {tiny.num_attention_heads * (tiny.qk_nope_head_dim + tiny.v_head_dim), tiny.kv_lora_rank}, "BF16");
  check_plain(p + "1.post_attention_layernorm.weight", {H}, "BF16");
  check_plain(p + "1.mlp.gate.weight", {4, H}, "BF16");
  check_plain(p + "1.mlp.gate.e_score_correction_bias", {4}, "F32");
  check_plain(p + "1.mlp.shared_experts.gate_proj.weight", {I_m, H}, "BF16");
  check_plain(p + "1.mlp.shared_experts.up_proj.weight", {I_m, H}, "BF16");
  check_plain(p + "1.mlp.shared_experts.down_proj.weight", {H, I_m}, "BF16");
  check_plain("language_model.model.embed_tokens.weight", {V, H}, "BF16");
  check_plain("language_model.model.norm.weight", {H}, "BF16");
  check_plain("language_model.lm_head.weight", {V, H}, "BF16");
  // The dense layer has no router or experts, the MoE layer no dense MLP.
  BOOST_TEST(!ck.has_tensor(p + "0.mlp.gate.weight"));
  BOOST_TEST(!ck.has_tensor(p + "0.mlp.experts.0.up_proj.weight"));
  BOOST_TEST(!ck.has_tensor(p + "1.mlp.gate_proj.weight"));
  BOOST_TEST(!ck.has_tensor(p + "1.mlp.experts.4.up_proj.weight"));

  // The routed experts: stored as Kimi stores them, dequantized exactly as intended.
  std::map<std::string, std::string> shard_of;
  for (const mla::TensorLocation& t : ck.list_tensors()) shard_of[t.name] = t.shard;
  size_t moved = 0, elements = 0;  // elements the quantization changed: the INT4 path really ran
  std::vector<double> drawn, loaded;
  for (int e = 0; e < 4; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string stem = p + "1.mlp.experts." + std::to_string(e) + "." + proj + ".";
      const bool down = std::string(proj) == "down_proj";
      const int64_t rows = down ? H : I_m, cols = down ? I_m : H;
      BOOST_TEST_CONTEXT(stem) {
        BOOST_TEST_REQUIRE(ck.stored_dtype(stem + "weight") == "INT4");
        BOOST_TEST(shard_of.count(stem + "weight") == 0u);  // only the packed triple is stored
        const mla::SafetensorsFile f = mla::SafetensorsFile::open(shard_of.at(stem + "weight_packed"));
        const mla::TensorInfo& packed = f.at(stem + "weight_packed");
        const mla::TensorInfo& scale = f.at(stem + "weight_scale");
        const mla::TensorInfo& shape = f.at(stem + "weight_shape");
        BOOST_TEST((packed.dtype == DType::I32));
        BOOST_TEST((shape_of(packed) == std::vector<int64_t>{rows, cols / 8}));
        BOOST_TEST((scale.dtype == DType::BF16));
        BOOST_TEST((shape_of(scale) == std::vector<int64_t>{rows, cols / 32}));
        BOOST_TEST((shape.dtype == DType::I32));
        int32_t dims[2] = {0, 0};
        std::memcpy(dims, f.bytes(shape).data(), sizeof dims);
        BOOST_TEST(dims[0] == rows);
        BOOST_TEST(dims[1] == cols);

        const std::vector<float> w = rounded_bf16(mla::synthesized_values(o, model, stem + "weight"));
        const std::vector<float> want = intended_int4(w, rows, cols);
        const mla::TensorF got = ck.load_tensor(stem + "weight", {rows, cols}, "synth's shape");
        BOOST_TEST(differing(got.data, want) == 0u);
        // ... and those are the drawn weights to within the quantization error.
        drawn.insert(drawn.end(), w.begin(), w.end());
        loaded.insert(loaded.end(), got.data.begin(), got.data.end());
        for (size_t k = 0; k < w.size(); ++k) moved += got.data[k] != w[k];
        elements += w.size();
      }
    }
  BOOST_TEST(moved > elements / 2, moved << " of " << elements);
  const mla::test::CompareResult c = mla::test::compare("expert_weight", drawn, loaded,
                                                        mla::test::tolerance("expert_weight", "int4-vs-drawn", "bf16"));
  BOOST_TEST(c.ok, c.message);
  BOOST_TEST_MESSAGE("INT4 experts against the drawn bf16 weights: norm error " << c.norm_error << ", cosine " << c.cosine);
}

// --dtype f32: the experts are quantized from f32 weights with F32 scales (compressed-tensors keeps
// the weight's dtype for the scale), everything else F32; all read back exactly.
BOOST_AUTO_TEST_CASE(synth_whole_model_f32) {
  const std::string dir = mla::test::scratch_dir("int4-whole-f32") + "/ckpt";
  mla::SynthOptions o = tiny_whole_model_options(dir);
  o.dtype = "f32";
  const mla::ModelConfig model = mla::tiny_model();
  const mla::AttentionConfig& tiny = model.attention;
  mla::synthesize_checkpoint(o, model);
  const Checkpoint ck = Checkpoint::open(dir);
  const int64_t H = tiny.hidden_size, I_m = model.moe_intermediate_size;
  const std::string p = "language_model.model.layers.1.mlp.";
  for (const std::string& name : {p + "shared_experts.down_proj.weight", std::string("language_model.lm_head.weight")}) {
    BOOST_TEST(ck.stored_dtype(name) == "F32");
    const std::vector<int64_t> shape = name.find("lm_head") != std::string::npos ? std::vector<int64_t>{97, H}
                                                                                  : std::vector<int64_t>{H, I_m};
    BOOST_TEST(differing(ck.load_tensor(name, shape, "synth's shape").data,
                         mla::synthesized_values(o, model, name)) == 0u, name);
  }
  std::map<std::string, std::string> shard_of;
  for (const mla::TensorLocation& t : ck.list_tensors()) shard_of[t.name] = t.shard;
  for (int e = 0; e < 4; ++e) {
    const std::string stem = p + "experts." + std::to_string(e) + ".down_proj.";
    BOOST_TEST_REQUIRE(ck.stored_dtype(stem + "weight") == "INT4");
    const mla::SafetensorsFile f = mla::SafetensorsFile::open(shard_of.at(stem + "weight_scale"));
    BOOST_TEST((f.at(stem + "weight_scale").dtype == DType::F32));
    const std::vector<float> w = mla::synthesized_values(o, model, stem + "weight");
    BOOST_TEST(differing(ck.load_tensor(stem + "weight", {H, I_m}, "synth's shape").data,
                         intended_int4(w, H, I_m, DType::F32)) == 0u, stem);
  }
}

// The same model through the CLI: inspect reads it, run and sweep run on its attention layers.
BOOST_AUTO_TEST_CASE(synth_whole_model_cli) {
  const std::string dir = mla::test::scratch_dir("int4-whole-cli") + "/ckpt";
  const auto s = mla::test::run_cli("synth --preset tiny --experts 4 --out '" + dir + "'");
  BOOST_TEST_REQUIRE(s.exit_code == 0, s.err);
  BOOST_TEST(s.out.find("layers 0,1, whole model: 4 routed experts per MoE layer in INT4 (group size 32)") !=
             std::string::npos, s.out);
  const auto i = mla::test::run_cli("inspect '" + dir + "'");
  BOOST_TEST_REQUIRE(i.exit_code == 0, i.err);
  BOOST_TEST(i.out.find("  pack_quantized_weights             12\n") != std::string::npos, i.out);
  BOOST_TEST(i.out.find("  supported                          true\n") != std::string::npos, i.out);
  BOOST_TEST(i.out.find("language_model.model.layers.1.mlp.experts.3.down_proj.weight_packed") != std::string::npos);
  BOOST_TEST(i.out.find("language_model.lm_head.weight") != std::string::npos);
  const std::string out = mla::test::scratch_dir("int4-whole-cli-run");
  const auto r = mla::test::run_cli("run --checkpoint '" + dir + "' --layer 1 --seq-len 12 --quiet --out '" + out + "/run'");
  BOOST_TEST(r.exit_code == 0, r.err);
  const auto t = mla::test::run_cli("run --checkpoint '" + dir + "' --layer 0 --tokens 3,1,4,1,5,9 --quiet --out '" + out +
                                    "/tokens'");
  BOOST_TEST(t.exit_code == 0, t.err);
  const auto w = mla::test::run_cli("sweep --checkpoint '" + dir + "' --layers all --seq-len 12 --quiet --out '" + out +
                                    "/sweep'");
  BOOST_TEST(w.exit_code == 0, w.err);
  const bool both = mla::test::read_text(out + "/sweep/report.json").find("layers run: 0, 1") != std::string::npos;
  BOOST_TEST(both);
}

// Every bad request is one error line, and nothing is written.
BOOST_AUTO_TEST_CASE(synth_whole_model_bad_requests) {
  const std::string base = mla::test::scratch_dir("int4-whole-bad");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--preset tiny --experts 3", "--experts 3 is not divisible by n_group 2"},
      {"--preset tiny --experts 2", "--experts 2 leaves 1 expert per group of n_group 2"},
      {"--preset tiny --experts 4 --group-size 48", "--group-size 48 does not divide hidden_size 64"},
      {"--preset tiny --experts 4 --group-size 64", "--group-size 64 does not divide moe_intermediate_size 32"},
      {"--preset kimi-k2.6 --experts 8 --group-size 48", "--group-size 48 does not divide hidden_size 7168"},
      {"--preset kimi-k2.6 --experts 8 --group-size 3584", "--group-size 3584 does not divide moe_intermediate_size 2048"},
      {"--preset tiny --experts 4 --layers 0,2", "--layers lacks layer 1"},
      {"--preset tiny --experts 4 --layers 1", "--layers lacks layer 0"},
      {"--preset tiny --experts 4 --layers 0", "so no routed expert; list more layers, e.g. --layers 0,1"},
      {"--preset tiny --experts 4 --dtype f8_e4m3", "--dtype f8_e4m3 is not part of it"},
      {"--preset tiny --group-size 16", "--group-size applies to the INT4 experts of --experts N"},
      {"--preset tiny --experts 0", "--experts"},
      {"--preset tiny --experts 4 --group-size 0", "--group-size"},
  };
  int k = 0;
  for (const auto& [args, what] : cases) {
    const std::string dir = base + "/c" + std::to_string(k++);
    const auto r = mla::test::run_cli("synth " + args + " --out '" + dir + "'");
    BOOST_TEST_CONTEXT(args) {
      BOOST_TEST(r.exit_code != 0);
      BOOST_TEST(r.err.find("mla-h2o synth: error: ") == 0u, r.err);
      BOOST_TEST(r.err.find(what) != std::string::npos, r.err);
      BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      BOOST_TEST(!fs::exists(dir));
    }
  }
}

// The whole-model forward (mla/model_forward.hpp) on the synthesized Kimi-layout model: its
// config read with Kimi's decoder keys, every tensor found, each routed expert as the forward
// loads it (load_expert) exactly the intended dequantization, and the forward's logits, hidden
// states and routing against the double-loop reference on the same INT4 weights; experts read one
// at a time give the resident run's logits bit for bit.
BOOST_AUTO_TEST_CASE(synth_whole_model_forward) {
  const std::string dir = mla::test::scratch_dir("int4-whole-forward") + "/ckpt";
  const mla::SynthOptions o = tiny_whole_model_options(dir);
  const mla::ModelConfig model = mla::tiny_model();
  mla::synthesize_checkpoint(o, model);
  const Checkpoint ck = Checkpoint::open(dir);
  const mla::ModelConfig cfg = mla::load_model_config(ck.config_path());
  BOOST_TEST(cfg.n_routed_experts == 4);
  BOOST_TEST(cfg.num_experts_per_tok == 2);
  BOOST_TEST(cfg.n_group == 2);
  BOOST_TEST(cfg.topk_group == 1);
  BOOST_TEST(cfg.first_k_dense_replace == 1);
  BOOST_TEST(cfg.moe_intermediate_size == 32);
  BOOST_TEST(cfg.routed_scaling_factor == 2.827);
  BOOST_TEST(!cfg.tie_word_embeddings);
  BOOST_CHECK_NO_THROW(mla::check_model_tensors(ck, cfg, "the test"));

  for (int64_t e = 0; e < 4; ++e) {
    const mla::MlpWeights m = mla::load_expert(ck, cfg, 1, e);
    const std::string stem = "language_model.model.layers.1.mlp.experts." + std::to_string(e) + ".";
    const std::pair<const mla::TensorF*, const char*> projs[] = {
        {&m.gate_proj, "gate_proj"}, {&m.up_proj, "up_proj"}, {&m.down_proj, "down_proj"}};
    for (const auto& [t, proj] : projs) {
      const std::vector<float> w = rounded_bf16(mla::synthesized_values(o, model, stem + proj + ".weight"));
      const std::vector<float> want = intended_int4(w, t->shape[0], t->shape[1]);
      BOOST_TEST(differing(t->data, want) == 0u, stem << proj);
    }
  }

  const std::vector<int64_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
  mla::ModelForwardOptions opt;
  opt.precision = mla::Precision::FP32;
  opt.keep_hidden_states = true;
  opt.keep_routing = true;
  const mla::ModelForwardResult r = mla::model_forward(ck, cfg, tokens, opt);
  BOOST_TEST((r.logits.shape == std::vector<int64_t>{16, 97}));
  const mla::ref::ModelActivations ref = mla::ref::model_forward(ck, cfg, tokens, mla::Precision::FP32, 1e-6);
  const mla::test::Tolerance& tol = mla::test::tolerance("logits", "model-cpu-vs-reference", "fp32");
  std::vector<double> got(r.logits.data.begin(), r.logits.data.end());
  const mla::test::CompareResult c = mla::test::compare("logits", r.logits.shape, ref.logits.data, got, tol);
  BOOST_TEST(c.ok, c.message);
  // Routing: layer 1 only, 2 experts per token, both in one group (topk_group 1), as the reference.
  BOOST_TEST_REQUIRE(r.routing.size() == 1u);
  BOOST_TEST(r.routing[0].layer == 1);
  BOOST_TEST(r.routing[0].experts == ref.routing[0].experts);
  std::set<int32_t> used;
  for (size_t s = 0; s < tokens.size(); ++s) {
    const int32_t a = r.routing[0].experts[2 * s], b = r.routing[0].experts[2 * s + 1];
    BOOST_TEST(a / 2 == b / 2);
    used.insert(a);
    used.insert(b);
  }
  BOOST_TEST(used.size() > 2u);  // the router's bias and weights spread the tokens
  opt.resident_experts = false;
  opt.threads = 1;
  const mla::ModelForwardResult streamed = mla::model_forward(ck, cfg, tokens, opt);
  BOOST_TEST(std::memcmp(streamed.logits.data.data(), r.logits.data.data(), r.logits.data.size() * 4) == 0);

  // `mla-h2o eval` runs on it, every layer's cache evicted, and says the weights are synthetic.
  const std::string out = mla::test::scratch_dir("int4-whole-eval") + "/eval";
  const auto e = mla::test::run_cli("eval --checkpoint '" + dir +
                                    "' --tokens 3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3,2,3,8,4 --prompt-len 8 --steps 8 "
                                    "--cache-budget 6,10 --sinks 1 --recent 2 --policy h2o,streaming --quiet --out '" + out + "'");
  BOOST_TEST_REQUIRE(e.exit_code == 0, e.err);
  BOOST_TEST(mla::test::read_text(out + "/report.json").find("synthetic") != std::string::npos);
}

// eval on INT4 experts keeps its promises (docs/eval.md §2): a policy's logits are the same bits
// alone on one thread as beside the other policies on two, for policies that read the attention
// and ones that read the token features; and `--threads` 1, 2 and 3 write the same bytes.
BOOST_AUTO_TEST_CASE(eval_on_int4_experts_is_independent_of_threads_and_batch) {
  const std::string dir = mla::test::scratch_dir("int4-whole-independence") + "/ckpt";
  mla::synthesize_checkpoint(tiny_whole_model_options(dir), mla::tiny_model());
  const Checkpoint ck = Checkpoint::open(dir);
  const mla::ModelConfig cfg = mla::load_model_config(ck.config_path());
  BOOST_TEST_REQUIRE(ck.stored_dtype("language_model.model.layers.1.mlp.experts.0.gate_proj.weight") == "INT4");
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3};
  const std::string policies =
      "h2o:sinks=1,recent=2,snapkv:window=4,knorm:sinks=1,recent=2,keydiff:sinks=1,recent=2,"
      "value-aware:sinks=1,recent=2,expected-attention:sinks=1,recent=2,future=8";
  const auto options = [&](const std::string& list, int threads) {
    mla::EvalOptions o;
    o.prompt_len = 14;
    o.steps = 10;
    o.budgets = {6};
    o.policies = mla::parse_policy_list(list);
    o.precision = mla::Precision::BF16;
    o.threads = threads;
    o.keep_logits = true;
    return o;
  };
  const mla::EvalResult all = mla::run_eval(ck, cfg, ids, options(policies, 2));
  BOOST_TEST_REQUIRE(all.runs.size() == 6u);
  bool some_differ = false;
  for (const mla::EvalRun& run : all.runs) {
    const mla::EvalResult one = mla::run_eval(ck, cfg, ids, options(run.policy.label, 1));
    BOOST_TEST_REQUIRE(one.runs.size() == 1u);
    BOOST_TEST(std::memcmp(one.runs[0].logits.data.data(), run.logits.data.data(), run.logits.data.size() * 4) == 0,
               run.policy.label);
    some_differ = some_differ || std::memcmp(run.logits.data.data(), all.full.logits.data.data(), run.logits.data.size() * 4) != 0;
  }
  BOOST_TEST(some_differ, "no policy changed the logits at K = 6: the comparison cannot fail");

  std::string ids_text;
  for (int64_t t : ids) ids_text += (ids_text.empty() ? "" : ",") + std::to_string(t);
  std::map<int, std::string> out;
  for (int threads : {1, 2, 3}) {
    const std::string o = dir + "-out-t" + std::to_string(threads);
    const auto r = mla::test::run_cli("eval --checkpoint '" + dir + "' --tokens " + ids_text +
                                      " --prompt-len 14 --steps 10 --cache-budget 6 --policy " + policies +
                                      " --threads " + std::to_string(threads) + " --quiet --out '" + o + "'");
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
    for (const char* f : {"eval.csv", "summary.csv", "layers.csv", "leaderboard.csv"})
      out[threads] += std::string(f) + "\n" + mla::test::read_text(o + "/" + f);
  }
  BOOST_TEST(out[1].size() > 1000u);
  BOOST_TEST(out[2] == out[1]);
  BOOST_TEST(out[3] == out[1]);
}

// Kimi K2.6's config.json as synth writes it for the whole model reads back with Kimi's values.
BOOST_AUTO_TEST_CASE(kimi_whole_model_config) {
  mla::ModelConfig model = mla::kimi_k26_model();
  model.attention.quantization = mla::kimi_int4_quantization();
  const mla::AttentionConfig& kimi = model.attention;
  const std::string json = mla::model_config_to_json(model, true);
  BOOST_TEST((mla::parse_config(json) == kimi));
  for (const char* key : {"\"n_routed_experts\": 384,", "\"num_experts_per_tok\": 8,", "\"n_group\": 1,",
                          "\"moe_intermediate_size\": 2048,", "\"intermediate_size\": 18432,",
                          "\"routed_scaling_factor\": 2.827,", "\"moe_layer_freq\": 1,"})
    BOOST_TEST(json.find(key) != std::string::npos, key);
  BOOST_TEST(json.find("\"text_config\"") < json.find("\"n_routed_experts\""));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
