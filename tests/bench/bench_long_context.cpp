// tests/bench/bench_long_context.cpp — long-context benchmark of the cpu backend
// (docs/long-context.md): `meson test -C BUILD --benchmark --suite long_context`.
//
// Parts, each printed as a table:
//   1. attend only, Kimi K2.6 geometry, causal, bf16 and fp32 operands (random, tests/unit/
//      attention_paths.hpp): the streamed attention (what the backend runs) against the
//      materialized computation it replaced (a whole [S, S] matrix per head), at small S
//      (`--attend-seq-lens`): time (median of `--reps`, 1 run from S = 2048 on) and whether the
//      H2O mass is identical. This is the measurement behind "always streamed". With oneDNN in
//      the build, also the streamed attention with its products on oneDNN (--gemm onednn).
//   2. the whole layer through the CLI (`mla-h2o run`, Kimi layer 0 synthesized once into
//      `--work-dir`, causal, seeded input, --quiet) for every S of `--seq-lens` and both
//      precisions: wall time, forward time, the planned and the measured peak memory (ru_maxrss
//      from report.json), or the one-line refusal of the memory plan and how long it took;
//   3. `--refuse-seq-len` (131072) in bf16: refused in well under a second on a 24 GB machine,
//      or run if it fits;
//   4. the PyTorch eager peer (bench_torch.py: transformers' DeepseekV3Attention) at each S of
//      part 2 whose [n, S, S] tensors fit (eager holds ~3 of them in fp32: 12*n*S^2 bytes),
//      skipped with the reason when torch is not importable.
// Shape legend: S = tokens, n = heads.
#include <sys/wait.h>

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
#include "geometries.hpp"
#include "mla/memory_plan.hpp"
#include "mla/rope.hpp"
#include "mla_build_config.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string cli, work_dir = "bench-long-context", torch_script, python = "python3";
  std::vector<int64_t> attend_seq_lens = {256, 1024, 4096};
  std::vector<int64_t> seq_lens = {4096, 8192, 16384, 32768};
  std::vector<std::string> precisions = {"bf16", "fp32"};
  int64_t refuse_seq_len = 131072;
  int reps = 3;
};

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
    else if (key == "--refuse-seq-len") f.refuse_seq_len = std::stoll(val);
    else if (key == "--reps") f.reps = std::stoi(val);
    else if (key == "--precisions") {
      f.precisions.clear();
      std::stringstream ss(val);
      for (std::string p; std::getline(ss, p, ',');) f.precisions.push_back(p);
    } else {
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

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Shell {
  int code = -1;
  std::string out;  // stdout + stderr
};

Shell shell(const std::string& cmd) {
  Shell r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.out += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// ---- 1. attend only ------------------------------------------------------------------------

void attend_table(const Flags& f) {
  const mla::AttentionConfig kimi = mla::test::geometry("kimi");
  const float scaling = static_cast<float>(mla::softmax_scale(kimi));
  const bool onednn = MLA_HAVE_ONEDNN != 0;  // the products on oneDNN as well (--gemm onednn)
  std::printf("\n1. attend only (Kimi geometry, 64 heads, causal, 2 workers): streamed vs materialized%s\n",
              onednn ? "; streamed with the oneDNN products (src/cpu/onednn_attention.hpp)" : "");
  std::printf("  %-6s %-9s %14s %14s %8s %-9s", "S", "precision", "materialized s", "streamed s", "ratio", "H2O mass");
  if (onednn) std::printf(" %18s %8s", "streamed oneDNN s", "vs sgemm");
  std::printf("\n");
  for (const int64_t S : f.attend_seq_lens) {
    for (const std::string& p : f.precisions) {
      const bool bf16 = p == "bf16";
      const mla::test::Operands o = mla::test::random_operands(kimi, S, bf16, 11);
      const int reps = S >= 2048 ? 1 : std::max(1, f.reps);
      std::vector<double> tm, ts, td;
      mla::test::AttentionResult m, s;
      for (int r = 0; r < reps; ++r) {  // alternating, so each sees the same load
        auto t0 = Clock::now();
        m = mla::test::materialized_attention(o, true, scaling, bf16, 2);
        tm.push_back(seconds_since(t0));
        t0 = Clock::now();
        s = mla::test::streamed_attention(o, true, scaling, bf16, 2);
        ts.push_back(seconds_since(t0));
        if (onednn) {
          t0 = Clock::now();
          mla::test::streamed_attention(o, true, scaling, bf16, 2, {}, mla::Gemm::OneDnn);
          td.push_back(seconds_since(t0));
        }
      }
      std::printf("  %-6lld %-9s %14.3f %14.3f %7.2fx %-9s", static_cast<long long>(S), p.c_str(), median(tm), median(ts),
                  median(tm) / median(ts), m.head_scores == s.head_scores ? "identical" : "DIFFERS");
      if (onednn) std::printf(" %18.3f %7.2fx", median(td), median(ts) / median(td));
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

void layer_row(const Flags& f, const std::string& ckpt, int64_t S, const std::string& p) {
  const std::string out = f.work_dir + "/run-" + p + "-" + std::to_string(S);
  std::filesystem::remove_all(out);
  const auto t0 = Clock::now();
  const Shell r = shell("'" + f.cli + "' run --checkpoint '" + ckpt + "' --seq-len " + std::to_string(S) + " --precision " +
                        p + " --mask causal --quiet --out '" + out + "'");
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
    if (std::string_view(st["stage"]) == "attend") attend = double(st["seconds"]);
  std::printf("  %-7lld %-9s %9.1f %9.1f %9.1f %11.2f %11.2f\n", static_cast<long long>(S), p.c_str(), wall,
              double(rep["timing_s"]["forward"]), attend, gib(int64_t(rep["memory"]["planned_peak_bytes"])),
              gib(int64_t(rep["memory"]["measured_peak_rss_bytes"])));
  std::fflush(stdout);
  std::filesystem::remove_all(out);
}

// ---- 4. the PyTorch peer ---------------------------------------------------------------------

void torch_rows(const Flags& f) {
  std::printf("\n4. PyTorch eager peer (bench_torch.py, transformers DeepseekV3Attention, 2 threads)\n");
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
  attend_table(f);

  const std::string ckpt = kimi_checkpoint(f);
  std::printf("\n2. Kimi layer 0 through `mla-h2o run` (causal, seeded input, all cores)\n");
  std::printf("  %-7s %-9s %9s %9s %9s %11s %11s\n", "S", "precision", "wall s", "forward s", "attend s", "planned GiB",
              "peak GiB");
  for (const int64_t S : f.seq_lens)
    for (const std::string& p : f.precisions) layer_row(f, ckpt, S, p);

  std::printf("\n3. S = %lld, bf16 (refused by the memory plan unless it fits)\n", static_cast<long long>(f.refuse_seq_len));
  layer_row(f, ckpt, f.refuse_seq_len, "bf16");

  torch_rows(f);
  const Shell load = shell("cat /proc/loadavg");
  std::printf("\nload average at the end: %s", load.out.c_str());
  return 0;
}
