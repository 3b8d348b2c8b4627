// src/cli/run_plan.hpp — the settings `mla-h2o run`, `demo` and `sweep` share, and the
// helpers that read and check them (defined in cmd_run.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "args.hpp"
#include "inputs.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/h2o.hpp"

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
  std::string out_dir = "mla-h2o-out";
  std::vector<std::string> notes;
};

// --mask --backend --precision --latent-norm-eps --sinks --recent --budget --per-head --out
// --dump-tensors --threads --allow-tf32, and reading them into `plan`.
std::vector<FlagSpec> forward_flags(const std::string& default_mask, const std::string& default_precision);
void read_forward_flags(const Args& a, RunPlan& plan, const std::string& default_mask, const std::string& default_precision);

// --latent-norm-eps: "hf" -> 1e-6, "config" -> rms_norm_eps, else a positive finite number;
// `mode` receives "hf" | "config" | "value".
double latent_eps(const std::string& arg, const AttentionConfig& cfg, std::string& mode);

// Error (naming `flag`, e.g. "--layer 5") unless `layer` is within num_hidden_layers and the
// checkpoint holds all of that layer's attention tensors.
void check_layer_present(const Checkpoint& ckpt, int64_t layer, const std::string& flag);

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double lap() {  // seconds since construction or the previous lap
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t0_).count();
    t0_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

inline std::string join_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace mla::cli
