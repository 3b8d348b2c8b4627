// src/checkpoint/checkpoint.cpp — finding and loading one layer's attention weights.
//
// Purpose: turn a checkpoint on disk (sharded with model.safetensors.index.json, a single
// model.safetensors, or one .safetensors file + config) into fp32 LayerWeights, reading
// only the bytes of the requested tensors and checking every shape against config.json.
//
// Names (docs/math.md §1.1): <prefix>layers.{L}.self_attn.<suffix>, where <prefix> is whatever
// precedes "layers." ("model." for DeepSeek-V3/Kimi K2, "language_model.model." for Kimi
// K2.5/K2.6). The prefix is detected from the names of kv_a_proj_with_mqa (MLA-specific, so
// a vision tower's "layers." cannot be mistaken for it), else from embed_tokens.
//
// Dtypes: BF16, F16, F32 are widened exactly. F8_E4M3 weights are block-dequantized with
// `<name>_scale_inv` (docs/math.md §11):
//   W[i, j] = fp32(fp8 W[i, j]) * scale_inv[i / 128, j / 128]      (one fp32 multiply)
//   scale_inv: [ceil(out / 128), ceil(in / 128)], edge blocks partial.
//
// INT4 (compressed-tensors pack-quantized, Kimi K2-Thinking / K2.5 / K2.6 routed experts): a
// weight `<stem>weight` that is not stored as such but as `<stem>weight_packed` (I32),
// `<stem>weight_scale` and `<stem>weight_shape` is read under its plain name and dequantized by
// mla/int4.hpp, after every shape, dtype and the config's scheme are checked (docs/checkpoints.md §6):
//   W[i, j] = round_to(scale dtype, (code[i, j] - 8) * weight_scale[i, j / group_size])
//
// Shape legend: H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   V = rows of embed_tokens.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <simdjson.h>
#include <string>
#include <thread>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/checkpoint.hpp"
#include "mla/error.hpp"
#include "mla/huge_pages.hpp"
#include "mla/int4.hpp"
#include "mla/layer_tensors.hpp"
#include "mla/regular_file.hpp"
#include "mla/threads.hpp"  // parallel_for

namespace mla {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr int64_t kFp8Block = 128;  // weight_block_size [128, 128]

std::string shape_u64_string(const std::vector<uint64_t>& s) {
  std::vector<int64_t> v(s.begin(), s.end());
  return shape_string(v);
}

std::string layer_name(const std::string& prefix, int64_t layer, const std::string& suffix) {
  return prefix + "layers." + std::to_string(layer) + "." + suffix;
}

// "language_model.model." from "language_model.model.layers.7.self_attn.kv_a_proj_with_mqa.weight";
// false if the name does not have that form.
bool attention_prefix_of(const std::string& name, std::string& prefix) {
  static const std::string tail = ".self_attn.kv_a_proj_with_mqa.weight";
  if (name.size() <= tail.size() || name.compare(name.size() - tail.size(), tail.size(), tail) != 0) return false;
  const std::string head = name.substr(0, name.size() - tail.size());  // "<prefix>layers.<L>"
  const size_t dot = head.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string digits = head.substr(dot + 1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return false;
  const std::string before = head.substr(0, dot + 1);  // "<prefix>layers."
  static const std::string layers = "layers.";
  if (before.size() < layers.size() || before.compare(before.size() - layers.size(), layers.size(), layers) != 0)
    return false;
  prefix = before.substr(0, before.size() - layers.size());
  return true;
}

// Decodes one element of a float tensor's raw bytes (little-endian) to f32, exactly.
float decode_element(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16::from_bits(b).to_float();
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_float(h);
    }
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::F8_E4M3: return fp8_e4m3fn_to_float(static_cast<uint8_t>(*p));
    default: return NAN;  // callers check the dtype first
  }
}

bool is_loadable_dtype(DType d) {
  return d == DType::BF16 || d == DType::F16 || d == DType::F32 || d == DType::F8_E4M3;
}

}  // namespace

// ---------------------------------------------------------------------------------------
struct Checkpoint::Impl {
  std::string index_path;  // "" for a single file
  std::string config_file;        // for errors about the quantization scheme
  PackQuantization quantization;  // config.json's compressed-tensors scheme (present or not)
  // tensor name -> shard path, from index.json's weight_map or the single file's header
  std::map<std::string, std::string> weight_map;

  mutable std::mutex mutex;
  mutable std::map<std::string, SafetensorsFile> open_shards;  // shard path -> mapped file
  mutable std::set<std::string> shards_read;                   // every shard opened, also after release_mappings

  // The shard, opened once. `why` names the tensor that needs it (for the error).
  const SafetensorsFile& shard(const std::string& path, const std::string& why) const {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = open_shards.find(path);
    if (it != open_shards.end()) return it->second;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      if (!index_path.empty())
        fail(ErrorKind::Checkpoint, "shard '" + path + "' is missing (" + index_path + " maps " + why + " to it)");
      fail(ErrorKind::Checkpoint, "file '" + path + "' does not exist");
    }
    const SafetensorsFile& f = open_shards.emplace(path, SafetensorsFile::open(path)).first->second;
    shards_read.insert(path);
    return f;
  }

  // Where a tensor lives: its shard (opened) and header entry. Throws TensorNotFound.
  std::pair<const SafetensorsFile*, const TensorInfo*> locate(const std::string& name, const std::string& ckpt) const {
    auto it = weight_map.find(name);
    if (it == weight_map.end())
      fail(ErrorKind::TensorNotFound,
           "tensor '" + name + "' not found in checkpoint " + ckpt +
               (index_path.empty() ? "" : " (no entry in " + index_path + ")"));
    const SafetensorsFile& f = shard(it->second, "'" + name + "'");
    const TensorInfo* info = f.find(name);
    if (!info)
      fail(ErrorKind::TensorNotFound,
           "tensor '" + name + "' is mapped to shard '" + it->second + "' by " + index_path + " but that shard does not hold it");
    return {&f, info};
  }

  // One tensor's header checked against the config without reading its data: mapped, its
  // shard present and holding it, a loadable dtype, shape [expected]; for F8_E4M3 its
  // `_scale_inv` blocks present with the right shape. Returns where it lives.
  struct Located {
    const SafetensorsFile* file;
    const TensorInfo* info;
    const SafetensorsFile* scale_file = nullptr;  // F8_E4M3 only
    const TensorInfo* scale_info = nullptr;
  };
  Located checked(const std::string& ckpt, const std::string& name, const std::vector<int64_t>& expected,
                  const std::string& expected_names) const;
  // "<stem>" of a plain weight name "<stem>weight" whose "<stem>weight_packed" is in the map
  // (a pack-quantized weight), else "".
  std::string packed_stem(const std::string& name) const {
    static const std::string weight = "weight";
    if (name.size() < weight.size() || name.compare(name.size() - weight.size(), weight.size(), weight) != 0) return "";
    const std::string stem = name.substr(0, name.size() - weight.size());
    return weight_map.count(stem + "weight_packed") ? stem : "";
  }

  // Loads one tensor as fp32 [expected], dequantizing FP8 with its `_scale_inv` blocks and INT4
  // from its packed form, and records its checkpoint dtype in dtypes[field].
  TensorF load_checked(const std::string& ckpt, const std::string& name, const std::string& field,
                       const std::vector<int64_t>& expected, const std::string& expected_names,
                       std::map<std::string, std::string>& dtypes) const;
  // The INT4 branch of load_checked: `name` = stem + "weight".
  TensorF load_pack_quantized(const std::string& ckpt, const std::string& name, const std::string& stem,
                              const std::vector<int64_t>& expected, const std::string& expected_names) const;
};

Checkpoint::Checkpoint() : impl_(std::make_unique<Impl>()) {}

std::vector<std::string> Checkpoint::files_read() const {
  std::vector<std::string> files{config_path_};
  if (!impl_->index_path.empty()) files.push_back(impl_->index_path);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  files.insert(files.end(), impl_->shards_read.begin(), impl_->shards_read.end());  // std::set: sorted
  return files;
}
std::vector<std::string> Checkpoint::files_of_the_model() const {
  std::vector<std::string> files{config_path_};
  if (!impl_->index_path.empty()) files.push_back(impl_->index_path);
  std::set<std::string> shards(shard_paths_.begin(), shard_paths_.end());
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    shards.insert(impl_->shards_read.begin(), impl_->shards_read.end());
  }
  files.insert(files.end(), shards.begin(), shards.end());
  return files;
}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

namespace {

// model.safetensors.index.json -> {tensor name: shard file name}.
std::map<std::string, std::string> read_index(const std::string& index_path) {
  simdjson::dom::parser parser;
  // a regular file only (a FIFO would block); Kimi K2.6's index is ~4 MB
  const simdjson::padded_string text(read_regular_file(index_path, int64_t{256} << 20, ErrorKind::Checkpoint));
  simdjson::dom::element root;
  if (auto err = parser.parse(text).get(root))
    fail(ErrorKind::Checkpoint, index_path + ": not valid JSON (" + simdjson::error_message(err) + ")");
  simdjson::dom::object weight_map;
  if (root["weight_map"].get(weight_map))
    fail(ErrorKind::Checkpoint, index_path + ": key 'weight_map' is missing or not an object");
  std::map<std::string, std::string> out;
  for (auto [key, value] : weight_map) {
    std::string_view shard;
    if (value.get(shard))
      fail(ErrorKind::Checkpoint, index_path + ": weight_map entry '" + std::string(key) + "' is not a string");
    const std::string file(shard);
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail(ErrorKind::Checkpoint, index_path + ": weight_map entry '" + std::string(key) + "' names shard '" + file +
                                      "', which is not a plain file name in the checkpoint directory");
    out[std::string(key)] = file;  // a name given twice: the last entry, as Python's json reads it
  }
  if (out.empty()) fail(ErrorKind::Checkpoint, index_path + ": weight_map is empty");
  return out;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path, const std::string& config_path) {
  Checkpoint ck;
  ck.path_ = path;
  std::error_code ec;
  std::string config_file = config_path;

  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (config_file.empty()) config_file = (dir / "config.json").string();
    const fs::path index = dir / kIndexName, single = dir / kSingleName;
    if (fs::exists(index, ec)) {
      ck.impl_->index_path = index.string();
      std::set<std::string> shard_set;
      for (auto& [name, file] : read_index(index.string())) {
        const std::string shard = (dir / file).string();
        ck.impl_->weight_map.emplace(name, shard);
        shard_set.insert(shard);
      }
      ck.shard_paths_.assign(shard_set.begin(), shard_set.end());
    } else if (fs::exists(single, ec)) {
      ck.shard_paths_ = {single.string()};
    } else {
      fail(ErrorKind::Checkpoint, "directory '" + path + "' has neither " + kIndexName + " nor " + kSingleName);
    }
  } else if (fs::exists(path, ec)) {
    // One .safetensors file; its config comes from --config, else config.json beside it.
    if (config_file.empty()) {
      const fs::path beside = fs::path(path).parent_path() / "config.json";
      if (!fs::exists(beside, ec))
        fail(ErrorKind::Config, "'" + path + "' is a single file and no config.json is beside it; pass its config (--config FILE)");
      config_file = beside.string();
    }
    ck.shard_paths_ = {path};
  } else {
    fail(ErrorKind::Checkpoint, "checkpoint '" + path + "' does not exist");
  }

  if (ck.impl_->index_path.empty()) {
    // Single file: its header is the map.
    const SafetensorsFile& f = ck.impl_->shard(ck.shard_paths_[0], "");
    for (const TensorInfo& t : f.tensors()) ck.impl_->weight_map.emplace(t.name, ck.shard_paths_[0]);
  }
  ck.config_ = load_config(config_file);
  ck.config_path_ = config_file;
  ck.impl_->config_file = config_file;
  ck.impl_->quantization = ck.config_.quantization;

  // Prefix: whatever precedes "layers.L.self_attn.kv_a_proj_with_mqa.weight".
  std::set<std::string> prefixes;
  for (const auto& [name, shard] : ck.impl_->weight_map) {
    std::string p;
    if (attention_prefix_of(name, p)) prefixes.insert(p);
  }
  if (prefixes.size() > 1) {
    std::string list;
    for (const auto& p : prefixes) list += (list.empty() ? "'" : ", '") + p + "'";
    fail(ErrorKind::Checkpoint, "checkpoint '" + path + "' holds attention layers under several prefixes: " + list);
  }
  if (prefixes.size() == 1) {
    ck.prefix_ = *prefixes.begin();
  } else {
    // No attention layer at all (e.g. an embeddings-only shard): take embed_tokens' prefix.
    static const std::string embed = "embed_tokens.weight";
    for (const auto& [name, shard] : ck.impl_->weight_map)
      if (name.size() >= embed.size() && name.compare(name.size() - embed.size(), embed.size(), embed) == 0) {
        ck.prefix_ = name.substr(0, name.size() - embed.size());
        break;
      }
  }
  return ck;
}

void Checkpoint::release_mappings() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->open_shards.clear();
}

std::string Checkpoint::synthetic_origin() const {
  if (shard_paths_.empty()) return "";
  const std::map<std::string, std::string>& meta = impl_->shard(shard_paths_[0], "its metadata").metadata();
  const auto it = meta.find(kSynthMetadataKey);
  return it == meta.end() ? "" : it->second;
}

std::vector<TensorLocation> Checkpoint::list_tensors() const {
  std::vector<TensorLocation> out;
  for (const std::string& shard : shard_paths_) {
    const SafetensorsFile& f = impl_->shard(shard, "some tensors");
    for (const TensorInfo& t : f.tensors()) out.push_back({t.name, shard, t});
  }
  return out;
}

std::vector<int64_t> Checkpoint::layers_mapped() const {
  // The candidates come from the tensor names ("<prefix>layers.<L>."), so the cost is the number
  // of tensors whatever num_hidden_layers says.
  const std::string head = prefix_ + "layers.";
  std::set<int64_t> candidates;
  for (const auto& [name, shard] : impl_->weight_map) {
    if (name.compare(0, head.size(), head) != 0) continue;
    const size_t dot = name.find('.', head.size());
    const std::string digits = name.substr(head.size(), dot == std::string::npos ? std::string::npos : dot - head.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t L = std::stoll(digits);
    if (L < config_.num_hidden_layers) candidates.insert(L);
  }
  const std::vector<const LayerTensorSpec*> specs = layer_tensors(config_);
  std::vector<int64_t> out;
  for (const int64_t L : candidates) {
    bool all = true;
    for (const LayerTensorSpec* s : specs) all = all && impl_->weight_map.count(layer_name(prefix_, L, s->checkpoint_suffix()));
    if (all) out.push_back(L);
  }
  return out;
}

TensorF Checkpoint::Impl::load_pack_quantized(const std::string& ckpt, const std::string& name, const std::string& stem,
                                              const std::vector<int64_t>& expected,
                                              const std::string& expected_names) const {
  const std::string packed_name = stem + "weight_packed", scale_name = stem + "weight_scale",
                    shape_name = stem + "weight_shape";
  auto [pfile, pinfo] = locate(packed_name, ckpt);
  const std::string where = "tensor '" + name + "' (stored pack-quantized as '" + packed_name + "' in shard '" +
                            pfile->path() + "')";
  if (!quantization.present)
    fail(ErrorKind::Config, where + ": " + config_file +
                                " has no compressed-tensors quantization_config to dequantize it with");
  if (const std::string why = quantization.unsupported_reason(); !why.empty())
    fail(ErrorKind::Unsupported, config_file + ": quantization_config " + why + " (needed for " + where + ")");
  const int64_t G = quantization.scheme.group_size;
  if (expected.size() != 2)
    fail(ErrorKind::Shape, where + " is expected to have shape " + shape_string(expected) +
                               "; only 2-D weights are pack-quantized");
  const int64_t rows = expected[0], cols = expected[1];
  const std::string expected_text = shape_string(expected) + (expected_names.empty() ? "" : " = " + expected_names);
  if (cols % G != 0)
    fail(ErrorKind::Shape, where + ": group_size " + std::to_string(G) + " does not divide its row length " +
                               std::to_string(cols) + " (expected shape " + expected_text + ")");
  for (const char* extra : {"weight_zero_point", "weight_g_idx"})
    if (weight_map.count(stem + extra))
      fail(ErrorKind::Unsupported, where + " has '" + stem + extra +
                                       "', which the symmetric scheme of the quantization_config does not use");

  // weight_packed: I32 [rows, ceil(cols / 8)]
  const std::vector<int64_t> pshape(pinfo->shape.begin(), pinfo->shape.end());
  if (pinfo->dtype != DType::I32)
    fail(ErrorKind::Shape, "tensor '" + packed_name + "' in shard '" + pfile->path() + "' has dtype " +
                               std::string(dtype_name(pinfo->dtype)) + "; expected I32 (eight 4-bit codes per word)");
  if (pshape != int4::packed_shape(rows, cols))
    fail(ErrorKind::Shape, "tensor '" + packed_name + "' in shard '" + pfile->path() + "' has shape " +
                               shape_string(pshape) + ", expected " + shape_string(int4::packed_shape(rows, cols)) +
                               " = [rows, ceil(cols/8)] for the " + expected_text + " weight");
  // weight_shape: I64 or I32 [2] = {rows, cols}
  if (weight_map.find(shape_name) == weight_map.end())
    fail(ErrorKind::TensorNotFound, where + " has no '" + shape_name + "'");
  auto [hfile, hinfo] = locate(shape_name, ckpt);
  if ((hinfo->dtype != DType::I64 && hinfo->dtype != DType::I32) || hinfo->shape != std::vector<uint64_t>{2})
    fail(ErrorKind::Shape, "tensor '" + shape_name + "' in shard '" + hfile->path() + "' has dtype " +
                               std::string(dtype_name(hinfo->dtype)) + " and shape " + shape_u64_string(hinfo->shape) +
                               "; expected I64 (or I32) [2]");
  std::vector<int64_t> stored(2);
  {
    const std::span<const std::byte> b = hfile->bytes(*hinfo);
    for (size_t k = 0; k < 2; ++k) {
      if (hinfo->dtype == DType::I64) {
        std::memcpy(&stored[k], b.data() + 8 * k, 8);
      } else {
        int32_t v;
        std::memcpy(&v, b.data() + 4 * k, 4);
        stored[k] = v;
      }
    }
  }
  if (stored != expected)
    fail(ErrorKind::Shape, "tensor '" + shape_name + "' in shard '" + hfile->path() + "' says " + shape_string(stored) +
                               ", expected " + expected_text + " from the config");
  // weight_scale: BF16 / F16 / F32 [rows, cols / G]
  if (weight_map.find(scale_name) == weight_map.end())
    fail(ErrorKind::TensorNotFound, where + " has no scale '" + scale_name + "'");
  auto [sfile, sinfo] = locate(scale_name, ckpt);
  const std::vector<int64_t> sshape(sinfo->shape.begin(), sinfo->shape.end());
  if (!int4::is_scale_dtype(sinfo->dtype))
    fail(ErrorKind::Shape, "tensor '" + scale_name + "' in shard '" + sfile->path() + "' has dtype " +
                               std::string(dtype_name(sinfo->dtype)) + "; expected BF16, F16 or F32");
  if (sshape != int4::scale_shape(rows, cols, G))
    fail(ErrorKind::Shape, "tensor '" + scale_name + "' in shard '" + sfile->path() + "' has shape " +
                               shape_string(sshape) + ", expected " + shape_string(int4::scale_shape(rows, cols, G)) +
                               " = [rows, cols/group_size] for the " + expected_text + " weight (group_size " +
                               std::to_string(G) + ")");

  TensorF t = huge_page_tensor<float>(name, expected);
  // rows split over the cores (each row's values depend on that row alone), each range checked
  // for non-finite values; the first in flat order is the one reported
  const std::span<const std::byte> packed = pfile->bytes(*pinfo);
  const std::vector<float> scale = sfile->to_float(*sinfo);
  const int64_t words = int4::packed_shape(rows, cols)[1], groups = cols / G;
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(rows / 64, 1));
  std::vector<int64_t> first_bad(static_cast<size_t>(workers), -1);
  parallel_for(workers, static_cast<int>(workers), [&](int64_t w, int) {
    const int64_t r0 = rows * w / workers, r1 = rows * (w + 1) / workers;
    const std::span<float> out(t.data.data() + r0 * cols, static_cast<size_t>((r1 - r0) * cols));
    int4::dequantize(packed.subspan(static_cast<size_t>(r0 * words * 4), static_cast<size_t>((r1 - r0) * words * 4)),
                     std::span<const float>(scale).subspan(static_cast<size_t>(r0 * groups), static_cast<size_t>((r1 - r0) * groups)),
                     sinfo->dtype, r1 - r0, cols, G, out);
    for (size_t k = 0; k < out.size(); ++k)
      if (!std::isfinite(out[k])) {
        first_bad[static_cast<size_t>(w)] = r0 * cols + static_cast<int64_t>(k);
        break;
      }
  });
  for (const int64_t k : first_bad)
    if (k >= 0)
      fail(ErrorKind::InvalidValue, where + " dequantizes to a non-finite value (" +
                                        std::to_string(t.data[static_cast<size_t>(k)]) + ") at flat index " +
                                        std::to_string(k) + " (scale '" + scale_name + "')");
  return t;
}

std::vector<int64_t> Checkpoint::layers_present() const {
  std::map<std::string, bool> shard_exists;
  std::vector<int64_t> out;
  for (const int64_t L : layers_mapped()) {
    bool all = true;
    for (const LayerTensorSpec* s : layer_tensors(config_)) {
      const std::string& shard = impl_->weight_map.at(layer_name(prefix_, L, s->checkpoint_suffix()));
      auto [known, inserted] = shard_exists.emplace(shard, false);
      std::error_code ec;
      if (inserted) known->second = fs::is_regular_file(shard, ec);
      all = all && known->second;
    }
    if (all) out.push_back(L);
  }
  return out;
}

std::string Checkpoint::layer_absent_reason(int64_t layer) const {
  std::vector<std::string> missing;
  std::string missing_shard;
  for (const LayerTensorSpec* s : layer_tensors(config_)) {
    const std::string name = layer_name(prefix_, layer, s->checkpoint_suffix());
    const auto it = impl_->weight_map.find(name);
    std::error_code ec;
    if (it == impl_->weight_map.end()) {
      missing.push_back(s->checkpoint_suffix());
    } else if (missing_shard.empty() && !fs::is_regular_file(it->second, ec)) {
      struct stat st {};
      missing_shard = "layer " + std::to_string(layer) + "'s shard '" + it->second + "' (of " + name + ") " +
                      (::stat(it->second.c_str(), &st) == 0 ? "is not a regular file (" + file_kind_name(st.st_mode) + ")"
                                                            : std::string("is missing"));
    }
  }
  if (missing.empty()) return missing_shard;
  std::string why = "layer " + std::to_string(layer) + " lacks " + missing.front();
  if (missing.size() > 1) why += " and " + std::to_string(missing.size() - 1) + " more of its attention tensors";
  // q_lora_rank 0 (or null) asks for q_proj; a LoRA checkpoint holds q_a_proj / q_b_proj instead
  if (!config_.has_q_lora() && impl_->weight_map.count(layer_name(prefix_, layer, "self_attn.q_a_proj.weight")))
    why += " (q_lora_rank is " + std::to_string(config_.q_lora_rank) +
           " in the config, which means q_proj, but the checkpoint holds q_a_proj and q_b_proj: set q_lora_rank to their rank)";
  return why;
}

Checkpoint::Impl::Located Checkpoint::Impl::checked(const std::string& ckpt, const std::string& name,
                                                    const std::vector<int64_t>& expected,
                                                    const std::string& expected_names) const {
  auto [file, info] = locate(name, ckpt);
  const std::string where = "tensor '" + name + "' in shard '" + file->path() + "'";
  if (!is_loadable_dtype(info->dtype))
    fail(ErrorKind::Shape, where + " has dtype " + std::string(dtype_name(info->dtype)) +
                               "; expected BF16, F16, F32 or F8_E4M3");
  const std::vector<int64_t> shape(info->shape.begin(), info->shape.end());
  if (shape != expected)
    fail(ErrorKind::Shape, where + " has shape " + shape_string(shape) + ", expected " + shape_string(expected) + " = " +
                               expected_names + " from the config");
  Located at{file, info};
  if (info->dtype != DType::F8_E4M3) return at;
  if (expected.size() != 2) fail(ErrorKind::Unsupported, where + " is F8_E4M3 but only 2-D weights can be block-quantized");
  const std::string scale_name = name + "_scale_inv";
  if (weight_map.find(scale_name) == weight_map.end())
    fail(ErrorKind::TensorNotFound, where + " is F8_E4M3 but its block scale '" + scale_name + "' is missing");
  auto [sfile, sinfo] = locate(scale_name, ckpt);
  const int64_t brows = (expected[0] + kFp8Block - 1) / kFp8Block, bcols = (expected[1] + kFp8Block - 1) / kFp8Block;
  const std::vector<int64_t> sshape(sinfo->shape.begin(), sinfo->shape.end());
  if (sshape != std::vector<int64_t>{brows, bcols})
    fail(ErrorKind::Shape, "tensor '" + scale_name + "' in shard '" + sfile->path() + "' has shape " + shape_string(sshape) +
                               ", expected " + shape_string({brows, bcols}) + " = [ceil(rows/128), ceil(cols/128)] for the " +
                               shape_string(expected) + " weight");
  if (sinfo->dtype != DType::F32 && sinfo->dtype != DType::BF16 && sinfo->dtype != DType::F16)
    fail(ErrorKind::Shape, "tensor '" + scale_name + "' has dtype " + std::string(dtype_name(sinfo->dtype)) + "; expected F32");
  at.scale_file = sfile;
  at.scale_info = sinfo;
  return at;
}

TensorF Checkpoint::Impl::load_checked(const std::string& ckpt, const std::string& name, const std::string& field,
                                       const std::vector<int64_t>& expected, const std::string& expected_names,
                                       std::map<std::string, std::string>& dtypes) const {
  if (const std::string stem = packed_stem(name); !stem.empty()) {
    if (weight_map.count(name))
      fail(ErrorKind::Checkpoint, "checkpoint " + ckpt + " holds '" + name + "' both as it is and pack-quantized ('" +
                                      stem + "weight_packed')");
    TensorF t = load_pack_quantized(ckpt, name, stem, expected, expected_names);
    dtypes[field] = "INT4";
    return t;
  }
  const Located at = checked(ckpt, name, expected, expected_names);
  const SafetensorsFile* file = at.file;
  const TensorInfo* info = at.info;
  const std::string where = "tensor '" + name + "' in shard '" + file->path() + "'";

  // Read with large reads and converted in parallel straight into the tensor (exact for BF16 /
  // F16 / F32 / F8_E4M3); first_bad = first non-finite value of the conversion, or -1. The
  // tensor's fresh memory is faulted in on huge pages where they come quickly (docs/cpu-gemm.md §5).
  TensorF t = huge_page_tensor<float>(name, expected);
  std::vector<float>& values = t.data;
  int64_t first_bad = file->read_float(*info, values);
  if (info->dtype == DType::F8_E4M3) {
    // W[i, j] = fp8(W[i, j]) * scale_inv[i / 128, j / 128]   (docs/math.md §11)
    const int64_t rows = expected[0], cols = expected[1], bcols = (cols + kFp8Block - 1) / kFp8Block;
    const std::vector<float> scale = at.scale_file->to_float(*at.scale_info);  // [brows, bcols]
    for (int64_t i = 0; i < rows; ++i) {
      const float* srow = scale.data() + (i / kFp8Block) * bcols;
      float* w = values.data() + i * cols;
      for (int64_t j = 0; j < cols; ++j) w[j] = w[j] * srow[j / kFp8Block];
    }
    first_bad = -1;  // the scaled values decide
    for (size_t k = 0; k < values.size() && first_bad < 0; ++k)
      if (!std::isfinite(values[k])) first_bad = static_cast<int64_t>(k);
  }
  if (first_bad >= 0)
    fail(ErrorKind::InvalidValue, where + " holds a non-finite value (" +
                                      std::to_string(values[static_cast<size_t>(first_bad)]) + ") at flat index " +
                                      std::to_string(first_bad));
  dtypes[field] = std::string(dtype_name(info->dtype));
  return t;
}

namespace {
void check_layer_range(int64_t layer, const AttentionConfig& cfg, const std::string& path) {
  if (layer < 0 || layer >= cfg.num_hidden_layers)
    fail(ErrorKind::Checkpoint, "layer " + std::to_string(layer) + " is out of range [0, " +
                                    std::to_string(cfg.num_hidden_layers) + ") (num_hidden_layers of " + path + ")");
}
}  // namespace

void Checkpoint::check_layer(int64_t layer, bool with_input_layernorm) const {
  check_layer_range(layer, config_, path_);
  const auto check = [&](const std::string& name, const std::vector<int64_t>& expected, const std::string& names) {
    if (impl_->packed_stem(name).empty()) impl_->checked(path_, name, expected, names);  // INT4: checked as it is read
  };
  for (const LayerTensorSpec* s : layer_tensors(config_))
    check(layer_name(prefix_, layer, s->checkpoint_suffix()), s->shape(config_), s->shape_names);
  if (with_input_layernorm) check(layer_name(prefix_, layer, "input_layernorm.weight"), {config_.hidden_size}, "[hidden_size]");
}

LayerWeights Checkpoint::load_layer(int64_t layer, bool with_input_layernorm) const {
  check_layer_range(layer, config_, path_);
  LayerWeights w;
  w.layer = layer;
  for (const LayerTensorSpec* s : layer_tensors(config_))  // the table of mla/layer_tensors.hpp
    w.*(s->member) = impl_->load_checked(path_, layer_name(prefix_, layer, s->checkpoint_suffix()), s->field,
                                         s->shape(config_), s->shape_names, w.source_dtype);
  if (with_input_layernorm)
    w.input_layernorm = impl_->load_checked(path_, layer_name(prefix_, layer, "input_layernorm.weight"),
                                     "input_layernorm", {config_.hidden_size}, "[hidden_size]", w.source_dtype);
  return w;
}

bool Checkpoint::has_tensor(const std::string& name) const {
  return impl_->weight_map.count(name) > 0 || !impl_->packed_stem(name).empty();
}

TensorF Checkpoint::load_tensor(const std::string& name, const std::vector<int64_t>& expected,
                                const std::string& expected_names, std::map<std::string, std::string>* dtypes) const {
  std::map<std::string, std::string> ignored;
  return impl_->load_checked(path_, name, name, expected, expected_names, dtypes ? *dtypes : ignored);
}

std::string Checkpoint::stored_dtype(const std::string& name) const {
  if (!impl_->weight_map.count(name)) return impl_->packed_stem(name).empty() ? "" : "INT4";
  auto [file, info] = impl_->locate(name, path_);
  return std::string(dtype_name(info->dtype));
}

TensorF Checkpoint::embed_rows(const std::vector<int64_t>& token_ids) const {
  const std::string name = prefix_ + "embed_tokens.weight";
  auto [file, info] = impl_->locate(name, path_);
  const std::string where = "tensor '" + name + "' in shard '" + file->path() + "'";
  const int64_t H = config_.hidden_size;
  if (!is_loadable_dtype(info->dtype))
    fail(ErrorKind::Shape, where + " has dtype " + std::string(dtype_name(info->dtype)) + "; expected BF16, F16, F32 or F8_E4M3");
  if (info->shape.size() != 2 || static_cast<int64_t>(info->shape[1]) != H)
    fail(ErrorKind::Shape, where + " has shape " + shape_u64_string(info->shape) + ", expected [vocab, " +
                               std::to_string(H) + "] = [vocab_size, hidden_size]");
  const int64_t rows = static_cast<int64_t>(info->shape[0]);
  // The table and config.json must agree (eval reads embed_tokens as [vocab_size, hidden_size]): a
  // vocab_size below the rows would let ids past the vocabulary through, one above would index past the table.
  if (rows != config_.vocab_size)
    fail(ErrorKind::Shape, where + " has " + std::to_string(rows) + " rows, but config.json's vocab_size is " +
                               std::to_string(config_.vocab_size) + " (expected [vocab_size, hidden_size])");
  for (size_t i = 0; i < token_ids.size(); ++i)
    if (token_ids[i] < 0 || token_ids[i] >= rows)
      fail(ErrorKind::InvalidArgument, "token id " + std::to_string(token_ids[i]) + " (position " + std::to_string(i) +
                                           ") is past the vocabulary: " + name + " has " + std::to_string(rows) +
                                           " rows (vocab_size " + std::to_string(rows) + ")");

  // FP8 embeddings (not used by any known checkpoint, handled for completeness).
  std::vector<float> scale;
  int64_t bcols = 0;
  if (info->dtype == DType::F8_E4M3) {
    auto [sfile, sinfo] = impl_->locate(name + "_scale_inv", path_);
    bcols = (H + kFp8Block - 1) / kFp8Block;
    const std::vector<int64_t> sshape(sinfo->shape.begin(), sinfo->shape.end());
    if (sshape != std::vector<int64_t>{(rows + kFp8Block - 1) / kFp8Block, bcols})
      fail(ErrorKind::Shape, "tensor '" + name + "_scale_inv' has shape " + shape_string(sshape) +
                                 ", expected [ceil(vocab/128), ceil(hidden_size/128)]");
    scale = sfile->to_float(*sinfo);
  }

  // Only the requested rows are touched: row r starts at byte r * H * dtype_size.
  const std::span<const std::byte> bytes = file->bytes(*info);
  const size_t esize = dtype_size(info->dtype);
  TensorF out("embed_rows", {static_cast<int64_t>(token_ids.size()), H});
  for (size_t i = 0; i < token_ids.size(); ++i) {
    const int64_t r = token_ids[i];
    const std::byte* row = bytes.data() + static_cast<size_t>(r) * static_cast<size_t>(H) * esize;
    float* dst = out.ptr() + static_cast<int64_t>(i) * H;
    for (int64_t j = 0; j < H; ++j) {
      float v = decode_element(info->dtype, row + static_cast<size_t>(j) * esize);
      if (!scale.empty()) v = v * scale[(r / kFp8Block) * bcols + j / kFp8Block];
      if (!std::isfinite(v))
        fail(ErrorKind::InvalidValue, where + " row " + std::to_string(r) + " holds a non-finite value at column " +
                                          std::to_string(j));
      dst[j] = v;
    }
  }
  return out;
}

int64_t LayerWeights::parameter_count() const {
  int64_t n = 0;
  for (const LayerTensorSpec& t : layer_tensor_table()) {
    const TensorF& tensor = this->*(t.member);
    n += tensor.empty() ? 0 : tensor.numel();
  }
  return n;
}

}  // namespace mla
