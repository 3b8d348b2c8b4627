// src/checkpoint/fp8_encode.cpp — f32 -> FP8 E4M3FN, round to nearest even, saturating
// (contract and the torch difference in include/mla/fp8.hpp).
//
// Notation: the f32 is (-1)^s * 1.mant23 * 2^E (normal) with E = exp8 - 127.
//   * E >= -6: the target is normal, e = E + 7; the code is (e << 3) | m with m the top 3
//     mantissa bits, rounded using the 20 bits below. A mantissa carry moves into the
//     exponent field by itself (0x0F + 1 = 0x10 is the next binade).
//   * E < -6: the target is subnormal, code = round(|x| * 2^9) in 0..8; code 8 is 0x08, the
//     smallest normal 2^-6, so rounding up across the boundary is also correct.
//   * a code above 0x7E (0x7F is NaN) saturates to 0x7E = 448.
#include <bit>
#include <cmath>
#include <cstdint>

#include "mla/fp8.hpp"

namespace mla {
namespace {

// Rounds `value >> shift` to nearest, ties to even (shift in 1..31).
uint32_t shift_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) return kept + 1u;
  return kept;
}

}  // namespace

uint8_t float_to_fp8_e4m3fn(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 31) << 7);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);  // NaN
  if (magnitude >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // >= 448 or Inf

  const int exp8 = static_cast<int>(magnitude >> 23);
  if (exp8 == 0) return sign;  // f32 zero or subnormal (< 2^-126): rounds to 0
  const int E = exp8 - 127;
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;  // 1.mant23 as 24 bits

  uint32_t code;
  if (E >= -6) {
    // (e << 3 | top 3 mantissa bits) with the remaining 20 bits rounded away.
    const uint32_t e = static_cast<uint32_t>(E + 7);
    const uint32_t mant = magnitude & 0x7FFFFFu;
    code = shift_round_even((e << 23) | mant, 20);
  } else {
    // |x| * 2^9 = significand * 2^(E - 14); shift = 14 - E >= 21.
    const int shift = 14 - E;
    code = shift >= 32 ? 0u : shift_round_even(significand, shift);
  }
  if (code > 0x7Eu) code = 0x7Eu;
  return static_cast<uint8_t>(sign | code);
}

}  // namespace mla
