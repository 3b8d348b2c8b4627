// tests/bench/bench_rate.hpp — the machine's own bound: the GEMM rate of one plain matmul on the
// projection engine `--gemm auto` picks (oneDNN where the build has it), in the same run as the
// thing measured against it; best_gemm_rate: the fastest of every engine and precision, for a
// bound that is the machine's real GEMM rate (on an AVX2-only CPU oneDNN 2.6 has no bf16 matmul
// kernel, and bf16 values are exact in fp32, so an fp32 matmul does the same work).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "mla/random.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/gemm_engine.hpp"

namespace mla::bench {

struct Rate {
  double gflops = 0;
  std::string engine;  // "oneDNN 2.6.3, brg:avx512_core_bf16, 2 threads"
};

// GFLOP/s of y [M, N] = x [M, K] W^T on all cores, median of 5 after a warm-up, on the engine
// `choice` gives for the precision.
inline Rate gemm_rate(bool bf16, int64_t M = 4096, int64_t N = 4096, int64_t K = 4096, Gemm choice = Gemm::Auto) {
  const int threads = cpu::resolve_threads(0);
  std::string why;
  const std::unique_ptr<cpu::GemmEngine> engine = cpu::make_gemm_engine(choice, bf16, why);
  Rng rng(5, 1);
  std::vector<float> w(static_cast<size_t>(N * K));
  for (float& v : w) v = static_cast<float>(0.02 * rng.normal());
  cpu::MatrixRM x(M, K), y;
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(rng.normal());
  if (bf16) cpu::round_to_bf16_inplace(x.data(), x.size());
  const auto linear = engine->prepare({"bound", w.data(), N, K, nullptr}, bf16, threads);
  linear->run(x, threads, y);  // warm-up: primitives, page faults
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    linear->run(x, threads, y);
    t.push_back(seconds_since(t0));
  }
  return {2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) / median(t) / 1e9,
          std::string(bf16 ? "bf16" : "fp32") + ", " + gemm_label(engine->name(), linear->kernel()) + ", " +
              std::to_string(threads) + " threads"};
}

// [4096 x 4096 x 4096] in bf16 and fp32 on `--gemm auto` and, when built, oneDNN (each engine and
// kernel once): every rate measured, printed as "  <label>: R GFLOP/s", and the fastest.
inline Rate best_gemm_rate() {
  std::vector<Rate> rates;
  for (const bool bf16 : {true, false})
    for (const Gemm g : {Gemm::Auto, Gemm::OneDnn}) {
      if (g == Gemm::OneDnn && !cpu::onednn_built()) continue;
      const Rate r = gemm_rate(bf16, 4096, 4096, 4096, g);
      bool seen = false;
      for (const Rate& o : rates) seen = seen || o.engine == r.engine;
      if (seen) continue;
      std::printf("  GEMM [4096 x 4096 x 4096] %s: %.1f GFLOP/s\n", r.engine.c_str(), r.gflops);
      rates.push_back(r);
    }
  Rate best;
  for (const Rate& r : rates)
    if (r.gflops > best.gflops) best = r;
  return best;
}

}  // namespace mla::bench
