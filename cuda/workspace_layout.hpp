// cuda/workspace_layout.hpp — the device buffers one forward needs, carved out of ONE
// cudaMalloc (offsets aligned to 256 bytes). Plain C++ so the suite cuda_host checks sizes,
// alignment and non-overlap without a GPU, and so the memory plan and the benchmark can print
// the expected size. Every slot is O(S): the attention is streamed (tiled_attention.cu), and
// the [n, S, S] probabilities get a buffer of their own only when they are asked for
// (attn_weights_bytes).
//
// Shape legend: S = tokens, H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r. "elem" = the storage element: 4 bytes (fp32) or 2 bytes (bf16).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/launch_geometry.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"

namespace mla::cuda {

inline constexpr int64_t kWorkspaceAlign = 256;

// Workspace slots, in allocation order. Names are printed in errors and in the benchmark.
// Slot names are HF's names for the same intermediates (reference/mla_reference.hpp Activations).
enum Slot : int {
  kHiddenStates = 0,  // [S, H]              elem   input hidden states
  kQA,                // [S, r_q]            elem   q_a = q_a_proj(x)                  (0 without q_lora_rank)
  kQANormed,          // [S, r_q]            elem   q_a_normed = q_a_layernorm(q_a)    (0 without q_lora_rank)
  kQ,                 // [S, n*d_qk]         elem   q = q_b_proj (or q_proj) output, head-major
  kCompressedKv,      // [S, r_kv + d_r]     elem   compressed_kv = kv_a_proj_with_mqa(x): latent | k_pe
  kLatentNormed,      // [S, r_kv]           elem   latent_normed = kv_a_layernorm(latent)
  kKv,                // [S, n*(d_n+d_v)]    elem   kv = kv_b_proj(latent_normed), head-major: k_nope | v
  kCos,               // [S, d_r]            elem   cos table (bf16-rounded in bf16 mode; DeepseekV2: [S, d_r/2] f32)
  kSin,               // [S, d_r]            elem   sin table
  kQueryStates,       // [n, S, d_qk]        elem   HF query_states (rope half de-interleaved)
  kKeyStates,         // [n, S, d_qk]        elem   HF key_states
  kValueStates,       // [n, S, d_v]         elem   HF value_states
  kAttnContext,       // [S, n*d_v]          elem   attn_context = P.V merged over heads (o_proj input)
  kAttnOutput,        // [S, H]              elem   attn_output = o_proj(attn_context)
  kHeadScores,        // [n, S]              double attention mass per head and key
  kMassPartials,      // [n, C, S]           double the mass of each chunk of query tiles (C = attention_mass_chunks)
  kSlotCount
};

struct WorkspaceSlot {
  std::string name;
  int64_t elements = 0;
  int64_t elem_bytes = 0;
  int64_t offset = 0;  // bytes from the workspace start, multiple of kWorkspaceAlign
  int64_t bytes() const { return elements * elem_bytes; }
};

struct WorkspaceLayout {
  std::vector<WorkspaceSlot> slots;  // indexed by Slot
  int64_t total_bytes = 0;
};

struct WorkspaceDims {
  int64_t seq_len = 0, hidden_size = 0, heads = 0, q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int64_t elem_bytes = 4;  // 4 = fp32, 2 = bf16
};

// The dimensions of a forward over `seq_len` tokens of layer geometry `c`.
inline WorkspaceDims workspace_dims(const AttentionConfig& c, int64_t seq_len, int64_t elem_bytes) {
  WorkspaceDims d;
  d.seq_len = seq_len;
  d.hidden_size = c.hidden_size;
  d.heads = c.num_attention_heads;
  d.q_lora_rank = c.q_lora_rank;
  d.kv_lora_rank = c.kv_lora_rank;
  d.qk_nope_head_dim = c.qk_nope_head_dim;
  d.qk_rope_head_dim = c.qk_rope_head_dim;
  d.v_head_dim = c.v_head_dim;
  d.elem_bytes = elem_bytes;
  return d;
}

// a*b with a clear error instead of a wrapped int64 (S*S*n is the big one).
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::Unsupported, std::string("cuda: workspace size of ") + what + " overflows 64 bits");
  return r;
}

// C of the tiled attention for these dims (launch_geometry.hpp).
inline int64_t mass_chunks(const WorkspaceDims& d) {
  const AttentionTiles tiles = attention_tiles(d.qk_nope_head_dim + d.qk_rope_head_dim, d.v_head_dim);
  return attention_mass_chunks(d.heads, attention_query_tiles(d.seq_len, tiles));
}

// Bytes of the attn_weights [n, S, S] buffer (T), allocated only when the probabilities are kept.
inline int64_t attn_weights_bytes(const WorkspaceDims& d) {
  return checked_mul(checked_mul(d.heads, checked_mul(d.seq_len, d.seq_len, "attn_weights"), "attn_weights"),
                     d.elem_bytes, "attn_weights");
}

inline WorkspaceLayout workspace_layout(const WorkspaceDims& d) {
  const int64_t S = d.seq_len, H = d.hidden_size, n = d.heads;
  const int64_t d_qk = d.qk_nope_head_dim + d.qk_rope_head_dim;
  struct Item { const char* name; int64_t elements; int64_t elem_bytes; };
  const int64_t e = d.elem_bytes;
  const Item items[kSlotCount] = {
      {"hidden_states", checked_mul(S, H, "hidden_states"), e},
      {"q_a", checked_mul(S, d.q_lora_rank, "q_a"), e},
      {"q_a_normed", checked_mul(S, d.q_lora_rank, "q_a_normed"), e},
      {"q", checked_mul(S, checked_mul(n, d_qk, "q"), "q"), e},
      {"compressed_kv", checked_mul(S, d.kv_lora_rank + d.qk_rope_head_dim, "compressed_kv"), e},
      {"latent_normed", checked_mul(S, d.kv_lora_rank, "latent_normed"), e},
      {"kv", checked_mul(S, checked_mul(n, d.qk_nope_head_dim + d.v_head_dim, "kv"), "kv"), e},
      {"cos", checked_mul(S, d.qk_rope_head_dim, "cos"), e},
      {"sin", checked_mul(S, d.qk_rope_head_dim, "sin"), e},
      {"query_states", checked_mul(n, checked_mul(S, d_qk, "query_states"), "query_states"), e},
      {"key_states", checked_mul(n, checked_mul(S, d_qk, "key_states"), "key_states"), e},
      {"value_states", checked_mul(n, checked_mul(S, d.v_head_dim, "value_states"), "value_states"), e},
      {"attn_context", checked_mul(S, checked_mul(n, d.v_head_dim, "attn_context"), "attn_context"), e},
      {"attn_output", checked_mul(S, H, "attn_output"), e},
      {"head_scores", checked_mul(n, S, "head_scores"), 8},
      {"mass_partials", checked_mul(checked_mul(n, mass_chunks(d), "mass_partials"), S, "mass_partials"), 8},
  };
  WorkspaceLayout L;
  int64_t offset = 0;
  for (const Item& it : items) {
    WorkspaceSlot s{it.name, it.elements, it.elem_bytes, offset};
    const int64_t padded = checked_mul((s.bytes() + kWorkspaceAlign - 1) / kWorkspaceAlign, kWorkspaceAlign, it.name);
    if (__builtin_add_overflow(offset, padded, &offset))
      fail(ErrorKind::Unsupported, std::string("cuda: workspace offset of ") + it.name + " overflows 64 bits");
    L.slots.push_back(s);
  }
  L.total_bytes = offset;
  return L;
}

}  // namespace mla::cuda
