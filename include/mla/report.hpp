// mla/report.hpp — what `mla-h2o run / demo / select` print and write.
//
// One Report value holds everything a run produced (scores, H2O decision, settings,
// geometry, timings). Each output format is one pure function of it, so tests check the
// formats on hand-made reports and the CLI only gathers values and writes files:
//
//   report_text   the published Kimi K2.6 layer-0 H2O demo's "Results" block (docs/outputs.md §5) plus the
//                 settings that decide the numbers (mask, precision, backend, latent eps, ...)
//   scores_csv    token_idx,attention_score,kept,category   (the published Kimi K2.6 layer-0 H2O demo's CSV columns;
//                 kept is True/False as pandas writes it; scores printed with %.17g so they
//                 round-trip to the same double)
//   heads_csv     head,token_idx,attention_score,kept,category   (--per-head)
//   report_json   the same numbers plus config, options, versions, backend and timing_s
//   scores_svg    score vs token index, bars coloured by category, axes, ticks, legend, title
//
// Shape legend: S = tokens, n = heads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mla/attention.hpp"
#include "mla/config.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/json_text.hpp"
#include "mla/provenance.hpp"
#include "mla/safetensors.hpp"
#include "mla/stage_timer.hpp"
#include "mla/tensor.hpp"

namespace mla {

// Summary statistics of a score vector (population std, as numpy's default ddof=0).
struct ScoreStats {
  int64_t count = 0;
  double min = 0, max = 0, mean = 0, std = 0, sum = 0;
  int64_t argmin = 0, argmax = 0;  // lowest index on ties
};
ScoreStats score_stats(std::span<const double> scores);

// The decision summarised as the published Kimi K2.6 layer-0 H2O demo printed it.
struct DecisionSummary {
  int64_t seq_len = 0;                          // S
  int64_t middle = 0;                           // tokens that were neither sink nor recent
  std::vector<std::pair<int64_t, double>> top_heavy;  // up to 10 heavy (index, score), score desc, index asc
  double mean_heavy = 0;    // mean score of the heavy hitters kept (0 if none)
  double mean_evicted = 0;  // mean score of the evicted tokens (0 if none)
  double mean_kept = 0;     // mean score over all kept tokens (0 if none)
  // mean_heavy / mean_evicted; nullopt when either set is empty or mean_evicted is 0.
  std::optional<double> heavy_evicted_ratio;
};
DecisionSummary summarize_decision(std::span<const double> scores, const H2ODecision& d, size_t top_k = 10);

// Settings and provenance printed next to the numbers. Empty strings / nullopt are omitted
// from the text and written as null in JSON.
struct RunInfo {
  std::string command;             // "run" | "demo" | "select"
  std::string checkpoint;          // path as given
  std::optional<int64_t> layer;
  std::string input_source;        // e.g. "seeded normal embeddings (seed 0, Rng stream ...)"
  std::string mask;                // "none" | "causal"
  std::string precision;           // "fp32" | "bf16"
  std::string backend_requested;   // "auto" | "reference" | "cpu" | "cuda"
  std::string backend;             // the backend that ran
  std::string backend_reason;      // why auto chose it ("" when not auto)
  std::string backend_description; // Backend::description()
  GemmInfo gemm;                   // cpu backend: projection engine, kernel, why (empty otherwise)
  bool computed_in_double = false;
  std::string latent_norm_eps_mode;  // "hf" | "config" | "value"
  std::optional<double> latent_norm_eps;
  std::optional<AttentionConfig> config;
  std::optional<double> softmax_scale;
  std::optional<int64_t> parameter_count;         // the layer's attention parameters
  std::vector<int64_t> hidden_shape;              // [S, H]
  std::vector<int64_t> attn_output_shape;         // [S, H]
  std::vector<int64_t> attn_weights_shape;        // [n, S, S]
  int threads = 0;
  bool allow_tf32 = false;
  std::vector<std::string> notes;                 // free lines printed under "notes:"
  // Time per stage in execution order (seconds), and the three headline groups.
  StageSeconds stage_seconds;
  StageSeconds forward_stage_seconds;  // the backend's own split of "forward"
  double load_seconds = 0, forward_seconds = 0, h2o_seconds = 0;
  std::vector<std::string> files;                 // outputs written (paths)
  std::optional<std::vector<FileDigest>> model_files;  // the model files read, with their sha256 (run, sweep, demo)
  // Memory (run/demo; docs/long-context.md): the plan made before the forward and the
  // measured peak resident set (getrusage ru_maxrss); -1 = not recorded.
  int64_t memory_planned_bytes = -1;              // estimated host peak
  std::string memory_planned_phase;               // the phase of that peak
  int64_t memory_process_bytes = -1;              // of it, the process itself (process_allowance_bytes)
  int64_t memory_device_planned_bytes = -1;       // cuda: estimated device peak
  int64_t memory_available_bytes = -1;            // what the plan compared with
  std::string memory_available_source;            // "MemAvailable", "cgroup v2 ...", ...
  int64_t memory_peak_rss_bytes = -1;             // measured at the end of the run
};

struct Report {
  RunInfo info;
  H2OOptions h2o;
  std::vector<double> scores;  // [S]
  H2ODecision decision;
  // --per-head only (n_heads == 0 otherwise):
  int64_t n_heads = 0;
  std::vector<double> head_scores;          // [n * S]
  std::vector<H2ODecision> head_decisions;  // [n]
};

std::string report_text(const Report& r);
// token_text (one per token, or empty): appended as a last column `token_text`, always quoted
// (RFC 4180: a quote doubled), for inputs whose tokens are known as text (run --text).
std::string scores_csv(std::span<const double> scores, const H2ODecision& d,
                       std::span<const std::string> token_text = {});
std::string heads_csv(std::span<const double> head_scores, const std::vector<H2ODecision>& decisions);
std::string report_json(const Report& r);
std::string scores_svg(std::span<const double> scores, const H2ODecision& d, const std::string& title);

// "%.17g": the shortest printf form that always round-trips a double.
std::string format_double(double v);
// A CSV field: quoted (RFC 4180) when it holds a comma, a quote or a newline, as a policy label
// ("snapkv:window=64,pool=avg5") can.
std::string csv_field(const std::string& v);
// json_quote (JSON string literals) lives in mla/json_text.hpp, included above.

// A small streaming JSON writer (pretty-printed, 2-space indent). Commas and nesting are
// tracked; non-finite doubles are written as null (JSON has no NaN/Inf).
class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(double v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();
  JsonWriter& raw(std::string_view literal);  // a value already written as JSON (inspect's config literals)
  // [items...]: each item written with value() (strings, int64_t, double, bool)
  template <class Range>
  JsonWriter& array(const Range& items) {
    begin_array();
    for (const auto& x : items) value(x);
    return end_array();
  }
  const std::string& str() const { return out_; }

 private:
  void before_value();
  void newline();
  std::string out_;
  struct Level { bool array; bool empty; };
  std::vector<Level> stack_;
  bool after_key_ = false;
};

// The "config" object of report.json (geometry, rope, softmax scale) and the H2O decision
// fields of its "h2o" object (counts, fractions, mean scores, top heavy hitters, indices);
// shared by report_json and sweep_report_json.
void write_config(JsonWriter& w, const AttentionConfig& c, const std::optional<double>& softmax_scale);
void write_decision(JsonWriter& w, std::span<const double> scores, const H2ODecision& d, size_t top_k);
// [{"stage": name, "seconds": s}, ...] in execution order: the timing stages of every report.json
void write_stages(JsonWriter& w, const StageSeconds& stages);
// "synthetic_weights": false for a real checkpoint, else what synthesized it (decode's and eval's report.json)
void write_synthetic_weights(JsonWriter& w, const std::string& synthetic);

// --dump-tensors: writes `path` (safetensors) in HF's layout so other implementations can
// compare tensor by tensor (`mla-h2o compare`):
//   hidden_states [S, H]           the layer input as given (before any bf16 rounding)
//   attn_output   [S, H]
//   attn_weights  [n, S, S]        post-softmax probabilities (if the result holds them)
//   query_states  [n, S, d_n+d_r]  rope half in HF's de-interleaved order (if held)
//   key_states    [n, S, d_n+d_r]
//   value_states  [n, S, d_v]
//   latent_cache  [S, r_kv + d_r]  kv_a_layernorm(c) | roped k_pe in HF's de-interleaved order
//                                  (what an MLA engine caches; if held, docs/decode.md)
//   token_scores  [S]              attention mass received, summed over heads and queries
//   head_scores   [n, S]           the same per head
// dtype: token_scores and head_scores always F64 (double accumulations); the others F64
// when result.computed_in_double (reference backend), else F32 — and F64 anyway for a
// tensor holding any value that is not exactly a float, so nothing is ever rounded.
// `metadata` goes to __metadata__. Returns the list of tensor names written.
std::vector<std::string> write_tensor_dump(const std::string& path, const TensorF& hidden,
                                           const ForwardResult& result, int64_t n_heads,
                                           const std::map<std::string, std::string>& metadata);

// ---- `mla-h2o inspect --json` (src/report/inspect.cpp, docs/checkpoints.md §5) ---------------

// One tensor of a header: its shard's file name ("" in file mode) and what the header says.
struct InspectRow {
  std::string shard;
  TensorInfo info;
};
// File mode: {kind "file", path, file_size, header_size, metadata {...}, tensors [...]}.
struct InspectedFile {
  std::string path;
  uint64_t file_size = 0, header_size = 0;
  std::map<std::string, std::string> metadata;
  std::vector<InspectRow> tensors;  // in offset order
};
std::string inspect_file_json(const InspectedFile& f);
// Checkpoint mode: {kind "checkpoint", path, prefix, shards, missing_shards, tensors (with their
// shard), config {...}, quantization {...} | null, layers_present, layer0_attention_parameters |
// null}. config and quantization are (key, JSON literal) pairs, as the text shows them.
struct InspectedCheckpoint {
  std::string path, prefix;
  int64_t shards = 0;
  std::vector<std::string> missing_shards;
  std::vector<InspectRow> tensors;
  std::vector<std::pair<std::string, std::string>> config, quantization;
  std::vector<int64_t> layers_present;
  std::optional<uint64_t> layer0_attention_parameters;  // when layer 0 is complete
  // the checkpoint's tokenizer as JSON literals (format, file, vocab_size, added_tokens,
  // special_tokens, patterns); empty: none beside the checkpoint (null)
  std::vector<std::pair<std::string, std::string>> tokenizer;
};
std::string inspect_checkpoint_json(const InspectedCheckpoint& c);

// The files of a command go through one output set: mla/output_set.hpp.

}  // namespace mla
