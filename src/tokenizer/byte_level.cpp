// src/tokenizer/byte_level.cpp — the tokenizer of a byte-level model (config.json
// "byte_level_vocab": true, docs/tokenizer.md): one id per byte, id = the byte's value, so that
// the layers above see text and a Tokenizer whatever the model.
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/tokenizer.hpp"

namespace mla {
namespace {

class ByteLevelTokenizer final : public Tokenizer {
 public:
  std::vector<uint32_t> encode(std::string_view text, int) const override {
    std::vector<uint32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] > 255)
        fail(ErrorKind::InvalidArgument, "decode: id " + std::to_string(ids[i]) + " (position " + std::to_string(i) +
                                             ") is not a byte (a byte-level vocabulary has ids 0-255)");
      out.push_back(static_cast<char>(ids[i]));
    }
    return out;
  }
  size_t vocab_size() const override { return 256; }
  const std::vector<AddedToken>& added_tokens() const override { return none_; }
  std::string format() const override { return kByteLevelFormat; }
  std::string file() const override { return ""; }
  std::vector<std::string> patterns() const override { return {}; }

 private:
  std::vector<AddedToken> none_;
};

}  // namespace

std::unique_ptr<Tokenizer> byte_level_tokenizer() { return std::make_unique<ByteLevelTokenizer>(); }

}  // namespace mla
