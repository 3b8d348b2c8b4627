// tests/bench/bench_eval_shipped.cpp — `mla-h2o eval` on the shipped model, against the two wall-time
// goals its issues set on 2 cores (docs/eval.md §9):
//
//   readme-table  the README's eviction table: 32 windows of models/tiny-mla's held-out corpus,
//                 P 256, N 256, every preset at K 96, 128, 192, under --compress decode and then
//                 prefill; goal: both protocols in <= 180 s (issue 26, deliverable 7)
//   all-policies  P 1024, N 512, every preset at K 128, 256, 512 on its held-out text;
//                 goal: <= 15 s (issue 25, deliverable 3)
//   printed       each job's median wall time over --reps, the FLOPs eval counts (its plan line)
//                 and the rate that makes, the goal and whether it was met
//
// `meson test -C build --benchmark --suite eval_shipped`
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::bench::Clock;
using mla::bench::median;
using mla::bench::seconds_since;

struct Flags {
  std::string cli, models, work_dir = "bench-eval-shipped", only;
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
    else if (!value("models").empty()) f.models = value("models");
    else if (!value("work-dir").empty()) f.work_dir = value("work-dir");
    else if (!value("only").empty()) f.only = value("only");
    else if (!value("reps").empty()) f.reps = std::stoi(value("reps"));
    else {
      std::fprintf(stderr, "usage: bench_eval_shipped --cli=mla-h2o --models=DIR [--work-dir=DIR] "
                           "[--only=readme-table|all-policies] [--reps=1]\n");
      std::exit(2);
    }
  }
  if (f.cli.empty() || f.models.empty()) {
    std::fprintf(stderr, "bench_eval_shipped: --cli=PATH and --models=DIR (the repository's models/) are required\n");
    std::exit(2);
  }
  return f;
}

// Runs `cmd`, its stdout (the plan line, the summary) into `log` and its stderr (progress, an
// error) into `log`.err; the exit status, -1 when it did not exit.
int run(const std::string& cmd, const std::string& log) {
  const int status = std::system((cmd + " > '" + log + "' 2> '" + log + ".err'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The TFLOP of eval's plan line ("mla-h2o eval: plan: 0.205 TFLOP (...)") in `log`; 0 if absent.
double planned_tflop(const std::string& log) {
  FILE* f = std::fopen(log.c_str(), "r");
  if (!f) return 0;
  char line[4096];
  double tflop = 0;
  while (std::fgets(line, sizeof line, f))
    if (const char* at = std::strstr(line, "plan: ")) tflop += std::atof(at + 6);  // one per eval
  std::fclose(f);
  return tflop;
}

struct Job {
  std::string name;
  std::vector<std::string> commands;  // run one after another; their times add up
  double goal_s;
};

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  std::printf("bench_eval_shipped — machine: %s, load average %s\n", mla::bench::cpu_model().c_str(),
              mla::bench::load_average().c_str());
  fs::create_directories(f.work_dir);
  const std::string tiny = f.models + "/tiny-mla";
  const std::string common = "'" + f.cli + "' eval --checkpoint '" + tiny + "' --quiet ";
  const std::string table = common + "--text '" + tiny + "/eval/heldout-corpus' --windows 32 --prompt-len 256 --steps 256 "
                                     "--cache-budget 96,128,192 ";
  const std::vector<Job> jobs = {
      {"readme-table",
       {table + "--compress decode --out '" + f.work_dir + "/decode'",
        table + "--compress prefill --out '" + f.work_dir + "/prefill'"},
       180.0},
      {"all-policies",
       {common + "--text '" + tiny + "/eval/heldout.txt' --prompt-len 1024 --steps 512 --cache-budget 128,256,512 "
                 "--policy all --out '" + f.work_dir + "/all'"},
       15.0},
  };
  for (const Job& job : jobs) {
    if (!f.only.empty() && f.only != job.name) continue;
    std::vector<double> wall;
    double tflop = 0;
    for (int r = 0; r < f.reps; ++r) {
      double t = 0;
      tflop = 0;
      for (size_t c = 0; c < job.commands.size(); ++c) {
        const std::string log = f.work_dir + "/" + job.name + "-" + std::to_string(c) + ".log";
        const auto t0 = Clock::now();
        if (run(job.commands[c], log) != 0) {
          std::fprintf(stderr, "bench_eval_shipped: %s failed (%s): %s\n", job.name.c_str(), log.c_str(),
                       job.commands[c].c_str());
          return 1;
        }
        t += seconds_since(t0);
        tflop += planned_tflop(log);
      }
      wall.push_back(t);
    }
    const double t = median(wall);
    std::printf("%-13s wall %.1f s (median of %d; %zu eval%s), %.3f TFLOP planned = %.1f GFLOP/s; goal <= %.0f s: %s\n",
                job.name.c_str(), t, f.reps, job.commands.size(), job.commands.size() > 1 ? "s" : "", tflop,
                tflop * 1e3 / t, job.goal_s, t <= job.goal_s ? "met" : "missed");
    std::fflush(stdout);
  }
  return 0;
}
