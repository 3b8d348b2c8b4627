// tests/bench/bench_cuda.cpp — benchmark of the cuda backend (meson benchmark, suite 'cuda').
//
// Kimi K2.6 layer-0 attention geometry (H 7168, n 64, r_q 1536, r_kv 512, d_qk 192, d_v 128)
// with synthetic weights (N(0, 0.02^2), seed 0) and hidden states (N(0, 1), seed 1), for
// S = 256, 4096, 8192 (default; scripts/gpu-check adds 32768 and 131072 with --seq) in bf16
// and fp32 (fp32 without TF32), causal mask:
//   * per-stage GPU time (cudaEvent pairs recorded by the backend), median over the runs;
//   * forward wall time (host clock, includes the host-side input conversion, the uploads,
//     the downloads and their widening to double), median;
//   * the attention's useful arithmetic rate: 2 (d_qk + d_v) FLOP per visible (head, query,
//     key) of the causal mask, n S (S + 1) / 2 of them, plus the projections' 202,244,096 FLOP
//     per token (the tiled kernel recomputes q.k in each of its three passes, which is
//     not counted);
//   * device memory: in use after prepare() and after the forwards (cudaMemGetInfo: total -
//     free, minus what was in use before the backend existed), next to the memory plan's
//     device estimate (estimate_memory). The backend keeps its one workspace allocated between
//     forwards and no [n, S, S] buffer is made (attn_weights are not kept), so "after forward"
//     is the process's high-water mark.
// Steady state: one warm-up forward per S (not timed), then --runs timed forwards; from
// S = 16384 on, no warm-up and one timed forward (each takes seconds to minutes; the stage times
// are device events, which the workspace's cudaMalloc precedes).
// Exits 77 (meson SKIP) without a usable CUDA device.
// Usage: bench_cuda [--runs N] [--seq 256,4096] [--precision bf16|fp32|both]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "mla/attention.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"
#include "mla/model.hpp"
#include "mla/memory_plan.hpp"
#include "mla/random.hpp"
#include "mla_build_config.h"

#if MLA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Device memory in use (bytes), or -1 when it cannot be read.
double device_used_bytes() {
#if MLA_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return static_cast<double>(total_b - free_b);
#else
  return -1;
#endif
}

mla::TensorF random_tensor(const std::string& name, std::vector<int64_t> shape, double stddev, uint64_t seed,
                           uint64_t stream) {
  mla::TensorF t(name, std::move(shape));
  mla::Rng rng(seed, stream);
  for (float& v : t.data) v = static_cast<float>(stddev * rng.normal());
  return t;
}

mla::LayerWeights synthetic_weights(const mla::AttentionConfig& c) {
  const int64_t H = c.hidden_size, n = c.num_attention_heads, r_q = c.q_lora_rank, r_kv = c.kv_lora_rank;
  const int64_t d_qk = c.qk_head_dim(), d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim, d_v = c.v_head_dim;
  mla::LayerWeights w;
  w.q_a_proj = random_tensor("q_a_proj", {r_q, H}, 0.02, 0, 1);
  w.q_a_layernorm = random_tensor("q_a_layernorm", {r_q}, 0.1, 0, 2);
  for (float& v : w.q_a_layernorm.data) v += 1.0f;
  w.q_b_proj = random_tensor("q_b_proj", {n * d_qk, r_q}, 0.02, 0, 3);
  w.kv_a_proj_with_mqa = random_tensor("kv_a_proj_with_mqa", {r_kv + d_r, H}, 0.02, 0, 4);
  w.kv_a_layernorm = random_tensor("kv_a_layernorm", {r_kv}, 0.1, 0, 5);
  for (float& v : w.kv_a_layernorm.data) v += 1.0f;
  w.kv_b_proj = random_tensor("kv_b_proj", {n * (d_n + d_v), r_kv}, 0.02, 0, 6);
  w.o_proj = random_tensor("o_proj", {H, n * d_v}, 0.02, 0, 7);
  return w;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::stoll(s.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::vector<int64_t> seqs = {256, 4096, 8192};
  std::vector<mla::Precision> precisions = {mla::Precision::BF16, mla::Precision::FP32};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--runs") runs = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--seq") seqs = parse_list(value);
    else if (flag == "--precision" && value == "bf16") precisions = {mla::Precision::BF16};
    else if (flag == "--precision" && value == "fp32") precisions = {mla::Precision::FP32};
    else if (flag != "--precision") {
      std::fprintf(stderr, "bench_cuda: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::string why;
  if (!mla::cuda_available(&why)) {
    std::printf("bench_cuda: SKIP: %s\n", why.c_str());
    return 77;
  }
  try {
    const mla::AttentionConfig cfg = mla::kimi_k26_model().attention;
    std::printf("bench_cuda: Kimi K2.6 layer-0 attention geometry, synthetic weights, causal mask, %d timed runs\n", runs);
    const double base_used = device_used_bytes();
    const mla::LayerWeights weights = synthetic_weights(cfg);
    for (const mla::Precision p : precisions) {
      mla::ForwardOptions opt;
      opt.precision = p;
      opt.mask = mla::Mask::Causal;
      auto backend = mla::make_cuda_backend();
      std::printf("\n== %s | %s\n", mla::precision_name(p), backend->description().c_str());
      const auto tp0 = std::chrono::steady_clock::now();
      backend->prepare(cfg, weights, opt);
      const double prepare_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp0).count();
      const double after_prepare = device_used_bytes() - base_used;
      std::printf("prepare: %.3f s, device memory after prepare: %.1f MiB\n", prepare_s, after_prepare / 1048576.0);
      for (const int64_t S : seqs) {
        const mla::TensorF hidden = random_tensor("hidden", {S, cfg.hidden_size}, 1.0, 1, 0);
        const bool long_run = S >= 16384;
        if (!long_run) backend->forward(hidden, opt);  // warm-up: workspace allocation, cuBLAS heuristics
        std::vector<double> wall;
        std::map<std::string, std::vector<double>> stages;
        std::vector<std::string> order;
        for (int r = 0; r < (long_run ? 1 : runs); ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          const mla::ForwardResult res = backend->forward(hidden, opt);
          wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          for (const auto& [name, sec] : res.stage_seconds) {
            if (stages.find(name) == stages.end()) order.push_back(name);
            stages[name].push_back(sec);
          }
        }
        const double after_forward = device_used_bytes() - base_used;
        mla::MemoryRequest req;
        req.backend = mla::BackendKind::Cuda;
        req.seq_len = S;
        req.precision = p;
        const double planned = static_cast<double>(mla::estimate_memory(cfg, req).device_peak_bytes);
        double gpu_total = 0;
        for (const auto& name : order)
          if (name != "export") gpu_total += median(stages[name]);
        const double s = static_cast<double>(S), n = static_cast<double>(cfg.num_attention_heads);
        const double pair_flops = 2.0 * static_cast<double>(cfg.qk_head_dim() + cfg.v_head_dim);
        const double flops = 202244096.0 * s + pair_flops * n * s * (s + 1.0) / 2.0;
        std::printf("S=%-6lld %s  wall %s %.4f s  gpu stages %.4f s  (%.1f TFLOP/s useful)  device memory "
                    "high-water %.2f GiB, planned %.2f GiB\n",
                    static_cast<long long>(S), mla::precision_name(p), long_run ? "(1 run)" : "median", median(wall),
                    gpu_total, gpu_total > 0 ? flops / gpu_total * 1e-12 : 0.0, after_forward / 1073741824.0,
                    planned / 1073741824.0);
        for (const auto& name : order)
          std::printf("    %-16s %10.3f ms\n", name.c_str(), median(stages[name]) * 1e3);
        std::fflush(stdout);
      }
    }
  } catch (const mla::Error& e) {
    std::fprintf(stderr, "bench_cuda: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
