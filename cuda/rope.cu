// cuda/rope.cu — RoPE and the HF head layout of the query, key and value states.
//
// Equations (docs/math.md §3.1 step 3-4, §3.3 step 3-4, §3.4, §6, §7 rows 8-9):
//   q       = view(q_b_proj(...), [S, n, d_qk]).transpose -> [n, S, d_qk]; split [d_n | d_r]
//   k_nope, value = view(kv_b_proj(...), [S, n, d_n + d_v]).transpose; split [d_n | d_v]
//   k_rot   = k_pe [S, d_r], shared by every head (expanded, not copied, in HF)
//   rope(x) for one d_r vector x at position s (HF apply_rotary_pos_emb_interleave):
//     y        = interleave ? deinterleave(x) : x      y[i] = x[2i], y[d_r/2 + i] = x[2i + 1]
//     rot(y)   = cat(-y[d_r/2:], y[:d_r/2])            (rotate_half; negation is exact)
//     t1 = round_T(y * cos[s]);  t2 = round_T(rot(y) * sin[s]);  out = round_T(t1 + t2)
//   (three bf16 roundings in bf16 mode; cos/sin are already bf16-rounded tables there).
//   DeepseekV2 (style Complex, HF apply_rotary_emb): pair i = (a, b) = (x[2i], x[2i+1]) times
//   c_i + i s_i from fp32 tables [S, d_r/2]: out[2i] = fp32(a c) - fp32(b s), out[2i+1] =
//   fp32(a s) + fp32(b c) (every op rounded on its own: --fmad=false), then one rounding to T.
// PyTorch:  q_embed = (q * cos) + (rotate_half(q) * sin)
//           query_states = torch.cat((q_pass, q_embed), dim=-1)
//           key_states   = torch.cat((k_pass, k_embed.expand(*k_pass.shape[:-1], -1)), dim=-1)
// The rope half of the outputs stays in HF's de-interleaved order.
//
// Shapes: q [S, n*d_qk], kv [S, n*(d_n+d_v)], ckv [S, r_kv + d_r], cos/sin [S, d_r],
//   query_states/key_states [n, S, d_qk], value_states [n, S, d_v]. One thread per output
//   element; the key rope is recomputed per head with identical arithmetic (so identical values).
#include "cuda/kernels.hpp"
#include "cuda/device_math.cuh"
#include "cuda/launch_geometry.hpp"

namespace mla::cuda {
namespace {

// Element j (0 <= j < d_rope) of rope(x) for the d_rope-vector x at one position.
template <class T>
__device__ float rope_element(const T* x, int64_t j, const T* cos_s, const T* sin_s, int64_t d_rope,
                              bool interleave) {
  const int64_t half = d_rope / 2;
  auto y = [&](int64_t i) -> float {  // de-interleaved view of x
    if (!interleave) return load(x + i);
    return i < half ? load(x + 2 * i) : load(x + 2 * (i - half) + 1);
  };
  const float rot = j < half ? -y(j + half) : y(j - half);
  const float t1 = round_to_storage<T>(y(j) * load(cos_s + j));
  const float t2 = round_to_storage<T>(rot * load(sin_s + j));
  return t1 + t2;  // rounded by the caller's store
}

// Element j of DeepseekV2's rope(x): pair j / 2 turned by fp32 cos/sin rows [d_rope/2].
template <class T>
__device__ float complex_rope_element(const T* x, int64_t j, const float* cos_s, const float* sin_s) {
  const int64_t i = j / 2;
  const float a = load(x + 2 * i), b = load(x + 2 * i + 1), c = cos_s[i], s = sin_s[i];
  return j % 2 == 0 ? a * c - b * s : a * s + b * c;  // rounded by the caller's store
}

// Element j of the rope half at position s in `style` (tables as launch_build_query_states says).
template <class T>
__device__ float rope_at(const T* x, int64_t j, const void* cos, const void* sin, int64_t s, int64_t d_rope,
                         RopeStyle style) {
  if (style == RopeStyle::Complex)
    return complex_rope_element(x, j, static_cast<const float*>(cos) + s * (d_rope / 2),
                                static_cast<const float*>(sin) + s * (d_rope / 2));
  return rope_element(x, j, static_cast<const T*>(cos) + s * d_rope, static_cast<const T*>(sin) + s * d_rope, d_rope,
                      style == RopeStyle::Interleave);
}

template <class T>
__global__ void build_query_states_kernel(const T* q, const void* cos, const void* sin, T* query_states, int64_t S,
                                          int64_t n, int64_t d_nope, int64_t d_rope, RopeStyle style) {
  const int64_t d_qk = d_nope + d_rope;
  const int64_t count = n * S * d_qk;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = idx % d_qk;            // feature within the head
    const int64_t s = (idx / d_qk) % S;      // token
    const int64_t h = idx / (d_qk * S);      // head
    const T* src = q + s * (n * d_qk) + h * d_qk;  // q[s, h*d_qk : (h+1)*d_qk]
    if (d < d_nope) {
      query_states[idx] = src[d];            // q_pass: exact copy
    } else {
      store(query_states + idx, rope_at(src + d_nope, d - d_nope, cos, sin, s, d_rope, style));
    }
  }
}

template <class T>
__global__ void build_key_value_states_kernel(const T* kv, const T* ckv, int64_t r_kv, const void* cos, const void* sin,
                                              T* key_states, T* value_states, int64_t S, int64_t n, int64_t d_nope,
                                              int64_t d_rope, int64_t d_v, RopeStyle style) {
  const int64_t d_qk = d_nope + d_rope;
  const int64_t d_kv = d_nope + d_v;  // per-head width of kv_b_proj's output
  const int64_t key_count = n * S * d_qk;
  const int64_t count = key_count + n * S * d_v;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    if (idx < key_count) {
      const int64_t d = idx % d_qk;
      const int64_t s = (idx / d_qk) % S;
      const int64_t h = idx / (d_qk * S);
      if (d < d_nope) {
        key_states[idx] = kv[s * (n * d_kv) + h * d_kv + d];  // k_pass: exact copy
      } else {
        const T* k_pe = ckv + s * (r_kv + d_rope) + r_kv;      // ckv[s, r_kv:]
        store(key_states + idx, rope_at(k_pe, d - d_nope, cos, sin, s, d_rope, style));
      }
    } else {
      const int64_t v_idx = idx - key_count;  // index into value_states [n, S, d_v]
      const int64_t e = v_idx % d_v;
      const int64_t s = (v_idx / d_v) % S;
      const int64_t h = v_idx / (d_v * S);
      value_states[v_idx] = kv[s * (n * d_kv) + h * d_kv + d_nope + e];  // exact copy
    }
  }
}

template <class T>
cudaError_t launch_q(const void* q, const void* cos, const void* sin, void* query_states, int64_t S, int64_t n,
                     int64_t d_nope, int64_t d_rope, RopeStyle style, cudaStream_t stream) {
  const LaunchShape ls = elementwise_launch(n * S * (d_nope + d_rope));
  if (ls.grid == 0) return cudaSuccess;
  MLA_LAUNCH(build_query_states_kernel<T>, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block), 0, stream)(
      static_cast<const T*>(q), cos, sin, static_cast<T*>(query_states), S, n, d_nope, d_rope, style);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_kv(const void* kv, const void* ckv, int64_t r_kv, const void* cos, const void* sin,
                      void* key_states, void* value_states, int64_t S, int64_t n, int64_t d_nope, int64_t d_rope,
                      int64_t d_v, RopeStyle style, cudaStream_t stream) {
  const LaunchShape ls = elementwise_launch(n * S * (d_nope + d_rope + d_v));
  if (ls.grid == 0) return cudaSuccess;
  MLA_LAUNCH(build_key_value_states_kernel<T>, static_cast<unsigned>(ls.grid), static_cast<unsigned>(ls.block), 0, stream)(
      static_cast<const T*>(kv), static_cast<const T*>(ckv), r_kv, cos, sin, static_cast<T*>(key_states),
      static_cast<T*>(value_states), S, n, d_nope, d_rope, d_v, style);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_build_query_states(Storage st, const void* q, const void* cos, const void* sin,
                                      void* query_states, int64_t seq_len, int64_t heads, int64_t d_nope,
                                      int64_t d_rope, RopeStyle style, cudaStream_t stream) {
  return st == Storage::BF16
             ? launch_q<__nv_bfloat16>(q, cos, sin, query_states, seq_len, heads, d_nope, d_rope, style, stream)
             : launch_q<float>(q, cos, sin, query_states, seq_len, heads, d_nope, d_rope, style, stream);
}

cudaError_t launch_build_key_value_states(Storage st, const void* kv, const void* ckv, int64_t kv_lora_rank,
                                          const void* cos, const void* sin, void* key_states,
                                          void* value_states, int64_t seq_len, int64_t heads, int64_t d_nope,
                                          int64_t d_rope, int64_t d_v, RopeStyle style, cudaStream_t stream) {
  return st == Storage::BF16
             ? launch_kv<__nv_bfloat16>(kv, ckv, kv_lora_rank, cos, sin, key_states, value_states, seq_len, heads,
                                        d_nope, d_rope, d_v, style, stream)
             : launch_kv<float>(kv, ckv, kv_lora_rank, cos, sin, key_states, value_states, seq_len, heads, d_nope,
                                d_rope, d_v, style, stream);
}

}  // namespace mla::cuda
