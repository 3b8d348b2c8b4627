// tests/bench/bench_long_context.cpp — long-context benchmark of the cpu backend
// (docs/long-context.md): `meson test -C BUILD --benchmark --suite long_context`.
//
// Parts, each printed as a table (--parts=bound,attend,layer,long,decode,torch picks some):
//   0. the bound: the machine's bf16 and fp32 GEMM rate with the engine the layer's projections
//      use (`--gemm auto`: src/cpu/gemm_engine.hpp; oneDNN where it has a brgemm kernel), on
//      all cores: y [4096, 4096] = x [4096, 4096] W^T, median of 5 after one warm-up;
//   1. attend only, Kimi K2.6 geometry, causal, bf16 and fp32 operands (random, tests/unit/
//      attention_paths.hpp): the tiled attention (what the backend runs) against the
//      materialized computation it replaced (a whole [S, S] matrix per head), at small S
//      (`--attend-seq-lens`): time (median of `--reps`, 1 run from S = 2048 on) and whether the
//      H2O mass is identical. This is the measurement behind "always streamed". With oneDNN in
//      the build, also the tiled attention with its products on oneDNN (--gemm onednn), and
//      how many blocks reordered their part of a packed operand there (expected 0).
//   2. the whole layer through the CLI (`mla-h2o run`, Kimi layer 0 synthesized once into
//      `--work-dir`, causal, seeded input, --quiet) for every S of `--seq-lens` and both
//      precisions: wall time, forward time, attend time, the run's FLOPs (attention_stages.hpp
//      forward_flops: the projections and the two attention products over the visible pairs),
//      the bound (FLOPs / the precision's rate of part 0), forward / bound, the planned and the
//      measured peak memory (ru_maxrss of the child, wait4: what /usr/bin/time -v reports) and
//      their ratio (the benchmark fails if the plan is below the measured peak or more than 10 %
//      above it), the engine that ran and how many attention blocks reordered their part of a
//      packed oneDNN operand (report.json backend.gemm.onednn_reorders.per_block; expected 0: run
//      the benchmark under each ONEDNN_MAX_CPU_ISA to compare kernels, e.g. AMX and AMX capped
//      off), or the one-line refusal of the memory plan and how long it took;
//   3. `--long-seq-len` (131072) in bf16 as in part 2, when the memory plan says it fits with
//      2 GiB to spare (the machine is shared), else why not;
//   4. `mla-h2o decode` at P = `--decode-prompt-len` (32768), N = `--decode-steps` (256), K =
//      `--decode-budget` (2048), every policy, bf16: prefill and decode seconds, the FLOPs it must
//      compute (decode_flops), its bound and ratio as in part 2, and its peak memory (wait4);
//   5. the PyTorch eager peer (bench_torch.py: transformers' DeepseekV3Attention) at each S of
//      part 2 whose [n, S, S] tensors fit (eager holds ~3 of them in fp32: 12*n*S^2 bytes),
//      skipped with the reason when torch is not importable.
// Shape legend: S = tokens, n = heads.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <simdjson.h>

#include "attention_paths.hpp"
#include "bench_rate.hpp"
#include "bench_util.hpp"
#include "geometries.hpp"
#include "mla/decode.hpp"
#include "mla/policy.hpp"
#include "mla/memory_plan.hpp"
#include "mla/random.hpp"
#include "mla/rope.hpp"
#include "mla_build_config.h"
#include "src/cpu/attention_stages.hpp"
#include "src/cpu/gemm_engine.hpp"
#include "src/cpu/onednn_attention.hpp"
#include "src/cpu/vector_kernels.hpp"

namespace {

using mla::bench::Clock;
using mla::bench::median;
using mla::bench::seconds_since;

struct Flags {
  std::string cli, work_dir = "bench-long-context", torch_script, python = "python3";
  std::vector<int64_t> attend_seq_lens = {256, 1024, 4096};
  std::vector<int64_t> seq_lens = {4096, 16384, 32768};
  std::vector<std::string> precisions = {"bf16", "fp32"};
  std::vector<std::string> parts = {"bound", "attend", "layer", "long", "decode", "torch"};
  int64_t long_seq_len = 131072;
  int64_t decode_prompt_len = 32768, decode_steps = 256, decode_budget = 2048;
  int reps = 3;
  bool has(const std::string& part) const { return std::find(parts.begin(), parts.end(), part) != parts.end(); }
};

std::vector<std::string> str_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) v.push_back(item);
  return v;
}

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) v.push_back(std::stoll(item));
  return v;
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), val = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "--cli") f.cli = val;
    else if (key == "--work-dir") f.work_dir = val;
    else if (key == "--torch-script") f.torch_script = val;
    else if (key == "--python") f.python = val;
    else if (key == "--attend-seq-lens") f.attend_seq_lens = int_list(val);
    else if (key == "--seq-lens") f.seq_lens = int_list(val);
    else if (key == "--long-seq-len") f.long_seq_len = std::stoll(val);
    else if (key == "--reps") f.reps = std::stoi(val);
    else if (key == "--precisions") f.precisions = str_list(val);
    else if (key == "--parts") f.parts = str_list(val);
    else if (key == "--decode-prompt-len") f.decode_prompt_len = std::stoll(val);
    else if (key == "--decode-steps") f.decode_steps = std::stoll(val);
    else if (key == "--decode-budget") f.decode_budget = std::stoll(val);
    else {
      std::fprintf(stderr, "bench_long_context: unknown argument '%s'\n", a.c_str());
      std::exit(2);
    }
  }
  if (f.cli.empty()) {
    std::fprintf(stderr, "bench_long_context: --cli=PATH (the mla-h2o binary) is required\n");
    std::exit(2);
  }
  return f;
}

struct Shell {
  int code = -1;
  std::string out;        // stdout + stderr
  int64_t peak_bytes = 0;  // the command's peak resident memory (wait4 ru_maxrss, as /usr/bin/time -v)
};

// Runs `cmd` with /bin/sh (exec'ed, so the command is the child whose peak memory wait4 reports).
Shell shell(const std::string& cmd) {
  Shell r;
  int fd[2];
  if (pipe(fd) != 0) return r;
  const pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fd[1]);
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) r.out.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) == pid) {
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.peak_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  }
  return r;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// ---- 0. the bound -----------------------------------------------------------------------------

using mla::bench::gemm_rate;
using mla::bench::Rate;

// ---- 1. attend only ------------------------------------------------------------------------

void attend_table(const Flags& f) {
  const mla::AttentionConfig kimi = mla::test::geometry("kimi");
  const float scaling = static_cast<float>(mla::softmax_scale(kimi));
  const bool onednn = MLA_HAVE_ONEDNN != 0;  // the products on oneDNN as well (--gemm onednn)
  std::printf("\n1. attend only (Kimi geometry, 64 heads, causal, 2 workers): streamed vs materialized%s\n",
              onednn ? "; streamed with the oneDNN products (src/cpu/onednn_attention.hpp)" : "");
  std::printf("  %-6s %-9s %14s %14s %8s %-9s", "S", "precision", "materialized s", "streamed s", "ratio", "H2O mass");
  if (onednn) std::printf(" %18s %8s %10s", "streamed oneDNN s", "vs sgemm", "reorders/blk");
  std::printf("\n");
  for (const int64_t S : f.attend_seq_lens) {
    for (const std::string& p : f.precisions) {
      const bool bf16 = p == "bf16";
      // oneDNN may have no matmul for the precision here (bf16 on AVX2): then that column says so
      const std::string kernel = onednn ? mla::cpu::onednn_attention_kernel(bf16) : "";
      const mla::test::Operands o = mla::test::random_operands(kimi, S, bf16, 11);
      const int reps = S >= 2048 ? 1 : std::max(1, f.reps);
      std::vector<double> tm, ts, td;
      mla::test::AttentionResult m, s;
      const mla::OnednnReorders before = mla::cpu::onednn_reorders();
      for (int r = 0; r < reps; ++r) {  // alternating, so each sees the same load
        auto t0 = Clock::now();
        m = mla::test::materialized_attention(o, true, scaling, bf16, 2);
        tm.push_back(seconds_since(t0));
        t0 = Clock::now();
        s = mla::test::tiled_attention(o, true, scaling, bf16, 2);
        ts.push_back(seconds_since(t0));
        if (!kernel.empty()) {
          t0 = Clock::now();
          mla::test::tiled_attention(o, true, scaling, bf16, 2, {}, mla::Gemm::OneDnn);
          td.push_back(seconds_since(t0));
        }
      }
      std::printf("  %-6lld %-9s %14.3f %14.3f %7.2fx %-9s", static_cast<long long>(S), p.c_str(), median(tm), median(ts),
                  median(tm) / median(ts), m.head_scores == s.head_scores ? "identical" : "DIFFERS");
      // blocks whose part of a packed operand was reordered first (docs/cpu-gemm.md §9; expected 0)
      if (!kernel.empty())
        std::printf(" %18.3f %7.2fx %10lld  %s", median(td), median(ts) / median(td),
                    static_cast<long long>((mla::cpu::onednn_reorders() - before).per_block), kernel.c_str());
      else if (onednn)
        std::printf(" %18s", "no oneDNN matmul");
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

// ---- 2./3. the whole layer through the CLI -----------------------------------------------------

std::string kimi_checkpoint(const Flags& f) {
  const std::string dir = f.work_dir + "/kimi-layer0";
  if (std::filesystem::exists(dir + "/COMPLETE")) return dir;
  std::filesystem::remove_all(dir);
  const Shell r = shell("'" + f.cli + "' synth --preset kimi-k2.6 --layers 0 --seed 0 --out '" + dir + "'");
  if (r.code != 0) {
    std::fprintf(stderr, "bench_long_context: synth failed: %s\n", r.out.c_str());
    std::exit(1);
  }
  std::ofstream(dir + "/COMPLETE") << "kimi-k2.6 seed 0 layer 0\n";
  return dir;
}

struct LayerTable {
  const Flags& f;
  std::string ckpt;
  Rate bf16, fp32;  // part 0 (0 GFLOP/s when not measured)
  std::vector<std::string> plan_misses;  // rows whose plan is below the measured peak or > 10 % above it
};

void layer_header() {
  std::printf("  %-7s %-9s %8s %9s %9s %9s %9s %7s %9s %9s %6s %10s  %s\n", "S", "precision", "wall s", "forward s",
              "attend s", "GFLOP", "bound s", "ratio", "plan GiB", "peak GiB", "plan/peak", "reorders/blk",
              "engine (report.json backend.gemm)");
}

void layer_row(LayerTable& t, int64_t S, const std::string& p) {
  const Flags& f = t.f;
  const std::string out = f.work_dir + "/run-" + p + "-" + std::to_string(S);
  std::filesystem::remove_all(out);
  const auto t0 = Clock::now();
  const Shell r = shell("'" + f.cli + "' run --checkpoint '" + t.ckpt + "' --seq-len " + std::to_string(S) +
                        " --precision " + p + " --mask causal --quiet --out '" + out + "'");
  const double wall = seconds_since(t0);
  if (r.code != 0) {
    std::printf("  %-7lld %-9s exit %d after %.3f s: %s\n", static_cast<long long>(S), p.c_str(), r.code, wall,
                first_line(r.out).c_str());
    std::fflush(stdout);
    return;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element rep;
  if (parser.load(out + "/report.json").get(rep) != simdjson::SUCCESS) {
    std::printf("  %-7lld %-9s ran, but report.json is unreadable\n", static_cast<long long>(S), p.c_str());
    return;
  }
  double attend = 0;
  for (simdjson::dom::element st : rep["timing_s"]["forward_stages"].get_array())
    if (std::string_view(st["stage"]) == "attend") attend += double(st["seconds"]);
  const double forward = double(rep["timing_s"]["forward"]);
  const double flops = mla::cpu::forward_flops(mla::test::geometry("kimi"), S, true).total();
  const double rate = (p == "bf16" ? t.bf16 : t.fp32).gflops * 1e9;
  const double bound = rate > 0 ? flops / rate : 0.0;
  const int64_t planned = int64_t(rep["memory"]["planned_peak_bytes"]), peak = r.peak_bytes;
  // the engine that ran, and how many attention blocks reordered their part of a packed operand
  // (docs/cpu-gemm.md §9: expected 0 on every kernel; compare ONEDNN_MAX_CPU_ISA settings with it)
  const simdjson::dom::element gemm = rep["backend"]["gemm"];
  const std::string engine = mla::gemm_label(std::string(std::string_view(gemm["engine"])),
                                             std::string(std::string_view(gemm["kernel"])));
  const int64_t per_block = int64_t(gemm["onednn_reorders"]["per_block"]);
  std::printf("  %-7lld %-9s %8.1f %9.1f %9.1f %9.0f %9.1f %6.2fx %9.2f %9.2f %6.3f %10lld  %s\n", static_cast<long long>(S),
              p.c_str(), wall, forward, attend, flops / 1e9, bound, bound > 0 ? forward / bound : 0.0, gib(planned),
              gib(peak), peak > 0 ? static_cast<double>(planned) / static_cast<double>(peak) : 0.0,
              static_cast<long long>(per_block), engine.c_str());
  // the plan must hold the run (planned >= peak) and stay within 10 % of it (docs/long-context.md §3)
  if (peak > 0 && (planned < peak || static_cast<double>(planned) > 1.1 * static_cast<double>(peak)))
    t.plan_misses.push_back("S = " + std::to_string(S) + " " + p);
  std::fflush(stdout);
  std::filesystem::remove_all(out);
}

// ---- 4. decode at a long prompt ---------------------------------------------------------------

// What `mla-h2o decode` must compute at least (multiply-add = 2): q_path and kv_path over all
// T = P + N rows, the causal prefill's scores over the P prompt rows (q k^T only: its P·V is not
// needed, src/cpu/cpu_decode.cpp), and per step the absorbed
// attention (docs/decode.md §3) of the full cache over x + 1 tokens and of every other policy over
// its cache (at most K + 1 tokens; snapkv grows to K + i + 1), each with its q~ = W_UK^T q_nope,
// W_UV context and o_proj.
double decode_flops(const mla::AttentionConfig& c, int64_t P, int64_t N, int64_t K, int policies) {
  const double n = c.num_attention_heads, H = c.hidden_size, r_kv = c.kv_lora_rank, d_r = c.qk_rope_head_dim;
  const double d_n = c.qk_nope_head_dim, d_v = c.v_head_dim;
  const mla::cpu::ForwardFlops rows = mla::cpu::forward_flops(c, P + N, true);
  const double o_proj = 2.0 * (P + N) * n * d_v * H;
  const double d_qk = d_n + d_r;
  double f = rows.projections - o_proj + mla::cpu::forward_flops(c, P, true).attention * d_qk / (d_qk + d_v);
  const double per_token = 2.0 * n * (2.0 * r_kv + d_r), per_query = 2.0 * n * (d_n * r_kv + r_kv * d_v) + 2.0 * n * d_v * H;
  for (int64_t i = 0; i < N; ++i) {
    f += per_token * static_cast<double>(P + i + 1) + per_query;                                // full
    f += (policies - 1) * (per_token * static_cast<double>(std::min(K + 1, P + i + 1)) + per_query);  // the others
  }
  return f;
}

void decode_row(const LayerTable& t, int64_t P, int64_t N, int64_t K) {
  const Flags& f = t.f;
  const std::string out = f.work_dir + "/decode-" + std::to_string(P);
  std::filesystem::remove_all(out);
  const auto t0 = Clock::now();
  const Shell r = shell("'" + f.cli + "' decode --checkpoint '" + t.ckpt + "' --seq-len " + std::to_string(P + N) +
                        " --prompt-len " + std::to_string(P) + " --steps " + std::to_string(N) + " --cache-budget " +
                        std::to_string(K) + " --precision bf16 --quiet --out '" + out + "'");
  const double wall = seconds_since(t0);
  if (r.code != 0) {
    std::printf("  exit %d after %.1f s: %s\n", r.code, wall, first_line(r.out).c_str());
    return;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element rep;
  if (parser.load(out + "/report.json").get(rep) != simdjson::SUCCESS) {
    std::printf("  ran, but report.json is unreadable\n");
    return;
  }
  // the report's stages: "prefill + projections (cpu)" and "token features" are the prefill,
  // "decode kernel prepare" and "decode steps" the decode (the load's stages are in neither)
  double prefill = 0, decode = 0;
  if (simdjson::dom::array stages; rep["timing_s"]["stages"].get(stages) == simdjson::SUCCESS)
    for (simdjson::dom::element st : stages) {
      const std::string_view name = st["stage"];
      if (name.rfind("prefill", 0) == 0 || name == "token features") prefill += double(st["seconds"]);
      if (name.rfind("decode", 0) == 0) decode += double(st["seconds"]);
    }
  int policies = 0;
  if (simdjson::dom::array a; rep["policies"].get(a) == simdjson::SUCCESS) policies = static_cast<int>(a.size());
  if (policies == 0) policies = static_cast<int>(mla::policy_preset_names().size());
  const double flops = decode_flops(mla::test::geometry("kimi"), P, N, K, policies);
  const double bound = t.bf16.gflops > 0 ? flops / (t.bf16.gflops * 1e9) : 0.0;
  std::printf("  %-7lld %-5lld %-6lld %8d %8.1f %9.1f %8.1f %9.0f %9.1f %6.2fx %9.2f\n", static_cast<long long>(P),
              static_cast<long long>(N), static_cast<long long>(K), policies, wall, prefill, decode, flops / 1e9, bound,
              bound > 0 ? (prefill + decode) / bound : 0.0, gib(r.peak_bytes));
  std::fflush(stdout);
  std::filesystem::remove_all(out);
}

// ---- 5. the PyTorch peer ---------------------------------------------------------------------

void torch_rows(const Flags& f) {
  std::printf("\n5. PyTorch eager peer (bench_torch.py, transformers DeepseekV3Attention, 2 threads)\n");
  if (f.torch_script.empty()) {
    std::printf("  not run (no --torch-script)\n");
    return;
  }
  const mla::MemoryBudget budget = mla::host_memory_budget();
  for (const int64_t S : f.seq_lens) {
    const int64_t need = int64_t{12} * 64 * S * S + (int64_t{4} << 30);  // ~3 fp32 [n, S, S] + the rest
    if (budget.host_bytes >= 0 && need > budget.host_bytes) {
      std::printf("  S = %lld: not run: eager needs ~%.0f GiB ([n, S, S] tensors), %.1f GiB available (%s)\n",
                  static_cast<long long>(S), gib(need), gib(budget.host_bytes), budget.host_source.c_str());
      continue;
    }
    const Shell r = shell("'" + f.python + "' '" + f.torch_script + "' --seq-len " + std::to_string(S) +
                          " --warmup 0 --reps 1 --threads 2");
    if (r.code == 77) {
      std::printf("  skipped: torch is not importable by %s (the peer needs torch + transformers)\n", f.python.c_str());
      return;
    }
    const size_t at = r.out.find("BENCH_TORCH_JSON ");
    std::printf("  S = %lld: %s\n", static_cast<long long>(S),
                r.code == 0 && at != std::string::npos ? first_line(r.out.substr(at + 17)).c_str()
                                                        : ("failed: " + first_line(r.out)).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  std::filesystem::create_directories(f.work_dir);
  const Shell cpu = shell("echo \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, "
                          "$(grep MemTotal /proc/meminfo | xargs), load average $(cut -d' ' -f1-3 /proc/loadavg)\"");
  std::printf("bench_long_context — machine: %s", cpu.out.c_str());
  std::printf("vector kernels (softmax rows, column sums): %s\n", mla::cpu::vector_kernels().name);

  LayerTable table{f, "", {}, {}, {}};
  if (f.has("bound")) {
    std::printf("\n0. the bound: GEMM rate of the projection engine (--gemm auto), [4096, 4096] x [4096, 4096]^T, "
                "median of 5\n");
    table.bf16 = gemm_rate(true);
    std::printf("  bf16: %7.1f GFLOP/s  (%s)\n", table.bf16.gflops, table.bf16.engine.c_str());
    table.fp32 = gemm_rate(false);
    std::printf("  fp32: %7.1f GFLOP/s  (%s)\n", table.fp32.gflops, table.fp32.engine.c_str());
    std::fflush(stdout);
  }
  if (f.has("attend")) attend_table(f);

  if (f.has("layer") || f.has("long") || f.has("decode")) table.ckpt = kimi_checkpoint(f);
  if (f.has("layer")) {
    std::printf("\n2. Kimi layer 0 through `mla-h2o run` (causal, seeded input, all cores); bound = GFLOP / the "
                "precision's rate (part 0), ratio = forward / bound\n");
    layer_header();
    for (const int64_t S : f.seq_lens)
      for (const std::string& p : f.precisions) layer_row(table, S, p);
  }

  if (f.has("long")) {
    std::printf("\n3. S = %lld, bf16\n", static_cast<long long>(f.long_seq_len));
    mla::MemoryRequest req;
    req.backend = mla::BackendKind::Cpu;
    req.seq_len = f.long_seq_len;
    req.precision = mla::Precision::BF16;
    req.threads = mla::cpu::resolve_threads(0);
    const int64_t need = mla::estimate_memory(mla::test::geometry("kimi"), req).host_peak_bytes;
    const mla::MemoryBudget budget = mla::host_memory_budget();
    const int64_t spare = int64_t{2} << 30;
    if (budget.host_bytes >= 0 && need + spare > budget.host_bytes) {
      std::printf("  not run: the plan needs ~%.2f GiB, %.2f GiB is available (%s), and this shared machine keeps "
                  "2 GiB to spare\n", gib(need), gib(budget.host_bytes), budget.host_source.c_str());
    } else {
      layer_header();
      layer_row(table, f.long_seq_len, "bf16");
    }
  }

  if (f.has("decode")) {
    std::printf("\n4. `mla-h2o decode` at a long prompt (Kimi layer 0, bf16, every policy); bound = GFLOP (prefill + "
                "steps, bench_long_context.cpp decode_flops) / the bf16 rate, ratio = (prefill + decode) / bound\n");
    std::printf("  %-7s %-5s %-6s %8s %8s %9s %8s %9s %9s %7s %9s\n", "P", "N", "K", "policies", "wall s", "prefill s",
                "decode s", "GFLOP", "bound s", "ratio", "peak GiB");
    decode_row(table, f.decode_prompt_len, f.decode_steps, f.decode_budget);
  }
  if (f.has("torch")) torch_rows(f);
  const Shell load = shell("cat /proc/loadavg");
  std::printf("\nload average at the end: %s", load.out.c_str());
  if (!table.plan_misses.empty()) {  // a benchmark that can fail: the memory plan off its measured peak
    std::string rows;
    for (const std::string& m : table.plan_misses) rows += (rows.empty() ? "" : ", ") + m;
    std::printf("FAIL: the memory plan is below the measured peak or more than 10 %% above it at %s\n", rows.c_str());
    return 1;
  }
  return 0;
}
