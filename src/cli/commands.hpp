// src/cli/commands.hpp — the subcommands of `mla-h2o`, one file each.
#pragma once

#include <string>
#include <vector>

namespace mla::cli {

// Each returns the process exit code; errors are thrown as mla::Error and printed by main.
int cmd_inspect(const std::vector<std::string>& argv);
int cmd_synth(const std::vector<std::string>& argv);
int cmd_run(const std::vector<std::string>& argv);
int cmd_demo(const std::vector<std::string>& argv);
int cmd_select(const std::vector<std::string>& argv);
int cmd_compare(const std::vector<std::string>& argv);
int cmd_decode(const std::vector<std::string>& argv);
int cmd_sweep(const std::vector<std::string>& argv);
int cmd_eval(const std::vector<std::string>& argv);
int cmd_tokenize(const std::vector<std::string>& argv);

// The demo's cache directory ($XDG_CACHE_HOME/mla-h2o or ~/.cache/mla-h2o) and its synthetic
// Kimi K2.6 layer-0 checkpoint there, synthesized once (cmd_run.cpp).
std::string default_cache_dir();
std::string demo_checkpoint(const std::string& cache_dir, bool& reused);

}  // namespace mla::cli
