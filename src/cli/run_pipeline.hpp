// src/cli/run_pipeline.hpp — what `mla-h2o run`, `demo` and `sweep` share (defined in
// run_pipeline.cpp): the plan read from the flags, and the load and run phases of the pipeline.
// `run` is load -> run -> report once; `sweep` is load -> run for each layer, then its own
// report across layers.
//
// Shape legend: S = tokens, H = hidden_size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "inputs.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/memory_plan.hpp"
#include "mla/report.hpp"
#include "mla/stage_timer.hpp"

namespace mla::cli {

struct RunPlan {
  std::string command;       // "run" | "demo" | "sweep"
  std::string checkpoint;    // path
  std::string config_path;   // --config ("" = beside the checkpoint)
  int64_t layer = 0;
  InputRequest input;
  BackendKind backend = BackendKind::Auto;
  ForwardOptions forward;    // mask, precision, latent eps, threads, allow_tf32
  std::string latent_eps_arg = "hf";  // "hf" | "config" | a number
  H2OOptions h2o;
  bool per_head = false;
  bool dump_tensors = false;
  bool quiet = false;        // --quiet: no progress on stderr
  bool dry_run = false;      // --dry-run: the plan only (dry_run below), nothing computed or written
  double max_hours = -1;     // --max-hours H: refuse a run planned to take longer (-1: no limit)
  std::string out_dir = "mla-h2o-out";
  std::vector<std::string> notes;
};

// --mask --backend --precision --latent-norm-eps --sinks --recent --budget --per-head --out
// --dump-tensors --threads --allow-tf32, and reading them into `plan`.
// The paths a run reads (checkpoint, config, --input / --tokens / --text files): an output
// directory must lie apart from them (mla/output_set.hpp).
std::vector<std::string> run_inputs(const RunPlan& plan);

std::vector<FlagSpec> forward_flags(const std::string& default_mask, const std::string& default_precision);
// What run, sweep and decode read the same way: the command, --checkpoint (required, then each
// of `required` {flag, what} in order: "--FLAG WHAT is required (see mla-h2o COMMAND --help)"),
// --config, --layer (0 where the command has none) and the input source (input_request).
RunPlan read_run_plan(const Args& a, const std::string& command,
                      const std::vector<std::pair<std::string, std::string>>& required = {});
void read_forward_flags(const Args& a, RunPlan& plan, const std::string& default_mask, const std::string& default_precision);

// --max-hours H, for every command that plans (run, sweep, decode, eval; docs/long-context.md
// §4.1): the flag, its value (a positive finite number of hours; -1 when not given), and the
// refusal: when the plan's estimate `seconds` exceeds H hours, one line naming the estimate, how
// it was made (`how`) and H, before any work.
FlagSpec max_hours_flag();
double read_max_hours(const Args& a);
void check_max_hours(double seconds, const std::string& how, double max_hours);
// The estimate of run, sweep and decode: `flops` of the layer's forward at the rate this machine
// measures now (the reference backend: kReferenceFlopsPerSecond; otherwise measure_gemm_rate's
// fixed-order GEMM rate on the layer's width and the run's threads); `how` says which.
double planned_seconds(const RunPlan& plan, const AttentionConfig& cfg, double flops, std::string& how);
// The same for `forwards` forwards of `seq_len` rows (run: 1; sweep: its layers), checked
// against plan.max_hours; nothing measured without --max-hours.
void check_forward_time(const RunPlan& plan, const AttentionConfig& cfg, int64_t seq_len, int64_t forwards);

// --latent-norm-eps: "hf" -> 1e-6, "config" -> rms_norm_eps, else a positive finite number;
// `mode` receives "hf" | "config" | "value".
double latent_eps(const std::string& arg, const AttentionConfig& cfg, std::string& mode);

inline std::string join_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// load: checkpoint, memory plan, layer plan.layer (its attention tensors, + input_layernorm for
// --tokens / --residual), input                                         (timing_s.load)
// The command opens its output set (mla/output_set.hpp) before, so a bad --out fails first.
struct LoadedRun {
  explicit LoadedRun(Checkpoint c) : ckpt(std::move(c)) {}
  Checkpoint ckpt;
  std::shared_ptr<const LayerWeights> weights;  // shared with the backend, which may read it in place
  ForwardOptions options;          // the plan's, with the latent eps resolved and keep_* set
  MemoryPlan memory;               // made before the layer is loaded
  std::string latent_eps_mode;     // "hf" | "config" | "value"
  HiddenInput input;               // hidden [S, H]
  StageSeconds stages;
};
// A command's own memory plan (decode's), from the geometry and the rows the input gives (-1
// when it cannot be told), in place of the forward's: refuses by throwing.
using MemoryPlanner = std::function<MemoryPlan(const AttentionConfig& cfg, int64_t input_rows)>;
LoadedRun load(const RunPlan& plan, const MemoryPlanner& plan_memory = {});

// --dry-run: what load() plans, without loading the layer or computing: opens the checkpoint and
// the input, makes the same memory plan (refusing as the run would), prints it with the forward's
// FLOPs and where the outputs would go, and returns 0. Nothing is written, --out included.
// `what`: the work the run would repeat ("" or ", 4 layers").
int dry_run(const RunPlan& plan, const MemoryPlanner& plan_memory = {}, const std::string& what = "");

// run: backend, forward, H2O selection into rep.h2o/scores/decision (+ per head)
//                                                               (timing_s.forward, timing_s.h2o)
struct RunOutcome {
  std::unique_ptr<Backend> backend;
  std::string backend_reason;  // why auto chose it ("" when not auto)
  ForwardResult result;
  StageSeconds forward_stages;  // backend prepare + forward
  StageSeconds h2o_stages;
};
RunOutcome run(const RunPlan& plan, const LoadedRun& in, Report& rep);

// The cpu workers --threads N asks for (0 = every core), as the memory plans count them.
int cpu_threads(int requested);

// The peak resident set of this process so far (getrusage: ru_maxrss in KiB on Linux), or -1.
int64_t peak_rss_bytes();

// --dump-tensors: the layer's tensors in HF's layout (write_tensor_dump) with the run's
// settings as metadata.
void write_layer_dump(const std::string& path, const RunPlan& plan, const LoadedRun& in, const RunOutcome& ran);

}  // namespace mla::cli
