// src/tokenizer/tiktoken_model.cpp — tiktoken.model (+ tokenizer_config.json) -> BpeSpec.
//
// tiktoken.model: one line per token, "BASE64 RANK"; the rank is the id. tiktoken's BPE merges the
// adjacent pair whose concatenation has the lowest rank; as a pair table that is, for every token t
// and every split t = a + b with a and b tokens, (a, b) -> (rank t, t). A pre-token that is itself a
// token is that token (tiktoken looks it up before merging: ignore_merges).
// Pre-tokens: the pattern's matches only (text between matches is dropped, as tiktoken's find_iter
// does) = a Split with invert and Removed. Special tokens: tokenizer_config.json's
// added_tokens_decoder; ids of [vocabulary, vocabulary + 256) it leaves out are Kimi's
// "<|reserved_token_N|>" (tokenization_kimi.py), all matched in the text (allowed_special="all").
#include <simdjson.h>

#include <string>
#include <unordered_map>

#include "bpe_tokenizer.hpp"
#include "mla/error.hpp"
#include "mla/regular_file.hpp"

namespace mla::tok {
namespace {

constexpr size_t kReservedSpecial = 256;  // Kimi's num_reserved_special_tokens

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with padding; false on any other character, a bad length or bad padding.
bool base64_decode(std::string_view s, std::string& out) {
  out.clear();
  if (s.empty() || s.size() % 4 != 0) return false;
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=' && i + 4 == s.size() && k >= 2) { v[k] = 0; ++pad; continue; }
      if (pad > 0) return false;
      v[k] = base64_value(c);
      if (v[k] < 0) return false;
    }
    const uint32_t n = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(n & 0xFF);
  }
  return true;
}

void read_ranks(const std::string& path, BpeSpec& spec) {
  const std::string text = read_regular_file(path, int64_t{1} << 30, ErrorKind::Config);
  std::unordered_map<std::string, uint32_t> seen;
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ": line " + std::to_string(line_no);
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || !base64_decode(line.substr(0, sp), bytes))
      fail(ErrorKind::Config, where + ": not \"BASE64 RANK\" (bad base64: \"" + printable_text(line.substr(0, sp)) + "\")");
    uint64_t rank = 0;
    const std::string_view r = line.substr(sp + 1);
    if (r.empty() || r.size() > 10) fail(ErrorKind::Config, where + ": rank \"" + printable_text(r) + "\" is not a number");
    for (char c : r) {
      if (c < '0' || c > '9') fail(ErrorKind::Config, where + ": rank \"" + printable_text(r) + "\" is not a number");
      rank = rank * 10 + static_cast<uint64_t>(c - '0');
    }
    if (rank >= (uint64_t{1} << 31)) fail(ErrorKind::Config, where + ": rank " + std::to_string(rank) + " is too large");
    if (rank >= spec.token_bytes.size()) spec.token_bytes.resize(rank + 1);
    if (!spec.token_bytes[rank].empty()) fail(ErrorKind::Config, where + ": duplicate rank " + std::to_string(rank));
    if (!seen.emplace(bytes, static_cast<uint32_t>(rank)).second)
      fail(ErrorKind::Config, where + ": the token of rank " + std::to_string(rank) + " already has rank " +
                                  std::to_string(seen[bytes]));
    spec.token_bytes[rank] = bytes;
  }
  if (spec.token_bytes.empty()) fail(ErrorKind::Config, path + ": no tokens");
  spec.pairs.reserve(spec.token_bytes.size() * 8);
  for (size_t id = 0; id < spec.token_bytes.size(); ++id) {
    const std::string& t = spec.token_bytes[id];
    for (size_t k = 1; k < t.size(); ++k) {
      const auto a = seen.find(t.substr(0, k));
      if (a == seen.end()) continue;
      const auto b = seen.find(t.substr(k));
      if (b == seen.end()) continue;
      spec.pairs.insert((uint64_t{a->second} << 32) | b->second, (uint64_t{id} << 32) | id);
    }
  }
}

void read_specials(const std::string& path, BpeSpec& spec) {
  simdjson::dom::parser parser;
  const simdjson::padded_string text(read_regular_file(path, int64_t{64} << 20, ErrorKind::Config));
  simdjson::dom::element root;
  if (const auto err = parser.parse(text).get(root); err)
    fail(ErrorKind::Config, path + ": not valid JSON (" + simdjson::error_message(err) + ")");
  std::string_view cls;
  if (root["tokenizer_class"].get(cls) != simdjson::SUCCESS || cls != "TikTokenTokenizer")
    fail(ErrorKind::Unsupported, path + ": tokenizer_class is not \"TikTokenTokenizer\" (tiktoken.model needs it)");
  const size_t base = spec.token_bytes.size();
  std::vector<bool> have(base + kReservedSpecial, false);
  simdjson::dom::object decoder;
  if (root["added_tokens_decoder"].get(decoder) == simdjson::SUCCESS) {
    for (auto field : decoder) {
      AddedToken a;
      uint64_t id = 0;
      std::string_view content;
      for (char c : field.key)
        if (c < '0' || c > '9' || field.key.size() > 10) fail(ErrorKind::Config, path + ": added_tokens_decoder key \"" + printable_text(field.key) + "\" is not an id");
      for (char c : field.key) id = id * 10 + static_cast<uint64_t>(c - '0');
      if (field.value["content"].get(content) != simdjson::SUCCESS || content.empty())
        fail(ErrorKind::Config, path + ": added_tokens_decoder[\"" + std::string(field.key) + "\"] has no content");
      if (id >= (uint64_t{1} << 31)) fail(ErrorKind::Config, path + ": added token id " + std::to_string(id) + " is too large");
      a.id = static_cast<uint32_t>(id);
      a.content = std::string(content);
      if (id < have.size()) have[id] = true;
      spec.added.push_back(std::move(a));
    }
  }
  for (size_t id = base; id < base + kReservedSpecial; ++id)
    if (!have[id]) spec.added.push_back({"<|reserved_token_" + std::to_string(id) + "|>", static_cast<uint32_t>(id)});
  spec.added_passes.assign(1, {});
  for (size_t k = 0; k < spec.added.size(); ++k) spec.added_passes[0].push_back(k);
}

}  // namespace

BpeSpec read_tiktoken_model(const std::string& path, const std::string& config_path, const std::string& pattern) {
  BpeSpec spec;
  spec.format = "tiktoken.model (tiktoken BPE)";
  spec.file = path;
  spec.ignore_merges = true;
  read_ranks(path, spec);
  read_specials(config_path, spec);
  const std::string written = pattern.empty() ? kKimiPattern : pattern;
  const std::string pcre = translate_pattern(written, path + ": the pre-token pattern");
  PreTokenStep s;
  s.regex = std::make_shared<const Regex>(pcre, path + ": the pre-token pattern");
  s.behavior = SplitBehavior::Removed;
  s.invert = true;
  spec.steps.push_back(s);
  spec.patterns.push_back(written == pcre ? written : written + "  ->  " + pcre);
  return spec;
}

}  // namespace mla::tok
