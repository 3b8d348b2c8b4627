// tests/bench/bench_cpu.cpp — benchmark of the cpu backend (Eigen + OpenBLAS) on the Kimi K2.6
// layer-0 attention geometry, with the PyTorch eager peer (bench_torch.py) in the same run.
//
// What it measures (meson `benchmark()`, suite cpu; `meson test -C BUILD --benchmark --suite cpu`):
//   * machine: CPU model (/proc/cpuinfo), cores, load average before and after (the numbers
//     are only comparable within one run when the machine is shared);
//   * one layer with random bf16-valued weights in memory (tests/unit/geometries.hpp,
//     random_layer_weights("kimi", seed 1)), hidden states [S, 7168] (default S = 256);
//   * for fp32 and bf16: prepare() once ("load/widen/prepare"), `--warmup` forwards, then
//     `--reps` forwards; the MEDIAN of every stage the backend reports and of the whole forward;
//   * GFLOP/s: linear FLOPs (2 per MAC, docs/math.md §12) per projection stage; for the whole
//     forward, linears + the causal half of the attention (QK^T and PV over the S(S+1)/2
//     visible pairs, 40,960 FLOPs per pair) -- HF eager computes the full S^2 grid;
//   * then bench_torch.py (same S, warm-up, reps and threads): transformers'
//     DeepseekV3Attention eager (or a plain-torch copy), median forward, fp32 and bf16, run
//     with <source>/.venv/bin/python3 when it exists, else python3. Without torch the script
//     exits 77 and only our numbers are printed.
//
// Shape legend: S = sequence length, H = hidden_size, n = heads, r_q = q_lora_rank,
// r_kv = kv_lora_rank, d_n/d_r/d_v = qk_nope/qk_rope/v head dims, d_qk = d_n + d_r.
#include <simdjson.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/error.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t seq_len = 256;
  int warmup = 1;
  int reps = 5;
  int threads = 0;
  std::string source_root = ".";
  std::string torch_script;  // "" = no PyTorch peer
  std::string python;        // "" = <source_root>/.venv/bin/python3 if present, else python3
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? a.substr(prefix.size()) : std::string();
    };
    if (!value("seq-len").empty()) f.seq_len = std::stoll(value("seq-len"));
    else if (!value("warmup").empty()) f.warmup = std::stoi(value("warmup"));
    else if (!value("reps").empty()) f.reps = std::stoi(value("reps"));
    else if (!value("threads").empty()) f.threads = std::stoi(value("threads"));
    else if (!value("source-root").empty()) f.source_root = value("source-root");
    else if (!value("torch-script").empty()) f.torch_script = value("torch-script");
    else if (!value("python").empty()) f.python = value("python");
    else if (a == "--no-torch") f.torch_script.clear();
    else {
      std::fprintf(stderr,
                   "bench_cpu: unknown argument '%s'\nusage: bench_cpu [--seq-len=256] [--warmup=1] [--reps=5] "
                   "[--threads=0] [--source-root=DIR] [--torch-script=PATH] [--python=PATH] [--no-torch]\n",
                   a.c_str());
      std::exit(2);
    }
  }
  if (f.seq_len < 1 || f.reps < 1 || f.warmup < 0 || f.threads < 0) {
    std::fprintf(stderr, "bench_cpu: --seq-len and --reps must be >= 1, --warmup and --threads >= 0\n");
    std::exit(2);
  }
  return f;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// FLOPs per stage (2 per multiply-add; docs/math.md §12), for S tokens.
std::map<std::string, double> stage_flops(const mla::AttentionConfig& c, int64_t S) {
  const double H = static_cast<double>(c.hidden_size), n = static_cast<double>(c.num_attention_heads);
  const double r_q = static_cast<double>(c.q_lora_rank), r_kv = static_cast<double>(c.kv_lora_rank);
  const double d_n = static_cast<double>(c.qk_nope_head_dim), d_r = static_cast<double>(c.qk_rope_head_dim);
  const double d_v = static_cast<double>(c.v_head_dim), s = static_cast<double>(S);
  const double pairs = s * (s + 1) / 2;  // causal: visible (query, key) pairs
  return {
      {"q_path", 2 * s * (H * r_q + r_q * n * (d_n + d_r))},
      {"kv_path", 2 * s * (H * (r_kv + d_r) + r_kv * n * (d_n + d_v))},
      {"attend", 2 * pairs * n * (d_n + d_r + d_v)},  // scores + P.V
      {"o_proj", 2 * s * n * d_v * H},
  };
}

struct Measured {
  double prepare_s = 0;
  std::vector<std::string> stages;          // in execution order
  std::map<std::string, double> median_s;   // per stage
  double forward_median_s = 0;
  std::vector<double> forward_s;
  std::string description;
};

Measured measure(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, const mla::TensorF& hidden,
                 mla::Precision precision, const Flags& f) {
  mla::ForwardOptions opt;
  opt.precision = precision;
  opt.mask = mla::Mask::Causal;
  opt.threads = f.threads;
  Measured m;
  auto backend = mla::make_cpu_backend();
  auto t0 = Clock::now();
  backend->prepare(cfg, w, opt);
  m.prepare_s = seconds_since(t0);
  m.description = backend->description();
  for (int i = 0; i < f.warmup; ++i) backend->forward(hidden, opt);
  std::map<std::string, std::vector<double>> per_stage;
  for (int i = 0; i < f.reps; ++i) {
    t0 = Clock::now();
    const mla::ForwardResult r = backend->forward(hidden, opt);
    m.forward_s.push_back(seconds_since(t0));
    if (m.stages.empty()) {
      for (const auto& st : r.stage_seconds) m.stages.push_back(st.first);
    }
    for (const auto& st : r.stage_seconds) per_stage[st.first].push_back(st.second);
  }
  for (const auto& [name, v] : per_stage) m.median_s[name] = median(v);
  m.forward_median_s = median(m.forward_s);
  return m;
}

struct TorchResult {
  bool ran = false;
  std::string status;  // why not, or the implementation used
  std::map<std::string, double> median_s;  // "fp32", "bf16"
  std::string versions;
};

TorchResult run_torch(const Flags& f, int threads) {
  TorchResult t;
  if (f.torch_script.empty()) {
    t.status = "not run (--no-torch or no --torch-script)";
    return t;
  }
  std::string python = f.python;
  if (python.empty()) {
    const std::string venv = f.source_root + "/.venv/bin/python3";
    python = std::filesystem::exists(venv) ? venv : "python3";
  }
  const std::string cmd = "'" + python + "' '" + f.torch_script + "' --seq-len " + std::to_string(f.seq_len) +
                          " --warmup " + std::to_string(f.warmup) + " --reps " + std::to_string(f.reps) +
                          " --threads " + std::to_string(threads);
  std::printf("\nPyTorch peer: %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    t.status = "could not start " + python;
    return t;
  }
  std::string json;
  char buf[4096];
  const std::string tag = "BENCH_TORCH_JSON ";
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
    const std::string line = buf;
    if (line.rfind(tag, 0) == 0) json = line.substr(tag.size());
  }
  const int status = pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) {
    t.status = "skipped: torch is not importable by " + python;
    return t;
  }
  if (code != 0 || json.empty()) {
    t.status = "failed (exit status " + std::to_string(code) + ")";
    return t;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS) {
    t.status = "failed: unreadable JSON line";
    return t;
  }
  std::string_view impl, torch_version;
  if (doc["impl"].get(impl) == simdjson::SUCCESS) t.status = std::string(impl);
  if (doc["torch"].get(torch_version) == simdjson::SUCCESS) t.versions = "torch " + std::string(torch_version);
  std::string_view tf;
  if (doc["transformers"].get(tf) == simdjson::SUCCESS) t.versions += ", transformers " + std::string(tf);
  for (const char* p : {"fp32", "bf16"}) {
    double v = 0;
    if (doc[p]["median_s"].get(v) == simdjson::SUCCESS) t.median_s[p] = v;
  }
  t.ran = true;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  try {
    const mla::AttentionConfig cfg = mla::test::geometry("kimi");
    const int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::printf("bench_cpu: cpu backend, Kimi K2.6 layer-0 attention geometry (%s)\n", mla::test::vars(cfg).c_str());
    std::printf("machine:   %s, %u cores reported; load average %s (1/5/15 min) at start\n", cpu_model().c_str(),
                std::thread::hardware_concurrency(), load_average().c_str());
    std::printf("run:       S = %lld, causal mask, %d warm-up + %d timed forwards per precision, %d threads\n",
                static_cast<long long>(f.seq_len), f.warmup, f.reps, threads);

    auto t0 = Clock::now();
    const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 1);
    const mla::TensorF hidden = mla::test::random_hidden(f.seq_len, cfg.hidden_size, 2);
    std::printf("weights:   %lld parameters, random bf16 values, generated in %.1f s (not timed below)\n",
                static_cast<long long>(w.parameter_count()), seconds_since(t0));

    const Measured fp32 = measure(cfg, w, hidden, mla::Precision::FP32, f);
    const Measured bf16 = measure(cfg, w, hidden, mla::Precision::BF16, f);
    std::printf("backend:   %s\n\n", fp32.description.c_str());

    const auto flops = stage_flops(cfg, f.seq_len);
    auto gflops = [&](const std::string& stage, double s) -> std::string {
      const auto it = flops.find(stage);
      if (it == flops.end() || s <= 0) return "";
      char b[32];
      std::snprintf(b, sizeof b, "%.1f", it->second / s / 1e9);
      return b;
    };
    std::printf("%-20s %12s %10s %12s %10s\n", "stage (median)", "fp32 ms", "GFLOP/s", "bf16 ms", "GFLOP/s");
    std::printf("%-20s %12.1f %10s %12.1f %10s\n", "load/widen/prepare", 1e3 * fp32.prepare_s, "", 1e3 * bf16.prepare_s, "");
    for (const std::string& stage : fp32.stages) {
      const double a = fp32.median_s.at(stage), b = bf16.median_s.count(stage) ? bf16.median_s.at(stage) : 0.0;
      std::printf("%-20s %12.1f %10s %12.1f %10s\n", stage.c_str(), 1e3 * a, gflops(stage, a).c_str(), 1e3 * b,
                  gflops(stage, b).c_str());
    }
    double total_flops = 0;
    for (const auto& [stage, v] : flops) total_flops += v;
    std::printf("%-20s %12.1f %10.1f %12.1f %10.1f\n", "forward (total)", 1e3 * fp32.forward_median_s,
                total_flops / fp32.forward_median_s / 1e9, 1e3 * bf16.forward_median_s,
                total_flops / bf16.forward_median_s / 1e9);
    std::printf("(GFLOP/s: linears %.1f GFLOP + causal attention %.2f GFLOP per forward; min/max forward fp32 "
                "%.1f/%.1f ms, bf16 %.1f/%.1f ms)\n",
                (flops.at("q_path") + flops.at("kv_path") + flops.at("o_proj")) / 1e9,
                flops.at("attend") / 1e9,
                1e3 * *std::min_element(fp32.forward_s.begin(), fp32.forward_s.end()),
                1e3 * *std::max_element(fp32.forward_s.begin(), fp32.forward_s.end()),
                1e3 * *std::min_element(bf16.forward_s.begin(), bf16.forward_s.end()),
                1e3 * *std::max_element(bf16.forward_s.begin(), bf16.forward_s.end()));
    std::fflush(stdout);

    const TorchResult torch = run_torch(f, threads);
    if (!torch.ran) {
      std::printf("PyTorch peer: %s\n", torch.status.c_str());
    } else {
      std::printf("\n%-44s %12s %12s\n", "median forward, same run", "fp32 ms", "bf16 ms");
      std::printf("%-44s %12.1f %12.1f\n", "mla-h2o cpu backend", 1e3 * fp32.forward_median_s, 1e3 * bf16.forward_median_s);
      const double tf = torch.median_s.count("fp32") ? torch.median_s.at("fp32") : 0.0;
      const double tb = torch.median_s.count("bf16") ? torch.median_s.at("bf16") : 0.0;
      std::printf("%-44s %12.1f %12.1f\n", ("PyTorch eager (" + torch.versions + ")").substr(0, 44).c_str(), 1e3 * tf, 1e3 * tb);
      std::printf("%-44s %11.2fx %11.2fx\n", "speed-up (PyTorch time / ours)", tf / fp32.forward_median_s,
                  tb / bf16.forward_median_s);
      std::printf("(PyTorch module: %s)\n", torch.status.c_str());
    }
    std::printf("\nload average at end: %s\n", load_average().c_str());
  } catch (const mla::Error& e) {
    std::fprintf(stderr, "bench_cpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
