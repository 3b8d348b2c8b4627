// src/model/tokens.cpp — token ids of a text file for byte-level models (mla/model.hpp).
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

}  // namespace mla
