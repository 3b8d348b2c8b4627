// mla/int4.hpp — compressed-tensors `pack-quantized` INT4 weights: the format of Kimi
// K2-Thinking / K2.5 / K2.6's routed experts (docs/checkpoints.md §6).
//
// A weight W [rows, cols] (rows = out features, cols = in features) with group size G is stored
// as three tensors beside each other:
//   <name>.weight_packed  I32 [rows, ceil(cols / 8)]  eight 4-bit codes per int32, little end first
//   <name>.weight_scale   BF16 | F16 | F32 [rows, cols / G]   one scale per G consecutive inputs
//   <name>.weight_shape   I64 (or I32) [2] = {rows, cols}
// Code c in [0, 15] stands for q = c - 8 in [-8, 7] (symmetric; no zero point). Dequantization,
// exactly as compressed-tensors computes it (unpack, `q.to(scale.dtype) * scale`):
//   q[i, j] = ((packed[i, j / 8] >> (4 * (j % 8))) & 0xF) - 8
//   W[i, j] = round_to(scale dtype, float(q[i, j]) * scale[i, j / G])
// The product of a 4-bit integer and a BF16 or F16 scale is exact in f32, so a BF16 scale gives
// one rounding (f32 -> bf16, nearest even), an F16 scale one rounding to binary16 (subnormals
// kept), an F32 scale the single rounding of the f32 multiply. The dequantized weight has the
// scale's dtype; here it is widened to f32 exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mla/safetensors.hpp"

namespace mla::int4 {

constexpr int64_t kCodesPerWord = 8;  // 32 bits / 4 bits

// Stored shapes of a pack-quantized weight [rows, cols] with group size G.
std::vector<int64_t> packed_shape(int64_t rows, int64_t cols);                     // [rows, ceil(cols/8)]
std::vector<int64_t> scale_shape(int64_t rows, int64_t cols, int64_t group_size);  // [rows, cols/G]
// Whether a scale may have this dtype (BF16, F16, F32).
bool is_scale_dtype(DType dtype);

// f rounded to `dtype` (BF16 or F16: nearest even on the bits; F32: f itself), as a float.
float round_to(DType dtype, float f);

// W [rows, cols] from the raw little-endian bytes of weight_packed (rows * ceil(cols/8) int32)
// and the values of weight_scale (rows * cols/G, widened exactly from scale_dtype, e.g. by
// SafetensorsFile::to_float), as the header describes. The caller checks the shapes; `out`
// holds rows * cols floats.
void dequantize(std::span<const std::byte> packed, std::span<const float> scale, DType scale_dtype, int64_t rows,
                int64_t cols, int64_t group_size, std::span<float> out);

// compressed-tensors' own quantization of a weight held in `dtype` (its values representable
// there), as its CPU path computes it — llm-compressor's min-max observer, calculate_qparams,
// then quantize and pack_to_int32 — so that the bytes are the ones compressed-tensors writes:
//   lo = min(0, min of the group), hi = max(0, max of the group)
//   scale = round_to(dtype, max(-lo, hi) / 7.5)        (7.5 = (q_max - q_min) / 2), and a zero
//           scale becomes the dtype's epsilon (torch.finfo: 2^-7 bf16, 2^-10 f16, 2^-23 f32)
//   q = round_half_even(clamp(round_to(dtype, w / scale), -8, 7)),  code = q + 8
// Returns the weight_packed bytes (I32) and the weight_scale bytes (in `dtype`).
struct Packed {
  std::vector<std::byte> packed;  // rows * ceil(cols/8) int32, little-endian
  std::vector<std::byte> scale;   // rows * cols/G values of dtype
};
Packed quantize(std::span<const float> w, DType dtype, int64_t rows, int64_t cols, int64_t group_size);

}  // namespace mla::int4
