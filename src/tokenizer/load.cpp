// src/tokenizer/load.cpp — load_tokenizer: which file a PATH means, config.json's vocab_size bound.
#include <simdjson.h>

#include <filesystem>

#include "bpe_tokenizer.hpp"
#include "mla/error.hpp"
#include "mla/regular_file.hpp"

namespace mla {
namespace {

namespace fs = std::filesystem;

// config.json's vocab_size (top level, else text_config's) beside `dir`; 0 when there is none.
int64_t config_vocab_size(const fs::path& dir) {
  const fs::path cfg = dir / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return 0;
  simdjson::dom::parser parser;
  const simdjson::padded_string text(read_regular_file(cfg.string(), int64_t{64} << 20, ErrorKind::Config));
  simdjson::dom::element root;
  if (const auto err = parser.parse(text).get(root); err)
    fail(ErrorKind::Config, cfg.string() + ": not valid JSON (" + simdjson::error_message(err) + ")");
  int64_t v = 0;
  if (root["vocab_size"].get(v) == simdjson::SUCCESS) return v;
  if (root["text_config"]["vocab_size"].get(v) == simdjson::SUCCESS) return v;
  return 0;
}

}  // namespace

std::string find_tokenizer_file(const std::string& dir) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tiktoken.model"})
    if (fs::is_regular_file(fs::path(dir) / name, ec)) return (fs::path(dir) / name).string();
  return "";
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const TokenizerOptions& opt) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = find_tokenizer_file(path);
    if (file.empty())
      fail(ErrorKind::Io, path + ": holds neither tokenizer.json nor tiktoken.model");
  } else if (!fs::exists(path, ec)) {
    fail(ErrorKind::Io, path + ": no such file or directory");
  }
  const fs::path dir = fs::path(file).parent_path();
  const int64_t bound = opt.max_vocab_size > 0 ? opt.max_vocab_size : config_vocab_size(dir);
  const std::string name = fs::path(file).filename().string();
  tok::BpeSpec spec;
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
    spec = tok::read_hf_tokenizer_json(file);
  } else if (name.size() >= 6 && name.compare(name.size() - 6, 6, ".model") == 0) {
    const fs::path cfg = dir / "tokenizer_config.json";
    if (!fs::is_regular_file(cfg, ec))
      fail(ErrorKind::Io, file + ": tiktoken.model needs tokenizer_config.json beside it (" + cfg.string() + " is missing)");
    spec = tok::read_tiktoken_model(file, cfg.string(), opt.tiktoken_pattern);
  } else {
    fail(ErrorKind::Unsupported, file + ": not a tokenizer file (tokenizer.json or tiktoken.model)");
  }
  return tok::make_bpe_tokenizer(std::move(spec), bound);
}

}  // namespace mla
