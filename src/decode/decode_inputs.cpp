// src/decode/decode_inputs.cpp — what one layer's backend computes once for a decode run
// (include/mla/decode.hpp DecodeInputs; docs/decode.md §1). Projections do not depend on
// eviction, so two forwards of the backend give everything:
//   1. the causal prefill over rows [0, P): prefill scores (H2O), attn_output, latent cache rows < P;
//   2. rows [P - w, T) at their positions P - w .. T - 1: the queries of the last w prompt rows
//      (SnapKV/TOVA prefill scores) and of every decode row, and latent cache rows >= P.
//      Its own attention (among those rows only) is not used.
// Shape legend: T rows, P prompt rows, w query window, n heads, H hidden, r_kv, d_r, d_qk.
#include <algorithm>
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"

namespace mla {
namespace {

TensorF rows(const TensorF& x, int64_t begin, int64_t end) {  // x[begin:end, :]
  const int64_t cols = x.dim(1);
  TensorF out(x.name, {end - begin, cols});
  std::copy(x.ptr() + begin * cols, x.ptr() + end * cols, out.ptr());
  return out;
}

}  // namespace

DecodeInputs compute_decode_inputs(Backend& backend, const TensorF& hidden, int64_t P, int64_t window,
                                   const ForwardOptions& opt) {
  if (hidden.shape.size() != 2) fail(ErrorKind::Shape, "decode: hidden states must be [T, H], got " + shape_string(hidden.shape));
  const int64_t T = hidden.dim(0);
  if (P < 1 || P >= T)
    fail(ErrorKind::InvalidArgument, "decode: prompt length " + std::to_string(P) + " must be in [1, " +
                                         std::to_string(T - 1) + "] for " + std::to_string(T) + " rows");
  const int64_t w = std::clamp<int64_t>(window, 1, P);
  ForwardOptions f = opt;
  f.mask = Mask::Causal;
  f.keep_attn_weights = false;
  f.keep_latent_cache = true;

  // 1. causal prefill
  f.position_offset = 0;
  f.keep_states = false;
  ForwardResult pre = backend.forward(rows(hidden, 0, P), f);
  // 2. the held query rows and the decode rows' latents
  f.position_offset = P - w;
  f.keep_states = true;
  ForwardResult tail = backend.forward(rows(hidden, P - w, T), f);
  if (pre.latent_cache.empty() || tail.latent_cache.empty() || tail.query_states.empty())
    fail(ErrorKind::Unsupported, "decode: backend " + backend.name() +
                                     " does not export the latent cache; use --backend cpu or reference");

  DecodeInputs in;
  in.prompt_len = P;
  in.query_begin = P - w;
  const int64_t width = pre.latent_cache.dim(1);
  in.latent_cache = TensorD("latent_cache", {T, width});
  std::copy(pre.latent_cache.data.begin(), pre.latent_cache.data.end(), in.latent_cache.data.begin());
  std::copy(tail.latent_cache.data.begin() + w * width, tail.latent_cache.data.end(), in.latent_cache.data.begin() + P * width);
  in.query_states = std::move(tail.query_states);
  in.prefill_scores = std::move(pre.token_scores);
  in.prefill_output = std::move(pre.attn_output);
  return in;
}

}  // namespace mla
