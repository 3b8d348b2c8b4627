// mla/decode.hpp — decode-time KV-cache eviction on the MLA latent cache: policies compared
// by what their eviction does to one layer's attention output, step by step (docs/decode.md).
//
// The model (docs/decode.md §1 gives the exact definitions; tests/unit/test_decode.cpp checks them):
//   hidden states rows 0..P-1 are the prompt (causal prefill), rows P..T-1 are N decode steps.
//   The latent cache holds per token kv_a_layernorm(c) [r_kv] | roped k_pe [d_r].
//   Step i (token x = P + i): x joins the cache; its query attends over the cache; then the
//   policy evicts while the cache holds more than the budget K. Sinks (positions < sinks) and
//   the recent window (positions > x - recent) are never evicted, except by full and oracle.
//   After the prefill the cache is cut to K by the policy's own scores through h2o_select.
//   On equal scores the older (lower) position is evicted first.
//
// Layers of the implementation:
//   DecodeInputs   what one layer's backend computes once (queries, latent cache, prefill scores)
//   DecodeKernel   the attention arithmetic of one decode step: absorbed or naive, in the
//                  reference (reference/mla_decode.cpp, double loops) or the cpu backend
//                  (src/decode/cpu_decode_kernel.cpp, Eigen/BLAS)
//   run_decode     the step loop and the policies (src/decode/decode_loop.cpp); it only sees
//                  attention probabilities, so tests drive it with hand-made ones.
//
// Shape legend (config names): T = P + N rows, n = num_attention_heads, H = hidden_size,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r, K = cache budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/tensor.hpp"

namespace mla {

enum class DecodeAttention { Absorbed, Naive };
const char* decode_attention_name(DecodeAttention a);  // "absorbed" | "naive"

enum class Policy { Full, H2O, H2ONormalized, Tova, Streaming, SnapKV, Random, Oracle };
const char* policy_name(Policy p);  // "full", "h2o", "h2o-normalized", "tova", "streaming", "snapkv", "random", "oracle"
// Error(InvalidArgument) naming the unknown policy and listing the known ones.
Policy parse_policy(std::string_view name);
const std::vector<Policy>& all_policies();  // in the order above

struct DecodeOptions {
  int64_t prompt_len = 0;         // P >= 1
  int64_t steps = 0;              // N >= 1, P + N <= T
  std::vector<int64_t> budgets;   // K, strictly increasing, each > sinks + recent
  std::vector<Policy> policies;   // no duplicates; full is always computed (the reference)
  int64_t sinks = 4;              // positions [0, sinks) never evicted
  int64_t recent = 32;            // positions (x - recent, x] never evicted at step x
  int64_t snapkv_window = 32;     // snapkv: prompt queries that vote
  int64_t snapkv_pool = 7;        // snapkv: max-pool width (odd, centred)
  uint64_t seed = 0;              // random policy
};
// The bad inputs as Error(InvalidArgument) with one clear line: P >= T or P < 1,
// N = 0 or P + N > T, no budget, K <= sinks + recent, budgets not increasing, duplicate policy.
// Every sum is overflow-safe (a flag near 2^63 is an error, never a wrapped pass).
void check_decode_options(const DecodeOptions& opt, int64_t total_rows);
// The checks of check_decode_options that do not need the input's row count, for the flags
// right after they are read (before any work).
void check_decode_flags(const DecodeOptions& opt);

// ---- inputs of one layer (do not depend on eviction: computed once) ---------------------

struct DecodeInputs {
  int64_t prompt_len = 0;               // P
  int64_t query_begin = 0;              // first row whose query is held (P - snapkv window)
  TensorD latent_cache;                 // [T, r_kv + d_r]  kv_a_layernorm(c) | k_pe roped (HF order)
  TensorD query_states;                 // [n, T - query_begin, d_qk]  q_nope | q_pe roped (HF order)
  std::vector<double> prefill_scores;   // [P] attention mass each prompt token received in the
                                        //     causal prefill, summed over heads and queries
  GemmInfo gemm;                        // cpu stages: the projection engine that ran (--gemm,
                                        //     docs/cpu-gemm.md); empty for another backend
  int64_t total_rows() const { return latent_cache.empty() ? 0 : latent_cache.dim(0); }
};

// Two forwards of `backend` (prepared with the layer): the causal prefill over rows [0, P)
// (prefill scores, latent cache rows < P), and rows [query_begin, T) at their positions
// (queries, latent cache rows >= P). hidden: [T, H]. opt: the run's mask must be causal.
DecodeInputs compute_decode_inputs(Backend& backend, const TensorF& hidden, int64_t prompt_len,
                                   int64_t query_window, const ForwardOptions& opt);
// The same from the cpu backend's stage functions in one pass (q/kv/rope over all T rows, the
// prefill's attention for its scores, no o_proj): what `mla-h2o decode --backend cpu` uses.
DecodeInputs compute_cpu_decode_inputs(const AttentionConfig& cfg, const LayerWeights& w, const TensorF& hidden,
                                       int64_t prompt_len, int64_t query_window, const ForwardOptions& opt);

// ---- the attention arithmetic of a decode step ------------------------------------------

// Slots: one output stream per (policy, budget) run; slot 0 is the full cache.
class DecodeKernel {
 public:
  virtual ~DecodeKernel() = default;
  virtual int64_t heads() const = 0;  // n
  // Computes the logits of query row x against every token 0..x (policy independent).
  virtual void begin_query(int64_t x) = 0;
  // Softmax of those logits over `cache` (ascending positions <= x) and the context of that
  // attention. probs: [n * |cache|], row h = head h: the probabilities the attention
  // multiplies the values with. slot >= 0 keeps the context as output row `row` of `slot`.
  virtual void attend(std::span<const int64_t> cache, std::vector<double>& probs, int64_t slot, int64_t row) = 0;
  // After every attend of query row x.
  virtual void end_query() {}
  // attn_output [rows, H] of one slot (o_proj of its contexts), after the last step.
  virtual TensorD outputs(int64_t slot) = 0;
};

struct DecodeKernelSpec {
  DecodeAttention attention = DecodeAttention::Absorbed;
  Precision precision = Precision::FP32;
  int64_t slots = 1;  // output streams
  int64_t rows = 1;   // rows per stream (N)
  int threads = 0;    // cpu: 0 = all cores
};

// cpu backend (Eigen/BLAS, fp32 or the bf16 rounding of docs/decode.md §3).
std::unique_ptr<DecodeKernel> make_cpu_decode_kernel(const AttentionConfig& cfg, const LayerWeights& w,
                                                     const DecodeInputs& in, const DecodeKernelSpec& spec);
// The reference (reference/mla_decode.cpp): double loops, fp32 = exact math. It keeps
// references to cfg, w and in (they must outlive it); the cpu kernel copies what it needs.
std::unique_ptr<DecodeKernel> make_reference_decode_kernel(const AttentionConfig& cfg, const LayerWeights& w,
                                                           const DecodeInputs& in, const DecodeKernelSpec& spec);

// ---- the step loop and the policies ------------------------------------------------------

struct DecodeStep {
  int64_t step = 0;         // i
  int64_t position = 0;     // x = P + i
  int64_t cache_len = 0;    // tokens the query attended over (x included)
  int64_t evicted = -1;     // position evicted after the step (-1: none)
  double rel_error = 0;     // ||o - o_full|| / ||o_full|| on attn_output
  double cosine = 1;        // cos(o, o_full)
  double mass_recall = 1;   // mean over heads of the full-cache attention mass on the cache
};

struct PolicyTrace {
  Policy policy = Policy::Full;
  int64_t budget = 0;                         // K (the run's budget also for full)
  std::vector<int64_t> prefill_kept;          // prompt positions kept by the prefill cut (ascending)
  std::vector<DecodeStep> steps;              // [N]
  std::vector<std::vector<int64_t>> attended; // [N] the cache each query attended over (ascending)
  TensorD attn_output;                        // [N, H]
};

struct DecodeResult {
  std::vector<PolicyTrace> traces;  // per budget (ascending), per policy (options order)
  TensorD full_output;              // [N, H] the full cache's attn_output
};

// What run_decode needs besides the kernel.
struct PrefillView {
  int64_t prompt_len = 0;              // P
  std::vector<double> token_scores;    // [P] causal prefill mass (h2o)
};

// Output streams run_decode uses: 1 (full) + budgets x (policies other than full).
int64_t decode_slots(const DecodeOptions& opt);

// The step loop. `progress` (may be empty) is called after every step with (done, total).
DecodeResult run_decode(const DecodeOptions& opt, const PrefillView& prefill, DecodeKernel& kernel,
                        const std::function<void(int64_t, int64_t)>& progress = {});

// Per (policy, budget) summary, as summary.csv and the stdout table print it.
struct DecodeSummary {
  Policy policy = Policy::Full;
  int64_t budget = 0;
  double mean_rel_error = 0, p95_rel_error = 0, max_rel_error = 0;
  double mean_cosine = 1, mean_mass_recall = 1, mean_cache_len = 0;
};
std::vector<DecodeSummary> summarize(const DecodeResult& r);

// ---- outputs (src/decode/decode_report.cpp) -------------------------------------------------
// decode.csv:  policy,budget,step,position,cache_len,evicted,rel_error,cosine,mass_recall
std::string decode_csv(const DecodeResult& r);
// summary.csv: policy,budget,mean_rel_error,p95_rel_error,max_rel_error,mean_cosine,mean_mass_recall,mean_cache_len
std::string decode_summary_csv(const std::vector<DecodeSummary>& s);
std::string decode_summary_table(const std::vector<DecodeSummary>& s);
// rel_error per step, one line per policy (the budget `budget`).
std::string decode_svg(const DecodeResult& r, int64_t budget, const std::string& title);
// mean rel_error against K, one line per policy (needs >= 2 budgets).
std::string budget_svg(const std::vector<DecodeSummary>& s, const std::string& title);

}  // namespace mla
