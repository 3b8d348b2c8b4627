// tests/bench/bench_eval.cpp — `mla-h2o eval` at a real model width against the machine's own
// bound (issue 25, deliverable 3; docs/eval.md §9):
//
//   the model   a Kimi K2.6-width whole model, `synth --preset kimi-k2.6 --experts 8 --layers 0,1,2`
//               (layer 0 dense, 1-2 MoE; synthesized once into --work-dir, ~1.7 GB)
//   the job     `eval --prompt-len 256 --steps 256 --policy h2o,tova,snapkv,streaming
//               --cache-budget 128,192 --precision bf16` on ids of the 1024-row vocabulary
//   its FLOPs   counted from the config as eval computes them (mla/eval_cost.hpp)
//   the bound   those FLOPs at the machine's GEMM rate: the fastest plain matmul [4096 x 4096 x 4096]
//               of the projection engines, bf16 and fp32 (bf16 values are exact in fp32, and on a
//               CPU without AVX512-BF16 oneDNN has no bf16 kernel), measured in the same run, each
//               printed with its kernel (bench_rate.hpp)
//   printed     wall time (median of --reps), the rate it achieved, the bound, time / bound
//               (goal: <= 1.5), the per-layer times eval's report.json records
//
// `meson test -C build --benchmark --suite eval`
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <simdjson.h>

#include "bench_rate.hpp"
#include "bench_util.hpp"
#include "mla/eval_cost.hpp"
#include "mla/model.hpp"
#include "mla/policy.hpp"

namespace {

namespace fs = std::filesystem;
using mla::bench::Clock;
using mla::bench::median;
using mla::bench::seconds_since;

struct Flags {
  std::string cli, work_dir = "bench-eval";
  int64_t prompt_len = 256, steps = 256;
  std::string policies = "h2o,tova,snapkv,streaming", budgets = "128,192";
  int reps = 1;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const std::string& name) {
      const std::string p = "--" + name + "=";
      return a.rfind(p, 0) == 0 ? a.substr(p.size()) : std::string();
    };
    if (!value("cli").empty()) f.cli = value("cli");
    else if (!value("work-dir").empty()) f.work_dir = value("work-dir");
    else if (!value("prompt-len").empty()) f.prompt_len = std::stoll(value("prompt-len"));
    else if (!value("steps").empty()) f.steps = std::stoll(value("steps"));
    else if (!value("policy").empty()) f.policies = value("policy");
    else if (!value("cache-budget").empty()) f.budgets = value("cache-budget");
    else if (!value("reps").empty()) f.reps = std::stoi(value("reps"));
    else {
      std::fprintf(stderr, "usage: bench_eval --cli=mla-h2o [--work-dir=DIR] [--prompt-len=256] [--steps=256] "
                           "[--policy=LIST] [--cache-budget=LIST] [--reps=1]\n");
      std::exit(2);
    }
  }
  if (f.cli.empty()) {
    std::fprintf(stderr, "bench_eval: --cli=PATH (the mla-h2o binary) is required\n");
    std::exit(2);
  }
  return f;
}

int run(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> v;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    v.push_back(std::stoll(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  std::printf("bench_eval — machine: %s, load average %s\n", mla::bench::cpu_model().c_str(),
              mla::bench::load_average().c_str());
  fs::create_directories(f.work_dir);
  const std::string model = f.work_dir + "/kimi-width";
  if (!fs::exists(model + "/config.json")) {
    std::printf("synthesizing %s (once)\n", model.c_str());
    std::fflush(stdout);
    if (run("'" + f.cli + "' synth --preset kimi-k2.6 --experts 8 --layers 0,1,2 --shards 4 --out '" + model +
            "' > /dev/null") != 0) {
      std::fprintf(stderr, "bench_eval: synth failed\n");
      return 1;
    }
  }
  const mla::ModelConfig cfg = mla::load_model_config(model + "/config.json");
  const std::string tokens = f.work_dir + "/tokens.txt";
  {
    std::ofstream out(tokens);
    for (int64_t i = 0; i < f.prompt_len + f.steps + 1; ++i)
      out << (i ? "," : "") << (i * 37 + 11) % cfg.attention.vocab_size;
    out << "\n";
  }
  mla::EvalOptions o;
  o.prompt_len = f.prompt_len;
  o.steps = f.steps;
  o.budgets = numbers(f.budgets);
  o.policies = mla::parse_policy_list(f.policies);
  const mla::EvalCost cost = mla::eval_cost(cfg, o);

  // the bound first, on an idle process (the eval runs in a child)
  std::printf("GEMM rates of the projection engines:\n");
  const mla::bench::Rate gemm = mla::bench::best_gemm_rate();
  std::printf("bound: %.1f GFLOP/s (%s)\n", gemm.gflops, gemm.engine.c_str());
  std::printf("eval: %lld layers, P %lld, N %lld, %lld runs (full + %s x %s), %lld rows a layer; "
              "%.3f TFLOP = linear %.3f + attention %.4f + lm_head %.4f\n",
              static_cast<long long>(cfg.attention.num_hidden_layers), static_cast<long long>(f.prompt_len),
              static_cast<long long>(f.steps), static_cast<long long>(cost.runs), f.policies.c_str(), f.budgets.c_str(),
              static_cast<long long>(cost.rows_per_layer), cost.total() / 1e12, cost.linear / 1e12,
              cost.attention / 1e12, cost.head / 1e12);
  std::fflush(stdout);
  const std::string out = f.work_dir + "/eval-out";
  const std::string cmd = "'" + f.cli + "' eval --checkpoint '" + model + "' --tokens '" + tokens + "' --prompt-len " +
                          std::to_string(f.prompt_len) + " --steps " + std::to_string(f.steps) + " --policy " + f.policies +
                          " --cache-budget " + f.budgets + " --precision bf16 --quiet --out '" + out + "' > '" + f.work_dir +
                          "/eval-stdout.txt'";
  std::vector<double> wall;
  for (int r = 0; r < f.reps; ++r) {
    const auto t0 = Clock::now();
    if (run(cmd) != 0) {
      std::fprintf(stderr, "bench_eval: eval failed: %s\n", cmd.c_str());
      return 1;
    }
    wall.push_back(seconds_since(t0));
  }
  const double t = median(wall), bound = cost.total() / (gemm.gflops * 1e9);
  std::printf("eval wall %.1f s (median of %d): %.1f GFLOP/s; bound %.1f s; time / bound %.2f (goal <= 1.5: %s)\n", t,
              f.reps, cost.total() / t / 1e9, bound, t / bound, t / bound <= 1.5 ? "met" : "missed");
  {  // eval's own estimate, the plan line it printed before the work (docs/eval.md §9)
    std::ifstream log(f.work_dir + "/eval-stdout.txt");
    for (std::string line; std::getline(log, line);)
      if (line.find("plan:") != std::string::npos) std::printf("  %s\n", line.c_str());
  }
  // where the time went, as eval's report.json records it
  simdjson::dom::parser parser;
  simdjson::dom::element report;
  if (!parser.load(out + "/report.json").get(report)) {
    simdjson::dom::object timing;
    if (!report["timing_s"].get(timing))
      for (auto [key, value] : timing) {
        double s = 0;
        if (!value.get(s)) std::printf("  %-34s %8.2f s\n", std::string(key).c_str(), s);
      }
    simdjson::dom::object profile;  // inside the layers' times above
    if (!report["profile_s"].get(profile)) {
      std::printf("  profile of the layers (summed over them):\n");
      for (auto [key, value] : profile) {
        double s = 0;
        if (!value.get(s)) std::printf("    %-46s %8.2f s\n", std::string(key).c_str(), s);
      }
    }
    std::string_view engine;
    if (!report["engine"].get(engine)) std::printf("  engine: %s\n", std::string(engine).c_str());
  }
  return 0;
}
