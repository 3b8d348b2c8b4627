// mla/fp8.hpp — f32 -> FP8 E4M3FN encoding (the inverse of fp8_e4m3fn_to_float in bf16.hpp),
// used to write FP8 block-quantized synthetic checkpoints (docs/math.md §11).
//
// E4M3FN: S.EEEE.MMM, bias 7, no infinities, NaN = 0x7F / 0xFF, max +-448, min subnormal 2^-9.
// Encoding rules:
//   * round to nearest, ties to even, on the integer bits of the f32 (no float arithmetic,
//     so the FPU rounding mode and FTZ/DAZ cannot change the result);
//   * saturating: |x| >= 448 (including +-Inf) -> +-448 (0x7E / 0xFE). torch's
//     `.to(torch.float8_e4m3fn)` instead gives NaN for |x| >= 480; the two agree on every
//     |x| < 480, which is all a block-scaled weight (|x| <= 448 by construction) ever holds;
//   * NaN -> 0x7F with the sign bit kept (0xFF for a negative NaN);
//   * values that round to zero keep their sign (0x00 / 0x80).
#pragma once

#include <cstdint>

namespace mla {

uint8_t float_to_fp8_e4m3fn(float value);

// Largest finite E4M3FN magnitude.
constexpr float kFp8E4m3Max = 448.0f;

}  // namespace mla
