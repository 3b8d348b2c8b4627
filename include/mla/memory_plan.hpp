// mla/memory_plan.hpp — how much memory a forward will need, decided before anything large is
// allocated, and the one-line refusal when it cannot fit (docs/long-context.md, "Memory plan").
//
// The estimate adds up, phase by phase, every buffer the program holds at that point, in bytes,
// from the geometry: the pipeline's own (the loaded weights, the input, the results and the
// dump's payloads: described here) and the backend's, which each backend describes beside its
// code (reference/reference_memory.cpp, src/cpu/cpu_memory.cpp, cuda/cuda_memory.cpp). The peak
// is the largest phase, plus a fixed allowance for the process itself. What is available comes
// from mla/memory_available.hpp.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = attention parameters.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mla/attention.hpp"
#include "mla/config.hpp"
#include "mla/memory_available.hpp"

namespace mla {

struct MemoryRequest {
  BackendKind backend = BackendKind::Cpu;  // Reference | Cpu | Cuda (resolved: not Auto)
  int64_t seq_len = 0;
  Precision precision = Precision::FP32;
  bool dump_tensors = false;  // --dump-tensors: states, output and (below) attn_weights
  bool attn_weights = false;  // attn_weights [n, S, S] in the dump
  bool tokens_input = false;  // --tokens: input_layernorm loaded too
  int threads = 1;            // cpu workers
  Gemm gemm = Gemm::Auto;     // cpu: --gemm (the engine decides how the weights are kept)
  bool holds_attn_weights() const { return dump_tensors && attn_weights; }
};

struct MemoryPart {
  std::string name;
  int64_t bytes = 0;
};

struct MemoryPhase {
  std::string name;                // "projections", "attention", ...
  std::vector<MemoryPart> parts;   // what is alive then
  int64_t bytes() const;
};

struct MemoryEstimate {
  int64_t host_peak_bytes = 0;     // largest phase + process allowance
  std::string peak_phase;          // its name
  std::vector<MemoryPhase> phases;
  int64_t device_peak_bytes = 0;   // cuda: weights + workspace (+ attn_weights when dumped) + cuBLAS; else 0
};

// Attention parameters of one layer from the geometry (101,124,096 for Kimi K2.6).
int64_t attention_parameter_count(const AttentionConfig& cfg);

// The sizes a buffer description is written in (see the shape legend).
struct MemoryDims {
  int64_t S, H, n, r_q, r_kv, d_n, d_r, d_v, d_qk, P;
};
MemoryDims memory_dims(const AttentionConfig& cfg, int64_t seq_len);

// a * b * ... saturating at kMemoryUnbounded: an absurd S must give "needs 10^18 bytes", not a
// wrapped number.
inline constexpr int64_t kMemoryUnbounded = INT64_MAX / 4;
int64_t memory_product(std::initializer_list<int64_t> factors);

// What a backend holds beyond the pipeline's buffers, described by the backend itself:
// `held` from prepare() until the backend is destroyed (after the outputs are written), and
// `phases` the buffers alive at each point of one forward (its export included). A device
// backend also gives its device peak.
struct BackendMemory {
  std::vector<MemoryPart> held;
  std::vector<MemoryPhase> phases;
  int64_t device_bytes = 0;
};
BackendMemory reference_backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);  // reference/
BackendMemory cpu_backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);        // src/cpu/
BackendMemory cuda_backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);       // cuda/
// The one above for req.backend (Reference | Cpu | Cuda), in the backend factory.
BackendMemory backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);

// The ForwardResult a backend returns (attn_output and the H2O sums in double; with a dump the
// states and attn_weights in double): the backends list it in their export phase.
std::vector<MemoryPart> forward_result_memory(const MemoryDims& d, const MemoryRequest& req);

MemoryEstimate estimate_memory(const AttentionConfig& cfg, const MemoryRequest& req);

struct MemoryPlan {
  MemoryRequest request;          // as asked
  MemoryEstimate estimate;        // of what will run (attn_weights dropped if it cannot fit)
  MemoryBudget budget;
  bool fits = true;
  bool attn_weights_dropped = false;
  std::string note;               // one line for the report (dropped attn_weights), or ""
  std::string refusal;            // when !fits: what was asked, needed, available, would fit
};

// Decides: fits as asked; fits without the attn_weights dump (dropped, with a note); or does
// not fit (refusal names the alternatives that would: --precision bf16, --backend cpu, no
// --dump-tensors, the largest --seq-len).
MemoryPlan plan_memory(const AttentionConfig& cfg, const MemoryRequest& req, const MemoryBudget& budget);

// ---- the cost of the reference backend (its announced estimate and its progress) ----------

// Floating-point operations of each stage of ref::forward (multiply-add = 2), in its order:
// q_path, kv_path, rope, attend, o_proj. The reference computes every (query, key) pair
// whatever the mask, so the mask does not change the count.
std::vector<std::pair<std::string, double>> reference_stage_flops(const AttentionConfig& cfg, int64_t seq_len);
// Its rate measured on the development machine (AMD EPYC, 2 cores, g++ 12.2 -O3; Kimi
// layer 0, S = 8: 1.6 GFLOP in ~1.0 s of CPU; docs/long-context.md): scalar double loops
// on one core.
inline constexpr double kReferenceFlopsPerSecond = 1.5e9;

// "12.3 GiB", "850 MiB"
std::string format_bytes(int64_t bytes);

}  // namespace mla
