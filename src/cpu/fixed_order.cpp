// src/cpu/fixed_order.cpp — the fixed-order kernels (fixed_order.hpp): the GEMM of the
// whole-model forward, exp and the lane sum of its softmax. Each has an AVX-512, an AVX2+FMA and
// a scalar path that compute the same operations on the same operands in the same order, so the
// three give the same bits; the path is chosen once at run time.
//
// GEMM: W [out, in] is packed in panels of 16 outputs, [panel][k][16]; a micro-kernel keeps
// R rows x 16 or 32 outputs in registers (AVX-512: 8 x 32, AVX2: 6 x 16, scalar: 4 x 32), each
// accumulator one output's fma chain over k.
//
// bf16 (docs/cpu-gemm.md §11): the pair chain, AVX512-BF16's `vdpbf16ps` as the hardware computes
// it (measured bit for bit on 32 million lanes, subnormals included, on a Zen 4):
//
//   acc = ftz(fma(x[k+1], w[k+1], acc));  acc = ftz(fma(x[k], w[k], acc))   for k = 0, 2, 4, ...
//
// with x and w rounded to bf16 and their subnormals read as zero (DAZ), every result's flushed
// to zero (FTZ), the odd element of a pair before the even one, and an odd last element alone.
// On AVX512-BF16 one `vdpbf16ps` does both steps for 16 outputs (W packed as [panel][k/2][16][2]
// bf16); elsewhere the fp32 kernels run the same steps in the same order under MXCSR's FTZ and
// DAZ (the scalar path flushes by hand), so every CPU gives the same bits.
//
// Shape legend: S = rows, in = K, out = N.
#include "fixed_order.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "cpu_kernels.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"

namespace mla::cpu {
namespace {

constexpr int64_t kPanel = 16;      // outputs per packed panel
constexpr int64_t kRowTileMax = 8;  // rows per micro-kernel call, at most (row_tile())
constexpr int64_t kRowTileAvx2 = 6;  // AVX2: 6 rows x 16 outputs = 12 of the 16 ymm registers
constexpr int64_t kKBlock = 256;    // in-features per block: 2 panels x 256 x 64 B = 32 KB of weights in L1
constexpr int64_t kRowChunk = 64;   // rows per parallel work item
constexpr int64_t kPanelChunk = 4;  // panels per parallel work item (64 outputs)

// Best first. Avx512Bf16: the fp32 kernels run as Avx512, the bf16 pair chains on vdpbf16ps.
enum class Isa { Avx512Bf16, Avx512, Avx2, Scalar };

Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) return Isa::Avx512Bf16;
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Scalar;
}

std::atomic<Isa>& chosen_isa() {
  static std::atomic<Isa> i{detect_isa()};
  return i;
}

Isa isa() { return chosen_isa().load(std::memory_order_relaxed); }
bool avx512() { return isa() == Isa::Avx512 || isa() == Isa::Avx512Bf16; }

// DAZ and FTZ of the pair chain on one value: a subnormal is read (and written) as a zero of
// its sign.
inline float flush(float v) {
  return (std::bit_cast<uint32_t>(v) & 0x7F800000u) == 0 ? std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0x80000000u) : v;
}
// x as the pair chain reads it: rounded to bf16 (nearest even), a subnormal read as zero.
inline uint16_t pair_operand_bits(float x) {
  const uint16_t b = bf16::round_bits(x);
  return (b & 0x7F80u) == 0 ? static_cast<uint16_t>(b & 0x8000u) : b;
}
inline float pair_operand(float x) { return bf16::from_bits(pair_operand_bits(x)).to_float(); }

// MXCSR with FTZ (bit 15) and DAZ (bit 6) set while it lives: the SIMD fp32 kernels then compute
// the pair chain's flushes (the thread's own register: set on each worker, restored after).
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_;
};

// ---- GEMM micro-kernels: y[r, 0..16*P) for R rows, P panels, in-features [k0, k1) --------
// x: rows at x + r*ld_x; w: P panels of [K][16] at w + p*K*16; the accumulators live in
// out[r*ld_out + p*16 + j]: started at +0 when k0 == 0, else reloaded, so that a chain cut into
// blocks of in-features is the same chain, fma after fma in k order (an fp32 store and load is
// exact). Blocking k keeps a block of the weights in L1 while every row tile reads it.

// Pairs: the pair chain's order (k+1, then k, for each even k; k0 is even) and its flushes (x and
// w were flushed when they were copied and packed, so only each result is flushed here).
template <int R, int P, bool Pairs = false>
void micro_scalar(const float* x, int64_t ld_x, const float* w, int64_t K, int64_t k0, int64_t k1, float* out,
                  int64_t ld_out) {
  float acc[R][P * kPanel];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < P * kPanel; ++j) acc[r][j] = k0 == 0 ? 0.0f : out[r * ld_out + j];
  const auto step = [&](int64_t k) {
    for (int p = 0; p < P; ++p) {
      const float* wk = w + (p * K + k) * kPanel;
      for (int r = 0; r < R; ++r) {
        const float xv = x[r * ld_x + k];
        for (int j = 0; j < kPanel; ++j) {
          float& a = acc[r][p * kPanel + j];
          a = Pairs ? flush(std::fma(xv, wk[j], a)) : std::fma(xv, wk[j], a);
        }
      }
    }
  };
  if constexpr (Pairs) {
    for (int64_t k = k0; k < k1; k += 2) {
      if (k + 1 < k1) step(k + 1);
      step(k);
    }
  } else {
    for (int64_t k = k0; k < k1; ++k) step(k);
  }
  for (int r = 0; r < R; ++r) std::memcpy(out + r * ld_out, acc[r], sizeof(acc[r]));
}

// AVX2: R <= 6 rows x one panel (16 outputs). The 2R accumulators are named variables: as an
// array of 4 rows x 2 panels (16 accumulators, all 16 ymm registers) GCC 12 stored every
// accumulator to the stack on every k, which ran at less than half this kernel's rate
// (docs/cpu-gemm.md §4). Per k: 2 weight loads, R broadcasts, 2R fma.
template <int R, bool Pairs>
__attribute__((target("avx2,fma"))) void micro_avx2(const float* x, int64_t ld_x, const float* w, int64_t k0, int64_t k1,
                                                   float* out, int64_t ld_out) {
  static_assert(R >= 1 && R <= kRowTileAvx2);
  const __m256 zero = _mm256_setzero_ps();
  __m256 a0 = zero, b0 = zero, a1 = zero, b1 = zero, a2 = zero, b2 = zero, a3 = zero, b3 = zero, a4 = zero, b4 = zero,
         a5 = zero, b5 = zero;
#define MLA_AVX2_LOAD(r)                                \
  if constexpr (R > r)                                  \
    if (k0 > 0) {                                       \
      a##r = _mm256_loadu_ps(out + r * ld_out);         \
      b##r = _mm256_loadu_ps(out + r * ld_out + 8);     \
    }
#define MLA_AVX2_STEP(r)                                      \
  if constexpr (R > r) {                                      \
    const __m256 xv = _mm256_broadcast_ss(x + r * ld_x + k);  \
    a##r = _mm256_fmadd_ps(xv, w0, a##r);                     \
    b##r = _mm256_fmadd_ps(xv, w1, b##r);                     \
  }
#define MLA_AVX2_STORE(r)                          \
  if constexpr (R > r) {                           \
    _mm256_storeu_ps(out + r * ld_out, a##r);      \
    _mm256_storeu_ps(out + r * ld_out + 8, b##r);  \
  }
#define MLA_AVX2_K(kk)                                                                             \
  {                                                                                                \
    const int64_t k = kk;                                                                          \
    const __m256 w0 = _mm256_loadu_ps(w + k * kPanel), w1 = _mm256_loadu_ps(w + k * kPanel + 8);   \
    MLA_AVX2_STEP(0) MLA_AVX2_STEP(1) MLA_AVX2_STEP(2) MLA_AVX2_STEP(3) MLA_AVX2_STEP(4) MLA_AVX2_STEP(5) \
  }
  MLA_AVX2_LOAD(0) MLA_AVX2_LOAD(1) MLA_AVX2_LOAD(2) MLA_AVX2_LOAD(3) MLA_AVX2_LOAD(4) MLA_AVX2_LOAD(5)
  if constexpr (Pairs) {  // the pair chain's order; its flushes are MXCSR's (FlushDenormals)
    for (int64_t k2 = k0; k2 < k1; k2 += 2) {
      if (k2 + 1 < k1) MLA_AVX2_K(k2 + 1)
      MLA_AVX2_K(k2)
    }
  } else {
    for (int64_t k2 = k0; k2 < k1; ++k2) MLA_AVX2_K(k2)
  }
  MLA_AVX2_STORE(0) MLA_AVX2_STORE(1) MLA_AVX2_STORE(2) MLA_AVX2_STORE(3) MLA_AVX2_STORE(4) MLA_AVX2_STORE(5)
#undef MLA_AVX2_K
#undef MLA_AVX2_LOAD
#undef MLA_AVX2_STEP
#undef MLA_AVX2_STORE
}

// rows: 1 .. kRowTileAvx2, one panel
template <bool Pairs>
void micro_avx2_rows(int64_t rows, const float* x, int64_t ld_x, const float* w, int64_t k0, int64_t k1, float* out,
                     int64_t ld_out) {
  switch (rows) {
    case 1: return micro_avx2<1, Pairs>(x, ld_x, w, k0, k1, out, ld_out);
    case 2: return micro_avx2<2, Pairs>(x, ld_x, w, k0, k1, out, ld_out);
    case 3: return micro_avx2<3, Pairs>(x, ld_x, w, k0, k1, out, ld_out);
    case 4: return micro_avx2<4, Pairs>(x, ld_x, w, k0, k1, out, ld_out);
    case 5: return micro_avx2<5, Pairs>(x, ld_x, w, k0, k1, out, ld_out);
    default: return micro_avx2<6, Pairs>(x, ld_x, w, k0, k1, out, ld_out);
  }
}

template <int R, int P>
__attribute__((target("avx512f"))) inline void avx512_step(const float* x, int64_t ld_x, const float* w, int64_t K,
                                                           int64_t k, __m512 (&acc)[R][P]) {
  __m512 wv[P];
  for (int p = 0; p < P; ++p) wv[p] = _mm512_loadu_ps(w + (p * K + k) * kPanel);
  for (int r = 0; r < R; ++r) {
    const __m512 xv = _mm512_set1_ps(x[r * ld_x + k]);
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
  }
}

template <int R, int P, bool Pairs = false>
__attribute__((target("avx512f"))) void micro_avx512(const float* x, int64_t ld_x, const float* w, int64_t K, int64_t k0,
                                                    int64_t k1, float* out, int64_t ld_out) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      acc[r][p] = k0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + r * ld_out + p * kPanel);
  if constexpr (Pairs) {  // the pair chain's order; its flushes are MXCSR's (FlushDenormals)
    for (int64_t k = k0; k < k1; k += 2) {
      if (k + 1 < k1) avx512_step<R, P>(x, ld_x, w, K, k + 1, acc);
      avx512_step<R, P>(x, ld_x, w, K, k, acc);
    }
  } else {
    for (int64_t k = k0; k < k1; ++k) avx512_step<R, P>(x, ld_x, w, K, k, acc);
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + r * ld_out + p * kPanel, acc[r][p]);
}

template <int R, int P, bool Pairs>  // AVX-512 or scalar (AVX2: micro_avx2_rows)
void micro(const float* x, int64_t ld_x, const float* w, int64_t K, int64_t k0, int64_t k1, float* out, int64_t ld_out) {
  if (avx512()) return micro_avx512<R, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
  return micro_scalar<R, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
}

// rows: 1 .. row_tile() (AVX-512's 32 registers hold 8 rows x 2 panels of accumulators)
template <int P, bool Pairs>
void micro_rows(int64_t rows, const float* x, int64_t ld_x, const float* w, int64_t K, int64_t k0, int64_t k1, float* out,
                int64_t ld_out) {
  switch (rows) {
    case 1: return micro<1, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    case 2: return micro<2, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    case 3: return micro<3, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    case 4: return micro<4, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    case 5: return micro<5, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    case 6: return micro<6, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    case 7: return micro<7, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
    default: return micro<8, P, Pairs>(x, ld_x, w, K, k0, k1, out, ld_out);
  }
}
int64_t row_tile() { return avx512() ? kRowTileMax : isa() == Isa::Avx2 ? kRowTileAvx2 : 4; }

// ---- the pair chain on vdpbf16ps: y[r, 0..16*P) for R rows, P panels, pairs [j0, j1) -------------
// x: bf16 bits, rows at x + r*ld_x (ld_x even), pair j = elements 2j, 2j+1; w: P panels of
// [K2][16][2] bf16 at w + p*K2*32; the accumulators in out as micro_avx512's. Lane l of one
// vdpbf16ps: acc = ftz(ftz(acc + x[2j+1] w_l[2j+1]) + x[2j] w_l[2j]), each product exact.
template <int R, int P>
__attribute__((target("avx512f,avx512bf16"))) void micro_dpbf16(const uint16_t* x, int64_t ld_x, const uint16_t* w,
                                                                int64_t K2, int64_t j0, int64_t j1, float* out,
                                                                int64_t ld_out) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      acc[r][p] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + r * ld_out + p * kPanel);
  for (int64_t j = j0; j < j1; ++j) {
    __m512i wv[P];
    for (int p = 0; p < P; ++p) wv[p] = _mm512_loadu_si512(w + (p * K2 + j) * 2 * kPanel);
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, x + r * ld_x + 2 * j, sizeof pair);
      const __m512i xv = _mm512_set1_epi32(static_cast<int>(pair));
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)xv, (__m512bh)wv[p]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + r * ld_out + p * kPanel, acc[r][p]);
}

template <int P>
void micro_dpbf16_rows(int64_t rows, const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t K2, int64_t j0,
                       int64_t j1, float* out, int64_t ld_out) {
  switch (rows) {
    case 1: return micro_dpbf16<1, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    case 2: return micro_dpbf16<2, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    case 3: return micro_dpbf16<3, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    case 4: return micro_dpbf16<4, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    case 5: return micro_dpbf16<5, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    case 6: return micro_dpbf16<6, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    case 7: return micro_dpbf16<7, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
    default: return micro_dpbf16<8, P>(x, ld_x, w, K2, j0, j1, out, ld_out);
  }
}

// ---- exp and the lane sum ---------------------------------------------------------------------
// exp(x) = p(r) * 2^n, n = nearest(x * log2 e), r = x - n ln2 (two fma steps, Cody-Waite),
// p = the degree-7 Taylor polynomial of exp on |r| <= ln2/2 (truncation < 2^-27), Horner in fma.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;       // 12 significant bits: n * kLn2Hi is exact
constexpr float kLn2Lo = 1.42860682030941723e-06f;  // ln 2 - kLn2Hi
constexpr float kExpMin = -87.33654475f;            // below: exp underflows the normal range -> 0
constexpr float kC[8] = {1.0f, 1.0f, 0.5f, 1.66666672e-01f, 4.16666679e-02f, 8.33333377e-03f, 1.38888892e-03f,
                         1.98412701e-04f};

float exp_scalar(float x) {
  if (!(x >= kExpMin)) return 0.0f;  // (and -inf) before the float -> int conversion
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kC[7];
  for (int i = 6; i >= 0; --i) p = std::fma(p, r, kC[i]);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * scale;
}

__attribute__((target("avx512f"))) void exp_avx512(const float* x, float* e, int64_t count) {
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = count - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (count - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    // (the mask forms with an explicit source: GCC 12 warns on the plain forms' undefined source)
    const __m512 zero = _mm512_setzero_ps();
    const __m512i zero_i = _mm512_setzero_si512();
    const __m512 n = _mm512_mask_roundscale_ps(zero, 0xFFFF, _mm512_mul_ps(xv, _mm512_set1_ps(kLog2e)),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), xv);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kC[7]);
    for (int c = 6; c >= 0; --c) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC[c]));
    const __m512i bits = _mm512_mask_slli_epi32(
        zero_i, 0xFFFF, _mm512_add_epi32(_mm512_mask_cvtps_epi32(zero_i, 0xFFFF, n), _mm512_set1_epi32(127)), 23);
    __m512 out = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    const __mmask16 under = _mm512_cmp_ps_mask(xv, _mm512_set1_ps(kExpMin), _CMP_LT_OQ);
    out = _mm512_mask_mov_ps(out, under, zero);
    _mm512_mask_storeu_ps(e + i, m, out);
  }
}

__attribute__((target("avx2,fma"))) void exp_avx2(const float* x, float* e, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xv, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), xv);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kC[7]);
    for (int c = 6; c >= 0; --c) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC[c]));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 out = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    out = _mm256_blendv_ps(out, _mm256_setzero_ps(), _mm256_cmp_ps(xv, _mm256_set1_ps(kExpMin), _CMP_LT_OQ));
    _mm256_storeu_ps(e + i, out);
  }
  for (; i < count; ++i) e[i] = exp_scalar(x[i]);
}

// 16 lanes: lane l holds sum of x[j] over j = l (mod 16), in j order; missing elements add +0.
float reduce_lanes(const float* l) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

float sum_scalar(const float* x, int64_t count) {
  float lanes[16] = {};
  for (int64_t i = 0; i < count; i += 16)
    for (int64_t j = 0; j < 16; ++j) lanes[j] = lanes[j] + (i + j < count ? x[i + j] : 0.0f);
  return reduce_lanes(lanes);
}

__attribute__((target("avx512f"))) float sum_avx512(const float* x, int64_t count) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = count - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (count - i)) - 1);
    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, x + i));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  return reduce_lanes(lanes);
}

}  // namespace

const char* fixed_order_isa() {
  switch (isa()) {
    case Isa::Avx512Bf16:
    case Isa::Avx512: return "avx512f";
    case Isa::Avx2: return "avx2+fma";
    case Isa::Scalar: return "scalar std::fma";
  }
  return "?";
}

bool fixed_order_avx2() { return isa() != Isa::Scalar; }

const char* fixed_order_pair_kernel() {
  switch (isa()) {
    case Isa::Avx512Bf16: return "vdpbf16ps";
    case Isa::Avx512: return "avx512f, FTZ+DAZ";
    case Isa::Avx2: return "avx2+fma, FTZ+DAZ";
    case Isa::Scalar: return "scalar std::fma, flushed";
  }
  return "?";
}

std::string fixed_order_engine_name(Precision precision) {
  if (precision == Precision::BF16) return std::string("fixed-order bf16 pair chains (") + fixed_order_pair_kernel() + ")";
  return std::string("fixed-order fp32 FMA chains (") + fixed_order_isa() + ")";
}

bool set_fixed_order_isa(const std::string& name) {
  const Isa best = detect_isa();
  Isa want;
  if (name == "avx512bf16") want = Isa::Avx512Bf16;
  else if (name == "avx512f") want = Isa::Avx512;
  else if (name == "avx2+fma") want = Isa::Avx2;
  else if (name == "scalar") want = Isa::Scalar;
  else return false;
  if (static_cast<int>(want) < static_cast<int>(best)) return false;  // not on this CPU
  chosen_isa().store(want);
  return true;
}

float exp_fixed(float x) { return exp_scalar(x); }

void exp_lanes(const float* x, float* e, int64_t count) {
  switch (isa()) {
    case Isa::Avx512Bf16:
    case Isa::Avx512: return exp_avx512(x, e, count);
    case Isa::Avx2: return exp_avx2(x, e, count);
    case Isa::Scalar:
      for (int64_t i = 0; i < count; ++i) e[i] = exp_scalar(x[i]);
      return;
  }
}

float sum_lanes(const float* x, int64_t count) {
  return avx512() ? sum_avx512(x, count) : sum_scalar(x, count);
}

// ---- the engine --------------------------------------------------------------------------------

FixedOrderLinear::FixedOrderLinear(const float* w, int64_t out, int64_t in, const float* bias, Precision precision,
                                   int threads)
    : out_(out), in_(in), panels_((out + kPanel - 1) / kPanel), precision_(precision) {
  if (precision == Precision::BF16) {
    pairs_ = true;
    native_pairs_ = isa() == Isa::Avx512Bf16;
  }
  if (native_pairs_) {
    pack_pairs(w, threads);
  } else {
    pack_panels(w, threads);
  }
  if (bias != nullptr) {
    bias_.assign(bias, bias + out);
    round_inplace(precision, bias_.data(), out);
  }
}

// panel p = [K2][16][2]: lane l of pair j holds w[p*16 + l, 2j] and w[p*16 + l, 2j + 1] as the
// pair chain reads them (zeros past `out` and past `in`).
void FixedOrderLinear::pack_pairs(const float* w, int threads) {
  const int64_t K2 = (in_ + 1) / 2;
  packed_pairs_ = std::make_unique_for_overwrite<uint16_t[]>(static_cast<size_t>(panels_ * K2 * 2 * kPanel));
  parallel_for(panels_, threads, [&](int64_t p, int) {
    uint16_t* dst = packed_pairs_.get() + p * K2 * 2 * kPanel;
    const int64_t rows = std::min(kPanel, out_ - p * kPanel);
    for (int64_t j = 0; j < K2; ++j)
      for (int64_t l = 0; l < kPanel; ++l)
        for (int64_t e = 0; e < 2; ++e) {
          const int64_t k = 2 * j + e;
          dst[(j * kPanel + l) * 2 + e] = l < rows && k < in_ ? pair_operand_bits(w[(p * kPanel + l) * in_ + k]) : 0;
        }
  });
}

void FixedOrderLinear::pack_panels(const float* w, int threads) {
  const int64_t out = out_, in = in_;
  const Precision precision = precision_;
  packed_ = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(panels_ * in * kPanel));
  // panel p = [k][16] from the 16 rows p*16 .. p*16+15 of w (zeros past `out`), through a tile
  // of kTile features: each row's run copied and rounded as a vector, then transposed in cache
  constexpr int64_t kTile = 64;
  parallel_for(panels_, threads, [&](int64_t p, int) {
    float tile[kPanel * kTile];  // [16][kTile]
    float* dst = packed_.get() + p * in * kPanel;
    const int64_t rows = std::min(kPanel, out - p * kPanel);
    const float* src = w + p * kPanel * in;
    for (int64_t k0 = 0; k0 < in; k0 += kTile) {
      const int64_t width = std::min(kTile, in - k0);
      for (int64_t j = 0; j < kPanel; ++j) {
        if (j < rows) std::copy_n(src + j * in + k0, width, tile + j * kTile);
        else std::fill_n(tile + j * kTile, width, 0.0f);
        round_inplace(precision, tile + j * kTile, width);
        if (pairs_)
          for (int64_t k = 0; k < width; ++k) tile[j * kTile + k] = flush(tile[j * kTile + k]);
      }
      for (int64_t k = 0; k < width; ++k, dst += kPanel)
        for (int64_t j = 0; j < kPanel; ++j) dst[j] = tile[j * kTile + k];
    }
  });
}

std::string FixedOrderLinear::kernel() const {
  if (native_pairs_) return "fixed-order bf16 pairs, vdpbf16ps";
  if (pairs_) return std::string("fixed-order bf16 pairs, ") + fixed_order_isa() + " FTZ+DAZ";
  return std::string("fixed-order fma, ") + fixed_order_isa();
}

void FixedOrderLinear::run(const MatrixRM& x, int threads, MatrixRM& y) {
  if (x.cols() != in_)
    fail(ErrorKind::Shape, "fixed-order linear: input has " + std::to_string(x.cols()) + " features, weight expects " +
                               std::to_string(in_));
  y.resize(x.rows(), out_);
  run_rows(x.data(), x.rows(), in_, y.data(), out_, threads);
}

std::vector<int64_t> FixedOrderLinear::slice_bounds() const { return fixed_width_bounds(out_, kPanel); }

void FixedOrderLinear::run_rows(const float* x, int64_t rows, int64_t ld_x, float* y, int64_t ld_y, int threads) const {
  const int64_t row_chunks = (rows + kRowChunk - 1) / kRowChunk, panel_chunks = (panels_ + kPanelChunk - 1) / kPanelChunk;
  parallel_for(row_chunks * panel_chunks, threads, [&](int64_t item, int) {
    const int64_t r0 = (item / panel_chunks) * kRowChunk, r1 = std::min(rows, r0 + kRowChunk);
    const int64_t p0 = (item % panel_chunks) * kPanelChunk, p1 = std::min(panels_, p0 + kPanelChunk);
    constexpr int64_t ld = kPanelChunk * kPanel;
    float acc[kRowChunk * ld];  // [r - r0][o - 16*p0] the chains of this item's rows and outputs
    if (native_pairs_) pair_chains_native(x, ld_x, r0, r1, p0, p1, acc, ld);
    else if (pairs_) pair_chains_emulated(x, ld_x, r0, r1, p0, p1, acc, ld);
    else fma_chains(x, ld_x, r0, r1, p0, p1, acc, ld);
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = y + r * ld_y;
      for (int64_t o = p0 * kPanel; o < std::min(out_, p1 * kPanel); ++o) {
        float v = acc[(r - r0) * ld + (o - p0 * kPanel)];
        if (!bias_.empty()) v = v + bias_[static_cast<size_t>(o)];
        dst[o] = rounded(precision_, v);
      }
    }
  });
}


// acc[(r - r0) * ld + o - 16 p0] = the fma chain of row r, output o, for rows [r0, r1) and
// panels [p0, p1); `x` as given (fp32, or bf16 values in bf16).
void FixedOrderLinear::fma_chains(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                                  float* acc, int64_t ld) const {
  chains<false>(x, ld_x, r0, r1, p0, p1, acc, ld);
}

template <bool Pairs>
void FixedOrderLinear::chains(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1, float* acc,
                              int64_t ld) const {
  const int64_t tile = row_tile();
  const bool avx2 = isa() == Isa::Avx2;
  const int64_t panel_step = avx2 ? 1 : 2;
  for (int64_t k0 = 0; k0 < in_; k0 += kKBlock) {  // (kKBlock is even: a pair never straddles blocks)
    const int64_t k1 = std::min(in_, k0 + kKBlock);
    for (int64_t p = p0; p < p1; p += panel_step) {
      const int64_t P = std::min(panel_step, p1 - p);
      const float* w = packed_.get() + p * in_ * kPanel;
      for (int64_t r = r0; r < r1; r += tile) {
        const int64_t R = std::min(tile, r1 - r);
        float* out = acc + (r - r0) * ld + (p - p0) * kPanel;
        if (avx2) micro_avx2_rows<Pairs>(R, x + r * ld_x, ld_x, w, k0, k1, out, ld);
        else if (P == 2) micro_rows<2, Pairs>(R, x + r * ld_x, ld_x, w, in_, k0, k1, out, ld);
        else micro_rows<1, Pairs>(R, x + r * ld_x, ld_x, w, in_, k0, k1, out, ld);
      }
    }
  }
}

// The pair chain on the fp32 kernels: rows [r0, r1) of x as the chain reads them (bf16, flushed)
// into this worker's copy, then the chains in pair order under FTZ+DAZ.
void FixedOrderLinear::pair_chains_emulated(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                                            float* acc, int64_t ld) const {
  thread_local std::vector<float> copy;
  copy.resize(static_cast<size_t>((r1 - r0) * in_));
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t k = 0; k < in_; ++k) copy[static_cast<size_t>((r - r0) * in_ + k)] = pair_operand(x[r * ld_x + k]);
  const FlushDenormals flushes;
  chains<true>(copy.data() - r0 * in_, in_, r0, r1, p0, p1, acc, ld);
}

// The pair chain on vdpbf16ps: rows [r0, r1) of x as bf16 bits (an odd `in` padded with a zero)
// into this worker's copy, then the pairs in blocks of kKBlock / 2.
void FixedOrderLinear::pair_chains_native(const float* x, int64_t ld_x, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                                          float* acc, int64_t ld) const {
  const int64_t K2 = (in_ + 1) / 2, ld_b = 2 * K2;
  thread_local std::vector<uint16_t> copy;
  copy.resize(static_cast<size_t>((r1 - r0) * ld_b));
  for (int64_t r = r0; r < r1; ++r) {
    uint16_t* dst = copy.data() + (r - r0) * ld_b;
    for (int64_t k = 0; k < in_; ++k) dst[k] = pair_operand_bits(x[r * ld_x + k]);
    if (ld_b > in_) dst[in_] = 0;
  }
  for (int64_t j0 = 0; j0 < K2; j0 += kKBlock / 2) {
    const int64_t j1 = std::min(K2, j0 + kKBlock / 2);
    for (int64_t p = p0; p < p1; p += 2) {
      const int64_t P = std::min<int64_t>(2, p1 - p);
      const uint16_t* w = packed_pairs_.get() + p * K2 * 2 * kPanel;
      for (int64_t r = r0; r < r1; r += kRowTileMax) {
        const int64_t R = std::min(kRowTileMax, r1 - r);
        float* out = acc + (r - r0) * ld + (p - p0) * kPanel;
        const uint16_t* xr = copy.data() + (r - r0) * ld_b;
        if (P == 2) micro_dpbf16_rows<2>(R, xr, ld_b, w, K2, j0, j1, out, ld);
        else micro_dpbf16_rows<1>(R, xr, ld_b, w, K2, j0, j1, out, ld);
      }
    }
  }
}

namespace {

class FixedOrderEngine final : public GemmEngine {
 public:
  Gemm kind() const override { return Gemm::Auto; }
  std::string name() const override { return "fixed-order chains (fp32 FMA, bf16 pairs)"; }
  std::string kernel() const override { return std::string("fixed-order fma, ") + fixed_order_isa(); }
  // (gemm_engine.hpp's interface takes a bool for now)
  std::unique_ptr<PreparedLinear> prepare(const LinearWeight& w, bool bf16, int threads) override {
    return std::make_unique<FixedOrderLinear>(w.weight, w.out_features, w.in_features, w.bias,
                                              bf16 ? Precision::BF16 : Precision::FP32, threads);
  }
  GemmHoldings holdings() const override { return {}; }
};

}  // namespace

std::unique_ptr<GemmEngine> make_fixed_order_engine() { return std::make_unique<FixedOrderEngine>(); }

}  // namespace mla::cpu
