// mla/bf16.hpp — BF16 value type, F16 rounding and decoding, FP8 (E4M3FN, E5M2) decoding.
//
// bf16 = the top 16 bits of an IEEE binary32: 1 sign, 8 exponent, 7 mantissa.
//   widening (bf16 -> f32) is exact: bits << 16.
//   narrowing (f32 -> bf16) is round-to-nearest-even, done on the integer bits
//   (never with float arithmetic, so FTZ/DAZ cannot flush denormals):
//     NaN  -> (u >> 16) | 0x0040   (sign and payload kept, quiet bit forced)
//     else -> (u + 0x7FFF + ((u >> 16) & 1)) >> 16
//   This is what PyTorch's `tensor.to(torch.bfloat16)` does for every non-NaN value.
//
// FP8 E4M3FN (safetensors F8_E4M3, torch.float8_e4m3fn): S.EEEE.MMM, bias 7,
//   no infinities, NaN = 0x7F / 0xFF only, max +-448.
//   value = (e == 0) ? m * 2^-9 : (1 + m/8) * 2^(e-7), sign applied.
// FP8 E5M2 (safetensors F8_E5M2): S.EEEEE.MM, bias 15, IEEE-like:
//   e == 31: m == 0 -> +-Inf, else NaN; e == 0: m * 2^-16; else (1 + m/4) * 2^(e-15).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mla {

struct bf16 {
  uint16_t bits = 0;

  constexpr bf16() = default;
  static constexpr bf16 from_bits(uint16_t b) { bf16 v; v.bits = b; return v; }

  // f32 -> bf16, round to nearest even; NaN stays a quiet NaN with its sign.
  static constexpr uint16_t round_bits(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  static constexpr bf16 from_float(float f) { return from_bits(round_bits(f)); }

  // bf16 -> f32, exact.
  constexpr float to_float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

// The value of f rounded to bf16, as a float (what `x.to(bf16).float()` gives).
constexpr float round_to_bf16(float f) { return bf16::from_float(f).to_float(); }

// Same for a double: first rounded to f32 (as a float tensor would hold it), then to bf16.
// Double rounding is what PyTorch does when an fp32 intermediate is cast; the reference
// backend uses it only where PyTorch itself holds an fp32 value.
constexpr double round_to_bf16(double d) { return round_to_bf16(static_cast<float>(d)); }

// torch.finfo(torch.bfloat16).min, the finite bf16 minimum (bits 0xFF7F, exact in fp32): the
// additive mask value of HF's eager attention in a bf16 run (docs/math.md §8).
inline constexpr float kBf16FinfoMin = std::bit_cast<float>(uint32_t{0xFF7F0000});

// IEEE binary16 -> f32, exact.
float f16_to_float(uint16_t h);
// f32 -> IEEE binary16, round to nearest even on the integer bits (what `x.to(torch.float16)`
// gives): subnormals kept, |x| >= 65520 -> +-Inf, NaN -> a quiet NaN with its sign.
uint16_t f16_round_bits(float f);
// The value of f rounded to binary16, as a float.
inline float round_to_f16(float f) { return f16_to_float(f16_round_bits(f)); }

// FP8 decoders (exact in f32).
float fp8_e4m3fn_to_float(uint8_t code);
float fp8_e5m2_to_float(uint8_t code);

}  // namespace mla
