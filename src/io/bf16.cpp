// src/io/bf16.cpp — decoders for the 16- and 8-bit float formats a safetensors file may hold,
// and the f32 -> F16 rounding.
//
// bf16 itself is header-only (include/mla/bf16.hpp). This file widens the other formats to
// f32, exactly (every code of these formats is representable in f32), and narrows f32 to F16
// (for pack-quantized weights whose scales are F16, docs/checkpoints.md §6).
//
// Bit layouts (S = sign, E = exponent, M = mantissa):
//   F16      S EEEEE MMMMMMMMMM   bias 15; e==0 subnormal m*2^-24; e==31 Inf (m==0) / NaN
//   F8_E4M3  S EEEE MMM           bias 7;  e==0 subnormal m*2^-9; no Inf; S.1111.111 = NaN
//   F8_E5M2  S EEEEE MM           bias 15; e==0 subnormal m*2^-16; e==31 Inf (m==0) / NaN
//
// Normal and subnormal values are built with std::ldexp on small exact integers, which is
// exact and immune to FTZ/DAZ (the results are f32 normals). Inf/NaN are built from bits so
// the sign (and, for F16, the payload) is kept.
#include <bit>
#include <cmath>
#include <cstdint>

#include "mla/bf16.hpp"

namespace mla {

namespace {

// sign bit (0 or 1) applied to a non-negative float magnitude.
float with_sign(unsigned sign, float magnitude) { return sign ? -magnitude : magnitude; }

// The f32 quiet NaN with the given sign (0x7FC00000 / 0xFFC00000).
float quiet_nan(unsigned sign) {
  return std::bit_cast<float>((static_cast<uint32_t>(sign) << 31) | 0x7FC00000u);
}

}  // namespace

// F16: value = (e == 0) ? m * 2^-24 : (1 + m/1024) * 2^(e-15) = (1024 + m) * 2^(e-25).
float f16_to_float(uint16_t h) {
  const unsigned sign = (h >> 15) & 0x1u;
  const unsigned e = (h >> 10) & 0x1Fu;  // 5-bit exponent field
  const unsigned m = h & 0x3FFu;         // 10-bit mantissa field
  if (e == 31) {
    // Inf or NaN: f32 exponent all ones, mantissa payload shifted into the top 10 bits.
    return std::bit_cast<float>((static_cast<uint32_t>(sign) << 31) | 0x7F800000u |
                                (static_cast<uint32_t>(m) << 13));
  }
  if (e == 0) return with_sign(sign, std::ldexp(static_cast<float>(m), -24));
  return with_sign(sign, std::ldexp(static_cast<float>(1024u + m), static_cast<int>(e) - 25));
}

// f32 -> F16, round to nearest even, on the bits of f (no float arithmetic, so FTZ/DAZ and the
// rounding mode cannot change it). Let a = |f|'s bits:
//   a > 0x7F800000 (NaN)            sign | 0x7E00 | top payload bits    (quiet)
//   a >= 0x477FF000 (>= 65520)      sign | 0x7C00 (Inf): 65520 is the tie between the largest
//                                   finite 65504 (odd mantissa) and 2^16, so it goes up
//   a >= 0x38800000 (>= 2^-14)      normal: add 0xFFF + (bit 13), drop 13 bits, rebias by 112
//   a <= 0x33000000 (<= 2^-25)      signed zero (2^-25 is the tie between 0 and 2^-24)
//   else                            subnormal: (1.m) * 2^(e-150) / 2^-24 rounded to an integer
uint16_t f16_round_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {
    const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (a <= 0x33000000u) return sign;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;  // 24 significant bits
  const unsigned shift = 126u - (a >> 23);            // 14 .. 24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

// F8_E4M3 (e4m3fn): value = (e == 0) ? m * 2^-9 : (1 + m/8) * 2^(e-7) = (8 + m) * 2^(e-10).
float fp8_e4m3fn_to_float(uint8_t code) {
  const unsigned sign = (code >> 7) & 0x1u;
  const unsigned e = (code >> 3) & 0xFu;  // 4-bit exponent field
  const unsigned m = code & 0x7u;         // 3-bit mantissa field
  if (e == 15 && m == 7) return quiet_nan(sign);  // 0x7F / 0xFF, the only NaNs; no Inf
  if (e == 0) return with_sign(sign, std::ldexp(static_cast<float>(m), -9));
  return with_sign(sign, std::ldexp(static_cast<float>(8u + m), static_cast<int>(e) - 10));
}

// F8_E5M2: value = (e == 0) ? m * 2^-16 : (1 + m/4) * 2^(e-15) = (4 + m) * 2^(e-17).
float fp8_e5m2_to_float(uint8_t code) {
  const unsigned sign = (code >> 7) & 0x1u;
  const unsigned e = (code >> 2) & 0x1Fu;  // 5-bit exponent field
  const unsigned m = code & 0x3u;          // 2-bit mantissa field
  if (e == 31) {
    if (m == 0) return with_sign(sign, std::numeric_limits<float>::infinity());
    return quiet_nan(sign);
  }
  if (e == 0) return with_sign(sign, std::ldexp(static_cast<float>(m), -16));
  return with_sign(sign, std::ldexp(static_cast<float>(4u + m), static_cast<int>(e) - 17));
}

}  // namespace mla
