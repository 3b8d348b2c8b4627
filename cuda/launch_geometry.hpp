// cuda/launch_geometry.hpp — how many blocks and threads each hand-written kernel gets.
//
// Plain C++ (no CUDA headers): the .cu launchers and the host unit tests (suite cuda_host)
// include the same arithmetic, so the launch shapes are tested on machines without a GPU.
//
// Shape legend: n = num_attention_heads, S = new tokens (= T keys: no cache),
//   rows = number of independent vectors a row kernel processes (e.g. n*S score rows).
//
// Kernels come in three shapes:
//   * elementwise: one thread per output element, grid-stride loop over `count` elements;
//   * row: one block per row (RMSNorm over S rows, softmax over n*S rows); the block's threads
//     stride over the row and reduce with a fixed tree, so the summation order depends only on
//     the block size, which depends only on the row length (deterministic run to run);
//   * column: one thread per column, looping down the rows in order (attention mass).
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

// One block per row. Rows beyond gridDim.x's limit are refused by the caller (n*S for the
// Kimi geometry at S = 8192 is 524,288 rows, far below 2^31 - 1).
constexpr LaunchShape row_launch(int64_t rows, int64_t row_len) {
  return {rows, row_block_size(row_len)};
}
constexpr bool row_launch_fits(int64_t rows) { return rows >= 0 && rows <= kMaxGridX; }

// One thread per column of `columns` columns (head h, key t pairs: n*S of them).
constexpr LaunchShape column_launch(int64_t columns) {
  if (columns <= 0) return {0, kElementwiseBlock};
  return {ceil_div(columns, kElementwiseBlock), kElementwiseBlock};
}

// Number of elements thread `thread` of a grid-stride loop visits: ceil((count - thread) / stride).
constexpr int64_t grid_stride_visits(int64_t count, int64_t thread, int64_t stride) {
  return thread >= count ? 0 : ceil_div(count - thread, stride);
}

}  // namespace mla::cuda
