// mla/eval.hpp — what KV-cache eviction does to a whole model's next-token predictions
// (`mla-h2o eval`, docs/eval.md).
//
// Teacher forcing on tokens x_0 .. x_{T-1}: positions [0, P) are a causal prefill with the full
// cache; positions P .. P+N-1 decode with EVERY layer's latent cache managed by a policy at budget
// K (mla/policy.hpp: one CacheManager per layer, each with its own cache and scores), so an
// eviction's error flows through the residual stream into later layers and the logits. The
// logits at position x predict x_{x+1}, so T >= P + N + 1.
//
// Computed layer by layer over all positions: position x of layer L depends only on positions
// <= x of layer L and on layer L-1, so for each layer L the prompt rows run once (shared by every
// run), then every run's N decode rows: their projections at once, the attention row by row in
// position order (the policy evicting after each step), o_proj and the MLP at once. Every sum is
// a fixed-order fma chain (src/cpu/fixed_order.hpp), so the order of computation changes no bit:
// a cache that evicted nothing gives logits bit-identical to the plain forward
// (mla/model_forward.hpp), and the suite `eval` proves the layer-by-layer order against a
// token-by-token loop through all layers.
//
// Per (policy, budget) run and position: NLL of the true next token, KL(full || policy) of the
// next-token distributions, top-1 agreement with full; per layer: the attention output's error
// against full's at the same position, the full run's attention mass the cache holds, the cache
// size. Summaries: mean NLL, ΔNLL and perplexity ratio against full, mean KL, top-1 agreement,
// passkey accuracy on passkey inputs. The retrieval tasks (eval --task, mla/tasks.hpp) run each
// generated sample as one window and score its answer by exact match (the end of this file).
//
// Shape legend: T = tokens, P = prompt_len, N = steps, V = vocab_size, H = hidden_size,
//   L = num_hidden_layers, n = heads, K = budget.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/model.hpp"
#include "mla/policy.hpp"
#include "mla/provenance.hpp"
#include "mla/stage_timer.hpp"
#include "mla/stats.hpp"  // MeanSe, Quantiles
#include "mla/tasks.hpp"  // Passkey, TaskSample
#include "mla/tensor.hpp"

namespace mla {

// When a policy evicts (docs/eval.md §2.1):
//   Decode   after every decode step, down to K (the cache never holds more than K + 1)
//   Prefill  kvpress's protocol: each layer's prompt cache is cut to K once, by the policy's
//            prefill rule; every decoded position then joins and nothing more is evicted
enum class Compression { Decode, Prefill };
const char* compression_name(Compression c);  // "decode" | "prefill"

struct EvalOptions {
  int64_t prompt_len = 0;                // P >= 1
  int64_t steps = 0;                     // N >= 1; P + N + 1 <= T
  std::vector<int64_t> budgets;          // K, strictly increasing
  std::vector<PolicySettings> policies;  // full is always computed (the reference of every metric)
  Compression compress = Compression::Decode;
  Precision precision = Precision::BF16;
  int threads = 0;                       // 0 = all cores
  double latent_norm_eps = 1e-6;
  bool keep_logits = false;              // every run's logits [N, V] in EvalRun::logits
  bool keep_full_states = false;         // the full run's logits [T, V] and hidden states [L+1][T, H]
  // (stage, done, total): ("layers", L+1, num_hidden_layers) and ("decode steps", i, N) within a layer
  std::function<void(const char* stage, int64_t done, int64_t total)> progress;
  // expected-attention's mean RoPE rotation over the future positions (mean_rope_rotation(cfg, P,
  // future)), when the caller computed it once for many windows; empty: run_eval computes it once
  std::vector<double> future_rotation;
  // kvzip's repeat text (mla/policy.hpp ReconstructionText) in the model's ids: the caller's
  // tokenizer's (cmd_eval.cpp); empty: the repeat is the context's tokens alone
  ReconstructionText reconstruction_text;
};

// Error(InvalidArgument) with one line for every bad option: P < 1, N < 1, P + N + 1 > T, no
// budget, budgets not increasing, a budget too small for what a policy protects, no policy, two
// policies with the same label.
void check_eval_options(const EvalOptions& opt, int64_t tokens, int64_t num_layers);

struct EvalPosition {
  int64_t position = 0;   // x (the logits at x predict tokens[x + 1])
  int64_t token = 0;      // tokens[x + 1], the true next token
  double nll = 0;         // -log p(token)
  double kl = 0;          // KL(full || this run) of the next-token distributions (0 for full)
  bool top1_agree = true; // argmax equals full's (the lower id on ties)
  bool top1_correct = false;  // argmax equals the true next token
  int64_t predicted = 0;  // the argmax (the lower id on ties): what greedy decoding would emit
  double predicted_prob = 0;  // its probability, exp(log_softmax)
};

struct EvalLayer {
  int64_t layer = 0;
  int64_t budget = 0;            // what the layer's cache may hold (pyramidkv: its own)
  double mean_cache_len = 0;     // tokens attended per step (the new token included)
  double mean_held = 0;          // tokens held after each step's eviction
  double mean_mass_recall = 1;   // full run's attention mass (this layer, this position, mean over heads) on the cache
  double min_mass_recall = 1;    // the worst step's
  double mean_attn_rel_error = 0;  // ||a - a_full|| / ||a_full|| of the layer's attention output
  double max_attn_rel_error = 0;
  double mean_hidden_rel_error = 0;  // ||h - h_full|| / ||h_full|| of the layer's output (the residual stream)
};

struct EvalRun {
  PolicySettings policy;
  int64_t budget = 0;                 // K (also for full, reported at every budget)
  std::vector<EvalPosition> positions;  // [N]
  std::vector<EvalLayer> layers;        // [L]
  TensorF logits;                       // [N, V] with keep_logits
};

// Per (policy, budget) over W windows (docs/eval.md §3.1). Means over windows are means over
// positions too (every window decodes N positions). The intervals come from the W paired
// per-window differences against full (mla/stats.hpp: Student t, 95 %); with one window they
// are NaN (written as empty fields and "n/a").
struct EvalSummary {
  std::string policy;          // the policy's label
  int64_t budget = 0;
  int64_t windows = 1;         // W
  double mean_nll = 0;
  double delta_nll = 0;        // mean_nll - full's (exactly 0 for full)
  double delta_nll_se = 0;     // standard error of the mean of the W per-window ΔNLL (0 for full)
  double delta_nll_low = 0, delta_nll_high = 0;  // its 95 % t-interval
  double ln_ppl_ratio = 0;     // ln of the perplexity ratio: delta_nll itself, finite whenever the NLLs are
  double ppl_ratio = 1;        // exp(delta_nll); a run where it overflows is refused (check_summaries_finite)
  double mean_kl = 0;          // over every decoded position of every window
  double kl_median = 0, kl_p99 = 0, kl_max = 0;  // the same positions' KL (quantile_linear)
  double top1_agreement = 1;   // share of positions whose argmax equals full's
  double top1_agreement_se = 0;  // standard error over the W per-window shares
  double top1_accuracy = 0;    // share whose argmax is the true next token
  double passkey_accuracy = -1;  // share of the key's digits predicted top-1; -1 when no window is a passkey input
  int64_t passkey_digits = 0;    // digits scored (those whose predicting position was decoded), all windows
  double mean_cache_len = 0;     // over layers and steps
  double mean_mass_recall = 1;   // over layers and steps
  // llama-perplexity --kl-divergence's statistics (docs/eval.md §3.2), pooled over the n decoded
  // positions of every window, each paired with full's at the same position (exact for full: KL
  // 0, Δp 0, same_top_p 1, ln ratio 0). The standard errors are NaN when n = 1.
  int64_t positions = 0;         // n
  double kl_se = 0;              // of mean_kl
  Quantiles kl_q;                // KL's order statistics (kl_median, kl_p99, kl_max above are its)
  MeanSe dp;                     // Δp = exp(-nll) - exp(-nll_full) of the true next token
  double dp_rms = 0;
  Quantiles dp_q;
  MeanSe same_top;               // share of positions whose argmax is full's (ties: lower id), binomial se
  double ln_ppl_ratio_se = 0;    // mean(nll) - mean(nll_full) over the positions: se with the covariance term
};

struct EvalResult {
  EvalRun full;                  // the full cache (budget 0 here)
  std::vector<EvalRun> runs;     // per budget (ascending), per policy other than full (options order)
  Passkey passkey;
  TensorF full_logits;                 // keep_full_states: [T, V]
  std::vector<TensorF> hidden_states;  // keep_full_states: [L+1] of [T, H] (as ModelForwardResult)
  StageSeconds stage_seconds;
  // Where the layers' time went, summed over the layers (report.json "profile_s"; docs/eval.md
  // §9): "load + prepare", "prompt: projections | attention | o_proj | mlp", "decode rows: ..."
  // (the same four, the runs' prompt caches and features, the attention errors, the layer
  // records). Inside the "layer L" records of stage_seconds, so never added to them.
  StageSeconds profile;
  std::string engine;            // the kernels that ran
};

// The whole evaluation; layers stream one at a time. Checks first (check_model_tensors,
// check_eval_options, token ids within embed_tokens).
EvalResult run_eval(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& tokens,
                    const EvalOptions& opt);

// One window of the input (--windows W: W windows of P + N + 1 tokens, spread evenly and without
// overlap over the input; docs/eval.md §1) and its evaluation. Every window's EvalResult has the
// same runs in the same order.
struct EvalWindow {
  std::string source;   // the file it was cut from (--text), or "--tokens"
  int64_t offset = 0;   // its first byte (--text, the BOS not counted) or id (--tokens) in the source
  EvalResult result;
};

// One row per (policy, budget): full first at each budget, then the runs in options order.
std::vector<EvalSummary> summarize(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets);
std::vector<EvalSummary> summarize(const EvalResult& r, const std::vector<int64_t>& budgets);  // one window
// Error(InvalidValue) with one line naming the first (policy, budget) cell and figure of `sum`
// that is not a finite number (docs/eval.md §3): a ppl_ratio whose exp(ΔNLL) overflows, a NaN
// or an infinite mean, quantile or interval. The intervals of a single window are NaN by
// design (written as empty fields and null) and pass.
void check_summaries_finite(const std::vector<EvalSummary>& sum);

// What eval's report.json says besides the results (cmd_eval.cpp fills it).
struct EvalRunInfo {
  std::string checkpoint;
  std::string synthetic_weights;        // Checkpoint::synthetic_origin(): "" for real weights
  std::vector<std::string> caveats;     // what the figures do not mean
  std::string input;                    // the windows' description
  int64_t tokens = 0;                   // the first window's ids
  std::string latent_norm_eps_mode;
  int threads = 0;                      // resolved
  int64_t windows_at_once = 1;          // windows computed side by side (threads / this each)
  int64_t ranks = 1;                    // MPI ranks the windows were spread over (docs/scale-out.md)
  int64_t resumed_windows = 0;          // windows read back from --resume's staging area, not computed
  std::vector<double> compression_ratios;  // --compression-ratio, in budget order (empty: --cache-budget)
  std::vector<FileDigest> model_files;  // the model files read, with their sha256
  int64_t memory_planned_bytes = -1, memory_peak_rss_bytes = -1;
  StageSeconds stages;                  // the command's stages (the windows' own are summed from EvalResult)
  std::vector<std::string> files;       // the output set
};
// report.json (format "mla-h2o eval report v1"): provenance, checkpoint, caveats, input, windows,
// P, N, precision, eps, engine, threads, config, model keys, protocol, budgets and ratios, every
// policy's settings as run, passkey, summary (intervals null with one window), memory, timing_s,
// files.
std::string eval_report_json(const EvalRunInfo& info, const ModelConfig& cfg, const EvalOptions& opt,
                             const std::vector<EvalWindow>& windows, const std::vector<EvalSummary>& summaries);

// ---- outputs (src/eval/eval_report.cpp) -------------------------------------------------------
// eval.csv:    window,policy,budget,position,token,nll,kl,top1_agree
std::string eval_csv(const std::vector<EvalWindow>& w, const std::vector<int64_t>& budgets);
// The same with each window's own budgets, budgets[w] (the --task samples under --compression-ratio).
std::string eval_csv_per_window(const std::vector<EvalWindow>& w, const std::vector<std::vector<int64_t>>& budgets);
// layers.csv:  window,policy,budget,layer,layer_budget,mean_cache_len,mean_held,mean_mass_recall,min_mass_recall,
//              mean_attn_rel_error,max_attn_rel_error,mean_hidden_rel_error
std::string eval_layers_csv(const std::vector<EvalWindow>& w, const std::vector<int64_t>& budgets);
// windows.csv: window,source,offset,policy,budget,mean_nll,delta_nll,mean_kl,top1_agreement,top1_accuracy,
//              passkey_accuracy
std::string eval_windows_csv(const std::vector<EvalWindow>& w, const std::vector<int64_t>& budgets);
// summary.csv: policy,budget,windows,mean_nll,delta_nll,delta_nll_ci_low,delta_nll_ci_high,ln_ppl_ratio,ppl_ratio,
//              mean_kl,kl_median,kl_p99,kl_max,top1_agreement,top1_agreement_se,top1_accuracy,passkey_accuracy,
//              mean_cache_len,mean_mass_recall, then llama-perplexity's (docs/eval.md §3.2):
//              positions,kl_se,kl_p999,kl_p95,kl_p90,kl_p10,kl_p05,kl_p01,kl_p001,kl_min,dp_mean,dp_se,dp_rms,
//              dp_max,dp_p999,dp_p99,dp_p95,dp_p90,dp_p75,dp_median,dp_p25,dp_p10,dp_p05,dp_p01,dp_p001,dp_min,
//              same_top_p,same_top_p_se,ln_ppl_ratio_se
std::string eval_summary_csv(const std::vector<EvalSummary>& s);
// leaderboard.csv, per budget the policies other than full sorted by ΔNLL (ties: label):
//   budget,rank,policy,delta_nll,delta_nll_ci_low,delta_nll_ci_high,overlaps,next,diff_to_next,
//   diff_ci_low,diff_ci_high,distinct_from_next
// overlaps: the ranking neighbours (above, below) whose ΔNLL interval overlaps this one's, ';'-joined;
// diff_to_next: the paired per-window mean of (next's ΔNLL - this one's) with its 95 % t-interval;
// distinct_from_next: 1 when that interval excludes 0, 0 when it does not, empty with one window.
std::string eval_leaderboard_csv(const std::vector<EvalWindow>& w, const std::vector<int64_t>& budgets);
std::string eval_summary_table(const std::vector<EvalSummary>& s);
// budget.svg: ΔNLL against K, one line per policy, 95 % intervals as whiskers (W >= 2); a policy
// more than 5x the median of the others' upper bounds gets a second panel with its own axis.
std::string eval_budget_svg(const std::vector<EvalSummary>& s, const std::string& title);
// layers.svg: one panel per budget, mean mass recall per layer (mean over windows), one line per policy.
std::string eval_layers_svg(const std::vector<EvalWindow>& w, const std::vector<int64_t>& budgets, const std::string& title);
// leaderboard.svg: per budget, the policies other than full best first, mean ΔNLL with its 95 % interval.
std::string eval_leaderboard_svg(const std::vector<EvalSummary>& s, const std::vector<int64_t>& budgets,
                                 const std::string& title);


// ---- retrieval tasks (eval --task; docs/eval.md §7; the samples: mla/tasks.hpp) -------------
struct TaskSettings {
  TaskKind kind = TaskKind::Passkey;  // the task (the first of kinds)
  std::vector<TaskKind> kinds;        // the tasks run (--task ruler: RULER's 11); empty = {kind}
  QueryPlacement placement = QueryPlacement::Agnostic;
  std::vector<int64_t> contexts;  // --context, ascending
  std::string context_unit = "bytes";  // what they count: context_unit(the model's tokenizer)
  std::vector<double> depths;     // --depths, percent, ascending
  int64_t samples = 1;            // per (context, depth)
  uint64_t seed = 0;
  std::vector<double> ratios;     // --compression-ratio, descending (K ascending); empty with --cache-budget
};

std::vector<TaskKind> task_kinds(const TaskSettings& t);  // t.kinds, or {t.kind}

// kvpress's budget for a compression ratio r: K = round((1 - r) P), the share r of the prompt evicted.
int64_t ratio_budget(double r, int64_t prompt_len);
// A sample's budgets, in run order: `budgets` (--cache-budget), or with ratios K = ratio_budget(r, P)
// at the sample's own P for each of t.ratios.
std::vector<int64_t> task_budgets(const TaskSettings& t, const std::vector<int64_t>& budgets, const TaskSample& s);

// One run's answer on one sample, read from its teacher-forced predictions at the answer
// positions. Every position's logits depend only on the tokens up to it (every layer, every
// policy), so greedy decoding, which feeds back its argmax, emits the answer exactly when every
// answer token is predicted top-1 here: `exact` is also greedy generation's exact match.
struct AnswerScore {
  std::string predicted;    // the argmax at each answer position (task_token_text, concatenated)
  int64_t correct = 0;      // answer tokens predicted top-1
  int64_t first_miss = -1;  // the first answer token not predicted top-1 (where greedy departs); -1: none
  bool exact = false;       // correct == the answer's length
  int64_t refs = 0, found = 0;  // reference strings, and those whose every id is predicted top-1
};
// The answer's ids are sample.ids[answer_first ..], found by byte offsets (mla/tasks.hpp).
AnswerScore score_answer(const TaskSample& sample, const EvalRun& run, const ModelConfig& cfg, const Tokenizer& tok);

// One cell of tasks.csv: a (policy, budget) run's score over the samples of one (context, depth).
struct TaskCell {
  TaskKind kind = TaskKind::Passkey;
  std::string policy;
  int64_t budget = 0;                  // K at this context
  size_t slot = 0;                     // the budget's (or ratio's) index in run order
  double ratio = NAN;                  // its compression ratio; NaN with --cache-budget
  int64_t context = 0;
  double depth = 0;
  int64_t samples = 0, exact = 0;      // samples, and those answered exactly
  int64_t tokens = 0, correct = 0;     // answer tokens, and those predicted top-1
  int64_t refs = 0, found = 0;         // reference strings, and those found
  double match_sum = 0;                // the sum over samples of found / refs
  int64_t tasks = 0;                   // ruler_averages: the tasks averaged
};
// RULER's string_match_all of a cell: 100 x the mean over its samples of found / refs.
double string_match_all(const TaskCell& c);
// Per (policy, budget, context), RULER's average over the tasks: match_sum = the sum of their
// string_match_all over `tasks` tasks, samples / refs / found summed.
std::vector<TaskCell> ruler_averages(const std::vector<TaskCell>& cells);
// windows[i] is the evaluation of samples[i] at task_budgets(t, budgets, samples[i]). Per budget
// slot: full, then the policies (options order); within each, contexts then depths ascending.
std::vector<TaskCell> task_cells(const TaskSettings& t, const std::vector<TaskSample>& samples,
                                 const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets,
                                 const ModelConfig& cfg, const Tokenizer& tok);
// tasks.csv: task,query_placement,compress,policy,budget,compression_ratio,context,depth,samples,exact,exact_match,
//            answer_token_accuracy (compression_ratio empty with --cache-budget)
//            RULER's tasks: task,query_placement,compress,policy,budget,compression_ratio,context,samples,references,
//            found,string_match_all,exact_match,answer_token_accuracy, then with several tasks a row "ruler" per
//            (policy, budget, context): RULER's average (the mean of the tasks' string_match_all)
std::string tasks_csv(const TaskSettings& t, Compression compress, const std::vector<TaskCell>& cells);
std::string ruler_tasks_csv(const TaskSettings& t, Compression compress, const std::vector<TaskCell>& cells);
// task_samples.csv: sample,context,depth,index,source,offset,prompt_len,steps,policy,budget,compression_ratio,answer,
//                   predicted,first_miss,exact (one row per sample and run); RULER's tasks: task, first, and
//                   references,found last
std::string task_samples_csv(const TaskSettings& t, const std::vector<TaskSample>& samples,
                             const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets,
                             const ModelConfig& cfg, const Tokenizer& tok);
// The stdout table: per (policy, budget, context) the exact-match share at each depth and over all.
std::string tasks_table(const TaskSettings& t, const std::vector<TaskCell>& cells);
std::string ruler_table(const TaskSettings& t, const std::vector<TaskCell>& cells);
// needle.svg: one heat map per policy (full once, then per budget or ratio), context across, depth
// down, each cell coloured by its exact-match share (red 0, yellow 0.5, green 1) and labelled in percent.
std::string needle_svg(const TaskSettings& t, const std::vector<TaskCell>& cells, const std::string& title);
// ruler.svg (RULER's tasks): per context a panel of RULER's average (ruler_averages, as tasks.csv's
// "ruler" rows give it) against the compression ratio (--cache-budget: against K), one line per
// policy, full a horizontal line; each dot's tooltip "NAME r=R (K=k): VALUE" with tasks.csv's value.
std::string ruler_svg(const TaskSettings& t, Compression compress, const std::vector<TaskCell>& cells, const std::string& title);
// report.json of a --task run (format "mla-h2o eval report v1", "task" set): what eval_report_json
// says of the model, options and policies, then the task, every sample and the cells.
std::string eval_tasks_report_json(const EvalRunInfo& info, const ModelConfig& cfg, const EvalOptions& opt,
                                   const TaskSettings& t, const std::vector<TaskSample>& samples,
                                   const std::vector<EvalWindow>& windows, const std::vector<TaskCell>& cells);

}  // namespace mla
