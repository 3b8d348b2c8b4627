// tests/unit/attention_paths.hpp — the cpu backend's attention computed two ways on the same
// operands, for suite tiled and the long-context benchmark:
//   tiled_attention     src/cpu/tiled_attention.hpp as the backend runs it (O(S) memory),
//                          its products on either engine (Eigen + OpenBLAS, or oneDNN)
//   materialized_attention the computation the backend ran before streaming: per head the whole
//                          [S, S] probability matrix (cpu_kernels.hpp block_scores_softmax on
//                          each 64-row block), then P.V as one GEMM and the column sums over all
//                          of it; heads in parallel, one BLAS thread per worker.
// With the Eigen products both widen each head's keys/values to contiguous fp32, so the GEMMs
// get the same operands.
//
// Shape legend: S = tokens, n = heads, d_n / d_r / d_v = nope / rope / value head dims,
// d_qk = d_n + d_r.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/attention.hpp"
#include "mla/config.hpp"
#include "src/cpu/tiled_attention.hpp"

namespace mla::test {

// The attention operands in the cpu backend's layouts.
struct Operands {
  int64_t S = 0, n = 0, d_n = 0, d_r = 0, d_v = 0;
  std::vector<float> query;  // [S, n*d_qk]      head h at column h*d_qk (q_nope | q_rot roped)
  std::vector<float> kv;     // [S, n*(d_n+d_v)] head h at column h*(d_n+d_v) (k_nope | value)
  std::vector<float> k_pe;   // [S, d_r]         roped, shared by every head
  int64_t d_qk() const { return d_n + d_r; }
};

// From a forward's HF-layout states (keep_states): query/key/value_states [n, S, d].
Operands operands_from_states(const AttentionConfig& cfg, const ForwardResult& r);
// Standard-normal operands (query scaled by 3 so the softmax is peaked), rounded to bf16
// values when `bf16`: for timing.
Operands random_operands(const AttentionConfig& cfg, int64_t seq_len, bool bf16, uint64_t seed);

struct AttentionResult {
  std::vector<double> attn_context;  // [S, n*d_v]
  std::vector<double> head_scores;   // [n*S]
  std::vector<double> token_scores;  // [S]
};

AttentionResult materialized_attention(const Operands& o, bool causal, float scaling, bool bf16, int threads);
AttentionResult tiled_attention(const Operands& o, bool causal, float scaling, bool bf16, int threads,
                                   const cpu::BlockProgress& progress = {}, Gemm products = Gemm::Eigen);

}  // namespace mla::test
