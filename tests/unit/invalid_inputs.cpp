// tests/unit/invalid_inputs.cpp — the cases of invalid_inputs.hpp.
#include "invalid_inputs.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "geometries.hpp"

namespace mla::test {
namespace {

constexpr int64_t kSeq = 3;

// A valid case on geometry `g`, changed by `edit`.
InvalidCase make(const std::string& name, const std::string& g, ErrorKind kind, const std::string& part,
                 const std::function<void(InvalidCase&)>& edit) {
  InvalidCase c;
  c.name = name;
  c.cfg = geometry(g);
  c.weights = random_layer_weights(c.cfg, 7);
  c.hidden = random_hidden(kSeq, c.cfg.hidden_size, 8);
  c.kind = kind;
  c.message_part = part;
  edit(c);
  return c;
}

}  // namespace

std::vector<InvalidCase> invalid_cases() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float bf16_overflow = 3.3962e38f;  // finite in fp32, rounds to Inf in bf16
  std::vector<InvalidCase> v;
  auto config = [&](const char* key, int64_t value, const std::string& part, auto set) {
    v.push_back(make(std::string("config ") + key + " = " + std::to_string(value), "tiny", ErrorKind::Config, part,
                     [&](InvalidCase& c) { set(c.cfg, value); }));
  };
  config("hidden_size", 0, "hidden_size must be > 0", [](AttentionConfig& c, int64_t x) { c.hidden_size = x; });
  config("num_attention_heads", 0, "num_attention_heads", [](AttentionConfig& c, int64_t x) { c.num_attention_heads = x; });
  config("kv_lora_rank", -4, "kv_lora_rank", [](AttentionConfig& c, int64_t x) { c.kv_lora_rank = x; });
  config("qk_nope_head_dim", 0, "qk_nope_head_dim must be > 0", [](AttentionConfig& c, int64_t x) { c.qk_nope_head_dim = x; });
  config("qk_rope_head_dim", 0, "qk_rope_head_dim", [](AttentionConfig& c, int64_t x) { c.qk_rope_head_dim = x; });
  config("qk_rope_head_dim", 7, "must be even", [](AttentionConfig& c, int64_t x) { c.qk_rope_head_dim = x; });
  config("v_head_dim", 0, "v_head_dim", [](AttentionConfig& c, int64_t x) { c.v_head_dim = x; });
  config("q_lora_rank", -1, "q_lora_rank must be >= 0", [](AttentionConfig& c, int64_t x) { c.q_lora_rank = x; });
  config("num_key_value_heads", 3, "num_key_value_heads", [](AttentionConfig& c, int64_t x) { c.num_key_value_heads = x; });

  // weights
  v.push_back(make("kv_b_proj.weight transposed", "tiny", ErrorKind::Shape, "kv_b_proj.weight", [](InvalidCase& c) {
    auto& s = c.weights.kv_b_proj.shape;
    std::swap(s[0], s[1]);
  }));
  v.push_back(make("q_a_proj.weight missing", "tiny", ErrorKind::Shape, "q_a_proj.weight",
                   [](InvalidCase& c) { c.weights.q_a_proj = TensorF(); }));
  v.push_back(make("o_proj.weight short of values", "tiny", ErrorKind::Shape, "o_proj.weight holds",
                   [](InvalidCase& c) { c.weights.o_proj.data.pop_back(); }));
  v.push_back(make("q bias with q_lora_rank null", "bias_q_lora_null", ErrorKind::Shape, "q_proj has no bias",
                   [](InvalidCase& c) {
                     c.weights.q_a_proj_bias = TensorF("q_proj.bias", {c.cfg.num_attention_heads * c.cfg.qk_head_dim()});
                   }));
  v.push_back(make("o_proj.bias without attention_bias", "tiny", ErrorKind::Shape, "attention_bias is false",
                   [](InvalidCase& c) { c.weights.o_proj_bias = TensorF("o_proj.bias", {c.cfg.hidden_size}); }));
  v.push_back(make("kv_a_proj_with_mqa.bias missing", "bias", ErrorKind::Shape, "kv_a_proj_with_mqa.bias",
                   [](InvalidCase& c) { c.weights.kv_a_proj_with_mqa_bias = TensorF(); }));
  v.push_back(make("q_proj.weight beside q_a_proj", "tiny", ErrorKind::Shape, "q_proj.weight", [](InvalidCase& c) {
    c.weights.q_proj = TensorF("q_proj.weight", {c.cfg.num_attention_heads * c.cfg.qk_head_dim(), c.cfg.hidden_size});
  }));
  v.push_back(make("o_proj.weight NaN", "tiny", ErrorKind::InvalidValue, "o_proj.weight holds NaN at [1, 2]",
                   [&](InvalidCase& c) { c.weights.o_proj.data[static_cast<size_t>(c.weights.o_proj.dim(1) + 2)] = nan; }));
  v.push_back(make("kv_a_layernorm.weight Inf", "tiny", ErrorKind::InvalidValue, "kv_a_layernorm.weight holds Inf at [3]",
                   [&](InvalidCase& c) { c.weights.kv_a_layernorm.data[3] = inf; }));
  v.push_back(make("q_b_proj.weight overflows bf16", "tiny", ErrorKind::InvalidValue, "at [0, 0], which rounds to Inf in bf16",
                   [&](InvalidCase& c) {
                     c.weights.q_b_proj.data[0] = bf16_overflow;
                     c.prepare_options.precision = c.forward_options.precision = Precision::BF16;
                   }));

  // hidden states
  v.push_back(make("hidden NaN", "tiny", ErrorKind::InvalidValue, "NaN at row 1, column 5",
                   [&](InvalidCase& c) { c.hidden.data[static_cast<size_t>(c.cfg.hidden_size + 5)] = nan; }));
  v.push_back(make("hidden -Inf", "q_lora_null", ErrorKind::InvalidValue, "-Inf at row 2, column 0",
                   [&](InvalidCase& c) { c.hidden.data[static_cast<size_t>(2 * c.cfg.hidden_size)] = -inf; }));
  v.push_back(make("hidden overflows bf16", "tiny", ErrorKind::InvalidValue, "at row 0, column 4, which rounds to -Inf in bf16", [&](InvalidCase& c) {
    c.hidden.data[4] = -bf16_overflow;
    c.prepare_options.precision = c.forward_options.precision = Precision::BF16;
  }));
  v.push_back(make("S = 0", "tiny", ErrorKind::InvalidArgument, "0 tokens",
                   [](InvalidCase& c) { c.hidden = TensorF("hidden", {0, c.cfg.hidden_size}); }));
  v.push_back(make("hidden width", "tiny", ErrorKind::Shape, "[3, 31]",
                   [](InvalidCase& c) { c.hidden = random_hidden(kSeq, c.cfg.hidden_size - 1, 9); }));
  v.push_back(make("hidden rank 3", "tiny", ErrorKind::Shape, "[1, 3, 32]", [](InvalidCase& c) {
    c.hidden.shape = {1, kSeq, c.cfg.hidden_size};
  }));
  v.push_back(make("hidden short of values", "tiny", ErrorKind::Shape, "hidden states hold",
                   [](InvalidCase& c) { c.hidden.data.pop_back(); }));

  // options
  v.push_back(make("latent eps 0", "tiny", ErrorKind::InvalidArgument, "latent norm eps",
                   [](InvalidCase& c) { c.forward_options.latent_norm_eps = 0.0; }));
  v.push_back(make("latent eps Inf", "tiny", ErrorKind::InvalidArgument, "got Inf",
                   [](InvalidCase& c) { c.forward_options.latent_norm_eps = std::numeric_limits<double>::infinity(); }));
  v.push_back(make("latent eps NaN at prepare", "tiny", ErrorKind::InvalidArgument, "got NaN",
                   [](InvalidCase& c) { c.prepare_options.latent_norm_eps = std::nan(""); }));
  v.push_back(make("position offset -1", "tiny", ErrorKind::InvalidArgument, "position offset must be >= 0",
                   [](InvalidCase& c) { c.forward_options.position_offset = -1; }));
  v.push_back(make("threads -2", "tiny", ErrorKind::InvalidArgument, "threads must be >= 0",
                   [](InvalidCase& c) { c.forward_options.threads = -2; }));
  v.push_back(make("threads -1 at prepare", "tiny", ErrorKind::InvalidArgument, "threads must be >= 0",
                   [](InvalidCase& c) { c.prepare_options.threads = -1; }));

  // calls
  v.push_back(make("forward before prepare", "tiny", ErrorKind::InvalidArgument, "before prepare()",
                   [](InvalidCase& c) { c.call_prepare = false; }));
  v.push_back(make("forward in another precision", "tiny", ErrorKind::InvalidArgument, "call prepare() again",
                   [](InvalidCase& c) { c.forward_options.precision = Precision::BF16; }));
  return v;
}

void expect_same_errors(const std::vector<BackendMaker>& makers) {
  BOOST_REQUIRE(!makers.empty());
  for (const InvalidCase& c : invalid_cases()) {
    std::string first_message;
    for (const BackendMaker& make_backend : makers) {
      const std::unique_ptr<Backend> b = make_backend();
      BOOST_TEST_CONTEXT(c.name << " [" << b->name() << "]") {
        bool thrown = false;
        try {
          if (c.call_prepare) b->prepare(c.cfg, c.weights, c.prepare_options);
          b->forward(c.hidden, c.forward_options);
        } catch (const Error& e) {
          thrown = true;
          const std::string msg = e.what();
          BOOST_TEST((e.kind() == c.kind), "kind " << error_kind_name(e.kind()) << ", expected "
                                                   << error_kind_name(c.kind) << ": " << msg);
          BOOST_TEST(msg.find(c.message_part) != std::string::npos, msg);
          if (first_message.empty()) first_message = msg;
          BOOST_TEST(msg == first_message);
        }
        BOOST_TEST(thrown, "no error");
      }
    }
  }
}

}  // namespace mla::test
