// tests/bench/bench_cpu.cpp — benchmark of the cpu backend with each projection GEMM engine
// (Eigen + OpenBLAS, oneDNN; docs/cpu-gemm.md) on the Kimi K2.6 layer-0 attention geometry,
// with the PyTorch eager peer (bench_torch.py) in the same run.
//
// What it measures (meson `benchmark()`, suite cpu; `meson test -C BUILD --benchmark --suite cpu`):
//   * machine: CPU model (/proc/cpuinfo), cores, load average before and after (the numbers
//     are only comparable within one run when the machine is shared);
//   * one layer with random bf16-valued weights in memory (tests/unit/geometries.hpp,
//     random_layer_weights("kimi", seed 1)), hidden states [S, 7168] for each S of --seq-len
//     (a list, default 256);
//   * with --checkpoint-dir (meson passes <build>/tests/bench/kimi-layer0): load + prepare from
//     the page cache: a bf16 Kimi layer 0 is synthesized there once, then Checkpoint::open +
//     load_layer and prepare() per (precision, engine), median of 3, wall and process CPU time
//     (--load-only: that table alone, no forwards);
//   * for each S, each projection of the layer (q_a_proj, q_b_proj, kv_a_proj_with_mqa,
//     kv_b_proj, o_proj; x [S, in] random) on every engine of --gemm as the backend prepares it,
//     against its bound: ONE plain oneDNN matmul of the same shape [S, in] x [in, out] and
//     precision, default attributes, oneDNN's own threads (bench_rate.hpp PlainMatmul; in bf16
//     where oneDNN has no native bf16 kernel, also the fp32 one, and the faster counts), each
//     kernel named; one warm-up each, then `--reps` rounds running them all in turn (the same
//     load for all on a shared machine); medians, each projection's median / its bound's, and
//     the totals (docs/cpu-gemm.md §8; issue 25: within 1.25x). --projections-only: this table
//     alone;
//   * for each S, precision (fp32, bf16) and engine of --gemm (default: every engine of the
//     build): prepare() once ("prepare"), `--warmup` forwards, then `--reps` forwards; the
//     MEDIAN of every stage the backend reports and of the whole forward, one column each;
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
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_rate.hpp"
#include "bench_util.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/synth.hpp"
#include "mla/error.hpp"
#include "mla_build_config.h"
#include "src/cpu/attention_stages.hpp"

namespace {

using mla::bench::Clock;
using mla::bench::cpu_model;
using mla::bench::load_average;
using mla::bench::median;
using mla::bench::PeerOutput;
using mla::bench::run_peer;
using mla::bench::seconds_since;

struct Flags {
  std::vector<int64_t> seq_lens = {256};
  std::vector<mla::Gemm> gemms;  // empty = every engine of the build
  int warmup = 1;
  int reps = 5;
  int threads = 0;
  std::string source_root = ".";
  std::string torch_script;  // "" = no PyTorch peer
  std::string python;        // "" = <source_root>/.venv/bin/python3 if present, else python3
  std::string checkpoint_dir;  // "" = no load + prepare measurement; else where the Kimi layer is synthesized once
  bool load_only = false;      // --load-only: the load + prepare table only, no forwards
  bool projections_only = false;  // --projections-only: the projections against their bound only, no forwards
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    out.push_back(list.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return out;
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? a.substr(prefix.size()) : std::string();
    };
    if (!value("seq-len").empty()) {
      f.seq_lens.clear();
      for (const std::string& v : split(value("seq-len"))) f.seq_lens.push_back(std::stoll(v));
    } else if (!value("gemm").empty()) {
      for (const std::string& v : split(value("gemm"))) {
        if (v != "eigen" && v != "onednn") {
          std::fprintf(stderr, "bench_cpu: --gemm takes eigen and/or onednn, got '%s'\n", v.c_str());
          std::exit(2);
        }
        f.gemms.push_back(v == "eigen" ? mla::Gemm::Eigen : mla::Gemm::OneDnn);
      }
    }
    else if (!value("warmup").empty()) f.warmup = std::stoi(value("warmup"));
    else if (!value("reps").empty()) f.reps = std::stoi(value("reps"));
    else if (!value("threads").empty()) f.threads = std::stoi(value("threads"));
    else if (!value("source-root").empty()) f.source_root = value("source-root");
    else if (!value("checkpoint-dir").empty()) f.checkpoint_dir = value("checkpoint-dir");
    else if (!value("torch-script").empty()) f.torch_script = value("torch-script");
    else if (!value("python").empty()) f.python = value("python");
    else if (a == "--no-torch") f.torch_script.clear();
    else if (a == "--load-only") f.load_only = true;
    else if (a == "--projections-only") f.projections_only = true;
    else {
      std::fprintf(stderr,
                   "bench_cpu: unknown argument '%s'\nusage: bench_cpu [--seq-len=256,1024] [--gemm=eigen,onednn] [--warmup=1] [--reps=5] "
                   "[--threads=0] [--source-root=DIR] [--torch-script=PATH] [--python=PATH] [--no-torch] "
                   "[--checkpoint-dir=DIR] [--load-only] [--projections-only]\n",
                   a.c_str());
      std::exit(2);
    }
  }
  if (f.gemms.empty()) f.gemms = MLA_HAVE_ONEDNN ? std::vector<mla::Gemm>{mla::Gemm::Eigen, mla::Gemm::OneDnn}
                                                 : std::vector<mla::Gemm>{mla::Gemm::Eigen};
  const bool bad_seq = std::any_of(f.seq_lens.begin(), f.seq_lens.end(), [](int64_t s) { return s < 1; });
  if (f.seq_lens.empty() || bad_seq || f.reps < 1 || f.warmup < 0 || f.threads < 0) {
    std::fprintf(stderr, "bench_cpu: --seq-len and --reps must be >= 1, --warmup and --threads >= 0\n");
    std::exit(2);
  }
  return f;
}


// CPU time of the whole process (all threads), seconds.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

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
  std::string label;  // "fp32 eigen"
  double prepare_s = 0;
  std::vector<std::string> stages;          // in execution order
  std::map<std::string, double> median_s;   // per stage
  double forward_median_s = 0;
  std::vector<double> forward_s;
  std::string description;
  mla::GemmInfo gemm;
};

Measured measure(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, const mla::TensorF& hidden,
                 mla::Precision precision, mla::Gemm gemm, const Flags& f) {
  mla::ForwardOptions opt;
  opt.precision = precision;
  opt.mask = mla::Mask::Causal;
  opt.threads = f.threads;
  opt.gemm = gemm;
  Measured m;
  m.label = std::string(mla::precision_name(precision)) + " " + mla::gemm_name(gemm);
  auto backend = mla::make_cpu_backend();
  auto t0 = Clock::now();
  backend->prepare(cfg, w, opt);
  m.prepare_s = seconds_since(t0);
  m.description = backend->description();
  m.gemm = backend->gemm_info();
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

TorchResult run_torch(const Flags& f, int64_t seq_len, int threads) {
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
  const std::string cmd = "'" + python + "' '" + f.torch_script + "' --seq-len " + std::to_string(seq_len) +
                          " --warmup " + std::to_string(f.warmup) + " --reps " + std::to_string(f.reps) +
                          " --threads " + std::to_string(threads);
  std::printf("\nPyTorch peer: %s\n", cmd.c_str());
  std::fflush(stdout);
  const PeerOutput peer = run_peer(cmd, "BENCH_TORCH_JSON ");
  const std::string& json = peer.json;
  const int code = peer.exit_code;
  if (code < 0 && json.empty()) {
    t.status = "could not start " + python;
    return t;
  }
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


// Load + prepare of the Kimi layer from the page cache: a bf16 checkpoint (synth --preset
// kimi-k2.6 --seed 0 --layers 0) is written once into `dir`, read once to warm the page cache,
// then Checkpoint::open + load_layer(0) and prepare per (precision, engine), median of 3: as
// `mla-h2o run` prepares (prepare_shared: engines read the loaded weights in place where they
// can) and, for comparison, prepare() on a const layer (every engine copies what it keeps).
void bench_load_prepare(const std::string& dir, int threads, const Flags& f) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir + "/COMPLETE")) {
    mla::SynthOptions so;
    so.preset = "kimi-k2.6";
    so.out_dir = dir;
    so.seed = 0;
    so.layers = {0};
    mla::synthesize_checkpoint(so);
    std::ofstream(dir + "/COMPLETE") << "kimi-k2.6 seed 0 layer 0\n";
  }
  const mla::AttentionConfig cfg = mla::Checkpoint::open(dir).config();
  // wall and process CPU seconds of fn, median of 3 (CPU time: less sensitive to other
  // processes on a shared machine)
  auto timed = [](const std::function<void()>& fn) {
    std::vector<double> wall, cpu;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      fn();
      cpu.push_back(process_cpu_seconds() - c0);
      wall.push_back(seconds_since(t0));
    }
    return std::make_pair(median(wall), median(cpu));
  };
  auto w = std::make_shared<const mla::LayerWeights>(mla::Checkpoint::open(dir).load_layer(0));  // page cache warm
  const auto load = timed([&] { w = std::make_shared<const mla::LayerWeights>(mla::Checkpoint::open(dir).load_layer(0)); });
  std::printf("\n== load + prepare of the Kimi layer from the page cache (bf16 safetensors, %s), median of 3\n",
              dir.c_str());
  std::printf("%-28s %9s %9s   %s\n", "", "wall ms", "CPU ms", "load + prepare: wall ms (CPU ms)");
  std::printf("%-28s %9.1f %9.1f\n", "open + load_layer", 1e3 * load.first, 1e3 * load.second);
  for (const mla::Precision p : {mla::Precision::FP32, mla::Precision::BF16}) {
    for (const mla::Gemm g : f.gemms) {
      mla::ForwardOptions opt;
      opt.precision = p;
      opt.gemm = g;
      opt.threads = threads;
      for (const bool shared : {true, false}) {
        const auto prep = timed([&] {
          if (shared) mla::make_cpu_backend()->prepare_shared(cfg, w, opt);
          else mla::make_cpu_backend()->prepare(cfg, *w, opt);
        });
        const std::string label = std::string(shared ? "prepare_shared " : "prepare (copy) ") + mla::precision_name(p) +
                                  " " + mla::gemm_name(g);
        std::printf("%-28s %9.1f %9.1f   %9.1f (%.1f)\n", label.c_str(), 1e3 * prep.first, 1e3 * prep.second,
                    1e3 * (load.first + prep.first), 1e3 * (load.second + prep.second));
      }
    }
  }
  std::fflush(stdout);
}

// ---- each projection against one plain oneDNN matmul of its shape ------------------------------

// One engine's prepared projections in one precision (cpu::prepare_weights, as the backend
// prepares them for --gemm).
struct ProjectionColumn {
  std::string label;   // "fp32 eigen"
  std::string engine;  // "Eigen 3.4.0 + OpenBLAS sgemm" or "oneDNN 2.6.3, gemm:jit"
  bool is_auto = false;  // the engine --gemm auto runs on this CPU
  mla::cpu::PreparedWeights w;
};

// The layer's projections in the forward's order: the prepared one and its weight [out, in].
struct ProjectionOf {
  const char* name;
  std::unique_ptr<mla::cpu::PreparedLinear> mla::cpu::PreparedWeights::*prepared;
  mla::TensorF mla::LayerWeights::*weight;
};
const ProjectionOf kProjections[] = {
    {"q_a_proj", &mla::cpu::PreparedWeights::q_a_proj, &mla::LayerWeights::q_a_proj},
    {"q_b_proj", &mla::cpu::PreparedWeights::q_b_proj, &mla::LayerWeights::q_b_proj},
    {"q_proj", &mla::cpu::PreparedWeights::q_proj, &mla::LayerWeights::q_proj},
    {"kv_a_proj_with_mqa", &mla::cpu::PreparedWeights::kv_a_proj_with_mqa, &mla::LayerWeights::kv_a_proj_with_mqa},
    {"kv_b_proj", &mla::cpu::PreparedWeights::kv_b_proj, &mla::LayerWeights::kv_b_proj},
    {"o_proj", &mla::cpu::PreparedWeights::o_proj, &mla::LayerWeights::o_proj},
};

// The bound of one shape [M, K] x [K, N] in one precision: the plain oneDNN matmul of that
// precision (bench_rate.hpp PlainMatmul); in bf16 where oneDNN has no native bf16 kernel on this
// CPU (none at all on AVX2, the fp32-emulating gemm:jit on AVX-512 without BF16) the fp32 one as
// well, and the faster of the two counts. None in a build without oneDNN.
class ShapeBound {
 public:
  ShapeBound([[maybe_unused]] int64_t M, [[maybe_unused]] int64_t K, [[maybe_unused]] int64_t N,
             [[maybe_unused]] bool bf16, [[maybe_unused]] int threads) {
#if MLA_HAVE_ONEDNN
    matmuls_.push_back(std::make_unique<mla::bench::PlainMatmul>(M, K, N, bf16, threads));
    const std::string kernel = matmuls_.back()->kernel();
    const bool native = kernel.find("bf16") != std::string::npos || kernel.find("amx") != std::string::npos;
    if (bf16 && (!matmuls_.back()->available() || !native))
      matmuls_.push_back(std::make_unique<mla::bench::PlainMatmul>(M, K, N, false, threads));
    seconds_.resize(matmuls_.size());
#endif
  }
  // One execution of each matmul, timed.
  void run() {
#if MLA_HAVE_ONEDNN
    for (size_t b = 0; b < matmuls_.size(); ++b)
      if (matmuls_[b]->available()) seconds_[b].push_back(matmuls_[b]->run());
#endif
  }
  // The faster median, 0 when there is none; and what ran: "gemm:jit (f32) 33 GF/s".
  double seconds() const {
    double best = 0;
    for (const auto& t : seconds_)
      if (!t.empty() && (best == 0 || median(t) < best)) best = median(t);
    return best;
  }
  std::string describe([[maybe_unused]] double flops) const {
    std::string d;
#if MLA_HAVE_ONEDNN
    for (size_t b = 0; b < matmuls_.size(); ++b) {
      d += (b ? ", " : "") + matmuls_[b]->kernel() + " (" + matmuls_[b]->data_type() + ")";
      if (!seconds_[b].empty()) d += " " + std::to_string(static_cast<int>(flops / median(seconds_[b]) / 1e9)) + " GF/s";
    }
#endif
    return d.empty() ? "none (no oneDNN in this build)" : d;
  }

 private:
#if MLA_HAVE_ONEDNN
  std::vector<std::unique_ptr<mla::bench::PlainMatmul>> matmuls_;
#endif
  std::vector<std::vector<double>> seconds_;
};

// The columns of one precision, each printed with its engine: every engine of --gemm, each once
// (bf16 --gemm onednn on a CPU without a oneDNN bf16 matmul runs the Eigen engine: that column is
// not measured twice).
std::vector<ProjectionColumn> projection_columns(const mla::AttentionConfig& cfg, const mla::LayerWeights& w,
                                                 mla::Precision precision, int threads, const Flags& f) {
  std::string why;
  const auto auto_engine = mla::cpu::make_gemm_engine(mla::Gemm::Auto, precision == mla::Precision::BF16, why);
  const std::string auto_label = mla::gemm_label(auto_engine->name(), auto_engine->kernel());
  std::vector<ProjectionColumn> cols;
  for (const mla::Gemm g : f.gemms) {
    ProjectionColumn c;
    c.label = std::string(mla::precision_name(precision)) + " " + mla::gemm_name(g);
    c.w = mla::cpu::prepare_weights(cfg, w, precision, threads, g);
    c.engine = mla::gemm_label(c.w.gemm.engine, c.w.gemm.kernel);
    const bool twice = std::any_of(cols.begin(), cols.end(), [&](const ProjectionColumn& o) { return o.engine == c.engine; });
    if (twice) {
      std::printf("   %-12s runs %s as well (%s): not measured twice\n", c.label.c_str(), c.engine.c_str(),
                  c.w.gemm.reason.c_str());
      continue;
    }
    c.is_auto = c.engine == auto_label;
    std::printf("   %-12s %s (%s)%s\n", c.label.c_str(), c.engine.c_str(), c.w.gemm.reason.c_str(),
                c.is_auto ? "  <- --gemm auto" : "");
    cols.push_back(std::move(c));
  }
  return cols;
}

// One projection's timings at S rows: each column's median and the bound's.
struct ProjectionRow {
  double flops = 0;
  std::vector<double> ours_s;  // per column
  double bound_s = 0;          // 0: no bound
  std::string bound;           // what the bound ran
};

// x [S, in] random (bf16 values in bf16), one warm-up of each column, then `reps` rounds, each
// running every column's projection and the bound once (interleaved, so all see the same load on
// a shared machine); medians.
ProjectionRow time_projection(const ProjectionOf& proj, const std::vector<ProjectionColumn>& cols,
                              const mla::LayerWeights& w, int64_t S, bool bf16, int threads, int reps) {
  const mla::TensorF& weight = w.*proj.weight;
  const int64_t N = weight.dim(0), K = weight.dim(1);
  const mla::TensorF xt = mla::test::random_hidden(S, K, 3);
  mla::cpu::MatrixRM x = Eigen::Map<const mla::cpu::MatrixRM>(xt.ptr(), S, K), y;
  if (bf16) mla::cpu::round_to_bf16_inplace(x.data(), x.size());
  for (const ProjectionColumn& c : cols) (c.w.*proj.prepared)->run(x, threads, y);  // warm-up: primitives, page faults
  ShapeBound bound(S, K, N, bf16, threads);
  std::vector<std::vector<double>> ours(cols.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t j = 0; j < cols.size(); ++j) {
      const auto t0 = Clock::now();
      (cols[j].w.*proj.prepared)->run(x, threads, y);
      ours[j].push_back(seconds_since(t0));
    }
    bound.run();
  }
  ProjectionRow row;
  row.flops = 2.0 * static_cast<double>(S) * static_cast<double>(K) * static_cast<double>(N);
  for (const auto& t : ours) row.ours_s.push_back(median(t));
  row.bound_s = bound.seconds();
  row.bound = bound.describe(row.flops);
  return row;
}

// "12.34 (56)": ms and GFLOP/s.
std::string ms_rate(double seconds, double flops) {
  char cell[64];
  std::snprintf(cell, sizeof cell, "%.2f (%.0f)", 1e3 * seconds, seconds > 0 ? flops / seconds / 1e9 : 0.0);
  return cell;
}

// One precision at one S: a row per projection, then the total (sums of the medians).
void projection_rows(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, int64_t S, mla::Precision precision,
                     int threads, const Flags& f) {
  const std::vector<ProjectionColumn> cols = projection_columns(cfg, w, precision, threads, f);
  std::printf("%-20s %-18s %7s", "projection", "M x K x N", "GFLOP");
  for (const ProjectionColumn& c : cols) std::printf(" %18s %6s", (c.label + " ms").c_str(), "/bound");
  std::printf(" %18s  %s\n", "bound ms (GF/s)", "bound: plain oneDNN matmul, kernel (data type)");
  std::vector<double> ours_total(cols.size(), 0.0);
  double bound_total = 0, flops_total = 0;
  for (const ProjectionOf& proj : kProjections) {
    const mla::TensorF& weight = w.*proj.weight;
    if (weight.empty()) continue;  // absent in this geometry (q_proj with q_lora_rank)
    const ProjectionRow row = time_projection(proj, cols, w, S, precision == mla::Precision::BF16, threads, f.reps);
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(S), static_cast<long long>(weight.dim(1)),
                  static_cast<long long>(weight.dim(0)));
    std::printf("%-20s %-18s %7.2f", proj.name, shape, row.flops / 1e9);
    for (size_t j = 0; j < cols.size(); ++j) {
      std::printf(" %18s %5.2fx", ms_rate(row.ours_s[j], row.flops).c_str(), row.bound_s > 0 ? row.ours_s[j] / row.bound_s : 0.0);
      ours_total[j] += row.ours_s[j];
    }
    std::printf(" %18s  %s\n", ms_rate(row.bound_s, row.flops).c_str(), row.bound.c_str());
    std::fflush(stdout);
    bound_total += row.bound_s;
    flops_total += row.flops;
  }
  std::printf("%-20s %-18s %7.2f", "total", "", flops_total / 1e9);
  for (const double t : ours_total)
    std::printf(" %18s %5.2fx", ms_rate(t, flops_total).c_str(), bound_total > 0 ? t / bound_total : 0.0);
  std::printf(" %18s\n", ms_rate(bound_total, flops_total).c_str());
}

// Each projection of the layer at S rows, every engine of --gemm, against one plain oneDNN matmul
// of the same shape and precision measured in the same process (docs/cpu-gemm.md §8; issue 25:
// the projections within 1.25x of it).
void bench_projections(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, int64_t S, int threads,
                       const Flags& f) {
  std::printf("\n== S = %lld: each projection against one plain oneDNN matmul of its shape (%d threads, its own "
              "OpenMP threading), %s; median of %d interleaved runs after one warm-up; load average %s\n",
              static_cast<long long>(S), threads, cpu_model().c_str(), f.reps, load_average().c_str());
  for (const mla::Precision p : {mla::Precision::FP32, mla::Precision::BF16}) {
    std::printf("%s:\n", mla::precision_name(p));
    projection_rows(cfg, w, S, p, threads, f);
  }
  std::fflush(stdout);
}

// One S: every (precision, engine) column, the per-stage medians, then the PyTorch peer.
void bench_seq_len(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, int64_t S, int threads, const Flags& f) {
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 2);
  std::vector<Measured> cols;
  for (const mla::Precision p : {mla::Precision::FP32, mla::Precision::BF16}) {
    for (const mla::Gemm g : f.gemms) {
      cols.push_back(measure(cfg, w, hidden, p, g, f));
      std::fprintf(stderr, "bench_cpu: S = %lld, %s done\n", static_cast<long long>(S), cols.back().label.c_str());
    }
  }
  std::printf("\n== S = %lld, causal, %d warm-up + %d timed forwards, %d threads\n", static_cast<long long>(S),
              f.warmup, f.reps, threads);
  for (const Measured& m : cols)
    std::printf("   %-12s %s (%s)\n", m.label.c_str(), mla::gemm_label(m.gemm.engine, m.gemm.kernel).c_str(),
                m.gemm.reason.c_str());
  const auto flops = stage_flops(cfg, S);
  std::printf("%-18s", "median ms (GF/s)");
  for (const Measured& m : cols) std::printf(" %20s", m.label.c_str());
  std::printf("\n%-18s", "prepare");
  for (const Measured& m : cols) std::printf(" %20.1f", 1e3 * m.prepare_s);
  for (const std::string& stage : cols.front().stages) {
    std::printf("\n%-18s", stage.c_str());
    for (const Measured& m : cols) {
      const double t = m.median_s.count(stage) ? m.median_s.at(stage) : 0.0;
      const auto it = flops.find(stage);
      char cell[64];
      if (it != flops.end() && t > 0) std::snprintf(cell, sizeof cell, "%.1f (%.0f)", 1e3 * t, it->second / t / 1e9);
      else std::snprintf(cell, sizeof cell, "%.1f", 1e3 * t);
      std::printf(" %20s", cell);
    }
  }
  double total_flops = 0;
  for (const auto& [stage, v] : flops) total_flops += v;
  std::printf("\n%-18s", "forward (total)");
  for (const Measured& m : cols) {
    char cell[64];
    std::snprintf(cell, sizeof cell, "%.1f (%.0f)", 1e3 * m.forward_median_s, total_flops / m.forward_median_s / 1e9);
    std::printf(" %20s", cell);
  }
  std::printf("\n%-18s", "forward min/max");
  for (const Measured& m : cols) {
    char cell[64];
    std::snprintf(cell, sizeof cell, "%.0f/%.0f", 1e3 * *std::min_element(m.forward_s.begin(), m.forward_s.end()),
                  1e3 * *std::max_element(m.forward_s.begin(), m.forward_s.end()));
    std::printf(" %20s", cell);
  }
  std::printf("\n(GF/s: linears %.1f GFLOP + causal attention %.2f GFLOP per forward)\n",
              (flops.at("q_path") + flops.at("kv_path") + flops.at("o_proj")) / 1e9,
              flops.at("attend") / 1e9);
  std::fflush(stdout);

  const TorchResult torch = run_torch(f, S, threads);
  if (!torch.ran) {
    std::printf("PyTorch peer: %s\n", torch.status.c_str());
    return;
  }
  const double tf = torch.median_s.count("fp32") ? torch.median_s.at("fp32") : 0.0;
  const double tb = torch.median_s.count("bf16") ? torch.median_s.at("bf16") : 0.0;
  std::printf("%-44s %12s %12s %12s\n", "median forward, same run", "ms", "PyTorch ms", "ours/PyTorch");
  for (const Measured& m : cols) {
    const double peer = m.label.rfind("bf16", 0) == 0 ? tb : tf;
    std::printf("%-44s %12.1f %12.1f %11.2fx\n", ("mla-h2o cpu " + m.label).c_str(), 1e3 * m.forward_median_s,
                1e3 * peer, peer > 0 ? m.forward_median_s / peer : 0.0);
  }
  std::printf("(PyTorch: %s, %s)\n", torch.status.c_str(), torch.versions.c_str());
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
    std::printf("gemm auto: %s\n", mla::gemm_auto_summary().c_str());

    if (f.load_only) {
      if (f.checkpoint_dir.empty()) {
        std::fprintf(stderr, "bench_cpu: --load-only needs --checkpoint-dir\n");
        return 2;
      }
      bench_load_prepare(f.checkpoint_dir, threads, f);
      return 0;
    }
    auto t0 = Clock::now();
    const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 1);
    std::printf("weights:   %lld parameters, random bf16 values, generated in %.1f s (not timed below)\n",
                static_cast<long long>(w.parameter_count()), seconds_since(t0));
    if (!f.checkpoint_dir.empty() && !f.projections_only) bench_load_prepare(f.checkpoint_dir, threads, f);
    for (const int64_t S : f.seq_lens) {
      bench_projections(cfg, w, S, threads, f);
      if (!f.projections_only) bench_seq_len(cfg, w, S, threads, f);
    }
    std::printf("\nload average at end: %s\n", load_average().c_str());
  } catch (const mla::Error& e) {
    std::fprintf(stderr, "bench_cpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
