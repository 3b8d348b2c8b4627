// tests/unit/test_vector_kernels.cpp — suite vector_kernels: the attention's elementwise and row
// kernels (src/cpu/vector_kernels.hpp), on every instruction set this CPU and build have.
//
//   1. the exp against a table of correctly rounded fp32 values (tests/data/exp/, written with
//      mpmath by reference/python/write_exp_table.py): the largest error in ulps, and against
//      std::exp on a sweep of the softmax's range [-104, 0] (every 509th float); both bounded by
//      the figures docs/long-context.md §2 states;
//   2. every instruction set gives the same bits as the baseline (memcmp) for the exp, the
//      softmax rows (fp32 and bf16, widths that are and are not multiples of 16, masked tails),
//      the column sums and the bf16 conversions;
//   3. a softmax row equals its definition written out here with scalar code: the scaled scores
//      (bf16 roundings), the max, e = exp(x - max), the 16-lane double partial sums and their
//      pairwise tree, p = fp32(e * (1/sum)), bf16(p), zeros past the visible keys;
//   4. the column sums equal the plain double loop (rows ascending);
//   5. special values: exp(-inf) = 0, exp(+inf) = +inf, exp(NaN) is NaN, exp(0) = 1.
//
// Shape legend: n = elements of a row, width = a row's keys, visible = its unmasked keys.
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/random.hpp"
#include "src/cpu/vector_kernels.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::cpu::VectorIsa;
using mla::cpu::VectorKernels;

mla::Precision precision_of(bool bf16) { return bf16 ? mla::Precision::BF16 : mla::Precision::FP32; }

// The largest exp errors this file accepts, in ulps (docs/long-context.md §2 states them; the rows
// of tolerances.hpp carry them in their atol field).
const int64_t kMaxUlpVsCorrectlyRounded =
    static_cast<int64_t>(mla::test::tolerance("exp", "vector-kernels-vs-correctly-rounded", "fp32").atol);
const int64_t kMaxUlpVsStdExp = static_cast<int64_t>(mla::test::tolerance("exp", "vector-kernels-vs-std-exp", "fp32").atol);

std::vector<const VectorKernels*> available() {
  std::vector<const VectorKernels*> v;
  for (const VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512})
    if (const VectorKernels* k = mla::cpu::vector_kernels_for(isa)) v.push_back(k);
  return v;
}

const VectorKernels& baseline() { return *mla::cpu::vector_kernels_for(VectorIsa::Baseline); }

// Distance in ulps between two finite non-negative floats (or both +inf).
int64_t ulps(float a, float b) {
  return std::abs(static_cast<int64_t>(std::bit_cast<uint32_t>(a)) - static_cast<int64_t>(std::bit_cast<uint32_t>(b)));
}

struct ExpPoint {
  float x;
  float exp;  // correctly rounded
};

std::vector<ExpPoint> reference_table() {
  std::ifstream in(mla::test::data_dir() + "/exp/exp_f32_reference.txt");
  BOOST_TEST_REQUIRE(static_cast<bool>(in), "tests/data/exp/exp_f32_reference.txt missing");
  std::vector<ExpPoint> t;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    uint32_t xb = 0, eb = 0;
    ss >> std::hex >> xb >> eb;
    t.push_back({std::bit_cast<float>(xb), std::bit_cast<float>(eb)});
  }
  return t;
}

std::vector<float> random_row(int64_t n, uint64_t seed, double scale, bool bf16) {
  mla::Rng rng(seed, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = static_cast<float>(scale * rng.normal());
    if (bf16) x = mla::round_to_bf16(x);
  }
  return v;
}

float exp1(const VectorKernels& k, float x) {
  float y = 0;
  k.exp(&x, &y, 1);
  return y;
}

// A softmax row by its definition, scalar (docs/long-context.md §2): the scaled scores (bf16:
// bf16(bf16(s) * scaling)), their max (a NaN is never the max, as in the kernel), e = exp(x - max)
// with the kernel's exp, the 16 double partial sums (term t into t mod 16) and their pairwise
// tree, p = fp32(e * (1/sum)), bf16(p) in bf16 mode, zeros past the visible keys.
std::vector<float> softmax_definition(const VectorKernels& k, const std::vector<float>& scores, int64_t visible,
                                      int64_t width, float scaling, bool bf16) {
  std::vector<float> x(static_cast<size_t>(visible)), e(static_cast<size_t>(visible));
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < visible; ++t) {
    const float s = scores[static_cast<size_t>(t)];
    x[static_cast<size_t>(t)] = bf16 ? mla::round_to_bf16(mla::round_to_bf16(s) * scaling) : s * scaling;
    max = x[static_cast<size_t>(t)] > max ? x[static_cast<size_t>(t)] : max;
  }
  double lanes[16] = {};
  for (int64_t t = 0; t < visible; ++t) {
    e[static_cast<size_t>(t)] = exp1(k, x[static_cast<size_t>(t)] - max);
    lanes[t % 16] += static_cast<double>(e[static_cast<size_t>(t)]);
  }
  double s8[8];
  for (int j = 0; j < 8; ++j) s8[j] = lanes[j] + lanes[j + 8];
  const double sum = ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7]));
  const double inv = 1.0 / sum;
  std::vector<float> want(static_cast<size_t>(width), 0.0f);
  for (int64_t t = 0; t < visible; ++t) {
    const float p = static_cast<float>(static_cast<double>(e[static_cast<size_t>(t)]) * inv);
    want[static_cast<size_t>(t)] = bf16 ? mla::round_to_bf16(p) : p;
  }
  return want;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vector_kernels)

BOOST_AUTO_TEST_CASE(chosen_set_is_available_and_named) {
  const VectorKernels& k = mla::cpu::vector_kernels();
  BOOST_TEST(mla::cpu::vector_kernels_for(k.isa) == &k);
  BOOST_TEST((std::string(k.name) == "avx512" || std::string(k.name) == "avx2" || std::string(k.name) == "baseline"));
  BOOST_TEST_MESSAGE("vector kernels chosen on this CPU: " << k.name << "; available:");
  for (const VectorKernels* a : available()) BOOST_TEST_MESSAGE("  " << a->name);
}

BOOST_AUTO_TEST_CASE(exp_against_correctly_rounded_table) {
  const std::vector<ExpPoint> table = reference_table();
  BOOST_TEST_REQUIRE(table.size() > 1000u);
  int64_t worst_std = 0;
  for (const ExpPoint& p : table) worst_std = std::max(worst_std, ulps(std::exp(p.x), p.exp));
  BOOST_TEST_MESSAGE("std::exp vs correctly rounded: max " << worst_std << " ulp over " << table.size() << " points");
  for (const VectorKernels* k : available()) {
    int64_t worst = 0, exact = 0;
    float worst_x = 0;
    for (const ExpPoint& p : table) {
      const int64_t u = ulps(exp1(*k, p.x), p.exp);
      exact += u == 0;
      if (u > worst) {
        worst = u;
        worst_x = p.x;
      }
    }
    BOOST_TEST_MESSAGE(k->name << " exp vs correctly rounded: max " << worst << " ulp (at x = " << worst_x << "), "
                               << exact << " of " << table.size() << " exact");
    BOOST_TEST(worst <= kMaxUlpVsCorrectlyRounded, k->name << ": " << worst << " ulp at x = " << worst_x);
  }
}

BOOST_AUTO_TEST_CASE(exp_against_std_exp_on_the_softmax_range) {
  // every 509th float in [-104, 0] (bits 0x80000000 .. 0xC2D00000): ~2.2 million values
  std::vector<float> xs;
  for (uint64_t b = 0x80000000u; b <= 0xC2D00000u; b += 509) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  std::vector<float> ys(xs.size());
  for (const VectorKernels* k : available()) {
    k->exp(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
    int64_t worst = 0, differ = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const int64_t u = ulps(ys[i], std::exp(xs[i]));
      differ += u != 0;
      if (u > worst) {
        worst = u;
        worst_x = xs[i];
      }
    }
    BOOST_TEST_MESSAGE(k->name << " exp vs std::exp on " << xs.size() << " floats in [-104, 0]: max " << worst
                               << " ulp (x = " << worst_x << "), " << differ << " differ");
    BOOST_TEST(worst <= kMaxUlpVsStdExp, k->name << ": " << worst << " ulp at x = " << worst_x);
  }
}

BOOST_AUTO_TEST_CASE(exp_special_values) {
  for (const VectorKernels* k : available()) {
    BOOST_TEST(exp1(*k, -std::numeric_limits<float>::infinity()) == 0.0f, k->name);
    BOOST_TEST(exp1(*k, std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity(), k->name);
    BOOST_TEST(std::isnan(exp1(*k, std::numeric_limits<float>::quiet_NaN())), k->name);
    BOOST_TEST(exp1(*k, 0.0f) == 1.0f, k->name);
    BOOST_TEST(exp1(*k, -3.4e38f) == 0.0f, k->name);  // finfo.min - max: masked
    BOOST_TEST(exp1(*k, 89.0f) == std::numeric_limits<float>::infinity(), k->name);
  }
}

BOOST_AUTO_TEST_CASE(every_set_gives_the_baseline_bits) {
  const VectorKernels& base = baseline();
  for (const VectorKernels* k : available()) {
    for (const int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 1000, 4099}) {
      for (const bool bf16 : {false, true}) {
        const std::string vars = std::string(k->name) + " n=" + std::to_string(n) + (bf16 ? " bf16" : " fp32");
        const std::vector<float> x = random_row(n, 100 + static_cast<uint64_t>(n), 9.0, bf16);
        // exp
        std::vector<float> a(x.size()), b(x.size());
        base.exp(x.data(), a.data(), n);
        k->exp(x.data(), b.data(), n);
        BOOST_TEST(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, vars << " exp");
        // softmax rows: all keys visible, and a masked tail
        for (const int64_t visible : {n, std::max<int64_t>(1, n / 2 + 1)}) {
          std::vector<float> ra = x, rb = x;
          std::vector<uint16_t> ba(x.size(), 7), bb(x.size(), 7);
          base.softmax_row(ra.data(), visible, n, 0.1446796f, precision_of(bf16), ra.data(), bf16 ? ba.data() : nullptr);
          k->softmax_row(rb.data(), visible, n, 0.1446796f, precision_of(bf16), rb.data(), bf16 ? bb.data() : nullptr);
          BOOST_TEST(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)) == 0, vars << " softmax_row");
          BOOST_TEST(std::memcmp(ba.data(), bb.data(), ba.size() * sizeof(uint16_t)) == 0, vars << " softmax_row bits");
        }
        // bf16 conversions
        std::vector<float> ra = x, rb = x;
        base.round_bf16(ra.data(), n);
        k->round_bf16(rb.data(), n);
        BOOST_TEST(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)) == 0, vars << " round_bf16");
        std::vector<uint16_t> ba(x.size()), bb(x.size());
        base.to_bf16_bits(x.data(), n, ba.data());
        k->to_bf16_bits(x.data(), n, bb.data());
        BOOST_TEST(std::memcmp(ba.data(), bb.data(), ba.size() * sizeof(uint16_t)) == 0, vars << " to_bf16_bits");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_row_is_its_definition) {
  const float scaling = 0.1446796f;
  for (const VectorKernels* k : available()) {
    for (const int64_t width : {1, 5, 16, 37, 300}) {
      for (const bool bf16 : {false, true}) {
        const int64_t visible = std::max<int64_t>(1, width - 3);
        const std::string vars = std::string(k->name) + " width=" + std::to_string(width) + (bf16 ? " bf16" : " fp32");
        const std::vector<float> scores = random_row(width, 7 + static_cast<uint64_t>(width), 20.0, false);
        const std::vector<float> want = softmax_definition(*k, scores, visible, width, scaling, bf16);
        // the kernel: probabilities in place and (bf16) bits
        std::vector<float> row = scores;
        std::vector<uint16_t> bits(static_cast<size_t>(width), 0xFFFF);
        k->softmax_row(row.data(), visible, width, scaling, precision_of(bf16), row.data(), bf16 ? bits.data() : nullptr);
        BOOST_TEST(std::memcmp(row.data(), want.data(), want.size() * sizeof(float)) == 0, vars);
        if (bf16) {
          for (int64_t t = 0; t < width; ++t)
            BOOST_TEST(bits[static_cast<size_t>(t)] == mla::bf16::round_bits(want[static_cast<size_t>(t)]), vars << " t=" << t);
        }
        // bits only (the probabilities not written): the same bits
        if (bf16) {
          std::vector<float> scratch = scores;
          std::vector<uint16_t> only(static_cast<size_t>(width), 0xFFFF);
          k->softmax_row(scratch.data(), visible, width, scaling, mla::Precision::BF16, nullptr, only.data());
          BOOST_TEST(std::memcmp(only.data(), bits.data(), bits.size() * sizeof(uint16_t)) == 0, vars << " bits only");
        }
      }
    }
  }
}

// Rows with special scores: NaN (with a sign and a payload, and the two whose plain rounding
// would overflow into the sign bit and give a zero), +-inf, values past the largest bf16,
// in one group or another. The row kernel rounds a group without NaN, and the probabilities of a
// finite row, without the NaN select; here the careful path must still give the definition's
// values: NaN where the definition has NaN (a quiet NaN in the bits), the same bits elsewhere.
BOOST_AUTO_TEST_CASE(softmax_row_with_special_scores_is_its_definition) {
  const float scaling = 0.1446796f, inf = std::numeric_limits<float>::infinity();
  const float nan_payload = std::bit_cast<float>(0xFFA01234u);  // negative, signalling, a payload
  const float huge = std::bit_cast<float>(0x7F7FFFFFu);           // rounds to +inf in bf16
  // NaNs whose bits the plain rounding formula would carry into the sign: -0.0 and +0.0
  const float nan_top = std::bit_cast<float>(0x7FFFFFFFu), nan_all = std::bit_cast<float>(0xFFFFFFFFu);
  struct Special {
    int64_t at;
    float value;
  };
  const std::vector<std::vector<Special>> cases = {
      {{3, nan_payload}}, {{20, std::numeric_limits<float>::quiet_NaN()}}, {{0, inf}}, {{5, -inf}, {40, -inf}},
      {{17, huge}},       {{33, -huge}},                                  {{9, nan_top}},
      {{44, nan_all}},    {}};
  for (const VectorKernels* k : available()) {
    for (size_t c = 0; c < cases.size(); ++c) {
      const int64_t width = 50, visible = 45;
      std::vector<float> scores = random_row(width, 100 + c, 8.0, false);
      for (const Special& sp : cases[c]) scores[static_cast<size_t>(sp.at)] = sp.value;
      const std::string vars = std::string(k->name) + " case " + std::to_string(c);
      const std::vector<float> definition = softmax_definition(*k, scores, visible, width, scaling, true);
      std::vector<float> row = scores;
      std::vector<uint16_t> bits(static_cast<size_t>(width), 0xFFFF);
      k->softmax_row(row.data(), visible, width, scaling, mla::Precision::BF16, row.data(), bits.data());
      for (int64_t t = 0; t < width; ++t) {
        const float want = definition[static_cast<size_t>(t)];
        const float got = row[static_cast<size_t>(t)];
        const uint16_t b = bits[static_cast<size_t>(t)];
        if (std::isnan(want)) {
          BOOST_TEST(std::isnan(got), vars << " t=" << t);
          BOOST_TEST(((b & 0x7F80u) == 0x7F80u && (b & 0x0040u) != 0), vars << " t=" << t << ": a quiet NaN in the bits");
        } else {
          BOOST_TEST(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want), vars << " t=" << t);
          BOOST_TEST(b == mla::bf16::round_bits(want), vars << " t=" << t);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(column_sums_add_rows_in_order) {
  const int64_t rows = 5, cols = 1037, ld = 1100;
  std::vector<float> p = random_row(rows * ld, 99, 1.0, true);
  for (float& v : p) v = std::abs(v);
  std::vector<uint16_t> bits(p.size());
  for (size_t i = 0; i < p.size(); ++i) bits[i] = mla::bf16::round_bits(p[i]);
  std::vector<double> want(static_cast<size_t>(cols), 0.25);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < cols; ++t) want[static_cast<size_t>(t)] += static_cast<double>(p[static_cast<size_t>(i * ld + t)]);
  for (const VectorKernels* k : available()) {
    std::vector<double> a(static_cast<size_t>(cols), 0.25), b(static_cast<size_t>(cols), 0.25);
    k->add_rows_to_mass(p.data(), ld, rows, cols, a.data());
    k->add_bits_to_mass(bits.data(), ld, rows, cols, b.data());
    BOOST_TEST(std::memcmp(a.data(), want.data(), want.size() * sizeof(double)) == 0, k->name);
    BOOST_TEST(std::memcmp(b.data(), want.data(), want.size() * sizeof(double)) == 0, k->name << " (bits)");
    std::vector<float> widened(p.size());
    k->from_bf16_bits(bits.data(), static_cast<int64_t>(bits.size()), widened.data());
    BOOST_TEST(std::memcmp(widened.data(), p.data(), p.size() * sizeof(float)) == 0, k->name << " from_bf16_bits");
  }
}

BOOST_AUTO_TEST_SUITE_END()
