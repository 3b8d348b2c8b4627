// tests/bench/bench_rate.hpp — the machine's own bound, measured in the same run as the thing
// measured against it: the GEMM rate of one matmul on the projection engine `--gemm auto` picks
// (gemm_rate); best_gemm_rate: the fastest of every engine and precision, for a bound that is the
// machine's real GEMM rate (on an AVX2-only CPU oneDNN 2.6 has no bf16 matmul kernel, and bf16
// values are exact in fp32, so an fp32 matmul does the same work); and one plain oneDNN matmul of
// a given shape (PlainMatmul: bench_cpu's bound per projection, docs/cpu-gemm.md §8).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "mla/bf16.hpp"
#include "mla/random.hpp"
#include "mla_build_config.h"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/gemm_engine.hpp"
#if MLA_HAVE_ONEDNN
#include "src/cpu/onednn_common.hpp"
#endif

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

#if MLA_HAVE_ONEDNN
// One plain oneDNN matmul dst [M, N] (f32) = src [M, K] (dt) x weights [K, N] (dt): default
// attributes, oneDNN's own threading on `threads` OpenMP threads, the weights in the layout the
// primitive prefers (reordered from random values once, before any timing), src random. What a
// user of the library gets from one call; `available` is false when oneDNN has no matmul for dt
// on this CPU (bf16 on AVX2 with oneDNN 2.6).
class PlainMatmul {
 public:
  PlainMatmul(int64_t M, int64_t K, int64_t N, bool bf16, int threads) : threads_(threads), bf16_(bf16) {
    using dnnl::memory;
    const memory::data_type dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    cpu::Dnnl& d = cpu::Dnnl::get();
    cpu::DnnlThreads team(threads_);  // a primitive plans its threads when created
    try {
      const memory::desc src({M, K}, dt, memory::format_tag::ab), dst({M, N}, memory::data_type::f32, memory::format_tag::ab);
      const memory::desc any({K, N}, dt, memory::format_tag::any);
      pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, any, dst), d.engine);
    } catch (const dnnl::error&) {
      return;  // no matmul for dt here
    }
    matmul_ = dnnl::matmul(pd_);
    Rng rng(7, 3);
    auto random_memory = [&](const memory::desc& md, float scale) {
      const int64_t count = md.dims()[0] * md.dims()[1];
      std::vector<float> v(static_cast<size_t>(count));
      for (float& x : v) x = static_cast<float>(scale * rng.normal());
      memory m(md, d.engine);
      if (bf16_) {
        auto* bits = static_cast<uint16_t*>(m.get_data_handle());
        for (int64_t i = 0; i < count; ++i) bits[i] = mla::bf16::round_bits(v[static_cast<size_t>(i)]);
      } else {
        std::copy(v.begin(), v.end(), static_cast<float*>(m.get_data_handle()));
      }
      return m;
    };
    src_ = random_memory(pd_.src_desc(), 1.0f);
    memory plain_w = random_memory(memory::desc({K, N}, dt, memory::format_tag::ab), 0.02f);
    weights_ = memory(pd_.weights_desc(), d.engine);
    dnnl::reorder(plain_w, weights_).execute(d.stream, plain_w, weights_);
    dst_ = memory(pd_.dst_desc(), d.engine);
    d.stream.wait();
    available_ = true;
    run();  // warm-up: page faults, oneDNN's scratchpad
  }
  bool available() const { return available_; }
  std::string kernel() const { return available_ ? pd_.impl_info_str() : "none"; }
  const char* data_type() const { return bf16_ ? "bf16" : "f32"; }
  // Wall seconds of one execution.
  double run() {
    cpu::DnnlThreads team(threads_);
    cpu::Dnnl& d = cpu::Dnnl::get();
    const auto t0 = Clock::now();
    matmul_.execute(d.stream, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}});
    d.stream.wait();
    return seconds_since(t0);
  }

 private:
  int threads_;
  bool bf16_;
  bool available_ = false;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul matmul_;
  dnnl::memory src_, weights_, dst_;
};
#endif

}  // namespace mla::bench
