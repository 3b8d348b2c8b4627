// src/cli/cmd_inspect.cpp — `mla-h2o inspect PATH [--config FILE] [--json]`.
//
// File mode (PATH is a .safetensors file, no --config): the header of that one file —
// metadata, then every tensor (name, dtype, shape, bytes, data offsets), in offset order.
// Checkpoint mode (PATH is a directory, or --config is given): every tensor of every shard
// with its shard, then the attention geometry parsed from config.json (all keys, RoPE/YaRN
// values, softmax scale), the layers whose attention tensors are all present, and the
// parameter count of layer 0's attention. Only headers are read (no tensor bytes).
// For a compressed-tensors checkpoint (Kimi's INT4 experts) also the quantization scheme, whether
// it can be dequantized here, and how many weights are stored pack-quantized.
// A broken file is one error line (`mla-h2o inspect: error: ...`) and exit status 1.
// Progress goes to stderr once reading the shard headers has taken over a second (the
// environment variable MLA_PROGRESS_AFTER=SECONDS changes the delay; 0 = always).
#include <charconv>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "mla/checkpoint.hpp"
#include "mla/error.hpp"
#include "mla/json_text.hpp"
#include "mla/tokenizer.hpp"
#include "mla/report.hpp"
#include "mla/rope.hpp"
#include "mla/safetensors.hpp"

namespace mla::cli {
namespace {
namespace fs = std::filesystem;

const CommandSpec kSpec = {
    "inspect",
    "list a safetensors file's or a checkpoint's tensors, and the checkpoint's attention geometry",
    "mla-h2o inspect PATH [--config FILE] [--json]",
    {
        {"config", "FILE", "config.json for a single .safetensors file (turns on checkpoint mode)", ""},
        {"json", "", "print one JSON object instead of text", ""},
    },
    1,
    "PATH  a .safetensors file, or a checkpoint directory (model.safetensors.index.json or model.safetensors)",
};

// Shortest decimal that reads back as the same double.
std::string num(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// 101124096 -> "101,124,096"
std::string grouped(uint64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

using Row = InspectRow;  // shard: the file name only ("" in file mode)

void print_rows_text(const std::vector<Row>& rows, bool with_shard) {
  size_t wname = 4, wshape = 5;
  for (const auto& r : rows) {
    wname = std::max(wname, r.info.name.size());
    wshape = std::max(wshape, shape_text(r.info.shape).size());
  }
  if (with_shard) std::printf("%-36s ", "shard");
  std::printf("%-*s  %-8s %-*s %14s  %s\n", static_cast<int>(wname), "name", "dtype", static_cast<int>(wshape), "shape",
              "bytes", "data_offsets");
  for (const auto& r : rows) {
    if (with_shard) std::printf("%-36s ", r.shard.c_str());
    std::printf("%-*s  %-8s %-*s %14s  [%" PRIu64 ", %" PRIu64 ")\n", static_cast<int>(wname), r.info.name.c_str(),
                std::string(dtype_name(r.info.dtype)).c_str(), static_cast<int>(wshape), shape_text(r.info.shape).c_str(),
                grouped(r.info.nbytes()).c_str(), r.info.begin, r.info.end);
  }
}

int inspect_file(const std::string& path, bool json) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  std::vector<Row> rows;
  for (const auto& t : f.tensors()) rows.push_back({"", t});
  if (json) {
    std::fputs(inspect_file_json(InspectedFile{path, f.file_size(), f.header_size(), f.metadata(), rows}).c_str(), stdout);
    return 0;
  }
  std::printf("file %s: %s bytes, header %s bytes, %zu tensors\n", path.c_str(), grouped(f.file_size()).c_str(),
              grouped(f.header_size()).c_str(), f.tensors().size());
  for (const auto& [key, value] : f.metadata()) std::printf("metadata %s = %s\n", key.c_str(), value.c_str());
  print_rows_text(rows, false);
  return 0;
}

// The attention geometry as "key value" lines (text) or a JSON object.
std::vector<std::pair<std::string, std::string>> geometry(const AttentionConfig& c) {
  std::vector<std::pair<std::string, std::string>> g = {
      {"model_type", json_quote(c.model_type)},
      {"family", json_quote(family_class_name(c.family))},
      {"nested_text_config", c.nested_text_config ? "true" : "false"},
      {"hidden_size", std::to_string(c.hidden_size)},
      {"num_attention_heads", std::to_string(c.num_attention_heads)},
      {"num_key_value_heads", std::to_string(c.num_key_value_heads)},
      {"q_lora_rank", c.has_q_lora() ? std::to_string(c.q_lora_rank) : "null"},
      {"kv_lora_rank", std::to_string(c.kv_lora_rank)},
      {"qk_nope_head_dim", std::to_string(c.qk_nope_head_dim)},
      {"qk_rope_head_dim", std::to_string(c.qk_rope_head_dim)},
      {"qk_head_dim", std::to_string(c.qk_head_dim())},
      {"v_head_dim", std::to_string(c.v_head_dim)},
      {"num_hidden_layers", std::to_string(c.num_hidden_layers)},
      {"vocab_size", std::to_string(c.vocab_size)},
      {"max_position_embeddings", std::to_string(c.max_position_embeddings)},
      {"rms_norm_eps", num(c.rms_norm_eps)},
      {"attention_bias", c.attention_bias ? "true" : "false"},
      {"rope_interleave", c.rope_interleave ? "true" : "false"},
      {"rope_style", json_quote(rope_style_name(c.rope_style()))},
      {"rope_type", json_quote(c.rope.rope_type)},
      {"rope_theta", num(c.rope.rope_theta)},
  };
  if (c.rope.is_yarn()) {
    const YarnRange r = yarn_correction_range(c);
    g.insert(g.end(), {
                          {"rope_factor", num(c.rope.factor)},
                          {"original_max_position_embeddings", num(c.rope.original_max_position_embeddings)},
                          {"beta_fast", num(c.rope.beta_fast)},
                          {"beta_slow", num(c.rope.beta_slow)},
                          {"mscale", num(c.rope.mscale)},
                          {"mscale_all_dim", num(c.rope.mscale_all_dim)},
                          {"attention_factor_key", c.rope.attention_factor ? num(*c.rope.attention_factor) : "null"},
                          {"truncate", c.rope.truncate ? "true" : "false"},
                          {"yarn_low_raw", num(r.low_raw)},
                          {"yarn_high_raw", num(r.high_raw)},
                          {"yarn_low", num(r.low)},
                          {"yarn_high", num(r.high)},
                      });
  }
  g.push_back({"rope_attention_factor", num(rope_attention_factor(c))});
  g.push_back({"softmax_scale", num(softmax_scale(c))});
  return g;
}

// The compressed-tensors scheme as "key value" pairs (empty when config.json has none).
std::vector<std::pair<std::string, std::string>> quantization_keys(const PackQuantization& q, uint64_t packed) {
  if (!q.present) return {};
  std::string ignore = "[";
  for (size_t i = 0; i < q.ignore.size(); ++i) ignore += (i ? ", " : "") + json_quote(q.ignore[i]);
  const std::string why = q.unsupported_reason();
  return {
      {"quant_method", json_quote("compressed-tensors")},
      {"format", json_quote(q.scheme.format)},
      {"type", json_quote(q.scheme.type)},
      {"num_bits", std::to_string(q.scheme.num_bits)},
      {"symmetric", q.scheme.symmetric ? "true" : "false"},
      {"strategy", json_quote(q.scheme.strategy)},
      {"group_size", std::to_string(q.scheme.group_size)},
      {"ignore", ignore + "]"},
      {"supported", why.empty() ? "true" : "false"},
      {"unsupported_reason", why.empty() ? "null" : json_quote("quantization_config " + why)},
      {"pack_quantized_weights", std::to_string(packed)},
  };
}

// The checkpoint's own tokenizer (docs/tokenizer.md), when its directory holds one: format, file,
// vocabulary against config.json's vocab_size (loading fails when it is larger), special tokens,
// the pre-token patterns as written and as run. Text for the end of inspect's output, made before
// anything is printed, so that a bad tokenizer is one error line and no output.
// The tokenizer beside checkpoint `path`, bounded by vocab_size; null when there is none.
std::unique_ptr<Tokenizer> checkpoint_tokenizer(const std::string& path, int64_t vocab_size) {
  std::error_code ec;
  std::string dir = fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (find_tokenizer_file(dir).empty()) return nullptr;
  TokenizerOptions opt;
  opt.max_vocab_size = vocab_size;
  return load_tokenizer(dir, opt);
}

std::string tokenizer_text(const std::string& path, int64_t vocab_size) {
  const auto t = checkpoint_tokenizer(path, vocab_size);
  if (!t) return "\ntokenizer: none (no tokenizer.json or tiktoken.model beside the checkpoint)\n";
  size_t special = 0;
  std::string names;
  for (const AddedToken& a : t->added_tokens()) {
    special += a.special;
    if (a.special && special <= 4) names += (special > 1 ? ", " : "") + a.content + " = " + std::to_string(a.id);
  }
  char line[512];
  const auto row = [&](const char* key, const std::string& value) {
    std::snprintf(line, sizeof line, "  %-34s ", key);
    return std::string(line) + value + "\n";
  };
  std::string out = "\ntokenizer: " + t->format() + "\n" + row("file", t->file()) +
                    row("vocabulary (largest id + 1)", std::to_string(t->vocab_size()) + " (config.json vocab_size " +
                                                           std::to_string(vocab_size) + ")") +
                    row("added tokens", std::to_string(t->added_tokens().size()) + ", " + std::to_string(special) +
                                            " special (" + names + (special > 4 ? ", ..." : "") + ")");
  for (const std::string& p : t->patterns()) out += row("pattern (as written  ->  as run)", p);
  return out;
}

// The same for --json: inspect_checkpoint_json's "tokenizer" (empty when there is none).
std::vector<std::pair<std::string, std::string>> tokenizer_keys(const std::string& path, int64_t vocab_size) {
  const auto t = checkpoint_tokenizer(path, vocab_size);
  if (!t) return {};
  size_t special = 0;
  std::string specials, patterns;
  for (const AddedToken& a : t->added_tokens())
    if (a.special) specials += std::string(special++ ? "," : "") + "{\"content\":" + json_quote(a.content) + ",\"id\":" + std::to_string(a.id) + "}";
  for (const std::string& p : t->patterns()) patterns += (patterns.empty() ? "" : ",") + json_quote(p);
  return {{"format", json_quote(t->format())},
          {"file", json_quote(t->file())},
          {"vocab_size", std::to_string(t->vocab_size())},
          {"added_tokens", std::to_string(t->added_tokens().size())},
          {"special_tokens", "[" + specials + "]"},
          {"patterns", "[" + patterns + "]"}};
}

int inspect_checkpoint(const std::string& path, const std::string& config, bool json) {
  const double progress_after = progress_after_seconds();
  const Checkpoint ck = Checkpoint::open(path, config);
  const auto& shards = ck.shards();

  // Shard headers, with progress on stderr once this takes longer than progress_after.
  const auto t0 = std::chrono::steady_clock::now();
  bool progress_shown = false;
  std::vector<Row> rows;
  std::vector<std::string> missing;
  for (size_t i = 0; i < shards.size(); ++i) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed >= progress_after) {
      std::fprintf(stderr, "\rinspect: reading shard header %zu/%zu", i + 1, shards.size());
      progress_shown = true;
    }
    const std::string name = fs::path(shards[i]).filename().string();
    std::error_code ec;
    if (!fs::exists(shards[i], ec)) {
      missing.push_back(name);
      continue;
    }
    const SafetensorsFile f = SafetensorsFile::open(shards[i]);
    for (const auto& t : f.tensors()) rows.push_back({name, t});
  }
  if (progress_shown) std::fprintf(stderr, "\rinspect: read %zu shard headers in %.1f s\n", shards.size(),
                                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  // Parameter count of layer 0's attention from the headers (fp8 scales excluded).
  const std::string layer0 = ck.prefix() + "layers.0.self_attn.";
  uint64_t params0 = 0;
  int tensors0 = 0;
  for (const auto& r : rows) {
    const std::string& n = r.info.name;
    if (n.rfind(layer0, 0) != 0 || n.size() < 10 || n.compare(n.size() - 10, 10, "_scale_inv") == 0) continue;
    params0 += r.info.numel();
    ++tensors0;
  }
  const std::vector<int64_t> present = ck.layers_present();
  const bool layer0_complete = !present.empty() && present.front() == 0;
  const auto geo = geometry(ck.config());
  uint64_t packed = 0;
  static const std::string packed_tail = ".weight_packed";
  for (const auto& r : rows)
    packed += r.info.name.size() > packed_tail.size() &&
              r.info.name.compare(r.info.name.size() - packed_tail.size(), packed_tail.size(), packed_tail) == 0;
  const auto quant = quantization_keys(ck.config().quantization, packed);

  if (json) {
    InspectedCheckpoint c{path, ck.prefix(), static_cast<int64_t>(shards.size()), missing, rows, geo, quant, present, {}, {}};
    if (layer0_complete) c.layer0_attention_parameters = params0;
    c.tokenizer = tokenizer_keys(path, ck.config().vocab_size);
    std::fputs(inspect_checkpoint_json(c).c_str(), stdout);
    return 0;
  }
  const std::string tok = tokenizer_text(path, ck.config().vocab_size);
  std::printf("checkpoint %s: %zu shard%s, %zu tensors, prefix '%s'\n", path.c_str(), shards.size(),
              shards.size() == 1 ? "" : "s", rows.size(), ck.prefix().c_str());
  for (const auto& m : missing) std::printf("shard %s: MISSING (listed in the index; its tensors are not shown)\n", m.c_str());
  print_rows_text(rows, true);
  std::printf("\nattention geometry (config.json):\n");
  for (const auto& [k, v] : geo) std::printf("  %-34s %s\n", k.c_str(), v.c_str());
  if (!quant.empty()) {
    std::printf("\nquantization (config.json quantization_config):\n");
    for (const auto& [k, v] : quant) std::printf("  %-34s %s\n", k.c_str(), v.c_str());
  }
  std::string pres;
  for (size_t i = 0; i < present.size(); ++i) {
    if (i == 12 && present.size() > 14) {
      pres += ", ... " + std::to_string(present.back());
      break;
    }
    pres += (i ? "," : "") + std::to_string(present[i]);
  }
  // why a layer the checkpoint names is not present (its shard is missing), or, when none is,
  // why layer 0 is not
  std::string why;
  for (const int64_t L : ck.layers_mapped())
    if (!std::binary_search(present.begin(), present.end(), L)) {
      why = " (" + ck.layer_absent_reason(L) + ")";
      break;
    }
  if (why.empty() && present.empty()) why = " (" + ck.layer_absent_reason(0) + ")";
  std::printf("\nlayers present: %zu of %lld%s%s%s\n", present.size(), static_cast<long long>(ck.config().num_hidden_layers),
              present.empty() ? "" : ": ", pres.c_str(), why.c_str());
  if (layer0_complete)
    std::printf("layer 0 attention parameters: %s (%d tensors)\n", grouped(params0).c_str(), tensors0);
  else
    std::printf("layer 0 attention parameters: layer 0 is not complete here (%d of its attention tensors found)\n",
                tensors0);
  std::fputs(tok.c_str(), stdout);
  return 0;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& argv) {
  const Args args = Args::parse(kSpec, argv);
  if (print_help_if_asked(args, kSpec)) return 0;
  if (args.positional().empty()) fail(ErrorKind::InvalidArgument, "inspect: PATH is required (see mla-h2o inspect --help)");
  const std::string path = args.positional()[0];
  const std::string config = args.str("config");
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(ErrorKind::Io, "inspect: '" + path + "' does not exist");
  if (fs::is_directory(path, ec) || !config.empty()) return inspect_checkpoint(path, config, args.has("json"));
  return inspect_file(path, args.has("json"));
}

}  // namespace mla::cli
