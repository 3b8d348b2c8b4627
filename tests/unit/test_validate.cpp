// tests/unit/test_validate.cpp — suite validate: the one validator (mla/validate.hpp) and the
// layer tensor table (mla/layer_tensors.hpp). Every invalid input of invalid_inputs.hpp gives
// the same ErrorKind and message from the reference and the cpu backend (and cuda where a GPU
// is usable; the emulated cuda backend runs the same list in tests/emulation).
#include <boost/test/unit_test.hpp>

#include <set>
#include <string>

#include "geometries.hpp"
#include "invalid_inputs.hpp"
#include "mla/attention.hpp"
#include "mla/layer_tensors.hpp"
#include "mla/validate.hpp"

BOOST_AUTO_TEST_SUITE(validate)

BOOST_AUTO_TEST_CASE(every_backend_refuses_each_invalid_input_with_the_same_error) {
  std::vector<mla::test::BackendMaker> makers = {mla::make_reference_backend, mla::make_cpu_backend};
  if (mla::cuda_available()) makers.push_back(mla::make_cuda_backend);
  mla::test::expect_same_errors(makers);
}

BOOST_AUTO_TEST_CASE(valid_inputs_pass) {
  for (const mla::test::Geometry& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, 3);
    for (const mla::Precision p : {mla::Precision::FP32, mla::Precision::BF16}) {
      mla::ForwardOptions o;
      o.precision = p;
      BOOST_CHECK_NO_THROW(mla::validate_layer(g.cfg, w, o));
      BOOST_CHECK_NO_THROW(mla::validate_input(g.cfg, mla::test::random_hidden(2, g.cfg.hidden_size, 4), o));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_table_matches_hf_module_layout) {
  // Present tensors per config kind: q LoRA or q_proj, with or without attention_bias.
  auto names = [](const mla::AttentionConfig& c) {
    std::set<std::string> s;
    for (const mla::LayerTensorSpec* t : mla::layer_tensors(c)) s.insert(t->name);
    return s;
  };
  const std::set<std::string> common = {"kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight",
                                        "o_proj.weight"};
  std::set<std::string> lora = common, lora_bias, plain = common, plain_bias;
  lora.insert({"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"});
  plain.insert("q_proj.weight");
  lora_bias = lora;
  lora_bias.insert({"q_a_proj.bias", "kv_a_proj_with_mqa.bias", "o_proj.bias"});
  plain_bias = plain;
  plain_bias.insert({"kv_a_proj_with_mqa.bias", "o_proj.bias"});  // HF's q_proj has no bias
  BOOST_TEST(names(mla::test::geometry("tiny")) == lora);
  BOOST_TEST(names(mla::test::geometry("q_lora_null")) == plain);
  BOOST_TEST(names(mla::test::geometry("bias")) == lora_bias);
  BOOST_TEST(names(mla::test::geometry("bias_q_lora_null")) == plain_bias);
  // Shapes: the count the table implies, against the Kimi K2.6 layer's (docs/math.md §12) and
  // against LayerWeights::parameter_count (which reads the same table).
  auto table_count = [](const mla::AttentionConfig& c) {
    int64_t n = 0;
    for (const mla::LayerTensorSpec* t : mla::layer_tensors(c)) {
      int64_t numel = 1;
      for (int64_t d : t->shape(c)) numel *= d;
      n += numel;
    }
    return n;
  };
  // q_a 1536*7168, q_a_layernorm 1536, q_b 64*192*1536, kv_a 576*7168, kv_a_layernorm 512,
  // kv_b 64*256*512, o_proj 7168*64*128
  BOOST_TEST(table_count(mla::test::geometry("kimi")) == int64_t{101124096});
  for (const char* g : {"tiny", "q_lora_null", "bias", "bias_q_lora_null"})
    BOOST_TEST(mla::test::random_layer_weights(mla::test::geometry(g), 1).parameter_count() ==
               table_count(mla::test::geometry(g)), g);
}

BOOST_AUTO_TEST_SUITE_END()
