// tests/golden/golden_synth.cpp — writes the synthetic checkpoint a golden fixture was made
// from, for scripts/crosscheck --regenerate-fixtures (the Python side needs it on disk).
//
// It calls exactly what tests/unit/test_golden.cpp calls to re-synthesize the checkpoint:
//   --preset NAME       synthesize_checkpoint(opts)              (kimi-k2.6, tiny)
//   --config FILE       synthesize_checkpoint(opts, a model of load_config(FILE))  (odd geometries)
// so the checkpoint HF reads and the one the C++ test loads are the same bytes.
//
// usage: golden_synth (--preset NAME | --config FILE) --out DIR [--seed N] [--dtype bf16]
//                     [--layers 0,1] [--vocab N] [--shards N]
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/synth.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"

namespace {

std::vector<int64_t> parse_layers(const std::string& text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty()) mla::fail(mla::ErrorKind::InvalidArgument, "--layers: empty item in '" + text + "'");
    out.push_back(std::stoll(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    mla::SynthOptions opts;
    std::string config_path;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) mla::fail(mla::ErrorKind::InvalidArgument, "flag " + flag + " needs a value");
      const std::string value = argv[++i];
      if (flag == "--preset") opts.preset = value;
      else if (flag == "--config") config_path = value;
      else if (flag == "--out") opts.out_dir = value;
      else if (flag == "--seed") opts.seed = std::stoull(value);
      else if (flag == "--dtype") opts.dtype = value;
      else if (flag == "--layers") opts.layers = parse_layers(value);
      else if (flag == "--vocab") opts.vocab = std::stoll(value);
      else if (flag == "--shards") opts.shards = std::stoll(value);
      else mla::fail(mla::ErrorKind::InvalidArgument, "unknown flag " + flag);
    }
    if (opts.out_dir.empty()) mla::fail(mla::ErrorKind::InvalidArgument, "--out DIR is required");
    if (config_path.empty()) {
      mla::synthesize_checkpoint(opts);
    } else {
      mla::ModelConfig model;  // the attention of config_path alone
      model.attention = mla::load_config(config_path);
      mla::synthesize_checkpoint(opts, model);
    }
    std::printf("golden_synth: wrote %s\n", opts.out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "golden_synth: error: %s\n", e.what());
    return 1;
  }
}
