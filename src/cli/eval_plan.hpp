// src/cli/eval_plan.hpp — `mla-h2o eval` and `mla-h2o demo --model` (cmd_eval.cpp): the plan
// read from the flags and the pipeline that runs it (load -> eval -> outputs, docs/eval.md);
// with --task, the same pipeline over generated retrieval samples (docs/eval.md §7).
#pragma once

#include <string>
#include <vector>

#include "mla/eval.hpp"
#include "mla/output_set.hpp"
#include "mla/resume_area.hpp"

namespace mla::cli {

struct EvalPlan {
  std::string checkpoint, config_path, tokens, text, out_dir = "mla-h2o-eval", latent_eps_arg = "hf";
  EvalOptions eval;  // P, N, budgets, policies, precision, threads
  int64_t windows = 1;  // --windows W: W windows of P + N + 1 tokens, spread evenly without overlap
  std::vector<double> ratios;  // --compression-ratio, aligned with eval.budgets (K = round((1 - r) P)); empty with --cache-budget
  bool dump_tensors = false, quiet = false;
  bool dry_run = false;  // --dry-run: the plan only (execute_eval stops after it), nothing written
  double max_hours = -1;  // --max-hours H: refuse a run whose printed plan says more than H hours (-1: no limit)
  // --task (docs/eval.md §7): samples generated from --text's filler; each sample is one window
  // whose P and N come from its layout (mla/tasks.hpp), so --prompt-len and --steps are not given
  bool task_mode = false;
  TaskSettings task;
  // The staging area of finished windows (mla/resume_area.hpp; `eval` itself, not demo --model):
  // kept in --out while the run goes; --resume continues from it. `settings`: every option but
  // --threads, --resume, --quiet and --out, as given or defaulted, in --help's order.
  bool keep_windows = false, resume = false;
  // A rank other than 0 of `mpirun -n R mla-h2o eval` (mla/ranks.hpp): computes its share of the
  // windows and sends them to rank 0; no output set, nothing on stdout.
  bool worker_rank = false;
  std::vector<ResumeSetting> settings;
};

// load, eval, outputs into a new output set at plan.out_dir; prints the summary table.
int execute_eval(const EvalPlan& plan);
// The same into *out (demo --model: a part of its one set); commits it (a no-op inside a part).
// nullptr: --dry-run, which returns after the plan (nothing computed or written).
int execute_eval(const EvalPlan& plan, OutputSet* out_or_dry);
// The paths eval reads: an output directory must lie apart from them.
std::vector<std::string> eval_inputs(const EvalPlan& plan);

}  // namespace mla::cli
