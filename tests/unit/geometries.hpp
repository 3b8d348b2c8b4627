// tests/unit/geometries.hpp — named test geometries and deterministic random layers, built in
// memory (no checkpoint file needed), shared by every backend's tests.
//
// Geometries (AttentionConfig values; "tiny*" variants change one thing each):
//   tiny            H 32, n 2, r_q 24, r_kv 16, d_n 8, d_r 8, d_v 8; Kimi-style YaRN
//                   (theta 5e4, factor 64, original 4096, beta 32/1, mscale 1/1), rope_interleave
//   q_lora_null     tiny with q_lora_rank null (q_proj [n*d_qk, H], no q norm)
//   odd             H 72, n 3, r_q 20, r_kv 40, d_n 12, d_r 6, d_v 10 (nothing a power of two)
//   rope_null       tiny with rope_scaling null (plain RoPE, scale d_qk^-0.5)
//   no_interleave   tiny with rope_interleave false (plain rotate_half on the raw vector)
//   yarn_beta_1_1   tiny with beta_fast 1, beta_slow 1 (K2-0905 / K2-Thinking ramp)
//   bias            tiny with attention_bias true (q_a_proj, kv_a_proj_with_mqa, o_proj biases)
//   bias_q_lora_null  tiny with attention_bias true and q_lora_rank null (kv_a_proj_with_mqa and
//                   o_proj biases; HF's q_proj never has one)
//   v2              tiny as DeepseekV2 (V2-Lite's conventions): q_proj, yarn factor 40 with
//                   mscale = mscale_all_dim = 0.707, RoPE as complex pairs in place, in fp32
//   kimi            the full Kimi K2.6 attention geometry (K2.5 values, docs/math.md §1)
// All tiny geometries carry rms_norm_eps 1e-5 (like K2.5) so that a backend that wrongly uses
// it for the latent norms (HF uses 1e-6, ForwardOptions::latent_norm_eps) is caught.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/tensor.hpp"

namespace mla::test {

struct Geometry {
  std::string name;     // "tiny", "odd", ...
  std::string what;     // one line: what this geometry exercises
  AttentionConfig cfg;
};

// The small geometries above (everything except "kimi"), cheap enough for every test.
const std::vector<Geometry>& small_geometries();
// Any geometry by name, including "kimi"; throws std::invalid_argument for an unknown name.
AttentionConfig geometry(const std::string& name);
// "H=32 n=2 r_q=24 r_kv=16 d_n=8 d_r=8 d_v=8 rope=yarn(f64,b32/1) interleave bias=0" (ggml vars())
std::string vars(const AttentionConfig& cfg);

// One layer's weights drawn like a trained layer's, reproducibly from `seed` (mla::Rng, one
// stream per tensor), and rounded to bf16 values so that fp32 and bf16 runs share the exact
// weights (as a BF16 checkpoint does):
//   Linear weights [out, in]: normal(0, 1/sqrt(in))    (keeps activations O(1))
//   norm weights [N]:         1 + 0.1 * normal(0, 1)
//   biases [out]:             0.02 * normal(0, 1)       (attention_bias only)
LayerWeights random_layer_weights(const AttentionConfig& cfg, uint64_t seed);

// Hidden states [S, H] ~ normal(0, 1), rounded to bf16 values (a bf16 model's input).
TensorF random_hidden(int64_t seq_len, int64_t hidden_size, uint64_t seed);

}  // namespace mla::test
