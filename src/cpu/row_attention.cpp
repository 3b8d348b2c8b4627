// src/cpu/row_attention.cpp — one query row's attention over a list of positions
// (row_attention.hpp). AVX2+FMA and scalar paths compute the same fma chains.
//
// Shape legend: n heads, d_qk = d_n + d_r, d_v, m = positions attended.
#include "row_attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "cpu_kernels.hpp"
#include "fixed_order.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"

namespace mla::cpu {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

constexpr int64_t kKeyBlock = 8;  // keys whose chains run side by side

// The stored elements of a RowKeys: fp32 values, or bf16 bits widened exactly (bits << 16).
float widen(float v) { return v; }
float widen(uint16_t b) { return bf16::from_bits(b).to_float(); }
__attribute__((target("avx2,fma"))) __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma"))) __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// out[j*n + h] = dot(qT[:, h], key_j[:, h]) over d = 0..d_qk-1, for the keys of one block and
// heads [h0, h1).
template <class E>
void score_block_scalar(const float* qT, const E* const* keys, int64_t count, int64_t n, int64_t d_qk, int64_t h0,
                        int64_t h1, float* out) {
  for (int64_t j = 0; j < count; ++j)
    for (int64_t h = h0; h < h1; ++h) {
      float acc = 0.0f;
      for (int64_t d = 0; d < d_qk; ++d) acc = std::fma(qT[d * n + h], widen(keys[j][d * n + h]), acc);
      out[j * n + h] = acc;
    }
}

template <class E, int C>
__attribute__((target("avx2,fma"))) void score_block_avx2(const float* qT, const E* const* keys, int64_t n,
                                                         int64_t d_qk, int64_t h0, int64_t h1, float* out) {
  const int64_t vec_end = h0 + (h1 - h0) / 8 * 8;
  for (int64_t c = h0; c < vec_end; c += 8) {
    __m256 acc[C];
    for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t d = 0; d < d_qk; ++d) {
      const __m256 q = _mm256_loadu_ps(qT + d * n + c);
      for (int j = 0; j < C; ++j) acc[j] = _mm256_fmadd_ps(q, load8(keys[j] + d * n + c), acc[j]);
    }
    for (int j = 0; j < C; ++j) _mm256_storeu_ps(out + j * n + c, acc[j]);
  }
  if (vec_end < h1) score_block_scalar(qT, keys, C, n, d_qk, vec_end, h1, out);
}

// a block of `count` (1 .. kKeyBlock) keys
template <class E>
void score_block(bool avx2, const float* qT, const E* const* keys, int64_t count, int64_t n, int64_t d_qk, int64_t h0,
                 int64_t h1, float* out) {
  if (!avx2) return score_block_scalar(qT, keys, count, n, d_qk, h0, h1, out);
  switch (count) {
    case 1: return score_block_avx2<E, 1>(qT, keys, n, d_qk, h0, h1, out);
    case 2: return score_block_avx2<E, 2>(qT, keys, n, d_qk, h0, h1, out);
    case 3: return score_block_avx2<E, 3>(qT, keys, n, d_qk, h0, h1, out);
    case 4: return score_block_avx2<E, 4>(qT, keys, n, d_qk, h0, h1, out);
    case 5: return score_block_avx2<E, 5>(qT, keys, n, d_qk, h0, h1, out);
    case 6: return score_block_avx2<E, 6>(qT, keys, n, d_qk, h0, h1, out);
    case 7: return score_block_avx2<E, 7>(qT, keys, n, d_qk, h0, h1, out);
    default: return score_block_avx2<E, kKeyBlock>(qT, keys, n, d_qk, h0, h1, out);
  }
}

// out[d] = sum over j of p[j] * v_j[col + d] for d in [d0, d1), fma chains in j order.
template <class E>
void weighted_sum_scalar(const float* p, const E* const* values, int64_t m, int64_t col, int64_t d0, int64_t d1,
                         float* out) {
  for (int64_t d = d0; d < d1; ++d) {
    float acc = 0.0f;
    for (int64_t j = 0; j < m; ++j) acc = std::fma(p[j], widen(values[j][col + d]), acc);
    out[d] = acc;
  }
}

// The same chains for H heads side by side, 8 * R dims of each (H * R accumulators, named by the
// compiler's unrolling: H * R <= 12): head hh reads its probabilities at p + hh * m, its values
// at values[j] + col + hh * d_v, and writes out + hh * d_v. Each output's chain is the scalar
// one: only more of them run at once (the FMA latency hidden with few dims per head).
template <class E, int H, int R>
__attribute__((target("avx2,fma"))) void weighted_sum_tile_avx2(const float* p, const E* const* values, int64_t m,
                                                               int64_t col, int64_t d_v, float* out) {
  static_assert(H * R <= 12);
  __m256 acc[H][R];
  for (int hh = 0; hh < H; ++hh)
    for (int r = 0; r < R; ++r) acc[hh][r] = _mm256_setzero_ps();
  for (int64_t j = 0; j < m; ++j) {
    const E* v = values[j] + col;
    for (int hh = 0; hh < H; ++hh) {
      const __m256 pj = _mm256_broadcast_ss(p + hh * m + j);
      for (int r = 0; r < R; ++r) acc[hh][r] = _mm256_fmadd_ps(pj, load8(v + hh * d_v + 8 * r), acc[hh][r]);
    }
  }
  for (int hh = 0; hh < H; ++hh)
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + hh * d_v + 8 * r, acc[hh][r]);
}

template <class E, int H>
void weighted_sum_tile(int64_t regs, const float* p, const E* const* values, int64_t m, int64_t col, int64_t d_v,
                       float* out) {
  switch (regs) {
    case 1: return weighted_sum_tile_avx2<E, H, 1>(p, values, m, col, d_v, out);
    case 2: return weighted_sum_tile_avx2<E, H, 2>(p, values, m, col, d_v, out);
    case 3: return weighted_sum_tile_avx2<E, H, 3>(p, values, m, col, d_v, out);
    case 4: return weighted_sum_tile_avx2<E, H, 4>(p, values, m, col, d_v, out);
    case 5: return weighted_sum_tile_avx2<E, H, 5>(p, values, m, col, d_v, out);
    default:
      if constexpr (H == 1) {
        if (regs == 6) return weighted_sum_tile_avx2<E, 1, 6>(p, values, m, col, d_v, out);
        if (regs == 7) return weighted_sum_tile_avx2<E, 1, 7>(p, values, m, col, d_v, out);
        return weighted_sum_tile_avx2<E, 1, 8>(p, values, m, col, d_v, out);
      } else {
        return weighted_sum_tile_avx2<E, H, 6>(p, values, m, col, d_v, out);
      }
  }
}

// ctx[h] = p_h . v_h for heads [h0, h1): p_h = probs + h * m, v_h = values[j] + h * d_v.
// Where a head's d_v is whole vectors of at most 6, heads go two at a time; else one head's
// dims 64 at a time; dims past the last whole vector by the scalar chains.
template <class E>
void weighted_sums(const float* probs, const E* const* values, int64_t m, int64_t d_v, int64_t h0, int64_t h1,
                   bool avx2, float* ctx) {
  const int64_t vec_dims = avx2 ? d_v / 8 * 8 : 0;
  int64_t h = h0;
  if (vec_dims == d_v && d_v <= 48)
    for (; h + 2 <= h1; h += 2) weighted_sum_tile<E, 2>(d_v / 8, probs + h * m, values, m, h * d_v, d_v, ctx + h * d_v);
  for (; h < h1; ++h) {
    for (int64_t c = 0; c < vec_dims; c += 64)
      weighted_sum_tile<E, 1>(std::min<int64_t>(64, vec_dims - c) / 8, probs + h * m, values, m, h * d_v + c, d_v,
                              ctx + h * d_v + c);
    weighted_sum_scalar(probs + h * m, values, m, h * d_v, vec_dims, d_v, ctx + h * d_v);
  }
}

// A PrecisionMatrix's elements as E (float: fp32 run, uint16_t: bf16 bits), and the rows of a
// RowKeys through them.
template <class E>
const E* stored(const PrecisionMatrix& m);
template <>
const float* stored<float>(const PrecisionMatrix& m) { return m.values(); }
template <>
const uint16_t* stored<uint16_t>(const PrecisionMatrix& m) { return m.bits(); }
template <class E>
const E* key_row(const RowKeys& k, int64_t t) { return stored<E>(k.key) + k.key_offset(t); }
template <class E>
const E* value_row(const RowKeys& k, int64_t t) { return stored<E>(k.value) + k.value_offset(t); }

template <class E>
std::vector<const E*>& value_rows(RowScratch& s);
template <>
std::vector<const float*>& value_rows<float>(RowScratch& s) { return s.value_rows; }
template <>
std::vector<const uint16_t*>& value_rows<uint16_t>(RowScratch& s) { return s.value_rows_bf16; }

template <class E>
void attend_row_heads(const RowAttentionSpec& spec, const float* query, const KeyView& keys,
                      std::span<const int64_t> positions, float* probs, float* ctx, RowScratch& scratch, int64_t h0,
                      int64_t h1) {
  const RowKeys& shape = *keys.low;
  const int64_t n = shape.n, d_qk = shape.d_qk(), d_v = shape.d_v, m = static_cast<int64_t>(positions.size());
  const bool avx2 = fixed_order_avx2();
  const Precision precision = spec.precision;
  // query_states of heads [h0, h1) transposed to [d_qk][n], as the keys are held
  scratch.query.resize(idx(d_qk * n));
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t d = 0; d < d_qk; ++d) scratch.query[idx(d * n + h)] = query[h * d_qk + d];
  // 1. scores, key-major [m][n] (columns [h0, h1))
  scratch.scores.resize(idx(m * n));
  for (int64_t j0 = 0; j0 < m; j0 += kKeyBlock) {
    const int64_t count = std::min(kKeyBlock, m - j0);
    const E* block[kKeyBlock];
    for (int64_t j = 0; j < count; ++j) {
      const int64_t t = positions[idx(j0 + j)];
      block[j] = key_row<E>(keys.at(t), t);
    }
    score_block(avx2, scratch.query.data(), block, count, n, d_qk, h0, h1, scratch.scores.data() + j0 * n);
  }
  // 2. per head: scale (§7 #10, #11), softmax (§7 #13)
  scratch.e.resize(idx(m));
  for (int64_t h = h0; h < h1; ++h) {
    float* p = probs + h * m;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < m; ++j) {
      float s = scratch.scores[idx(j * n + h)];
      s = rounded(precision, rounded(precision, s) * spec.scaling);
      p[j] = s;
      max = std::max(max, s);
    }
    for (int64_t j = 0; j < m; ++j) p[j] = p[j] - max;
    exp_lanes(p, scratch.e.data(), m);
    const float sum = sum_lanes(scratch.e.data(), m);
    for (int64_t j = 0; j < m; ++j) {
      const float v = scratch.e[idx(j)] / sum;
      p[j] = rounded(precision, v);
    }
  }
  // 3. ctx[h] = p_h . v_h (§7 #14)
  std::vector<const E*>& values = value_rows<E>(scratch);
  values.resize(idx(m));
  for (int64_t j = 0; j < m; ++j) values[idx(j)] = value_row<E>(keys.at(positions[idx(j)]), positions[idx(j)]);
  weighted_sums(probs, values.data(), m, d_v, h0, h1, avx2, ctx);
  if (precision == Precision::BF16)
    for (int64_t d = h0 * d_v; d < h1 * d_v; ++d) ctx[d] = round_to_bf16(ctx[d]);
}

}  // namespace

void RowKeys::reset(int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, int64_t first_position, int64_t count,
                    Precision precision) {
  n = heads;
  d_n = nope;
  d_r = rope;
  d_v = v_dim;
  first = first_position;
  rows = count;
  key = PrecisionMatrix(count, d_qk() * n, precision);
  value = PrecisionMatrix(count, n * d_v, precision);
}

void RowKeys::set_rows(int64_t t0, int64_t count, const float* kv, int64_t ld_kv, const float* k_pe, int64_t ld_pe) {
  const int64_t w = d_n + d_v, dq = d_qk();
  std::vector<float> k(idx(dq * n)), v(idx(n * d_v));  // one position in the kernel's layout
  for (int64_t i = 0; i < count; ++i) {
    const float* row = kv + i * ld_kv;
    for (int64_t h = 0; h < n; ++h) {
      for (int64_t d = 0; d < d_n; ++d) k[idx(d * n + h)] = row[h * w + d];
      for (int64_t d = 0; d < d_v; ++d) v[idx(h * d_v + d)] = row[h * w + d_n + d];
    }
    for (int64_t d = 0; d < d_r; ++d)
      for (int64_t h = 0; h < n; ++h) k[idx((d_n + d) * n + h)] = k_pe[i * ld_pe + d];  // one k_pe for every head
    key.set_rows(t0 + i - first, 1, k.data(), dq * n);
    value.set_rows(t0 + i - first, 1, v.data(), n * d_v);
  }
}

void attend_row(const RowAttentionSpec& spec, const float* query, const KeyView& keys, std::span<const int64_t> positions,
                float* probs, float* ctx, RowScratch& scratch, int64_t h0, int64_t h1) {
  if (h1 < 0) h1 = keys.low->n;
  if (keys.high && keys.high->precision() != keys.low->precision())
    fail(ErrorKind::InvalidArgument, "attend_row: the two key stores hold different precisions");
  if (keys.low->precision() == Precision::BF16)
    attend_row_heads<uint16_t>(spec, query, keys, positions, probs, ctx, scratch, h0, h1);
  else
    attend_row_heads<float>(spec, query, keys, positions, probs, ctx, scratch, h0, h1);
}

void attend_row_split(const RowAttentionSpec& spec, int threads, const float* query, const KeyView& keys,
                      std::span<const int64_t> positions, float* probs, float* ctx, std::span<RowScratch> scratch) {
  const int64_t n = keys.low->n, parts = std::clamp<int64_t>(threads, 1, static_cast<int64_t>(scratch.size()));
  const int64_t chunk = ((n + parts - 1) / parts + 7) / 8 * 8;  // heads a worker takes, a multiple of 8
  parallel_for((n + chunk - 1) / chunk, static_cast<int>(parts), [&](int64_t c, int worker) {
    attend_row(spec, query, keys, positions, probs, ctx, scratch[idx(worker)], c * chunk, std::min(n, (c + 1) * chunk));
  });
}

void attend_causal(const RowAttentionSpec& spec, int threads, const float* q, int64_t ld_q, int64_t row_begin,
                   int64_t row_end, const KeyView& keys, float* ctx, double* head_mass, int64_t key_rows) {
  const int64_t n = keys.low->n, d_v = keys.low->d_v, rows = row_end - row_begin;
  // fixed chunks of rows: each chunk sums its rows' probabilities in row order, then the chunks
  // are added in order (the same bits for any number of threads)
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  std::vector<std::vector<double>> partial(head_mass ? idx(chunks) : 0);  // [chunk][n*key_rows]
  std::vector<RowScratch> scratch(idx(threads));
  std::vector<std::vector<float>> probs(idx(threads));        // [worker][n*(s+1)]
  std::vector<std::vector<int64_t>> positions(idx(threads));  // [worker][s+1]
  parallel_for(chunks, threads, [&](int64_t c, int worker) {
    std::vector<int64_t>& pos = positions[idx(worker)];
    std::vector<float>& p = probs[idx(worker)];
    if (head_mass) partial[idx(c)].assign(idx(n * key_rows), 0.0);
    for (int64_t s = row_begin + c * kChunk; s < std::min(row_end, row_begin + (c + 1) * kChunk); ++s) {
      pos.resize(idx(s + 1));
      std::iota(pos.begin(), pos.end(), 0);
      p.resize(idx(n * (s + 1)));
      attend_row(spec, q + (s - row_begin) * ld_q, keys, pos, p.data(), ctx + (s - row_begin) * n * d_v,
                 scratch[idx(worker)]);
      if (head_mass) {
        std::vector<double>& part = partial[idx(c)];
        for (int64_t h = 0; h < n; ++h)
          for (int64_t t = 0; t <= s; ++t) part[idx(h * key_rows + t)] += static_cast<double>(p[idx(h * (s + 1) + t)]);
      }
    }
  });
  for (const std::vector<double>& part : partial)
    for (size_t i = 0; i < part.size(); ++i) head_mass[i] += part[i];
}

}  // namespace mla::cpu
