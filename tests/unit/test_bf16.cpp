// tests/unit/test_bf16.cpp — suite `bf16`: BF16 rounding, F16 rounding and decoding, FP8 decoding.
//
// Every expected value here comes from an independent route, never from the code under test:
//   * BF16 narrowing is checked against "pick the nearer of the two neighbouring bf16 values
//     (truncation and one step away from zero), ties to the even mantissa", evaluated in
//     double arithmetic — not the integer add-and-shift trick of bf16.hpp;
//   * F16 and E5M2 codes are checked against their format formula evaluated with std::ldexp
//     in double;
//   * E4M3FN codes are checked against a literal table derived by hand from the format
//     definition (docs/safetensors.md §5).
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>

#include "mla/bf16.hpp"

namespace {

// splitmix64: a fixed, portable pseudo-random sequence for the sampled checks.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The value of a non-NaN bf16 code in double, from the format definition:
//   e == 0: m * 2^-133; e == 255: Inf; else (128 + m) * 2^(e - 134); sign applied.
double bf16_code_value(uint16_t code) {
  const int sign = code >> 15;
  const int e = (code >> 7) & 0xFF;
  const int m = code & 0x7F;
  double v;
  if (e == 255) v = std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -133);
  else v = std::ldexp(static_cast<double>(128 + m), e - 134);
  return sign ? -v : v;
}

// Independent RNE reference for a non-NaN float f: the two bf16 codes bracketing |f| are the
// truncation `t` (toward zero) and `t + 1` (one step away from zero; past the largest finite
// value this is Inf, whose distance is measured as if it were 2^128, as IEEE RNE overflow
// does). Pick the nearer; on a tie the one with an even mantissa (lowest code bit 0).
uint16_t reference_round(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto t = static_cast<uint16_t>(u >> 16);             // truncated code, sign included
  if ((u & 0xFFFFu) == 0) return t;                          // exactly representable
  const auto up = static_cast<uint16_t>(t + 1);              // one step away from zero
  const double x = std::fabs(static_cast<double>(f));
  const double lo = std::fabs(bf16_code_value(t));
  const double hi = ((up & 0x7F80u) == 0x7F80u) ? std::ldexp(1.0, 128) : std::fabs(bf16_code_value(up));
  const double d_lo = x - lo, d_hi = hi - x;                 // exact: same binade, <= 25 bits
  if (d_lo < d_hi) return t;
  if (d_hi < d_lo) return up;
  return (t & 1u) == 0 ? t : up;
}

float bits_to_float(uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

BOOST_AUTO_TEST_SUITE(bf16)

// All 2^16 codes: widening is exact (matches the format formula), and narrowing the widened
// value gives the code back; NaN codes stay NaN with their sign, quiet bit set.
BOOST_AUTO_TEST_CASE(all_codes_round_trip) {
  int mismatches = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    const float wide = mla::bf16::from_bits(code).to_float();
    const bool is_nan = (code & 0x7F80u) == 0x7F80u && (code & 0x7Fu) != 0;
    const uint16_t back = mla::bf16::from_float(wide).bits;
    if (is_nan) {
      const bool ok = std::isnan(wide) && std::signbit(wide) == ((code & 0x8000u) != 0) &&
                      (back & 0x8000u) == (code & 0x8000u) && (back & 0x7FC0u) == 0x7FC0u &&
                      back == (code | 0x0040u);
      if (!ok && mismatches++ < 5) BOOST_ERROR("NaN code 0x" << std::hex << c << " -> 0x" << back);
      continue;
    }
    const bool ok = static_cast<double>(wide) == bf16_code_value(code) && back == code;
    if (!ok && mismatches++ < 5) BOOST_ERROR("code 0x" << std::hex << c << " -> " << wide << " -> 0x" << back);
  }
  BOOST_TEST(mismatches == 0);
}

// The boundary table of docs/safetensors.md §5, plus ties around 1.0 and infinities.
BOOST_AUTO_TEST_CASE(rne_boundary_table) {
  struct Row {
    uint32_t in;
    uint16_t out;
  };
  const Row rows[] = {
      {0x7F7FFFFFu, 0x7F80},  // FLT_MAX -> +Inf (RNE, no saturation)
      {0x7F7F7FFFu, 0x7F7F},  // just below the halfway point to Inf's neighbour
      {0x7F7F8000u, 0x7F80},  // tie, odd mantissa 0x7F -> rounds up into Inf
      {0x007FFFFFu, 0x0080},  // largest f32 denormal -> smallest normal
      {0x00008000u, 0x0000},  // tie at the bottom: even -> 0
      {0x00018000u, 0x0002},  // tie: odd 0x0001 -> even 0x0002
      {0x00000001u, 0x0000},  // smallest denormal -> +0
      {0x80000001u, 0x8000},  // -smallest denormal -> -0
      {0x80000000u, 0x8000},  // -0
      {0x3F808000u, 0x3F80},  // 1 + 2^-8: tie, even -> 1.0
      {0x3F818000u, 0x3F82},  // tie, odd -> up
      {0x3F808001u, 0x3F81},  // just above the tie -> up
      {0x3F807FFFu, 0x3F80},  // just below the tie -> down
      {0xBF818000u, 0xBF82},  // negative tie, odd -> away from zero
      {0x7F800000u, 0x7F80},  // +Inf
      {0xFF800000u, 0xFF80},  // -Inf
      {0x3F800000u, 0x3F80},  // 1.0 exact
  };
  for (const Row& r : rows) {
    BOOST_TEST_CONTEXT("input 0x" << std::hex << r.in) {
      BOOST_TEST(mla::bf16::round_bits(bits_to_float(r.in)) == r.out);
      BOOST_TEST(reference_round(bits_to_float(r.in)) == r.out);  // the reference agrees too
    }
  }
  // NaN: isnan, sign kept, quiet bit forced; checked without pinning payload bits beyond that.
  for (uint32_t in : {0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0xFF800001u, 0xFFFFFFFFu, 0x7F810000u}) {
    const mla::bf16 b = mla::bf16::from_float(bits_to_float(in));
    const float w = b.to_float();
    BOOST_TEST(std::isnan(w), "0x" << std::hex << in);
    BOOST_TEST(std::signbit(w) == ((in >> 31) != 0));
    BOOST_TEST((b.bits & 0x0040u) != 0u);
  }
}

// >= 2^24 pseudo-random f32 bit patterns, plus every low half for a set of upper halves
// (which includes all ties), against the independent reference.
BOOST_AUTO_TEST_CASE(rne_matches_independent_reference) {
  uint64_t state = 0x5EED0BF16ull;
  int64_t checked = 0, mismatches = 0;
  auto check = [&](uint32_t u) {
    const float f = bits_to_float(u);
    if (std::isnan(f)) return;
    ++checked;
    const uint16_t got = mla::bf16::round_bits(f);
    const uint16_t want = reference_round(f);
    if (got != want && mismatches++ < 5)
      BOOST_ERROR("f32 0x" << std::hex << u << ": got 0x" << got << ", reference 0x" << want);
  };
  for (int i = 0; i < (1 << 24); ++i) check(static_cast<uint32_t>(splitmix64(state)));
  for (uint32_t upper : {0x0000u, 0x0001u, 0x007Fu, 0x0080u, 0x3F80u, 0x3F81u, 0x4049u, 0x7F7Eu, 0x7F7Fu,
                         0x8000u, 0x8001u, 0xBF80u, 0xC2F7u, 0xFF7Fu}) {
    for (uint32_t low = 0; low < 65536; ++low) check((upper << 16) | low);
  }
  BOOST_TEST(checked >= (1 << 24));
  BOOST_TEST(mismatches == 0);
}

// round_to_bf16(double) rounds to f32 first (as a float tensor would hold it), then to bf16:
// 1 + 2^-8 + 2^-30 becomes the f32 1 + 2^-8 (a bf16 tie), which goes to even: 1.0, while a
// single rounding of the double would give 1 + 2^-7.
BOOST_AUTO_TEST_CASE(double_rounds_through_f32) {
  const double d = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  BOOST_TEST(mla::round_to_bf16(d) == 1.0);
  BOOST_TEST(mla::round_to_bf16(1.0f + std::ldexp(1.0f, -7)) == 1.0f + std::ldexp(1.0f, -7));
  BOOST_TEST(mla::round_to_bf16(0.1f) == bits_to_float(0x3DCD0000u));  // 0x3DCCCCCD -> up
}

// F16: literal spot checks, then all 65536 codes against the formula.
BOOST_AUTO_TEST_CASE(f16_decode) {
  BOOST_TEST(std::bit_cast<uint32_t>(mla::f16_to_float(0x0000)) == 0x00000000u);
  BOOST_TEST(std::bit_cast<uint32_t>(mla::f16_to_float(0x8000)) == 0x80000000u);  // -0
  BOOST_TEST(mla::f16_to_float(0x3C00) == 1.0f);
  BOOST_TEST(mla::f16_to_float(0xC000) == -2.0f);
  BOOST_TEST(mla::f16_to_float(0x7BFF) == 65504.0f);
  BOOST_TEST(mla::f16_to_float(0x3555) == 0.333251953125f);
  BOOST_TEST(mla::f16_to_float(0x0400) == 6.103515625e-05f);          // 2^-14, min normal
  BOOST_TEST(mla::f16_to_float(0x03FF) == 6.0975551605224609375e-05f);  // 1023 * 2^-24
  BOOST_TEST(mla::f16_to_float(0x0001) == 5.9604644775390625e-08f);   // 2^-24, min subnormal
  BOOST_TEST(mla::f16_to_float(0x8001) == -5.9604644775390625e-08f);
  BOOST_TEST(mla::f16_to_float(0x7C00) == std::numeric_limits<float>::infinity());
  BOOST_TEST(mla::f16_to_float(0xFC00) == -std::numeric_limits<float>::infinity());
  BOOST_TEST(std::isnan(mla::f16_to_float(0x7E00)));
  BOOST_TEST(std::isnan(mla::f16_to_float(0x7C01)));
  BOOST_TEST(std::isnan(mla::f16_to_float(0xFE01)));
  BOOST_TEST(std::signbit(mla::f16_to_float(0xFE01)));

  int mismatches = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    const int sign = (c >> 15) & 1, e = (c >> 10) & 0x1F, m = c & 0x3FF;
    const float got = mla::f16_to_float(static_cast<uint16_t>(c));
    bool ok;
    if (e == 31 && m != 0) {
      ok = std::isnan(got) && std::signbit(got) == (sign != 0);
    } else {
      double want = (e == 31) ? std::numeric_limits<double>::infinity()
                    : (e == 0) ? std::ldexp(static_cast<double>(m), -24)
                               : std::ldexp(1.0 + m / 1024.0, e - 15);
      if (sign) want = -want;
      ok = static_cast<double>(got) == want && std::signbit(got) == (sign != 0);
    }
    if (!ok && mismatches++ < 5) BOOST_ERROR("F16 code 0x" << std::hex << c << " -> " << got);
  }
  BOOST_TEST(mismatches == 0);
}

// F16 narrowing: every finite code comes back as itself; every midpoint between two
// neighbouring non-negative codes goes to the even one, and the floats just either side of it
// to the nearer one (an independent reference: the codes' values in double, not bit tricks);
// the overflow tie 65520 and the zero tie 2^-25; NaN stays NaN with its sign.
BOOST_AUTO_TEST_CASE(f16_round) {
  int mismatches = 0;
  auto expect = [&](float in, uint16_t want) {
    const uint16_t got = mla::f16_round_bits(in);
    if (got != want && mismatches++ < 5)
      BOOST_ERROR("f16_round_bits(" << in << ") = 0x" << std::hex << got << ", want 0x" << want);
  };
  for (uint32_t c = 0; c < 0x7C00; ++c) {  // non-negative finite codes
    const float v = mla::f16_to_float(static_cast<uint16_t>(c));
    expect(v, static_cast<uint16_t>(c));
    expect(-v, static_cast<uint16_t>(c | 0x8000u));
    // the midpoint to the next code (0x7C00 = Inf: the midpoint is 65520)
    const double next = c + 1 == 0x7C00 ? 65536.0 : static_cast<double>(mla::f16_to_float(static_cast<uint16_t>(c + 1)));
    const auto mid = static_cast<float>((static_cast<double>(v) + next) / 2.0);  // exact: 12 bits
    BOOST_REQUIRE(static_cast<double>(mid) == (static_cast<double>(v) + next) / 2.0);
    const uint16_t even = (c & 1u) ? static_cast<uint16_t>(c + 1) : static_cast<uint16_t>(c);
    expect(mid, even);
    expect(std::nextafter(mid, 0.0f), static_cast<uint16_t>(c));
    expect(std::nextafter(mid, 1e30f), static_cast<uint16_t>(c + 1));
  }
  BOOST_TEST(mismatches == 0);
  BOOST_TEST(mla::f16_round_bits(65520.0f) == 0x7C00);
  BOOST_TEST(mla::f16_round_bits(-1e30f) == 0xFC00);
  BOOST_TEST(mla::f16_round_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  BOOST_TEST(mla::f16_round_bits(std::ldexp(1.0f, -25)) == 0x0000);
  BOOST_TEST(mla::f16_round_bits(-std::ldexp(1.0f, -25)) == 0x8000);
  BOOST_TEST(mla::f16_round_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  BOOST_TEST(mla::f16_round_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  BOOST_TEST(mla::f16_round_bits(1.0f / 3.0f) == 0x3555);
  const uint16_t nan = mla::f16_round_bits(-std::numeric_limits<float>::quiet_NaN());
  BOOST_TEST(((nan & 0x7C00) == 0x7C00 && (nan & 0x3FF) != 0 && (nan & 0x8000) != 0));
}

// E4M3FN: all 256 codes against the literal table (rows = high nibble, negative half mirrors).
// Derivation: e = bits 6..3, m = bits 2..0; e == 0: m/8 * 2^-6; else (1 + m/8) * 2^(e-7);
// S.1111.111 is NaN; there is no Inf.
BOOST_AUTO_TEST_CASE(e4m3fn_all_codes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double table[128] = {
      0, .001953125, .00390625, .005859375, .0078125, .009765625, .01171875, .013671875,
      .015625, .017578125, .01953125, .021484375, .0234375, .025390625, .02734375, .029296875,
      .03125, .03515625, .0390625, .04296875, .046875, .05078125, .0546875, .05859375,
      .0625, .0703125, .078125, .0859375, .09375, .1015625, .109375, .1171875,
      .125, .140625, .15625, .171875, .1875, .203125, .21875, .234375,
      .25, .28125, .3125, .34375, .375, .40625, .4375, .46875,
      .5, .5625, .625, .6875, .75, .8125, .875, .9375,
      1, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
      2, 2.25, 2.5, 2.75, 3, 3.25, 3.5, 3.75,
      4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5,
      8, 9, 10, 11, 12, 13, 14, 15,
      16, 18, 20, 22, 24, 26, 28, 30,
      32, 36, 40, 44, 48, 52, 56, 60,
      64, 72, 80, 88, 96, 104, 112, 120,
      128, 144, 160, 176, 192, 208, 224, 240,
      256, 288, 320, 352, 384, 416, 448, nan,
  };
  for (uint32_t c = 0; c < 256; ++c) {
    const float got = mla::fp8_e4m3fn_to_float(static_cast<uint8_t>(c));
    const bool negative = c >= 0x80;
    const double magnitude = table[c & 0x7F];
    BOOST_TEST_CONTEXT("E4M3 code 0x" << std::hex << c) {
      BOOST_TEST(!std::isinf(got));
      if ((c & 0x7F) == 0x7F) {
        BOOST_TEST(std::isnan(got));
        BOOST_TEST(std::signbit(got) == negative);
      } else {
        BOOST_TEST(static_cast<double>(got) == (negative ? -magnitude : magnitude));
        BOOST_TEST(std::signbit(got) == negative);  // 0x80 is -0
      }
    }
  }
  BOOST_TEST(mla::fp8_e4m3fn_to_float(0x7E) == 448.0f);
  BOOST_TEST(mla::fp8_e4m3fn_to_float(0xFE) == -448.0f);
  BOOST_TEST(mla::fp8_e4m3fn_to_float(0x08) == 0.015625f);  // min normal 2^-6
}

// E5M2: all 256 codes against the formula via ldexp, plus literal anchors.
BOOST_AUTO_TEST_CASE(e5m2_all_codes) {
  for (uint32_t c = 0; c < 256; ++c) {
    const int sign = (c >> 7) & 1, e = (c >> 2) & 0x1F, m = c & 0x3;
    const float got = mla::fp8_e5m2_to_float(static_cast<uint8_t>(c));
    BOOST_TEST_CONTEXT("E5M2 code 0x" << std::hex << c) {
      BOOST_TEST(std::signbit(got) == (sign != 0));
      if (e == 31 && m != 0) {
        BOOST_TEST(std::isnan(got));
      } else {
        double want = (e == 31) ? std::numeric_limits<double>::infinity()
                      : (e == 0) ? std::ldexp(static_cast<double>(m), -16)
                                 : std::ldexp(1.0 + m / 4.0, e - 15);
        if (sign) want = -want;
        BOOST_TEST(static_cast<double>(got) == want);
      }
    }
  }
  BOOST_TEST(mla::fp8_e5m2_to_float(0x3C) == 1.0f);
  BOOST_TEST(mla::fp8_e5m2_to_float(0x7B) == 57344.0f);
  BOOST_TEST(mla::fp8_e5m2_to_float(0x01) == 1.52587890625e-05f);  // 2^-16
  BOOST_TEST(mla::fp8_e5m2_to_float(0x7C) == std::numeric_limits<float>::infinity());
  BOOST_TEST(mla::fp8_e5m2_to_float(0xFC) == -std::numeric_limits<float>::infinity());
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) BOOST_TEST(std::isnan(mla::fp8_e5m2_to_float(c)));
}

BOOST_AUTO_TEST_SUITE_END()
