// cuda/launch_geometry.hpp — how many blocks and threads each hand-written kernel gets.
//
// Plain C++ (no CUDA headers): the .cu launchers and the host unit tests (suite cuda_host)
// include the same arithmetic, so the launch shapes are tested on machines without a GPU.
//
// Shape legend: n = num_attention_heads, S = new tokens (= T keys: no cache),
//   d_qk = qk_nope_head_dim + qk_rope_head_dim, d_v = v_head_dim,
//   rows = number of independent vectors a row kernel processes (e.g. S RMSNorm rows).
//
// Kernels come in three shapes:
//   * elementwise: one thread per output element, grid-stride loop over `count` elements;
//   * row: one block per row (RMSNorm over S rows); the block's threads stride over the row and
//     reduce with a fixed tree, so the summation order depends only on the block size, which
//     depends only on the row length (deterministic run to run);
//   * tiled: the tiled attention (tiled_attention.cu), one block per (head, chunk of
//     query tiles), tiles of Bq queries x Bk keys in shared memory (attention_tiles below).
#pragma once

#include <cstdint>

namespace mla::cuda {

inline constexpr int64_t kElementwiseBlock = 256;     // threads per block, elementwise kernels
inline constexpr int64_t kMaxGridX = 2147483647;      // CUDA limit on gridDim.x (2^31 - 1)
inline constexpr int64_t kElementwiseMaxGrid = 65535 * 16;  // cap; the grid-stride loop covers the rest
inline constexpr int64_t kMaxBlock = 1024;            // CUDA limit on threads per block
inline constexpr int64_t kWarp = 32;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct LaunchShape {
  int64_t grid = 0;   // blocks (gridDim.x)
  int64_t block = 0;  // threads per block (blockDim.x)
};

// One thread per element; `count` == 0 gives an empty launch (grid 0: the launcher skips it).
constexpr LaunchShape elementwise_launch(int64_t count) {
  if (count <= 0) return {0, kElementwiseBlock};
  const int64_t blocks = ceil_div(count, kElementwiseBlock);
  return {blocks < kElementwiseMaxGrid ? blocks : kElementwiseMaxGrid, kElementwiseBlock};
}

// Threads per block for a row reduction over `row_len` values: the smallest power of two
// >= row_len, clamped to [32, 1024]. Power of two so the tree reduction halves cleanly.
constexpr int64_t row_block_size(int64_t row_len) {
  int64_t b = kWarp;
  while (b < row_len && b < kMaxBlock) b *= 2;
  return b;
}

// One block per row (S RMSNorm rows: 131,072 at S = 131072, far below gridDim.x's 2^31 - 1).
constexpr LaunchShape row_launch(int64_t rows, int64_t row_len) {
  return {rows, row_block_size(row_len)};
}
constexpr bool row_launch_fits(int64_t rows) { return rows >= 0 && rows <= kMaxGridX; }

// ---- the tiled attention (tiled_attention.cu) -------------------------------------------
//
// A block takes one head h and a chunk c of its query tiles (tiles c, c + C, c + 2C, ...), and
// for each tile of Bq query rows streams the key tiles of Bk keys three times (max, sum,
// probabilities; docs/backends.md §4). Shared memory holds, in this order:
//   row_inv_sum [Bq] double | row_max [Bq] | q tile [Bq, d_qk] | k or v tile [Bk, kv_stride] |
//   p tile [Bq, Bk] | acc [Bq, d_v]                                              (fp32 unless said)
// kv_stride = max(d_qk, d_v) + 1: the odd row stride puts the Bk keys a warp reads at one
// feature d in distinct shared-memory banks.
inline constexpr int64_t kAttentionThreads = 128;     // threads per block
inline constexpr int64_t kAttentionQueryRows = 16;    // Bq, before shrinking to fit
inline constexpr int64_t kAttentionKeys = 32;         // Bk, before shrinking to fit
inline constexpr int64_t kMaxDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute opt-in
inline constexpr int64_t kAttentionTargetBlocks = 1024;  // n * C aimed at (fills ~130 SMs 8 deep)

constexpr int64_t attention_kv_stride(int64_t d_qk, int64_t d_v) { return (d_qk > d_v ? d_qk : d_v) + 1; }

constexpr int64_t attention_shared_bytes(int64_t bq, int64_t bk, int64_t d_qk, int64_t d_v) {
  return 8 * bq + 4 * (bq + bq * d_qk + bk * attention_kv_stride(d_qk, d_v) + bq * bk + bq * d_v);
}

struct AttentionTiles {
  int64_t query_rows = 0;    // Bq
  int64_t keys = 0;          // Bk
  int64_t kv_stride = 0;     // floats per shared k / v row
  int64_t shared_bytes = 0;  // dynamic shared memory of one block
  bool fits = false;         // false: even Bq = Bk = 1 needs more than kMaxDynamicShared
};

// The tiles for head dims d_qk, d_v: Bq = 16, Bk = 32 (Kimi's d_qk 192, d_v 128: 47,424 bytes),
// halved (Bk down to 8, then Bq, then Bk) until the shared memory fits.
constexpr AttentionTiles attention_tiles(int64_t d_qk, int64_t d_v) {
  int64_t bq = kAttentionQueryRows, bk = kAttentionKeys;
  while (attention_shared_bytes(bq, bk, d_qk, d_v) > kMaxDynamicShared) {
    if (bk > 8) {
      bk /= 2;
    } else if (bq > 1) {
      bq /= 2;
    } else if (bk > 1) {
      bk /= 2;
    } else {
      break;
    }
  }
  const int64_t bytes = attention_shared_bytes(bq, bk, d_qk, d_v);
  return {bq, bk, attention_kv_stride(d_qk, d_v), bytes, bytes <= kMaxDynamicShared};
}

// Query tiles of S rows.
constexpr int64_t attention_query_tiles(int64_t seq_len, const AttentionTiles& tiles) {
  return ceil_div(seq_len, tiles.query_rows);
}

// C, the chunks of query tiles per head: enough blocks to fill the device (n * C ~ 1024), never
// more chunks than tiles. Each chunk sums its rows' probabilities into its own [S] row of mass
// partials, so C fixes the H2O mass's summation order: it depends on n and S only, never on
// the device.
constexpr int64_t attention_mass_chunks(int64_t heads, int64_t query_tiles) {
  const int64_t want = ceil_div(kAttentionTargetBlocks, heads > 0 ? heads : 1);
  const int64_t c = want < query_tiles ? want : query_tiles;
  return c > 0 ? c : 1;
}

// Number of elements thread `thread` of a grid-stride loop visits: ceil((count - thread) / stride).
constexpr int64_t grid_stride_visits(int64_t count, int64_t thread, int64_t stride) {
  return thread >= count ? 0 : ceil_div(count - thread, stride);
}

}  // namespace mla::cuda
