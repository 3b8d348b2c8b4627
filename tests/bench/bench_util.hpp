// tests/bench/bench_util.hpp — what every benchmark prints about the machine, and medians.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace mla::bench {

using Clock = std::chrono::steady_clock;

// "AMD EPYC (family 25 model 1, avx2)" from /proc/cpuinfo's first processor: its model name,
// family and model, and the widest of avx2, avx512f, avx512_bf16, amx_bf16 in its flags (a VM
// may name only the vendor's brand).
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU", family = "?", model = "?", isa = "no avx2";
  auto value = [&] {
    const auto colon = line.find(':');
    return colon == std::string::npos || colon + 2 > line.size() ? std::string() : line.substr(colon + 2);
  };
  while (std::getline(in, line) && !line.empty()) {  // the first processor's block
    if (line.rfind("model name", 0) == 0) name = value();
    else if (line.rfind("cpu family", 0) == 0) family = value();
    else if (line.rfind("model\t", 0) == 0) model = value();
    else if (line.rfind("flags", 0) == 0) {
      const std::string flags = " " + value() + " ";
      for (const char* f : {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
        if (flags.find(std::string(" ") + f + " ") != std::string::npos) isa = f;
    }
  }
  return name + " (family " + family + " model " + model + ", " + isa + ")";
}

inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A peer script's result: its exit status (77 = the peer's library is missing: SKIP) and the one
// stdout line that starts with `tag` (without the tag), "" when there was none.
struct PeerOutput {
  int exit_code = -1;  // -1: could not start or was killed
  std::string json;
};
// Runs `command` through the shell; its stderr passes through, stdout is read for `tag`.
inline PeerOutput run_peer(const std::string& command, const std::string& tag) {
  PeerOutput out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  std::string line;
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;  // a long line arrives in pieces
    if (line.rfind(tag, 0) == 0) out.json = line.substr(tag.size());
    line.clear();
  }
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace mla::bench
