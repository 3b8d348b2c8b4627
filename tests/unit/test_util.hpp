// tests/unit/test_util.hpp — helpers shared by the suites: paths passed by meson after
// "--" (--cli=PATH, --data=DIR), a scratch directory, and running the CLI.
#pragma once

#include <string>
#include <vector>

#include "mla/attention.hpp"

namespace mla::test {

// The cpu backend's projection engines this build has: eigen, and onednn when built with it.
std::vector<Gemm> gemm_engines();

// The one exemption of the exact bf16 assertions (docs/testing.md §2.1): oneDNN's AMX kernel sums in
// its own blocked order and may flip a bf16 rounding. ran_amx: a backend's engine ran it;
// cpu_has_amx: the CPU has it (amx_bf16 in /proc/cpuinfo), for runs through the CLI.
bool ran_amx(const GemmInfo& g);
bool cpu_has_amx();

std::string cli_path();   // the built mla-h2o binary
std::string data_dir();   // tests/data in the source tree
// A fresh empty directory under the build's temp area, unique per call.
std::string scratch_dir(const std::string& tag);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `mla-h2o <args>` through /bin/sh (args are passed verbatim; quote as needed).
RunResult run_cli(const std::string& args);
// The same with a shell prefix before the program: "MLA_MEMORY_AVAILABLE=100M", "exec timeout 20",
// "ulimit -f 64; exec".
RunResult run_cli_after(const std::string& shell_prefix, const std::string& args);

// `mla-h2o synth --preset tiny` (hidden 64, 4 heads, layer 0 written, vocab 97), synthesized
// once per test process into the scratch area; throws if synth fails.
const std::string& tiny_checkpoint();

std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text);

}  // namespace mla::test
