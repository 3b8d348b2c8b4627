// src/cli/cmd_tokenize.cpp — `mla-h2o tokenize`: a checkpoint's own tokenizer (mla/tokenizer.hpp,
// docs/tokenizer.md) on a text file, or its ids back to bytes.
//
//   --text FILE      the ids of FILE's bytes (UTF-8) to stdout, whitespace-separated: the format
//                    `--tokens FILE` reads. No BOS, no special tokens added; special-token markers
//                    written in the text are matched as the tokenizer's reference library does.
//   --decode FILE    the bytes of FILE's ids to stdout.
// Everything is computed before the first byte is written: a bad input is one error line and no
// output.
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "mla/error.hpp"
#include "mla/regular_file.hpp"
#include "mla/tokenizer.hpp"

namespace mla::cli {
namespace {

CommandSpec tokenize_spec() {
  CommandSpec spec;
  spec.name = "tokenize";
  spec.synopsis =
      "mla-h2o tokenize: a checkpoint's own tokenizer (tokenizer.json byte-level BPE, or tiktoken.model)\n"
      "on a text file, id for id as HF tokenizers / tiktoken; or ids back to bytes.";
  spec.usage = "mla-h2o tokenize --tokenizer PATH (--text FILE | --decode IDS_FILE) [--threads N]";
  spec.flags = {
      {"tokenizer", "PATH",
       "a checkpoint directory, a directory holding tokenizer.json or tiktoken.model (+ tokenizer_config.json), "
       "or the file itself; config.json beside it bounds the vocabulary by its vocab_size", ""},
      {"text", "FILE", "UTF-8 text: its ids to stdout, whitespace-separated (no BOS, no special tokens added)", ""},
      {"decode", "IDS_FILE", "whitespace- or comma-separated ids: their bytes to stdout", ""},
      {"threads", "N", "threads for the BPE of the pre-tokens (the ids do not depend on it)", "1"},
      {"tokenizer-pattern", "REGEX", "tiktoken.model only: the pre-token pattern (Rust regex syntax)",
       "Kimi's (tokenization_kimi.py)"},
  };
  return spec;
}

std::string ids_text(const std::vector<uint32_t>& ids) {
  std::string out;
  out.reserve(ids.size() * 7);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  if (!ids.empty()) out += '\n';
  return out;
}

std::vector<uint32_t> read_ids(const std::string& path) {
  const std::string text = read_regular_file(path, int64_t{1} << 32, ErrorKind::InvalidArgument);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return {};
  std::vector<uint32_t> ids;
  const std::vector<int64_t> v = parse_int_list(text, "--decode " + path);
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] > int64_t{0xFFFFFFFF})
      fail(ErrorKind::InvalidArgument, "--decode " + path + ": id " + std::to_string(v[i]) + " (position " +
                                           std::to_string(i) + ") is out of range");
    ids.push_back(static_cast<uint32_t>(v[i]));
  }
  return ids;
}

}  // namespace

int cmd_tokenize(const std::vector<std::string>& argv) {
  const CommandSpec spec = tokenize_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  if (!a.has("tokenizer")) fail(ErrorKind::InvalidArgument, "--tokenizer PATH is required (see mla-h2o tokenize --help)");
  if (a.has("text") == a.has("decode"))
    fail(ErrorKind::InvalidArgument, "give exactly one of --text FILE and --decode IDS_FILE (see mla-h2o tokenize --help)");
  const int threads = static_cast<int>(a.integer("threads", 1, 1, 256));
  TokenizerOptions opt;
  opt.tiktoken_pattern = a.str("tokenizer-pattern");
  const auto tok = load_tokenizer(a.str("tokenizer"), opt);
  std::string out;
  if (a.has("text")) {
    const std::string text = read_regular_file(a.str("text"), int64_t{1} << 32, ErrorKind::InvalidArgument);
    try {
      out = ids_text(tok->encode(text, threads));
    } catch (const Error& e) {
      throw Error(e.kind(), "--text " + a.str("text") + ": " + e.what());
    }
  } else {
    out = tok->decode(read_ids(a.str("decode")));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace mla::cli
