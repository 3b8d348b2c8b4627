// src/tokenizer/hf_tokenizer_json.cpp — HF tokenizers' tokenizer.json (byte-level BPE) -> BpeSpec.
//
// Supported (anything else is one error naming the component and listing these):
//   normalizer      null, or a Sequence with no normalizers
//   pre_tokenizer   Sequence, Split (Regex or String; Isolated, Removed, MergedWithPrevious,
//                   MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex =
//                   GPT-2's pattern; it must come last), Digits (individual_digits)
//   model           BPE: vocab {token: id}; merges "a b" or ["a", "b"] (rank = index); ignore_merges
//   added_tokens    special, lstrip, rstrip, single_word, normalized
//   post_processor  null, ByteLevel, TemplateProcessing, or a Sequence of them (none adds ids when no
//                   special tokens are asked for)
//   decoder         ByteLevel (or null)
#include <simdjson.h>

#include <string>
#include <unordered_map>

#include "bpe_tokenizer.hpp"
#include "mla/error.hpp"
#include "mla/regular_file.hpp"

namespace mla::tok {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

constexpr const char* kSupportedPre = "Sequence, Split, ByteLevel, Digits";

struct Reader {
  std::string file;

  [[noreturn]] void bad(const std::string& where, const std::string& why) const {
    fail(ErrorKind::Unsupported, file + ": " + where + ": " + why);
  }
  std::string type_of(element e, const std::string& where) const {
    if (!e.is_object()) bad(where, "not an object");
    std::string_view t;
    if (e["type"].get(t) != simdjson::SUCCESS) bad(where, "no \"type\"");
    return std::string(t);
  }
  bool boolean(element obj, const char* key, bool fallback, const std::string& where) const {
    element v;
    if (obj[key].get(v) != simdjson::SUCCESS || v.is_null()) return fallback;
    if (!v.is_bool()) bad(where + "." + key, "not true/false");
    return v.get_bool().value();
  }
  std::string string(element obj, const char* key, const std::string& where) const {
    std::string_view s;
    if (obj[key].get(s) != simdjson::SUCCESS) bad(where + "." + key, "missing or not a string");
    return std::string(s);
  }
  // Absent, null, false, 0 or "" (a BPE option this reader does not implement must be off).
  void must_be_off(element obj, const char* key, const std::string& where) const {
    element v;
    if (obj[key].get(v) != simdjson::SUCCESS || v.is_null()) return;
    if ((v.is_bool() && !v.get_bool().value()) || (v.is_string() && v.get_string().value().empty())) return;
    bad(where + "." + key, "is set; this reader supports byte-level BPE without it");
  }
};

SplitBehavior behavior_of(const Reader& r, const std::string& b, const std::string& where) {
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  r.bad(where, "behavior \"" + b + "\" is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
}

void add_split(BpeSpec& spec, const std::string& written, const std::string& pcre, SplitBehavior b, bool invert,
               const std::string& where) {
  PreTokenStep s;
  s.regex = std::make_shared<const Regex>(pcre, spec.file + ": " + where);
  s.behavior = b;
  s.invert = invert;
  spec.steps.push_back(s);
  spec.patterns.push_back(written == pcre ? written : written + "  ->  " + pcre);
}

void read_pre_tokenizer(const Reader& r, element e, const std::string& where, BpeSpec& spec, bool& byte_level) {
  const std::string type = r.type_of(e, where);
  if (byte_level) r.bad(where, type + " after ByteLevel (ByteLevel must be the last pre-tokenizer)");
  if (type == "Sequence") {
    array items;
    if (e["pretokenizers"].get(items) != simdjson::SUCCESS) r.bad(where, "Sequence without \"pretokenizers\"");
    size_t k = 0;
    for (element item : items) read_pre_tokenizer(r, item, where + ".pretokenizers[" + std::to_string(k++) + "]", spec, byte_level);
  } else if (type == "Split") {
    element pat;
    if (e["pattern"].get(pat) != simdjson::SUCCESS || !pat.is_object()) r.bad(where, "Split without a \"pattern\" object");
    std::string_view text;
    std::string pcre, written;
    if (pat["Regex"].get(text) == simdjson::SUCCESS) {
      written = std::string(text);
      pcre = translate_pattern(text, r.file + ": " + where);
    } else if (pat["String"].get(text) == simdjson::SUCCESS) {
      written = std::string(text);
      pcre = escape_literal(text);
    } else {
      r.bad(where + ".pattern", "neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    add_split(spec, written, pcre, behavior_of(r, r.string(e, "behavior", where), where + ".behavior"),
              r.boolean(e, "invert", false, where), where);
  } else if (type == "Digits") {
    const bool each = r.boolean(e, "individual_digits", false, where);
    add_split(spec, "\\p{N} (Digits)", "\\p{N}", each ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false, where);
  } else if (type == "ByteLevel") {
    if (r.boolean(e, "add_prefix_space", true, where)) spec.steps.push_back({PreTokenStep::Kind::PrefixSpace, nullptr, {}, false});
    if (r.boolean(e, "use_regex", true, where))
      add_split(spec, kGpt2Pattern, translate_pattern(kGpt2Pattern, "GPT-2's pattern"), SplitBehavior::Isolated, false, where);
    byte_level = true;
  } else {
    r.bad(where, "pre-tokenizer \"" + type + "\" is not supported (supported: " + kSupportedPre + ")");
  }
}

void read_post_processor(const Reader& r, element e, const std::string& where) {
  if (e.is_null()) return;
  const std::string type = r.type_of(e, where);
  if (type == "ByteLevel" || type == "TemplateProcessing") return;
  if (type == "Sequence") {
    array items;
    if (e["processors"].get(items) != simdjson::SUCCESS) r.bad(where, "Sequence without \"processors\"");
    size_t k = 0;
    for (element item : items) read_post_processor(r, item, where + ".processors[" + std::to_string(k++) + "]");
    return;
  }
  r.bad(where, "post-processor \"" + type + "\" is not supported (supported: ByteLevel, TemplateProcessing, Sequence of them)");
}

void read_fixed_components(const Reader& r, object root) {
  for (const char* key : {"truncation", "padding"}) {
    element v;
    if (root[key].get(v) == simdjson::SUCCESS && !v.is_null()) r.bad(key, "is set (only null is supported)");
  }
  element n;
  if (root["normalizer"].get(n) == simdjson::SUCCESS && !n.is_null()) {
    const std::string type = r.type_of(n, "normalizer");
    array items;
    if (type != "Sequence" || n["normalizers"].get(items) != simdjson::SUCCESS || items.size() != 0)
      r.bad("normalizer", "\"" + type + "\" is not supported (supported: null, or a Sequence with no normalizers)");
  }
  element post, dec;
  if (root["post_processor"].get(post) == simdjson::SUCCESS) read_post_processor(r, post, "post_processor");
  if (root["decoder"].get(dec) == simdjson::SUCCESS && !dec.is_null()) {
    const std::string type = r.type_of(dec, "decoder");
    if (type != "ByteLevel") r.bad("decoder", "\"" + type + "\" is not supported (supported: ByteLevel)");
  }
}

// A byte-level token ("Ġthe") as its bytes (" the"); false if some character is not in the table.
bool byte_level_bytes(std::string_view token, std::string& out) {
  static const std::unordered_map<std::string, unsigned char> inverse = [] {
    std::unordered_map<std::string, unsigned char> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_level_char(static_cast<unsigned char>(b)), static_cast<unsigned char>(b));
    return m;
  }();
  out.clear();
  for (size_t i = 0; i < token.size();) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    const auto it = inverse.find(std::string(token.substr(i, len)));
    if (it == inverse.end()) return false;
    out += static_cast<char>(it->second);
    i += len;
  }
  return true;
}


using VocabMap = std::unordered_map<std::string_view, uint32_t>;

// model.vocab -> spec.token_bytes / bpe_token; the map of the written tokens -> ids in `vocab`.
void read_vocab(const Reader& r, object model, BpeSpec& spec, VocabMap& vocab) {
  object v;
  if (model["vocab"].get(v) != simdjson::SUCCESS) r.bad("model.vocab", "missing or not an object");
  std::string bytes;
  for (auto field : v) {
    uint64_t id = 0;
    if (field.value.get(id) != simdjson::SUCCESS || id >= (uint64_t{1} << 31))
      r.bad("model.vocab", "token \"" + printable_text(field.key) + "\" has no valid id");
    if (!vocab.emplace(field.key, static_cast<uint32_t>(id)).second)
      r.bad("model.vocab", "token \"" + printable_text(field.key) + "\" listed twice");
    if (id >= spec.token_bytes.size()) {
      spec.token_bytes.resize(id + 1);
      spec.bpe_token.resize(id + 1, false);
    }
    if (!spec.token_bytes[id].empty()) r.bad("model.vocab", "id " + std::to_string(id) + " given to two tokens");
    const bool ok = byte_level_bytes(field.key, bytes);
    spec.token_bytes[id] = ok ? bytes : std::string(field.key);
    spec.bpe_token[id] = ok;
  }
}

uint32_t vocab_id(const Reader& r, const VocabMap& vocab, std::string_view token, const std::string& where) {
  const auto it = vocab.find(token);
  if (it == vocab.end()) r.bad(where, "\"" + printable_text(token) + "\" is not in the vocabulary");
  return it->second;
}

void read_merges(const Reader& r, object model, const VocabMap& vocab, BpeSpec& spec) {
  array merges;
  if (model["merges"].get(merges) != simdjson::SUCCESS) r.bad("model.merges", "missing or not an array");
  spec.pairs.reserve(merges.size());
  uint32_t rank = 0;
  std::string merged;
  for (element m : merges) {
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    std::string_view a, b;
    if (m.is_string()) {
      const std::string_view line = m.get_string().value();
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
        r.bad(where, "\"" + printable_text(line) + "\" is not two tokens separated by one space");
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else if (m.is_array() && m.get_array().value().size() == 2) {
      const array ab = m.get_array().value();
      if (ab.at(0).get(a) != simdjson::SUCCESS || ab.at(1).get(b) != simdjson::SUCCESS) r.bad(where, "not two strings");
    } else {
      r.bad(where, "neither \"a b\" nor [\"a\", \"b\"]");
    }
    merged.assign(a);
    merged += b;
    const uint64_t key = (uint64_t{vocab_id(r, vocab, a, where)} << 32) | vocab_id(r, vocab, b, where);
    spec.pairs.insert(key, (uint64_t{rank} << 32) | vocab_id(r, vocab, merged, where + " (merged)"));
    ++rank;
  }
}

// HF's AddedVocabulary::add_tokens ignores the written id: a token of the vocabulary keeps its id,
// any other gets the next id after the vocabulary and the added tokens before it. A file whose id
// differs would encode differently than HF, so it is refused.
uint32_t hf_added_id(const VocabMap& vocab, size_t model_size, const std::vector<AddedToken>& before,
                     const std::string& content) {
  const auto it = vocab.find(content);
  if (it != vocab.end()) return it->second;
  uint32_t max = 0;
  bool any = false;
  for (const AddedToken& a : before) {
    if (a.id >= max) max = a.id;
    any = true;
  }
  if (!any) return static_cast<uint32_t>(model_size);
  return max >= model_size || model_size == 0 ? max + 1 : static_cast<uint32_t>(model_size);
}

void read_added_tokens(const Reader& r, object root, const VocabMap& vocab, BpeSpec& spec) {
  array items;
  if (root["added_tokens"].get(items) != simdjson::SUCCESS) return;
  spec.added_passes.assign(2, {});  // HF: the tokens that are not normalized first, then the others
  size_t k = 0;
  for (element e : items) {
    const std::string where = "added_tokens[" + std::to_string(k) + "]";
    AddedToken a;
    uint64_t id = 0;
    if (e["id"].get(id) != simdjson::SUCCESS || id >= (uint64_t{1} << 31)) r.bad(where, "no valid \"id\"");
    a.id = static_cast<uint32_t>(id);
    a.content = r.string(e, "content", where);
    if (a.content.empty()) r.bad(where, "empty content");
    a.special = r.boolean(e, "special", false, where);
    a.lstrip = r.boolean(e, "lstrip", false, where);
    a.rstrip = r.boolean(e, "rstrip", false, where);
    a.single_word = r.boolean(e, "single_word", false, where);
    a.normalized = r.boolean(e, "normalized", !a.special, where);
    const uint32_t hf = hf_added_id(vocab, vocab.size(), spec.added, a.content);
    if (hf != a.id)
      r.bad(where, "id " + std::to_string(a.id) + ", but HF tokenizers gives \"" + printable_text(a.content) +
                       "\" id " + std::to_string(hf) + " (the vocabulary's id, else the next one after it)");
    spec.added_passes[a.normalized ? 1 : 0].push_back(spec.added.size());
    spec.added.push_back(std::move(a));
    ++k;
  }
}

void read_model(const Reader& r, object root, BpeSpec& spec, VocabMap& vocab) {
  element m;
  if (root["model"].get(m) != simdjson::SUCCESS) r.bad("model", "missing");
  const std::string type = r.type_of(m, "model");
  if (type != "BPE") r.bad("model", "\"" + type + "\" is not supported (supported: BPE)");
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"})
    r.must_be_off(m, key, "model");
  spec.ignore_merges = r.boolean(m, "ignore_merges", false, "model");
  read_vocab(r, m.get_object().value(), spec, vocab);
  read_merges(r, m.get_object().value(), vocab, spec);
}

}  // namespace

BpeSpec read_hf_tokenizer_json(const std::string& path) {
  Reader r{path};
  BpeSpec spec;
  spec.format = "tokenizer.json (HF tokenizers, byte-level BPE)";
  spec.file = path;
  simdjson::dom::parser parser;
  const simdjson::padded_string text(read_regular_file(path, int64_t{1} << 30, ErrorKind::Config));
  element root;
  if (const auto err = parser.parse(text).get(root); err)
    fail(ErrorKind::Config, path + ": not valid JSON (" + simdjson::error_message(err) + ")");
  if (!root.is_object()) fail(ErrorKind::Config, path + ": not a JSON object");
  read_fixed_components(r, root.get_object().value());
  element pre;
  bool byte_level = false;
  if (root["pre_tokenizer"].get(pre) == simdjson::SUCCESS && !pre.is_null())
    read_pre_tokenizer(r, pre, "pre_tokenizer", spec, byte_level);
  if (!byte_level) r.bad("pre_tokenizer", "has no ByteLevel step; only byte-level BPE is supported");
  VocabMap vocab;  // views into the parsed document
  read_model(r, root.get_object().value(), spec, vocab);
  read_added_tokens(r, root.get_object().value(), vocab, spec);
  return spec;
}

}  // namespace mla::tok
