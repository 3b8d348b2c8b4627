// tests/unit/test_faults.cpp — suite faults: fault injection on the real CLI, as an adversarial
// user would try it (issue 20). First the output contract of every command (mla/output_set.hpp,
// docs/outputs.md §6):
//   - a run into a directory that holds an earlier set replaces it as a whole (run, decode,
//     sweep, select, synth): no file of the earlier set survives beside the new one, and
//     report.json lists exactly the files of its directory;
//   - a write that fails (a file-size limit, RLIMIT_FSIZE, so EFBIG; a full 1 MiB tmpfs, ENOSPC,
//     when this process may mount one) leaves the directory byte for byte as it was, or absent
//     when it was, and the one error line keeps the system's reason and says so;
//   - a second writer fails with one line while the first holds the directory; two writers
//     racing leave one consistent set;
//   - SIGINT mid-run (a sweep killed after its first layer's dump) removes the staging
//     directory and leaves the directory as it was;
//   - stale staging directories of dead processes are removed, live ones are not, and a folder
//     only named like one is kept (issue 46);
//   - --out changed while the set is written (a file or folder added, the directory replaced) is
//     kept as it is and the new set goes beside it (issue 46; in-process, through the test hook);
//   - a directory with files mla-h2o did not write is refused before any work.
// Then hostile inputs, each ending in one error line, fast (every command runs under `timeout`,
// so a hang fails the case instead of the suite):
//   - config counts far beyond any model (num_hidden_layers 2^31, 2^63-1, hidden_size 2^40, ...)
//     are refused naming the key; layers are found from the tensor names; a key given twice
//     counts with its last value; q_lora_rank 0 on a LoRA checkpoint says why no layer is there;
//   - a FIFO as --input, --config, --tokens, --scores, a shard, or inspect's PATH is refused
//     before it could block;
//   - flag arithmetic (--sinks + --recent near 2^63, empty list items, ranges of a billion
//     layers, --vocab 2^31) is checked before any work;
//   - memory plans: run --input NAME.L --residual, decode, a sweep with a layer's shard missing
//     (refused before the first layer, and inspect counts that layer absent), synth;
//   - the smaller ones: sweep --quiet, demo --decode with run-only flags, demo --cache-dir FILE,
//     select on a binary file, MLA_MEMORY_AVAILABLE in KiB.
// Everything runs on the tiny preset, in well under a second per command.
#include <simdjson.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "mla/error.hpp"
#include "mla/output_set.hpp"
#include "mla/safetensors.hpp"
#include "output_scan.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::test::read_text;
using mla::test::run_cli;
using mla::test::RunResult;
using mla::test::scratch_dir;
using mla::test::write_text;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The tiny preset with both of its layers written, once per process.
const std::string& tiny2() {
  static const std::string dir = [] {
    const std::string d = scratch_dir("outputs-tiny2") + "/ckpt";
    const RunResult r = run_cli("synth --preset tiny --layers 0,1 --out '" + d + "'");
    if (r.exit_code != 0) throw std::runtime_error("synth failed: " + r.err);
    return d;
  }();
  return dir;
}

// Every entry of `dir` (hidden ones too), sorted.
std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// name -> bytes of every file of `dir`.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_text(e.path().string());
  return out;
}

// Entries beside `dir` that are staging directories of it (".NAME.mla-h2o-...").
std::vector<std::string> staging_beside(const std::string& dir) {
  const fs::path p(dir);
  const std::string prefix = "." + p.filename().string() + ".mla-h2o-";
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
  return out;
}

// The file names report.json lists.
std::set<std::string> report_files(const std::string& dir) {
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.load(dir + "/report.json");
  std::set<std::string> out;
  for (const auto f : doc["files"].get_array()) out.insert(fs::path(std::string(std::string_view(f))).filename().string());
  return out;
}

// `dir` holds exactly one set: what report.json lists, and the manifest.
void expect_one_set(const std::string& dir, const std::string& what) {
  std::set<std::string> files = listing(dir);
  BOOST_TEST(files.erase(".mla-h2o-set") == 1u, what);
  const std::set<std::string> listed = report_files(dir);
  BOOST_TEST((files == listed), what << ": the directory holds files report.json does not list, or the reverse");
  BOOST_TEST(staging_beside(dir).empty(), what);
}

// One error line "mla-h2o <cmd>: error: ..." holding every word of `words`.
void expect_error_line(const RunResult& r, const std::string& cmd, const std::vector<std::string>& words) {
  BOOST_TEST_CONTEXT("stderr: " << r.err) {
    BOOST_TEST(r.exit_code != 0);
    BOOST_TEST(r.err.rfind("mla-h2o " + cmd + ": error: ", 0) == 0u);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    for (const auto& w : words) BOOST_TEST(contains(r.err, w), "missing '" << w << "'");
  }
}

// run on the tiny checkpoint; `extra` may set --seq-len (16 otherwise)
std::string run_into(const std::string& out, const std::string& extra) {
  return "run --checkpoint '" + tiny2() + "'" + (contains(extra, "--seq-len") ? "" : " --seq-len 16") + " --out '" + out +
         "' " + extra;
}

// The CLI started directly (no shell), stdout and stderr into files; returns its pid.
pid_t spawn_cli(const std::vector<std::string>& args, const std::string& out_file, const std::string& err_file) {
  std::vector<std::string> all = {mla::test::cli_path()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn failed");
  return pid;
}

// The CLI under `timeout 20`: a hang ends as exit status 124 and fails the check.
RunResult run_bounded(const std::string& args) { return mla::test::run_cli_after("exec timeout 20", args); }

// The config.json of `dir` with `key`'s value replaced by `value` (text), written to `path`.
std::string config_of_with(const std::string& dir, const std::string& path, const std::string& key, const std::string& value) {
  std::string text = read_text(dir + "/config.json");
  const std::string k = "\"" + key + "\": ";
  const size_t at = text.find(k);
  if (at == std::string::npos) throw std::runtime_error("no key " + key + " in " + dir + "/config.json");
  const size_t begin = at + k.size(), end = text.find_first_of(",\n}", begin);
  text.replace(begin, end - begin, value);
  write_text(path, text);
  return path;
}

// tiny2's config.json with `key`'s value replaced by `value` (text), written to `path`.
std::string config_with(const std::string& path, const std::string& key, const std::string& value) {
  return config_of_with(tiny2(), path, key, value);
}

void expect_fast_error(const std::string& args, const std::string& cmd, const std::vector<std::string>& words) {
  const RunResult r = run_bounded(args);
  BOOST_TEST(r.exit_code != 124, "timed out (hung): mla-h2o " << args);
  expect_error_line(r, cmd, words);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(faults)

// Issue: a run into a directory with an earlier run's results left files of both.
BOOST_AUTO_TEST_CASE(an_earlier_set_is_replaced_as_a_whole) {
  const std::string base = scratch_dir("outputs-replace");
  // run: --per-head and --dump-tensors, then neither
  const std::string run_dir = base + "/run";
  BOOST_TEST_REQUIRE(run_cli(run_into(run_dir, "--per-head --dump-tensors")).exit_code == 0);
  BOOST_TEST(fs::exists(run_dir + "/heads_kept.csv"));
  expect_one_set(run_dir, "run with --per-head --dump-tensors");
  const RunResult again = run_cli(run_into(run_dir, "--seq-len 12"));
  BOOST_TEST_REQUIRE(again.exit_code == 0, again.err);
  BOOST_TEST(!fs::exists(run_dir + "/heads_kept.csv"));
  BOOST_TEST(!fs::exists(run_dir + "/tensors.safetensors"));
  expect_one_set(run_dir, "run again without them");

  // decode: two budgets (budget.svg) and a dump, then one budget without
  const std::string dec = base + "/decode";
  const std::string decode = "decode --checkpoint '" + tiny2() + "' --seq-len 48 --prompt-len 40 --out '" + dec + "' ";
  BOOST_TEST_REQUIRE(run_cli(decode + "--cache-budget 38,39 --policy h2o,tova,streaming --sinks 2 --recent 4 --dump-tensors").exit_code == 0);
  BOOST_TEST(fs::exists(dec + "/budget.svg"));
  expect_one_set(dec, "decode with two budgets");
  BOOST_TEST_REQUIRE(run_cli(decode + "--cache-budget 38 --policy h2o,tova,streaming --sinks 2 --recent 4").exit_code == 0);
  BOOST_TEST(!fs::exists(dec + "/budget.svg"));
  BOOST_TEST(!fs::exists(dec + "/decode_tensors.safetensors"));
  expect_one_set(dec, "decode with one budget");

  // sweep: per-layer dumps, then without
  const std::string sw = base + "/sweep";
  const std::string sweep = "sweep --checkpoint '" + tiny2() + "' --seq-len 8 --quiet --out '" + sw + "' ";
  BOOST_TEST_REQUIRE(run_cli(sweep + "--dump-tensors").exit_code == 0);
  BOOST_TEST(fs::exists(sw + "/layer-1.safetensors"));
  expect_one_set(sw, "sweep --dump-tensors");
  BOOST_TEST_REQUIRE(run_cli(sweep + "--layers 0").exit_code == 0);
  BOOST_TEST(!fs::exists(sw + "/layer-0.safetensors"));
  expect_one_set(sw, "sweep --layers 0");

  // select: --per-head, then without
  const std::string sel = base + "/select";
  const std::string scores = run_dir + "/scores.csv";
  BOOST_TEST_REQUIRE(run_cli(run_into(base + "/heads", "--per-head")).exit_code == 0);
  BOOST_TEST_REQUIRE(run_cli("select --scores '" + base + "/heads/heads_kept.csv' --column attention_score --per-head --out '" + sel +
                             "'").exit_code == 0);
  BOOST_TEST(fs::exists(sel + "/heads_kept.csv"));
  BOOST_TEST_REQUIRE(run_cli("select --scores '" + scores + "' --out '" + sel + "'").exit_code == 0);
  BOOST_TEST(!fs::exists(sel + "/heads_kept.csv"));
  expect_one_set(sel, "select");

  // synth: a whole checkpoint directory, the same rule (3 shards, then 2)
  const std::string ck = base + "/ckpt";
  BOOST_TEST_REQUIRE(run_cli("synth --preset tiny --shards 3 --out '" + ck + "'").exit_code == 0);
  BOOST_TEST(fs::exists(ck + "/model-00003-of-000003.safetensors"));
  BOOST_TEST_REQUIRE(run_cli("synth --preset tiny --shards 2 --out '" + ck + "'").exit_code == 0);
  const std::set<std::string> want = {".mla-h2o-set", "config.json", "model.safetensors.index.json",
                                      "model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"};
  BOOST_TEST((listing(ck) == want));
}

// Issue: a run that failed while writing left new files beside old ones (or all but report.json
// in a fresh directory), and "short write" lost the errno. RLIMIT_FSIZE makes any write past
// 64 KiB fail with EFBIG (SIGXFSZ ignored), without privileges.
BOOST_AUTO_TEST_CASE(a_failed_write_leaves_the_directory_as_it_was) {
  const std::string base = scratch_dir("outputs-fsize");
  const std::string dir = base + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(dir, "--per-head")).exit_code == 0);
  const auto before = snapshot(dir);
  const std::string limited = "trap '' XFSZ; ulimit -f 64; exec";
  // the dump (attn_weights [4, 200, 200] f32) passes 64 KiB; scores.csv and the rest would not
  const RunResult r = mla::test::run_cli_after(limited, run_into(dir, "--seq-len 200 --dump-tensors"));
  expect_error_line(r, "run", {"File too large", dir + " left as it was"});
  BOOST_TEST((snapshot(dir) == before));
  BOOST_TEST(staging_beside(dir).empty());
  // into a directory that did not exist: it still does not
  const RunResult fresh = mla::test::run_cli_after(limited, run_into(base + "/fresh", "--seq-len 200 --dump-tensors"));
  expect_error_line(fresh, "run", {"File too large", base + "/fresh not created"});
  BOOST_TEST(!fs::exists(base + "/fresh"));
  BOOST_TEST(staging_beside(base + "/fresh").empty());
}

// A full disk: a 1 MiB tmpfs (when this process may mount one, e.g. as root in CI).
BOOST_AUTO_TEST_CASE(a_full_disk_leaves_the_directory_as_it_was) {
  const std::string mnt = scratch_dir("outputs-tmpfs");
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    BOOST_TEST_MESSAGE("not run: cannot mount a tmpfs here (" << std::strerror(errno) << "); the RLIMIT_FSIZE case covers it");
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string dir = mnt + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(dir, "")).exit_code == 0);
  const auto before = snapshot(dir);
  const RunResult r = run_cli(run_into(dir, "--seq-len 300 --dump-tensors"));
  expect_error_line(r, "run", {"No space left on device", dir + " left as it was"});
  BOOST_TEST((snapshot(dir) == before));
  BOOST_TEST(staging_beside(dir).empty());
  // the sweep's dumps likewise
  const RunResult s = run_cli("sweep --checkpoint '" + tiny2() + "' --seq-len 300 --dump-tensors --quiet --out '" + dir + "'");
  expect_error_line(s, "sweep", {"No space left on device", dir + " left as it was"});
  BOOST_TEST((snapshot(dir) == before));
}

// Issue: two runs into one --out mixed their files; nothing locked the directory.
BOOST_AUTO_TEST_CASE(a_second_writer_fails_with_one_line) {
  const std::string dir = scratch_dir("outputs-lock") + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(dir, "")).exit_code == 0);
  const auto before = snapshot(dir);
  const std::string scores = scratch_dir("outputs-lock-scores") + "/scores.csv";
  fs::copy_file(dir + "/scores.csv", scores);
  {  // hold the directory's lock as a writer does
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    BOOST_TEST_REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    for (const std::string& args : {run_into(dir, ""), "select --scores '" + scores + "' --out '" + dir + "'",
                                    "synth --preset tiny --out '" + dir + "'"}) {
      const RunResult r = run_cli(args);
      expect_error_line(r, args.substr(0, args.find(' ')), {"another mla-h2o process is writing to " + dir});
    }
    ::close(fd);
  }
  BOOST_TEST((snapshot(dir) == before));
  // two writers at once: each ends with its own complete set or one error line; the directory
  // holds one consistent set (the scores of one of them, as its report says)
  const std::string tmp = scratch_dir("outputs-race");
  const pid_t a = spawn_cli({"run", "--checkpoint", tiny2(), "--seq-len", "30", "--out", dir}, tmp + "/a.out", tmp + "/a.err");
  const pid_t b = spawn_cli({"run", "--checkpoint", tiny2(), "--seq-len", "31", "--out", dir}, tmp + "/b.out", tmp + "/b.err");
  int sa = 0, sb = 0;
  ::waitpid(a, &sa, 0);
  ::waitpid(b, &sb, 0);
  for (const auto& [status, err] : {std::pair{sa, read_text(tmp + "/a.err")}, std::pair{sb, read_text(tmp + "/b.err")}}) {
    BOOST_TEST(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0) BOOST_TEST(contains(err, "another mla-h2o process is writing to"), err);
  }
  BOOST_TEST((WEXITSTATUS(sa) == 0 || WEXITSTATUS(sb) == 0));
  expect_one_set(dir, "after two writers");
  const std::string csv = read_text(dir + "/scores.csv");
  const auto rows = std::count(csv.begin(), csv.end(), '\n');
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.load(dir + "/report.json");
  BOOST_TEST(int64_t(doc["shapes"]["attn_output"].at(0)) + 1 == static_cast<int64_t>(rows));
}

// Issue: SIGINT during a run left a 12 MB temporary file or CSVs without report.json. A sweep
// over two layers (the reference backend, ~0.3 s a layer at S = 1024) is interrupted once its
// first layer's dump is complete in the staging directory, while the second layer runs.
BOOST_AUTO_TEST_CASE(sigint_mid_run_leaves_the_directory_as_it_was) {
  const std::string base = scratch_dir("outputs-signal");
  const std::string dir = base + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(dir, "")).exit_code == 0);
  const auto before = snapshot(dir);
  bool interrupted = false;
  for (int S = 1024; S <= 2048 && !interrupted; S *= 2) {  // long enough for layer 1 to be running
    const pid_t pid = spawn_cli({"sweep", "--checkpoint", tiny2(), "--seq-len", std::to_string(S), "--dump-tensors",
                                 "--backend", "reference", "--quiet", "--out", dir},
                                base + "/stdout", base + "/stderr");
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
      bool dumped = false;
      for (const std::string& s : staging_beside(dir))
        dumped = dumped || fs::exists(fs::path(dir).parent_path() / s / "layer-0.safetensors");
      if (dumped) {
        ::kill(pid, SIGINT);
        interrupted = true;
        break;
      }
      if (::waitpid(pid, &status, WNOHANG) == pid) break;  // finished first: a longer run
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!interrupted) continue;
    ::waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {  // finished before the signal landed
      interrupted = false;
      BOOST_TEST_REQUIRE(run_cli(run_into(dir, "")).exit_code == 0);
      continue;
    }
    BOOST_TEST(WIFSIGNALED(status));
    BOOST_TEST((WIFSIGNALED(status) && WTERMSIG(status) == SIGINT));
    const std::string err = read_text(base + "/stderr");
    BOOST_TEST(err == "mla-h2o sweep: interrupted by SIGINT; " + dir + " left as it was\n");
    BOOST_TEST((snapshot(dir) == before));
    BOOST_TEST(staging_beside(dir).empty());
  }
  BOOST_TEST(interrupted);
}

// A staging directory left by a killed writer is removed by the next one; one of a live
// process (this test's) is not.
BOOST_AUTO_TEST_CASE(stale_staging_directories_are_removed) {
  const std::string base = scratch_dir("outputs-stale");
  const std::string dir = base + "/out";
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = base + "/.out.mla-h2o-" + std::to_string(dead) + "-0";
  const std::string live = base + "/.out.mla-h2o-" + std::to_string(::getpid()) + "-7";
  fs::create_directories(stale);
  write_text(stale + "/.mla-h2o-staging", "mla-h2o staging set\npid " + std::to_string(dead) + "\nname tensors.safetensors\n");
  write_text(stale + "/tensors.safetensors.tmp.123", std::string(1000, 'x'));
  // a stale one caught after its exchange: the previous set, complete, is removed too
  const std::string after = base + "/.out.mla-h2o-" + std::to_string(dead) + "-1";
  BOOST_TEST_REQUIRE(run_cli(run_into(after, "")).exit_code == 0);
  fs::create_directories(live);
  BOOST_TEST_REQUIRE(run_cli(run_into(dir, "")).exit_code == 0);
  BOOST_TEST(!fs::exists(stale));
  BOOST_TEST(!fs::exists(after));
  BOOST_TEST(fs::exists(live));
  fs::remove_all(live);
  expect_one_set(dir, "after a stale staging directory");
}

// Issue 46, fault 2: a folder merely named like a staging directory of a dead process was deleted
// with its contents. Only what a staging directory holds (its marker and its set's names, or a
// complete earlier set) is removed; anything else stays.
BOOST_AUTO_TEST_CASE(a_folder_named_like_a_staging_directory_is_kept) {
  const std::string base = scratch_dir("outputs-staging-named");
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string mine = base + "/.out.mla-h2o-" + std::to_string(dead) + "-7";
  fs::create_directories(mine);
  write_text(mine + "/important.txt", "keep me\n");
  // a marker does not make a foreign file a staging file
  const std::string marked = base + "/.out.mla-h2o-" + std::to_string(dead) + "-8";
  fs::create_directories(marked);
  write_text(marked + "/.mla-h2o-staging", "mla-h2o staging set\npid 1\nname scores.csv\n");
  write_text(marked + "/thesis.tex", "mine\n");
  const RunResult r = run_cli(run_into(base + "/out", ""));
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(read_text(mine + "/important.txt") == "keep me\n");
  BOOST_TEST(read_text(marked + "/thesis.tex") == "mine\n");
  BOOST_TEST(fs::exists(marked + "/.mla-h2o-staging"));
}

// Issue 46, fault 1: --out was checked at the start only, so what a user put there during the run
// was deleted with the previous set. The set now checks the directory again just before the
// exchange and again before the deletion (mla/output_set.hpp); the hook stands for the user, at
// exactly that moment.
namespace {

struct HookGuard {
  explicit HookGuard(std::function<void(const std::string&, const std::string&)> h) { mla::set_output_set_hook(std::move(h)); }
  ~HookGuard() { mla::set_output_set_hook({}); }
};

// An earlier set in `dir`: a.txt and b.txt.
void earlier_set(const std::string& dir) {
  mla::OutputSet out(dir, "test");
  out.write("a.txt", "old a\n");
  out.write("b.txt", "old b\n");
  out.commit();
}

// A new set (new.txt) into `dir`, whose commit must fail with one line naming `words`; then the
// sibling NAME.mla-h2o-new holds that set, complete, and no staging directory is left.
void commit_fails_and_diverts(const std::string& dir, const std::vector<std::string>& words) {
  bool threw = false;
  {
    mla::OutputSet out(dir, "test");
    out.write("new.txt", "new\n");
    try {
      out.commit();
    } catch (const mla::Error& e) {
      threw = true;
      const std::string what = e.what();
      BOOST_TEST_CONTEXT(what) {
        BOOST_TEST(what.find('\n') == std::string::npos);
        BOOST_TEST(contains(what, dir + ".mla-h2o-new"));
        for (const auto& w : words) BOOST_TEST(contains(what, w), "missing '" << w << "'");
      }
    }
  }
  BOOST_TEST(threw, "the commit succeeded over a changed directory");
  BOOST_TEST((listing(dir + ".mla-h2o-new") == std::set<std::string>{".mla-h2o-set", "new.txt"}));
  BOOST_TEST(read_text(dir + ".mla-h2o-new/new.txt") == "new\n");
  BOOST_TEST(staging_beside(dir).empty());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_file_added_to_out_during_the_run_is_kept) {
  const std::string dir = scratch_dir("outputs-added-during") + "/O";
  earlier_set(dir);
  const HookGuard hook([&](const std::string& stage, const std::string&) {
    if (stage == "swap") write_text(dir + "/user-notes.txt", "notes\n");
  });
  commit_fails_and_diverts(dir, {"'user-notes.txt'", "changed while", "left as it is"});
  BOOST_TEST(read_text(dir + "/user-notes.txt") == "notes\n");
  BOOST_TEST(read_text(dir + "/a.txt") == "old a\n");  // the earlier set, untouched
  BOOST_TEST((listing(dir) == std::set<std::string>{".mla-h2o-set", "a.txt", "b.txt", "user-notes.txt"}));
}

BOOST_AUTO_TEST_CASE(a_folder_dropped_into_a_new_out_during_the_run_is_kept) {
  const std::string dir = scratch_dir("outputs-folder-during") + "/O";
  BOOST_TEST_REQUIRE(!fs::exists(dir));
  const HookGuard hook([&](const std::string& stage, const std::string&) {
    if (stage != "swap") return;
    fs::create_directories(dir + "/photos");
    write_text(dir + "/photos/cat.jpg", "cat");
  });
  commit_fails_and_diverts(dir, {"'photos'"});
  BOOST_TEST(read_text(dir + "/photos/cat.jpg") == "cat");
  BOOST_TEST((listing(dir) == std::set<std::string>{"photos"}));
}

BOOST_AUTO_TEST_CASE(an_out_moved_away_and_replaced_during_the_run_is_kept) {
  const std::string base = scratch_dir("outputs-replaced-during"), dir = base + "/O";
  earlier_set(dir);
  const HookGuard hook([&](const std::string& stage, const std::string&) {
    if (stage != "swap") return;
    fs::rename(dir, base + "/O-moved");
    fs::create_directories(dir);
    write_text(dir + "/precious.txt", "precious\n");
  });
  commit_fails_and_diverts(dir, {"moved away or replaced"});
  BOOST_TEST((listing(dir) == std::set<std::string>{"precious.txt"}));
  BOOST_TEST(read_text(dir + "/precious.txt") == "precious\n");
  BOOST_TEST((listing(base + "/O-moved") == std::set<std::string>{".mla-h2o-set", "a.txt", "b.txt"}));
}

// The same, when the file lands after the check before the exchange: the deletion checks again,
// exchanges back, and the new set goes to the sibling.
BOOST_AUTO_TEST_CASE(a_file_added_just_before_the_deletion_is_kept) {
  const std::string dir = scratch_dir("outputs-added-late") + "/O";
  earlier_set(dir);
  const HookGuard hook([&](const std::string& stage, const std::string& path) {
    if (stage == "delete") write_text(path + "/late.txt", "late\n");
  });
  commit_fails_and_diverts(dir, {"'late.txt'"});
  BOOST_TEST((listing(dir) == std::set<std::string>{".mla-h2o-set", "a.txt", "b.txt", "late.txt"}));
  BOOST_TEST(read_text(dir + "/late.txt") == "late\n");
}

// The staging directory removed by hand during the run, then the set abandoned: nothing to clean
// up, and no exception out of the destructor (which would end the process).
BOOST_AUTO_TEST_CASE(a_staging_directory_removed_during_the_run_is_no_crash) {
  const std::string dir = scratch_dir("outputs-staging-gone") + "/O";
  {
    mla::OutputSet out(dir, "test");
    out.write("a.txt", "a\n");
    for (const std::string& s : staging_beside(dir)) fs::remove_all(fs::path(dir).parent_path() / s);
  }
  BOOST_TEST(!fs::exists(dir));
  BOOST_TEST(staging_beside(dir).empty());
}

// Nothing changed: the hook runs at both moments and the set replaces the earlier one as before.
BOOST_AUTO_TEST_CASE(an_unchanged_out_is_replaced_after_both_checks) {
  const std::string dir = scratch_dir("outputs-unchanged") + "/O";
  earlier_set(dir);
  std::vector<std::string> stages;
  const HookGuard hook([&](const std::string& stage, const std::string&) { stages.push_back(stage); });
  {
    mla::OutputSet out(dir, "test");
    out.write("new.txt", "new\n");
    out.commit();
  }
  BOOST_TEST((stages == std::vector<std::string>{"swap", "delete"}));
  BOOST_TEST((listing(dir) == std::set<std::string>{".mla-h2o-set", "new.txt"}));
  BOOST_TEST(staging_beside(dir).empty());
  BOOST_TEST(!fs::exists(dir + ".mla-h2o-new"));
}

// Issue 46, fault 4: a --prompt-len beyond the input (4611686018427387904, or just T) was reported
// as "--steps -4611686018427387856": the steps left were computed before P was checked.
BOOST_AUTO_TEST_CASE(a_prompt_longer_than_the_input_is_named_as_given) {
  const std::string out = scratch_dir("faults-prompt-len") + "/o";
  const std::string decode = "decode --checkpoint '" + tiny2() + "' --seq-len 48 --cache-budget 38 --policy h2o --out '" + out + "' ";
  for (const std::string p : {"4611686018427387904", "9223372036854775807", "48", "300"}) {
    const RunResult r = run_bounded(decode + "--prompt-len " + p);
    expect_error_line(r, "decode", {"--prompt-len " + p, "no decode step"});
    BOOST_TEST(!contains(r.err, "--steps"), r.err);
  }
  BOOST_TEST(!fs::exists(out));
}

// Issue 46, fault 5: run took config.json's vocab_size 100 over a table of other rows, and ids
// past vocab_size, with exit 0; eval refused the same checkpoint. embed_tokens' rows must equal
// vocab_size, for every command that reads it.
BOOST_AUTO_TEST_CASE(run_checks_the_vocabulary_as_eval_does) {
  const std::string dir = scratch_dir("faults-vocab");
  const std::string rows = "97";  // the tiny preset's vocabulary
  for (const std::string v : {"50", "200"}) {
    const std::string cfg = config_with(dir + "/vocab-" + v + ".json", "vocab_size", v);
    const std::string run = "run --checkpoint '" + tiny2() + "' --config '" + cfg + "' --out '" + dir + "/o' ";
    expect_fast_error(run + "--tokens 3,17,30", "run", {"embed_tokens", rows + " rows", "vocab_size is " + v});
    expect_fast_error(run + "--tokens 3,49,90", "run", {"embed_tokens", rows + " rows", "vocab_size is " + v});
    expect_fast_error("sweep --checkpoint '" + tiny2() + "' --config '" + cfg + "' --tokens 3,17 --out '" + dir + "/o'", "sweep",
                      {"vocab_size is " + v});
  }
  // an id past the vocabulary, named with it
  expect_fast_error("run --checkpoint '" + tiny2() + "' --tokens 3," + rows + " --out '" + dir + "/o'", "run",
                    {"token id " + rows, "past the vocabulary", "vocab_size " + rows});
  BOOST_TEST(!fs::exists(dir + "/o"));
}

// Issue 46, fault 11: compare against a NaN printed norm_err 0, cosine 1.0 and max_rel 0, and a
// tensor holding NaN or Inf compared with itself passed. NaN and Inf are now counted per tensor,
// no figure is printed over the finite part alone, and such a tensor never passes.
BOOST_AUTO_TEST_CASE(compare_counts_nan_and_inf_and_never_passes_them) {
  const std::string dir = scratch_dir("faults-compare-nan");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto clean = mla::encode_f32(std::vector<float>{1, 2, 3, 4});
  const auto odd = mla::encode_f32(std::vector<float>{1, nan, 3, inf});
  mla::write_safetensors(dir + "/clean.safetensors", {{"x", mla::DType::F32, {4}, clean}, {"y", mla::DType::F32, {4}, clean}});
  mla::write_safetensors(dir + "/odd.safetensors", {{"x", mla::DType::F32, {4}, odd}, {"y", mla::DType::F32, {4}, clean}});
  for (const auto& [a, b, nan_a, nan_b] : std::vector<std::tuple<std::string, std::string, int, int>>{
           {"odd", "odd", 1, 1}, {"clean", "odd", 0, 1}, {"odd", "clean", 1, 0}}) {
    const RunResult r = run_bounded("compare '" + dir + "/" + a + ".safetensors' '" + dir + "/" + b + ".safetensors'");
    BOOST_TEST_CONTEXT(a << " against " << b << ":\n" << r.out << r.err) {
      BOOST_TEST(r.exit_code == 1);
      BOOST_TEST(contains(r.out, "NON-FINITE"));
      BOOST_TEST(contains(r.out, "x holds NaN or Inf: A " + std::to_string(nan_a) + " NaN, " + std::to_string(nan_a) + " Inf; B " +
                                     std::to_string(nan_b) + " NaN, " + std::to_string(nan_b) + " Inf (of 4 elements)"));
      BOOST_TEST(contains(r.out, "1 of 2 common tensors outside tolerance (1 holding NaN or Inf)"));
      // no cosine, norm or relative error over the finite part: only y's row (identical) shows figures
      BOOST_TEST(std::count(r.out.begin(), r.out.end(), '\n') > 0);
      const size_t row = r.out.find("\nx ");
      BOOST_TEST_REQUIRE(row != std::string::npos);
      const std::string x_row = r.out.substr(row + 1, r.out.find('\n', row + 1) - row - 1);
      BOOST_TEST(!contains(x_row, "1.0000000000"), x_row);
      BOOST_TEST(contains(x_row, "n/a"), x_row);
    }
  }
  BOOST_TEST(run_bounded("compare '" + dir + "/clean.safetensors' '" + dir + "/clean.safetensors'").exit_code == 0);
}

// Files mla-h2o did not write are never removed: such a directory is refused before any work.
BOOST_AUTO_TEST_CASE(a_directory_with_other_files_is_refused) {
  const std::string dir = scratch_dir("outputs-foreign");
  write_text(dir + "/notes.txt", "mine\n");
  expect_error_line(run_cli(run_into(dir, "")), "run", {dir, "'notes.txt'", "mla-h2o did not write"});
  BOOST_TEST(read_text(dir + "/notes.txt") == "mine\n");
  BOOST_TEST((listing(dir) == std::set<std::string>{"notes.txt"}));
  // an earlier set with a file added by hand: refused too, naming it
  const std::string set = scratch_dir("outputs-foreign-set") + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(set, "")).exit_code == 0);
  write_text(set + "/mine.txt", "x");
  expect_error_line(run_cli(run_into(set, "")), "run", {"'mine.txt'", "does not list"});
  BOOST_TEST(fs::exists(set + "/mine.txt"));
  // a file as --out
  expect_error_line(run_cli(run_into(dir + "/notes.txt", "")), "run", {"notes.txt", "not a directory"});
  // a report.json without the manifest is never trusted (issue 29: a foreign one listing
  // "results/thesis.tex" got thesis.tex deleted): refused, nothing removed
  const std::string old = scratch_dir("outputs-foreign-report") + "/out";
  fs::create_directories(old);
  write_text(old + "/thesis.tex", "\\chapter{mine}\n");
  write_text(old + "/report.json", "{\"files\": [\"results/thesis.tex\", \"report.json\"]}\n");
  expect_error_line(run_cli(run_into(old, "")), "run", {"mla-h2o did not write"});
  BOOST_TEST(read_text(old + "/thesis.tex") == "\\chapter{mine}\n");
  BOOST_TEST((listing(old) == std::set<std::string>{"report.json", "thesis.tex"}));
}

// Issue 29: a name the earlier set's manifest lists, replaced by the user's directory (or changed
// file), was deleted with everything in it. An entry must still be the regular file mla-h2o
// wrote, of the size and fingerprint the manifest records; else it is refused, never removed.
BOOST_AUTO_TEST_CASE(a_listed_name_that_is_not_what_mla_h2o_wrote_is_refused) {
  const std::string set = scratch_dir("outputs-listed-dir") + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(set, "")).exit_code == 0);
  // scores.csv replaced by a directory holding the user's thesis
  fs::remove(set + "/scores.csv");
  fs::create_directories(set + "/scores.csv");
  write_text(set + "/scores.csv/thesis.txt", "years of work\n");
  expect_error_line(run_cli(run_into(set, "")), "run", {"'scores.csv'", "is a directory"});
  BOOST_TEST(read_text(set + "/scores.csv/thesis.txt") == "years of work\n");
  // the same name as a file the user wrote over (same name, other content, even the same size)
  fs::remove_all(set + "/scores.csv");
  BOOST_TEST_REQUIRE(run_cli(run_into(set, "")).exit_code == 0);
  std::string text = read_text(set + "/scores.csv");
  text[text.size() / 2] = text[text.size() / 2] == 'x' ? 'y' : 'x';
  write_text(set + "/scores.csv", text);
  expect_error_line(run_cli(run_into(set, "")), "run", {"'scores.csv'", "has changed"});
  BOOST_TEST(read_text(set + "/scores.csv") == text);
  write_text(set + "/scores.csv", text + "more");
  expect_error_line(run_cli(run_into(set, "")), "run", {"'scores.csv'", "has changed"});
  // a symbolic link under a listed name
  fs::remove(set + "/scores.csv");
  fs::create_symlink("/etc/hostname", set + "/scores.csv");
  expect_error_line(run_cli(run_into(set, "")), "run", {"'scores.csv'", "not a regular file"});
  BOOST_TEST(fs::is_symlink(set + "/scores.csv"));
}

// Issue 29: an old file that cannot be removed (immutable) left the previous set in a staging
// directory beside --out, and the exit status was 0. The new set is in place; the command says
// what is left where, and exits 1.
BOOST_AUTO_TEST_CASE(a_previous_set_that_cannot_be_removed_is_an_error) {
  const std::string set = scratch_dir("outputs-immutable") + "/out";
  BOOST_TEST_REQUIRE(run_cli(run_into(set, "")).exit_code == 0);
  if (std::system(("chattr +i '" + set + "/scores.csv' 2>/dev/null").c_str()) != 0) {
    BOOST_TEST_MESSAGE("chattr +i is not available here: nothing to check");
    return;
  }
  const RunResult r = run_cli(run_into(set, "--seq-len 12"));
  const std::vector<std::string> left = staging_beside(set);
  for (const std::string& s : left) {
    const std::string path = (fs::path(set).parent_path() / s).string();
    BOOST_TEST(std::system(("chattr -R -i '" + path + "'").c_str()) == 0);
    fs::remove_all(path);
  }
  expect_error_line(r, "run", {"the new set is in", "could not be removed", "remove it by hand"});
  BOOST_TEST(left.size() == 1u);
  expect_one_set(set, "the new set after a failed cleanup");
}

// Issue 29: `eval --checkpoint D --out D` (and run) replaced the checkpoint with its outputs.
// An --out that is, holds or lies inside an input is refused before any work.
BOOST_AUTO_TEST_CASE(an_output_directory_over_an_input_is_refused) {
  const std::string base = scratch_dir("outputs-over-input");
  const std::string ck = base + "/ckpt";
  BOOST_TEST_REQUIRE(run_cli("synth --preset tiny --layers 0,1 --out '" + ck + "'").exit_code == 0);
  const auto before = snapshot(ck);
  expect_error_line(run_cli("run --checkpoint '" + ck + "' --seq-len 8 --out '" + ck + "'"), "run", {"is the input", ck});
  expect_error_line(run_cli("run --checkpoint '" + ck + "' --seq-len 8 --out '" + ck + "/sub'"), "run", {"lies inside"});
  expect_error_line(run_cli("run --checkpoint '" + ck + "' --seq-len 8 --out '" + base + "'"), "run", {"holds the input", ck});
  expect_error_line(run_cli("decode --checkpoint '" + ck + "' --seq-len 12 --prompt-len 8 --cache-budget 4 --policy h2o "
                            "--sinks 1 --recent 1 --out '" + ck + "'"),
                    "decode", {"is the input"});
  expect_error_line(run_cli("sweep --checkpoint '" + ck + "' --seq-len 8 --out '" + ck + "'"), "sweep", {"is the input"});
  const std::string ids = base + "/ids.txt";
  write_text(ids, "1,2,3,4,5,6,7,8,9,10,11,12\n");
  expect_error_line(run_cli("run --checkpoint '" + tiny2() + "' --tokens '" + ids + "' --out '" + base + "'"), "run",
                    {"holds the input", ids});
  // eval, on the shipped model: --out the model's directory, or its held-out text's
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla";
  const std::string model_before = read_text(model + "/config.json");
  const std::string ev = "eval --checkpoint '" + model + "' --text '" + model + "/eval/heldout.txt' --prompt-len 8 --steps 4 "
                         "--cache-budget 4 --policy h2o --quiet --out ";
  expect_error_line(run_cli(ev + "'" + model + "'"), "eval", {"is the input"});
  expect_error_line(run_cli(ev + "'" + model + "/eval'"), "eval", {"lies inside the input"});
  BOOST_TEST(read_text(model + "/config.json") == model_before);
  BOOST_TEST(fs::exists(model + "/model.safetensors"));
  BOOST_TEST((snapshot(ck) == before));
  BOOST_TEST(!fs::exists(ck + "/sub"));
  BOOST_TEST(read_text(ids) == "1,2,3,4,5,6,7,8,9,10,11,12\n");
}

// Issue: num_hidden_layers 1e12 (or 2^31, 2^63-1) hung run, decode, sweep and inspect (every
// layer index was walked); every count is now bounded, naming the key.
BOOST_AUTO_TEST_CASE(hostile_config_counts_are_refused_naming_the_key) {
  const std::string dir = scratch_dir("faults-config");
  const std::string ck = "--checkpoint '" + tiny2() + "' --config ";
  for (const std::string v : {"2147483648", "9223372036854775807", "1000000000000"}) {
    const std::string cfg = config_with(dir + "/layers-" + v + ".json", "num_hidden_layers", v);
    expect_fast_error("run " + ck + "'" + cfg + "' --seq-len 8 --out '" + dir + "/o'", "run", {"num_hidden_layers", v});
    expect_fast_error("decode " + ck + "'" + cfg + "' --seq-len 8 --prompt-len 4 --cache-budget 3 --policy h2o --sinks 1 --recent 1 --out '" +
                          dir + "/o'",
                      "decode", {"num_hidden_layers", v});
    expect_fast_error("sweep " + ck + "'" + cfg + "' --seq-len 8 --out '" + dir + "/o'", "sweep", {"num_hidden_layers", v});
    expect_fast_error("inspect '" + tiny2() + "' --config '" + cfg + "'", "inspect", {"num_hidden_layers", v});
  }
  BOOST_TEST(!fs::exists(dir + "/o"));
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"hidden_size", "1099511627776"}, {"num_attention_heads", "1000000"}, {"kv_lora_rank", "4294967296"},
           {"vocab_size", "4294967296"}, {"max_position_embeddings", "9223372036854775807"}}) {
    const std::string cfg = config_with(dir + "/" + key + ".json", key, value);
    expect_fast_error("inspect '" + tiny2() + "' --config '" + cfg + "'", "inspect", {key + "'", value, "more than any model"});
  }
  // the largest count allowed: layers are found from the tensor names, not by walking 4096 indices
  const std::string many = config_with(dir + "/layers-4096.json", "num_hidden_layers", "4096");
  const RunResult r = run_bounded("inspect '" + tiny2() + "' --config '" + many + "'");
  BOOST_TEST(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "layers present: 2 of 4096: 0,1"), r.out);
}

// Issue: a duplicate key kept its first value (transformers and Python's json keep the last);
// q_lora_rank 0 on a checkpoint with q_a_proj reported "layers present: none" without a reason.
BOOST_AUTO_TEST_CASE(config_keys_read_as_transformers_reads_them) {
  const std::string dir = scratch_dir("faults-config-keys");
  std::string text = read_text(tiny2() + "/config.json");
  const size_t at = text.find("\"num_hidden_layers\"");
  text.insert(at, "\"num_hidden_layers\": 7, ");  // given twice: 7 first, then the real 2
  write_text(dir + "/twice.json", text);
  const RunResult twice = run_bounded("inspect '" + tiny2() + "' --config '" + dir + "/twice.json'");
  BOOST_TEST(twice.exit_code == 0, twice.err);
  BOOST_TEST(contains(twice.out, "layers present: 2 of 2"), twice.out);
  const std::string q0 = config_with(dir + "/q0.json", "q_lora_rank", "0");
  const RunResult inspect = run_bounded("inspect '" + tiny2() + "' --config '" + q0 + "'");
  BOOST_TEST(contains(inspect.out, "layers present: 0 of 2"), inspect.out);
  BOOST_TEST(contains(inspect.out, "q_lora_rank is 0"), inspect.out);
  BOOST_TEST(contains(inspect.out, "q_proj"), inspect.out);
  expect_fast_error("run --checkpoint '" + tiny2() + "' --config '" + q0 + "' --seq-len 8 --out '" + dir + "/o'", "run",
                    {"q_lora_rank is 0", "q_a_proj"});
}

// Issue: a FIFO given as --input, --config, a shard, or to inspect blocked forever (open before
// the regular-file check).
BOOST_AUTO_TEST_CASE(fifos_are_refused_before_they_block) {
  const std::string dir = scratch_dir("faults-fifo");
  const std::string fifo = dir + "/fifo";
  BOOST_TEST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string out = " --out '" + dir + "/o'";
  const std::string ck = "--checkpoint '" + tiny2() + "' ";
  expect_fast_error("run " + ck + "--input '" + fifo + "'" + out, "run", {fifo, "not a regular file (a FIFO)"});
  expect_fast_error("run " + ck + "--config '" + fifo + "'" + out, "run", {fifo, "FIFO"});
  expect_fast_error("run " + ck + "--tokens '" + fifo + "'" + out, "run", {fifo, "FIFO"});
  expect_fast_error("select --scores '" + fifo + "'" + out, "select", {fifo, "FIFO"});
  expect_fast_error("inspect '" + fifo + "'", "inspect", {fifo, "FIFO"});
  expect_fast_error("compare '" + fifo + "' '" + fifo + "'", "compare", {fifo, "FIFO"});
  // a shard that is a FIFO: a checkpoint directory whose first shard is one
  const std::string bad = dir + "/ckpt";
  fs::create_directories(bad);
  for (const auto& e : fs::directory_iterator(tiny2())) {
    const std::string name = e.path().filename().string();
    if (name == "model-00001-of-000002.safetensors") continue;
    fs::copy_file(e.path(), bad + "/" + name);
  }
  BOOST_TEST_REQUIRE(::mkfifo((bad + "/model-00001-of-000002.safetensors").c_str(), 0600) == 0);
  expect_fast_error("run --checkpoint '" + bad + "' --seq-len 8" + out, "run", {"model-00001-of-000002.safetensors", "FIFO"});
  expect_fast_error("sweep --checkpoint '" + bad + "' --seq-len 8" + out, "sweep", {"FIFO"});
  const RunResult r = run_bounded("inspect '" + bad + "'");
  BOOST_TEST(r.exit_code != 124, "inspect hung on a FIFO shard");
  BOOST_TEST(!fs::exists(dir + "/o"));
}

// Issue: decode --sinks and --recent near 2^63 passed K > sinks + recent by signed overflow and
// failed after the prefill; list flags accepted empty items; a range of a billion layers was
// walked; synth accepted --vocab 2^31.
BOOST_AUTO_TEST_CASE(flag_arithmetic_is_checked_before_any_work) {
  const std::string dir = scratch_dir("faults-flags");
  const std::string out = dir + "/o";
  const std::string decode = "decode --checkpoint '" + tiny2() + "' --seq-len 48 --prompt-len 40 --out '" + out + "' ";
  const std::string max = "9223372036854775807";
  // a policy setting is at most 18 digits (kPolicySettingMax), so sinks + recent cannot wrap
  expect_fast_error(decode + "--cache-budget 50 --sinks " + max + " --recent " + max, "decode", {"--sinks", "out of range"});
  expect_fast_error(decode + "--cache-budget " + max + " --sinks 2 --recent " + max, "decode", {"--recent", "out of range"});
  expect_fast_error(decode + "--cache-budget 50 --policy h2o:sinks=" + max, "decode", {"sinks=" + max, "not an integer in"});
  expect_fast_error(decode + "--cache-budget 38 --policy h2o --sinks 2 --recent 4 --steps " + max, "decode", {"--steps", max});
  expect_fast_error(decode + "--cache-budget 40,,50", "decode", {"--cache-budget", "empty item"});
  expect_fast_error(decode + "--cache-budget 40,", "decode", {"--cache-budget", "empty item"});
  expect_fast_error(decode + "--cache-budget ,40", "decode", {"--cache-budget", "empty item"});
  expect_fast_error("synth --preset tiny --layers 0,,1 --out '" + out + "'", "synth", {"--layers", "empty item"});
  expect_fast_error("synth --preset tiny --vocab 2147483648 --out '" + out + "'", "synth", {"--vocab", "out of range"});
  expect_fast_error("sweep --checkpoint '" + tiny2() + "' --layers 0-999999999 --out '" + out + "'", "sweep",
                    {"--layers", "999999999", "out of range"});
  BOOST_TEST(!fs::exists(out));
  // a budget near 2^63 holds every token (oracle's K + 1 and recent=99% of K overflowed): it
  // runs, nothing is evicted, and every figure is exactly the full cache's
  const std::string big = dir + "/big";
  const RunResult r = run_bounded("decode --checkpoint '" + tiny2() + "' --seq-len 48 --prompt-len 40 --steps 3 --cache-budget " +
                                  max + " --policy oracle,h2o:recent=99%,tova --out '" + big + "'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  const std::string summary = read_text(big + "/summary.csv");
  BOOST_TEST(std::count(summary.begin(), summary.end(), '\n') == 4);  // header, 3 policies
  for (const char* p : {"\noracle,", "\nh2o:recent=99%,", "\ntova,"})
    BOOST_TEST(summary.find(std::string(p) + max + ",0,0,0,0,1,1,1,1,") != std::string::npos, p << " in\n" << summary);
}

// Issue: run --input FILE --residual with only hidden_states.L in FILE skipped the plan
// (planned_peak_bytes -1; 950 MiB used under MLA_MEMORY_AVAILABLE=100M); decode had no plan
// (1 GB used under 100M); MLA_MEMORY_AVAILABLE=100K printed "0 MiB".
BOOST_AUTO_TEST_CASE(memory_plans_cover_every_command) {
  const std::string dir = scratch_dir("faults-memory");
  std::vector<float> rows(16 * 64);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1.0);
  std::vector<std::byte> bytes(rows.size() * 4);
  std::memcpy(bytes.data(), rows.data(), bytes.size());
  mla::write_safetensors(dir + "/states.safetensors", {{"hidden_states.0", mla::DType::F32, {16, 64}, bytes}}, {});
  const std::string run = "run --checkpoint '" + tiny2() + "' --input '" + dir + "/states.safetensors' --residual --out '" +
                          dir + "/run'";
  const RunResult ok = run_bounded(run);
  BOOST_TEST_REQUIRE(ok.exit_code == 0, ok.err);
  simdjson::dom::parser parser;
  BOOST_TEST(int64_t(parser.load(dir + "/run/report.json")["memory"]["planned_peak_bytes"]) > 0);
  // half the process's own part of the plan (what the CLI has resident: ~12 MiB without CUDA,
  // ~160 MiB with it, memory_plan.cpp process_allowance_bytes): too little whatever the build
  const int64_t process = int64_t(parser.load(dir + "/run/report.json")["memory"]["planned_process_bytes"]);
  BOOST_TEST_REQUIRE(process > 0);
  const std::string too_little = "MLA_MEMORY_AVAILABLE=" + std::to_string(process / 2);
  expect_error_line(mla::test::run_cli_after(too_little, run), "run", {"not enough memory", "is available (MLA_MEMORY_AVAILABLE)"});
  expect_error_line(mla::test::run_cli_after("MLA_MEMORY_AVAILABLE=100K", run), "run", {"but 100 KiB is available"});
  // without --residual, and in sweep: the tensor NAME.L is planned too (both skipped the plan)
  const std::string states = "--checkpoint '" + tiny2() + "' --input '" + dir + "/states.safetensors' ";
  expect_error_line(mla::test::run_cli_after(too_little, "run " + states + "--out '" + dir + "/run2'"), "run", {"not enough memory"});
  expect_error_line(mla::test::run_cli_after(too_little, "sweep " + states + "--residual --layers 0 --out '" + dir + "/sweep'"),
                    "sweep", {"not enough memory"});
  BOOST_TEST(!fs::exists(dir + "/run2"));
  BOOST_TEST(!fs::exists(dir + "/sweep"));

  const std::string decode = "decode --checkpoint '" + tiny2() + "' --seq-len 48 --prompt-len 40 --cache-budget 38 --policy h2o,tova --sinks 2 "
                             "--recent 4 --out '" + dir + "/decode'";
  const RunResult d = run_bounded(decode);
  BOOST_TEST_REQUIRE(d.exit_code == 0, d.err);
  BOOST_TEST(int64_t(parser.load(dir + "/decode/report.json")["memory"]["planned_peak_bytes"]) > 0);
  expect_error_line(mla::test::run_cli_after(too_little, decode), "decode",
                    {"not enough memory for decode of P = 40 prompt rows and N = 8 steps", "MLA_MEMORY_AVAILABLE"});
  expect_error_line(mla::test::run_cli_after("MLA_MEMORY_AVAILABLE=100M", "synth --preset tiny --out '" + dir + "/s'"), "synth",
                    {"not enough memory for synth"});
  BOOST_TEST(!fs::exists(dir + "/s"));

  // eval refuses as run and decode do, naming what would fit (FitAlternatives): just under its
  // own estimate, fewer decoded positions or fewer runs fit; far under it, nothing does
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla";
  const std::string eval = "eval --checkpoint '" + model + "' --text '" + model + "/eval/heldout.txt' --prompt-len 512 "
                           "--steps 1024 --cache-budget 128,256 --policy h2o,tova --quiet --out '" + dir + "/eval'";
  const RunResult tiny_budget = mla::test::run_cli_after("MLA_MEMORY_AVAILABLE=1M", eval);
  expect_error_line(tiny_budget, "eval", {"not enough memory for eval of 5 runs x 1024 decoded positions after P = 512",
                                          "nothing smaller fits either"});
  const size_t at = tiny_budget.err.find("needs ~");
  BOOST_TEST_REQUIRE(at != std::string::npos);
  const double need_mib = std::stod(tiny_budget.err.substr(at + 7));  // "needs ~465 MiB"
  BOOST_TEST_REQUIRE(tiny_budget.err.substr(tiny_budget.err.find(' ', at + 7), 5) == " MiB ");
  const std::string under = "MLA_MEMORY_AVAILABLE=" + std::to_string(static_cast<int64_t>(need_mib * 0.95)) + "M";
  expect_error_line(mla::test::run_cli_after(under, eval), "eval", {"would fit: --steps ", " or fewer, or at most ", " runs"});
  BOOST_TEST(!fs::exists(dir + "/eval"));
}

// Issue: sweep with layer 1's shard missing ran layer 0 first and wrote its results beside the
// previous report; inspect said "layers present: 2 of 2".
BOOST_AUTO_TEST_CASE(a_missing_shard_fails_before_the_first_layer) {
  const std::string dir = scratch_dir("faults-shard");
  const std::string ck = dir + "/ckpt";
  BOOST_TEST_REQUIRE(run_cli("synth --preset tiny --layers 0,1 --shards 3 --out '" + ck + "'").exit_code == 0);
  const std::string out = dir + "/out";
  const std::string sweep = "sweep --checkpoint '" + ck + "' --seq-len 8 --out '" + out + "'";
  BOOST_TEST_REQUIRE(run_bounded(sweep).exit_code == 0);
  const auto before = snapshot(out);
  fs::remove(ck + "/model-00002-of-000003.safetensors");  // layer 1's shard
  const RunResult r = run_bounded(sweep);
  expect_error_line(r, "sweep", {"model-00002-of-000003.safetensors", "is missing", out + " left as it was"});
  BOOST_TEST(!contains(r.err, "layer 0 (1/2) done"));
  BOOST_TEST((snapshot(out) == before));
  const RunResult in = run_bounded("inspect '" + ck + "'");
  BOOST_TEST(contains(in.out, "layers present: 1 of 2: 0 (layer 1's shard"), in.out);
}

// The smaller ones of the issue.
BOOST_AUTO_TEST_CASE(smaller_edges) {
  const std::string dir = scratch_dir("faults-small");
  // sweep --quiet printed per-layer lines
  const RunResult q = run_bounded("sweep --checkpoint '" + tiny2() + "' --seq-len 8 --quiet --out '" + dir + "/sweep'");
  BOOST_TEST(q.exit_code == 0, q.err);
  BOOST_TEST(q.err.empty(), q.err);
  // demo --decode ignored --per-head silently; --cache-dir FILE named the output directory
  expect_fast_error("demo --decode --per-head --out '" + dir + "/d'", "demo", {"--per-head", "--decode"});
  write_text(dir + "/afile", "x");
  expect_fast_error("demo --cache-dir '" + dir + "/afile' --out '" + dir + "/d'", "demo",
                    {"--cache-dir " + dir + "/afile", "not a directory"});
  BOOST_TEST(!fs::exists(dir + "/d"));
  // select on a binary file printed raw control bytes
  std::string binary = "token_idx,attention_score\n0,";
  for (int c = 0; c < 32; ++c) binary += static_cast<char>(c == '\n' || c == ',' ? 1 : c);
  binary += "\xff\xfe\n";
  write_text(dir + "/binary.csv", binary);
  const RunResult sel = run_bounded("select --scores '" + dir + "/binary.csv' --out '" + dir + "/sel'");
  expect_error_line(sel, "select", {"is not a number", "\\x"});
  for (const char c : sel.err) BOOST_TEST((c == '\n' || static_cast<unsigned char>(c) >= 0x20), "control byte in the error line");
}

// ---- issue 29: nothing silent ------------------------------------------------------------------

namespace {
const std::string& shipped() {
  static const std::string m = mla::test::data_dir() + "/../../models/tiny-mla";
  return m;
}
// eval on the shipped model over its held-out text, P 16, N 8 (well under a second)
std::string eval_args(const std::string& model, const std::string& out, const std::string& extra) {
  return "eval --checkpoint '" + model + "' --text '" + shipped() + "/eval/heldout.txt' --prompt-len 16 --steps 8 --quiet --out '" +
         out + "' " + extra;
}
// A copy of the shipped model with one config.json key's value replaced (the weights hard-linked).
std::string shipped_with(const std::string& dir, const std::string& key, const std::string& value) {
  fs::create_directories(dir);
  std::error_code ec;
  fs::create_hard_link(shipped() + "/model.safetensors", dir + "/model.safetensors", ec);
  if (ec) fs::copy_file(shipped() + "/model.safetensors", dir + "/model.safetensors");
  config_of_with(shipped(), dir + "/config.json", key, value);
  return dir;
}
}  // namespace

// eval printed mean NLL nan, KL -nan and top-1 1.0 and exited 0 on a model whose MoE output
// overflows (routed_scaling_factor 1e308); every other command refused such a model.
BOOST_AUTO_TEST_CASE(a_non_finite_eval_is_an_error_naming_layer_and_tensor) {
  const std::string dir = scratch_dir("faults-nan-eval");
  const std::string model = shipped_with(dir + "/model", "routed_scaling_factor", "1e308");
  const RunResult r = run_bounded(eval_args(model, dir + "/out", "--cache-budget 8 --policy h2o"));
  expect_error_line(r, "eval", {"layer 1 output", "is NaN", "overflow"});  // layer 0 is dense: the first MoE layer
  BOOST_TEST(!contains(r.out, "nan"));
  BOOST_TEST(!fs::exists(dir + "/out"));
}

// A budget of 2^51 or more hung eval while budget.svg's axis ticks grew without bound (the step
// fell below the values' ulp). A budget past the sequence is a full cache; the chart is bounded.
BOOST_AUTO_TEST_CASE(a_huge_budget_ends_with_a_bounded_chart) {
  const std::string dir = scratch_dir("faults-huge-budget");
  const RunResult r = run_bounded(eval_args(shipped(), dir + "/out", "--cache-budget 2251799813685248 --policy h2o"));
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(fs::file_size(dir + "/out/budget.svg") < 200000u);
  const RunResult two = run_bounded(eval_args(shipped(), dir + "/out2", "--cache-budget 8,9223372036854775000 --policy h2o"));
  BOOST_TEST_REQUIRE(two.exit_code == 0, two.err);
  BOOST_TEST(fs::file_size(dir + "/out2/budget.svg") < 200000u);
  // issue 46, fault 9: one budget of 2^60 or more drew every point at x="-nan" (x - 1 == x there)
  for (const std::string K : {"1152921504606846976", "4611686018427387904", "9223372036854775000"}) {
    const std::string out = dir + "/one-" + K;
    const RunResult one = run_bounded(eval_args(shipped(), out, "--cache-budget " + K + " --policy h2o"));
    BOOST_TEST_REQUIRE(one.exit_code == 0, one.err);
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string text = read_text(e.path().string());
      BOOST_TEST(!contains(text, "nan"), e.path().filename().string() << " at K = " << K << " holds nan");
      BOOST_TEST((!contains(text, "inf\"") && !contains(text, "inf,") && !contains(text, "\"-inf")),
                 e.path().filename().string() << " at K = " << K << " holds inf");
    }
  }
}

// "256,1,2,3\0abc,4,5,6,7" read as 8 ids: the NUL ended the parse of an item and "abc" was dropped.
BOOST_AUTO_TEST_CASE(a_nul_byte_in_a_token_file_is_refused) {
  const std::string dir = scratch_dir("faults-nul");
  write_text(dir + "/ids.txt", std::string("256,1,2,3\0abc,4,5,6,7", 21));
  expect_error_line(run_bounded("eval --checkpoint '" + shipped() + "' --tokens '" + dir + "/ids.txt' --prompt-len 4 --steps 2 "
                                "--cache-budget 2 --policy h2o --out '" + dir + "/o'"),
                    "eval", {"NUL byte at offset 9"});
  expect_error_line(run_bounded("run --checkpoint '" + tiny2() + "' --tokens '" + dir + "/ids.txt' --out '" + dir + "/o'"), "run",
                    {"NUL byte"});
  BOOST_TEST(!fs::exists(dir + "/o"));
}

// h2o:sinks=4,sinks=8 ran with the last value, while h2o,h2o was refused as given twice.
BOOST_AUTO_TEST_CASE(a_policy_setting_given_twice_is_refused) {
  const std::string dir = scratch_dir("faults-policy-twice");
  for (const std::string p : {"h2o:sinks=4,sinks=8", "h2o:heads=max,heads=sum", "snapkv:window=4,pool=avg3,window=8"})
    expect_error_line(run_bounded(eval_args(shipped(), dir + "/o", "--cache-budget 8 --policy " + p)), "eval",
                      {"given twice", p.substr(0, p.find(':'))});
  expect_error_line(run_bounded("decode --checkpoint '" + tiny2() + "' --seq-len 12 --prompt-len 8 --cache-budget 4 --policy "
                                "h2o:recent=2,recent=50% --out '" + dir + "/o'"),
                    "decode", {"'recent' given twice"});
  BOOST_TEST(!fs::exists(dir + "/o"));
  // distinct keys still combine
  BOOST_TEST(run_bounded(eval_args(shipped(), dir + "/ok", "--cache-budget 8 --policy h2o:sinks=2,recent=3")).exit_code == 0);
}

// `eval ... > /dev/full` exited 0 with its summary lost; a closed pipe killed it with SIGPIPE (141)
// after the set was written. Both are now one error line and exit status 1, the set in place.
BOOST_AUTO_TEST_CASE(stdout_write_errors_are_an_error_line) {
  const std::string dir = scratch_dir("faults-stdout");
  const std::string cli = mla::test::cli_path();
  const std::string a = eval_args(shipped(), dir + "/a", "--cache-budget 8 --policy h2o");
  const int rc_full = std::system(("'" + cli + "' " + a + " >/dev/full 2>'" + dir + "/full.err'; echo $? > '" + dir + "/full.rc'").c_str());
  BOOST_TEST(rc_full == 0);
  BOOST_TEST(read_text(dir + "/full.rc") == "1\n");
  BOOST_TEST(contains(read_text(dir + "/full.err"), "mla-h2o eval: error: cannot write to standard output"));
  BOOST_TEST(fs::exists(dir + "/a/summary.csv"));
  const std::string b = eval_args(shipped(), dir + "/b", "--cache-budget 8 --policy h2o");
  const int rc_pipe =
      std::system(("('" + cli + "' " + b + " 2>'" + dir + "/pipe.err'; echo $? > '" + dir + "/pipe.rc') | true").c_str());
  BOOST_TEST(rc_pipe == 0);
  BOOST_TEST(read_text(dir + "/pipe.rc") == "1\n");
  BOOST_TEST(contains(read_text(dir + "/pipe.err"), "cannot write to standard output"));
  BOOST_TEST(fs::exists(dir + "/b/summary.csv"));
}

// Inputs read only as far as the run needs, and planned as such: eval --text on a large file read
// all of it (2 GB for a 200 MB file at P 4, N 2), decode ran every row of it (and refused a
// 6-token job as needing 191 GiB at 200 MB), expected-attention:future=10^7 built a 10^7-row rope
// table (planned 347 MB, used 1.54 GB).
BOOST_AUTO_TEST_CASE(inputs_are_read_only_as_far_as_the_run_needs) {
  const std::string dir = scratch_dir("faults-big-input");
  {
    std::string text = read_text(shipped() + "/eval/heldout.txt");
    std::string big;
    while (big.size() < (size_t{64} << 20)) big += text;  // 64 MiB
    write_text(dir + "/big.txt", big);
  }
  const auto peak_mib = [](const std::string& report) {
    simdjson::dom::parser parser;
    const simdjson::dom::element doc = parser.load(report);
    return static_cast<double>(int64_t(doc["memory"]["measured_peak_rss_bytes"])) / (1 << 20);
  };
  // bounds relative to the same run on the small held-out text (absolute ones would not hold under
  // AddressSanitizer's shadow memory): reading the 64 MiB file would add at least 64 MiB
  const std::string small = shipped() + "/eval/heldout.txt";
  const RunResult ev0 = run_bounded("eval --checkpoint '" + shipped() + "' --text '" + small + "' --prompt-len 4 --steps 2 "
                                    "--cache-budget 2 --policy h2o --quiet --out '" + dir + "/ev0'");
  BOOST_TEST_REQUIRE(ev0.exit_code == 0, ev0.err);
  const double base = peak_mib(dir + "/ev0/report.json");
  const RunResult ev = run_bounded("eval --checkpoint '" + shipped() + "' --text '" + dir + "/big.txt' --prompt-len 4 --steps 2 "
                                   "--cache-budget 2 --policy h2o --quiet --out '" + dir + "/ev'");
  BOOST_TEST_REQUIRE(ev.exit_code == 0, ev.err);
  BOOST_TEST(peak_mib(dir + "/ev/report.json") < base + 32.0);
  BOOST_TEST(contains(ev.out, "(BOS + 6 bytes)"), ev.out);
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult de = run_bounded("decode --checkpoint '" + shipped() + "' --text '" + dir + "/big.txt' --prompt-len 4 --steps 2 "
                                   "--cache-budget 3 --policy h2o --sinks 1 --recent 1 --quiet --out '" + dir + "/de'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_REQUIRE(de.exit_code == 0, de.err);
  BOOST_TEST(seconds < 20.0);
  const RunResult de0 = run_bounded("decode --checkpoint '" + shipped() + "' --text '" + small + "' --prompt-len 4 --steps 2 "
                                    "--cache-budget 3 --policy h2o --sinks 1 --recent 1 --quiet --out '" + dir + "/de0'");
  BOOST_TEST_REQUIRE(de0.exit_code == 0, de0.err);
  BOOST_TEST(peak_mib(dir + "/de/report.json") < peak_mib(dir + "/de0/report.json") + 32.0);
  // expected-attention's future positions without a future-sized table
  const RunResult ea = run_bounded(eval_args(shipped(), dir + "/ea", "--cache-budget 8 --policy expected-attention:future=1000000"));
  BOOST_TEST_REQUIRE(ea.exit_code == 0, ea.err);
  const RunResult ea0 = run_bounded(eval_args(shipped(), dir + "/ea0", "--cache-budget 8 --policy expected-attention"));
  BOOST_TEST_REQUIRE(ea0.exit_code == 0, ea0.err);
  // a 10^6-row rope table is 256 MB (at 10^7 it used 1.54 GB)
  BOOST_TEST(peak_mib(dir + "/ea/report.json") < peak_mib(dir + "/ea0/report.json") + 64.0);
}

// Issue 46, fault 10: select on the finite scores 1e-320, 5e-324, 1e308, 1e308 printed mean, std
// and sum inf and drew y="-inf" in scores.svg, exit 0. The figures now come from scaled sums when
// the plain ones overflow, the chart divides before it multiplies, and a figure whose true value
// is beyond the double range (that sum: 2e308; a heavy / evicted ratio of 2e628) is refused with
// one line naming it, nothing written.
BOOST_AUTO_TEST_CASE(select_statistics_of_huge_scores_stay_finite) {
  const std::string dir = scratch_dir("faults-select-huge");
  write_text(dir + "/big.csv", "token_idx,attention_score\n0,1e300\n1,5e-3\n2,1e308\n3,7e307\n");
  const RunResult r = run_bounded("select --scores '" + dir + "/big.csv' --sinks 0 --recent 1 --budget 1 --out '" + dir + "/o'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  for (const auto& e : fs::directory_iterator(dir + "/o")) {
    const std::string text = read_text(e.path().string());
    BOOST_TEST(!contains(text, "inf"), e.path().filename().string() << " holds inf");
    BOOST_TEST(!contains(text, "nan"), e.path().filename().string() << " holds nan");
  }
  // mean and std against long double (range to 1e4932: no overflow)
  const std::vector<long double> x = {1e300L, 5e-3L, 1e308L, 7e307L};
  long double mean = 0, sq = 0;
  for (long double v : x) mean += v / 4;
  for (long double v : x) sq += (v - mean) * (v - mean) / 4;
  simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.load(dir + "/o/report.json");
  const auto near = [](double got, long double want) { return std::fabs(static_cast<long double>(got) - want) <= 1e-12L * want; };
  BOOST_TEST(near(double(doc["scores"]["mean"]), mean), double(doc["scores"]["mean"]));
  BOOST_TEST(near(double(doc["scores"]["std"]), std::sqrt(sq)), double(doc["scores"]["std"]));
  BOOST_TEST(near(double(doc["scores"]["sum"]), 1.7000000100000000000e308L), double(doc["scores"]["sum"]));
  // the scores: their sum is 2e308
  write_text(dir + "/issue.csv", "token_idx,attention_score\n0,1e-320\n1,5e-324\n2,1e308\n3,1e308\n");
  expect_fast_error("select --scores '" + dir + "/issue.csv' --sinks 0 --recent 1 --budget 1 --out '" + dir + "/o2'", "select",
                    {"score sum", "2.0e+308"});
  // a ratio of 2e628
  write_text(dir + "/ratio.csv", "token_idx,attention_score\n0,1e-320\n1,5e-324\n2,1e308\n3,7e307\n");
  expect_fast_error("select --scores '" + dir + "/ratio.csv' --sinks 0 --recent 1 --budget 1 --out '" + dir + "/o2'", "select",
                    {"heavy / evicted score ratio", "e+628"});
  BOOST_TEST(!fs::exists(dir + "/o2"));
}

// Issue 46, fault 3: expected-attention:future=1099511627776 hung decode silently under --quiet
// (~61 h), and eval took values up to 10^18. Every setting now has a domain (suite policies walks
// them all); here the CLI's one line, before any work.
BOOST_AUTO_TEST_CASE(a_policy_setting_outside_its_domain_is_refused_at_once) {
  const std::string out = scratch_dir("faults-future") + "/o";
  const std::string text = shipped() + "/eval/heldout.txt";
  for (const std::string v : {"1099511627776", "999999999999999999", "10000001"}) {
    expect_fast_error("decode --checkpoint '" + shipped() + "' --text '" + text + "' --prompt-len 16 --steps 8 --cache-budget 8 "
                      "--quiet --policy expected-attention:future=" + v + " --out '" + out + "'",
                      "decode", {"future=" + v, "[1, 10000000]"});
    expect_fast_error(eval_args(shipped(), out, "--cache-budget 8 --policy h2o,expected-attention:future=" + v), "eval",
                      {"future=" + v, "[1, 10000000]"});
  }
  expect_fast_error(eval_args(shipped(), out, "--cache-budget 8 --policy snapkv:pool=avg1000000000000000001"), "eval",
                    {"pool=avg1000000000000000001"});
  BOOST_TEST(!fs::exists(out));
}

// Issue 29: expected-attention at a huge `future` was silent for minutes (its mean RoPE rotation is
// O(future), and eval computed it again for every run at every layer). It is computed once per
// command, with its own progress stage, and the report times it.
BOOST_AUTO_TEST_CASE(expected_attention_future_rotation_shows_progress) {
  const std::string dir = scratch_dir("faults-ea-progress");
  const std::string text = shipped() + "/eval/heldout.txt";
  for (const std::string cmd : {"eval", "decode"}) {
    const RunResult r = mla::test::run_cli_after(
        "MLA_PROGRESS_AFTER=0 exec timeout 120",
        cmd + " --checkpoint '" + shipped() + "' --text '" + text + "' --prompt-len 16 --steps 8 --cache-budget 8 " +
            "--policy expected-attention:future=1000000,h2o --out '" + dir + "/" + cmd + "'");
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
    BOOST_TEST(contains(r.err, "expected-attention: mean RoPE rotation over the future positions 1.00M/1.00M (100.0%)"), cmd << ": " << r.err);
  }
  BOOST_TEST(contains(read_text(dir + "/eval/report.json"), "\"expected-attention future rotation\""));
}

// The smaller ones: "BOS + N bytes" for a config without bos_token_id; the advice of a plan that
// cannot fit names --prompt-len when the prompt is what does not fit; a valid 250-byte --out name
// (its staging name was over NAME_MAX).
BOOST_AUTO_TEST_CASE(smaller_reports_say_what_ran) {
  const std::string dir = scratch_dir("faults-smaller");
  const std::string nobos = shipped_with(dir + "/nobos", "bos_token_id", "null");
  const RunResult r = run_bounded(eval_args(nobos, dir + "/o1", "--cache-budget 8 --policy h2o"));
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "bytes, no BOS)"), r.out);
  BOOST_TEST(!contains(r.out, "BOS +"));
  const RunResult big = mla::test::run_cli_after("MLA_MEMORY_AVAILABLE=64M exec timeout 20",
      "eval --checkpoint '" + shipped() + "' --tokens 1 --prompt-len 1000000 --steps 1 --cache-budget 8 --policy h2o --out '" +
          dir + "/o2'");
  BOOST_TEST(big.exit_code != 0);
  BOOST_TEST(contains(big.err, "--prompt-len"), big.err);
  const std::string long_name = dir + "/" + std::string(250, 'd');
  const RunResult lr = run_bounded(run_into(long_name, ""));
  BOOST_TEST_REQUIRE(lr.exit_code == 0, lr.err);
  expect_one_set(long_name, "a 250-byte directory name");
  BOOST_TEST_REQUIRE(run_bounded(run_into(long_name, "--seq-len 12")).exit_code == 0);  // replaced, staging removed
  expect_one_set(long_name, "a 250-byte directory name, replaced");
}

// ---- issue 46, fault 8: no `inf` reported as a result -------------------------------------------

namespace {
// A copy of the shipped model whose lm_head.weight (BF16) is scaled by `factor`, every value
// still finite; config.json copied as it is.
std::string shipped_with_lm_head_times(const std::string& dir, float factor) {
  fs::create_directories(dir);
  std::string bytes = read_text(shipped() + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  simdjson::dom::parser parser;
  const simdjson::dom::element header = parser.parse(bytes.data() + 8, static_cast<size_t>(n));
  const simdjson::dom::element t = header["lm_head.weight"];
  if (std::string_view(t["dtype"]) != "BF16") throw std::runtime_error("lm_head.weight is not BF16");
  const size_t begin = 8 + n + uint64_t(t["data_offsets"].at(0)), end = 8 + n + uint64_t(t["data_offsets"].at(1));
  for (size_t i = begin; i + 1 < end; i += 2) {
    uint16_t b = 0;
    std::memcpy(&b, bytes.data() + i, 2);
    uint32_t u = uint32_t{b} << 16;
    float f = 0;
    std::memcpy(&f, &u, 4);
    f *= factor;
    std::memcpy(&u, &f, 4);
    b = static_cast<uint16_t>(u >> 16);  // truncated to bf16: finite, as every value is below 1e30
    std::memcpy(bytes.data() + i, &b, 2);
  }
  write_text(dir + "/model.safetensors", bytes);
  fs::copy_file(shipped() + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  return dir;
}
}  // namespace

// eval printed `ppl_ratio inf` (and report.json null) with exit 0 on a model whose lm_head is
// x30000: ΔNLL past 709.78 overflows exp(). The ratio is reported in the log domain too
// (ln_ppl_ratio = ΔNLL), and a ppl_ratio that is not finite is refused naming its cell.
BOOST_AUTO_TEST_CASE(a_ppl_ratio_past_the_largest_double_is_refused_naming_the_cell) {
  const std::string dir = scratch_dir("faults-ppl-overflow");
  const std::string model = shipped_with_lm_head_times(dir + "/x30000", 30000.0f);
  const RunResult r = run_bounded(eval_args(model, dir + "/out", "--cache-budget 8 --policy h2o,random,knorm"));
  expect_error_line(r, "eval", {"the ppl_ratio of ", " at budget 8 is not finite", "ln_ppl_ratio = "});
  BOOST_TEST(!contains(r.out, "inf"), r.out);
  // no output set; the finished windows kept for --resume (the refusal comes after them)
  BOOST_TEST(fs::exists(dir + "/out/.mla-h2o-resume/window-000000.rec"));
  BOOST_TEST(!fs::exists(dir + "/out/summary.csv"));
  BOOST_TEST(contains(r.err, "finished windows kept in .mla-h2o-resume for --resume"), r.err);
  // a finite run reports both: ln_ppl_ratio is ΔNLL, ppl_ratio its exp
  const RunResult ok = run_bounded(eval_args(shipped(), dir + "/ok", "--cache-budget 8 --policy h2o"));
  BOOST_TEST_REQUIRE(ok.exit_code == 0, ok.err);
  BOOST_TEST(contains(read_text(dir + "/ok/summary.csv"), ",delta_nll_ci_high,ln_ppl_ratio,ppl_ratio,"));
  simdjson::dom::parser parser;
  for (const auto s : parser.load(dir + "/ok/report.json")["summary"].get_array()) {
    const double d = double(s["delta_nll"]), ln = double(s["ln_ppl_ratio"]), ratio = double(s["ppl_ratio"]);
    BOOST_TEST(ln == d);
    BOOST_TEST(ratio == std::exp(d));
  }
}

// ---- issue 46, fault 6: --task's samples are planned --------------------------------------------

// eval --task passkey --context 256 --samples 1048576 grew to 19.5 GB with no plan: every sample
// (contexts x depths x samples) is kept, its text, ids and results. The plan counts them, and a
// run that cannot fit is one line naming the --samples that would, before any sample is made.
BOOST_AUTO_TEST_CASE(task_samples_are_planned_before_any_work) {
  const std::string dir = scratch_dir("faults-task-samples");
  const std::string recall = mla::test::data_dir() + "/../../models/tiny-mla-recall";
  const std::string task = "eval --checkpoint '" + recall + "' --text '" + recall + "/eval/heldout.txt' --task passkey "
                           "--context 256 --cache-budget 64 --policy h2o,streaming --quiet --out '" + dir + "/o' --samples ";
  const RunResult huge = run_bounded(task + "1048576");  // under `timeout 20`: the unplanned run took minutes
  expect_error_line(huge, "eval", {"not enough memory for eval --task passkey of 5242880 samples (1 contexts x 5 depths x "
                                   "--samples 1048576", "would fit: --samples "});
  // the --samples it names fits the same budget, and one more does not
  const std::string small = "MLA_MEMORY_AVAILABLE=600M exec timeout 20";
  const RunResult refused = mla::test::run_cli_after(small, task + "100000");
  expect_error_line(refused, "eval", {"would fit: --samples "});
  const size_t at = refused.err.find("would fit: --samples ");
  BOOST_TEST_REQUIRE(at != std::string::npos);
  const int64_t most = std::stoll(refused.err.substr(at + 21));
  BOOST_TEST_REQUIRE(most >= 1);
  BOOST_TEST(most < 100000);
  expect_error_line(mla::test::run_cli_after(small, task + std::to_string(most + 1)), "eval", {"not enough memory"});
  BOOST_TEST(!fs::exists(dir + "/o"));
  const RunResult ok = run_bounded(task + "2");
  BOOST_TEST(ok.exit_code == 0, ok.err);
}

// ---- issue 46: the scan of every output (output_scan.hpp) ----------------------------------------

// The module's last step reads every output of every successful command the suite ran and fails
// on a nan or inf written as a number. Here the scan itself, so that it can be seen to fail.
BOOST_AUTO_TEST_CASE(the_output_scan_finds_nan_and_inf_written_as_numbers) {
  using mla::test::non_finite_tokens;
  for (const std::string bad : {"inf", "-inf", "x,nan,y", "\"ppl_ratio\": inf}", "y=\"-inf\"", "NaN", "-nan", "Infinity",
                                "1.5, +INF", "(nan)"})
    BOOST_TEST(non_finite_tokens(bad).size() == 1u, "not found in '" << bad << "'");
  for (const std::string fine : {"info", "nanos", "infer", "faults-nan-eval-3/model", "/tmp/ppl-inf-2/o", "knorm", "nan_count 0",
                                 "snapkv:pool=max", "Information"})
    BOOST_TEST(non_finite_tokens(fine).empty(), "found in '" << fine << "'");
  const std::string dir = scratch_dir("faults-scan-selftest");
  const std::string set = dir + "/set";
  fs::create_directories(set);
  // the manifest as OutputSet writes it: the scan reads the files it lists (fingerprints unchecked)
  write_text(set + "/.mla-h2o-set", "mla-h2o output set\nfile 10 0000000000000000 x.csv\nfile 0 0000000000000000 t.safetensors\n");
  write_text(set + "/x.csv", "a,b\n1,inf\n");
  write_text(dir + "/not-a-set.csv", "an input: nan\n");  // inputs the tests write are not outputs
  // a dump: a finite F32 tensor and a BF16 one whose third element is +Inf (0x7F80)
  const std::vector<float> finite = {1.0f, -2.5f};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x7F80, 0x0000};
  mla::write_safetensors(set + "/t.safetensors",
                         {{"ok", mla::DType::F32, {2}, std::as_bytes(std::span(finite))},
                          {"bad", mla::DType::BF16, {4}, std::as_bytes(std::span(bf16))}},
                         {});
  std::vector<std::string> found = mla::test::scan_outputs(dir);
  std::sort(found.begin(), found.end());  // t.safetensors, then x.csv
  BOOST_TEST_REQUIRE(found.size() == 2u);
  BOOST_TEST(contains(found[0], "t.safetensors: tensor bad (BF16) holds NaN or Inf (element 2)"), found[0]);
  BOOST_TEST(contains(found[1], "x.csv: 'inf' at byte 6"), found[1]);
  fs::remove(set + "/x.csv");  // (the module's own scan reads this scratch area too)
  fs::remove(set + "/t.safetensors");
}

// ---- issue 46: --max-hours H for every command that plans ----------------------------------------

// run --seq-len 1048576 (16.3 GB, 4-6 h) was accepted because its memory fit, then ran for hours.
// Every command that plans refuses, before any work, a run whose estimate exceeds --max-hours:
// one line naming the estimate and H, --out not created; a limit above the estimate runs.
BOOST_AUTO_TEST_CASE(max_hours_refuses_a_run_planned_longer_before_any_work) {
  const std::string dir = scratch_dir("faults-max-hours"), m = "--checkpoint '" + shipped() + "' ";
  const std::string text = " --text '" + shipped() + "/eval/heldout.txt'";
  const std::pair<std::string, std::string> commands[] = {
      {"run", "run " + m + "--seq-len 1048576 --max-hours 0.01"},  // the issue's: ~4-8 h on this machine
      {"run", "run " + m + "--seq-len 64 --max-hours 1e-9"},
      {"sweep", "sweep " + m + "--seq-len 64 --max-hours 1e-9"},
      {"decode", "decode " + m + "--seq-len 64 --prompt-len 40 --cache-budget 16 --policy h2o --max-hours 1e-9"},
      {"eval", "eval " + m + text + " --prompt-len 16 --steps 8 --cache-budget 8 --policy h2o --max-hours 1e-9"},
      {"eval", "eval " + m + text + " --task passkey --context 256 --samples 1 --depths 50 --cache-budget 96 --policy h2o "
               "--max-hours 1e-9"},
  };
  int k = 0;
  for (const auto& [cmd, args] : commands) {
    const std::string out = dir + "/o" + std::to_string(k++);
    const RunResult r = run_bounded(args + " --quiet --out '" + out + "'");
    BOOST_TEST_CONTEXT(args) {
      expect_error_line(r, cmd, {"the plan's estimate is about ", "more than --max-hours ", "refused before any work"});
      BOOST_TEST(!fs::exists(out));
    }
    BOOST_TEST(contains(run_bounded(cmd + " --help").out, "--max-hours H"), cmd);
  }
  // above the estimate: the same runs go ahead
  for (const std::string& args : {"run " + m + "--seq-len 64", "sweep " + m + "--seq-len 64",
                                  "decode " + m + "--seq-len 64 --prompt-len 40 --cache-budget 16 --policy h2o",
                                  "eval " + m + text + " --prompt-len 16 --steps 8 --cache-budget 8 --policy h2o"}) {
    const RunResult ok = run_bounded(args + " --max-hours 100 --quiet --out '" + dir + "/ok" + std::to_string(k++) + "'");
    BOOST_TEST(ok.exit_code == 0, args << ": " << ok.err);
  }
  // bad values: one line each, before anything is opened
  for (const char* bad : {"0", "-1", "abc", "inf", "nan"}) {
    const RunResult r = run_bounded("run " + m + "--seq-len 64 --max-hours " + bad + " --out '" + dir + "/bad'");
    expect_error_line(r, "run", {"--max-hours"});
  }
}

BOOST_AUTO_TEST_SUITE_END()
