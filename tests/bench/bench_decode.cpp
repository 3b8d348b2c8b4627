// tests/bench/bench_decode.cpp — benchmark of `mla-h2o decode`'s pipeline on the Kimi K2.6
// layer-0 geometry (meson `benchmark()`, suite decode: `meson test -C BUILD --benchmark --suite decode`).
//
// What it measures:
//   * machine: CPU model (/proc/cpuinfo), cores, load average before and after (the numbers are
//     only comparable within one run when the machine is shared);
//   * one layer with random bf16-valued weights in memory (tests/unit/geometries.hpp,
//     random_layer_weights("kimi", seed 1)) and hidden states [P + N, 7168];
//   * per repetition, the cpu backend end to end as `mla-h2o decode` runs it: the weights'
//     preparation, the projections of all P + N rows and the causal prefill's attention over P
//     rows (compute_cpu_decode_inputs),
//     then the decode kernel and every policy at budget K over N steps (run_decode);
//   * the MEDIAN over --reps of prefill, decode and total wall seconds and CPU seconds (user +
//     sys of all threads: on a shared machine wall / CPU time shows the contention), and the
//     process's peak resident memory (getrusage ru_maxrss, includes the weights and inputs
//     built here).
// Defaults: P = 4096, N = 256, K = 512, sinks 4, recent 32, all policies, absorbed, fp32, 1 rep.
//
// Shape legend: P prompt rows, N decode steps, T = P + N, K cache budget, H = hidden_size.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/decode.hpp"

using mla::bench::Clock;
using mla::bench::cpu_model;
using mla::bench::load_average;
using mla::bench::median;
using mla::bench::seconds_since;

namespace {

// CPU seconds (user + sys) this process has used so far, all threads.
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t P = 4096, N = 256, K = 512;
  int reps = 1;
  mla::Precision precision = mla::Precision::FP32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? a.substr(prefix.size()) : std::string();
    };
    if (!value("prompt-len").empty()) P = std::stoll(value("prompt-len"));
    else if (!value("steps").empty()) N = std::stoll(value("steps"));
    else if (!value("budget").empty()) K = std::stoll(value("budget"));
    else if (!value("reps").empty()) reps = std::stoi(value("reps"));
    else if (a == "--precision=bf16") precision = mla::Precision::BF16;
    else if (a == "--precision=fp32") precision = mla::Precision::FP32;
    else {
      std::fprintf(stderr, "bench_decode: unknown argument '%s'\nusage: bench_decode [--prompt-len=4096] [--steps=256] "
                           "[--budget=512] [--reps=1] [--precision=fp32|bf16]\n", a.c_str());
      return 2;
    }
  }
  if (P < 1 || N < 1 || reps < 1) {
    std::fprintf(stderr, "bench_decode: --prompt-len, --steps and --reps must be >= 1\n");
    return 2;
  }
  std::printf("bench_decode: machine %s, %u cores, load average before %s\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), load_average().c_str());
  const mla::AttentionConfig cfg = mla::test::geometry("kimi");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 1);
  const mla::TensorF hidden = mla::test::random_hidden(P + N, cfg.hidden_size, 2);
  mla::DecodeOptions opt;
  opt.prompt_len = P;
  opt.steps = N;
  opt.budgets = {K};
  opt.policies = mla::parse_policy_list("all");
  std::printf("Kimi K2.6 layer geometry (random bf16-valued weights), P = %lld, N = %lld, K = %lld, "
              "%zu policies at their presets, absorbed, %s, cpu backend\n",
              static_cast<long long>(P), static_cast<long long>(N), static_cast<long long>(K), opt.policies.size(),
              mla::precision_name(precision));

  std::vector<double> prefill_s, decode_s, total_s, prefill_cpu, decode_cpu;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    mla::ForwardOptions f;
    f.precision = precision;
    mla::DecodeInputsRequest req;
    req.prompt_len = P;
    req.query_window = mla::prompt_query_window(opt);
    const mla::FeatureNeeds needs = mla::feature_needs(opt.policies);
    if (needs.expected_attention) req.statistics_from = std::min(needs.expected_sinks, P - 1);
    const mla::DecodeInputs in = mla::compute_cpu_decode_inputs(cfg, w, hidden, req, f);
    const mla::TokenFeatures features =
        mla::compute_token_features(cfg, w, in.latent_cache, P, needs, in.query_statistics);
    prefill_s.push_back(seconds_since(t0));
    prefill_cpu.push_back(cpu_seconds() - c0);
    const auto t1 = Clock::now();
    const double c1 = cpu_seconds();
    mla::DecodeKernelSpec ks;
    ks.precision = precision;
    ks.slots = mla::decode_slots(opt);
    ks.rows = N;
    auto kernel = mla::make_cpu_decode_kernel(cfg, w, in, ks);
    mla::DecodeContext ctx;
    ctx.head_mass = in.head_mass;
    ctx.features = &features;
    const mla::DecodeResult res = mla::run_decode(opt, ctx, *kernel);
    decode_s.push_back(seconds_since(t1));
    decode_cpu.push_back(cpu_seconds() - c1);
    total_s.push_back(seconds_since(t0));
    if (r == 0) std::fputs(mla::decode_summary_table(mla::summarize(res)).c_str(), stdout);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("median of %d (wall): prefill + projections %.2f s, decode (%lld steps, all policies) %.2f s, total %.2f s\n",
              reps, median(prefill_s), static_cast<long long>(N), median(decode_s), median(total_s));
  std::printf("median of %d (CPU time, user + sys of all threads): prefill + projections %.2f s, decode %.2f s, "
              "total %.2f s\n", reps, median(prefill_cpu), median(decode_cpu), median(prefill_cpu) + median(decode_cpu));
  std::printf("peak resident memory %.2f GiB (the whole process: layer weights and inputs built here included)\n",
              static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0));
  std::printf("load average after %s\n", load_average().c_str());
  return 0;
}
