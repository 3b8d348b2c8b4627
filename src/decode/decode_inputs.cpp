// src/decode/decode_inputs.cpp — what one layer's backend computes once for a decode run
// (include/mla/decode.hpp DecodeInputs; docs/decode.md §1). Projections do not depend on
// eviction, so they run once for all T rows.
//
// Any backend (compute_decode_inputs), two forwards:
//   1. the causal prefill over rows [0, P): the attention mass per head, latent cache rows < P
//      (and the prompt's queries for expected-attention's statistics);
//   2. rows [P - w, T) at their positions P - w .. T - 1: the queries of the last w prompt rows
//      (the windows policies read) and of every decode row, and latent cache rows >= P.
//      Its own attention (among those rows only) is not used.
// The cpu backend does it in one pass of its stage functions (src/cpu/cpu_decode.cpp).
// Shape legend: T rows, P prompt rows, w query window, n heads, H hidden, r_kv, d_r, d_qk.
#include <algorithm>
#include <cmath>
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "mla/validate.hpp"

namespace mla {
namespace {

TensorF rows(const TensorF& x, int64_t begin, int64_t end) {  // x[begin:end, :]
  const int64_t cols = x.dim(1);
  TensorF out(x.name, {end - begin, cols});
  std::copy(x.ptr() + begin * cols, x.ptr() + end * cols, out.ptr());
  return out;
}

// [n, S, d_qk] -> [S, n*d_qk] fp32 (the cpu layout prerope_query_statistics reads)
std::vector<float> rows_major(const TensorD& states) {
  const int64_t n = states.dim(0), S = states.dim(1), d = states.dim(2);
  std::vector<float> out(static_cast<size_t>(S * n * d));
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < d; ++k)
        out[static_cast<size_t>((s * n + h) * d + k)] = static_cast<float>(states.data[static_cast<size_t>((h * S + s) * d + k)]);
  return out;
}

}  // namespace

void check_decode_inputs_request(const DecodeInputsRequest& req, int64_t T) {
  const int64_t P = req.prompt_len;
  if (P < 1 || P >= T)
    fail(ErrorKind::InvalidArgument, "decode: prompt length " + std::to_string(P) + " must be in [1, " +
                                         std::to_string(T - 1) + "] for " + std::to_string(T) + " rows");
  if (req.statistics_from >= P)
    fail(ErrorKind::InvalidArgument, "decode: query statistics from row " + std::to_string(req.statistics_from) +
                                         " of a prompt of " + std::to_string(P));
}

DecodeInputs compute_decode_inputs(Backend& backend, const AttentionConfig& cfg, const TensorF& hidden,
                                   const DecodeInputsRequest& req, const ForwardOptions& opt) {
  if (hidden.shape.size() != 2) fail(ErrorKind::Shape, "decode: hidden states must be [T, H], got " + shape_string(hidden.shape));
  const int64_t T = hidden.dim(0), P = req.prompt_len;
  check_decode_inputs_request(req, T);
  const int64_t w = std::clamp<int64_t>(req.query_window, 1, P);
  ForwardOptions f = opt;
  f.mask = Mask::Causal;
  f.keep_attn_weights = false;
  f.keep_latent_cache = true;

  // 1. causal prefill (its queries only for the statistics)
  f.position_offset = 0;
  f.keep_states = req.statistics_from >= 0;
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
  in.head_mass = std::move(pre.head_scores);
  in.backend = backend.name();
  in.description = backend.description();
  if (req.statistics_from >= 0) {
    const std::vector<float> q = rows_major(pre.query_states);
    in.query_statistics = prerope_query_statistics(cfg, q.data(), P, position_ids(0, P), req.statistics_from);
  }
  return in;
}

void add_decode_reconstruction(const TensorF& hidden, int64_t P, int64_t positions, int64_t heads,
                               const ReconstructionInputs& inputs_of, const ReconstructionKernel& kernel_of, TokenFeatures& f) {
  const int64_t H = hidden.dim(1);
  f.heads = heads;
  f.tokens = positions;
  f.reconstruction.assign(static_cast<size_t>(heads * positions), 0.0);
  for (const ReconstructionChunk& c : reconstruction_chunks(P, ReconstructionText{})) {
    const int64_t R = static_cast<int64_t>(c.rows.size());
    TensorF rows(hidden.name, {P + R, H});  // [P + R, H]: the context, then the repeat's rows
    std::copy(hidden.ptr(), hidden.ptr() + P * H, rows.ptr());
    for (int64_t i = 0; i < R; ++i) {
      const int64_t t = c.rows[static_cast<size_t>(i)];  // a context row (no text rows here)
      std::copy(hidden.ptr() + t * H, hidden.ptr() + (t + 1) * H, rows.ptr() + (P + i) * H);
    }
    DecodeInputsRequest req;
    req.prompt_len = P;
    req.query_window = 1;
    const DecodeInputs in = inputs_of(rows, req);
    const std::unique_ptr<DecodeKernel> kernel = kernel_of(in, R);
    std::vector<double> probs;
    for (int64_t i = 0; i < R; ++i) {
      const std::vector<int64_t> keys = reconstruction_keys(c, P, i);
      kernel->begin_query(P + i);
      kernel->attend(keys, probs, -1, 0);
      kernel->end_query();
      add_reconstruction_row(f, c, keys, probs);
    }
  }
}

}  // namespace mla
