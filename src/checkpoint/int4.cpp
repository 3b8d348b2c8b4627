// src/checkpoint/int4.cpp — compressed-tensors pack-quantized INT4: dequantization (the checkpoint
// loader) and quantization (`mla-h2o synth`), bit for bit as compressed-tensors computes them on
// the CPU (include/mla/int4.hpp has the formulas; docs/checkpoints.md §6; checked against
// compressed-tensors' own output in tests/unit/test_int4.cpp on tests/data/int4/).
//
// Shape legend: R = rows (out features), C = cols (in features), G = group size,
//   W = ceil(C / 8) packed words per row, N = C / G groups per row.
#include "mla/int4.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "mla/bf16.hpp"
#include "mla/error.hpp"

namespace mla::int4 {
namespace {

// A float already representable in dtype, stored in dtype's bytes.
void store_scale(DType dtype, float v, std::byte* p) {
  if (dtype == DType::BF16) {
    const uint16_t b = bf16::round_bits(v);
    std::memcpy(p, &b, 2);
  } else if (dtype == DType::F16) {
    const uint16_t h = f16_round_bits(v);
    std::memcpy(p, &h, 2);
  } else {
    std::memcpy(p, &v, 4);
  }
}

// torch.finfo(dtype).eps: the scale that replaces a zero one.
float epsilon(DType dtype) {
  if (dtype == DType::BF16) return 0x1p-7f;
  if (dtype == DType::F16) return 0x1p-10f;
  return std::numeric_limits<float>::epsilon();  // 2^-23
}

// torch.round (half to even) of a value in [-8, 7], without depending on the rounding mode:
// v - floor(v) is exact for such small floats.
float round_half_even(float v) {
  const float fl = std::floor(v), d = v - fl;
  if (d > 0.5f) return fl + 1.0f;
  if (d < 0.5f) return fl;
  return std::fmod(fl, 2.0f) == 0.0f ? fl : fl + 1.0f;
}

void check_geometry(int64_t rows, int64_t cols, int64_t group_size) {
  if (rows <= 0 || cols <= 0 || group_size <= 0 || cols % group_size != 0)
    fail(ErrorKind::InvalidArgument, "int4: a [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                         "] weight cannot have groups of " + std::to_string(group_size));
}

}  // namespace

std::vector<int64_t> packed_shape(int64_t rows, int64_t cols) {
  return {rows, (cols + kCodesPerWord - 1) / kCodesPerWord};
}

std::vector<int64_t> scale_shape(int64_t rows, int64_t cols, int64_t group_size) {
  return {rows, cols / group_size};
}

bool is_scale_dtype(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F32; }

float round_to(DType dtype, float f) {
  if (dtype == DType::BF16) return round_to_bf16(f);
  if (dtype == DType::F16) return round_to_f16(f);
  return f;
}

void dequantize(std::span<const std::byte> packed, std::span<const float> scale, DType scale_dtype, int64_t rows,
                int64_t cols, int64_t group_size, std::span<float> out) {
  check_geometry(rows, cols, group_size);
  if (!is_scale_dtype(scale_dtype)) fail(ErrorKind::InvalidArgument, "int4: a scale must be BF16, F16 or F32");
  const int64_t words = packed_shape(rows, cols)[1], groups = cols / group_size;
  if (packed.size() != static_cast<size_t>(rows * words * 4) || scale.size() != static_cast<size_t>(rows * groups) ||
      out.size() != static_cast<size_t>(rows * cols))
    fail(ErrorKind::InvalidArgument, "int4: buffer sizes do not match a [" + std::to_string(rows) + ", " +
                                         std::to_string(cols) + "] weight");
  // Per group, the 16 possible values round_to(dtype, (c - 8) * s) for c = 0..15; each element
  // is then a lookup by its code (the same function of (q, s) as the formula, element by element).
  float lut[16];
  for (int64_t i = 0; i < rows; ++i) {
    const std::byte* prow = packed.data() + i * words * 4;  // W words, little-endian
    float* orow = out.data() + i * cols;
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scale[static_cast<size_t>(i * groups + g)];
      for (int c = 0; c < 16; ++c) lut[c] = round_to(scale_dtype, static_cast<float>(c - 8) * s);
      // byte j/2 of the row's words holds codes 2k (low nibble) and 2k+1 (high nibble)
      int64_t j = g * group_size;
      const int64_t end = (g + 1) * group_size;
      if (j & 1) {  // an odd group size: the group starts on a high nibble
        orow[j] = lut[static_cast<uint8_t>(prow[j / 2]) >> 4];
        ++j;
      }
      for (; j + 1 < end; j += 2) {
        const auto byte = static_cast<uint8_t>(prow[j / 2]);
        orow[j] = lut[byte & 0xF];
        orow[j + 1] = lut[byte >> 4];
      }
      if (j < end) orow[j] = lut[static_cast<uint8_t>(prow[j / 2]) & 0xF];
    }
  }
}

Packed quantize(std::span<const float> w, DType dtype, int64_t rows, int64_t cols, int64_t group_size) {
  check_geometry(rows, cols, group_size);
  if (!is_scale_dtype(dtype)) fail(ErrorKind::InvalidArgument, "int4: a scale must be BF16, F16 or F32");
  if (w.size() != static_cast<size_t>(rows * cols)) fail(ErrorKind::InvalidArgument, "int4: weight size mismatch");
  for (size_t k = 0; k < w.size(); ++k)
    if (!std::isfinite(w[k])) fail(ErrorKind::InvalidValue, "int4: cannot quantize a non-finite weight (flat index " +
                                                                std::to_string(k) + ")");
  const int64_t words = packed_shape(rows, cols)[1], groups = cols / group_size;
  const size_t ssize = dtype_size(dtype);
  Packed p;
  p.packed.assign(static_cast<size_t>(rows * words * 4), std::byte{0});
  p.scale.assign(static_cast<size_t>(rows * groups) * ssize, std::byte{0});
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = w.data() + i * cols;
    std::byte* prow = p.packed.data() + i * words * 4;
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + g * group_size;
      float lo = 0.0f, hi = 0.0f;  // min(min, 0), max(max, 0)
      for (int64_t j = 0; j < group_size; ++j) {
        lo = std::min(lo, xg[j]);
        hi = std::max(hi, xg[j]);
      }
      float s = round_to(dtype, std::max(-lo, hi) / 7.5f);
      if (s == 0.0f) s = epsilon(dtype);
      store_scale(dtype, s, p.scale.data() + static_cast<size_t>(i * groups + g) * ssize);
      for (int64_t j = 0; j < group_size; ++j) {
        const float scaled = std::clamp(round_to(dtype, xg[j] / s), -8.0f, 7.0f);
        const auto code = static_cast<uint8_t>(static_cast<int>(round_half_even(scaled)) + 8);
        const int64_t col = g * group_size + j;
        const auto shift = static_cast<unsigned>((col & 1) * 4);
        prow[col / 2] = prow[col / 2] | static_cast<std::byte>(code << shift);
      }
    }
  }
  return p;
}

}  // namespace mla::int4
