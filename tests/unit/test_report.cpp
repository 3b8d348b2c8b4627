// tests/unit/test_report.cpp — suite report: the output formats (mla/report.hpp) and the
// tensor comparison (mla/compare.hpp) on small hand-made values.
//
// Expected numbers are worked out by hand in the comments next to each check.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "mla/compare.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/provenance.hpp"
#include "mla/report.hpp"
#include "mla/random.hpp"
#include "mla/safetensors.hpp"
#include "mla/stats.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::H2ODecision;
using mla::H2OOptions;
using mla::TokenCategory;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// A small but complete report: 8 tokens, 1 sink, 2 recent, budget 2.
//   scores   0:10  1:1  2:4  3:0.5  4:4  5:2  6:3  7:6
//   middle = 1..5 -> heavy = 2 (4) and 4 (4, tie -> both, lower first), evicted 1, 3, 5
mla::Report small_report() {
  mla::Report r;
  r.scores = {10, 1, 4, 0.5, 4, 2, 3, 6};
  r.h2o = H2OOptions{1, 2, 2};
  r.decision = mla::h2o_select(r.scores, r.h2o);
  mla::AttentionConfig c;
  c.model_type = "kimi_k25";
  c.hidden_size = 64;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 16;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 8;
  c.num_hidden_layers = 1;
  c.rope.rope_type = "yarn";
  c.rope.factor = 64;
  r.info.command = "run";
  r.info.checkpoint = "ckpt \"quoted\"\\dir\n\x01\xff";  // escaping and invalid UTF-8
  r.info.layer = 0;
  r.info.input_source = "seeded normal";
  r.info.mask = "none";
  r.info.precision = "bf16";
  r.info.backend_requested = "auto";
  r.info.backend = "cpu";
  r.info.backend_reason = "CUDA not built";
  r.info.latent_norm_eps_mode = "hf";
  r.info.latent_norm_eps = 1e-6;
  r.info.config = c;
  r.info.softmax_scale = 0.25;
  r.info.attn_output_shape = {8, 64};
  r.info.attn_weights_shape = {2, 8, 8};
  r.info.stage_seconds = {{"open checkpoint", 0.5}, {"forward", 0.25}, {"h2o select", 0.125}};
  r.info.load_seconds = 0.5;
  r.info.forward_seconds = 0.25;
  r.info.h2o_seconds = 0.125;
  r.info.notes = {"mask none as in the published Kimi K2.6 layer-0 H2O demo"};
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(report)

// SHA-256 against FIPS 180-4's examples (NIST's "SHA256.pdf" and "SHA2_Additional.pdf"), and
// streamed in uneven pieces (the 64-byte block boundary crossed every way) = one call; on the
// portable code and, where the CPU has them, on the SHA extensions, which must also agree on
// pseudo-random bytes of every length up to 300.
BOOST_AUTO_TEST_CASE(sha256_known_answers) {
  const bool hardware = mla::set_sha256_extensions(true);
  BOOST_TEST_MESSAGE("SHA extensions on this CPU: " << (hardware ? "yes" : "no"));
  std::string bytes(300, '\0');
  uint32_t x = 12345;
  for (char& c : bytes) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  std::map<bool, std::vector<std::string>> prefixes;  // [extensions] digests of bytes[0, len)
  for (bool extensions : {false, true}) {
    if (mla::set_sha256_extensions(extensions) != extensions) continue;
    BOOST_TEST_CONTEXT("SHA extensions " << extensions) {
      BOOST_TEST(mla::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
      BOOST_TEST(mla::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
      BOOST_TEST(mla::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
      const std::string million(1000000, 'a');
      BOOST_TEST(mla::sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
      for (size_t piece : {1u, 7u, 63u, 64u, 65u, 1000u}) {
        mla::Sha256 h;
        for (size_t at = 0; at < 5000; at += piece) h.update(million.data() + at, std::min(piece, 5000 - at));
        BOOST_TEST(h.hex() == mla::sha256_hex(std::string_view(million).substr(0, 5000)), "pieces of " << piece);
      }
      for (size_t len = 0; len <= bytes.size(); ++len) prefixes[extensions].push_back(mla::sha256_hex(bytes.substr(0, len)));
    }
  }
  if (hardware) BOOST_TEST(prefixes[true] == prefixes[false]);
  mla::set_sha256_extensions(true);
}

// file_digests hashes the files side by side (src/report/provenance.cpp): each digest lands at its
// own file's index, a file larger than one 4 MiB read piece is hashed whole, the progress ends at
// the total, and a path that is no regular file (a directory) is one Io error naming it.
BOOST_AUTO_TEST_CASE(file_digests_side_by_side) {
  const std::string dir = mla::test::scratch_dir("digests");
  std::string big((size_t{9} << 20) + 123, '\0');
  uint32_t x = 7;
  for (char& c : big) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"big", big}, {"empty", ""}, {"abc", "abc"}, {"big-again", big.substr(1)}, {"a", "a"}};
  std::vector<std::string> paths;
  for (const auto& [name, content] : files) {
    paths.push_back(dir + "/" + name);
    std::ofstream(paths.back(), std::ios::binary) << content;
  }
  int64_t last_done = 0, last_total = 0;
  const std::vector<mla::FileDigest> d = mla::file_digests(paths, [&](int64_t done, int64_t total) {
    BOOST_TEST(done >= last_done);
    last_done = done;
    last_total = total;
  });
  BOOST_TEST_REQUIRE(d.size() == files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    BOOST_TEST(d[i].path == paths[i]);
    BOOST_TEST(d[i].bytes == static_cast<int64_t>(files[i].second.size()), files[i].first);
    BOOST_TEST(d[i].sha256 == mla::sha256_hex(files[i].second), files[i].first);
  }
  BOOST_TEST(d[2].sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  BOOST_TEST(last_total == static_cast<int64_t>(2 * big.size() + 3));
  BOOST_TEST(last_done == last_total);
  paths.insert(paths.begin() + 1, dir);  // a directory: open succeeds, it is refused before any read
  try {
    mla::file_digests(paths);
    BOOST_FAIL("a directory was hashed");
  } catch (const mla::Error& e) {
    BOOST_TEST((e.kind() == mla::ErrorKind::Io));
    BOOST_TEST(std::string(e.what()).find("cannot read " + dir + " for its sha256: not a regular file") != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(score_stats_by_hand) {
  // {1, 2, 3, 4}: sum 10, mean 2.5, squared deviations 2.25+0.25+0.25+2.25 = 5 -> std sqrt(1.25)
  const std::vector<double> s = {3, 1, 4, 2};
  const mla::ScoreStats st = mla::score_stats(s);
  BOOST_TEST(st.count == 4);
  BOOST_TEST(st.min == 1.0);
  BOOST_TEST(st.max == 4.0);
  BOOST_TEST(st.argmin == 1);
  BOOST_TEST(st.argmax == 2);
  BOOST_TEST(st.sum == 10.0);
  BOOST_TEST(st.mean == 2.5);
  BOOST_TEST(st.std == std::sqrt(1.25));
}

BOOST_AUTO_TEST_CASE(decision_summary_by_hand) {
  const mla::Report r = small_report();
  BOOST_TEST(mla::h2o_select(r.scores, r.h2o).n_heavy == 2);
  const mla::DecisionSummary s = mla::summarize_decision(r.scores, r.decision);
  BOOST_TEST(s.seq_len == 8);
  BOOST_TEST(s.middle == 5);
  BOOST_TEST(s.mean_heavy == 4.0);             // (4 + 4) / 2
  BOOST_TEST(s.mean_evicted == 3.5 / 3.0);     // (1 + 0.5 + 2) / 3
  BOOST_TEST(s.mean_kept == 27.0 / 5.0);       // (10 + 4 + 4 + 3 + 6) / 5
  BOOST_TEST(s.heavy_evicted_ratio.has_value());
  BOOST_TEST(*s.heavy_evicted_ratio == 4.0 / (3.5 / 3.0));
  BOOST_TEST(s.top_heavy.size() == 2u);
  BOOST_TEST(s.top_heavy[0].first == 2);
  BOOST_TEST(s.top_heavy[1].first == 4);
}

BOOST_AUTO_TEST_CASE(csv_exact) {
  // 1 sink, 1 recent, budget 1: middle = {1, 2}, heavy = 2.
  const std::vector<double> s = {1.5, 0.1, 2, 0.25};
  const H2ODecision d = mla::h2o_select(s, H2OOptions{1, 1, 1});
  const std::string csv = mla::scores_csv(s, d);
  BOOST_TEST(csv ==
             "token_idx,attention_score,kept,category\n"
             "0,1.5,True,sink\n"
             "1,0.10000000000000001,False,evicted\n"
             "2,2,True,heavy\n"
             "3,0.25,True,recent\n");
  // every printed score parses back to the same double
  BOOST_TEST(std::strtod("0.10000000000000001", nullptr) == 0.1);
  const double awkward = 1.0 / 3.0;
  BOOST_TEST(std::strtod(mla::format_double(awkward).c_str(), nullptr) == awkward);
  BOOST_CHECK_THROW(mla::scores_csv(std::vector<double>{1.0}, d), mla::Error);
}

BOOST_AUTO_TEST_CASE(heads_csv_exact) {
  // 2 heads x 3 tokens, 0 sinks, 1 recent, budget 1.
  const std::vector<double> hs = {1, 2, 0, 3, 3, 5};
  const auto d = mla::h2o_select_per_head(hs, 2, H2OOptions{0, 1, 1});
  BOOST_TEST(mla::heads_csv(hs, d) ==
             "head,token_idx,attention_score,kept,category\n"
             "0,0,1,False,evicted\n"
             "0,1,2,True,heavy\n"
             "0,2,0,True,recent\n"
             "1,0,3,True,heavy\n"
             "1,1,3,False,evicted\n"
             "1,2,5,True,recent\n");
}

BOOST_AUTO_TEST_CASE(json_quote_escapes) {
  BOOST_TEST(mla::json_quote("a\"b\\c\n\t\x01") == "\"a\\\"b\\\\c\\n\\t\\u0001\"");
  BOOST_TEST(mla::json_quote("\xc3\xa9") == "\"\xc3\xa9\"");          // valid UTF-8 kept
  BOOST_TEST(mla::json_quote("x\xff") == "\"x\xef\xbf\xbd\"");        // invalid byte -> U+FFFD
  BOOST_TEST(mla::json_quote("\xc0\xaf") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");  // overlong '/'
}

BOOST_AUTO_TEST_CASE(json_writer_structure) {
  mla::JsonWriter w;
  w.begin_object().key("a").value(int64_t{1}).key("b").begin_array().value(0.5).value(true).null().end_array();
  w.key("c").begin_object().end_object().key("nan").value(std::numeric_limits<double>::quiet_NaN()).end_object();
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  BOOST_REQUIRE(p.parse(simdjson::padded_string(w.str())).get(doc) == simdjson::SUCCESS);
  int64_t a = 0;
  BOOST_TEST((doc["a"].get(a) == simdjson::SUCCESS && a == 1));
  simdjson::dom::array arr;
  BOOST_TEST((doc["b"].get(arr) == simdjson::SUCCESS && arr.size() == 3u));
  BOOST_TEST(doc["nan"].is_null());
  mla::JsonWriter bad;
  bad.begin_object();
  BOOST_CHECK_THROW(bad.value(1), mla::Error);  // a value without a key
  BOOST_CHECK_THROW(bad.end_array(), mla::Error);
}

// inspect --json through the report's writer: every value where it belongs, the config's
// literals (numbers in their shortest form, a list) kept as written, null for what is absent.
BOOST_AUTO_TEST_CASE(inspect_json_by_hand) {
  mla::TensorInfo t;
  t.name = "model.layers.0.self_attn.kv_a_layernorm.weight \"q\"";
  t.dtype = mla::DType::BF16;
  t.shape = {32, 2};
  t.begin = 128;
  t.end = 256;
  mla::InspectedCheckpoint c{"/ck", "model.", 3, {"model-00003-of-000003.safetensors"}, {{"model-00001-of-000003.safetensors", t}},
                             {{"rms_norm_eps", "1e-06"}, {"q_lora_rank", "null"}}, {{"ignore", "[\"lm_head\", \"re:.*gate\"]"}},
                             {0, 1}, 18512, {}};
  simdjson::dom::parser parser;
  const std::string text = mla::inspect_checkpoint_json(c);
  BOOST_TEST(text.back() == '\n');
  simdjson::dom::element j = parser.parse(text);
  BOOST_TEST(std::string_view(j["kind"]) == "checkpoint");
  BOOST_TEST(int64_t(j["shards"]) == 3);
  BOOST_TEST(std::string_view(j["missing_shards"].at(0)) == "model-00003-of-000003.safetensors");
  simdjson::dom::element row = j["tensors"].at(0);
  BOOST_TEST(std::string_view(row["shard"]) == "model-00001-of-000003.safetensors");
  BOOST_TEST(std::string_view(row["name"]) == t.name);
  BOOST_TEST(std::string_view(row["dtype"]) == "BF16");
  BOOST_TEST(int64_t(row["shape"].at(1)) == 2);
  BOOST_TEST(int64_t(row["bytes"]) == 128);
  BOOST_TEST(int64_t(row["data_offsets"].at(1)) == 256);
  BOOST_TEST(double(j["config"]["rms_norm_eps"]) == 1e-06);
  BOOST_TEST(j["config"]["q_lora_rank"].is_null());
  BOOST_TEST(std::string_view(j["quantization"]["ignore"].at(1)) == "re:.*gate");
  BOOST_TEST(int64_t(j["layers_present"].at(1)) == 1);
  BOOST_TEST(int64_t(j["layer0_attention_parameters"]) == 18512);
  c.quantization.clear();
  c.layer0_attention_parameters.reset();
  j = parser.parse(mla::inspect_checkpoint_json(c));
  BOOST_TEST(j["quantization"].is_null());
  BOOST_TEST(j["layer0_attention_parameters"].is_null());
  // file mode: no shard, the metadata as an object
  j = parser.parse(mla::inspect_file_json(mla::InspectedFile{"/f.safetensors", 400, 200, {{"format", "pt"}}, {{"", t}}}));
  BOOST_TEST(std::string_view(j["kind"]) == "file");
  BOOST_TEST(int64_t(j["header_size"]) == 200);
  BOOST_TEST(std::string_view(j["metadata"]["format"]) == "pt");
  BOOST_TEST(j["tensors"].at(0)["shard"].error() == simdjson::NO_SUCH_FIELD);
}

BOOST_AUTO_TEST_CASE(report_json_parses_and_has_the_keys) {
  const mla::Report r = small_report();
  const std::string json = mla::report_json(r);
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  BOOST_REQUIRE(p.parse(simdjson::padded_string(json)).get(doc) == simdjson::SUCCESS);
  double v = -1;
  BOOST_TEST((doc["timing_s"]["load"].get(v) == simdjson::SUCCESS && v == 0.5));
  BOOST_TEST((doc["timing_s"]["forward"].get(v) == simdjson::SUCCESS && v == 0.25));
  BOOST_TEST((doc["timing_s"]["h2o"].get(v) == simdjson::SUCCESS && v == 0.125));
  BOOST_TEST((doc["timing_s"]["total"].get(v) == simdjson::SUCCESS && v == 0.875));
  simdjson::dom::array stages;
  BOOST_TEST((doc["timing_s"]["stages"].get(stages) == simdjson::SUCCESS && stages.size() == 3u));
  int64_t k = -1;
  BOOST_TEST((doc["h2o"]["kept"].get(k) == simdjson::SUCCESS && k == 5));
  BOOST_TEST((doc["h2o"]["n_sink"].get(k) == simdjson::SUCCESS && k == 1));
  BOOST_TEST((doc["h2o"]["n_recent"].get(k) == simdjson::SUCCESS && k == 2));
  BOOST_TEST((doc["h2o"]["n_heavy"].get(k) == simdjson::SUCCESS && k == 2));
  BOOST_TEST((doc["h2o"]["n_evicted"].get(k) == simdjson::SUCCESS && k == 3));
  BOOST_TEST((doc["h2o"]["mean_heavy_score"].get(v) == simdjson::SUCCESS && v == 4.0));
  BOOST_TEST((doc["h2o"]["heavy_evicted_ratio"].get(v) == simdjson::SUCCESS && v == 4.0 / (3.5 / 3.0)));
  simdjson::dom::array heavy;
  BOOST_TEST((doc["h2o"]["heavy_indices"].get(heavy) == simdjson::SUCCESS && heavy.size() == 2u));
  BOOST_TEST((doc["scores"]["max"].get(v) == simdjson::SUCCESS && v == 10.0));
  BOOST_TEST((doc["scores"]["mean"].get(v) == simdjson::SUCCESS && v == 30.5 / 8.0));
  BOOST_TEST((doc["config"]["hidden_size"].get(k) == simdjson::SUCCESS && k == 64));
  BOOST_TEST((doc["config"]["kv_lora_rank"].get(k) == simdjson::SUCCESS && k == 16));
  BOOST_TEST((doc["config"]["rope"]["factor"].get(v) == simdjson::SUCCESS && v == 64.0));
  BOOST_TEST((doc["config"]["softmax_scale"].get(v) == simdjson::SUCCESS && v == 0.25));
  std::string_view sv;
  BOOST_TEST((doc["options"]["mask"].get(sv) == simdjson::SUCCESS && sv == "none"));
  BOOST_TEST((doc["options"]["precision"].get(sv) == simdjson::SUCCESS && sv == "bf16"));
  BOOST_TEST((doc["backend"]["name"].get(sv) == simdjson::SUCCESS && sv == "cpu"));
  BOOST_TEST((doc["backend"]["reason"].get(sv) == simdjson::SUCCESS && sv == "CUDA not built"));
  BOOST_TEST((doc["versions"]["mla_h2o"].get(sv) == simdjson::SUCCESS && !sv.empty()));
  BOOST_TEST((doc["versions"]["compiler"].get(sv) == simdjson::SUCCESS && !sv.empty()));
  BOOST_TEST((doc["checkpoint"].get(sv) == simdjson::SUCCESS && sv == "ckpt \"quoted\"\\dir\n\x01\xef\xbf\xbd"));
}

BOOST_AUTO_TEST_CASE(report_json_per_head) {
  mla::Report r = small_report();
  r.n_heads = 2;
  r.head_scores = {5, 0.5, 2, 0.25, 2, 1, 1.5, 3,   // head 0
                   5, 0.5, 2, 0.25, 2, 1, 1.5, 3};  // head 1
  r.head_decisions = mla::h2o_select_per_head(r.head_scores, 2, r.h2o);
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  BOOST_REQUIRE(p.parse(simdjson::padded_string(mla::report_json(r))).get(doc) == simdjson::SUCCESS);
  simdjson::dom::array heads;
  BOOST_REQUIRE(doc["per_head"].get(heads) == simdjson::SUCCESS);
  BOOST_TEST(heads.size() == 2u);
  int64_t k = -1;
  BOOST_TEST((heads.at(1)["head"].get(k) == simdjson::SUCCESS && k == 1));
  BOOST_TEST((heads.at(1)["kept"].get(k) == simdjson::SUCCESS && k == 5));
  bool per_head = false;
  BOOST_TEST((doc["options"]["per_head"].get(per_head) == simdjson::SUCCESS && per_head));
  BOOST_TEST(contains(mla::report_text(r), "head   1: kept 5 (heavy 2)"));
}

BOOST_AUTO_TEST_CASE(report_text_has_the_demo_lines) {
  // The published Kimi K2.6 layer-0 H2O demo's configuration on a linear score vector: 100 of 256 kept.
  mla::Report r;
  r.scores.resize(256);
  for (size_t i = 0; i < 256; ++i) r.scores[i] = static_cast<double>(i % 7);
  r.h2o = H2OOptions{4, 32, 64};
  r.decision = mla::h2o_select(r.scores, r.h2o);
  r.info.command = "demo";
  r.info.mask = "none";
  const std::string t = mla::report_text(r);
  BOOST_TEST(contains(t, "kept      100 of 256 tokens (39.1%)"), t);
  BOOST_TEST(contains(t, "sinks       4 (indices 0..3)"));
  BOOST_TEST(contains(t, "heavy      64 of 220 middle tokens chosen"));
  BOOST_TEST(contains(t, "recent     32 (last 32, indices 224..255)"));
  BOOST_TEST(contains(t, "evicted   156 (60.9%)"));
  BOOST_TEST(contains(t, "top 10 heavy-hitter scores:"));
  BOOST_TEST(contains(t, "mean score of heavy-hitters kept:"));
  BOOST_TEST(contains(t, "heavy / evicted score ratio:"));
  BOOST_TEST(contains(t, "mask:"));
  const std::string t2 = mla::report_text(small_report());
  BOOST_TEST(contains(t2, "backend:" + std::string(12, ' ') + "cpu (auto: CUDA not built)"), t2);
  BOOST_TEST(contains(t2, "latent norm eps:    1e-06 (hf"));
  BOOST_TEST(contains(t2, "softmax scale=0.25"));
  BOOST_TEST(contains(t2, "load     0.5000"));
}

BOOST_AUTO_TEST_CASE(svg_well_formed_ish) {
  const mla::Report r = small_report();
  const std::string svg = mla::scores_svg(r.scores, r.decision, "layer 0 <scores> & H2O");
  BOOST_TEST(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0u);
  BOOST_TEST(svg.size() >= 7u);
  BOOST_TEST(svg.substr(svg.size() - 7) == "</svg>\n");
  BOOST_TEST(contains(svg, "layer 0 &lt;scores&gt; &amp; H2O"));
  BOOST_TEST(!contains(svg, "<scores>"));
  BOOST_TEST(contains(svg, ">sink (1)</text>"));
  BOOST_TEST(contains(svg, ">heavy (2)</text>"));
  BOOST_TEST(contains(svg, ">recent (2)</text>"));
  BOOST_TEST(contains(svg, ">evicted (3)</text>"));
  BOOST_TEST(contains(svg, "token index"));
  // one bar per token (each carries a <title>), + background + 4 legend swatches
  BOOST_TEST(count_of(svg, "<rect") == 8u + 1u + 4u);
  BOOST_TEST(count_of(svg, "<g") == count_of(svg, "</g>"));
  // y axis: max 10 -> nice step 2 -> ticks 0, 2, ..., 10
  BOOST_TEST(contains(svg, ">10</text>"));
}

BOOST_AUTO_TEST_CASE(compare_values_by_hand) {
  // a = [[1, 2], [3, 4]], b = [[1, 2.5], [3, 4]]
  const std::vector<double> a = {1, 2, 3, 4}, b = {1, 2.5, 3, 4};
  const std::vector<uint64_t> shape = {2, 2};
  const mla::TensorComparison c = mla::compare_values("t", a, b, shape, shape, 0.0, 0.5);
  BOOST_TEST(c.shape_match);
  BOOST_TEST(c.numel == 4u);
  BOOST_TEST(c.max_abs == 0.5);
  BOOST_TEST(c.max_rel == 0.25);                          // 0.5 / 2
  BOOST_TEST(c.norm_error == 0.5 / std::sqrt(30.0));      // ||a-b|| = 0.5, ||a||^2 = 30
  BOOST_TEST(c.cosine == 31.0 / (std::sqrt(30.0) * std::sqrt(32.25)),
             boost::test_tools::tolerance(mla::test::tolerance("cosine", "compare-values-hand-worked", "double").rtol));
  BOOST_TEST(c.worst_index == (std::vector<uint64_t>{0, 1}), boost::test_tools::per_element());
  BOOST_TEST(c.worst_a == 2.0);
  BOOST_TEST(c.worst_b == 2.5);
  BOOST_TEST(c.n_outside == 0u);  // 0.5 <= 0.5 + 0*2
  BOOST_TEST(c.within());
  const mla::TensorComparison tight = mla::compare_values("t", a, b, shape, shape, 0.0, 0.49);
  BOOST_TEST(tight.n_outside == 1u);
  BOOST_TEST(!tight.within());
  // rtol counts |a|: 0.5 <= 0 + 0.25 * 2
  BOOST_TEST(mla::compare_values("t", a, b, shape, shape, 0.25, 0.0).within());
  BOOST_TEST(!mla::compare_values("t", a, b, shape, shape, 0.24, 0.0).within());
}

BOOST_AUTO_TEST_CASE(compare_values_edge_cases) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<uint64_t> s3 = {3};
  // issue 46, fault 11: a tensor holding NaN or Inf never passes, not even against itself;
  // its NaN and Inf are counted per side, and equal ones are not outside
  const auto same = mla::compare_values("t", std::vector<double>{nan, inf, 1}, std::vector<double>{nan, inf, 1}, s3, s3, 0, 0);
  BOOST_TEST(!same.within());
  BOOST_TEST(same.n_outside == 0u);
  BOOST_TEST(same.nan_a == 1u);
  BOOST_TEST(same.inf_a == 1u);
  BOOST_TEST(same.nan_b == 1u);
  BOOST_TEST(same.inf_b == 1u);
  const auto neg = mla::compare_values("t", std::vector<double>{-inf, 1, 2}, std::vector<double>{1, 1, 2}, s3, s3, 0, 0);
  BOOST_TEST(neg.inf_a == 1u);
  BOOST_TEST(neg.nonfinite() == 1u);
  BOOST_TEST(!neg.within());
  // a NaN against a number is outside and is the worst element
  const auto bad = mla::compare_values("t", std::vector<double>{1, 2, 3}, std::vector<double>{1.5, nan, 3}, s3, s3, 1, 1);
  BOOST_TEST(!bad.within());
  BOOST_TEST(bad.n_nonfinite_mismatch == 1u);
  BOOST_TEST(bad.worst_index == (std::vector<uint64_t>{1}), boost::test_tools::per_element());
  BOOST_TEST(std::isinf(bad.max_abs));
  // zero reference: max_rel skips a == 0, norm_error is inf, cosine 0
  const auto zero = mla::compare_values("t", std::vector<double>{0, 0, 0}, std::vector<double>{0, 1e-7, 0}, s3, s3, 0, 1e-6);
  BOOST_TEST(zero.within());
  BOOST_TEST(zero.max_rel == 0.0);
  BOOST_TEST(std::isinf(zero.norm_error));
  BOOST_TEST(zero.cosine == 0.0);
  // near-zero reference values (|a| <= atol) do not enter max_rel: |1e-9 - 2e-9| / 1e-9 = 1 is
  // ignored with atol 1e-6, and the relative error of the other element, 0.1 / 1, remains
  const auto tiny_ref = mla::compare_values("t", std::vector<double>{1e-9, 1}, std::vector<double>{2e-9, 1.1}, {2}, {2}, 0.2, 1e-6);
  BOOST_TEST(tiny_ref.max_rel == std::fabs(1.1 - 1.0));
  BOOST_TEST(tiny_ref.within());
  const auto no_atol = mla::compare_values("t", std::vector<double>{1e-9, 1}, std::vector<double>{2e-9, 1.1}, {2}, {2}, 0.2, 0);
  BOOST_TEST(no_atol.max_rel == 1.0);
  const auto both_zero = mla::compare_values("t", std::vector<double>{0, 0}, std::vector<double>{0, 0}, {2}, {2}, 0, 0);
  BOOST_TEST(both_zero.norm_error == 0.0);
  BOOST_TEST(both_zero.cosine == 1.0);
  // shape mismatch
  const auto shp = mla::compare_values("t", {}, {}, {2, 3}, {3, 2}, 0, 0);
  BOOST_TEST(!shp.shape_match);
  BOOST_TEST(!shp.within());
  // a 3-d worst index: shape [2, 3, 4], flat 23 -> [1, 2, 3]
  std::vector<double> x(24, 1.0), y(24, 1.0);
  y[23] = 2.0;
  const auto c3 = mla::compare_values("t", x, y, {2, 3, 4}, {2, 3, 4}, 0, 0);
  BOOST_TEST(c3.worst_index == (std::vector<uint64_t>{1, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(compare_safetensors_files) {
  const std::string dir = mla::test::scratch_dir("report-compare");
  const std::vector<float> a1 = {1, 2, 3, 4}, b1 = {1, 2, 3, 4.5f};
  const std::vector<double> shared_d = {0.5, 0.25};
  const auto pa = mla::encode_f32(a1), pb = mla::encode_f32(b1), pc = mla::encode_f64(shared_d), pd = mla::encode_f32(a1);
  const auto pe = mla::encode_f32(std::vector<float>{0.5f, 0.25f});
  mla::write_safetensors(dir + "/a.safetensors", {{"x", mla::DType::F32, {2, 2}, pa},
                                                  {"s", mla::DType::F64, {2}, pc},
                                                  {"only_a", mla::DType::F32, {4}, pd},
                                                  {"shape", mla::DType::F32, {4}, pd}});
  mla::write_safetensors(dir + "/b.safetensors", {{"x", mla::DType::F32, {2, 2}, pb},
                                                  {"s", mla::DType::F32, {2}, pe},
                                                  {"shape", mla::DType::F32, {2, 2}, pd},
                                                  {"only_b", mla::DType::F32, {4}, pd}});
  const auto fa = mla::SafetensorsFile::open(dir + "/a.safetensors");
  const auto fb = mla::SafetensorsFile::open(dir + "/b.safetensors");
  const mla::CompareResult r = mla::compare_safetensors(fa, fb, mla::CompareOptions{});
  BOOST_TEST(r.tensors.size() == 3u);
  BOOST_TEST(r.only_in_a == (std::vector<std::string>{"only_a"}), boost::test_tools::per_element());
  BOOST_TEST(r.only_in_b == (std::vector<std::string>{"only_b"}), boost::test_tools::per_element());
  BOOST_TEST(!r.all_within());
  for (const auto& t : r.tensors) {
    if (t.name == "x") {
      BOOST_TEST(t.max_abs == 0.5);
      BOOST_TEST(!t.within());
    } else if (t.name == "s") {
      BOOST_TEST(t.within());  // F64 vs F32 of exactly representable values
      BOOST_TEST(t.dtype_a == "F64");
      BOOST_TEST(t.dtype_b == "F32");
    } else {
      BOOST_TEST(t.name == "shape");
      BOOST_TEST(!t.shape_match);
    }
  }
  const std::string table = mla::compare_table(r, "a", "b");
  BOOST_TEST(contains(table, "only in A: only_a"));
  BOOST_TEST(contains(table, "only in B: only_b"));
  BOOST_TEST(contains(table, "shape mismatch"));
  BOOST_TEST(contains(table, "2 of 3 common tensors outside tolerance"));
  BOOST_TEST(!contains(table, "NaN or Inf"));
  // restricted to tensors that agree
  mla::CompareOptions only_s;
  only_s.tensors = {"s"};
  BOOST_TEST(mla::compare_safetensors(fa, fb, only_s).all_within());
  only_s.tensors = {"only_a"};
  BOOST_CHECK_THROW(mla::compare_safetensors(fa, fb, only_s), mla::Error);
}

BOOST_AUTO_TEST_CASE(tensor_dump_layout) {
  const std::string dir = mla::test::scratch_dir("report-dump");
  mla::TensorF hidden("hidden_states", {2, 3});
  hidden.data = {1, 2, 3, 4, 5, 6};
  mla::ForwardResult fr;
  fr.attn_output = mla::TensorD("attn_output", {2, 3});
  fr.attn_output.data = {0.5, 1, 1.5, 2, 2.5, 3};
  fr.attn_weights = mla::TensorD("attn_weights", {1, 2, 2});
  fr.attn_weights.data = {1, 0, 0.5, 0.5};
  fr.token_scores = {1.5, 0.5};
  fr.head_scores = {1.5, 0.5};
  const auto names = mla::write_tensor_dump(dir + "/f32.safetensors", hidden, fr, 1, {{"backend", "cpu"}});
  BOOST_TEST(names == (std::vector<std::string>{"hidden_states", "attn_output", "attn_weights", "token_scores", "head_scores"}),
             boost::test_tools::per_element());
  const auto f = mla::SafetensorsFile::open(dir + "/f32.safetensors");
  BOOST_TEST(mla::dtype_name(f.at("attn_output").dtype) == "F32");
  BOOST_TEST(f.at("attn_weights").shape == (std::vector<uint64_t>{1, 2, 2}), boost::test_tools::per_element());
  BOOST_TEST(f.at("head_scores").shape == (std::vector<uint64_t>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(f.to_double(f.at("token_scores")) == (std::vector<double>{1.5, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(f.metadata().at("backend") == "cpu");
  BOOST_TEST(mla::dtype_name(f.at("token_scores").dtype) == "F64");  // scores: always F64
  BOOST_TEST(mla::dtype_name(f.at("head_scores").dtype) == "F64");
  // a non-double result holding a value that is not a float is written as F64, not rounded
  fr.attn_weights.data[2] = 0.1;
  mla::write_tensor_dump(dir + "/mixed.safetensors", hidden, fr, 1, {});
  const auto m = mla::SafetensorsFile::open(dir + "/mixed.safetensors");
  BOOST_TEST(mla::dtype_name(m.at("attn_weights").dtype) == "F64");
  BOOST_TEST(mla::dtype_name(m.at("attn_output").dtype) == "F32");
  BOOST_TEST(m.to_double(m.at("attn_weights"))[2] == 0.1);
  fr.computed_in_double = true;
  fr.attn_output.data[0] = 0.1;  // not representable in fp32: must survive as F64
  mla::write_tensor_dump(dir + "/f64.safetensors", hidden, fr, 1, {});
  const auto g = mla::SafetensorsFile::open(dir + "/f64.safetensors");
  BOOST_TEST(mla::dtype_name(g.at("attn_output").dtype) == "F64");
  BOOST_TEST(g.to_double(g.at("attn_output"))[0] == 0.1);
}

// Figures that cannot leave their domain do not (issue: decode's mean_cosine was
// 1.0000000000000002 under ASan). A vector compared with itself: cosine exactly 1, distance and
// relative error exactly 0, on every build; other vectors: cosine within [-1, 1]. The vectors
// are searched so that the plain quotient dot / (||a|| ||a||) rounds above 1 for many of them.
BOOST_AUTO_TEST_CASE(cosines_stay_in_their_domain_and_identity_is_exact) {
  mla::Rng rng(2027, 3);
  int above_one = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = 1 + trial % 97;
    std::vector<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (auto& v : a) v = rng.normal() * std::pow(10.0, static_cast<double>(trial % 7) - 3);
    for (size_t i = 0; i < b.size(); ++i) b[i] = trial % 2 ? -a[i] : a[i] * (1 + 1e-17 * static_cast<double>(i));
    double aa = 0;
    for (double v : a) aa += v * v;
    if (aa / (std::sqrt(aa) * std::sqrt(aa)) > 1) ++above_one;
    const mla::RowDeviation self = mla::row_deviation(a.data(), a.data(), n);
    BOOST_TEST(self.cosine == 1.0);
    BOOST_TEST(self.distance == 0.0);
    BOOST_TEST(self.rel_error == 0.0);
    const mla::RowDeviation other = mla::row_deviation(a.data(), b.data(), n);
    BOOST_TEST((other.cosine >= -1.0 && other.cosine <= 1.0), other.cosine);
    std::vector<float> af(a.begin(), a.end());
    BOOST_TEST(mla::row_deviation(af.data(), af.data(), n).cosine == 1.0);
    const mla::TensorComparison c = mla::compare_values("t", a, a, {static_cast<uint64_t>(n)}, {static_cast<uint64_t>(n)}, 0, 0);
    BOOST_TEST(c.cosine == 1.0);
    BOOST_TEST(c.norm_error == 0.0);
    BOOST_TEST(c.max_abs == 0.0);
    const mla::TensorComparison d = mla::compare_values("t", a, b, {static_cast<uint64_t>(n)}, {static_cast<uint64_t>(n)}, 0, 0);
    BOOST_TEST((d.cosine >= -1.0 && d.cosine <= 1.0), d.cosine);
  }
  BOOST_TEST(above_one > 0);  // the naive quotient does leave the domain on these inputs
  BOOST_TEST(mla::cosine_from_sums(0, 0, 0, false) == 1.0);
  BOOST_TEST(mla::cosine_from_sums(0, 1, 0, false) == 0.0);
  BOOST_TEST(mla::cosine_from_sums(2.0000000000000004, 1, 4, false) == 1.0);  // 1 + 2^-52, held at 1
  BOOST_TEST(mla::cosine_from_sums(-2.0000000000000004, 1, 4, false) == -1.0);
}

BOOST_AUTO_TEST_SUITE_END()
