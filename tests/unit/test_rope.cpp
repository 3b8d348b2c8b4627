// tests/unit/test_rope.cpp — suite `rope`: YaRN / plain RoPE frequencies, correction range,
// attention factor, softmax scale and cos/sin tables (src/math/rope.cpp) against the
// numbers printed in docs/math.md §4-§5 and against closed forms.
//
// Expected values come from the spec's tables (computed there independently in double
// precision) or from formulas evaluated here in a different way; never from the code under
// test. Tolerances: tests/unit/tolerances.hpp.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "tolerances.hpp"

namespace {

using mla::AttentionConfig;

// A Kimi/DeepSeek-style rope config; geometry fields only as far as rope needs them.
AttentionConfig yarn_config(double theta, double factor, double beta_fast, double beta_slow) {
  AttentionConfig c = mla::test::geometry("kimi");
  c.rope.rope_type = "yarn";
  c.rope.rope_theta = theta;
  c.rope.factor = factor;
  c.rope.original_max_position_embeddings = 4096;
  c.rope.beta_fast = beta_fast;
  c.rope.beta_slow = beta_slow;
  c.rope.mscale = 1.0;
  c.rope.mscale_all_dim = 1.0;
  return c;
}

// Rows of the docs/math.md §4 table: i and the printed inv_freq (7 significant digits).
struct TableRow {
  int i;
  double value;
};

void check_table(const char* name, const AttentionConfig& cfg, const std::vector<TableRow>& rows) {
  const std::vector<float> inv_freq = mla::rope_inv_freq(cfg);
  BOOST_TEST_REQUIRE(inv_freq.size() == 32u);
  std::vector<double> expected, got;
  for (const TableRow& r : rows) {
    expected.push_back(r.value);
    got.push_back(inv_freq[static_cast<size_t>(r.i)]);
  }
  const auto tol = mla::test::tolerance("inv_freq", "rope-vs-spec-table", "fp32");
  const auto res = mla::test::compare(name, expected, got, tol);
  BOOST_TEST(res.ok, res.message);
}

// Runs `f` and returns the ErrorKind of the mla::Error it throws (fails the test otherwise).
template <class F>
mla::ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const mla::Error& e) {
    return e.kind();
  }
  BOOST_FAIL("expected an mla::Error");
  return mla::ErrorKind::Io;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rope)

// docs/math.md §4 table, K2.5 column: theta 5e4, factor 64, beta 32/1 -> ramp over i = 8..20.
BOOST_AUTO_TEST_CASE(inv_freq_k25_beta_32_1) {
  check_table("K2.5 inv_freq", yarn_config(50000.0, 64.0, 32.0, 1.0),
              {{0, 1.000000e+00}, {1, 7.131111e-01}, {8, 6.687403e-02}, {9, 4.377666e-02}, {14, 4.465849e-03},
               {19, 1.583750e-04}, {20, 1.807023e-05}, {31, 4.382206e-07}});
}

// K2-0905 / K2-Thinking column: beta 1/1 -> a hard step between i = 19 and 20.
BOOST_AUTO_TEST_CASE(inv_freq_k2_0905_beta_1_1) {
  check_table("K2-0905 inv_freq", yarn_config(50000.0, 64.0, 1.0, 1.0),
              {{0, 1.000000e+00}, {1, 7.131111e-01}, {8, 6.687403e-02}, {9, 4.768861e-02}, {14, 8.794287e-03},
               {19, 1.621760e-03}, {20, 1.807023e-05}, {31, 4.382206e-07}});
}

// K2-Instruct (0711) column: factor 32, beta 1/1.
BOOST_AUTO_TEST_CASE(inv_freq_k2_0711_factor_32) {
  check_table("K2-0711 inv_freq", yarn_config(50000.0, 32.0, 1.0, 1.0),
              {{0, 1.000000e+00}, {1, 7.131111e-01}, {8, 6.687403e-02}, {9, 4.768861e-02}, {14, 8.794287e-03},
               {19, 1.621760e-03}, {20, 3.614047e-05}, {31, 8.764413e-07}});
}

// The unscaled column ext_i = 50000^(-i/32) is what plain RoPE gives (rope_scaling null).
BOOST_AUTO_TEST_CASE(inv_freq_plain_rope) {
  AttentionConfig c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.rope.rope_type = "default";
  check_table("plain inv_freq (theta 5e4)", c,
              {{0, 1.000000e+00}, {1, 7.131111e-01}, {8, 6.687403e-02}, {9, 4.768861e-02}, {14, 8.794287e-03},
               {19, 1.621760e-03}, {20, 1.156495e-03}, {31, 2.804612e-05}});
  // closed form for theta 1e4, dim 64: inv_freq[i] = 10^(-i/8): i = 8 -> 0.1, i = 16 -> 0.01, i = 24 -> 0.001
  c.rope.rope_theta = 10000.0;
  const std::vector<float> f = mla::rope_inv_freq(c);
  const auto tol = mla::test::tolerance("inv_freq", "fp32-vs-double", "fp32");
  const auto res = mla::test::compare("plain inv_freq (theta 1e4)", std::vector<double>{1.0, 0.1, 0.01, 0.001},
                                      std::vector<double>{f[0], f[8], f[16], f[24]}, tol);
  BOOST_TEST(res.ok, res.message);
  // plain rope: no ramp at all, so the softmax scale is qk_head_dim^-0.5 and the factor 1
  BOOST_TEST(mla::softmax_scale(c) == 0.07216878364870322);
  BOOST_TEST(mla::rope_attention_factor(c) == 1.0);
}

// The fp32 evaluation stays within a few fp32 roundings of the double formulas.
BOOST_AUTO_TEST_CASE(inv_freq_fp32_matches_double) {
  for (double beta_fast : {32.0, 1.0}) {
    const AttentionConfig c = yarn_config(50000.0, 64.0, beta_fast, 1.0);
    const std::vector<float> f = mla::rope_inv_freq(c);
    const std::vector<double> d = mla::rope_inv_freq_double(c);
    const auto tol = mla::test::tolerance("inv_freq", "fp32-vs-double", "fp32");
    const auto res = mla::test::compare("inv_freq fp32 vs double", d, std::vector<double>(f.begin(), f.end()), tol);
    BOOST_TEST(res.ok, res.message);
  }
}

// §4 step 3: raw correction dims 8.9145 / 19.1646 (4 decimals printed), truncated to 8 / 20.
BOOST_AUTO_TEST_CASE(correction_range_k25) {
  const mla::YarnRange r = mla::yarn_correction_range(yarn_config(50000.0, 64.0, 32.0, 1.0));
  const double printed = mla::test::tolerance("yarn_correction_dim", "ours-vs-spec-table", "double").atol;
  BOOST_TEST(std::fabs(r.low_raw - 8.9145) <= printed);
  BOOST_TEST(std::fabs(r.high_raw - 19.1646) <= printed);
  BOOST_TEST(r.low == 8.0);
  BOOST_TEST(r.high == 20.0);
  // closed form: dim * ln(4096 / (beta * 2 pi)) / (2 ln 50000)
  const double pi = 3.141592653589793;
  BOOST_TEST(std::fabs(r.low_raw - 64.0 * std::log(4096.0 / (64.0 * pi)) / (2.0 * std::log(50000.0))) <=
             mla::test::tolerance("yarn_correction_dim", "ours-vs-closed-form", "double").atol);
}

BOOST_AUTO_TEST_CASE(correction_range_k2_0905_and_deepseek_v3) {
  const mla::YarnRange k2 = mla::yarn_correction_range(yarn_config(50000.0, 64.0, 1.0, 1.0));
  BOOST_TEST(std::fabs(k2.low_raw - 19.1646) <=
             mla::test::tolerance("yarn_correction_dim", "ours-vs-spec-table", "double").atol);
  BOOST_TEST(k2.low == 19.0);
  BOOST_TEST(k2.high == 20.0);
  // DeepSeek-V3: theta 1e4, factor 40, beta 32/1 -> low 10, high 23
  const mla::YarnRange v3 = mla::yarn_correction_range(yarn_config(10000.0, 40.0, 32.0, 1.0));
  BOOST_TEST(v3.low == 10.0);
  BOOST_TEST(v3.high == 23.0);
  // truncate = false keeps the raw values (still clamped to [0, dim - 1])
  AttentionConfig c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.rope.truncate = false;
  const mla::YarnRange raw = mla::yarn_correction_range(c);
  BOOST_TEST(raw.low == raw.low_raw);
  BOOST_TEST(raw.high == raw.high_raw);
  // a beta of 0 means "missing": `get("beta_fast") or 32`
  c = yarn_config(50000.0, 64.0, 0.0, 0.0);
  const mla::YarnRange fallback = mla::yarn_correction_range(c);
  BOOST_TEST(fallback.low == 8.0);
  BOOST_TEST(fallback.high == 20.0);
}

// In the step ramp (beta 1/1) every frequency is exactly unscaled or divided by the factor,
// in fp32: i <= 19 -> fp32(1/pos_freq), i >= 20 -> fp32(1/fp32(64*pos_freq)).
BOOST_AUTO_TEST_CASE(step_ramp_is_exact_in_fp32) {
  const std::vector<float> f = mla::rope_inv_freq(yarn_config(50000.0, 64.0, 1.0, 1.0));
  for (int i = 0; i < 32; ++i) {
    const float pos = static_cast<float>(std::pow(50000.0, static_cast<double>(static_cast<float>(2 * i) / 64.0f)));
    const float want = i <= 19 ? 1.0f / pos : 1.0f / (64.0f * pos);
    BOOST_TEST(f[static_cast<size_t>(i)] == want, "i = " << i);
  }
}

// §5 table: softmax scale = 192^-0.5 * m^2, m = 0.1 * mscale_all_dim * ln(factor) + 1.
BOOST_AUTO_TEST_CASE(softmax_scale_table) {
  struct Row {
    double factor, mscale_all_dim, expected;
  };
  const Row rows[] = {{32.0, 1.0, 0.13086079996295005},
                      {40.0, 1.0, 0.1352337788608801},
                      {64.0, 1.0, 0.14467962580268923},
                      {40.0, 0.707, 0.1147213867929261}};
  for (const Row& r : rows) {
    AttentionConfig c = yarn_config(50000.0, r.factor, 32.0, 1.0);
    c.rope.mscale = r.mscale_all_dim;
    c.rope.mscale_all_dim = r.mscale_all_dim;
    BOOST_TEST(std::fabs(mla::softmax_scale(c) - r.expected) <=
                   mla::test::tolerance("softmax_scale", "ours-vs-spec-table", "double").atol,
               "factor " << r.factor);
  }
  // mscale_all_dim absent (0): no m^2 on the scale
  AttentionConfig c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.rope.mscale_all_dim = 0.0;
  BOOST_TEST(mla::softmax_scale(c) == 0.07216878364870322);
}

// §4 step 7: the cos/sin multiplier is exactly 1 for every Kimi/DeepSeek config.
BOOST_AUTO_TEST_CASE(attention_factor) {
  for (double factor : {32.0, 40.0, 64.0})
    BOOST_TEST(mla::rope_attention_factor(yarn_config(50000.0, factor, 32.0, 1.0)) == 1.0);
  AttentionConfig c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.rope.mscale = 0.707;
  c.rope.mscale_all_dim = 0.707;
  BOOST_TEST(mla::rope_attention_factor(c) == 1.0);
  // mscale_all_dim absent: get_mscale(factor) = 0.1 ln(64) + 1 goes on cos/sin instead
  c.rope.mscale = 1.0;
  c.rope.mscale_all_dim = 0.0;
  BOOST_TEST(std::fabs(mla::rope_attention_factor(c) - (0.1 * std::log(64.0) + 1.0)) <=
             mla::test::tolerance("attention_factor", "ours-vs-closed-form", "double").atol);
  // an explicit attention_factor wins
  c.rope.attention_factor = 0.5;
  BOOST_TEST(mla::rope_attention_factor(c) == 0.5);
}

// cos/sin tables: HF's fp32 angle fp32(inv_freq * fp32(pos)), emb = cat(freqs, freqs).
BOOST_AUTO_TEST_CASE(cos_sin_tables) {
  const AttentionConfig c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  const std::vector<float> inv_freq = mla::rope_inv_freq(c);
  const std::vector<int64_t> positions = {0, 1, 4095, 262143};
  const mla::RopeTables t = mla::rope_tables(c, positions);
  BOOST_TEST(t.seq_len == 4);
  BOOST_TEST(t.rope_dim == 64);
  for (size_t s = 0; s < positions.size(); ++s)
    for (size_t i = 0; i < 32; ++i) {
      const float angle = inv_freq[i] * static_cast<float>(positions[s]);  // one fp32 product
      const float want_cos = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float want_sin = static_cast<float>(std::sin(static_cast<double>(angle)));
      BOOST_TEST(t.cos[s * 64 + i] == want_cos, "s " << s << " i " << i);
      BOOST_TEST(t.sin[s * 64 + i] == want_sin, "s " << s << " i " << i);
      BOOST_TEST(t.cos[s * 64 + i + 32] == t.cos[s * 64 + i]);
      BOOST_TEST(t.sin[s * 64 + i + 32] == t.sin[s * 64 + i]);
    }
  // position 0: cos 1, sin 0 exactly
  for (size_t d = 0; d < 64; ++d) {
    BOOST_TEST(t.cos[d] == 1.0f);
    BOOST_TEST(t.sin[d] == 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(bad_rope_configs) {
  AttentionConfig c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.qk_rope_head_dim = 7;
  BOOST_TEST((error_kind_of([&] { mla::rope_inv_freq(c); }) == mla::ErrorKind::Config));
  c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.rope.rope_type = "dynamic";
  BOOST_TEST((error_kind_of([&] { mla::rope_inv_freq(c); }) == mla::ErrorKind::Unsupported));
  c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  c.rope.original_max_position_embeddings = 0;
  c.max_position_embeddings = 0;
  BOOST_TEST((error_kind_of([&] { mla::yarn_correction_range(c); }) == mla::ErrorKind::Config));
  c = yarn_config(50000.0, 64.0, 32.0, 1.0);
  BOOST_TEST((error_kind_of([&] { mla::rope_tables(c, {0, -1}); }) == mla::ErrorKind::InvalidArgument));
}

BOOST_AUTO_TEST_SUITE_END()
