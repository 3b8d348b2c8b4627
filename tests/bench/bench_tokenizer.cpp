// tests/bench/bench_tokenizer.cpp — the tokenizers' speed (docs/tokenizer.md §speed): MB/s of
// encode on the suite's ~1 MB multilingual corpus (tests/data/tokenizers/corpus, all files
// concatenated, 10x for the 2-thread run), one thread and two, for DeepSeek-V3's tokenizer.json,
// DeepSeek-V2's and Kimi K2's tiktoken.model; load time; then the reference libraries on the same
// text in the same run (bench_tokenizer_peer.py: HF tokenizers on V3, tiktoken on Kimi), skipped
// with a note when they are not importable. Median of --reps after one warm-up.
// `meson test -C BUILD --benchmark --suite tokenizer`
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "mla/regular_file.hpp"
#include "mla/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using mla::bench::Clock;

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i], p = "--" + name + "=";
    if (a.rfind(p, 0) == 0) return a.substr(p.size());
  }
  return fallback;
}

// The fixture's .xz files unpacked into `work`; returns false (after a message) on failure.
bool unpack(const std::string& data, const std::string& work) {
  for (const auto& e : fs::recursive_directory_iterator(data)) {
    const fs::path p = e.path();
    if (p.extension() != ".xz" && p.filename() != "pattern.txt") continue;
    const fs::path rel = fs::relative(p, data);
    fs::path out = fs::path(work) / rel;
    if (p.extension() == ".xz") out.replace_extension("");
    fs::create_directories(out.parent_path());
    const std::string cmd = p.extension() == ".xz" ? "xz -dc '" + p.string() + "' > '" + out.string() + "'"
                                                   : "cp '" + p.string() + "' '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "bench_tokenizer: failed: %s\n", cmd.c_str());
      return false;
    }
  }
  return true;
}

double mb_per_s(const mla::Tokenizer& t, const std::string& text, int threads, int reps, size_t& ids) {
  ids = t.encode(text, threads).size();
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    (void)t.encode(text, threads);
    s.push_back(mla::bench::seconds_since(t0));
  }
  return static_cast<double>(text.size()) / 1e6 / mla::bench::median(s);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string data = flag(argc, argv, "data-dir"), work = flag(argc, argv, "work-dir");
  const int reps = std::atoi(flag(argc, argv, "reps", "3").c_str());
  if (data.empty() || work.empty() || reps < 1) {
    std::fprintf(stderr, "usage: bench_tokenizer --data-dir=tests/data/tokenizers --work-dir=DIR [--reps=3] "
                         "[--peer-script=PATH] [--python=PATH]\n");
    return 2;
  }
  if (!unpack(data, work)) return 1;
  std::string text;
  for (const char* c : {"ja", "zh", "ru", "de", "code", "edge", "crlf"})  // not unicode.txt, long.txt
    text += mla::read_regular_file(work + "/corpus/" + c + ".txt", int64_t{1} << 30);
  std::string big;
  for (int k = 0; k < 10; ++k) big += text;
  std::printf("bench tokenizer: %s, load %s, %.2f MB corpus (x10 = %.1f MB for the 2-thread row)\n",
              mla::bench::cpu_model().c_str(), mla::bench::load_average().c_str(), text.size() / 1e6, big.size() / 1e6);
  std::printf("%-12s %8s %12s %12s %14s %14s\n", "tokenizer", "load s", "ids", "1 thr MB/s", "1 thr MB/s x10",
              "2 thr MB/s x10");
  for (const char* name : {"deepseek-v3", "deepseek-v2", "kimi-k2"}) {
    const auto t0 = Clock::now();
    const auto tok = mla::load_tokenizer(work + "/" + name);
    const double load = mla::bench::seconds_since(t0);
    size_t ids = 0, ids_big = 0;
    const double one = mb_per_s(*tok, text, 1, reps, ids);
    const double one_big = mb_per_s(*tok, big, 1, 1, ids_big);
    const double two_big = mb_per_s(*tok, big, 2, 1, ids_big);
    std::printf("%-12s %8.2f %12zu %12.2f %14.2f %14.2f\n", name, load, ids, one, one_big, two_big);
  }
  const std::string script = flag(argc, argv, "peer-script");
  if (script.empty()) return 0;
  std::string python = flag(argc, argv, "python");
  if (python.empty()) python = "python3";
  const std::string corpus = work + "/corpus-all.txt";
  if (FILE* f = std::fopen(corpus.c_str(), "wb")) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  const auto peer = mla::bench::run_peer("'" + python + "' '" + script + "' --dir '" + work + "' --text '" + corpus +
                                             "' --reps " + std::to_string(reps), "PEER ");
  if (peer.exit_code == 77) std::printf("peers: skipped (tokenizers / tiktoken not importable by %s)\n", python.c_str());
  else if (peer.exit_code != 0 || peer.json.empty()) std::printf("peers: failed (exit %d)\n", peer.exit_code);
  else std::printf("peers (same text, one thread): %s", peer.json.c_str());
  return 0;
}
