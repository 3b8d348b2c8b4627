// mla/tokenizer.hpp — a checkpoint's own tokenizer: byte-level BPE from HF `tokenizer.json` or
// from `tiktoken.model` (docs/tokenizer.md).
//
// encode(text) gives the ids the format's reference library gives with no special tokens added
// (HF tokenizers' encode(text, add_special_tokens=False); tiktoken's encode(text,
// allowed_special="all")): added / special-token markers written in the text are still matched,
// as both do. decode(ids) gives the bytes back; decode(encode(x)) == x for every valid UTF-8 x.
//
// Errors (mla::Error, one line each): an unsupported component of tokenizer.json (named, with the
// supported ones listed), a merge naming an unknown token, a bad base64 line or a duplicate rank
// of tiktoken.model (the line named), a vocabulary larger than config.json's vocab_size, text that
// is not UTF-8 (the byte offset named), an id outside the vocabulary in decode.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

// An added token of tokenizer.json (HF's AddedToken) or a special token of tiktoken.
struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = true;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

struct TokenizerOptions {
  // tiktoken.model only: the pre-token pattern (Rust-regex syntax, as Kimi's tokenization_kimi.py
  // writes it); empty = Kimi's.
  std::string tiktoken_pattern;
  // > 0: the vocabulary (largest id + 1) must not exceed it (config.json's vocab_size).
  int64_t max_vocab_size = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ids of `text` (UTF-8). `threads` > 1 runs the BPE of the pre-tokens on that many threads;
  // the ids do not depend on it.
  virtual std::vector<uint32_t> encode(std::string_view text, int threads = 1) const = 0;
  // The bytes of `ids` concatenated (an added token gives its content).
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  virtual size_t vocab_size() const = 0;  // largest id + 1
  virtual const std::vector<AddedToken>& added_tokens() const = 0;
  virtual std::string format() const = 0;   // "tokenizer.json (byte-level BPE)" / "tiktoken.model"
  virtual std::string file() const = 0;     // the file it was read from
  virtual std::vector<std::string> patterns() const = 0;  // pre-token patterns, as given and as run
};

// PATH: tokenizer.json, tiktoken.model, or a directory holding one of them (a checkpoint
// directory; tiktoken.model wants tokenizer_config.json beside it). When the directory (or the
// file's directory) holds config.json, its vocab_size bounds the vocabulary unless
// opt.max_vocab_size is set.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const TokenizerOptions& opt = {});

// The tokenizer of a byte-level model (config.json "byte_level_vocab": true): id = byte, vocabulary
// 256, no added tokens; format() is kByteLevelFormat.
inline constexpr const char* kByteLevelFormat = "byte-level (one id per byte)";
std::unique_ptr<Tokenizer> byte_level_tokenizer();

// The tokenizer file of directory `dir` ("" when it holds neither tokenizer.json nor
// tiktoken.model).
std::string find_tokenizer_file(const std::string& dir);

// The byte offset of the first byte of `text` that does not start or continue valid UTF-8, or
// text.size() when all of it is valid.
size_t first_invalid_utf8(std::string_view text);

}  // namespace mla
