// src/checkpoint/tokens.cpp — token ids of a text file for byte-level models (mla/model.hpp).
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/model.hpp"

namespace mla {

std::vector<int64_t> byte_level_token_ids(const ModelConfig& cfg, std::string_view bytes, const std::string& what) {
  if (!cfg.byte_level_vocab)
    fail(ErrorKind::InvalidArgument, what + ": the model is not byte-level (config.json has no \"byte_level_vocab\": true), "
                                            "so a text cannot be tokenized here; pass token ids with --tokens");
  if (cfg.attention.vocab_size < 256)
    fail(ErrorKind::Config, what + ": a byte-level model needs vocab_size >= 256, the config has " +
                                std::to_string(cfg.attention.vocab_size));
  std::vector<int64_t> ids;
  ids.reserve(bytes.size() + 1);
  if (cfg.bos_token_id >= 0) ids.push_back(cfg.bos_token_id);
  for (unsigned char c : bytes) ids.push_back(static_cast<int64_t>(c));
  return ids;
}

std::string byte_level_token_text(const ModelConfig& cfg, int64_t id) {
  if (id == cfg.bos_token_id) return "<bos>";
  if (id == cfg.eos_token_id) return "<eos>";
  if (id < 0 || id > 255) return "<id " + std::to_string(id) + ">";
  const char c = static_cast<char>(id);
  switch (c) {
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\\': return "\\\\";
    default: break;
  }
  if (id >= 0x20 && id < 0x7f) return std::string(1, c);
  static const char hex[] = "0123456789abcdef";
  return std::string("\\x") + hex[id >> 4] + hex[id & 15];
}

std::string token_bytes_text(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else out += c;
  }
  return printable_text(out, 256);
}

}  // namespace mla
