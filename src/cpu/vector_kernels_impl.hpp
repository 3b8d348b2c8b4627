// src/cpu/vector_kernels_impl.hpp — the body of vector_kernels.hpp, included by one translation
// unit per instruction set with MLA_VECTOR_NS (its namespace: avx512, avx2, baseline) and
// MLA_VECTOR_BYTES (its register width: 64, 32, 16) defined, and compiled with that set's flags
// and -ffp-contract=off. Written with GCC/Clang vector extensions on registers of L =
// MLA_VECTOR_BYTES / 4 floats; the data are walked in groups of 16 elements (16 / L registers),
// and every element goes through the same IEEE operations on every set (no FMA contraction, no
// reassociation), so the three give the same bits. The one reduction whose order matters, the
// double sum of a softmax row, keeps one partial sum per position j = t mod 16 of the group,
// whatever L is, and combines the 16 by a fixed pairwise tree. Tails run through the same
// register code on a padded copy.
//
// Shape legend: n = elements, rows x cols a block of a row-major matrix with row stride ld.
#if !defined(MLA_VECTOR_NS) || !defined(MLA_VECTOR_BYTES)
#error "define MLA_VECTOR_NS and MLA_VECTOR_BYTES before including vector_kernels_impl.hpp"
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#if MLA_VECTOR_BYTES == 64 && defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "vector_kernels.hpp"

namespace mla::cpu::MLA_VECTOR_NS {
namespace {

constexpr int64_t L = MLA_VECTOR_BYTES / 4;  // floats per register
constexpr int64_t kGroup = 16;               // elements per group (the partial sums' period)
constexpr int64_t R = kGroup / L;            // registers per group

typedef float vf __attribute__((vector_size(MLA_VECTOR_BYTES)));
typedef int32_t vi __attribute__((vector_size(MLA_VECTOR_BYTES)));
typedef uint32_t vu __attribute__((vector_size(MLA_VECTOR_BYTES)));
typedef double vd __attribute__((vector_size(MLA_VECTOR_BYTES)));       // L/2 doubles
typedef float vf_half __attribute__((vector_size(MLA_VECTOR_BYTES / 2)));  // L/2 floats
typedef uint16_t vh __attribute__((vector_size(MLA_VECTOR_BYTES / 2)));   // L bf16 bit patterns

#if MLA_VECTOR_BYTES == 64
inline vf_half low(vf v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline vf_half high(vf v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
inline vf join(vf_half a, vf_half b) {
  return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#elif MLA_VECTOR_BYTES == 32
inline vf_half low(vf v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3); }
inline vf_half high(vf v) { return __builtin_shufflevector(v, v, 4, 5, 6, 7); }
inline vf join(vf_half a, vf_half b) { return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7); }
#elif MLA_VECTOR_BYTES == 16
inline vf_half low(vf v) { return __builtin_shufflevector(v, v, 0, 1); }
inline vf_half high(vf v) { return __builtin_shufflevector(v, v, 2, 3); }
inline vf join(vf_half a, vf_half b) { return __builtin_shufflevector(a, b, 0, 1, 2, 3); }
#else
#error "MLA_VECTOR_BYTES must be 64, 32 or 16"
#endif

// Widening float -> double (exact) and narrowing double -> float (round to nearest even) of a
// register's halves. The AVX-512 build spells them with intrinsics: GCC splits the generic
// 8-lane conversions into 4-lane pieces there; the operation is the same.
#if MLA_VECTOR_BYTES == 64 && defined(__AVX512F__)
inline vd widen_low(vf v) { return reinterpret_cast<vd>(_mm512_cvtps_pd(_mm512_castps512_ps256(reinterpret_cast<__m512>(v)))); }
inline vd widen_high(vf v) {
  return reinterpret_cast<vd>(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(reinterpret_cast<__m512d>(v), 1))));
}
inline vf narrow(vd lo, vd hi) {
  const __m256 a = _mm512_cvtpd_ps(reinterpret_cast<__m512d>(lo)), b = _mm512_cvtpd_ps(reinterpret_cast<__m512d>(hi));
  return reinterpret_cast<vf>(_mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1));
}
#else
inline vd widen_low(vf v) { return __builtin_convertvector(low(v), vd); }
inline vd widen_high(vf v) { return __builtin_convertvector(high(v), vd); }
inline vf narrow(vd lo, vd hi) { return join(__builtin_convertvector(lo, vf_half), __builtin_convertvector(hi, vf_half)); }
#endif

inline vf splat(float x) { return vf{} + x; }
inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
// A group of 16 elements read from p[0:count] (count <= 16), the other lanes `fill`; written
// back to p[0:count].
struct Group {
  vf r[R];
};
inline Group load_group(const float* p, int64_t count, float fill) {
  Group g;
  if (count == kGroup) {
    for (int64_t k = 0; k < R; ++k) g.r[k] = load(p + k * L);
    return g;
  }
  float tmp[kGroup];
  for (int64_t i = 0; i < kGroup; ++i) tmp[i] = i < count ? p[i] : fill;
  for (int64_t k = 0; k < R; ++k) g.r[k] = load(tmp + k * L);
  return g;
}
inline void store_group(float* p, const Group& g, int64_t count) {
  if (count == kGroup) {
    for (int64_t k = 0; k < R; ++k) store(p + k * L, g.r[k]);
    return;
  }
  float tmp[kGroup];
  for (int64_t k = 0; k < R; ++k) store(tmp + k * L, g.r[k]);
  std::memcpy(p, tmp, static_cast<size_t>(count) * sizeof(float));
}

// bf16 rounding on the bits, as mla/bf16.hpp round_bits: NaN -> quiet NaN with its sign and
// payload; else round to nearest even. Returns the rounded float's bits (low half zero).
inline vu round_bf16_bits32(vf x) {
  const vu u = reinterpret_cast<vu>(x);
  const vu rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const vu quiet_nan = (u | 0x00400000u) & 0xFFFF0000u;
  const vi magnitude = reinterpret_cast<vi>(u & 0x7FFFFFFFu);
  return magnitude > 0x7F800000 ? quiet_nan : rounded;
}
inline vf round_bf16(vf x) { return reinterpret_cast<vf>(round_bf16_bits32(x)); }
// The same rounding for registers known to hold no NaN (round to nearest even takes +-inf to
// itself and a finite value past the largest bf16 to +-inf, as round_bf16_bits32 does): the
// NaN select is all that differs, so on such lanes the two give the same bits.
inline vu round_bf16_bits32_no_nan(vf x) {
  const vu u = reinterpret_cast<vu>(x);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
}
inline vf round_bf16_no_nan(vf x) { return reinterpret_cast<vf>(round_bf16_bits32_no_nan(x)); }

// Whether any lane of the registers is NaN.
inline bool any_nan(const vf* r, int64_t count) {
  vi unordered{};
  for (int64_t k = 0; k < count; ++k) unordered |= r[k] != r[k];
#if MLA_VECTOR_BYTES == 64 && defined(__AVX512F__)
  return _mm512_test_epi32_mask(reinterpret_cast<__m512i>(unordered), reinterpret_cast<__m512i>(unordered)) != 0;
#else
  int32_t lanes[L];
  std::memcpy(lanes, &unordered, sizeof lanes);
  int32_t any = 0;
  for (int64_t i = 0; i < L; ++i) any |= lanes[i];
  return any != 0;
#endif
}
inline vh narrow_bits(vu rounded_bits32) { return __builtin_convertvector(rounded_bits32 >> 16, vh); }
inline void store_bits(uint16_t* p, vu rounded_bits32) {
  const vh h = narrow_bits(rounded_bits32);
  std::memcpy(p, &h, sizeof h);
}

// exp(x) in fp32. Cody-Waite: k = round(x log2(e)) (the 1.5*2^23 shifter: round to nearest
// even), r = (x - k C1) - k C2 with C1 = 0.693359375 (9 bits: k C1 and x - k C1 are exact) and
// C1 + C2 = ln 2; e^r = 1 + r + r^2 P(r) (Cephes' degree-5 P, |r| <= ln2/2); 2^k applied as two
// exact power-of-two factors 2^(k>>1) 2^(k-(k>>1)), so a subnormal result is rounded once.
// x is clamped to [-104, 88.75] (exp is 0 below -103.98 and overflows above 88.73); NaN stays NaN
// (the comparisons are false).
inline vf exp_v(vf x) {
  x = x < splat(-104.0f) ? splat(-104.0f) : x;
  x = x > splat(88.75f) ? splat(88.75f) : x;
  const vf shifter = splat(12582912.0f);  // 1.5 * 2^23
  const vf shifted = x * splat(1.44269504088896341f) + shifter;
  const vf k = shifted - shifter;
  const vi ki = reinterpret_cast<vi>(shifted) - reinterpret_cast<vi>(shifter);
  vf r = x - k * splat(0.693359375f);
  r = r - k * splat(-2.12194440e-4f);
  const vf z = r * r;
  vf p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  const vf y = p * z + r + splat(1.0f);
  const vi k1 = ki >> 1, k2 = ki - k1;
  const vf s1 = reinterpret_cast<vf>((k1 + 127) << 23), s2 = reinterpret_cast<vf>((k2 + 127) << 23);
  return y * s1 * s2;
}

// The 16 partial sums (element j of every group adds into partial j, j = 0..15, as the
// accumulators hold them: register k's low half covers j = kL .. kL + L/2 - 1, its high half the
// next L/2), combined by a fixed pairwise tree.
struct PartialSums {
  vd acc[2 * R] = {};
  void add(const Group& g) {
    for (int64_t k = 0; k < R; ++k) {
      acc[2 * k] += widen_low(g.r[k]);
      acc[2 * k + 1] += widen_high(g.r[k]);
    }
  }
  double total() const {
    double a[kGroup];
    std::memcpy(a, acc, sizeof a);
    double s8[8];
    for (int j = 0; j < 8; ++j) s8[j] = a[j] + a[j + 8];
    return ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7]));
  }
};
static_assert(sizeof(PartialSums::acc) == kGroup * sizeof(double));

// ---- the kernels ------------------------------------------------------------------------------

void exp_n(const float* x, float* y, int64_t n) {
  for (int64_t t = 0; t < n; t += kGroup) {
    const int64_t count = std::min(kGroup, n - t);
    Group g = load_group(x + t, count, 0.0f);
    for (vf& r : g.r) r = exp_v(r);
    store_group(y + t, g, count);
  }
}

void softmax_row(float* row, int64_t visible, int64_t width, float scaling, Precision precision, float* probs,
                 uint16_t* bits) {
  const float lowest = -std::numeric_limits<float>::infinity();
  const vf s = splat(scaling);
  // pass 1: x = the scaled scores (in place), their max. In bf16 a group without NaN (every
  // group of a finite row) rounds without the NaN select: the same bits, fewer operations.
  vf m = splat(lowest);
  bool nan_seen = false;
  // bf16(r) * s is NaN only where r is when s is finite and non-zero (inf * 0 is NaN)
  const bool scale_keeps_numbers = scaling != 0.0f && scaling - scaling == 0.0f;
  for (int64_t t = 0; t < visible; t += kGroup) {
    const int64_t count = std::min(kGroup, visible - t);
    Group g = load_group(row + t, count, 0.0f);
    if (precision == Precision::FP32) {
      for (vf& r : g.r) r = r * s;
    } else if (scale_keeps_numbers && !any_nan(g.r, R)) {
      for (vf& r : g.r) r = round_bf16_no_nan(round_bf16_no_nan(r) * s);
    } else {
      nan_seen = true;
      for (vf& r : g.r) r = round_bf16(round_bf16(r) * s);
    }
    store_group(row + t, g, count);
    if (count < kGroup) g = load_group(row + t, count, lowest);  // padding lanes: never the max
    for (const vf& r : g.r) m = r > m ? r : m;
  }
  float lanes[L];
  store(lanes, m);
  float max_x = lanes[0];
  for (int64_t i = 1; i < L; ++i) max_x = lanes[i] > max_x ? lanes[i] : max_x;
  const vf max = splat(max_x);
  // pass 2: e = exp(x - max) (in place) and the 16 double partial sums; padding lanes give
  // exp(-inf) = 0, which changes no partial sum
  PartialSums sum;
  int64_t t = 0;
  for (; t + 2 * kGroup <= visible; t += 2 * kGroup) {  // two groups at a time: independent exps in flight
    Group g = load_group(row + t, kGroup, lowest), h = load_group(row + t + kGroup, kGroup, lowest);
    for (int64_t k = 0; k < R; ++k) {
      g.r[k] = exp_v(g.r[k] - max);
      h.r[k] = exp_v(h.r[k] - max);
    }
    sum.add(g);  // in element order: the first group's terms first
    sum.add(h);
    store_group(row + t, g, kGroup);
    store_group(row + t + kGroup, h, kGroup);
  }
  for (; t < visible; t += kGroup) {
    const int64_t count = std::min(kGroup, visible - t);
    Group g = load_group(row + t, count, lowest);
    for (vf& r : g.r) r = exp_v(r - max);
    sum.add(g);
    store_group(row + t, g, count);
  }
  const vd inv = vd{} + 1.0 / sum.total();
  // A row with no NaN score and a finite max has e in [0, 1] with one e = 1, so 1 <= sum <=
  // visible and every p is finite: its bf16 rounding needs no NaN select either.
  const bool finite = !nan_seen && max_x > lowest && max_x < std::numeric_limits<float>::infinity();
  // pass 3: p = fp32(e * (1/sum)) (the product in double), bf16(p) in bf16 mode
  for (int64_t t = 0; t < visible; t += kGroup) {
    const int64_t count = std::min(kGroup, visible - t);
    Group g = load_group(row + t, count, 0.0f);
    uint16_t tail_bits[kGroup];
    uint16_t* b = count == kGroup ? bits + t : tail_bits;
    for (int64_t k = 0; k < R; ++k) {
      vf p = narrow(widen_low(g.r[k]) * inv, widen_high(g.r[k]) * inv);
      if (precision == Precision::BF16) {
        const vu rounded = finite ? round_bf16_bits32_no_nan(p) : round_bf16_bits32(p);
        p = reinterpret_cast<vf>(rounded);
        if (bits != nullptr) store_bits(b + k * L, rounded);
      }
      g.r[k] = p;
    }
    if (probs != nullptr) store_group(probs + t, g, count);
    if (bits != nullptr && count < kGroup) std::memcpy(bits + t, tail_bits, static_cast<size_t>(count) * sizeof(uint16_t));
  }
  // masked keys: exactly 0
  if (probs != nullptr) std::fill(probs + visible, probs + width, 0.0f);
  if (bits != nullptr) std::fill(bits + visible, bits + width, uint16_t{0});
}

void from_bf16_bits(const uint16_t* bits, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    vh h;
    std::memcpy(&h, bits + i, sizeof h);
    store(y + i, reinterpret_cast<vf>(__builtin_convertvector(h, vu) << 16));
  }
  for (; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(y + i, &u, sizeof u);
  }
}

// mass[c0 + j] += the rows' values in ascending row order, columns in tiles that stay in L1.
template <typename Widen>
void add_rows(int64_t rows, int64_t cols, double* mass, Widen widen_row_tile) {
  constexpr int64_t kTile = 512;  // 4 KiB of mass
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const int64_t width = std::min(kTile, cols - c0);
    for (int64_t i = 0; i < rows; ++i) {
      float tile[kTile];
      const float* p = widen_row_tile(i, c0, width, tile);
      double* m = mass + c0;
      int64_t j = 0;
      for (; j + L <= width; j += L) {
        const vf v = load(p + j);
        vd lo, hi;
        std::memcpy(&lo, m + j, sizeof lo);
        std::memcpy(&hi, m + j + L / 2, sizeof hi);
        lo += widen_low(v);
        hi += widen_high(v);
        std::memcpy(m + j, &lo, sizeof lo);
        std::memcpy(m + j + L / 2, &hi, sizeof hi);
      }
      for (; j < width; ++j) m[j] += static_cast<double>(p[j]);
    }
  }
}

void add_rows_to_mass(const float* p, int64_t ld, int64_t rows, int64_t cols, double* mass) {
  add_rows(rows, cols, mass, [&](int64_t i, int64_t c0, int64_t, float*) { return p + i * ld + c0; });
}

void add_bits_to_mass(const uint16_t* bits, int64_t ld, int64_t rows, int64_t cols, double* mass) {
  add_rows(rows, cols, mass, [&](int64_t i, int64_t c0, int64_t width, float* tile) {
    from_bf16_bits(bits + i * ld + c0, width, tile);
    return static_cast<const float*>(tile);
  });
}

void round_bf16_n(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + L <= n; i += L) store(x + i, round_bf16(load(x + i)));
  for (; i < n; ++i) {
    float tmp[L] = {};
    tmp[0] = x[i];
    store(tmp, round_bf16(load(tmp)));
    x[i] = tmp[0];
  }
}

void to_bf16_bits(const float* x, int64_t n, uint16_t* bits) {
  int64_t i = 0;
  for (; i + L <= n; i += L) store_bits(bits + i, round_bf16_bits32(load(x + i)));
  for (; i < n; ++i) {
    float tmp[L] = {};
    tmp[0] = x[i];
    uint16_t b[L];
    store_bits(b, round_bf16_bits32(load(tmp)));
    bits[i] = b[0];
  }
}

}  // namespace

const VectorKernels& kernels(VectorIsa isa, const char* name) {
  static const VectorKernels k{isa,           name,           exp_n,          softmax_row,   add_rows_to_mass,
                               add_bits_to_mass, round_bf16_n, to_bf16_bits, from_bf16_bits};
  return k;
}

}  // namespace mla::cpu::MLA_VECTOR_NS
