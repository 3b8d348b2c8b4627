// tests/unit/test_scale_out.cpp — suite scale_out: eval past one crash and past one process
// (docs/scale-out.md). Through the real CLI on the shipped models/tiny-mla:
//   - a run killed after K finished windows (MLA_TEST_KILL_AFTER_WINDOWS: SIGKILL at a known
//     point) leaves --out as it was plus its staging area; --resume (at another --threads) writes
//     every output byte-identical to an uninterrupted run, report.json says resumed_windows K, and
//     the staging area is gone; the same for --task samples and over an earlier set;
//   - SIGKILL at arbitrary moments: --out is always as it was, or holds a staging area that
//     --resume accepts and finishes byte-identically;
//   - the refusals, each one line, the finished windows kept: other settings (the setting named),
//     a changed model shard (also one no window had opened),
//     another producer, a corrupt record (the file named), --resume without a staging area, a
//     staging area without --resume;
//   - mpirun -n 2 (when this build has MPI and mpirun is installed): every output byte-identical to
//     one process's, report.json "ranks": 2; a build without MPI under mpirun refuses to repeat itself.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "mla_build_config.h"
#include "test_util.hpp"

namespace fs = std::filesystem;
using mla::test::read_text;
using mla::test::run_cli;
using mla::test::run_cli_after;
using mla::test::scratch_dir;

namespace {

std::string model() { return mla::test::data_dir() + "/../../models/tiny-mla"; }

// 4 windows of a short eval: about a second on 2 cores.
std::string eval_args(const std::string& out) {
  return "eval --checkpoint " + model() + " --text " + model() + "/eval/heldout-corpus --windows 4 --prompt-len 64 --steps 24 "
         "--cache-budget 24,40 --policy h2o,tova,streaming --quiet --out " + out;
}
std::string task_args(const std::string& out) {
  return "eval --checkpoint " + model() + " --text " + model() + "/eval/heldout-corpus --task passkey --context 192 "
         "--depths 20,80 --samples 2 --cache-budget 64 --policy h2o,streaming --quiet --out " + out;
}

std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Every output but report.json (its timings differ) byte-identical; the same file names.
void check_same_outputs(const std::string& a, const std::string& b) {
  BOOST_REQUIRE(files_of(a) == files_of(b));
  int compared = 0;
  for (const std::string& f : files_of(a)) {
    if (f == "report.json" || f == ".mla-h2o-set") continue;
    BOOST_TEST_CONTEXT(f) { BOOST_CHECK(read_text(a + "/" + f) == read_text(b + "/" + f)); }
    ++compared;
  }
  BOOST_CHECK_GE(compared, 4);
}

std::string area(const std::string& out) { return out + "/.mla-h2o-resume"; }

int records(const std::string& out) {
  int n = 0;
  if (!fs::exists(area(out))) return 0;
  for (const auto& e : fs::directory_iterator(area(out)))
    if (e.path().extension() == ".rec") ++n;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(scale_out)

BOOST_AUTO_TEST_CASE(a_killed_then_resumed_eval_is_byte_identical_to_an_uninterrupted_one) {
  const std::string dir = scratch_dir("resume"), whole = dir + "/whole", killed = dir + "/killed";
  const auto ref = run_cli(eval_args(whole) + " --threads 2");
  BOOST_REQUIRE_MESSAGE(ref.exit_code == 0, ref.err);
  const auto k = run_cli_after("MLA_TEST_KILL_AFTER_WINDOWS=2", eval_args(killed) + " --threads 1");
  BOOST_CHECK_EQUAL(k.exit_code, 128 + SIGKILL);
  BOOST_CHECK_EQUAL(records(killed), 2);
  BOOST_CHECK(files_of(killed) == std::vector<std::string>{".mla-h2o-resume"});  // nothing of a set: no half output
  const auto r = run_cli(eval_args(killed) + " --threads 2 --resume");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_CHECK(r.out.find("resumed 2 of 4 windows") != std::string::npos);
  BOOST_CHECK(!fs::exists(area(killed)));
  check_same_outputs(whole, killed);
  BOOST_CHECK(read_text(killed + "/report.json").find("\"resumed_windows\": 2") != std::string::npos);
  BOOST_CHECK(read_text(whole + "/report.json").find("\"resumed_windows\": 0") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(task_samples_resume_too_and_an_earlier_set_is_replaced_only_at_the_end) {
  const std::string dir = scratch_dir("resume-task"), whole = dir + "/whole", killed = dir + "/killed";
  BOOST_REQUIRE_EQUAL(run_cli(task_args(whole)).exit_code, 0);
  BOOST_REQUIRE_EQUAL(run_cli(eval_args(killed)).exit_code, 0);  // an earlier set in --out
  const std::string earlier = read_text(killed + "/summary.csv");
  const auto k = run_cli_after("MLA_TEST_KILL_AFTER_WINDOWS=1", task_args(killed) + " --threads 1");
  BOOST_CHECK_EQUAL(k.exit_code, 128 + SIGKILL);
  BOOST_CHECK_EQUAL(read_text(killed + "/summary.csv"), earlier);  // the earlier set as it was
  BOOST_CHECK_EQUAL(records(killed), 1);
  const auto r = run_cli(task_args(killed) + " --resume");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  check_same_outputs(whole, killed);
  BOOST_CHECK(!fs::exists(killed + "/summary.csv"));
}

BOOST_AUTO_TEST_CASE(sigkill_at_any_moment_leaves_a_directory_that_resume_finishes) {
  const std::string dir = scratch_dir("resume-any"), whole = dir + "/whole";
  BOOST_REQUIRE_EQUAL(run_cli(eval_args(whole)).exit_code, 0);
  int with_area = 0;
  for (int ms : {30, 120, 250, 400, 600, 900}) {
    const std::string out = dir + "/k" + std::to_string(ms);
    // the shell kills its eval after `ms` milliseconds, wherever it is
    const auto k = run_cli_after("(sleep " + std::to_string(ms / 1000.0) + "; kill -9 $$ 2>/dev/null) & exec", eval_args(out) + " --threads 1");
    BOOST_TEST_CONTEXT("killed after " << ms << " ms (exit " << k.exit_code << ")") {
      if (k.exit_code == 0) continue;  // finished before the kill
      if (!fs::exists(out)) continue;  // killed before it claimed --out
      const auto f = files_of(out);
      BOOST_CHECK(f.empty() || f == std::vector<std::string>{".mla-h2o-resume"});
      if (f.empty()) continue;
      ++with_area;
      const auto r = run_cli(eval_args(out) + " --resume");
      BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      check_same_outputs(whole, out);
    }
  }
  BOOST_TEST_MESSAGE(with_area << " of 6 kills left a staging area that --resume finished");
}

BOOST_AUTO_TEST_CASE(a_resume_that_differs_is_refused_in_one_line_and_the_windows_stay) {
  const std::string out = scratch_dir("resume-refused") + "/o";
  BOOST_CHECK_EQUAL(run_cli_after("MLA_TEST_KILL_AFTER_WINDOWS=1", eval_args(out) + " --threads 1").exit_code, 128 + SIGKILL);
  BOOST_REQUIRE_EQUAL(records(out), 1);
  const auto one_line = [](const mla::test::RunResult& r) {
    return r.err.size() > 1 && r.err.find('\n') == r.err.size() - 1;
  };
  // other settings: the first differing one named
  auto r = run_cli(eval_args(out) + " --resume --precision fp32");
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK(one_line(r));
  BOOST_CHECK_MESSAGE(r.err.find("ran with --precision bf16, this run gives fp32") != std::string::npos, r.err);
  // a staging area without --resume: says --resume
  r = run_cli(eval_args(out));
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK(one_line(r));
  BOOST_CHECK(r.err.find("add --resume") != std::string::npos);
  // a corrupt record: named
  const std::string rec = area(out) + "/window-000000.rec";
  const std::string good = read_text(rec);
  std::string bad = good;
  bad[bad.size() / 2] ^= 1;
  mla::test::write_text(rec, bad);
  r = run_cli(eval_args(out) + " --resume");
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK(one_line(r));
  BOOST_CHECK_MESSAGE(r.err.find("window-000000.rec: the window record's checksum does not match") != std::string::npos, r.err);
  mla::test::write_text(rec, good.substr(0, 40));  // torn
  r = run_cli(eval_args(out) + " --resume");
  BOOST_CHECK(r.err.find("window-000000.rec") != std::string::npos);
  mla::test::write_text(rec, good);
  // another producer
  const std::string settings = read_text(area(out) + "/settings");
  std::string other = settings;
  other.replace(other.find("producer mla-h2o "), 17, "producer mla-h2o 0.0.1 ");
  mla::test::write_text(area(out) + "/settings", other);
  r = run_cli(eval_args(out) + " --resume");
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK(one_line(r));
  BOOST_CHECK_MESSAGE(r.err.find("was written by mla-h2o 0.0.1") != std::string::npos, r.err);
  mla::test::write_text(area(out) + "/settings", settings);
  BOOST_CHECK_EQUAL(records(out), 1);  // every refusal kept the finished window
  // and with the settings restored it finishes
  r = run_cli(eval_args(out) + " --resume");
  BOOST_CHECK_MESSAGE(r.exit_code == 0, r.err);
  // --resume where nothing is unfinished
  r = run_cli(eval_args(out) + " --resume");
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK(one_line(r));
  BOOST_CHECK(r.err.find("holds no staging area") != std::string::npos);
  BOOST_CHECK(fs::exists(out + "/summary.csv"));  // the finished set untouched by the refusal
}

// The resume settings hash every shard of the checkpoint, also one no window has opened when the
// run is killed: a shard changed between the crash and --resume is refused, named.
BOOST_AUTO_TEST_CASE(a_changed_shard_is_refused_even_one_not_read_yet) {
  const std::string dir = scratch_dir("resume-shards");
  const std::string ckpt = dir + "/ckpt", out = dir + "/o";
  auto r = run_cli("synth --preset tiny --out '" + ckpt + "' --seed 5 --layers 0,1 --shards 3 --experts 4");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::string ids;  // 200 ids below the vocabulary's 97 (a synth model has no tokenizer)
  for (int i = 0; i < 200; ++i) ids += (i ? "," : "") + std::to_string(i * 37 % 97);
  const std::string args = "eval --checkpoint '" + ckpt + "' --tokens " + ids +
                           " --windows 3 --prompt-len 32 --steps 8 --cache-budget 16 --policy h2o --quiet --out '" + out + "'";
  BOOST_CHECK_EQUAL(run_cli_after("MLA_TEST_KILL_AFTER_WINDOWS=1", args + " --threads 1").exit_code, 128 + SIGKILL);
  BOOST_REQUIRE_EQUAL(records(out), 1);
  // the shard holding layer 1 (the index names it): one bit of its last tensor's data flipped
  const std::string index = read_text(ckpt + "/model.safetensors.index.json");
  const std::string key = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight\": \"";
  const size_t at = index.find(key);
  BOOST_REQUIRE(at != std::string::npos);
  const size_t from = at + key.size();
  const std::string shard = index.substr(from, index.find('"', from) - from);
  std::string bytes = read_text(ckpt + "/" + shard);
  bytes[bytes.size() - 3] ^= 1;
  mla::test::write_text(ckpt + "/" + shard, bytes);
  r = run_cli(args + " --resume");
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK_MESSAGE(r.err.find(shard) != std::string::npos && r.err.find('\n') == r.err.size() - 1, r.err);
  BOOST_CHECK_EQUAL(records(out), 1);  // the finished window kept
  bytes[bytes.size() - 3] ^= 1;  // restored, the run finishes
  mla::test::write_text(ckpt + "/" + shard, bytes);
  r = run_cli(args + " --resume");
  BOOST_CHECK_MESSAGE(r.exit_code == 0, r.err);
}

// ---- MPI ------------------------------------------------------------------------------------

namespace {
// mpirun as this test runs it: root allowed (CI runs as root), more ranks than cores allowed.
std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 exec mpirun -n " +
         std::to_string(ranks);
}
bool have_mpirun() {
  if (!MLA_HAVE_MPI) {
    BOOST_TEST_MESSAGE("this build has no MPI (-Dmpi=disabled): the mpirun cases do not apply");
    return false;
  }
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    BOOST_ERROR("this build has MPI but mpirun is not installed (openmpi-bin; scripts/setup.sh installs it)");
    return false;
  }
  return true;
}
}  // namespace

BOOST_AUTO_TEST_CASE(mpirun_2_writes_every_output_byte_identical_to_one_process) {
  if (!have_mpirun()) return;
  const std::string dir = scratch_dir("mpi"), one = dir + "/one", two = dir + "/two", three = dir + "/three";
  BOOST_REQUIRE_EQUAL(run_cli(eval_args(one) + " --threads 1").exit_code, 0);
  const auto r = run_cli_after(mpirun(2), eval_args(two) + " --threads 1");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  check_same_outputs(one, two);
  BOOST_CHECK(read_text(two + "/report.json").find("\"ranks\": 2") != std::string::npos);
  BOOST_CHECK(read_text(one + "/report.json").find("\"ranks\": 1") != std::string::npos);
  // more ranks than windows: the idle ones named in one warning, the outputs the same
  const auto idle = run_cli_after(mpirun(5), eval_args(three) + " --threads 1");
  BOOST_REQUIRE_MESSAGE(idle.exit_code == 0, idle.err);
  BOOST_CHECK_MESSAGE(idle.err.find("warning: rank 4 of 5 has no window to compute") != std::string::npos, idle.err);
  check_same_outputs(one, three);
  // --task samples spread over the ranks
  const auto t1 = run_cli(task_args(dir + "/t1") + " --threads 1");
  const auto t2 = run_cli_after(mpirun(2), task_args(dir + "/t2") + " --threads 1");
  BOOST_REQUIRE_MESSAGE(t1.exit_code == 0 && t2.exit_code == 0, t1.err + t2.err);
  check_same_outputs(dir + "/t1", dir + "/t2");
}

BOOST_AUTO_TEST_CASE(a_rank_killed_under_mpirun_leaves_windows_that_resume_finishes) {
  if (!have_mpirun()) return;
  const std::string dir = scratch_dir("mpi-kill"), whole = dir + "/whole", out = dir + "/o";
  BOOST_REQUIRE_EQUAL(run_cli(eval_args(whole)).exit_code, 0);
  // rank 1 dies (SIGKILL) after sending its first window
  const auto k = run_cli_after(mpirun(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export "
                               "MLA_TEST_KILL_AFTER_WINDOWS=1; fi; exec \"$0\" \"$@\"'",
                               eval_args(out) + " --threads 1");
  BOOST_CHECK_NE(k.exit_code, 0);
  BOOST_CHECK(files_of(out) == std::vector<std::string>{".mla-h2o-resume"});
  BOOST_CHECK_GE(records(out), 1);
  const auto r = run_cli_after(mpirun(2), eval_args(out) + " --threads 1 --resume");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  check_same_outputs(whole, out);
}

BOOST_AUTO_TEST_CASE(a_failed_rank_and_disagreeing_ranks_are_one_line_naming_the_rank) {
  if (!have_mpirun()) return;
  const std::string dir = scratch_dir("mpi-fail");
  const auto line_of = [](const std::string& err) {
    size_t n = 0;
    for (size_t at = err.find("mla-h2o eval: error:"); at != std::string::npos; at = err.find("mla-h2o eval: error:", at + 1)) ++n;
    return n;
  };
  // rank 1 alone has too little memory: its error, named, once
  auto r = run_cli_after(mpirun(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export MLA_MEMORY_AVAILABLE=1M; "
                         "fi; exec \"$0\" \"$@\"'", eval_args(dir + "/a"));
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK_MESSAGE(r.err.find("mla-h2o eval: error: rank 1: not enough memory") != std::string::npos, r.err);
  BOOST_CHECK_EQUAL(line_of(r.err), 1u);
  BOOST_CHECK(!fs::exists(dir + "/a"));
  // rank 1 reads other settings: refused at start, nothing written
  r = run_cli_after(mpirun(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec \"$0\" \"$@\" "
                    "--policy-seed 9; fi; exec \"$0\" \"$@\"'", eval_args(dir + "/b"));
  BOOST_CHECK_NE(r.exit_code, 0);
  BOOST_CHECK_MESSAGE(r.err.find("rank 1 disagrees with rank 0 on the settings or the input") != std::string::npos, r.err);
  BOOST_CHECK(!fs::exists(dir + "/b"));
  // rank 1's flags do not parse: its error, named, once
  r = run_cli_after(mpirun(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec \"$0\" \"$@\" --seed 3; fi; "
                    "exec \"$0\" \"$@\"'", eval_args(dir + "/c"));
  BOOST_CHECK_MESSAGE(r.err.find("mla-h2o eval: error: rank 1: --seed is a flag of the retrieval tasks") != std::string::npos, r.err);
  BOOST_CHECK_EQUAL(line_of(r.err), 1u);
  BOOST_CHECK(!fs::exists(dir + "/c"));
}

// Without a launcher's MPI the run would repeat itself R times: every command but eval is refused
// under one (any build), and eval too in a build without MPI (the ASan phase of scripts/test
// builds with -Dmpi=disabled). The launcher is simulated by its environment.
BOOST_AUTO_TEST_CASE(a_command_that_cannot_spread_over_ranks_refuses_to_repeat_itself) {
  const std::string env = "OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_RANK=0";
  auto r = run_cli_after(env, "inspect " + model());
  BOOST_CHECK_EQUAL(r.exit_code, 2);
  BOOST_CHECK_MESSAGE(r.err.find("only eval spreads its work over ranks: inspect would run 3 times over") != std::string::npos, r.err);
  r = run_cli_after("OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_RANK=2", "inspect " + model());
  BOOST_CHECK_EQUAL(r.exit_code, 2);
  BOOST_CHECK(r.err.empty());  // one line for the run: rank 0's
  if (!MLA_HAVE_MPI) {
    const std::string out = scratch_dir("no-mpi") + "/o";
    r = run_cli_after(env, eval_args(out));
    BOOST_CHECK_NE(r.exit_code, 0);
    BOOST_CHECK_MESSAGE(r.err.find("built without MPI") != std::string::npos, r.err);
    BOOST_CHECK(!fs::exists(out));
  }
}

BOOST_AUTO_TEST_SUITE_END()
