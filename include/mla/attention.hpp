// mla/attention.hpp — one layer of MLA attention (HF DeepseekV3Attention, eager) behind
// a backend interface: reference (double loops), cpu (Eigen), cuda (cuBLAS + kernels).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/precision.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla {

enum class Mask { Causal, None };       // causal: key t visible to query s iff t <= s
enum class BackendKind { Auto, Reference, Cpu, Cuda };
// The cpu backend's GEMM engine for the projections (docs/cpu-gemm.md): auto = oneDNN where it
// has a brgemm kernel for the precision on this CPU, else Eigen (+ OpenBLAS sgemm).
enum class Gemm { Auto, Eigen, OneDnn };

const char* mask_name(Mask m);            // "causal" | "none"
const char* backend_name(BackendKind b);  // "auto" | "reference" | "cpu" | "cuda"
const char* gemm_name(Gemm g);            // "auto" | "eigen" | "onednn"
// What --gemm auto runs on this machine, per precision, e.g.
// "fp32: oneDNN 2.6.3, brg:avx512_core; bf16: oneDNN 2.6.3, brg:avx512_core_bf16".
std::string gemm_auto_summary();

struct ForwardOptions {
  Mask mask = Mask::Causal;
  Precision precision = Precision::FP32;
  double latent_norm_eps = 1e-6;   // q_a_layernorm / kv_a_layernorm eps (HF: 1e-6)
  int64_t position_offset = 0;     // position ids = offset .. offset+S-1
  bool keep_attn_weights = false;  // fill ForwardResult::attn_weights [n, S, S]
  bool keep_states = false;        // fill query/key/value_states
  bool keep_latent_cache = false;  // fill ForwardResult::latent_cache
  bool allow_tf32 = false;         // cuda fp32 only
  int threads = 0;                 // cpu: 0 = all cores
  Gemm gemm = Gemm::Auto;          // cpu: projection GEMM engine
  // Long work reports progress here: (stage, units done, total units), e.g. ("attention
  // blocks", 12, 4096). Called by the forward's threads one at a time; empty = no reports.
  std::function<void(const char* stage, int64_t done, int64_t total)> progress;
};

// Reorders the cpu backend's oneDNN engines ran outside their matmul primitives
// (docs/cpu-gemm.md §3, §9). Only head_operands is by design; the other two are fallbacks that
// cost time on every call they fire in and are expected to stay 0.
struct OnednnReorders {
  int64_t weights = 0;        // a projection slice's W packed by a oneDNN reorder at prepare (a
                              // layout the engine's own packer does not know)
  int64_t head_operands = 0;  // a head's keys or one group of its values packed into the blocked
                              // layout (once per head, query pass and operand)
  int64_t per_block = 0;      // a block's part of a packed operand reordered because the block's
                              // primitive chose another layout (per block and product)
  OnednnReorders operator-(const OnednnReorders& o) const {
    return {weights - o.weights, head_operands - o.head_operands, per_block - o.per_block};
  }
};

// The cpu backend's projection engine after prepare(): engine "oneDNN 2.6.3" or "Eigen 3.4.0 +
// OpenBLAS sgemm", the kernel it runs ("brg:avx512_core_bf16", "OpenBLAS sgemm"), and why it
// was chosen. Empty for the other backends.
struct GemmInfo {
  std::string requested;  // "auto" | "eigen" | "onednn"
  std::string engine;
  std::string kernel;
  std::string reason;
  // Where the attention's per-head products run: Gemm::OneDnn with oneDNN projections whose
  // operands have the run's precision, else Gemm::Eigen (docs/cpu-gemm.md §1).
  Gemm attention_products = Gemm::Eigen;
  // The oneDNN kernel the kernel check refused and why (src/cpu/kernel_check.hpp; the run fell
  // back as `reason` says); "" when every kernel passed or none was checked.
  std::string refused;
  // The reorders of the process's oneDNN engines since the backend's prepare() began (counted
  // for the whole process: exact when one backend runs at a time, as in every command); all 0
  // on the Eigen engine.
  OnednnReorders reorders;
};
// "oneDNN 2.6.3, brg:avx512_core_bf16" or "Eigen 3.4.0 + OpenBLAS sgemm" (the kernel is named
// once); "" when `engine` is empty.
std::string gemm_label(const std::string& engine, const std::string& kernel);

// The stages every backend's forward records in ForwardResult::stage_seconds, in this order,
// each named after the stage function that runs it (the cuda backend first records "upload",
// its host-to-device copy of the input):
//   q_path   q from the hidden states         kv_path  compressed_kv, latent_normed, kv
//   rope     rotary halves of q and k_pe      attend   scores, mask, softmax, P.V, H2O sums
//   o_proj   attn_output                      export   the ForwardResult (widening, downloads)
inline constexpr const char* kForwardStages[] = {"q_path", "kv_path", "rope", "attend", "o_proj", "export"};

struct ForwardResult {
  // Values are stored in double whatever the backend computed in; `computed_in_double`
  // tells whether they are exact doubles (reference fp32 mode) or widened fp32/bf16 values.
  bool computed_in_double = false;
  TensorD attn_output;   // [S, H]
  TensorD attn_weights;  // [n, S, S] post-softmax probabilities (if keep_attn_weights)
  TensorD query_states;  // [n, S, d_n + d_r] rope half in HF's de-interleaved order (if keep_states)
  TensorD key_states;    // [n, S, d_n + d_r]
  TensorD value_states;  // [n, S, d_v]
  // What an MLA engine caches per token (docs/decode.md): kv_a_layernorm(c) | k_pe roped,
  // the rope half in HF's de-interleaved order (the order of key_states' rope half).
  TensorD latent_cache;  // [S, r_kv + d_r] (if keep_latent_cache)
  std::vector<double> token_scores;  // [S]     attention mass received, summed over heads and queries
  std::vector<double> head_scores;   // [n * S] the same per head (row h = head h)
  StageSeconds stage_seconds;  // in execution order
};

// What an MLA engine caches per token, assembled the same way by every backend:
// latent_cache [S, r_kv + d_r] = latent_normed [S, r_kv] | k_pe_roped [S, d_r] (row-major
// inputs, widened exactly to double).
TensorD latent_cache_rows(const float* latent_normed, const float* k_pe_roped, int64_t S, int64_t r_kv, int64_t d_r);
TensorD latent_cache_rows(const double* latent_normed, const double* k_pe_roped, int64_t S, int64_t r_kv, int64_t d_r);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // "reference" | "cpu" | "cuda"
  virtual std::string description() const = 0;  // e.g. "Eigen 3.4 + OpenBLAS, 2 threads"
  virtual GemmInfo gemm_info() const { return {}; }  // cpu backend: its projection engine
  // Converts/uploads the layer's weights once (widening, bf16 rounding, device copy).
  virtual void prepare(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) = 0;
  // The same, but the backend may keep `w` and read weights in place instead of copying them
  // (the cpu backend: weights an engine takes as they are, docs/cpu-gemm.md §5); what `run`,
  // `sweep`, `demo` and `decode` call after loading a layer.
  virtual void prepare_shared(const AttentionConfig& cfg, std::shared_ptr<const LayerWeights> w,
                              const ForwardOptions& opt) {
    prepare(cfg, *w, opt);
  }
  // hidden: [S, H] fp32 values (rounded to bf16 first in bf16 mode, as HF's bf16 input is).
  virtual ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) = 0;
};

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend();  // throws Error(Cuda) when no usable GPU / not built
bool cuda_available(std::string* why = nullptr);  // built with CUDA and a device is usable
// Free memory of device 0 in bytes (cudaMemGetInfo), or -1 without a usable device. The
// memory plan (mla/memory_plan.hpp) compares its device estimate with it.
int64_t cuda_free_memory();
// Auto: cuda if available, else cpu.
std::unique_ptr<Backend> make_backend(BackendKind kind);

}  // namespace mla
