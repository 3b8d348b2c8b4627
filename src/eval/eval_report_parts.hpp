// src/eval/eval_report_parts.hpp — what eval's outputs (eval_report.cpp) and its retrieval
// tasks' outputs (task_report.cpp) share: the order of the runs and report.json's common keys.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/eval.hpp"
#include "mla/json_text.hpp"

namespace mla::eval {

// full at each budget, then the runs of that budget (options order)
template <class F>
void for_each_run(const EvalResult& r, const std::vector<int64_t>& budgets, F&& f) {
  for (int64_t K : budgets) {
    f(r.full, K);
    for (const EvalRun& run : r.runs)
      if (run.budget == K) f(run, K);
  }
}

// report.json's keys from "checkpoint" to "threads" and "config", "model": the checkpoint,
// caveats, input, precision, eps, engine, threads, the attention config and the model's keys.
void write_run_keys(JsonWriter& j, const EvalRunInfo& info, const ModelConfig& cfg, const EvalOptions& opt,
                    const std::string& engine);
// "memory", "timing_s" (the command's stages, then the windows' summed) and "files".
void write_tail_keys(JsonWriter& j, const EvalRunInfo& info, const std::vector<EvalWindow>& windows);

}  // namespace mla::eval
