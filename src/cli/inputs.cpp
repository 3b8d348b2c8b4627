// src/cli/inputs.cpp — input sources of `mla-h2o run` (see inputs.hpp).
//
// Shape legend: S = tokens, H = hidden_size.
#include "inputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "progress.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/model.hpp"
#include "mla/random.hpp"
#include "mla/regular_file.hpp"
#include "mla/safetensors.hpp"
#include "mla/tokenizer.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/attention_stages.hpp"

namespace mla::cli {

std::vector<FlagSpec> input_flags() {
  return {
      {"input", "FILE", "hidden states from a safetensors file, [S, hidden] or [1, S, hidden], F32/BF16/F16", ""},
      {"input-tensor", "NAME", "tensor to read from --input (NAME.L for layer L when the file holds it)", "hidden_states"},
      {"residual", "", "--input rows are the residual stream entering the layer (HF output_hidden_states[L]): "
                       "apply the layer's input_layernorm first", ""},
      {"tokens", "IDS|FILE", "token ids (3,17,250 or a file of ids): embed_tokens rows + input_layernorm", ""},
      {"text", "FILE", "a text file: BOS + the ids of the checkpoint's own tokenizer.json or tiktoken.model (no special "
                       "tokens added); without one, byte-level models (config.json \"byte_level_vocab\": true): BOS, then "
                       "its bytes; as --tokens; scores.csv gains a token_text column", ""},
      {"seq-len", "S", "seeded standard-normal embeddings: number of tokens", "256"},
      {"seed", "N", "seed of the seeded embeddings (Rng stream 1, row-major [S, hidden])", "0"},
  };
}

InputRequest input_request(const Args& args) {
  InputRequest req;
  const bool file = args.has("input"), tokens = args.has("tokens"), text = args.has("text"), seeded = args.has("seq-len") || args.has("seed");
  std::vector<std::string> given;
  if (file) given.push_back("--input");
  if (tokens) given.push_back("--tokens");
  if (text) given.push_back("--text");
  if (seeded) given.push_back(args.has("seq-len") ? "--seq-len" : "--seed");
  if (given.size() > 1)
    fail(ErrorKind::InvalidArgument, "two input sources given (" + given[0] + " and " + given[1] +
                                         "); use exactly one of --input, --tokens, --text, --seq-len/--seed");
  if (args.has("input-tensor") && !file) fail(ErrorKind::InvalidArgument, "--input-tensor needs --input FILE");
  if (args.has("residual") && !file)
    fail(ErrorKind::InvalidArgument, "--residual needs --input FILE (the residual stream entering the layer)");
  if (file) {
    req.kind = InputKind::File;
    req.file = args.str("input");
    req.tensor = args.str("input-tensor", "hidden_states");
    req.residual = args.has("residual");
  } else if (tokens) {
    req.kind = InputKind::Tokens;
    req.tokens = args.str("tokens");
  } else if (text) {
    req.kind = InputKind::Tokens;
    req.text = args.str("text");
  } else {
    req.kind = InputKind::Seeded;
    req.seq_len = args.integer("seq-len", 256, 1, int64_t{1} << 20);
    req.seed = static_cast<uint64_t>(args.integer("seed", 0, 0));
  }
  return req;
}

Gemm gemm_choice(const Args& args) {
  const std::string gemm = args.choice("gemm", {"auto", "onednn", "eigen"}, "auto");
  return gemm == "onednn" ? Gemm::OneDnn : gemm == "eigen" ? Gemm::Eigen : Gemm::Auto;
}

OpenedInput open_input(const InputRequest& req, int64_t layer) {
  OpenedInput in;
  in.request = req;
  switch (req.kind) {
    case InputKind::Seeded: in.seq_len = req.seq_len; break;
    case InputKind::Tokens:
      if (!req.text.empty()) {
        in.text = read_bytes(req.text, "--text", req.text_max_bytes);
        in.seq_len = static_cast<int64_t>(in.text.size()) + 1;  // with a BOS (the plan's upper bound)
        break;
      }
      in.token_ids = parse_token_ids(req.tokens);
      if (req.max_rows > 0 && static_cast<int64_t>(in.token_ids.size()) > req.max_rows)
        in.token_ids.resize(static_cast<size_t>(req.max_rows));  // only the rows the run uses
      in.seq_len = static_cast<int64_t>(in.token_ids.size());
      break;
    case InputKind::File: {
      in.file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(req.file));
      in.tensor = input_tensor_for_layer(*in.file, req.tensor, layer);
      const TensorInfo& t = in.file->at(in.tensor);
      if (t.shape.size() == 2) in.seq_len = static_cast<int64_t>(t.shape[0]);
      if (t.shape.size() == 3 && t.shape[0] == 1) in.seq_len = static_cast<int64_t>(t.shape[1]);
      break;
    }
  }
  return in;
}

std::string read_bytes(const std::string& path, const std::string& flag, int64_t max_bytes) {
  try {  // a regular file only: a FIFO would block (mla/regular_file.hpp)
    if (max_bytes > 0) return read_regular_file_prefix(path, max_bytes);  // only as far as the run needs
    return read_regular_file(path, int64_t{1} << 30);
  } catch (const Error& e) {
    fail(e.kind(), flag + " " + e.what());
  }
}

std::string tokens_caveat(const std::string& layers) {
  return "--tokens on layer(s) " + layers +
         ": these are NOT the model's inputs to those layers. --tokens feeds embed_tokens rows (through the layer's "
         "own input_layernorm), which only layer 0 receives; layer L > 0 receives the residual stream after layers "
         "0..L-1 (attention and MLP/MoE). Write the real inputs with reference/python/dump_hidden_states.py and pass "
         "--input FILE --residual (docs/sweep.md)";
}

TensorF seeded_hidden_states(int64_t seq_len, int64_t hidden_size, uint64_t seed) {
  TensorF x("hidden_states", {seq_len, hidden_size});  // [S, H]
  Rng rng(seed, kHiddenStatesStream);
  for (float& v : x.data) v = static_cast<float>(rng.normal());
  return x;
}

const TensorInfo& find_tensor_or_fail(const SafetensorsFile& f, const std::string& flag, const std::string& path,
                                      const std::string& name, const std::string& choose_flag) {
  if (const TensorInfo* info = f.find(name)) return *info;
  std::string names;
  for (const auto& t : f.tensors()) names += (names.empty() ? "" : ", ") + t.name;
  fail(ErrorKind::TensorNotFound, flag + " " + path + " has no tensor '" + name + "' (it holds: " +
                                      (names.empty() ? "nothing" : names) + "); choose one with " + choose_flag);
}

std::string input_tensor_for_layer(const std::string& path, const std::string& name, int64_t layer) {
  return input_tensor_for_layer(SafetensorsFile::open(path), name, layer);
}

std::string input_tensor_for_layer(const SafetensorsFile& f, const std::string& name, int64_t layer) {
  const std::string& path = f.path();
  const std::string per_layer = name + "." + std::to_string(layer);
  if (f.find(per_layer)) return per_layer;
  return find_tensor_or_fail(f, "--input", path, name,
                             "--input-tensor (layer " + std::to_string(layer) + " would also read '" + per_layer + "')")
      .name;
}

TensorF hidden_states_from_file(const SafetensorsFile& f, const std::string& name, int64_t hidden_size) {
  const std::string& path = f.path();
  const TensorInfo* info = &find_tensor_or_fail(f, "--input", path, name, "--input-tensor");
  const std::string where = "--input " + path + ", tensor '" + name + "'";
  if (info->dtype != DType::F32 && info->dtype != DType::BF16 && info->dtype != DType::F16)
    fail(ErrorKind::Unsupported, where + " has dtype " + std::string(dtype_name(info->dtype)) + "; expected F32, BF16 or F16");
  std::vector<int64_t> shape(info->shape.begin(), info->shape.end());
  const bool batched = shape.size() == 3 && shape[0] == 1;
  if (!(shape.size() == 2 || batched))
    fail(ErrorKind::Shape, where + " has shape " + shape_string(shape) + "; expected [S, hidden] or [1, S, hidden]");
  const int64_t S = shape[shape.size() - 2], H = shape.back();
  if (H != hidden_size)
    fail(ErrorKind::Shape, where + " has hidden size " + std::to_string(H) + " (shape " + shape_string(shape) +
                               ") but the checkpoint's hidden_size is " + std::to_string(hidden_size));
  if (S < 1) fail(ErrorKind::Shape, where + " has no tokens (shape " + shape_string(shape) + ")");
  TensorF x("hidden_states", {S, H});  // [S, H]
  x.data = f.to_float(*info);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < H; ++j)
      if (!std::isfinite(x.data[static_cast<size_t>(s * H + j)]))
        fail(ErrorKind::InvalidValue, where + " holds a non-finite value (" +
                                          std::to_string(x.data[static_cast<size_t>(s * H + j)]) + ") at token " +
                                          std::to_string(s) + ", column " + std::to_string(j));
  return x;
}

std::vector<int64_t> parse_token_ids(const std::string& arg) {
  std::string text = arg, what = "--tokens";
  const bool looks_like_list = arg.find_first_not_of("0123456789-, \t\r\n") == std::string::npos;
  std::error_code ec;
  if (!looks_like_list || std::filesystem::is_regular_file(arg, ec)) {  // a file (a FIFO is refused, not read)
    if (!std::filesystem::exists(arg, ec))
      fail(ErrorKind::InvalidArgument,
           "--tokens: '" + printable_text(arg) + "' is neither a file nor a list of token ids like 3,17,250");
    text = read_regular_file(arg, int64_t{1} << 30);
    what = "--tokens " + arg;
  }
  std::vector<int64_t> ids = parse_int_list(text, what);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0)
      fail(ErrorKind::InvalidArgument, what + ": token id " + std::to_string(ids[i]) + " (position " + std::to_string(i) +
                                           ") is negative");
  return ids;
}

void input_rms_norm(TensorF& x, const TensorF& weight, double eps, Precision precision) {
  const int64_t S = x.dim(0), H = x.dim(1);
  if (weight.numel() != H)
    fail(ErrorKind::Shape, "input_layernorm has " + std::to_string(weight.numel()) + " values, expected hidden_size " +
                               std::to_string(H));
  for (float& v : x.data) v = cpu::rounded(precision, v);  // the hidden_states tensor in the run's precision
  // the CPU kernel's RMSNorm (the same equation), in place: each value is read before it is written
  cpu::rms_norm(x.ptr(), H, S, H, cpu::prepare_vector(weight, precision).data(), static_cast<float>(eps), precision,
                x.ptr(), H);
}

namespace {
// ||row|| of x [S, H], in double
std::vector<double> row_norms(const TensorF& x) {
  const int64_t S = x.dim(0), H = x.dim(1);
  std::vector<double> out(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    double acc = 0;
    for (int64_t j = 0; j < H; ++j) acc += static_cast<double>(x.data[static_cast<size_t>(s * H + j)]) * x.data[static_cast<size_t>(s * H + j)];
    out[static_cast<size_t>(s)] = std::sqrt(acc);
  }
  return out;
}
}  // namespace

bool text_through_tokenizer(const InputRequest& req, const Checkpoint& ckpt, const ModelConfig& model, HiddenInput& in) {
  std::error_code ec;
  const std::filesystem::path ck(ckpt.path());
  std::string dir = std::filesystem::is_directory(ck, ec) ? ck.string() : ck.parent_path().string();
  if (dir.empty()) dir = ".";
  if (find_tokenizer_file(dir).empty()) return false;
  TokenizerOptions opt;
  opt.max_vocab_size = model.attention.vocab_size;
  const auto tok = load_tokenizer(dir, opt);
  const std::string text = read_bytes(req.text, "--text", 0);  // whole: a byte prefix is no token prefix
  std::vector<uint32_t> ids;
  try {
    ids = tok->encode(text);
  } catch (const Error& e) {
    throw Error(e.kind(), "--text " + req.text + ": " + e.what());
  }
  in.token_ids.clear();
  if (model.bos_token_id >= 0) in.token_ids.push_back(model.bos_token_id);
  for (uint32_t id : ids) in.token_ids.push_back(id);
  if (req.max_rows > 0 && static_cast<int64_t>(in.token_ids.size()) > req.max_rows)
    in.token_ids.resize(static_cast<size_t>(req.max_rows));  // only the rows the run uses
  for (size_t i = 0; i < in.token_ids.size(); ++i) {
    const bool bos = i == 0 && model.bos_token_id >= 0;
    const uint32_t one = static_cast<uint32_t>(in.token_ids[i]);
    in.token_text.push_back(bos ? "<bos>" : token_bytes_text(tok->decode(std::span<const uint32_t>(&one, 1))));
  }
  return true;
}

HiddenInput load_input(const OpenedInput& opened, const Checkpoint& ckpt, const LayerWeights& weights,
                       Precision precision) {
  const InputRequest& req = opened.request;
  const AttentionConfig& cfg = ckpt.config();
  HiddenInput in;
  switch (req.kind) {
    case InputKind::File: {
      if (!opened.file) fail(ErrorKind::InvalidArgument, "--input " + req.file + " was not opened");
      const std::string& tensor = opened.tensor;
      in.hidden = hidden_states_from_file(*opened.file, tensor, cfg.hidden_size);
      std::ostringstream os;
      os << (req.residual ? "residual stream" : "hidden states") << " from " << req.file << " (tensor '" << tensor
         << "', " << in.hidden.dim(0) << " tokens)";
      if (req.residual) {
        if (weights.input_layernorm.empty())
          fail(ErrorKind::TensorNotFound, "--residual needs layer " + std::to_string(weights.layer) + "'s input_layernorm");
        in.residual_norm = row_norms(in.hidden);
        input_rms_norm(in.hidden, weights.input_layernorm, cfg.rms_norm_eps, precision);
        os << " -> layer " << weights.layer << "'s input_layernorm (eps " << cfg.rms_norm_eps << ")";
      }
      in.description = os.str();
      break;
    }
    case InputKind::Tokens: {
      in.token_ids = opened.token_ids;
      bool tokenized = false;
      if (!req.text.empty()) {
        const ModelConfig model = load_model_config(ckpt.config_path());
        tokenized = text_through_tokenizer(req, ckpt, model, in);
        if (!tokenized) {
          in.token_ids = byte_level_token_ids(model, opened.text, "--text " + req.text);
          for (int64_t id : in.token_ids) in.token_text.push_back(byte_level_token_text(model, id));
        }
      }
      in.hidden = ckpt.embed_rows(in.token_ids);
      in.hidden.name = "hidden_states";
      if (weights.input_layernorm.empty())
        fail(ErrorKind::TensorNotFound, "--tokens needs layer " + std::to_string(weights.layer) + "'s input_layernorm");
      in.residual_norm = row_norms(in.hidden);
      input_rms_norm(in.hidden, weights.input_layernorm, cfg.rms_norm_eps, precision);
      std::ostringstream os;
      if (tokenized) os << "--text " << req.text << " (BOS + the checkpoint's tokenizer's ids): ";
      else if (!req.text.empty()) os << "--text " << req.text << " (" << opened.text.size() << " bytes, byte-level): ";
      os << in.token_ids.size() << " token ids -> embed_tokens rows -> input_layernorm (eps " << cfg.rms_norm_eps << ")";
      in.description = os.str();
      break;
    }
    case InputKind::Seeded:
      in.hidden = seeded_hidden_states(req.seq_len, cfg.hidden_size, req.seed);
      in.description = std::to_string(req.seq_len) + " tokens of seeded standard-normal embeddings (seed " +
                       std::to_string(req.seed) + ", mla::Rng stream " + std::to_string(kHiddenStatesStream) +
                       ", row-major [S, hidden])";
      break;
  }
  return in;
}

void check_layer_present(const Checkpoint& ckpt, int64_t layer, const std::string& flag) {
  const AttentionConfig& cfg = ckpt.config();
  if (layer < 0 || layer >= cfg.num_hidden_layers)
    fail(ErrorKind::InvalidArgument, flag + " is out of range: the config has " + std::to_string(cfg.num_hidden_layers) +
                                         " layers (0.." + std::to_string(cfg.num_hidden_layers - 1) + ")");
  const std::vector<int64_t> present = ckpt.layers_present();
  if (std::find(present.begin(), present.end(), layer) == present.end()) {
    std::string list;
    for (size_t i = 0; i < present.size() && i < 16; ++i) list += (i ? ", " : "") + std::to_string(present[i]);
    if (present.size() > 16) list += ", ...";
    fail(ErrorKind::Checkpoint, flag + ": " + ckpt.path() + " does not hold that layer's attention tensors: " +
                                    ckpt.layer_absent_reason(layer) + " (layers present: " + (list.empty() ? "none" : list) + ")");
  }
}

LayerWeights load_checked_layer(const Checkpoint& ckpt, int64_t layer, bool input_norm) {
  check_layer_present(ckpt, layer, "--layer " + std::to_string(layer));
  return ckpt.load_layer(layer, input_norm);
}

std::vector<PolicySettings> read_policies(const Args& a) {
  std::vector<PolicySettings> out = parse_policy_list(a.has("policy") ? a.str("policy") : "all");
  for (PolicySettings& s : out) {
    const std::vector<std::string> keys = policy_setting_keys(s);
    for (const std::string key : {"sinks", "recent", "seed"}) {
      const std::string flag = key == "seed" ? "policy-seed" : key;
      if (!a.has(flag)) continue;
      const std::string value = std::to_string(a.integer(flag, 0, key == "recent" ? 1 : 0, kPolicySettingMax));
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) apply_policy_setting(s, key, value);
      else if (!s.inner.empty()) {  // a wrapper: its inner press's setting (press.KEY)
        const std::vector<std::string> inner = policy_setting_keys(s.inner.front());
        if (std::find(inner.begin(), inner.end(), key) != inner.end()) apply_policy_setting(s, "press." + key, value);
      }
    }
  }
  return out;
}

bool model_sha256_enabled() {
  const char* env = std::getenv("MLA_MODEL_SHA256");
  const std::string mode = env ? env : "";
  if (mode != "" && mode != "1" && mode != "0")
    fail(ErrorKind::InvalidArgument, "environment variable MLA_MODEL_SHA256='" + mode + "' is not 0 (skip) or 1 (hash)");
  return mode != "0";
}

std::vector<FileDigest> model_file_digests(const Checkpoint& ckpt, const std::string& command, bool quiet,
                                           bool every_shard) {
  const std::vector<std::string> files = every_shard ? ckpt.files_of_the_model() : ckpt.files_read();
  if (!model_sha256_enabled()) {  // sizes only: "sha256" is written as "not computed (MLA_MODEL_SHA256=0)"
    std::vector<FileDigest> d;
    for (const std::string& path : files) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(path, ec);
      d.push_back({path, ec ? -1 : static_cast<int64_t>(size), "not computed (MLA_MODEL_SHA256=0)"});
    }
    return d;
  }
  ProgressLine progress(command, quiet);
  std::vector<FileDigest> d = file_digests(files, [&](int64_t done, int64_t total) {
    progress.update("sha256 of the model files, bytes", done, total);
  });
  progress.finish();
  return d;
}

}  // namespace mla::cli
