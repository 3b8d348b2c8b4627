// mla/decode.hpp — decode-time KV-cache eviction on the MLA latent cache: policies compared
// by what their eviction does to one layer's attention output, step by step (docs/decode.md).
//
// The model (docs/decode.md §1 gives the exact definitions; tests/unit/test_decode.cpp checks them):
//   hidden states rows 0..P-1 are the prompt (causal prefill), rows P..T-1 are N decode steps.
//   The latent cache holds per token kv_a_layernorm(c) [r_kv] | roped k_pe [d_r].
//   Step i (token x = P + i): x joins the cache; its query attends over the cache; then the
//   policy evicts until it holds at most K tokens. The policies (mla/policy.hpp, one
//   CacheManager per policy and budget) define what is protected, how the prompt is cut to K
//   after the prefill, and the tie rule.
//
// Layers of the implementation:
//   DecodeInputs   what one layer's backend computes once (queries, latent cache, prefill mass)
//   TokenFeatures  per-token quantities some policies read (src/kv_cache/token_features.cpp)
//   DecodeKernel   the attention arithmetic of one decode step: absorbed or naive, in the
//                  reference (reference/mla_decode.cpp, double loops) or the cpu backend
//                  (src/cpu/cpu_decode.cpp, Eigen/BLAS); every row of a product that could mix
//                  runs is computed by itself, so a run's figures do not depend on the others
//   run_decode     the step loop (src/decode/decode_loop.cpp): the managers and the metrics; it
//                  only sees attention probabilities, so tests drive it with hand-made ones.
//
// Shape legend (config names): T = P + N rows, n = num_attention_heads, H = hidden_size,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r, K = cache budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/policy.hpp"
#include "mla/provenance.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla {

enum class DecodeAttention { Absorbed, Naive };
const char* decode_attention_name(DecodeAttention a);  // "absorbed" | "naive"

struct DecodeOptions {
  int64_t prompt_len = 0;                 // P >= 1
  int64_t steps = 0;                      // N >= 1, P + N <= T
  std::vector<int64_t> budgets;           // K, strictly increasing
  std::vector<PolicySettings> policies;   // distinct labels; full is always computed (the reference)
  int64_t layer = 0, num_layers = 1;      // pyramidkv: the layer's budget (pyramid_budget)
  bool keep_outputs = false;              // PolicyTrace::attn_output (--dump-tensors); else only the metrics
};
// The bad inputs as Error(InvalidArgument) with one clear line: P >= T or P < 1, N = 0 or
// P + N > T, no budget, budgets not increasing, no policy, a label twice, a budget that
// cannot hold what a policy protects. Every sum is overflow-safe (a flag near 2^63 is an
// error, never a wrapped pass).
void check_decode_options(const DecodeOptions& opt, int64_t total_rows);
// The checks of check_decode_options that need neither the input's row count nor the layer
// (pyramidkv's budget), for the flags right after they are read (before any work).
void check_decode_flags(const DecodeOptions& opt);
// The budget (policy, K) holds on this layer (mla/policy.hpp's layer_budget at opt.layer).
int64_t layer_budget(const PolicySettings& s, int64_t budget, const DecodeOptions& opt);
// The number of the last prompt queries whose attention the policies read (policy_observation_window).
int64_t prompt_query_window(const DecodeOptions& opt);

// ---- inputs of one layer (do not depend on eviction: computed once) ---------------------

// The pre-RoPE queries of prompt rows [first, P) per head (expected-attention's statistics):
// mean [n, d_qk] and covariance [n, d_qk, d_qk] = (1/rows) sum (q - mean)(q - mean)^T, the
// rope half in HF's order (DeepseekV3: de-interleaved; V2: pairs in place), not rotated.
struct QueryStatistics {
  int64_t first = 0, rows = 0;
  std::vector<double> mean, cov;
  // [d_r, d_r] row-major: the mean RoPE rotation over the `future` positions after the prompt
  // (mean_rope_rotation), when the caller computed it once for many layers or runs; empty:
  // compute_token_features computes it
  std::vector<double> future_rotation;
  bool empty() const { return rows == 0; }
};
// The mean of RoPE's rotation matrix R(p) on the rope half (in HF's order) over positions
// [begin, begin + count), [d_r, d_r] row-major: expected-attention's R-bar. It depends only on
// the rope config, begin and count (not on the layer or the run), and costs O(count d_r): at
// future = 10^8 minutes, so `progress(done, count)` is told after every 4096 positions.
std::vector<double> mean_rope_rotation(const AttentionConfig& cfg, int64_t begin, int64_t count,
                                       const std::function<void(int64_t, int64_t)>& progress = {});
// q: [S, n*d_qk] roped queries (HF order, head-major) of positions `positions`; the rows
// [first, S) are un-rotated (their cos/sin of rope_tables) and summarised.
QueryStatistics prerope_query_statistics(const AttentionConfig& cfg, const float* q, int64_t rows,
                                         const std::vector<int64_t>& positions, int64_t first);
// The same with the queries read one (row, head) at a time: query(s, h, out) writes head h's
// d_qk roped values of row s (first <= s < rows) to out; the statistics are the same numbers.
using QueryRowReader = std::function<void(int64_t row, int64_t head, float* out)>;
QueryStatistics prerope_query_statistics(const AttentionConfig& cfg, const QueryRowReader& query, int64_t rows,
                                         const std::vector<int64_t>& positions, int64_t first);

struct DecodeInputsRequest {
  int64_t prompt_len = 0;       // P
  int64_t query_window = 0;     // queries held from row P - window on (prompt_query_window)
  int64_t statistics_from = -1; // >= 0: QueryStatistics of prompt rows [statistics_from, P)
};

struct DecodeInputs {
  int64_t prompt_len = 0;               // P
  int64_t query_begin = 0;              // first row whose query is held (P - query window)
  TensorD latent_cache;                 // [T, r_kv + d_r]  kv_a_layernorm(c) | k_pe roped (HF order)
  TensorD query_states;                 // [n, T - query_begin, d_qk]  q_nope | q_pe roped (HF order)
  std::vector<double> head_mass;        // [n, P] attention mass each prompt token received in the
                                        //     causal prefill per head (ForwardResult::head_scores)
  QueryStatistics query_statistics;     // when asked for (statistics_from >= 0)
  GemmInfo gemm;                        // cpu stages: the projection engine that ran (--gemm,
                                        //     docs/cpu-gemm.md); empty for another backend
  std::string backend;                  // what computed them: "cpu" | "reference"
  std::string description;              // its engines and threads, as they ran
  int64_t total_rows() const { return latent_cache.empty() ? 0 : latent_cache.dim(0); }
};

// Error(InvalidArgument) unless 1 <= P < T and statistics_from < P.
void check_decode_inputs_request(const DecodeInputsRequest& req, int64_t total_rows);
// Two forwards of `backend` (prepared with the layer): the causal prefill over rows [0, P)
// (prefill mass, latent cache rows < P), and rows [query_begin, T) at their positions
// (queries, latent cache rows >= P). hidden: [T, H]. opt: the run's mask must be causal.
DecodeInputs compute_decode_inputs(Backend& backend, const AttentionConfig& cfg, const TensorF& hidden,
                                   const DecodeInputsRequest& req, const ForwardOptions& opt);
// The same from the cpu backend's stage functions in one pass (q/kv/rope over all T rows, the
// prefill's attention for its mass, no o_proj): what `mla-h2o decode --backend cpu` uses.
DecodeInputs compute_cpu_decode_inputs(const AttentionConfig& cfg, const LayerWeights& w, const TensorF& hidden,
                                       const DecodeInputsRequest& req, const ForwardOptions& opt);

// The per-token features the policies of `needs` read (mla/policy.hpp TokenFeatures), from
// the latent cache [T, r_kv + d_r] and the layer's kv_b_proj and o_proj, the products on the
// fixed-order fp32 kernel and the norms and dots in double, every sum in a fixed order: the same
// bits for any `threads` (0 = all cores) and for a token computed among any other rows
// (docs/decode.md §2.2):
//   k_h,t = [W_UK^h c_t | k_pe_t], v_h,t = W_UV^h c_t;  key_norm = ||k_h,t||, value_norm = ||v_h,t||,
//   output_norm = ||W_O^h v_h,t|| (through the Gram matrix W_O^hT W_O^h);
//   expected_attention (kvpress ExpectedAttentionPress, stats = the pre-RoPE prompt queries'):
//     mu' = [mu_nope | R mu_pe], S' = B S B^T, B = diag(I, R), R = mean of RoPE's rotation over
//     positions [P, P + future); z_h,t = scale mu'.k + scale^2/2 k^T S' k; softmax over the
//     prompt tokens [sinks, P) per head (tokens >= P use the same normaliser).
TokenFeatures compute_token_features(const AttentionConfig& cfg, const LayerWeights& w, const TensorD& latent_cache,
                                     int64_t prompt_len, const FeatureNeeds& needs, const QueryStatistics& stats,
                                     int threads = 1);

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
  // What computes it (engines, the per-row kernel chosen for this CPU).
  virtual std::string description() const { return ""; }
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

// kvzip's context reconstruction on one layer (mla/policy.hpp reconstruction_chunks,
// docs/decode.md §2.2): for each chunk, the inputs of [context rows; the repeat's rows] by
// `inputs_of` (a causal prefill of the P context rows, the repeat's rows at positions P, P+1, ...,
// query window 1) and a kernel over them by `kernel_of` (rows: the repeat's); each repeat row i
// attends reconstruction_keys(c, P, i) and add_reconstruction_row takes its max into
// f.reconstruction [n, T] (f.heads, f.tokens set here). One layer's hidden [>= P, H] holds no row
// of the repeat's text, so the repeat is the context's own rows (the text rows left out).
using ReconstructionInputs = std::function<DecodeInputs(const TensorF& rows, const DecodeInputsRequest& req)>;
using ReconstructionKernel = std::function<std::unique_ptr<DecodeKernel>(const DecodeInputs& in, int64_t rows)>;
void add_decode_reconstruction(const TensorF& hidden, int64_t prompt_len, int64_t positions, int64_t heads,
                               const ReconstructionInputs& inputs_of, const ReconstructionKernel& kernel_of, TokenFeatures& f);

// ---- the step loop ------------------------------------------------------------------------

struct DecodeStep {
  int64_t step = 0;             // i
  int64_t position = 0;         // x = P + i
  int64_t cache_len = 0;        // tokens the query attended over (x included)
  int64_t held = 0;             // tokens held after the step's eviction (<= the budget)
  int64_t evicted = -1;         // the first position evicted after the step (-1: none)
  double rel_error = 0;         // ||o - o_full|| / ||o_full|| on attn_output
  double residual_error = 0;    // ||o - o_full|| / ||h_x|| (the residual stream's row; NaN if unknown)
  double cosine = 1;            // cos(o, o_full)
  double mass_recall = 1;       // mean over heads of the full-cache attention mass on the cache
  double mass_recall_min = 1;   // the worst head's
  double mass_recall_p5 = 1;    // the 5th percentile over heads (nearest rank)
  double visible = 1;           // cache_len / (x + 1): the recall of flat attention
};

struct PolicyTrace {
  PolicySettings policy;                      // preset, label and settings
  int64_t budget = 0;                         // K (the run's budget also for full)
  int64_t layer_budget = 0;                   // what it holds on this layer (pyramidkv) = K otherwise
  std::vector<int64_t> prefill_kept;          // prompt positions kept by the prefill cut (ascending)
  std::vector<DecodeStep> steps;              // [N]
  TensorD attn_output;                        // [N, H] only with DecodeOptions::keep_outputs
};

struct DecodeResult {
  std::vector<PolicyTrace> traces;  // per budget (ascending), per policy (options order; full first)
  TensorD full_output;              // [N, H] the full cache's attn_output (keep_outputs)
};

// What run_decode reads besides the kernel.
struct DecodeContext {
  std::vector<double> head_mass;            // [n, P] causal prefill mass per head
  const TokenFeatures* features = nullptr;  // what feature_needs(opt.policies) asks for
  std::vector<double> residual_norm;        // [N] ||h|| of the residual stream's rows P..P+N-1 (empty: NaN)
};

// Output streams run_decode uses: 1 (full) + budgets x (policies other than full).
int64_t decode_slots(const DecodeOptions& opt);

// Called after each policy's attention with (trace index, step, the positions it attended).
using AttendObserver = std::function<void(size_t, int64_t, std::span<const int64_t>)>;

// The step loop: a CacheManager per (budget, policy), the kernel's attention for each. The
// prompt queries the policies read are computed once and shared. `progress` (may be empty)
// is called after every step with (done, total).
DecodeResult run_decode(const DecodeOptions& opt, const DecodeContext& ctx, DecodeKernel& kernel,
                        const std::function<void(int64_t, int64_t)>& progress = {}, const AttendObserver& observe = {});

// Per (policy, budget) summary, as summary.csv and the stdout table print it: means over the
// steps (p95 and max: nearest rank over the steps).
struct DecodeSummary {
  std::string policy;  // label
  int64_t budget = 0;
  double mean_rel_error = 0, p95_rel_error = 0, max_rel_error = 0, mean_residual_error = 0;
  double mean_cosine = 1, mean_mass_recall = 1, mean_mass_recall_min = 1, mean_mass_recall_p5 = 1;
  double mean_visible = 1;      // flat baseline: tokens attended / tokens visible
  double mean_cache_len = 0;    // tokens attended
  double mean_held = 0;         // tokens held after the step (what the budget bounds)
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
// mean rel_error against the measured mean number of tokens held, one line per policy
// (needs >= 2 budgets).
std::string budget_svg(const std::vector<DecodeSummary>& s, const std::string& title);

// What report.json and the stdout header say besides the results.
struct DecodeRunInfo {
  std::string checkpoint;
  std::string synthetic_weights;         // Checkpoint::synthetic_origin(): "" for real weights
  int64_t layer = 0;
  std::string input;                     // the input's description
  std::string residual_source;           // what residual_error divides by
  int64_t rows = 0;                      // T rows of input
  std::optional<std::vector<FileDigest>> model_files;  // the model files read, with their sha256
  std::optional<AttentionConfig> config;
  std::string precision, attention, latent_norm_eps_mode;
  double latent_norm_eps = 0;
  std::string backend_requested, backend, backend_description;  // what computed the inputs
  GemmInfo gemm;                         // cpu: the projection engine of the prefill
  std::string decode_kernel;             // DecodeKernel::description()
  int threads = 0;                       // as asked (0 = all cores)
  std::vector<std::string> caveats;      // what the figures do not mean (synthetic weights, inputs)
  std::vector<std::string> notes;
  StageSeconds stages;                   // in execution order
  int64_t memory_planned_bytes = -1, memory_available_bytes = -1, memory_peak_rss_bytes = -1;
  int64_t memory_process_bytes = -1;  // of the plan, the process itself (process_allowance_bytes)
  std::string memory_planned_phase, memory_available_source;
  std::vector<std::string> files;
};
// report.json: format, command, versions, checkpoint, synthetic_weights, caveats, layer, input,
// config, options (precision, attention, P, N, budgets, policies with their settings),
// backend, summary, timing_s {total, stages}, memory, notes, files.
std::string decode_report_json(const DecodeRunInfo& info, const DecodeOptions& opt, const std::vector<DecodeSummary>& s);
// One policy as it ran, for decode's and eval's report.json: label, preset, kind, every setting
// of its kind (docs/decode.md §2) with the value used, and, for kinds with a `recent` setting,
// "recent_tokens" {"K": the recent window at budget K} for each budget (a percentage resolves
// per budget).
void policy_settings_json(JsonWriter& j, const PolicySettings& p, const std::vector<int64_t>& budgets);
// The text printed on stdout: the settings, the caveats, the summary table, the time, the files.
std::string decode_report_text(const DecodeRunInfo& info, const DecodeOptions& opt, const std::vector<DecodeSummary>& s);

}  // namespace mla
