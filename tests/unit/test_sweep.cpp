// tests/unit/test_sweep.cpp — suite sweep: every layer, with the model's real inputs.
//
//   * whole_model_*: the whole-model fixture tests/data/golden/whole-model/ — a tiny random
//     transformers DeepseekV3ForCausalLM (3 layers: one dense, two MoE; yarn RoPE) written by
//     save_pretrained, and what transformers computed on 20 fixed token ids in fp32 and bf16
//     (reference/python/make_whole_model_fixture.py, dump_hidden_states.py). Our config parser
//     and loader read the checkpoint as transformers wrote it; `run --tokens` on layer 0 and
//     `run --input --residual` on every layer reproduce the model's per-layer attention
//     weights, normalized inputs and H2O scores (tolerances.hpp rows *-vs-hf), and `sweep`
//     over the model equals the per-layer runs.
//   * sweep_*: `mla-h2o sweep` on a synthesized Kimi-layout checkpoint (the tiny preset with 4
//     layers): its files against per-layer `run`s and against recomputation from scores.csv,
//     the --tokens caveat, progress, and one clear error line for each bad input.
// Expected values come from transformers (the fixture) or from independent paths (run vs
// sweep, overlap recomputed from the kept columns), never from an earlier run of this code.
//
// Shape legend: S = tokens, H = hidden_size, n = heads.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "mla/checkpoint.hpp"
#include "mla/synth.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"
#include "mla/safetensors.hpp"
#include "mla/sweep.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::test::read_text;
using mla::test::run_cli;
using mla::test::RunResult;
using mla::test::scratch_dir;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string fixture_dir() { return mla::test::data_dir() + "/golden/whole-model"; }
std::string fixture_model() { return fixture_dir() + "/model"; }
std::string fixture_states(const std::string& precision) { return fixture_dir() + "/" + precision + ".safetensors"; }
constexpr int64_t kFixtureLayers = 3;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// A successful CLI run (exit 0), with its stderr shown on failure.
RunResult ok(const std::string& args) {
  RunResult r = run_cli(args);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, "mla-h2o " << args << " failed (" << r.exit_code << "): " << r.err);
  return r;
}

// A failing command: non-zero exit, exactly one line on stderr "mla-h2o <cmd>: error: ...",
// containing every word of `words`.
void expect_failure(const std::string& args, const std::string& cmd, const std::vector<std::string>& words) {
  const RunResult r = run_cli(args);
  BOOST_TEST_CONTEXT("mla-h2o " << args << "\nstderr: " << r.err) {
    BOOST_TEST(r.exit_code != 0);
    BOOST_TEST(r.err.rfind("mla-h2o " + cmd + ": error: ", 0) == 0u);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    for (const auto& w : words) BOOST_TEST(contains(r.err, w), "missing '" << w << "'");
  }
}

std::vector<double> values(const mla::SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape = nullptr) {
  const mla::TensorInfo& info = f.at(name);
  if (shape) shape->assign(info.shape.begin(), info.shape.end());
  return f.to_double(info);
}

// ours (a --dump-tensors file) against transformers' tensor `hf_name` of the fixture, with the
// tolerance row (what, pair, precision); logs the measured agreement.
void check_against_hf(const std::string& what, const mla::SafetensorsFile& hf, const std::string& hf_name,
                      const mla::SafetensorsFile& ours, const std::string& our_name, const std::string& pair,
                      const std::string& precision) {
  std::vector<int64_t> shape;
  const std::vector<double> ref = values(hf, hf_name, &shape);
  const std::vector<double> got = values(ours, our_name);
  const mla::test::CompareResult c =
      mla::test::compare(our_name, shape, ref, got, mla::test::tolerance(our_name, pair, precision));
  double max_ref = 0;
  int64_t differ = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(ref[i]));
    differ += ref[i] != got[i];
  }
  BOOST_TEST_MESSAGE("whole-model " << what << " " << our_name << " vs " << hf_name << ": max|a-b|/max|a| = "
                                    << (max_ref > 0 ? c.max_abs / max_ref : c.max_abs)
                                    << ", ||a-b||/||a|| = " << c.norm_error << ", values not bit-identical = " << differ
                                    << " of " << ref.size());
  BOOST_TEST(c.ok, what << " " << our_name << " vs HF " << hf_name << " (" << pair << ", " << precision
                        << "): " << c.message);
  // docs/sweep.md §5: in bf16 every layer's tensors equal transformers' bit for bit, both backends
  if (precision == "bf16" && !mla::test::cpu_has_amx())
    BOOST_TEST(differ == 0, what << " " << our_name << ": " << differ << " values differ from HF's bf16 run");
}

// scores.csv of run (token_idx,attention_score,kept,category) without its header.
std::vector<std::string> run_score_rows(const std::string& dir) {
  std::vector<std::string> rows = lines_of(read_text(dir + "/scores.csv"));
  BOOST_REQUIRE(!rows.empty());
  BOOST_TEST(rows.front() == "token_idx,attention_score,kept,category");
  rows.erase(rows.begin());
  return rows;
}

// sweep's scores.csv split by layer, each row without the layer column.
std::map<int64_t, std::vector<std::string>> sweep_score_rows(const std::string& dir) {
  std::vector<std::string> rows = lines_of(read_text(dir + "/scores.csv"));
  BOOST_REQUIRE(!rows.empty());
  BOOST_TEST(rows.front() == "layer,token_idx,attention_score,kept,category");
  std::map<int64_t, std::vector<std::string>> out;
  for (size_t i = 1; i < rows.size(); ++i) {
    const size_t comma = rows[i].find(',');
    out[std::stoll(rows[i].substr(0, comma))].push_back(rows[i].substr(comma + 1));
  }
  return out;
}

// The tiny preset (Kimi K2.5/K2.6 layout: nested config, language_model.model. prefix, index +
// shards) with 4 layers written, synthesized once per process.
const std::string& tiny4() {
  static const std::string dir = [] {
    const std::string probe = scratch_dir("sweep-probe");
    mla::SynthOptions o;
    o.preset = "tiny";
    o.out_dir = probe;
    mla::ModelConfig model;  // the tiny attention alone, with 4 layers
    model.attention = mla::synthesize_checkpoint(o).attention;
    std::filesystem::remove_all(probe);
    model.attention.num_hidden_layers = 4;
    o.out_dir = scratch_dir("sweep-tiny4") + "/ckpt";
    o.layers = {0, 1, 2, 3};
    o.seed = 5;
    o.vocab = 64;
    o.shards = 3;
    mla::synthesize_checkpoint(o, model);
    return o.out_dir;
  }();
  return dir;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sweep)

// ---- the whole-model fixture ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(whole_model_checkpoint_reads_as_transformers_wrote_it) {
  // config.json as transformers 5 writes it (rope_parameters, MoE keys, architectures ...).
  const mla::AttentionConfig cfg = mla::load_config(fixture_model() + "/config.json");
  BOOST_TEST(cfg.model_type == "deepseek_v3");
  BOOST_TEST(!cfg.nested_text_config);
  BOOST_TEST(cfg.hidden_size == 64);
  BOOST_TEST(cfg.num_attention_heads == 4);
  BOOST_TEST(cfg.q_lora_rank == 40);
  BOOST_TEST(cfg.kv_lora_rank == 24);
  BOOST_TEST(cfg.qk_nope_head_dim == 12);
  BOOST_TEST(cfg.qk_rope_head_dim == 8);
  BOOST_TEST(cfg.v_head_dim == 12);
  BOOST_TEST(cfg.num_hidden_layers == kFixtureLayers);
  BOOST_TEST(cfg.vocab_size == 128);
  BOOST_TEST(cfg.rms_norm_eps == 1e-5);
  BOOST_TEST(cfg.rope.is_yarn());
  BOOST_TEST(cfg.rope.rope_theta == 10000.0);
  BOOST_TEST(cfg.rope.factor == 8.0);
  BOOST_TEST(cfg.rope.original_max_position_embeddings == 32.0);
  BOOST_TEST(cfg.rope.mscale_all_dim == 1.0);
  BOOST_TEST(cfg.rope_interleave);
  // The fixture's own record of the config text HF read is the same file.
  const mla::SafetensorsFile hf = mla::SafetensorsFile::open(fixture_states("fp32"));
  BOOST_TEST(hf.metadata().at("config_json") == read_text(fixture_model() + "/config.json"));

  // The loader finds every layer's attention tensors among the MoE layers' extra tensors.
  const mla::Checkpoint ckpt = mla::Checkpoint::open(fixture_model());
  BOOST_TEST(ckpt.prefix() == "model.");
  BOOST_TEST(ckpt.layers_present() == (std::vector<int64_t>{0, 1, 2}), boost::test_tools::per_element());
  for (int64_t L = 0; L < kFixtureLayers; ++L) {
    const mla::LayerWeights w = ckpt.load_layer(L, true);
    BOOST_TEST(w.q_a_proj.shape == (std::vector<int64_t>{40, 64}), boost::test_tools::per_element());
    BOOST_TEST(w.kv_b_proj.shape == (std::vector<int64_t>{4 * 24, 24}), boost::test_tools::per_element());
    BOOST_TEST(w.input_layernorm.numel() == 64);
    BOOST_TEST(w.source_dtype.at("o_proj") == "BF16");
  }
  const mla::TensorF emb = ckpt.embed_rows({0, 127});
  BOOST_TEST(emb.dim(0) == 2);
  // after release_mappings (sweep, between layers) the shard is reopened and reads the same
  const mla::LayerWeights before = ckpt.load_layer(2);
  ckpt.release_mappings();
  BOOST_TEST(ckpt.load_layer(2).kv_b_proj.data == before.kv_b_proj.data, boost::test_tools::per_element());
  BOOST_TEST(ckpt.embed_rows({0, 127}).data == emb.data, boost::test_tools::per_element());
}

// --tokens on layer 0 is the model's own layer-0 input: embed_tokens -> input_layernorm.
BOOST_AUTO_TEST_CASE(whole_model_tokens_layer0_reproduce_transformers) {
  for (const std::string precision : {"fp32", "bf16"}) {
    const mla::SafetensorsFile hf = mla::SafetensorsFile::open(fixture_states(precision));
    for (const std::string backend : {"reference", "cpu"}) {
      const std::string out = scratch_dir("sweep-wm-tokens");
      ok("run --checkpoint " + q(fixture_model()) + " --layer 0 --tokens " + q(fixture_dir() + "/tokens.txt") +
         " --precision " + precision + " --backend " + backend + " --dump-tensors --out " + q(out));
      const mla::SafetensorsFile ours = mla::SafetensorsFile::open(out + "/tensors.safetensors");
      const std::string pair = backend + "-vs-hf", what = "tokens layer 0 " + precision + " " + backend;
      check_against_hf(what, hf, "normed_hidden_states.0", ours, "hidden_states", pair, precision);
      check_against_hf(what, hf, "attn_weights.0", ours, "attn_weights", pair, precision);
      check_against_hf(what, hf, "token_scores.0", ours, "token_scores", pair, precision);
    }
  }
}

// --residual: output_hidden_states[L] through layer L's input_layernorm, on every layer.
BOOST_AUTO_TEST_CASE(whole_model_residual_inputs_reproduce_every_layer) {
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::string states = fixture_states(precision);
    const mla::SafetensorsFile hf = mla::SafetensorsFile::open(states);
    for (const std::string backend : {"reference", "cpu"})
      for (int64_t L = 0; L < kFixtureLayers; ++L) {
        const std::string l = std::to_string(L), out = scratch_dir("sweep-wm-residual");
        const RunResult r = ok("run --checkpoint " + q(fixture_model()) + " --layer " + l + " --input " + q(states) +
                               " --residual --precision " + precision + " --backend " + backend +
                               " --dump-tensors --out " + q(out));
        BOOST_TEST(contains(r.out, "tensor 'hidden_states." + l + "'"));  // the layer's own tensor was picked
        BOOST_TEST(contains(r.out, "input_layernorm"));
        const mla::SafetensorsFile ours = mla::SafetensorsFile::open(out + "/tensors.safetensors");
        const std::string pair = backend + "-vs-hf", what = "residual layer " + l + " " + precision + " " + backend;
        check_against_hf(what, hf, "normed_hidden_states." + l, ours, "hidden_states", pair, precision);
        check_against_hf(what, hf, "attn_weights." + l, ours, "attn_weights", pair, precision);
        check_against_hf(what, hf, "token_scores." + l, ours, "token_scores", pair, precision);
      }
  }
}

BOOST_AUTO_TEST_CASE(whole_model_sweep_notes_a_precision_mismatch) {
  const RunResult r = ok("sweep --checkpoint " + q(fixture_model()) + " --layers 1 --input " + q(fixture_states("bf16")) +
                         " --residual --precision fp32 --out " + q(scratch_dir("sweep-wm-prec")));
  BOOST_TEST(contains(r.out, "was written by a bf16 run of the model; this sweep runs fp32"));
}

// Without --residual the same file's normalized rows feed the attention as they are; with
// --residual and the raw rows the decision is the same.
BOOST_AUTO_TEST_CASE(whole_model_normed_inputs_give_the_same_decision) {
  const std::string states = fixture_states("bf16");
  for (int64_t L = 0; L < kFixtureLayers; ++L) {
    const std::string l = std::to_string(L), a = scratch_dir("sweep-wm-a"), b = scratch_dir("sweep-wm-b");
    const std::string common = "run --checkpoint " + q(fixture_model()) + " --layer " + l + " --input " + q(states) +
                               " --precision bf16 --backend reference --sinks 2 --recent 4 --budget 5 ";
    ok(common + "--residual --out " + q(a));
    ok(common + "--input-tensor normed_hidden_states --out " + q(b));
    BOOST_TEST(read_text(a + "/scores.csv") == read_text(b + "/scores.csv"), "layer " << L);
  }
}

BOOST_AUTO_TEST_CASE(whole_model_sweep_equals_per_layer_runs) {
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::string states = fixture_states(precision), out = scratch_dir("sweep-wm");
    const std::string flags = " --precision " + precision + " --backend cpu --sinks 2 --recent 4 --budget 5";
    const RunResult r = ok("sweep --checkpoint " + q(fixture_model()) + " --layers all --input " + q(states) +
                           " --residual" + flags + " --out " + q(out));
    BOOST_TEST(!contains(r.out, "NOT the model's inputs"));
    BOOST_TEST(!contains(r.out, "was written by a"));  // the dump's precision is the sweep's
    const auto sweep_rows = sweep_score_rows(out);
    BOOST_TEST(sweep_rows.size() == static_cast<size_t>(kFixtureLayers));
    for (int64_t L = 0; L < kFixtureLayers; ++L) {
      const std::string run_out = scratch_dir("sweep-wm-run");
      ok("run --checkpoint " + q(fixture_model()) + " --layer " + std::to_string(L) + " --input " + q(states) +
         " --residual" + flags + " --out " + q(run_out));
      BOOST_TEST(sweep_rows.at(L) == run_score_rows(run_out), boost::test_tools::per_element());
    }
  }
}

// ---- sweep on a synthesized Kimi-layout checkpoint -------------------------------------------

BOOST_AUTO_TEST_CASE(sweep_outputs_match_per_layer_runs) {
  const std::string out = scratch_dir("sweep-tiny");
  // reference backend: exact sums, so the scores' total is checked tightly below
  const std::string flags = " --seq-len 24 --seed 3 --sinks 2 --recent 4 --budget 6 --backend reference";
  const RunResult r = ok("sweep --checkpoint " + q(tiny4()) + " --layers all" + flags + " --out " + q(out));
  const int64_t L = 4, S = 24;

  // progress: one stderr line per layer
  for (int64_t l = 0; l < L; ++l)
    BOOST_TEST(contains(r.err, "mla-h2o sweep: layer " + std::to_string(l) + " (" + std::to_string(l + 1) + "/4)"));
  BOOST_TEST(contains(r.out, "same seeded standard-normal hidden states"));

  // scores.csv: every layer's rows are run's rows for that layer, byte for byte
  const auto rows = sweep_score_rows(out);
  BOOST_REQUIRE(rows.size() == static_cast<size_t>(L));
  std::map<int64_t, std::set<int64_t>> kept, heavy;
  for (int64_t l = 0; l < L; ++l) {
    const std::string run_out = scratch_dir("sweep-tiny-run");
    ok("run --checkpoint " + q(tiny4()) + " --layer " + std::to_string(l) + flags + " --out " + q(run_out));
    BOOST_TEST(rows.at(l) == run_score_rows(run_out), boost::test_tools::per_element());
    for (const std::string& row : rows.at(l)) {
      const std::vector<std::string> c = split(row, ',');
      if (c[2] == "True") kept[l].insert(std::stoll(c[0]));
      if (c[3] == "heavy") heavy[l].insert(std::stoll(c[0]));
    }
    BOOST_TEST(kept[l].size() == 12u);  // 2 sinks + 4 recent + 6 heavy
  }

  // layers.csv: one row per layer, counts and statistics of that layer's scores
  const std::vector<std::string> layer_rows = lines_of(read_text(out + "/layers.csv"));
  BOOST_REQUIRE(layer_rows.size() == static_cast<size_t>(L + 1));
  BOOST_TEST(layer_rows[0] ==
             "layer,seq_len,score_min,score_max,score_mean,score_std,mean_heavy,mean_evicted,heavy_evicted_ratio,"
             "kept,sink,recent,heavy,evicted");
  for (int64_t l = 0; l < L; ++l) {
    const std::vector<std::string> c = split(layer_rows[static_cast<size_t>(l + 1)], ',');
    BOOST_REQUIRE(c.size() == 14u);
    BOOST_TEST(c[0] == std::to_string(l));
    BOOST_TEST(c[1] == std::to_string(S));
    BOOST_TEST((c[9] == "12" && c[10] == "2" && c[11] == "4" && c[12] == "6" && c[13] == "12"));
    double mn = INFINITY, mx = 0, sum = 0;
    for (const std::string& row : rows.at(l)) {
      const double v = std::stod(split(row, ',')[1]);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
    }
    BOOST_TEST(std::stod(c[2]) == mn);
    BOOST_TEST(std::stod(c[3]) == mx);
    BOOST_TEST(std::abs(std::stod(c[4]) - sum / S) <=
               mla::test::tolerance("score_mean", "sweep-csv-vs-recomputed", "double").rtol * sum);
    // causal attention: every query row sums to 1 (in double here), so each layer's scores sum to n * S
    BOOST_TEST(std::abs(sum - 4.0 * S) <=
               mla::test::tolerance("token_scores", "sweep-reference-sum-vs-exact", "double").atol);
  }

  // overlap.csv: Jaccard of the kept (and heavy) sets, recomputed from scores.csv
  const std::vector<std::string> overlap = lines_of(read_text(out + "/overlap.csv"));
  BOOST_REQUIRE(overlap.size() == static_cast<size_t>(L * (L - 1) / 2 + 1));
  for (size_t i = 1; i < overlap.size(); ++i) {
    const std::vector<std::string> c = split(overlap[i], ',');
    const int64_t a = std::stoll(c[0]), b = std::stoll(c[1]);
    BOOST_TEST(a < b);
    const auto jac = [](const std::set<int64_t>& x, const std::set<int64_t>& y, int64_t& inter, int64_t& uni) {
      inter = 0;
      for (int64_t t : x) inter += y.count(t);
      uni = static_cast<int64_t>(x.size() + y.size()) - inter;
      return uni ? static_cast<double>(inter) / static_cast<double>(uni) : 1.0;
    };
    int64_t inter = 0, uni = 0;
    BOOST_TEST(std::stod(c[4]) == jac(kept[a], kept[b], inter, uni));
    BOOST_TEST((std::stoll(c[2]) == inter && std::stoll(c[3]) == uni));
    BOOST_TEST(std::stod(c[7]) == jac(heavy[a], heavy[b], inter, uni));
    BOOST_TEST((std::stoll(c[5]) == inter && std::stoll(c[6]) == uni));
  }

  // heatmap.svg: one cell per (layer, token), one kept mark per kept token
  const std::string svg = read_text(out + "/heatmap.svg");
  BOOST_TEST(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0u);
  BOOST_TEST(contains(svg, "</svg>"));
  size_t cells = 0, marks = 0;
  for (size_t p = svg.find("<title>layer "); p != std::string::npos; p = svg.find("<title>layer ", p + 1)) ++cells;
  for (const char* colour : {"fill=\"#7b3294\"/>", "fill=\"#e66101\"/>", "fill=\"#1b9e77\"/>"})
    for (size_t p = svg.find(colour); p != std::string::npos; p = svg.find(colour, p + 1)) ++marks;
  BOOST_TEST(cells == static_cast<size_t>(L * S));
  BOOST_TEST(marks == static_cast<size_t>(L * 12 + 3));  // + the legend's three marks

  // report.json: parses, one object per layer with the same decision
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out + "/report.json");
  BOOST_TEST(std::string_view(doc["command"]) == "sweep");
  simdjson::dom::array layers = doc["layers"];
  BOOST_REQUIRE(layers.size() == static_cast<size_t>(L));
  int64_t l = 0;
  for (simdjson::dom::element e : layers) {
    BOOST_TEST(int64_t(e["layer"]) == l);
    BOOST_TEST(int64_t(e["h2o"]["kept"]) == 12);
    std::set<int64_t> heavy_json;
    for (simdjson::dom::element i : e["h2o"]["heavy_indices"].get_array()) heavy_json.insert(int64_t(i));
    BOOST_TEST((heavy_json == heavy[l]));
    ++l;
  }
  BOOST_TEST(simdjson::dom::array(doc["overlap"]).size() == static_cast<size_t>(L * (L - 1) / 2));
  BOOST_TEST(simdjson::dom::array(doc["caveats"]).size() == 0u);
  BOOST_TEST(read_text(out + "/report.txt") == r.out);
}

BOOST_AUTO_TEST_CASE(sweep_help) {
  const RunResult r = ok("sweep --help");
  BOOST_TEST(contains(r.out, "usage: mla-h2o sweep --checkpoint PATH [--layers all|0-3,60]"));
  for (const char* flag : {"--layers", "--residual", "--input-tensor", "--tokens", "--dump-tensors", "--budget"})
    BOOST_TEST(contains(r.out, flag), flag);
  BOOST_TEST(!contains(r.out, "--per-head"));
  BOOST_TEST(contains(ok("run --help").out, "--residual"));
  BOOST_TEST(contains(ok("--help").out, "sweep"));
}

BOOST_AUTO_TEST_CASE(sweep_with_tokens_reports_the_caveat) {
  const std::string out = scratch_dir("sweep-tokens");
  const RunResult r = ok("sweep --checkpoint " + q(tiny4()) + " --layers 0,2-3 --tokens 5,9,1,33,7,2,60,11 --out " +
                         q(out) + " --sinks 1 --recent 2 --budget 2");
  BOOST_TEST(contains(r.out, "layer(s) 2, 3: these are NOT the model's inputs to those layers"));
  BOOST_TEST(contains(r.out, "dump_hidden_states.py"));
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out + "/report.json");
  simdjson::dom::array caveats = doc["caveats"];
  BOOST_REQUIRE(caveats.size() == 1u);
  BOOST_TEST(contains(std::string(std::string_view(caveats.at(0))), "NOT the model's inputs"));
  BOOST_TEST(sweep_score_rows(out).size() == 3u);

  // layer 0 alone: --tokens is the model's input, no caveat
  const RunResult r0 = ok("sweep --checkpoint " + q(tiny4()) + " --layers 0 --tokens 5,9,1 --out " + q(scratch_dir("sweep-t0")));
  BOOST_TEST(!contains(r0.out, "NOT the model's inputs"));
  // run says it too
  const RunResult run2 = ok("run --checkpoint " + q(tiny4()) + " --layer 2 --tokens 5,9,1 --out " + q(scratch_dir("sweep-t2")));
  BOOST_TEST(contains(run2.out, "layer(s) 2: these are NOT the model's inputs"));
}

BOOST_AUTO_TEST_CASE(sweep_dump_tensors_per_layer) {
  const std::string out = scratch_dir("sweep-dump");
  ok("sweep --checkpoint " + q(tiny4()) + " --layers 1,3 --seq-len 6 --dump-tensors --out " + q(out));
  for (const char* l : {"1", "3"}) {
    const mla::SafetensorsFile f = mla::SafetensorsFile::open(out + "/layer-" + l + ".safetensors");
    BOOST_TEST(f.metadata().at("layer") == l);
    BOOST_TEST((f.at("attn_weights").shape == std::vector<uint64_t>{4, 6, 6}));
  }
  BOOST_TEST(!std::filesystem::exists(out + "/layer-0.safetensors"));
}

BOOST_AUTO_TEST_CASE(sweep_bad_inputs_are_one_error_line) {
  const std::string ck = q(tiny4()), out = " --out " + q(scratch_dir("sweep-bad"));
  expect_failure("sweep --checkpoint " + ck + " --layers 0-x" + out, "sweep", {"--layers", "0-x", "not a layer number"});
  expect_failure("sweep --checkpoint " + ck + " --layers 3-1" + out, "sweep", {"--layers", "3-1", "backwards"});
  expect_failure("sweep --checkpoint " + ck + " --layers 1,0-2" + out, "sweep", {"layer 1 is listed twice"});
  expect_failure("sweep --checkpoint " + ck + " --layers 0,,1" + out, "sweep", {"--layers", "not a layer number"});
  expect_failure("sweep --checkpoint " + ck + " --layers 0,9" + out, "sweep", {"layer 9", "out of range", "4 layers"});
  expect_failure("sweep --checkpoint " + ck + " --residual --seq-len 4" + out, "sweep", {"--residual needs --input"});
  expect_failure("sweep" + out, "sweep", {"--checkpoint PATH is required"});

  // a layer the config has but the checkpoint does not hold
  const std::string partial = scratch_dir("sweep-partial") + "/ckpt";
  ok("synth --preset tiny --layers 1 --out " + q(partial));
  expect_failure("sweep --checkpoint " + q(partial) + " --layers 0-1" + out, "sweep",
                 {"layer 0", "does not hold that layer's attention tensors", "layers present: 1"});

  // --input holding hidden_states.0 and .1 but not .2; then different token counts
  const std::string dir = scratch_dir("sweep-input");
  const std::vector<float> rows6(6 * 64, 0.5f), rows5(5 * 64, 0.5f);
  const auto b6 = mla::encode_f32(rows6), b5 = mla::encode_f32(rows5);
  mla::write_safetensors(dir + "/two.safetensors", {{"hidden_states.0", mla::DType::F32, {6, 64}, b6},
                                                    {"hidden_states.1", mla::DType::F32, {6, 64}, b6}});
  expect_failure("sweep --checkpoint " + ck + " --layers 0-2 --input " + q(dir + "/two.safetensors") + " --residual" + out,
                 "sweep", {"no tensor 'hidden_states'", "layer 2 would also read 'hidden_states.2'", "holds: hidden_states.0"});
  mla::write_safetensors(dir + "/uneven.safetensors", {{"hidden_states.0", mla::DType::F32, {6, 64}, b6},
                                                       {"hidden_states.1", mla::DType::F32, {5, 64}, b5}});
  expect_failure("sweep --checkpoint " + ck + " --layers 0,1 --input " + q(dir + "/uneven.safetensors") + out, "sweep",
                 {"5 tokens", "6", "same tokens"});
  // run --residual on the same file: layer 2's tensor is missing
  expect_failure("run --checkpoint " + ck + " --layer 2 --input " + q(dir + "/two.safetensors") + " --residual" + out,
                 "run", {"layer 2 would also read 'hidden_states.2'"});
}

// layer_overlaps on hand-made decisions: counts, an empty heavy union (Jaccard 1), and layers of
// different lengths refused.
BOOST_AUTO_TEST_CASE(sweep_overlap_by_hand) {
  mla::SweepReport r;
  const auto layer = [](int64_t l, std::vector<double> scores, mla::H2OOptions o) {
    mla::SweepLayer x;
    x.layer = l;
    x.decision = mla::h2o_select(scores, o);
    x.scores = std::move(scores);
    return x;
  };
  // S = 6, 1 sink + 1 recent + 2 heavy: layer 0 keeps {0, 2, 3, 5}, layer 4 keeps {0, 3, 4, 5}
  r.layers.push_back(layer(0, {1, 0, 9, 8, 0.5, 1}, {1, 1, 2}));
  r.layers.push_back(layer(4, {1, 0, 0.5, 8, 9, 1}, {1, 1, 2}));
  r.layers.push_back(layer(7, {1, 0, 0.5, 8, 9, 1}, {1, 1, 0}));  // keeps {0, 5}, no heavy
  const std::vector<mla::LayerOverlap> o = mla::layer_overlaps(r);
  BOOST_REQUIRE(o.size() == 3u);
  BOOST_TEST((o[0].layer_a == 0 && o[0].layer_b == 4));
  BOOST_TEST((o[0].kept_intersection == 3 && o[0].kept_union == 5 && o[0].kept_jaccard == 0.6));
  BOOST_TEST((o[0].heavy_intersection == 1 && o[0].heavy_union == 3 && o[0].heavy_jaccard == 1.0 / 3.0));
  BOOST_TEST((o[2].layer_a == 4 && o[2].layer_b == 7 && o[2].kept_jaccard == 0.5));
  BOOST_TEST((o[2].heavy_union == 2 && o[2].heavy_jaccard == 0.0));
  mla::SweepReport none;
  none.layers.push_back(layer(1, {1, 2}, {1, 1, 0}));
  none.layers.push_back(layer(2, {2, 1}, {1, 1, 0}));
  BOOST_TEST((mla::layer_overlaps(none)[0].heavy_union == 0 && mla::layer_overlaps(none)[0].heavy_jaccard == 1.0));
  BOOST_TEST(mla::sweep_overlap_csv(mla::layer_overlaps(none)) ==
             "layer_a,layer_b,kept_intersection,kept_union,kept_jaccard,heavy_intersection,heavy_union,heavy_jaccard\n"
             "1,2,2,2,1,0,0,1\n");
  r.layers.push_back(layer(9, {1, 2, 3}, {1, 1, 1}));
  BOOST_CHECK_THROW(mla::layer_overlaps(r), mla::Error);
}

// One tensor for all layers: used by every layer, and the report says so.
BOOST_AUTO_TEST_CASE(sweep_single_input_tensor_feeds_every_layer) {
  const std::string dir = scratch_dir("sweep-one");
  std::vector<float> rows(5 * 64);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  const auto bytes = mla::encode_f32(rows);
  mla::write_safetensors(dir + "/x.safetensors", {{"hidden_states", mla::DType::F32, {1, 5, 64}, bytes}});
  const RunResult r = ok("sweep --checkpoint " + q(tiny4()) + " --layers 0,1 --input " + q(dir + "/x.safetensors") +
                         " --residual --out " + q(dir + "/out") + " --sinks 1 --recent 1 --budget 1");
  BOOST_TEST(contains(r.out, "layers 0, 1 all read the same tensor 'hidden_states'"));
  BOOST_TEST(sweep_score_rows(dir + "/out").size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
