// tests/bench/bench_model.cpp — speed of the whole model on the shipped trained model
// (models/tiny-mla): the full-cache forward against transformers' on the same tokens, and
// `mla-h2o eval` with every policy at three budgets (issue 17, deliverable 7).
//
//   1. the forward: mla::model_forward over the first T = P + N + 1 tokens of the text (BOS + its
//      bytes), bf16 and fp32, median of --reps after --warmup, per stage; then
//      bench_model_torch.py (transformers' DeepseekV3ForCausalLM, eager, same tokens, same
//      threads) and the ratio ours / transformers (goal: <= 0.5);
//   2. eval: `mla-h2o eval --checkpoint DIR --text FILE --prompt-len P --steps N
//      --cache-budget K1,K2,K3 --policy all --quiet`, wall time (goal: < 60 s on 2 cores).
// Exits 77 (SKIP) when the checkpoint is not there.
//
// `meson test -C build --benchmark --suite model`
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <simdjson.h>

#include "bench_util.hpp"
#include "mla/model.hpp"
#include "mla/model_forward.hpp"
#include "src/cpu/fixed_order.hpp"

namespace {

using mla::bench::Clock;
using mla::bench::median;
using mla::bench::seconds_since;

struct Flags {
  std::string checkpoint, text, cli, torch_script, python, source_root = ".";
  int64_t prompt_len = 1024, steps = 512;
  std::string budgets = "128,256,512";  // > every preset's protected tokens (snapkv: window 64)
  int warmup = 1, reps = 3, threads = 2;
  bool eval = true;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](const std::string& name) {
      const std::string p = "--" + name + "=";
      return a.rfind(p, 0) == 0 ? a.substr(p.size()) : std::string();
    };
    if (!value("checkpoint").empty()) f.checkpoint = value("checkpoint");
    else if (!value("text").empty()) f.text = value("text");
    else if (!value("cli").empty()) f.cli = value("cli");
    else if (!value("torch-script").empty()) f.torch_script = value("torch-script");
    else if (!value("python").empty()) f.python = value("python");
    else if (!value("source-root").empty()) f.source_root = value("source-root");
    else if (!value("prompt-len").empty()) f.prompt_len = std::stoll(value("prompt-len"));
    else if (!value("steps").empty()) f.steps = std::stoll(value("steps"));
    else if (!value("budgets").empty()) f.budgets = value("budgets");
    else if (!value("warmup").empty()) f.warmup = std::stoi(value("warmup"));
    else if (!value("reps").empty()) f.reps = std::stoi(value("reps"));
    else if (!value("threads").empty()) f.threads = std::stoi(value("threads"));
    else if (a == "--no-eval") f.eval = false;
    else {
      std::fprintf(stderr,
                   "usage: bench_model --checkpoint=DIR --text=FILE [--cli=mla-h2o] [--torch-script=PATH] "
                   "[--python=PATH] [--source-root=DIR] [--prompt-len=1024] [--steps=512] [--budgets=128,256,512] [--warmup=1] "
                   "[--reps=3] [--threads=2] [--no-eval]\n");
      std::exit(2);
    }
  }
  if (f.python.empty()) {  // as bench_cpu: the source tree's .venv when there is one
    const std::string venv = f.source_root + "/.venv/bin/python3";
    f.python = std::filesystem::exists(venv) ? venv : "python3";
  }
  return f;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  namespace fs = std::filesystem;
  if (!fs::exists(fs::path(f.checkpoint) / "config.json") || !fs::exists(f.text)) {
    std::printf("bench_model: %s or %s is missing: SKIP\n", f.checkpoint.c_str(), f.text.c_str());
    return 77;
  }
  std::printf("bench_model: CPU %s, load average %s, fixed-order kernels: %s, %d threads\n",
              mla::bench::cpu_model().c_str(), mla::bench::load_average().c_str(), mla::cpu::fixed_order_isa(),
              f.threads);
  const mla::Checkpoint ckpt = mla::Checkpoint::open(f.checkpoint);
  const mla::ModelConfig cfg = mla::load_model_config(ckpt.config_path());
  std::vector<int64_t> ids = mla::byte_level_token_ids(cfg, read_file(f.text), f.text);
  const int64_t T = f.prompt_len + f.steps + 1;
  if (static_cast<int64_t>(ids.size()) < T) {
    std::printf("bench_model: %s gives %zu tokens, fewer than P + N + 1 = %lld\n", f.text.c_str(), ids.size(),
                static_cast<long long>(T));
    return 1;
  }
  ids.resize(static_cast<size_t>(T));

  // ---- 1. the forward, then transformers on the same tokens ----
  std::map<std::string, double> ours;
  for (const char* tag : {"bf16", "fp32"}) {
    mla::ModelForwardOptions opt;
    opt.precision = std::string(tag) == "bf16" ? mla::Precision::BF16 : mla::Precision::FP32;
    opt.threads = f.threads;
    std::vector<double> times;
    mla::StageSeconds last;
    for (int r = 0; r < f.warmup + f.reps; ++r) {
      const Clock::time_point t0 = Clock::now();
      mla::ModelForwardResult res = mla::model_forward(ckpt, cfg, ids, opt);
      if (r >= f.warmup) times.push_back(seconds_since(t0));
      last = std::move(res.stage_seconds);
    }
    ours[tag] = median(times);
    std::printf("mla-h2o forward, %s, T = %lld: median %.3f s over %d (", tag, static_cast<long long>(T), ours[tag],
                f.reps);
    for (size_t i = 0; i < last.size(); ++i) std::printf("%s%s %.3f s", i ? ", " : "", last[i].first.c_str(), last[i].second);
    std::printf(")\n");
  }
  std::string tokens_file = (fs::temp_directory_path() / ("bench_model_ids_" + std::to_string(getpid()) + ".txt")).string();
  {
    std::ofstream out(tokens_file);
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
  }
  if (!f.torch_script.empty()) {
    const std::string cmd = "'" + f.python + "' '" + f.torch_script + "' --checkpoint '" + f.checkpoint + "' --tokens '" +
                            tokens_file + "' --warmup " + std::to_string(f.warmup) + " --reps " +
                            std::to_string(f.reps) + " --threads " + std::to_string(f.threads);
    std::printf("\ntransformers peer: %s\n", cmd.c_str());
    std::fflush(stdout);
    const mla::bench::PeerOutput peer = mla::bench::run_peer(cmd, "BENCH_MODEL_TORCH_JSON ");
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (peer.exit_code == 77) {
      std::printf("transformers peer: skipped (torch or transformers not importable by %s)\n", f.python.c_str());
    } else if (peer.exit_code != 0 || parser.parse(peer.json).get(doc) != simdjson::SUCCESS) {
      std::printf("transformers peer: failed (exit status %d)\n", peer.exit_code);
    } else {
      std::string_view torch_v = "?", tf_v = "?", experts = "?";
      if (doc["torch"].get(torch_v) != simdjson::SUCCESS) torch_v = "?";
      if (doc["transformers"].get(tf_v) != simdjson::SUCCESS) tf_v = "?";
      if (doc["experts_implementation"].get(experts) != simdjson::SUCCESS) experts = "?";
      std::printf("transformers %s (torch %s, eager attention, experts %s):\n", std::string(tf_v).c_str(),
                  std::string(torch_v).c_str(), std::string(experts).c_str());
      for (const char* tag : {"bf16", "fp32"}) {
        double theirs = 0;
        if (doc[tag]["median_s"].get(theirs) != simdjson::SUCCESS) continue;
        std::printf("  %s: transformers %.3f s, mla-h2o %.3f s: %.2fx of transformers' time (goal <= 0.5x)\n", tag,
                    theirs, ours[tag], ours[tag] / theirs);
      }
    }
  }
  fs::remove(tokens_file);

  // ---- 2. eval: every policy at three budgets ----
  if (f.eval && !f.cli.empty()) {
    const std::string out_dir = (fs::temp_directory_path() / ("bench_model_eval_" + std::to_string(getpid()))).string();
    const std::string cmd = "'" + f.cli + "' eval --checkpoint '" + f.checkpoint + "' --text '" + f.text +
                            "' --prompt-len " + std::to_string(f.prompt_len) + " --steps " + std::to_string(f.steps) +
                            " --cache-budget " + f.budgets + " --policy all --threads " + std::to_string(f.threads) +
                            " --quiet --out '" + out_dir + "' > /dev/null";
    std::printf("\n%s\n", cmd.c_str());
    std::fflush(stdout);
    std::vector<double> times;
    for (int r = 0; r < f.reps; ++r) {
      const Clock::time_point t0 = Clock::now();
      const int status = std::system(cmd.c_str());
      times.push_back(seconds_since(t0));
      fs::remove_all(out_dir);
      if (status != 0) {
        std::printf("eval: failed (status %d)\n", status);
        return 1;
      }
    }
    std::printf("eval, P = %lld, N = %lld, every policy x {%s}: median %.1f s over %d (goal < 60 s on 2 cores); load "
                "average %s\n",
                static_cast<long long>(f.prompt_len), static_cast<long long>(f.steps), f.budgets.c_str(), median(times),
                f.reps, mla::bench::load_average().c_str());
  }
  return 0;
}
