// cuda/cuda_memory.cpp — the cuda backend's buffers for the memory plan (mla/memory_plan.hpp):
// on the device the weights, the one workspace of workspace_layout.hpp (O(S): the attention is
// streamed), the [n, S, S] probabilities only when they are dumped, and cuBLAS's allowance; on
// the host the downloads of export. Plain C++: built with or without CUDA, so a plan can name
// --backend cuda's needs anywhere.
//
// Shape legend: S = tokens, H = hidden_size, P = parameters.
#include <algorithm>

#include "cuda/workspace_layout.hpp"
#include "mla/error.hpp"
#include "mla/memory_plan.hpp"

namespace mla {

BackendMemory cuda_backend_memory(const AttentionConfig& cfg, const MemoryRequest& r) {
  // cuBLAS workspace and context allowance on the device.
  constexpr int64_t kCublasBytes = int64_t{256} << 20;
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  BackendMemory m;
  std::vector<MemoryPart> exported = forward_result_memory(d, r);
  exported.push_back({"downloads f32 (output, states, weights)", memory_product({d.S, d.H, 4})});
  m.phases.push_back({"export (downloads)", exported});
  const int64_t elem = r.precision == Precision::BF16 ? 2 : 4;
  int64_t workspace = kMemoryUnbounded, probabilities = 0;
  try {
    const cuda::WorkspaceDims wd = cuda::workspace_dims(cfg, r.seq_len, elem);
    workspace = cuda::workspace_layout(wd).total_bytes;
    if (r.holds_attn_weights()) probabilities = cuda::attn_weights_bytes(wd);  // for the forward that keeps them
  } catch (const Error&) {  // overflows 64 bits: needs "everything"
    probabilities = kMemoryUnbounded;
  }
  m.device_bytes = std::min(kMemoryUnbounded, memory_product({d.P, elem}) +
                                                  std::min(workspace + std::min(probabilities, kMemoryUnbounded),
                                                           kMemoryUnbounded) +
                                                  kCublasBytes);
  return m;
}

}  // namespace mla
