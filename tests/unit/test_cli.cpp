// tests/unit/test_cli.cpp — suite cli: `mla-h2o run / select / compare / demo` end to end on
// a tiny synthetic checkpoint (`mla-h2o synth --preset tiny`: hidden 64, 4 heads, 2 layers in
// config.json, layer 0 written, vocab 97), and every bad input giving one clear error line.
//
// The checks are consistency relations between independent paths (the same hidden states
// given as --seq-len or as --input must give the same tensors; `select` on run's scores must
// give run's decision) and exact counts from the H2O rule; no expected number is taken from
// an earlier run of the code under test.
#include <simdjson.h>

#include <cstdlib>
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/checkpoint.hpp"
#include "mla/memory_plan.hpp"
#include "mla/safetensors.hpp"
#include "mla_build_config.h"
#include "src/cpu/vector_kernels.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::test::read_text;
using mla::test::run_cli;
using mla::test::RunResult;
using mla::test::scratch_dir;
using mla::test::write_text;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }
bool exists(const std::string& p) { return std::filesystem::exists(p); }

const std::string& tiny() { return mla::test::tiny_checkpoint(); }

// A failing command: non-zero exit, nothing but one line on stderr, of the form
// "mla-h2o <cmd>: error: ...", containing every word of `words`.
void expect_failure(const std::string& args, const std::string& cmd, const std::vector<std::string>& words,
                    int exit_code = -1) {
  const RunResult r = run_cli(args);
  BOOST_TEST_CONTEXT("mla-h2o " << args << "\nstderr: " << r.err) {
    BOOST_TEST(r.exit_code != 0);
    if (exit_code >= 0) BOOST_TEST(r.exit_code == exit_code);
    BOOST_TEST(r.err.rfind("mla-h2o " + cmd + ": error: ", 0) == 0u);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    for (const auto& w : words) BOOST_TEST(contains(r.err, w), "missing '" << w << "'");
  }
}

std::string run_args(const std::string& out, const std::string& extra) {
  return "run --checkpoint '" + tiny() + "' --out '" + out + "' " + extra;
}

std::vector<float> tensor_f32(const mla::SafetensorsFile& f, const std::string& name) { return f.to_float(f.at(name)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(cli)

BOOST_AUTO_TEST_CASE(help_for_every_subcommand) {
  for (const std::string cmd : {"run", "demo", "select", "compare"}) {
    const RunResult r = run_cli(cmd + " --help");
    BOOST_TEST(r.exit_code == 0, cmd);
    BOOST_TEST(contains(r.out, "usage: mla-h2o " + cmd), cmd);
    BOOST_TEST(r.err.empty(), cmd);
  }
  BOOST_TEST(contains(run_cli("run --help").out, "--latent-norm-eps"));
  BOOST_TEST(contains(run_cli("demo --help").out, "--cache-dir"));
  // --help names the engine and kernel --gemm auto runs here, per precision
  for (const std::string cmd : {"run", "demo"}) {
    const std::string help = run_cli(cmd + " --help").out;
    BOOST_TEST(contains(help, "--gemm auto|onednn|eigen"), cmd);
    BOOST_TEST(contains(help, "fp32: "), cmd);
    BOOST_TEST(contains(help, "bf16: "), cmd);
    BOOST_TEST((contains(help, "oneDNN ") || contains(help, "Eigen 3.")), cmd);
  }
}

// --gemm: the report names the engine, its kernel and why; an engine oneDNN cannot serve on this
// CPU falls back to Eigen and says why. ONEDNN_MAX_CPU_ISA=AVX2 plays a CPU without AVX-512
// (oneDNN 2.6 has no bf16 matmul there, and only its gemm:jit kernel for fp32, which the
// projections run on bf16 values too; auto takes it: docs/cpu-gemm.md §1).
BOOST_AUTO_TEST_CASE(gemm_engine_choice_is_reported) {
  const std::string dir = scratch_dir("cli-gemm");
  int runs = 0;
  auto gemm_of = [&](const std::string& max_isa, const std::string& flags) {
    const std::string out = dir + "/" + std::to_string(runs++);
    if (!max_isa.empty()) ::setenv("ONEDNN_MAX_CPU_ISA", max_isa.c_str(), 1);  // read by the child's oneDNN
    const RunResult r = run_cli(run_args(out, "--seq-len 9 --backend cpu " + flags));
    ::unsetenv("ONEDNN_MAX_CPU_ISA");
    BOOST_TEST_REQUIRE(r.exit_code == 0, flags << ": " << r.err);
    BOOST_TEST(contains(r.out, "gemm"), r.out);
    simdjson::dom::parser parser;
    const simdjson::dom::element doc = parser.load(out + "/report.json");
    return std::vector<std::string>{std::string(std::string_view(doc["backend"]["gemm"]["engine"])),
                                    std::string(std::string_view(doc["backend"]["gemm"]["kernel"])),
                                    std::string(std::string_view(doc["backend"]["gemm"]["reason"])),
                                    std::string(std::string_view(doc["backend"]["gemm"]["requested"])),
                                    std::string(std::string_view(doc["backend"]["gemm"]["attention_products"])),
                                    // oneDNN reorders outside the primitives: the heads' operands, per block
                                    std::to_string(int64_t(doc["backend"]["gemm"]["onednn_reorders"]["head_operands"])),
                                    std::to_string(int64_t(doc["backend"]["gemm"]["onednn_reorders"]["per_block"]))};
  };
  const auto eigen = gemm_of("", "--gemm eigen");
  BOOST_TEST(eigen[0].rfind("Eigen 3.", 0) == 0u, eigen[0]);
  BOOST_TEST(eigen[3] == "eigen");
  BOOST_TEST(eigen[4] == "eigen");
  BOOST_TEST(eigen[5] == "0");  // no oneDNN ran
  if (!MLA_HAVE_ONEDNN) {
    expect_failure(run_args(dir + "/x", "--gemm onednn"), "run", {"oneDNN"});
    return;
  }
  for (const std::string flags : {"--gemm onednn --precision bf16", "--precision bf16"}) {
    const auto avx2_bf16 = gemm_of("AVX2", flags);  // bf16 values on the fp32 kernel; products on Eigen
    BOOST_TEST(avx2_bf16[0].rfind("oneDNN ", 0) == 0u, flags << ": " << avx2_bf16[0]);
    BOOST_TEST(avx2_bf16[1] == "gemm:jit", flags << ": " << avx2_bf16[1]);
    BOOST_TEST(contains(avx2_bf16[2], "bf16 values on its fp32 kernel"), avx2_bf16[2]);
    BOOST_TEST(contains(avx2_bf16[2], "has no bf16 matmul for this CPU"), avx2_bf16[2]);
    BOOST_TEST(avx2_bf16[4] == "eigen", flags);
    BOOST_TEST(avx2_bf16[5] == "0", flags);  // no oneDNN products: nothing packed per head
  }
  const auto avx2_fp32 = gemm_of("AVX2", "--precision fp32");
  BOOST_TEST(avx2_fp32[3] == "auto");
  BOOST_TEST(avx2_fp32[0].rfind("oneDNN ", 0) == 0u, avx2_fp32[0]);  // gemm:jit on plain rows: auto takes it
  BOOST_TEST(contains(avx2_fp32[2], "outrun Eigen"), avx2_fp32[2]);
  const auto forced = gemm_of("AVX2", "--gemm onednn --precision fp32");
  BOOST_TEST(forced[0].rfind("oneDNN ", 0) == 0u, forced[0]);
  BOOST_TEST(forced[1] == "gemm:jit", forced[1]);
  BOOST_TEST(forced[4] == "onednn");
  BOOST_TEST(forced[5] != "0", "the heads' operands are packed on oneDNN: " << forced[5]);
  BOOST_TEST(forced[6] == "0");
  expect_failure(run_args(dir + "/y", "--gemm mkl"), "run", {"--gemm", "mkl"});
}

BOOST_AUTO_TEST_CASE(run_seeded_outputs) {
  // 24 tokens, 2 sinks, 4 recent, budget 5: kept = 2 + 4 + 5 = 11, evicted 13.
  const std::string out = scratch_dir("cli-run") + "/out";
  const RunResult r = run_cli(run_args(out, "--seq-len 24 --seed 3 --sinks 2 --recent 4 --budget 5"));
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "kept       11 of 24 tokens (45.8%)"), r.out);
  BOOST_TEST(contains(r.out, "evicted    13 (54.2%)"));
  BOOST_TEST(contains(r.out, "mask:"));
  BOOST_TEST(contains(r.out, "precision:"));
  BOOST_TEST(contains(r.out, "backend:"));
  BOOST_TEST(contains(r.out, "latent norm eps:"));
  BOOST_TEST(contains(r.out, "score mean:       4.000"));  // 4 heads x 24 queries / 24 tokens
  for (const char* f : {"scores.csv", "report.json", "scores.svg", "report.txt"}) BOOST_TEST(exists(out + "/" + f), f);
  BOOST_TEST(!exists(out + "/tensors.safetensors"));
  BOOST_TEST(read_text(out + "/report.txt") == r.out);

  const std::string csv = read_text(out + "/scores.csv");
  BOOST_TEST(csv.rfind("token_idx,attention_score,kept,category\n", 0) == 0u);
  BOOST_TEST(std::count(csv.begin(), csv.end(), '\n') == 25);
  BOOST_TEST(contains(csv, "\n0,"));
  BOOST_TEST(contains(csv, ",True,sink\n"));
  BOOST_TEST(contains(csv, "\n23,"));

  simdjson::dom::parser p;
  simdjson::dom::element doc;
  const simdjson::padded_string json(read_text(out + "/report.json"));
  BOOST_REQUIRE(p.parse(json).get(doc) == simdjson::SUCCESS);
  int64_t k = 0;
  double v = -1, sum = -1;
  BOOST_TEST((doc["h2o"]["kept"].get(k) == simdjson::SUCCESS && k == 11));
  BOOST_TEST((doc["h2o"]["n_heavy"].get(k) == simdjson::SUCCESS && k == 5));
  for (const char* key : {"load", "forward", "h2o", "total"})
    BOOST_TEST((doc["timing_s"][key].get(v) == simdjson::SUCCESS && v >= 0), key);
  BOOST_TEST((doc["config"]["hidden_size"].get(k) == simdjson::SUCCESS && k == 64));
  BOOST_TEST((doc["layer_parameters"].get(k) == simdjson::SUCCESS && k > 0));
  // every softmax row sums to 1: the scores add up to heads x queries = 96
  BOOST_TEST((doc["scores"]["sum"].get(sum) == simdjson::SUCCESS));
  BOOST_TEST(std::fabs(sum - 96.0) < mla::test::tolerance("token_scores", "run-sum-vs-exact", "fp32").atol);
  std::string_view sv;
  BOOST_TEST((doc["options"]["mask"].get(sv) == simdjson::SUCCESS && sv == "causal"));
  BOOST_TEST((doc["backend"]["name"].get(sv) == simdjson::SUCCESS && !sv.empty()));
  const std::string svg = read_text(out + "/scores.svg");
  BOOST_TEST(svg.rfind("<svg", 0) == 0u);
  BOOST_TEST(contains(svg, ">heavy (5)</text>"));
}

BOOST_AUTO_TEST_CASE(input_file_matches_seeded_and_compare) {
  // The seeded run's dump holds its hidden_states; feeding them back with --input must give
  // the same tensors (the same backend on the same values), so `compare` exits 0.
  const std::string dir = scratch_dir("cli-input");
  const RunResult a = run_cli(run_args(dir + "/a", "--seq-len 12 --dump-tensors --backend cpu"));
  BOOST_REQUIRE_MESSAGE(a.exit_code == 0, a.err);
  const std::string dump_a = dir + "/a/tensors.safetensors";
  const RunResult b = run_cli(run_args(dir + "/b", "--input '" + dump_a + "' --dump-tensors --backend cpu"));
  BOOST_REQUIRE_MESSAGE(b.exit_code == 0, b.err);
  BOOST_TEST(contains(b.out, "hidden states from"));
  const std::string dump_b = dir + "/b/tensors.safetensors";
  const RunResult same = run_cli("compare '" + dump_a + "' '" + dump_b + "' --rtol 0 --atol 0");
  BOOST_TEST(same.exit_code == 0, same.out << same.err);
  BOOST_TEST(contains(same.out, "all 9 common tensors within tolerance"), same.out);
  BOOST_TEST(read_text(dir + "/a/scores.csv") == read_text(dir + "/b/scores.csv"));

  // The dump's layout: HF shapes with the batch dimension dropped.
  const auto f = mla::SafetensorsFile::open(dump_a);
  BOOST_TEST(f.at("attn_output").shape == (std::vector<uint64_t>{12, 64}), boost::test_tools::per_element());
  BOOST_TEST(f.at("attn_weights").shape == (std::vector<uint64_t>{4, 12, 12}), boost::test_tools::per_element());
  BOOST_TEST(f.at("query_states").shape == (std::vector<uint64_t>{4, 12, 24}), boost::test_tools::per_element());
  BOOST_TEST(f.at("key_states").shape == (std::vector<uint64_t>{4, 12, 24}), boost::test_tools::per_element());
  BOOST_TEST(f.at("value_states").shape == (std::vector<uint64_t>{4, 12, 16}), boost::test_tools::per_element());
  BOOST_TEST(f.at("latent_cache").shape == (std::vector<uint64_t>{12, 40}), boost::test_tools::per_element());  // r_kv 32 + d_r 8
  BOOST_TEST(f.at("token_scores").shape == (std::vector<uint64_t>{12}), boost::test_tools::per_element());
  BOOST_TEST(f.at("hidden_states").shape == (std::vector<uint64_t>{12, 64}), boost::test_tools::per_element());
  BOOST_TEST(contains(f.metadata().at("precision"), "fp32"));

  // [1, S, H] BF16 input is accepted too (values exactly bf16, so the fp32 run sees the same numbers).
  std::vector<float> h = tensor_f32(f, "hidden_states");
  for (float& x : h) x = mla::round_to_bf16(x);
  const auto bytes = mla::encode_bf16(h);
  mla::write_safetensors(dir + "/h.safetensors", {{"x", mla::DType::BF16, {1, 12, 64}, bytes}});
  const RunResult c = run_cli(run_args(dir + "/c", "--input '" + dir + "/h.safetensors' --input-tensor x"));
  BOOST_TEST(c.exit_code == 0, c.err);
  BOOST_TEST(contains(c.out, "kept       12 of 12 tokens"));  // 12 tokens <= 4 sinks + 32 recent

  // compare against a perturbed copy: exit 1 and the tensor flagged
  std::vector<float> out = tensor_f32(f, "attn_output");
  out[5 * 64 + 7] += 1e-3f;
  const auto pb = mla::encode_f32(out);
  mla::write_safetensors(dir + "/perturbed.safetensors", {{"attn_output", mla::DType::F32, {12, 64}, pb}});
  const RunResult diff = run_cli("compare '" + dump_a + "' '" + dir + "/perturbed.safetensors'");
  BOOST_TEST(diff.exit_code == 1, diff.out << diff.err);
  BOOST_TEST(contains(diff.out, "OUTSIDE"));
  BOOST_TEST(contains(diff.out, "[5, 7]"));
  BOOST_TEST(contains(diff.out, "only in A: attn_weights"));
  // ... but within a loose tolerance
  BOOST_TEST(run_cli("compare '" + dump_a + "' '" + dir + "/perturbed.safetensors' --atol 2e-3").exit_code == 0);
  BOOST_TEST(run_cli("compare '" + dump_a + "' '" + dir + "/perturbed.safetensors' --tensors attn_output --atol 2e-3").exit_code == 0);
}

BOOST_AUTO_TEST_CASE(tokens_input) {
  const std::string dir = scratch_dir("cli-tokens");
  write_text(dir + "/ids.txt", "3 17\n50\n");
  const RunResult a = run_cli(run_args(dir + "/a", "--tokens 3,17,50 --dump-tensors"));
  BOOST_REQUIRE_MESSAGE(a.exit_code == 0, a.err);
  BOOST_TEST(contains(a.out, "3 token ids"));
  const RunResult b = run_cli(run_args(dir + "/b", "--tokens '" + dir + "/ids.txt'"));
  BOOST_REQUIRE_MESSAGE(b.exit_code == 0, b.err);
  BOOST_TEST(read_text(dir + "/a/scores.csv") == read_text(dir + "/b/scores.csv"));

  // hidden_states = input_layernorm(embed_tokens rows), fp32 mode, by the documented formula:
  //   var = fp32(mean x^2), r = fp32(1/sqrt(fp32(var + fp32(eps)))), y = fp32(w * fp32(x * r))
  const mla::Checkpoint ck = mla::Checkpoint::open(tiny());
  const mla::TensorF rows = ck.embed_rows({3, 17, 50});
  const mla::LayerWeights w = ck.load_layer(0, true);
  const auto f = mla::SafetensorsFile::open(dir + "/a/tensors.safetensors");
  const std::vector<float> got = tensor_f32(f, "hidden_states");
  const int64_t H = 64;
  BOOST_REQUIRE(got.size() == static_cast<size_t>(3 * H));
  const float eps = static_cast<float>(ck.config().rms_norm_eps);
  for (int64_t s = 0; s < 3; ++s) {
    double ss = 0;
    for (int64_t j = 0; j < H; ++j) ss += static_cast<double>(rows.data[s * H + j]) * rows.data[s * H + j];
    const float var = static_cast<float>(ss / H);
    const float r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var + eps)));
    for (int64_t j = 0; j < H; ++j) {
      const float want = w.input_layernorm.data[j] * (rows.data[s * H + j] * r);
      BOOST_TEST(got[s * H + j] == want, "token " << s << " column " << j);
    }
  }
}

BOOST_AUTO_TEST_CASE(select_reproduces_run) {
  const std::string dir = scratch_dir("cli-select");
  const std::string h2o = "--sinks 3 --recent 5 --budget 6";
  const RunResult r = run_cli(run_args(dir + "/run", "--seq-len 30 --per-head --dump-tensors " + h2o));
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "head   3: kept 14 (heavy 6)"));
  // from the CSV
  const RunResult s = run_cli("select --scores '" + dir + "/run/scores.csv' --out '" + dir + "/sel' " + h2o);
  BOOST_REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  BOOST_TEST(read_text(dir + "/sel/scores.csv") == read_text(dir + "/run/scores.csv"));
  BOOST_TEST(contains(s.out, "kept       14 of 30 tokens"));
  // from the dump's token_scores
  const RunResult t = run_cli("select --scores '" + dir + "/run/tensors.safetensors' --out '" + dir + "/selt' " + h2o);
  BOOST_REQUIRE_MESSAGE(t.exit_code == 0, t.err);
  BOOST_TEST(read_text(dir + "/selt/scores.csv") == read_text(dir + "/run/scores.csv"));
  // per head, from heads_kept.csv and from the dump's head_scores
  const RunResult u = run_cli("select --per-head --scores '" + dir + "/run/heads_kept.csv' --out '" + dir + "/selh' " + h2o);
  BOOST_REQUIRE_MESSAGE(u.exit_code == 0, u.err);
  BOOST_TEST(read_text(dir + "/selh/heads_kept.csv") == read_text(dir + "/run/heads_kept.csv"));
  const RunResult v = run_cli("select --per-head --scores '" + dir + "/run/tensors.safetensors' --out '" + dir + "/selv' " + h2o);
  BOOST_REQUIRE_MESSAGE(v.exit_code == 0, v.err);
  BOOST_TEST(read_text(dir + "/selv/heads_kept.csv") == read_text(dir + "/run/heads_kept.csv"));
}

// `mla-h2o demo` end to end: the published Kimi K2.6 layer-0 H2O demo's configuration (256 tokens, 4 sinks, 32 recent,
// 64 heavy) on the synthesized Kimi K2.6-shaped layer 0 must keep exactly 100 of 256, with the
// categories where the H2O rule puts them; a second run reuses the cached checkpoint.
BOOST_AUTO_TEST_CASE(demo_keeps_100_of_256) {
  const std::string dir = scratch_dir("cli-demo");
  const std::string args = "demo --backend cpu --cache-dir '" + dir + "/cache' --out '" + dir + "/out'";
  const RunResult first = run_cli(args);
  BOOST_TEST_REQUIRE(first.exit_code == 0, first.err);
  BOOST_TEST(contains(first.out, "100 of 256"));
  BOOST_TEST(contains(first.out, "synthesized into the cache"));
  const std::string csv = read_text(dir + "/out/scores.csv");
  std::vector<std::string> category;
  size_t pos = csv.find('\n') + 1;  // skip the header
  while (pos < csv.size()) {
    const size_t end = csv.find('\n', pos);
    const std::string line = csv.substr(pos, end - pos);
    category.push_back(line.substr(line.rfind(',') + 1));
    pos = end + 1;
  }
  BOOST_TEST_REQUIRE(category.size() == 256u);
  for (size_t i = 0; i < 256; ++i) {
    BOOST_TEST_CONTEXT("token " << i) {
      if (i < 4) BOOST_TEST(category[i] == "sink");
      else if (i >= 224) BOOST_TEST(category[i] == "recent");
      else BOOST_TEST((category[i] == "heavy" || category[i] == "evicted"));
    }
  }
  BOOST_TEST(std::count(category.begin(), category.end(), "heavy") == 64);
  BOOST_TEST(std::count(category.begin(), category.end(), "evicted") == 156);

  const RunResult second = run_cli(args);
  BOOST_TEST_REQUIRE(second.exit_code == 0, second.err);
  BOOST_TEST(contains(second.out, "reused from the cache"));
  BOOST_TEST(read_text(dir + "/out/scores.csv") == csv);  // deterministic
}

// The shipped trained model (models/tiny-mla, byte-level): `run --text` feeds BOS + the bytes
// exactly as `run --tokens` with those ids does (scores.csv byte-identical in its four demo
// columns), and adds token_text, quoted, with the escapes of byte_level_token_text.
std::string shipped_model() { return mla::test::data_dir() + "/../../models/tiny-mla"; }

BOOST_AUTO_TEST_CASE(run_text_is_its_byte_ids_with_token_text) {
  const std::string dir = scratch_dir("cli-text");
  write_text(dir + "/in.txt", std::string("a,\"b\n\xff\\ z"));
  const std::string common = "run --checkpoint '" + shipped_model() + "' --backend cpu --precision bf16 --sinks 1 --recent 2 --budget 2 ";
  const RunResult t = run_cli(common + "--text '" + dir + "/in.txt' --out '" + dir + "/text'");
  BOOST_TEST_REQUIRE(t.exit_code == 0, t.err);
  const RunResult i = run_cli(common + "--tokens 256,97,44,34,98,10,255,92,32,122 --out '" + dir + "/ids'");
  BOOST_TEST_REQUIRE(i.exit_code == 0, i.err);
  const std::string with_text = read_text(dir + "/text/scores.csv"), ids = read_text(dir + "/ids/scores.csv");
  // strip the fifth column: what remains must be the --tokens file byte for byte
  std::string stripped;
  std::vector<std::string> texts;
  size_t pos = 0;
  while (pos < with_text.size()) {
    const size_t end = with_text.find('\n', pos);
    BOOST_TEST_REQUIRE(end != std::string::npos);
    const std::string line = with_text.substr(pos, end - pos);
    size_t cut = 0;
    for (int commas = 0; commas < 4; ++commas) cut = line.find(',', cut) + 1;  // 4 commas before token_text
    stripped += line.substr(0, cut - 1) + "\n";
    texts.push_back(line.substr(cut));
    pos = end + 1;
  }
  BOOST_TEST(stripped == ids);
  const std::vector<std::string> expected = {"token_text", "\"<bos>\"", "\"a\"",  "\",\"", "\"\"\"\"", "\"b\"",
                                             "\"\\n\"",    "\"\\xff\"",  "\"\\\\\"", "\" \"", "\"z\""};
  BOOST_TEST(texts == expected, boost::test_tools::per_element());
  BOOST_TEST(contains(read_text(dir + "/text/report.json"), "--text"));
  // --text with a model that is not byte-level, and with a second source: one error line each
  expect_failure(run_args(dir + "/o", "--text '" + dir + "/in.txt'"), "run", {"not byte-level"});
  expect_failure(run_args(dir + "/o", "--text '" + dir + "/in.txt' --tokens 1"), "run", {"two input sources", "--text"}, 2);
  expect_failure(run_args(dir + "/o", "--text '" + dir + "/absent.txt'"), "run", {"--text", "absent.txt"});
}

// `demo --model DIR`: layer 0 of the trained model on the first 255 bytes of its held-out text
// (100 of 256 kept, token_text present), then eval over every policy and three budgets.
// (~14 s of CPU in release: not run under AddressSanitizer, where it would take about a minute;
// the eval suite and run_text_is_its_byte_ids_with_token_text cover its parts there.)
BOOST_AUTO_TEST_CASE(demo_model_runs_layer0_and_eval_on_the_shipped_model) {
#if defined(__SANITIZE_ADDRESS__)
  BOOST_TEST_MESSAGE("skipped under AddressSanitizer (release builds run it)");
  return;
#endif
  const std::string dir = scratch_dir("cli-demo-model");
  const RunResult r = run_cli("demo --model '" + shipped_model() + "' --quiet --out '" + dir + "/out'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "100 of 256"));
  BOOST_TEST(contains(r.out, "weights: trained"));
  // one output set (issue 29): layer 0's files and eval's, one manifest, nothing else
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/out")) names.insert(e.path().filename().string());
  for (const char* f : {".mla-h2o-set", "layer0-scores.csv", "layer0-report.json", "eval-summary.csv", "eval-report.json"})
    BOOST_TEST(names.count(f) == 1u, f);
  for (const std::string& n : names)
    BOOST_TEST((n == ".mla-h2o-set" || n.rfind("layer0-", 0) == 0 || n.rfind("eval-", 0) == 0), n);
  const std::string csv = read_text(dir + "/out/layer0-scores.csv");
  BOOST_TEST(csv.rfind("token_idx,attention_score,kept,category,token_text\n0,", 0) == 0u);
  BOOST_TEST(contains(csv, ",True,sink,\"<bos>\"\n"));
  BOOST_TEST(std::count(csv.begin(), csv.end(), '\n') == 257);
  const std::string summary = read_text(dir + "/out/eval-summary.csv");
  BOOST_TEST(std::count(summary.begin(), summary.end(), '\n') == 1 + 22 * 3);  // header + every preset x 3 budgets
  for (const char* policy : {"h2o,128", "tova,256", "snapkv,384", "streaming,128"})
    BOOST_TEST(contains(summary, std::string("\n") + policy + ","), policy);
  expect_failure("demo --model '" + dir + "/no-model' --out '" + dir + "/o'", "demo", {"no-model", "heldout.txt"});
  // a model whose held-out text is too short for the eval part: one line, nothing written
  const std::string short_model = dir + "/short-model";
  std::filesystem::create_directories(short_model + "/eval");
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    std::filesystem::copy_file(shipped_model() + "/" + f, short_model + "/" + f);
  write_text(short_model + "/eval/heldout.txt", std::string(600, 'a'));
  expect_failure("demo --model '" + short_model + "' --quiet --out '" + dir + "/short-out'", "demo", {"heldout.txt", "600 bytes"});
  BOOST_TEST(!std::filesystem::exists(dir + "/short-out"));
  expect_failure("demo --model tiny --decode --out '" + dir + "/o'", "demo", {"--model", "--decode"});
}

// `demo --model recall`: layer 0 of the shipped recall model, then its passkey table (eval --task
// passkey at 1 k and 2 k bytes, K 128 and 256, five policies beside the full cache), one sample
// per cell here (~25 s of CPU in release; skipped under AddressSanitizer like the test above). The
// full cache must find every 1 k needle, as the model card's passkey figure says.
BOOST_AUTO_TEST_CASE(demo_model_recall_runs_layer0_and_the_passkey_table) {
#if defined(__SANITIZE_ADDRESS__)
  BOOST_TEST_MESSAGE("skipped under AddressSanitizer (release builds run it)");
  return;
#endif
  const std::string dir = scratch_dir("cli-demo-recall");
  const RunResult r = run_cli("demo --model recall --samples 1 --quiet --out '" + dir + "/out'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "does a policy keep the needle?"));
  BOOST_TEST(contains(r.out, "tiny-mla-recall"));
  for (const char* f : {"layer0-scores.csv", "eval-tasks.csv", "eval-task_samples.csv", "eval-needle.svg", "eval-report.json"})
    BOOST_TEST(std::filesystem::exists(dir + "/out/" + f), f);
  const std::string tasks = read_text(dir + "/out/eval-tasks.csv");
  // header + (full + 5 policies) x 2 budgets x 2 contexts x 5 depths
  BOOST_TEST(std::count(tasks.begin(), tasks.end(), '\n') == 1 + 6 * 2 * 2 * 5);
  for (const char* budget : {"128", "256"})
    for (const char* depth : {"10", "30", "50", "70", "90"})
      BOOST_TEST(contains(tasks, std::string("passkey,agnostic,decode,full,") + budget + ",,1024," + depth + ",1,1,1,1\n"),
                 budget << " " << depth);
  for (const char* policy : {"h2o", "h2o-normalized", "tova", "streaming", "snapkv"})
    BOOST_TEST(contains(tasks, std::string(",decode,") + policy + ",256,,2048,90,"), policy);
  expect_failure("demo --model tiny --samples 2 --out '" + dir + "/o'", "demo", {"--samples", "recall"});
  BOOST_TEST(!std::filesystem::exists(dir + "/o"));
}

BOOST_AUTO_TEST_CASE(run_bad_inputs) {
  const std::string dir = scratch_dir("cli-bad");
  const std::string o = "--out '" + dir + "/o' ";
  expect_failure("run " + o + "--checkpoint '" + dir + "/nonexistent'", "run", {"nonexistent"});
  expect_failure("run " + o, "run", {"--checkpoint", "required"}, 2);
  expect_failure(run_args(dir + "/o", "--layer 5"), "run", {"--layer 5", "out of range"});
  expect_failure(run_args(dir + "/o", "--layer 1"), "run", {"--layer 1", "layers present: 0"});
  expect_failure(run_args(dir + "/o", "--bogus"), "run", {"unknown flag --bogus"}, 2);
  expect_failure(run_args(dir + "/o", "--mask sideways"), "run", {"--mask", "sideways", "causal|none"}, 2);
  expect_failure(run_args(dir + "/o", "--precision fp16"), "run", {"--precision", "fp16"}, 2);
  expect_failure(run_args(dir + "/o", "--latent-norm-eps tiny"), "run", {"--latent-norm-eps", "tiny"}, 2);
  expect_failure(run_args(dir + "/o", "--sinks -1"), "run", {"--sinks"}, 2);
  expect_failure(run_args(dir + "/o", "--tokens 1,2 --seq-len 4"), "run", {"two input sources", "--tokens", "--seq-len"}, 2);
  expect_failure(run_args(dir + "/o", "--input x.safetensors --tokens 1"), "run", {"two input sources"}, 2);
  expect_failure(run_args(dir + "/o", "--input-tensor x"), "run", {"--input-tensor", "--input"}, 2);
  expect_failure(run_args(dir + "/o", "--tokens 3,97"), "run", {"token id 97", "97 rows"});
  expect_failure(run_args(dir + "/o", "--tokens 3,-4"), "run", {"-4", "negative"});
  expect_failure(run_args(dir + "/o", "--tokens '" + dir + "/no-such-ids.txt'"), "run", {"no-such-ids.txt"});
  expect_failure(run_args(dir + "/o", "--input '" + dir + "/missing.safetensors'"), "run", {"missing.safetensors"});

  // wrong hidden size, NaN in the input, missing tensor name
  const std::vector<float> narrow(4 * 32, 0.5f);
  const auto nb = mla::encode_f32(narrow);
  mla::write_safetensors(dir + "/narrow.safetensors", {{"hidden_states", mla::DType::F32, {4, 32}, nb}});
  expect_failure(run_args(dir + "/o", "--input '" + dir + "/narrow.safetensors'"), "run", {"hidden size 32", "hidden_size is 64"});
  std::vector<float> with_nan(3 * 64, 0.25f);
  with_nan[64 + 5] = std::numeric_limits<float>::quiet_NaN();
  const auto wb = mla::encode_f32(with_nan);
  mla::write_safetensors(dir + "/nan.safetensors", {{"hidden_states", mla::DType::F32, {3, 64}, wb}});
  expect_failure(run_args(dir + "/o", "--input '" + dir + "/nan.safetensors'"), "run", {"non-finite", "token 1", "column 5"});
  expect_failure(run_args(dir + "/o", "--input '" + dir + "/nan.safetensors' --input-tensor h"), "run", {"no tensor 'h'", "hidden_states"});

  // unwritable output: a path below a regular file
  write_text(dir + "/plainfile", "x");
  expect_failure("run --checkpoint '" + tiny() + "' --out '" + dir + "/plainfile/sub'", "run", {"output directory", "plainfile"});
  expect_failure("run --checkpoint '" + tiny() + "' --out '" + dir + "/plainfile'", "run", {"not a directory"});
}

BOOST_AUTO_TEST_CASE(select_bad_inputs) {
  const std::string dir = scratch_dir("cli-select-bad");
  const std::string o = " --out '" + dir + "/o'";
  auto sel = [&](const std::string& name, const std::string& text) {
    write_text(dir + "/" + name, text);
    return "select --scores '" + dir + "/" + name + "'" + o;
  };
  expect_failure(sel("nocol.csv", "token_idx,score\n0,1\n"), "select", {"nocol.csv", "line 1", "attention_score"});
  expect_failure(sel("word.csv", "token_idx,attention_score\n0,1\n1,abc\n"), "select", {"word.csv line 3", "abc", "not a number"});
  expect_failure(sel("nan.csv", "token_idx,attention_score\n0,nan\n"), "select", {"nan.csv line 2", "NaN"});
  expect_failure(sel("neg.csv", "token_idx,attention_score\n0,1\n1,2\n2,-0.5\n"), "select", {"neg.csv line 4", "negative"});
  expect_failure(sel("inf.csv", "token_idx,attention_score\n0,inf\n"), "select", {"inf.csv line 2", "infinite"});
  expect_failure(sel("order.csv", "token_idx,attention_score\n0,1\n2,1\n"), "select", {"order.csv line 3", "token_idx 2"});
  expect_failure(sel("fields.csv", "token_idx,attention_score\n0\n"), "select", {"fields.csv line 2", "fields"});
  expect_failure(sel("empty.csv", "token_idx,attention_score\n"), "select", {"no data rows"});
  expect_failure("select --scores '" + dir + "/absent.csv'" + o, "select", {"absent.csv"});
  expect_failure("select" + o, "select", {"--scores", "required"}, 2);
  // a good file with another column name works with --column
  const RunResult ok = run_cli(sel("other.csv", "token_idx,mass\n0,1\n1,3\n2,2\n") + " --column mass --sinks 0 --recent 0 --budget 1");
  BOOST_TEST(ok.exit_code == 0, ok.err);
  BOOST_TEST(read_text(dir + "/o/scores.csv") ==
             "token_idx,attention_score,kept,category\n0,1,False,evicted\n1,3,True,heavy\n2,2,False,evicted\n");
}

BOOST_AUTO_TEST_CASE(compare_usage_errors) {
  const std::string dir = scratch_dir("cli-compare-bad");
  expect_failure("compare", "compare", {"two files"}, 2);
  expect_failure("compare '" + dir + "/a.safetensors' '" + dir + "/b.safetensors'", "compare", {"a.safetensors"}, 2);
  write_text(dir + "/garbage.safetensors", "not a safetensors file at all");
  expect_failure("compare '" + dir + "/garbage.safetensors' '" + dir + "/garbage.safetensors'", "compare", {"garbage.safetensors"}, 2);
  expect_failure("compare a b --rtol x", "compare", {"--rtol"}, 2);
  const auto p = mla::encode_f32(std::vector<float>{1, 2});
  mla::write_safetensors(dir + "/x.safetensors", {{"t", mla::DType::F32, {2}, p}});
  expect_failure("compare '" + dir + "/x.safetensors' '" + dir + "/x.safetensors' --tensors nope", "compare", {"nope"}, 2);
}

// Long runs (docs/long-context.md): the memory plan refuses a run that cannot fit with one
// line before anything large is allocated, drops only attn_weights from a dump when that is
// what cannot fit, and records the plan and the measured peak in report.json; progress goes
// to stderr (MLA_PROGRESS_AFTER=0: at once) unless --quiet. MLA_MEMORY_AVAILABLE fakes a
// small machine, so nothing here needs much memory.
BOOST_AUTO_TEST_CASE(memory_plan_and_progress) {
  const std::string dir = scratch_dir("cli-memory");
  // The process's own part of a plan is what that process has resident (memory_plan.cpp
  // process_allowance_bytes: ~12 MiB without CUDA, ~160 MiB with it): the CLI's, read from a small
  // run's report, replaces this program's.
  const RunResult probe = run_cli(run_args(dir + "/probe", "--seq-len 8 --backend cpu --threads 2 --quiet"));
  BOOST_TEST_REQUIRE(probe.exit_code == 0, probe.err);
  simdjson::dom::parser probe_parser;
  const int64_t cli_process = int64_t(
      probe_parser.parse(simdjson::padded_string(read_text(dir + "/probe/report.json")))["memory"]["planned_process_bytes"]);
  BOOST_TEST_REQUIRE(cli_process > 0);
  // S = 65536 fp32 on tiny needs ~139 MiB besides the process (2 threads, measured 2026-12-05); 64 MiB more fit 1024
  const int64_t available = cli_process + (int64_t{64} << 20);
  ::setenv("MLA_MEMORY_AVAILABLE", std::to_string(available).c_str(), 1);
  expect_failure(run_args(dir + "/refused", "--seq-len 65536 --backend cpu --precision fp32 --quiet"), "run",
                 {"not enough memory for S = 65536 tokens, --backend cpu --precision fp32", "needs ~", "at its peak (estimated, ",
                  "but " + mla::format_bytes(available) + " is available (MLA_MEMORY_AVAILABLE)", "would fit: ", "--seq-len "},
                 1);
  BOOST_TEST(!exists(dir + "/refused/report.json"));
  ::setenv("MLA_MEMORY_AVAILABLE", "lots", 1);
  expect_failure(run_args(dir + "/bad", "--seq-len 8"), "run", {"MLA_MEMORY_AVAILABLE='lots'", "byte count"}, 2);
  ::unsetenv("MLA_MEMORY_AVAILABLE");

  // enough for the run and its dump, but not for attn_weights [n, S, S]
  const mla::AttentionConfig cfg = mla::Checkpoint::open(tiny()).config();
  mla::MemoryRequest req;
  req.backend = mla::BackendKind::Cpu;
  req.seq_len = 512;
  req.dump_tensors = req.attn_weights = true;
  req.threads = 2;
  req.weights_kept = req.bf16_weights = true;  // run keeps the layer; tiny()'s weights are BF16
  const mla::MemoryEstimate estimate_with = mla::estimate_memory(cfg, req);
  const int64_t with = estimate_with.host_peak_bytes - estimate_with.process_bytes + cli_process;
  req.attn_weights = false;
  const mla::MemoryEstimate estimate_without = mla::estimate_memory(cfg, req);
  const int64_t without = estimate_without.host_peak_bytes - estimate_without.process_bytes + cli_process;
  ::setenv("MLA_MEMORY_AVAILABLE", std::to_string((with + without) / 2).c_str(), 1);
  const RunResult r = run_cli(run_args(dir + "/dump", "--seq-len 512 --backend cpu --threads 2 --dump-tensors --quiet"));
  ::unsetenv("MLA_MEMORY_AVAILABLE");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.err, "mla-h2o run: note: attn_weights [4, 512, 512] not dumped"), r.err);
  const auto dump = mla::SafetensorsFile::open(dir + "/dump/tensors.safetensors");
  BOOST_TEST(dump.find("attn_weights") == nullptr);
  for (const char* t : {"attn_output", "query_states", "token_scores", "head_scores"}) BOOST_TEST(dump.find(t) != nullptr, t);
  simdjson::dom::parser parser;
  const simdjson::dom::element report = parser.parse(simdjson::padded_string(read_text(dir + "/dump/report.json")));
  // the plan without attn_weights, with this run's own process part
  const int64_t process = int64_t(report["memory"]["planned_process_bytes"]);
  BOOST_TEST(process > 0);
  BOOST_TEST(int64_t(report["memory"]["planned_peak_bytes"]) - process == without - cli_process);
  BOOST_TEST(std::string_view(report["memory"]["available_source"]) == "MLA_MEMORY_AVAILABLE");
  BOOST_TEST(int64_t(report["memory"]["measured_peak_rss_bytes"]) > 0);
  BOOST_TEST(contains(read_text(dir + "/dump/report.txt"), "memory: peak "));

  // progress: the tiled attention's blocks, the reference's estimate and stages; --quiet
  ::setenv("MLA_PROGRESS_AFTER", "0", 1);
  const RunResult cpu = run_cli(run_args(dir + "/p1", "--seq-len 200 --backend cpu"));
  const RunResult ref = run_cli(run_args(dir + "/p2", "--seq-len 20 --backend reference"));
  const RunResult quiet = run_cli(run_args(dir + "/p3", "--seq-len 200 --backend cpu --quiet"));
  ::unsetenv("MLA_PROGRESS_AFTER");
  BOOST_TEST(cpu.exit_code == 0, cpu.err);
  BOOST_TEST(contains(cpu.err, "run: attention FLOP "), cpu.err);  // the two products' FLOP
  BOOST_TEST(contains(cpu.err, " (100.0%), "), cpu.err);
  BOOST_TEST((!cpu.err.empty() && cpu.err.back() == '\n'));
  BOOST_TEST(ref.exit_code == 0, ref.err);
  BOOST_TEST(contains(ref.err, "mla-h2o run: reference backend: "), ref.err);
  BOOST_TEST(contains(ref.err, "estimated"), ref.err);
  BOOST_TEST(contains(ref.err, "run: reference MFLOP "), ref.err);
  BOOST_TEST(quiet.exit_code == 0, quiet.err);
  BOOST_TEST(quiet.err.empty(), quiet.err);
}

// The softmax rows' instruction set (src/cpu/vector_kernels.hpp) is chosen at run time and named
// in the report; MLA_VECTOR_ISA caps it. Every set gives the same bits, so the scores written
// with each set this CPU has are byte-identical; a bad value is one error line.
BOOST_AUTO_TEST_CASE(vector_isa_cap_changes_no_result) {
  const std::string dir = scratch_dir("cli-vector-isa");
  std::string reference;
  for (const char* isa : {"avx512", "avx2", "baseline"}) {
    const auto* k = mla::cpu::vector_kernels_for(std::string(isa) == "avx512"  ? mla::cpu::VectorIsa::Avx512
                                                 : std::string(isa) == "avx2" ? mla::cpu::VectorIsa::Avx2
                                                                              : mla::cpu::VectorIsa::Baseline);
    if (k == nullptr) continue;  // this CPU lacks the set
    ::setenv("MLA_VECTOR_ISA", isa, 1);
    const std::string out = dir + "/" + isa;
    const RunResult r = run_cli(run_args(out, "--seq-len 150 --backend cpu --precision bf16 --per-head --quiet"));
    ::unsetenv("MLA_VECTOR_ISA");
    BOOST_TEST_REQUIRE(r.exit_code == 0, isa << ": " << r.err);
    BOOST_TEST(contains(read_text(out + "/report.txt"), std::string("softmax rows: ") + isa + " vector kernels"), isa);
    const std::string scores = read_text(out + "/scores.csv") + read_text(out + "/heads_kept.csv");
    if (reference.empty()) reference = scores;
    BOOST_TEST((scores == reference), isa << ": scores differ from the first set's");
  }
  ::setenv("MLA_VECTOR_ISA", "sse9", 1);
  expect_failure(run_args(dir + "/bad", "--seq-len 8 --backend cpu"), "run", {"MLA_VECTOR_ISA='sse9'", "baseline, avx2 or avx512"}, 2);
  ::unsetenv("MLA_VECTOR_ISA");
}

// --dry-run (run, decode, sweep, eval, eval --task, synth): the plan is printed, the exit is 0, nothing is written
// (--out is never created), and a plan that cannot fit is still refused with one line.
BOOST_AUTO_TEST_CASE(dry_run_prints_the_plan_and_writes_nothing) {
  const std::string dir = scratch_dir("cli-dry-run"), out = dir + "/never";
  const std::string model = "'" + shipped_model() + "'", o = " --out '" + out + "' --dry-run";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"run --checkpoint " + model + " --seq-len 64" + o, {"run: dry run:", "memory: peak ~", "GFLOP a layer", "not written"}},
      {"decode --checkpoint " + model + " --seq-len 128 --prompt-len 100 --cache-budget 80 --policy h2o" + o,
       {"decode: dry run:", "memory: peak ~", "not written"}},
      {"sweep --checkpoint " + model + " --seq-len 64 --layers 0-2" + o, {"sweep: dry run:", "3 layers", "not written"}},
      {"eval --checkpoint " + model + " --text '" + shipped_model() + "/eval/heldout.txt' --prompt-len 64 --steps 16 "
       "--cache-budget 32 --policy h2o" + o, {"eval: plan:", "eval: dry run: memory peak ~", "not written"}},
      {"eval --checkpoint '" + shipped_model() + "-recall' --text '" + shipped_model() + "-recall/eval/heldout.txt' "
       "--task passkey --context 1024 --samples 1 --cache-budget 128 --policy h2o" + o,
       {"eval: plan:", "eval: dry run: memory peak ~", "not written"}},
      {"synth --preset kimi-k2.6 --layers 0,1 --shards 3" + o, {"synth: dry run:", "memory peak ~", "not written"}},
  };
  for (const auto& [args, expected] : cases) {
    const RunResult r = run_cli(args);
    BOOST_TEST(r.exit_code == 0, args << "\n" << r.err);
    for (const std::string& e : expected) BOOST_TEST(r.out.find(e) != std::string::npos, args << ": " << e << " in\n" << r.out);
    BOOST_TEST(!std::filesystem::exists(out), args);
  }
  const RunResult small = mla::test::run_cli_after("MLA_MEMORY_AVAILABLE=1M", cases.back().first);
  BOOST_TEST(small.exit_code != 0);
  BOOST_TEST(small.err.find("not enough memory") != std::string::npos, small.err);
  const RunResult demo = run_cli("demo --dry-run");
  BOOST_TEST(demo.exit_code != 0);
  BOOST_TEST(demo.err.find("--dry-run is for run, decode, sweep, eval and synth") != std::string::npos, demo.err);
  BOOST_TEST(!std::filesystem::exists(out));
}

BOOST_AUTO_TEST_SUITE_END()
