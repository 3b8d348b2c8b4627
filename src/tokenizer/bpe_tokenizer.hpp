// src/tokenizer/bpe_tokenizer.hpp — the one engine behind both formats: added-token matching,
// a chain of pre-token splits, byte-level BPE by rank, decode. The format readers
// (hf_tokenizer_json.cpp, tiktoken_model.cpp) only fill a BpeSpec.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mla/tokenizer.hpp"
#include "regex.hpp"

namespace mla::tok {

// HF's SplitDelimiterBehavior.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// One step of the pre-tokenizer chain, applied to every piece the steps before it left.
struct PreTokenStep {
  enum class Kind { Split, PrefixSpace } kind = Kind::Split;
  std::shared_ptr<const Regex> regex;  // Split
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
};

// Open-addressing map uint64 -> uint64 (the BPE pair table: (left << 32 | right) -> (rank << 32 | merged)).
class PairTable {
 public:
  void reserve(size_t n);
  bool insert(uint64_t key, uint64_t value);  // false if the key was there (its value replaced)
  const uint64_t* find(uint64_t key) const;
  size_t size() const { return size_; }

 private:
  std::vector<uint64_t> keys_, values_;
  size_t size_ = 0, mask_ = 0;
};

struct BpeSpec {
  std::string format, file;
  // id -> bytes of the model's tokens (ids without a token: empty and absent from bytes_to_id).
  std::vector<std::string> token_bytes;
  // false: a token of the file that is not byte-level text (decode gives its UTF-8; BPE never
  // looks it up); empty = all true.
  std::vector<bool> bpe_token;
  PairTable pairs;           // adjacent ids -> (rank, merged id)
  bool ignore_merges = false;  // a pre-token that is a token is that token (tiktoken; HF's flag)
  std::vector<AddedToken> added;
  // Matching passes over the raw text, in order (HF: not normalized, then normalized; tiktoken:
  // one), each a list of indices into `added`.
  std::vector<std::vector<size_t>> added_passes;
  std::vector<PreTokenStep> steps;
  std::vector<std::string> patterns;  // for inspect: "as written -> as run"
};

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeSpec spec, int64_t max_vocab_size);

// The readers (one file each).
BpeSpec read_hf_tokenizer_json(const std::string& path);
BpeSpec read_tiktoken_model(const std::string& path, const std::string& config_path, const std::string& pattern);

// GPT-2's byte <-> printable-character table of byte-level BPE: the UTF-8 of byte b's character.
const std::string& byte_level_char(unsigned char b);

}  // namespace mla::tok
