// mla/rope.hpp — RoPE / YaRN frequencies and the softmax scale (docs/math.md §4, §5).
//
// Shared by every backend so they all use the same fp32 `inv_freq` buffer HF uses.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/config.hpp"

namespace mla {

// HF `_compute_yarn_parameters` / `_compute_default_rope_parameters`, evaluated in float32
// exactly as torch does (pos_freqs = base ** (arange(0, dim, 2).float() / dim) ...).
// Returns qk_rope_head_dim/2 values (fp32 values).
std::vector<float> rope_inv_freq(const AttentionConfig& cfg);
// The same formulas in double precision (for documentation tables and tests).
std::vector<double> rope_inv_freq_double(const AttentionConfig& cfg);

// YaRN correction range after truncate/clamp (low, high) — for reports and tests.
struct YarnRange { double low_raw, high_raw, low, high; };
YarnRange yarn_correction_range(const AttentionConfig& cfg);

// cos/sin multiplier: 1.0 for plain RoPE; for YaRN attention_factor or
// get_mscale(f, mscale)/get_mscale(f, mscale_all_dim) (1.0 for every Kimi config).
double rope_attention_factor(const AttentionConfig& cfg);

// softmax scale = qk_head_dim^-0.5 * m^2, m = 0.1*mscale_all_dim*ln(factor)+1 (yarn with
// mscale_all_dim truthy and factor > 1), evaluated in double like the Python float.
double softmax_scale(const AttentionConfig& cfg);

// cos/sin tables as HF's rotary module builds them in fp32:
//   freqs[s, i] = fp32(inv_freq[i] * fp32(position[s]))     i < d_r/2
//   emb = cat(freqs, freqs) -> [S, d_r];  cos = cos(emb) * attention_factor, sin likewise.
// Returned row-major [S, d_r] as fp32 values (rounded from a double-precision cos/sin).
struct RopeTables {
  int64_t seq_len = 0, rope_dim = 0;
  std::vector<float> cos, sin;  // [S, d_r]
};
RopeTables rope_tables(const AttentionConfig& cfg, const std::vector<int64_t>& positions);

// HF's position_ids for `count` tokens after `offset` cached ones: offset .. offset+count-1.
std::vector<int64_t> position_ids(int64_t offset, int64_t count);

}  // namespace mla
