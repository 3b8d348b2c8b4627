// src/cpu/cpu_memory.cpp — the cpu backend's buffers, phase by phase, for the memory plan
// (mla/memory_plan.hpp, docs/long-context.md "Memory plan"). Each part is a buffer of
// cpu_backend.cpp / streaming_attention.cpp sized from the geometry: keep them in step.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = parameters.
#include <algorithm>

#include "cpu_kernels.hpp"
#include "mla/memory_plan.hpp"

namespace mla {

BackendMemory cpu_backend_memory(const AttentionConfig& cfg, const MemoryRequest& r) {
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  constexpr int64_t kF32 = 4, kF64 = 8;
  const auto mul = [](auto... f) { return memory_product({static_cast<int64_t>(f)...}); };
  const bool bf16 = r.precision == Precision::BF16;
  BackendMemory m;
  m.held = {{"prepared weights (fp32 storage)", mul(d.P, kF32)}};
  const MemoryPart x{"x [S,H] f32", mul(d.S, d.H, kF32)};
  const MemoryPart q{"q [S,n*d_qk] f32", mul(d.S, d.n, d.d_qk, kF32)};
  const MemoryPart q_a{"q_a + q_a_normed [S,r_q] f32", mul(2, d.S, d.r_q, kF32)};
  const MemoryPart ckv{"compressed_kv + latent_normed f32", mul(d.S, d.r_kv + d.d_r + d.r_kv, kF32)};
  const MemoryPart kv{"kv [S,n*(d_n+d_v)] f32", mul(d.S, d.n, d.d_n + d.d_v, kF32)};
  const MemoryPart ctx{"attn_context [S,n*d_v] f32", mul(d.S, d.n, d.d_v, kF32)};
  const MemoryPart k_pe{"k_pe_roped [S,d_r] f32", mul(d.S, d.d_r, kF32)};
  const MemoryPart heads{"head_scores [n,S] f64", mul(d.n, d.S, kF64)};
  const MemoryPart out{"o_proj output [S,H] f32", mul(d.S, d.H, kF32)};
  const MemoryPart output{"attn_output [S,H] f64", mul(d.S, d.H, kF64)};
  const MemoryPart states{std::string("keys/values ") + (bf16 ? "bf16" : "f32"),
                          mul(d.S, d.n * (d.d_n + d.d_v) + d.d_r, bf16 ? 2 : kF32)};
  // per worker: one head's key [S, d_qk] and value [S, d_v] in fp32, one logits block [64, S]
  const MemoryPart work{"streaming workspace (per worker)",
                        mul(std::max(r.threads, 1), d.S, d.d_qk + d.d_v + cpu::kQueryRowBlock, kF32)};
  const MemoryPart weights{"attn_weights [n,S,S] f64", r.holds_attn_weights() ? mul(d.n, d.S, d.S, kF64) : 0};
  m.phases.push_back({"q_path", {x, q_a, q}});
  m.phases.push_back({"kv_path", {x, q, ckv, kv}});
  m.phases.push_back({"attend (storing keys/values)", {q, ckv, k_pe, kv, states}});
  std::vector<MemoryPart> during = {q, ckv, k_pe, ctx, heads, states, work, weights};
  if (r.dump_tensors) during.push_back(kv);
  m.phases.push_back({"attend", during});
  std::vector<MemoryPart> tail = {ckv, k_pe, ctx, heads, out, output};
  if (r.dump_tensors) {
    tail.push_back(q);
    tail.push_back(kv);
    tail.push_back({"query/key/value_states f64", mul(d.n, d.S, 2 * d.d_qk + d.d_v, kF64)});
    tail.push_back(weights);
  }
  m.phases.push_back({"o_proj and results", tail});
  return m;
}

}  // namespace mla
