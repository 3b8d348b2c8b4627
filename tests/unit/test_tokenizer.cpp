// tests/unit/test_tokenizer.cpp — suite `tokenizer`: the checkpoint tokenizers (src/tokenizer/,
// docs/tokenizer.md) id for id against their reference libraries, on the real files.
//
// Expected ids come from the references themselves: tests/data/tokenizers/ was written by
// reference/python/make_tokenizer_fixture.py (HF tokenizers on DeepSeek-V3's and DeepSeek-V2's
// tokenizer.json, tiktoken with Kimi's pattern on Kimi K2's tiktoken.model, over ~1 MB of Debian man
// pages, C headers and hand-made edge cases). The fixture files are xz-compressed in the tree and
// unpacked here into the scratch area with xz(1); a missing file or xz fails the test, it never
// skips. Every bad input is one error naming what is wrong.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/tasks.hpp"
#include "mla/tokenizer.hpp"
#include "src/tokenizer/regex.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::ErrorKind;

const char* const kCorpus[] = {"ja", "zh", "ru", "de", "code", "edge", "crlf", "unicode", "long"};

// tests/data/tokenizers/REL.xz unpacked once into the scratch area; returns the unpacked path.
std::string unpacked(const std::string& rel) {
  static const std::string root = mla::test::scratch_dir("tokenizers");
  const fs::path out = fs::path(root) / rel;
  if (fs::exists(out)) return out.string();
  const std::string src = mla::test::data_dir() + "/tokenizers/" + rel + ".xz";
  BOOST_REQUIRE_MESSAGE(fs::is_regular_file(src), "fixture missing: " + src);
  fs::create_directories(out.parent_path());
  const std::string cmd = "xz -dc '" + src + "' > '" + out.string() + "'";
  BOOST_REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: " + cmd + " (is xz-utils installed?)");
  return out.string();
}

// Unpacks a tokenizer's directory (tokenizer.json or tiktoken.model + tokenizer_config.json).
std::string tokenizer_dir(const std::string& name) {
  if (name == "kimi-k2") {
    unpacked(name + "/tokenizer_config.json");
    return fs::path(unpacked(name + "/tiktoken.model")).parent_path().string();
  }
  unpacked(name + "/tokenizer_config.json");
  return fs::path(unpacked(name + "/tokenizer.json")).parent_path().string();
}

// golden/NAME.ids: "CORPUS id id ..." per line.
std::map<std::string, std::vector<uint32_t>> golden(const std::string& name) {
  std::ifstream in(unpacked("golden/" + name + ".ids"));
  std::map<std::string, std::vector<uint32_t>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream s(line);
    std::string key;
    s >> key;
    auto& ids = out[key];
    for (uint32_t id; s >> id;) ids.push_back(id);
  }
  return out;
}

std::unique_ptr<mla::Tokenizer> load(const std::string& name) { return mla::load_tokenizer(tokenizer_dir(name)); }

// Index of the first difference (or the shorter length), for a readable failure.
size_t first_difference(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

void check_corpus(const std::string& name) {
  const auto tok = load(name);
  const auto want = golden(name);
  size_t bytes = 0, ids = 0;
  for (const char* c : kCorpus) {
    const std::string text = mla::test::read_text(unpacked(std::string("corpus/") + c + ".txt"));
    BOOST_REQUIRE_MESSAGE(want.count(c), name + ": no golden ids for " + c);
    const std::vector<uint32_t>& expected = want.at(c);
    const std::vector<uint32_t> got = tok->encode(text);
    const size_t d = first_difference(got, expected);
    if (name == "deepseek-v3" && std::string(c) == "unicode") {
      // The one known divergence (docs/tokenizer.md, "Unicode tables"): HF tokenizers' Oniguruma knows
      // the letters of Unicode 15-16, PCRE2 10.42 (Unicode 14) does not, so \p{L} splits differ there.
      // Checked as a difference, so that a fix (or a PCRE2 with newer tables) shows here.
      BOOST_CHECK_MESSAGE(got != expected, "deepseek-v3 now equals HF on corpus/unicode.txt: drop this exemption");
      BOOST_CHECK_MESSAGE(tok->decode(got) == text, name + " on " + c + ": decode(encode(x)) != x");
      continue;
    }
    BOOST_CHECK_MESSAGE(got == expected, name + " on " + c + ": " + std::to_string(got.size()) + " ids vs " +
                                             std::to_string(expected.size()) + ", first difference at id " +
                                             std::to_string(d));
    BOOST_CHECK_MESSAGE(tok->decode(got) == text, name + " on " + c + ": decode(encode(x)) != x");
    BOOST_CHECK_MESSAGE(tok->encode(text, 2) == got, name + " on " + c + ": --threads 2 changed the ids");
    bytes += text.size();
    ids += got.size();
  }
  BOOST_TEST_MESSAGE(name << ": " << bytes << " bytes, " << ids << " ids identical to the reference");
  BOOST_CHECK_GT(bytes, 1000000u);
}

template <typename F>
void check_error(F&& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    BOOST_ERROR("no error; expected one containing \"" + needle + "\"");
  } catch (const mla::Error& e) {
    BOOST_CHECK_MESSAGE(e.kind() == kind, std::string("kind ") + std::string(mla::error_kind_name(e.kind())) + ": " + e.what());
    BOOST_CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos,
                        std::string("message \"") + e.what() + "\" lacks \"" + needle + "\"");
    BOOST_CHECK_MESSAGE(std::string(e.what()).find('\n') == std::string::npos, "more than one line");
  }
}

// A minimal byte-level tokenizer.json: the 256 byte tokens (ids 0..255), merges `merges`
// (as JSON array text), pre_tokenizer / normalizer JSON as given.
std::string tiny_json(const std::string& pre, const std::string& merges_and_extra_vocab,
                      const std::string& normalizer = "null", const std::string& decoder = R"({"type":"ByteLevel"})") {
  std::string vocab;
  // GPT-2's byte table: printable bytes are themselves, the rest U+0100 + k.
  int k = 0;
  for (int c = 0; c < 256; ++c) {
    const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    const unsigned cp = printable ? static_cast<unsigned>(c) : static_cast<unsigned>(256 + k++);
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    vocab += std::string(vocab.empty() ? "" : ",") + "\"" + buf + "\":" + std::to_string(c);
  }
  return R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":)" + normalizer +
         R"(,"pre_tokenizer":)" + pre + R"(,"post_processor":null,"decoder":)" + decoder +
         R"(,"model":{"type":"BPE","dropout":null,"unk_token":null,"vocab":{)" + vocab + merges_and_extra_vocab + "}}}";
}

std::string write_scratch(const std::string& name, const std::string& text) {
  static const std::string dir = mla::test::scratch_dir("tokenizer-bad");
  const std::string p = dir + "/" + name;
  fs::create_directories(fs::path(p).parent_path());
  mla::test::write_text(p, text);
  return p;
}

const char* const kByteLevel = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";

}  // namespace

BOOST_AUTO_TEST_SUITE(tokenizer)

BOOST_AUTO_TEST_CASE(deepseek_v3_ids_exact) { check_corpus("deepseek-v3"); }
BOOST_AUTO_TEST_CASE(deepseek_v2_ids_exact) { check_corpus("deepseek-v2"); }
BOOST_AUTO_TEST_CASE(kimi_k2_ids_exact) { check_corpus("kimi-k2"); }

BOOST_AUTO_TEST_CASE(vocabulary_and_special_tokens) {
  const auto v3 = load("deepseek-v3");
  BOOST_CHECK_EQUAL(v3->vocab_size(), 128815u);  // 128,000 BPE tokens + 818 added, ids up to 128,814
  BOOST_CHECK_EQUAL(v3->added_tokens().size(), 818u);
  const auto v2 = load("deepseek-v2");
  BOOST_CHECK_EQUAL(v2->vocab_size(), 100002u);
  const auto kimi = load("kimi-k2");
  BOOST_CHECK_EQUAL(kimi->vocab_size(), 163840u);  // 163,584 ranks + 256 special
  // splintr's ids of a few strings (the values the fixture's check used, docs/tokenizer.md)
  BOOST_CHECK((kimi->encode("Hello world") == std::vector<uint32_t>{19180, 2695}));
  BOOST_CHECK((kimi->encode("中文English混合") == std::vector<uint32_t>{16717, 44372, 13935}));
  BOOST_CHECK((kimi->encode("1234567890") == std::vector<uint32_t>{6694, 12972, 16242, 15}));
  BOOST_CHECK((kimi->encode("[BOS]") == std::vector<uint32_t>{163584}));
  BOOST_CHECK((v3->encode("<｜begin▁of▁sentence｜>") == std::vector<uint32_t>{0}));
  BOOST_CHECK_EQUAL(v3->encode("").size(), 0u);
}

// The parallel scan of a pattern (regex.cpp: chunks resynchronised on a common match start) gives
// the serial scan's matches, for 2..8 threads, on the whole corpus and on its long runs, for Kimi's
// pattern, GPT-2's, DeepSeek-V3's third Split and a pattern whose matches can be empty.
BOOST_AUTO_TEST_CASE(parallel_scan_equals_serial) {
  std::string text;
  for (const char* c : kCorpus) text += mla::test::read_text(unpacked(std::string("corpus/") + c + ".txt"));
  const std::vector<std::string> patterns = {
      mla::tok::kKimiPattern, mla::tok::kGpt2Pattern,
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      R"(a*|\s)"};
  for (const std::string& written : patterns) {
    const mla::tok::Regex re(mla::tok::translate_pattern(written, "test"), "test");
    std::vector<mla::tok::Span> serial;
    re.find_all(text, serial);
    BOOST_REQUIRE_GT(serial.size(), 1000u);
    for (int threads = 2; threads <= 8; ++threads) {
      std::vector<mla::tok::Span> par;
      re.find_all(text, par, threads);
      bool same = par.size() == serial.size();
      for (size_t i = 0; same && i < par.size(); ++i) same = par[i].begin == serial[i].begin && par[i].end == serial[i].end;
      BOOST_CHECK_MESSAGE(same, written.substr(0, 30) + ": " + std::to_string(threads) + " threads give " +
                                    std::to_string(par.size()) + " matches, serial " + std::to_string(serial.size()));
    }
  }
}

// The built-in Kimi pattern is the one Kimi's tokenization_kimi.py writes (splintr's copy, saved by
// the fixture script), and its translation removes every class intersection.
BOOST_AUTO_TEST_CASE(kimi_pattern_is_upstreams) {
  const auto kimi = load("kimi-k2");
  const std::string want = mla::test::read_text(mla::test::data_dir() + "/tokenizers/kimi-k2/pattern.txt");
  const std::string p = kimi->patterns().at(0);
  const size_t arrow = p.find("  ->  ");
  BOOST_REQUIRE(arrow != std::string::npos);
  BOOST_CHECK_EQUAL(p.substr(0, arrow), want);
  BOOST_CHECK(p.substr(arrow).find("&&") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(invalid_utf8_names_the_offset) {
  const auto v3 = load("deepseek-v3");
  check_error([&] { v3->encode(std::string("abc\xff") + "def"); }, ErrorKind::InvalidValue, "byte offset 3");
  check_error([&] { v3->encode("ab\xe4\xb8"); }, ErrorKind::InvalidValue, "byte offset 2");
  check_error([&] { v3->encode("\xed\xa0\x80"); }, ErrorKind::InvalidValue, "byte offset 0");  // a surrogate
  const std::vector<uint32_t> bad{5, 999999};
  check_error([&] { v3->decode(bad); }, ErrorKind::InvalidValue, "id 999999 (position 1)");
}

BOOST_AUTO_TEST_CASE(unsupported_components_are_named) {
  check_error([] { mla::load_tokenizer(write_scratch("wp/tokenizer.json", tiny_json(R"({"type":"Whitespace"})", ""))); },
              ErrorKind::Unsupported, "pre-tokenizer \"Whitespace\" is not supported (supported: Sequence, Split, ByteLevel, Digits)");
  check_error([] { mla::load_tokenizer(write_scratch("nfc/tokenizer.json", tiny_json(kByteLevel, "", R"({"type":"NFC"})"))); },
              ErrorKind::Unsupported, "normalizer: \"NFC\" is not supported");
  check_error([] { mla::load_tokenizer(write_scratch("dec/tokenizer.json", tiny_json(kByteLevel, "", "null", R"({"type":"Metaspace"})"))); },
              ErrorKind::Unsupported, "decoder: \"Metaspace\" is not supported (supported: ByteLevel)");
  check_error([] { mla::load_tokenizer(write_scratch("nobl/tokenizer.json", tiny_json(R"({"type":"Digits"})", ""))); },
              ErrorKind::Unsupported, "has no ByteLevel step");
  check_error([] { mla::load_tokenizer(write_scratch("beh/tokenizer.json", tiny_json(
                   R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":" "},"behavior":"Sideways","invert":false},)" +
                   std::string(kByteLevel) + "]}", ""))); },
              ErrorKind::Unsupported, "behavior \"Sideways\" is not one of");
}

BOOST_AUTO_TEST_CASE(unknown_merge_token_and_vocab_bound) {
  check_error([] { mla::load_tokenizer(write_scratch("m1/tokenizer.json", tiny_json(kByteLevel, R"(},"merges":["a zz"],"x":{)"))); },
              ErrorKind::Unsupported, "model.merges[0]: \"zz\" is not in the vocabulary");
  check_error([] { mla::load_tokenizer(write_scratch("m2/tokenizer.json", tiny_json(kByteLevel, R"(},"merges":[["a","b"]],"x":{)"))); },
              ErrorKind::Unsupported, "model.merges[0] (merged): \"ab\" is not in the vocabulary");
  const std::string ok = write_scratch("m3/tokenizer.json", tiny_json(kByteLevel, R"(,"ab":256},"merges":[["a","b"]],"x":{)"));
  const auto t = mla::load_tokenizer(ok);
  // "ab" merges (id 256); the byte tokens' ids are the bytes (tiny_json)
  BOOST_CHECK((t->encode("abc") == std::vector<uint32_t>{256, 'c'}));
  BOOST_CHECK((t->encode("ba ab") == std::vector<uint32_t>{'b', 'a', ' ', 256}));  // pre-tokens "ba", " ab"
  mla::test::write_text(fs::path(ok).parent_path().string() + "/config.json", R"({"vocab_size": 200})");
  check_error([&] { mla::load_tokenizer(ok); }, ErrorKind::Config, "larger than config.json's vocab_size 200");
}

BOOST_AUTO_TEST_CASE(tiktoken_bad_lines_are_named) {
  const std::string cfg = R"({"tokenizer_class": "TikTokenTokenizer", "added_tokens_decoder": {}})";
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    ranks += std::string{tbl[b >> 2], tbl[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  }
  write_scratch("tk1/tokenizer_config.json", cfg);
  const std::string good = write_scratch("tk1/tiktoken.model", ranks);
  BOOST_CHECK_EQUAL(mla::load_tokenizer(good)->vocab_size(), 256u + 256u);
  write_scratch("tk2/tokenizer_config.json", cfg);
  check_error([&] { mla::load_tokenizer(write_scratch("tk2/tiktoken.model", ranks + "QQ=* 256\n")); },
              ErrorKind::Config, "line 257: not \"BASE64 RANK\"");
  write_scratch("tk3/tokenizer_config.json", cfg);
  check_error([&] { mla::load_tokenizer(write_scratch("tk3/tiktoken.model", ranks + "YWI= 7\n")); },
              ErrorKind::Config, "line 257: duplicate rank 7");
  write_scratch("tk4/tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer"})");
  check_error([&] { mla::load_tokenizer(write_scratch("tk4/tiktoken.model", ranks)); }, ErrorKind::Unsupported,
              "tokenizer_class is not \"TikTokenTokenizer\"");
}

// small/cases.json: small tokenizer.json files under every Split behavior x invert (String and
// Regex patterns), ByteLevel's add_prefix_space x use_regex, Digits, ignore_merges, merges written
// as arrays, added tokens with lstrip / rstrip / single_word / normalized; HF's ids for each text.
BOOST_AUTO_TEST_CASE(every_component_option_as_hf) {
  simdjson::dom::parser parser;
  const simdjson::padded_string text(mla::test::read_text(unpacked("small/cases.json")));
  simdjson::dom::array cases = parser.parse(text).get_array().value();
  size_t n = 0;
  for (simdjson::dom::element c : cases) {
    const std::string name(c["name"].get_string().value());
    const std::string path = write_scratch("small/" + name + "/tokenizer.json", simdjson::minify(c["tokenizer"].value()));
    const auto tok = mla::load_tokenizer(path);
    simdjson::dom::array texts = c["texts"].get_array().value(), ids = c["ids"].get_array().value();
    BOOST_REQUIRE_EQUAL(texts.size(), ids.size());
    for (size_t k = 0; k < texts.size(); ++k) {
      const std::string t(texts.at(k).get_string().value());
      std::vector<uint32_t> want;
      const simdjson::dom::array row = ids.at(k).get_array().value();
      for (simdjson::dom::element id : row) want.push_back(static_cast<uint32_t>(id.get_uint64().value()));
      const std::vector<uint32_t> got = tok->encode(t);
      BOOST_CHECK_MESSAGE(got == want, name + " on \"" + t + "\": ids differ at " + std::to_string(first_difference(got, want)));
      ++n;
    }
  }
  BOOST_CHECK_GT(n, 200u);
}

// `mla-h2o tokenize`: the golden ids of a corpus file on stdout (1 and 2 threads), --decode gives the
// bytes back, and each bad input is one error line on stderr, exit 1 or 2, nothing on stdout.
BOOST_AUTO_TEST_CASE(cli_tokenize) {
  const auto help = mla::test::run_cli("tokenize --help");
  BOOST_CHECK(help.exit_code == 0 && help.out.find("usage: mla-h2o tokenize --tokenizer PATH") != std::string::npos);
  BOOST_CHECK(mla::test::run_cli("--help").out.find("  tokenize  ") != std::string::npos);
  const std::string text = unpacked("corpus/edge.txt");
  for (const char* name : {"deepseek-v3", "kimi-k2"}) {
    const std::string dir = tokenizer_dir(name);
    const auto want = golden(name).at("edge");
    for (const char* threads : {"1", "2"}) {
      const auto r = mla::test::run_cli("tokenize --tokenizer '" + dir + "' --text '" + text + "' --threads " + threads);
      BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      std::istringstream s(r.out);
      std::vector<uint32_t> got;
      for (uint32_t id; s >> id;) got.push_back(id);
      BOOST_CHECK_MESSAGE(got == want, std::string(name) + ": tokenize ids differ at " + std::to_string(first_difference(got, want)));
    }
    const std::string ids = write_scratch(std::string("cli/") + name + ".ids", mla::test::run_cli(
        "tokenize --tokenizer '" + dir + "' --text '" + text + "'").out);
    const auto d = mla::test::run_cli("tokenize --tokenizer '" + dir + "' --decode '" + ids + "'");
    BOOST_CHECK_EQUAL(d.exit_code, 0);
    BOOST_CHECK_MESSAGE(d.out == mla::test::read_text(text), std::string(name) + ": --decode did not give the text back");
  }
  const std::string dir = tokenizer_dir("deepseek-v3");
  const std::string bad = write_scratch("cli/bad.txt", "ok \xc3\x28 no");
  const std::string bad_ids = write_scratch("cli/bad.ids", "1 2 99999999");
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--text '" + bad + "'", "not valid UTF-8 at byte offset 3"},
           {"--decode '" + bad_ids + "'", "id 99999999 (position 2)"},
           {"", "exactly one of --text FILE and --decode IDS_FILE"},
       }) {
    const auto r = mla::test::run_cli("tokenize --tokenizer '" + dir + "' " + args);
    BOOST_CHECK_NE(r.exit_code, 0);
    BOOST_CHECK_MESSAGE(r.out.empty(), "stdout not empty: " + r.out.substr(0, 80));
    BOOST_CHECK_MESSAGE(r.err.find(needle) != std::string::npos, "stderr \"" + r.err + "\" lacks \"" + needle + "\"");
    BOOST_CHECK_EQUAL(std::count(r.err.begin(), r.err.end(), '\n'), 1);
  }
  // --tokenizer-pattern replaces Kimi's pattern: every character its own pre-token gives the bytes'
  // and characters' tokens; a pattern PCRE2 cannot compile is one error line
  const std::string hello = write_scratch("cli/hello.txt", "Hello");
  const auto each = mla::test::run_cli("tokenize --tokenizer '" + tokenizer_dir("kimi-k2") + "' --text '" + hello +
                                       "' --tokenizer-pattern '.'");
  BOOST_CHECK_EQUAL(each.out, "39 68 75 75 78\n");  // H e l l o: Kimi ranks the bytes ! .. ~ first, byte b = rank b - 33
  const auto bad_pattern = mla::test::run_cli("tokenize --tokenizer '" + tokenizer_dir("kimi-k2") + "' --text '" + hello +
                                              "' --tokenizer-pattern '(ab'");
  BOOST_CHECK(bad_pattern.exit_code != 0 && bad_pattern.out.empty());
  BOOST_CHECK_MESSAGE(bad_pattern.err.find("PCRE2 cannot compile the pattern") != std::string::npos, bad_pattern.err);
  const auto none = mla::test::run_cli("tokenize --tokenizer '" + mla::test::scratch_dir("no-tokenizer") + "' --text '" + text + "'");
  BOOST_CHECK_NE(none.exit_code, 0);
  BOOST_CHECK(none.err.find("holds neither tokenizer.json nor tiktoken.model") != std::string::npos);
}

// The shipped models/tiny-mla (vocab_size 258) in a scratch directory with `tokenizer` as its
// tokenizer.json.
std::string tiny_model_with(const std::string& tokenizer) {
  const std::string model = mla::test::scratch_dir("tokenizer-model");
  const std::string shipped = mla::test::data_dir() + "/../../models/tiny-mla";
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    fs::create_symlink(fs::absolute(shipped + "/" + f), model + "/" + f);
  mla::test::write_text(model + "/tokenizer.json", tokenizer);
  return model;
}

// inspect names the tokenizer and its vocabulary against vocab_size; a vocabulary larger than it is
// one error line and nothing on stdout.
BOOST_AUTO_TEST_CASE(inspect_names_the_tokenizer) {
  const std::string ok = tiny_model_with(tiny_json(kByteLevel, R"(,"th":256},"merges":[["t","h"]],"x":{)"));
  const auto r = mla::test::run_cli("inspect '" + ok + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_CHECK_MESSAGE(r.out.find("tokenizer: tokenizer.json (HF tokenizers, byte-level BPE)") != std::string::npos, r.out);
  BOOST_CHECK_MESSAGE(r.out.find("257 (config.json vocab_size 258)") != std::string::npos, r.out);
  const std::string big = tiny_model_with(mla::test::read_text(tokenizer_dir("deepseek-v3") + "/tokenizer.json"));
  const auto b = mla::test::run_cli("inspect '" + big + "'");
  BOOST_CHECK_NE(b.exit_code, 0);
  BOOST_CHECK(b.out.empty());
  BOOST_CHECK_MESSAGE(b.err.find("(largest id + 1 = 128815) is larger than config.json's vocab_size 258") != std::string::npos, b.err);
}

// eval --text on a checkpoint with its own tokenizer.json gives the eval.csv, bit for bit, of eval
// --tokens with BOS + the tokenizer's ids of the text (the shipped models/tiny-mla, whose vocabulary of
// 258 takes the 256 byte tokens + 2 merges); without a tokenizer, a model that is not byte-level
// refuses --text, naming what is missing and --tokens.
BOOST_AUTO_TEST_CASE(eval_text_equals_eval_tokens) {
  const std::string model = tiny_model_with(tiny_json(kByteLevel, R"(,"th":256,"the":257},"merges":[["t","h"],["th","e"]],"x":{)"));
  const std::string dir = mla::test::scratch_dir("eval-tokenizer");
  const std::string text = write_scratch("eval/text.txt", "the theory of the thing is that the other thesis thrives there, then the theme");
  const auto ids = mla::test::run_cli("tokenize --tokenizer '" + model + "' --text '" + text + "'");
  BOOST_REQUIRE_MESSAGE(ids.exit_code == 0, ids.err);
  BOOST_CHECK(ids.out.find("257") != std::string::npos);  // the merges ran
  mla::test::write_text(dir + "/bos_ids.txt", "256 " + ids.out);  // config.json's bos_token_id is 256
  const std::string common = " --prompt-len 16 --steps 4 --cache-budget 6 --policy h2o --quiet";
  const auto a = mla::test::run_cli("eval --checkpoint '" + model + "' --text '" + text + "'" + common + " --out '" + dir + "/a'");
  BOOST_REQUIRE_MESSAGE(a.exit_code == 0, a.err);
  const auto b = mla::test::run_cli("eval --checkpoint '" + model + "' --tokens '" + dir + "/bos_ids.txt'" + common + " --out '" + dir + "/b'");
  BOOST_REQUIRE_MESSAGE(b.exit_code == 0, b.err);
  BOOST_CHECK(mla::test::read_text(dir + "/a/eval.csv") == mla::test::read_text(dir + "/b/eval.csv"));
  BOOST_CHECK(mla::test::read_text(dir + "/a/report.json").find("ids of the checkpoint's tokenizer") != std::string::npos);
  const auto none = mla::test::run_cli("eval --checkpoint '" + mla::test::data_dir() + "/golden/whole-model/model' --text '" +
                                       text + "'" + common + " --out '" + dir + "/c'");
  BOOST_CHECK_NE(none.exit_code, 0);
  BOOST_CHECK_MESSAGE(none.err.find("holds no tokenizer.json or tiktoken.model and the model is not byte-level") != std::string::npos &&
                          none.err.find("--tokens") != std::string::npos, none.err);
  BOOST_CHECK(!fs::exists(dir + "/c/eval.csv"));
}

// run, decode and sweep --text on a checkpoint with its own tokenizer: the outputs of --tokens with
// BOS + the tokenizer's ids (scores.csv's first four columns; decode.csv, summary.csv; layers.csv,
// overlap.csv), and run's token_text column holds each token's text.
BOOST_AUTO_TEST_CASE(run_decode_sweep_text_equal_tokens) {
  const std::string model = tiny_model_with(tiny_json(kByteLevel, R"(,"th":256,"the":257},"merges":[["t","h"],["th","e"]],"x":{)"));
  const std::string dir = mla::test::scratch_dir("text-commands");
  const std::string text = write_scratch("cmds/text.txt", "the theory of the thing is that the other thesis thrives there, then the theme");
  const auto ids = mla::test::run_cli("tokenize --tokenizer '" + model + "' --text '" + text + "'");
  BOOST_REQUIRE_MESSAGE(ids.exit_code == 0, ids.err);
  mla::test::write_text(dir + "/bos_ids.txt", "256 " + ids.out);
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"run", {"scores.csv"}},
      {"decode --prompt-len 20 --steps 10 --cache-budget 8 --policy h2o", {"decode.csv", "summary.csv"}},
      {"sweep --layers 0,1", {"layers.csv", "overlap.csv"}},
  };
  for (const auto& [cmd, files] : commands) {
    const std::string name = cmd.substr(0, cmd.find(' '));
    const auto a = mla::test::run_cli(cmd + " --checkpoint '" + model + "' --text '" + text + "' --quiet --out '" + dir + "/" + name + "-text'");
    BOOST_REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    const auto b = mla::test::run_cli(cmd + " --checkpoint '" + model + "' --tokens '" + dir + "/bos_ids.txt' --quiet --out '" + dir + "/" + name + "-ids'");
    BOOST_REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    for (const std::string& f : files) {
      std::string x = mla::test::read_text(dir + "/" + name + "-text/" + f);
      const std::string y = mla::test::read_text(dir + "/" + name + "-ids/" + f);
      if (f == "scores.csv" && name == "run") {  // drop the token_text column
        BOOST_CHECK(x.find("1,") != std::string::npos && x.find(",\"the\"\n") != std::string::npos);
        std::string cut;
        std::istringstream lines(x);
        for (std::string line; std::getline(lines, line);) {
          size_t at = 0;
          for (int k = 0; k < 4; ++k) at = line.find(',', at) + 1;  // after the 4th comma: token_text
          cut += line.substr(0, at - 1) + "\n";
        }
        x = cut;
      }
      BOOST_CHECK_MESSAGE(x == y, name + ": " + f + " differs between --text and --tokens");
    }
  }
}

// ---- --task on a tokenizer model (docs/eval.md §7) -------------------------------------------

std::string heldout_text() { return mla::test::read_text(mla::test::data_dir() + "/../../models/tiny-mla-recall/eval/heldout.txt"); }

std::vector<int64_t> as_ids(const std::vector<uint32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

// Under DeepSeek-V3's tokenizer a sample is exactly L of its ids; they decode to the sample's text;
// the question's and the answer's ids are what the tokenizer gives each on its own, where the
// byte offsets put them; the filler before the first needle is a run of the file's own ids; eval's
// P and N follow from the ids. A context too short names the tokens the parts take.
BOOST_AUTO_TEST_CASE(task_samples_in_tokens) {
  const auto tok = load("deepseek-v3");
  const std::string text = heldout_text();
  const std::vector<mla::TaskFiller> filler = mla::tokenize_filler({{"heldout.txt", text}}, *tok);
  const std::vector<int64_t> file_ids = as_ids(filler.at(0).ids);
  BOOST_REQUIRE_LT(file_ids.size(), text.size() / 2);  // merges ran: far fewer ids than bytes
  BOOST_CHECK_EQUAL(std::string(mla::context_unit(*tok)), "tokens");
  for (mla::TaskKind kind : {mla::TaskKind::Passkey, mla::TaskKind::NiahMultikey, mla::TaskKind::NiahMultivalue,
                             mla::TaskKind::VariableTracking})
    for (mla::QueryPlacement q : {mla::QueryPlacement::Agnostic, mla::QueryPlacement::Aware}) {
      BOOST_TEST_CONTEXT(mla::task_name(kind) << " " << mla::query_placement_name(q)) {
        const mla::TaskRequest r{kind, 300, 40, 1, 5, q, true};
        const mla::TaskSample s = mla::make_task_sample(r, filler, *tok);
        BOOST_TEST(s.ids.size() == 300u);
        BOOST_TEST(tok->decode(std::vector<uint32_t>(s.ids.begin(), s.ids.end())) == s.text);
        BOOST_TEST(s.text.substr(static_cast<size_t>(s.answer_at), s.answer.size()) == s.answer);
        BOOST_TEST(s.text.substr(static_cast<size_t>(s.answer_at) + s.answer.size()) == ".\n");
        const std::vector<int64_t> answer = as_ids(tok->encode(s.answer));
        BOOST_TEST_REQUIRE(s.answer_tokens == static_cast<int64_t>(answer.size()));
        BOOST_TEST(std::vector<int64_t>(s.ids.begin() + s.answer_first, s.ids.begin() + s.answer_first + s.answer_tokens) == answer);
        const std::string question = s.text.substr(static_cast<size_t>(s.question_at), static_cast<size_t>(s.answer_at - s.question_at));
        BOOST_TEST(std::vector<int64_t>(s.ids.begin() + s.question_first, s.ids.begin() + s.answer_first) == as_ids(tok->encode(question)));
        BOOST_TEST(s.answer_first + s.answer_tokens + static_cast<int64_t>(tok->encode(".\n").size()) == 300);
        // the filler up to the first needle: k ids of the file from the sample's offset
        size_t k = 0, bytes = 0;
        while (bytes < static_cast<size_t>(s.needle_at.front()))
          bytes += tok->decode(std::vector<uint32_t>{static_cast<uint32_t>(s.ids[k++])}).size();
        BOOST_TEST(bytes == static_cast<size_t>(s.needle_at.front()));
        BOOST_TEST(std::equal(s.ids.begin(), s.ids.begin() + static_cast<int64_t>(k), file_ids.begin() + s.filler_offset));
        const int64_t a = s.answer_first + 1;  // the BOS is token 0
        if (q == mla::QueryPlacement::Aware) {
          BOOST_TEST((s.prompt_len == a - 1 && s.steps == s.answer_tokens));
        } else {
          BOOST_TEST((s.prompt_len == s.question_first + 1 && s.steps == a + s.answer_tokens - 1 - s.prompt_len));
        }
      }
    }
  // RULER's tasks: at most L ids that decode to the text; each reference's ids are the fewest whose
  // bytes cover it (the first starts at or before it, the last ends at or after it, dropping either
  // would not)
  const std::vector<std::string> words = mla::ruler_words({{"heldout.txt", text}});
  for (mla::TaskKind kind : mla::ruler_task_kinds()) {
    BOOST_TEST_CONTEXT(mla::task_name(kind)) {
      const mla::TaskSample s =
          mla::make_task_sample(mla::TaskRequest{kind, 1024, 0, 0, 3, mla::QueryPlacement::Agnostic, true}, filler, *tok, words);
      BOOST_TEST(s.ids.size() <= 1024u);
      if (kind != mla::TaskKind::Cwe) BOOST_TEST(s.ids.size() >= 900u, s.ids.size());  // cwe: as many words as --text gives
      BOOST_TEST(tok->decode(std::vector<uint32_t>(s.ids.begin(), s.ids.end())) == s.text);
      const std::vector<int64_t> at = mla::id_offsets(s.ids, *tok);
      size_t from = static_cast<size_t>(s.question_at);
      for (const mla::TaskReference& r : s.refs) {
        const size_t b = s.text.find(r.text, std::max<size_t>(from, static_cast<size_t>(at[static_cast<size_t>(r.first)])));
        BOOST_TEST_REQUIRE(b != std::string::npos);
        const size_t e = b + r.text.size();
        BOOST_TEST(at[static_cast<size_t>(r.first)] <= static_cast<int64_t>(b));
        BOOST_TEST(at[static_cast<size_t>(r.first) + 1] > static_cast<int64_t>(b));
        BOOST_TEST(at[static_cast<size_t>(r.first + r.tokens)] >= static_cast<int64_t>(e));
        BOOST_TEST(at[static_cast<size_t>(r.first + r.tokens) - 1] < static_cast<int64_t>(e));
        from = e;
      }
    }
  }
  try {
    (void)mla::make_task_sample(mla::TaskRequest{mla::TaskKind::Passkey, 20, 50, 0, 0, mla::QueryPlacement::Agnostic, true}, filler, *tok);
    BOOST_ERROR("a 20-token passkey sample was made");
  } catch (const mla::Error& e) {
    BOOST_CHECK_MESSAGE(std::string(e.what()).find("is too short for --task passkey: its needles, question and answer take ") !=
                                std::string::npos &&
                            std::string(e.what()).find(" tokens, so a context needs at least") != std::string::npos,
                        e.what());
  }
}

// A synthetic whole model (tiny geometry, DeepSeek-V3's vocab_size 129280 and bos_token_id 0) with
// DeepSeek-V3's tokenizer.json beside it.
std::string deepseek_v3_tokenizer_model() {
  static std::string dir;
  if (!dir.empty()) return dir;
  const std::string d = mla::test::scratch_dir("tokenizer-task-model") + "/ckpt";
  const auto s = mla::test::run_cli("synth --preset tiny --experts 4 --vocab 129280 --out '" + d + "'");
  BOOST_REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tokenizer_dir("deepseek-v3") + "/" + f, d + "/" + f, fs::copy_options::overwrite_existing);
  // DeepSeek-V3's config.json names its BOS, <｜begin▁of▁sentence｜> = 0; synth's config has none
  std::string config = mla::test::read_text(d + "/config.json");
  const size_t text_config = config.find("\"text_config\": {");
  BOOST_REQUIRE(config.find("bos_token_id") == std::string::npos && text_config != std::string::npos);
  mla::test::write_text(d + "/config.json", config.insert(text_config + 16, "\"bos_token_id\": 0, "));
  return dir = d;
}

// eval --task passkey on that model: the samples are --context tokens of its tokenizer, every
// output is written, each sample's P and N are those of the tokenizer's ids of the question and the
// key; inspect --json names the tokenizer.
BOOST_AUTO_TEST_CASE(task_passkey_on_a_tokenizer_model) {
  const std::string model = deepseek_v3_tokenizer_model();
  const std::string text = write_scratch("task/heldout.txt", heldout_text());
  const std::string out = mla::test::scratch_dir("tokenizer-task") + "/o";
  const auto r = mla::test::run_cli("eval --checkpoint '" + model + "' --text '" + text + "' --task passkey --context 200 "
                                    "--depths 0,100 --samples 2 --cache-budget 32 --policy streaming --quiet --threads 2 --out '" +
                                    out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_CHECK_MESSAGE(r.out.find("contexts in tokens of the checkpoint's tokenizer") != std::string::npos, r.out);
  const std::string csv = mla::test::read_text(out + "/tasks.csv");
  BOOST_CHECK(csv.rfind("task,query_placement,compress,policy,budget,compression_ratio,context,depth,samples,exact,", 0) == 0);
  BOOST_CHECK_EQUAL(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 2);  // (full, streaming) x 2 depths
  BOOST_CHECK_MESSAGE(csv.find("\npasskey,agnostic,decode,streaming,32,,200,100,2,") != std::string::npos, csv);
  const auto tok = load("deepseek-v3");
  const int64_t q = static_cast<int64_t>(tok->encode("\nWhat is the pass key? The pass key is ").size());
  const int64_t tail = static_cast<int64_t>(tok->encode(".\n").size());
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_CHECK_EQUAL(std::string(j["task"]["context_unit"].get_string().value()), "tokens");
  int64_t samples = 0, decoded = 0;
  for (simdjson::dom::element s : j["samples"].get_array()) {
    const std::string key(s["answer"].get_string().value());
    BOOST_REQUIRE_EQUAL(key.size(), 5u);
    const int64_t A = static_cast<int64_t>(tok->encode(key).size());
    const int64_t P = s["prompt_len"].get_int64().value(), N = s["steps"].get_int64().value();
    BOOST_CHECK_EQUAL(P, 1 + 200 - q - A - tail);  // BOS + the haystack
    BOOST_CHECK_EQUAL(N, q + A - 1);
    BOOST_CHECK_EQUAL(s["answer_position"].get_int64().value(), P + q);
    ++samples;
    decoded += N;
  }
  BOOST_CHECK_EQUAL(samples, 4);
  const std::string per = mla::test::read_text(out + "/task_samples.csv");
  BOOST_CHECK_EQUAL(std::count(per.begin(), per.end(), '\n'), 1 + 4 * 2);
  const std::string ecsv = mla::test::read_text(out + "/eval.csv");
  BOOST_CHECK_EQUAL(std::count(ecsv.begin(), ecsv.end(), '\n'), 1 + 2 * decoded);  // every decoded position, full and streaming
  const auto i = mla::test::run_cli("inspect '" + model + "' --json");
  BOOST_REQUIRE_MESSAGE(i.exit_code == 0, i.err);
  simdjson::dom::element ij = parser.parse(i.out);
  BOOST_CHECK_EQUAL(ij["tokenizer"]["vocab_size"].get_int64().value(), 128815);
  BOOST_CHECK(std::string(ij["tokenizer"]["format"].get_string().value()).find("tokenizer.json") != std::string::npos);
  BOOST_CHECK(ij["tokenizer"]["special_tokens"].get_array().size() > 0u);
  const auto none = mla::test::run_cli("inspect '" + mla::test::data_dir() + "/golden/whole-model/model' --json");
  BOOST_REQUIRE_MESSAGE(none.exit_code == 0, none.err);
  BOOST_CHECK(parser.parse(none.out)["tokenizer"].is_null());
}

BOOST_AUTO_TEST_SUITE_END()
