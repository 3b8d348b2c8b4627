// src/decode/decode_inputs.cpp — what one layer's backend computes once for a decode run
// (include/mla/decode.hpp DecodeInputs; docs/decode.md §1). Projections do not depend on
// eviction, so they run once for all T rows.
//
// Any backend (compute_decode_inputs), two forwards:
//   1. the causal prefill over rows [0, P): prefill scores (H2O), latent cache rows < P;
//   2. rows [P - w, T) at their positions P - w .. T - 1: the queries of the last w prompt rows
//      (SnapKV/TOVA prefill scores) and of every decode row, and latent cache rows >= P.
//      Its own attention (among those rows only) is not used.
// The cpu backend's stages (compute_cpu_decode_inputs, src/cpu/cpu_stages.hpp), one pass:
//   q_path, kv_path and rope over all T rows at positions 0 .. T-1, then attend over the P
//   prompt rows (causal) for the prefill scores; no o_proj (the prefill's attn_output is not
//   needed), which is ~40 % of the prefill's FLOPs for Kimi.
// Shape legend: T rows, P prompt rows, w query window, n heads, H hidden, r_kv, d_r, d_qk.
#include <algorithm>
#include <cmath>
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/validate.hpp"
#include "src/cpu/cpu_stages.hpp"

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
  return in;
}

DecodeInputs compute_cpu_decode_inputs(const AttentionConfig& cfg, const LayerWeights& w, const TensorF& hidden,
                                       int64_t P, int64_t window, const ForwardOptions& opt) {
  validate_layer(cfg, w, opt);  // the same checks and messages as every backend's prepare + forward
  validate_input(cfg, hidden, opt);
  const int64_t T = hidden.dim(0), n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim,
                d_qk = cfg.qk_head_dim();
  if (P < 1 || P >= T)
    fail(ErrorKind::InvalidArgument, "decode: prompt length " + std::to_string(P) + " must be in [1, " +
                                         std::to_string(T - 1) + "] for " + std::to_string(T) + " rows");
  const int64_t w_rows = std::clamp<int64_t>(window, 1, P), query_begin = P - w_rows;
  const bool bf16 = opt.precision == Precision::BF16;
  const int threads = cpu::resolve_threads(opt.threads);
  const cpu::PreparedWeights pw = cpu::prepare_weights(cfg, w, bf16, threads, opt.gemm);
  const cpu::Layer L{cfg, pw, bf16, threads, static_cast<float>(opt.latent_norm_eps)};

  const cpu::MatrixRM x = cpu::input_rows(hidden, bf16);  // [T, H]
  cpu::MatrixRM q = cpu::q_path(L, x);                     // [T, n*d_qk]
  const cpu::KvPath kvp = cpu::kv_path(L, x);              // latent_normed [T, r_kv], kv [T, n*(d_n+d_v)]
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = t;
  const cpu::MatrixRM k_pe_roped = cpu::rope(L, positions, q, kvp.compressed_kv);  // [T, d_r]; q roped in place
  // the causal prefill's attention over rows [0, P): its H2O scores
  const cpu::MatrixRM q_prompt = q.topRows(P), kv_prompt = kvp.kv.topRows(P), k_pe_prompt = k_pe_roped.topRows(P);
  const cpu::Attention att =
      cpu::attend(L, q_prompt, cpu::key_value_states(L, kv_prompt, k_pe_prompt), true, false, cpu::BlockProgress{});

  DecodeInputs in;
  in.prompt_len = P;
  in.query_begin = query_begin;
  in.gemm = pw.gemm;
  in.prefill_scores.assign(static_cast<size_t>(P), 0.0);  // [P] = sum over heads of head_scores [n*P]
  for (int64_t h = 0; h < n; ++h)
    for (int64_t t = 0; t < P; ++t) in.prefill_scores[static_cast<size_t>(t)] += att.head_scores[static_cast<size_t>(h * P + t)];
  in.latent_cache = TensorD("latent_cache", {T, r_kv + d_r});  // latent_normed | k_pe_roped
  for (int64_t t = 0; t < T; ++t) {
    double* row = in.latent_cache.ptr() + t * (r_kv + d_r);
    for (int64_t c = 0; c < r_kv; ++c) row[c] = kvp.latent_normed(t, c);
    for (int64_t d = 0; d < d_r; ++d) row[r_kv + d] = k_pe_roped(t, d);
  }
  const int64_t Q = T - query_begin;
  in.query_states = TensorD("query_states", {n, Q, d_qk});  // HF layout of rows query_begin .. T-1
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < Q; ++s)
      for (int64_t d = 0; d < d_qk; ++d)
        in.query_states.data[static_cast<size_t>((h * Q + s) * d_qk + d)] = q(query_begin + s, h * d_qk + d);
  return in;
}

}  // namespace mla
