// mla/memory_plan.hpp — how much memory a forward will need, decided before anything large is
// allocated, and the one-line refusal when it cannot fit (docs/long-context.md, "Memory plan").
//
// The estimate adds up, phase by phase, every buffer the program holds at that point (the
// loaded and the prepared weights, the input, each backend's intermediates, the results and
// the dump's payloads), in bytes, from the geometry; the peak is the largest phase, plus a
// fixed allowance for the process itself. What is available is the smallest of MemAvailable
// (/proc/meminfo) and the room left under the cgroup's limit (v2 memory.max - memory.current,
// or v1 memory.limit_in_bytes - memory.usage_in_bytes), or MLA_MEMORY_AVAILABLE=BYTES when set
// (suffixes K, M, G, T: powers of 1024), which tests use to fake a small machine.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, P = attention parameters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mla/attention.hpp"
#include "mla/config.hpp"

namespace mla {

struct MemoryRequest {
  BackendKind backend = BackendKind::Cpu;  // Reference | Cpu | Cuda (resolved: not Auto)
  int64_t seq_len = 0;
  Precision precision = Precision::FP32;
  bool dump_tensors = false;  // --dump-tensors: states, output and (below) attn_weights
  bool attn_weights = false;  // attn_weights [n, S, S] in the dump
  bool tokens_input = false;  // --tokens: input_layernorm loaded too
  int threads = 1;            // cpu workers
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
  int64_t device_peak_bytes = 0;   // cuda: weights + workspace + cuBLAS workspace; else 0
};

// Attention parameters of one layer from the geometry (101,124,096 for Kimi K2.6).
int64_t attention_parameter_count(const AttentionConfig& cfg);

MemoryEstimate estimate_memory(const AttentionConfig& cfg, const MemoryRequest& req);

struct MemoryBudget {
  int64_t host_bytes = -1;   // -1 = unknown (no check)
  std::string host_source;   // "MemAvailable", "cgroup v2 memory.max", "MLA_MEMORY_AVAILABLE"
  int64_t device_bytes = -1; // cuda: free device memory (cuda_free_memory()); -1 = unknown
};

// What this process may still allocate (see the file comment). Never throws for a missing
// file; MLA_MEMORY_AVAILABLE that is not a byte count is an Error(InvalidArgument).
MemoryBudget host_memory_budget();

// Parsers of the files above (tests feed them text): bytes, or -1 when absent / unlimited.
int64_t parse_meminfo_available(std::string_view meminfo);
int64_t parse_cgroup_limit(std::string_view text);  // "max\n" -> -1, "8589934592\n" -> 8589934592
int64_t parse_byte_count(std::string_view text);    // "8G", "512M", "1073741824"; -1 when malformed

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
