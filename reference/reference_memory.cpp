// reference/reference_memory.cpp — the reference backend's buffers for the memory plan
// (mla/memory_plan.hpp): its copy of the weights and ref::Activations, every intermediate of
// mla_reference.cpp kept in double, three of them [n, S, S]. Keep in step with Activations.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = parameters.
#include "mla/memory_plan.hpp"

namespace mla {

BackendMemory reference_backend_memory(const AttentionConfig& cfg, const MemoryRequest& r) {
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  constexpr int64_t kF32 = 4, kF64 = 8;
  BackendMemory m;
  m.held = {{"reference's copy of the weights (fp32)", memory_product({d.P, kF32})}};
  // ref::Activations: every intermediate kept, in double
  const int64_t per_token = d.H + 2 * d.r_q + d.n * d.d_qk + (d.r_kv + d.d_r) + 2 * d.r_kv + d.d_r +
                            d.n * (d.d_n + d.d_v) + 2 * d.d_r + d.n * d.d_r + d.d_r + d.n * (2 * d.d_qk + d.d_v) +
                            d.n * d.d_v + d.H;
  const std::vector<MemoryPart> act = {
      {"activations f64 (per token)", memory_product({d.S, per_token, kF64})},
      {"scores, masked scores, probabilities [n,S,S] f64", memory_product({3, d.n, d.S, d.S, kF64})}};
  m.phases.push_back({"forward (every intermediate kept)", act});
  std::vector<MemoryPart> exported = act;
  for (MemoryPart& p : forward_result_memory(d, r)) exported.push_back(std::move(p));
  m.phases.push_back({"export (activations still alive)", exported});
  return m;
}

}  // namespace mla
