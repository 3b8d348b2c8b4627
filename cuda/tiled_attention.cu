// cuda/tiled_attention.cu — the attention of every head and its H2O mass, streamed: no
// [n, S, S] tensor is ever held (unless the probabilities are asked for, and then only written).
//
// Equations (docs/math.md §3.6 steps 2-6, §7 rows 10-14), for head h, query s, visible key t
// (causal: t <= s; mask none: every t):
//   x[t]  = round_T(round_T(sum_d q[s, d] * k[t, d]) * scaling)   fp32 dot product, d ascending;
//                                                                 scaling = fp32(softmax_scale)
//   m     = max_t x[t]                                            (exact in any order)
//   e[t]  = expf(x[t] - m)                                        fp32
//   z     = sum_t e[t]                                            in double, t ascending
//   p[t]  = round_T(fp32(double(e[t]) * (1 / z)))                 0 for a hidden key
//   attn_context[s, h*d_v + j] = round_T(sum_t p[t] * v[t, j])    fp32, t ascending
//   head_scores[h, t] = sum_s p[s, t]                             in double (order below)
// PyTorch (HF eager_attention_forward):
//   attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling + causal_mask
//   attn_weights = softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
//   attn_output  = torch.matmul(attn_weights, value).transpose(1, 2).reshape(S, n * d_v)
// A hidden key gets + finfo(T).min in HF, so exp(x - m) underflows to exactly 0: skipping it
// (p = 0) is exact. x, m, e, z and p are the CPU backend's (src/cpu/cpu_kernels.cpp
// softmax_row): the same formula, and the sum in the same order, t ascending in double. That is
// the contract of docs/long-context.md §2, which a key-tiled kernel keeps only with three passes
// over the keys — the max, then the sum of the same e[t], then the probabilities — and not with
// flash attention's online rescaling (whose rescaled terms are other fp32 numbers than e[t]).
//
// Blocks and tiles (launch_geometry.hpp attention_tiles): block b = h * C + c takes head h and
// the query tiles c, c + C, c + 2C, ... (Bq rows each); for each it streams the key tiles (Bk
// keys; causal: only up to the tile's last row) through shared memory in three passes:
//   pass 1  x tile, then each row's running max          (one thread per row)
//   pass 2  x tile again, e tile, then each row's sum z   (one thread per row: t ascending)
//   pass 3  x tile again, p tile (and, if asked, attn_weights), then the v tile; the P·V
//           accumulators [Bq, d_v] (one thread per output, t ascending) and the block's mass
//           partials (one thread per key: rows ascending)
// The scores are recomputed in each pass by the same code, so the three passes see the same x.
// H2O mass without atomics: block (h, c) adds its rows' p (rows ascending) into its own row
// mass_partials[h, c, :] [S] (double, zeroed first), and a second kernel sums the C rows in c
// ascending: head_scores[h, t] = sum_c mass_partials[h, c, t]. Deterministic run to run and
// independent of the thread or block schedule. Memory: O(n * C * S) partials, O(1) shared.
//
// Shapes: query_states / key_states [n, S, d_qk], value_states [n, S, d_v] (T-storage);
// attn_context [S, n*d_v] (T); mass_partials [n, C, S] and head_scores [n, S] (double);
// attn_weights [n, S, S] (T) or null.
#include "cuda/kernels.hpp"
#include "cuda/device_math.cuh"
#include "cuda/launch_geometry.hpp"

namespace mla::cuda {
namespace {

// What every block of one launch shares (passed by value). Indices inside a tile are int (a
// tile holds at most 48 KiB: 32-bit division is far cheaper on a GPU); offsets into the
// [n, S, ...] tensors are int64.
struct AttentionShape {
  int64_t S, heads, chunks;
  int d_qk, d_v;
  int bq, bk, kv_stride;  // AttentionTiles
  float scaling;
  bool causal;
};

__device__ __forceinline__ bool visible(const AttentionShape& a, int64_t s, int64_t t) { return !a.causal || t <= s; }

// The block's shared memory, carved as launch_geometry.hpp describes.
struct Tiles {
  double* row_inv_sum;  // [Bq]  1 / z (pass 2: the running sum z)
  float* row_max;       // [Bq]
  float* q;             // [Bq, d_qk]
  float* kv;            // [Bk, kv_stride]  key tile (passes 1-3), then value tile (pass 3)
  float* p;             // [Bq, Bk]         x, then e, then p
  float* acc;           // [Bq, d_v]        P·V accumulators
};

__device__ __forceinline__ Tiles carve(double* shared, const AttentionShape& a) {
  Tiles t;
  t.row_inv_sum = shared;
  t.row_max = reinterpret_cast<float*>(shared + a.bq);
  t.q = t.row_max + a.bq;
  t.kv = t.q + a.bq * a.d_qk;
  t.p = t.kv + a.bk * a.kv_stride;
  t.acc = t.p + a.bq * a.bk;
  return t;
}

// dst rows [0, rows) = rows r0.. of src [.., width] (head h's block of an [n, S, width] tensor).
template <class T>
__device__ void load_rows(const T* src, int64_t r0, int rows, int width, float* dst, int ld_dst) {
  const T* first = src + r0 * width;
  for (int idx = threadIdx.x; idx < rows * width; idx += blockDim.x) {
    const int t = idx / width, d = idx % width;
    dst[t * ld_dst + d] = load(first + idx);
  }
}

// p[i, t] = x of query q0 + i and key k0 + t, for the visible pairs of the tile (others untouched).
template <class T>
__device__ void score_tile(const AttentionShape& a, const Tiles& sh, int64_t q0, int rows, int64_t k0, int keys) {
  for (int idx = threadIdx.x; idx < a.bq * a.bk; idx += blockDim.x) {
    const int i = idx / a.bk, t = idx % a.bk;
    if (i >= rows || t >= keys || !visible(a, q0 + i, k0 + t)) continue;
    const float* q = sh.q + i * a.d_qk;
    const float* k = sh.kv + t * a.kv_stride;
    float dot = 0.0f;
    for (int d = 0; d < a.d_qk; ++d) dot += q[d] * k[d];
    sh.p[idx] = round_to_storage<T>(round_to_storage<T>(dot) * a.scaling);
  }
}

// One query tile's rows [q0, q0 + rows) of head h against keys [0, key_end), in three passes over
// the key tiles; every thread of the block calls each pass (they hold the block's barriers).

// pass 1: m = the row's max x (sh.row_max)
template <class T>
__device__ void tile_row_max(const AttentionShape& a, const Tiles& sh, const T* k_h, int64_t q0, int rows,
                             int64_t key_end) {
  for (int64_t k0 = 0; k0 < key_end; k0 += a.bk) {
    const int keys = key_end - k0 < a.bk ? static_cast<int>(key_end - k0) : a.bk;
    load_rows(k_h, k0, keys, a.d_qk, sh.kv, a.kv_stride);
    __syncthreads();
    score_tile<T>(a, sh, q0, rows, k0, keys);
    __syncthreads();
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
      float m = sh.row_max[i];
      for (int t = 0; t < keys; ++t)
        if (visible(a, q0 + i, k0 + t)) m = fmaxf(m, sh.p[i * a.bk + t]);
      sh.row_max[i] = m;
    }
  }
  __syncthreads();
}

// pass 2: z = sum of e = expf(x - m), keys ascending, in double; sh.row_inv_sum = 1 / z
template <class T>
__device__ void tile_row_inv_sum(const AttentionShape& a, const Tiles& sh, const T* k_h, int64_t q0, int rows,
                                 int64_t key_end) {
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sh.row_inv_sum[i] = 0.0;
  for (int64_t k0 = 0; k0 < key_end; k0 += a.bk) {
    const int keys = key_end - k0 < a.bk ? static_cast<int>(key_end - k0) : a.bk;
    load_rows(k_h, k0, keys, a.d_qk, sh.kv, a.kv_stride);
    __syncthreads();
    score_tile<T>(a, sh, q0, rows, k0, keys);
    for (int idx = threadIdx.x; idx < a.bq * a.bk; idx += blockDim.x) {  // the same idx as score_tile's
      const int i = idx / a.bk, t = idx % a.bk;
      if (i < rows && t < keys && visible(a, q0 + i, k0 + t)) sh.p[idx] = expf(sh.p[idx] - sh.row_max[i]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
      double z = sh.row_inv_sum[i];
      for (int t = 0; t < keys; ++t)
        if (visible(a, q0 + i, k0 + t)) z += static_cast<double>(sh.p[i * a.bk + t]);
      sh.row_inv_sum[i] = z;
    }
  }
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sh.row_inv_sum[i] = 1.0 / sh.row_inv_sum[i];
  __syncthreads();
}

// pass 3: p (stored to attn_weights when asked), then P·V into sh.acc and p's column sums into mass
template <class T>
__device__ void tile_probs_and_context(const AttentionShape& a, const Tiles& sh, const T* k_h, const T* v_h,
                                       int64_t h, int64_t q0, int rows, int64_t key_end, double* mass,
                                       T* attn_weights) {
  for (int64_t k0 = 0; k0 < key_end; k0 += a.bk) {
    const int keys = key_end - k0 < a.bk ? static_cast<int>(key_end - k0) : a.bk;
    load_rows(k_h, k0, keys, a.d_qk, sh.kv, a.kv_stride);
    __syncthreads();
    score_tile<T>(a, sh, q0, rows, k0, keys);
    for (int idx = threadIdx.x; idx < a.bq * a.bk; idx += blockDim.x) {
      const int i = idx / a.bk, t = idx % a.bk;
      if (i >= rows || t >= keys) continue;
      float p = 0.0f;
      if (visible(a, q0 + i, k0 + t)) {
        const float e = expf(sh.p[idx] - sh.row_max[i]);
        p = round_to_storage<T>(static_cast<float>(static_cast<double>(e) * sh.row_inv_sum[i]));
      }
      sh.p[idx] = p;
      if (attn_weights != nullptr) store(attn_weights + ((h * a.S + q0 + i) * a.S + k0 + t), p);
    }
    __syncthreads();
    load_rows(v_h, k0, keys, a.d_v, sh.kv, a.kv_stride);
    __syncthreads();
    for (int idx = threadIdx.x; idx < a.bq * a.d_v; idx += blockDim.x) {
      const int i = idx / a.d_v, j = idx % a.d_v;
      if (i >= rows) continue;
      float o = sh.acc[idx];
      for (int t = 0; t < keys; ++t) o += sh.p[i * a.bk + t] * sh.kv[t * a.kv_stride + j];
      sh.acc[idx] = o;
    }
    for (int t = threadIdx.x; t < keys; t += blockDim.x) {
      double m = mass[k0 + t];
      for (int i = 0; i < rows; ++i)
        if (visible(a, q0 + i, k0 + t)) m += static_cast<double>(sh.p[i * a.bk + t]);
      mass[k0 + t] = m;
    }
    __syncthreads();
  }
}

// the tile's outputs: attn_context rows (merged heads), and the hidden keys' zeros
template <class T>
__device__ void store_tile_outputs(const AttentionShape& a, const Tiles& sh, int64_t h, int64_t q0, int rows,
                                   int64_t key_end, T* attn_context, T* attn_weights) {
  for (int idx = threadIdx.x; idx < rows * a.d_v; idx += blockDim.x) {
    const int i = idx / a.d_v, j = idx % a.d_v;
    store(attn_context + (q0 + i) * (a.heads * a.d_v) + h * a.d_v + j, sh.acc[idx]);
  }
  if (attn_weights != nullptr) {
    const int64_t hidden = a.S - key_end;
    for (int64_t idx = threadIdx.x; idx < rows * hidden; idx += blockDim.x) {
      const int64_t i = idx / hidden, t = key_end + idx % hidden;
      store(attn_weights + ((h * a.S + q0 + i) * a.S + t), 0.0f);
    }
  }
}

template <class T>
__global__ void tiled_attention_kernel(AttentionShape a, const T* query_states, const T* key_states,
                                          const T* value_states, T* attn_context, double* mass_partials,
                                          T* attn_weights) {
  MLA_DYNAMIC_SHARED(double, shared);
  const Tiles sh = carve(shared, a);
  const int64_t h = blockIdx.x / a.chunks, c = blockIdx.x % a.chunks;
  const T* q_h = query_states + h * a.S * a.d_qk;
  const T* k_h = key_states + h * a.S * a.d_qk;
  const T* v_h = value_states + h * a.S * a.d_v;
  double* mass = mass_partials + (h * a.chunks + c) * a.S;  // [S], this block's own
  for (int64_t t = threadIdx.x; t < a.S; t += blockDim.x) mass[t] = 0.0;
  // (made visible to the block's other threads by the first barrier below)

  const int64_t tiles = (a.S + a.bq - 1) / a.bq;
  for (int64_t tile = c; tile < tiles; tile += a.chunks) {
    const int64_t q0 = tile * a.bq;
    const int rows = a.S - q0 < a.bq ? static_cast<int>(a.S - q0) : a.bq;
    const int64_t key_end = a.causal ? q0 + rows : a.S;  // keys past it are hidden from every row
    load_rows(q_h, q0, rows, a.d_qk, sh.q, a.d_qk);
    for (int i = threadIdx.x; i < rows; i += blockDim.x) sh.row_max[i] = -INFINITY;
    for (int idx = threadIdx.x; idx < a.bq * a.d_v; idx += blockDim.x) sh.acc[idx] = 0.0f;

    tile_row_max<T>(a, sh, k_h, q0, rows, key_end);
    tile_row_inv_sum<T>(a, sh, k_h, q0, rows, key_end);
    tile_probs_and_context<T>(a, sh, k_h, v_h, h, q0, rows, key_end, mass, attn_weights);
    store_tile_outputs<T>(a, sh, h, q0, rows, key_end, attn_context, attn_weights);
    __syncthreads();  // the next tile overwrites q, row_max, row_inv_sum and acc
  }
}

// head_scores[h, t] = sum_c mass_partials[h, c, t], c ascending. One thread per (h, t).
__global__ void mass_reduce_kernel(const double* mass_partials, double* head_scores, int64_t heads, int64_t S,
                                   int64_t chunks) {
  const int64_t count = heads * S;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = idx / S, t = idx % S;
    double sum = 0.0;
    for (int64_t c = 0; c < chunks; ++c) sum += mass_partials[(h * chunks + c) * S + t];
    head_scores[idx] = sum;
  }
}

template <class T>
cudaError_t launch(const TiledAttention& in, cudaStream_t stream) {
  const AttentionTiles tiles = attention_tiles(in.qk_head_dim, in.v_head_dim);
  // (the backend refuses head dims that do not fit, or a grid beyond its limit, before this)
  if (!tiles.fits || in.mass_chunks < 1 || in.heads * in.mass_chunks > kMaxGridX) return cudaErrorInvalidValue;
  if (in.seq_len <= 0 || in.heads <= 0) return cudaSuccess;
  const int64_t chunks = in.mass_chunks;
  const AttentionShape a{in.seq_len,
                         in.heads,
                         chunks,
                         static_cast<int>(in.qk_head_dim),
                         static_cast<int>(in.v_head_dim),
                         static_cast<int>(tiles.query_rows),
                         static_cast<int>(tiles.keys),
                         static_cast<int>(tiles.kv_stride),
                         in.scaling,
                         in.causal};
  MLA_LAUNCH(tiled_attention_kernel<T>, static_cast<unsigned>(in.heads * chunks),
             static_cast<unsigned>(kAttentionThreads), static_cast<size_t>(tiles.shared_bytes), stream)(
      a, static_cast<const T*>(in.query_states), static_cast<const T*>(in.key_states),
      static_cast<const T*>(in.value_states), static_cast<T*>(in.attn_context), in.mass_partials,
      static_cast<T*>(in.attn_weights));
  const cudaError_t st = cudaGetLastError();
  if (st != cudaSuccess) return st;
  const LaunchShape ls = elementwise_launch(in.heads * in.seq_len);
  MLA_LAUNCH(mass_reduce_kernel, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block), 0, stream)(
      in.mass_partials, in.head_scores, in.heads, in.seq_len, chunks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_tiled_attention(Storage st, const TiledAttention& in, cudaStream_t stream) {
  return st == Storage::BF16 ? launch<__nv_bfloat16>(in, stream) : launch<float>(in, stream);
}

}  // namespace mla::cuda
