#include "test_util.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "mla_build_config.h"
#include "output_scan.hpp"

namespace mla::test {
namespace {

std::string arg_value(const std::string& key) {
  auto& m = boost::unit_test::framework::master_test_suite();
  const std::string prefix = "--" + key + "=";
  for (int i = 1; i < m.argc; ++i) {
    std::string a = m.argv[i];
    if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
  }
  return "";
}

}  // namespace

bool ran_amx(const GemmInfo& g) { return g.kernel.find("amx") != std::string::npos; }

bool cpu_has_amx() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" amx_bf16 ") != std::string::npos;
  return false;
}

std::vector<Gemm> gemm_engines() {
  if (MLA_HAVE_ONEDNN) return {Gemm::Eigen, Gemm::OneDnn};
  return {Gemm::Eigen};
}

std::string cli_path() {
  std::string p = arg_value("cli");
  if (p.empty()) throw std::runtime_error("unit_tests: pass -- --cli=PATH (meson does)");
  return p;
}

std::string data_dir() {
  std::string p = arg_value("data");
  if (p.empty()) throw std::runtime_error("unit_tests: pass -- --data=DIR (meson does)");
  return p;
}

namespace {

std::filesystem::path scratch_base() {
  return std::filesystem::temp_directory_path() / ("mla-h2o-test-" + std::to_string(::getpid()));
}

// When the test module ends: first the scan of every output its commands wrote (output_scan.hpp:
// a nan or inf in an output of a successful run fails the module, one error per finding), then
// the scratch tree is removed (synthesized Kimi layers are ~200 MB each), unless MLA_KEEP_SCRATCH
// is set for debugging.
struct RemoveScratchAtExit {
  void setup() {}
  void teardown() {
    for (const std::string& f : scan_outputs(scratch_base().string())) BOOST_ERROR("non-finite number in an output: " << f);
  }
  ~RemoveScratchAtExit() {
    if (std::getenv("MLA_KEEP_SCRATCH")) return;
    std::error_code ec;
    std::filesystem::remove_all(scratch_base(), ec);
  }
};
BOOST_TEST_GLOBAL_FIXTURE(RemoveScratchAtExit);

}  // namespace

std::string scratch_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  fs::path base = scratch_base();
  fs::path p = base / (tag + "-" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << text;
}

RunResult run_cli(const std::string& args) { return run_cli_after("", args); }

RunResult run_cli_after(const std::string& shell_setup, const std::string& args) {
  std::string dir = scratch_dir("cli");
  std::string out = dir + "/stdout", err = dir + "/stderr";
  std::string cmd = shell_setup + " '" + cli_path() + "' " + args + " >'" + out + "' 2>'" + err + "'";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  write_text(dir + "/exit", std::to_string(r.exit_code));  // the output scan reads a successful run's stdout and stderr
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

const std::string& tiny_checkpoint() {
  static const std::string dir = [] {
    const std::string d = scratch_dir("tiny-checkpoint") + "/ckpt";
    const RunResult r = run_cli("synth --preset tiny --out '" + d + "'");
    if (r.exit_code != 0) throw std::runtime_error("mla-h2o synth failed: " + r.err);
    return d;
  }();
  return dir;
}

}  // namespace mla::test
