// mla/checkpoint.hpp — locating and loading one layer's attention weights from a checkpoint.
//
// A checkpoint is one of:
//   * a directory with model.safetensors.index.json (+ config.json); shards are resolved
//     through its "weight_map", whatever their names ("-of-000064" or "-of-00163");
//   * a directory with a single model.safetensors (+ config.json);
//   * one .safetensors file plus an explicit config path.
// Tensor names are found whatever their prefix: "model.layers.L.self_attn.q_a_proj.weight"
// (DeepSeek-V3, Kimi K2) or "language_model.model.layers.L.self_attn.q_a_proj.weight"
// (Kimi K2.5/K2.6). Only the bytes of the requested tensors are read. Weights stored in
// compressed-tensors' pack-quantized INT4 (Kimi's routed experts) appear under their plain
// `.weight` names, dequantized (load_tensor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mla/config.hpp"
#include "mla/safetensors.hpp"
#include "mla/tensor.hpp"

namespace mla {

// One layer's attention parameters, widened to fp32 exactly (BF16/F16/F32), or FP8 E4M3
// dequantized in fp32 with its 128x128 `weight_scale_inv` blocks (docs/math.md §11).
// Linear weights are [out, in] row-major (y = x W^T), exactly as stored.
//   H = hidden_size, n = num_attention_heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
//   d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim
struct LayerWeights {
  int64_t layer = 0;
  TensorF q_a_proj;            // [r_q, H]            (empty when q_lora_rank is null)
  TensorF q_a_layernorm;       // [r_q]
  TensorF q_b_proj;            // [n*(d_n+d_r), r_q]
  TensorF q_proj;              // [n*(d_n+d_r), H]    (only when q_lora_rank is null)
  TensorF kv_a_proj_with_mqa;  // [r_kv + d_r, H]     rows: latent c (r_kv) | k_pe (d_r)
  TensorF kv_a_layernorm;      // [r_kv]
  TensorF kv_b_proj;           // [n*(d_n+d_v), r_kv] head-major: k_nope (d_n) | v (d_v)
  TensorF o_proj;              // [H, n*d_v]
  // attention_bias = true only (empty otherwise):
  // (HF DeepseekV3Attention: q_a_proj, kv_a_proj_with_mqa and o_proj take bias=attention_bias;
  //  q_proj, q_b_proj and kv_b_proj never have one, so with a null q_lora_rank there is no q bias.)
  TensorF q_a_proj_bias;            // [r_q]  (q_lora_rank set only)
  TensorF kv_a_proj_with_mqa_bias;  // [r_kv + d_r]
  TensorF o_proj_bias;              // [H]
  // Decoder norm in front of the attention, when requested (for --tokens): [H]
  TensorF input_layernorm;
  // dtype of each tensor in the checkpoint, by short name ("q_a_proj": "BF16")
  std::map<std::string, std::string> source_dtype;
  int64_t parameter_count() const;  // attention tensors only (the rows of mla/layer_tensors.hpp, docs/math.md §12)
};

struct TensorLocation {
  std::string name;   // full tensor name in the checkpoint
  std::string shard;  // file path
  TensorInfo info;
};

class Checkpoint {
 public:
  // path: directory or .safetensors file; config_path: "" to use <dir>/config.json.
  static Checkpoint open(const std::string& path, const std::string& config_path = "");

  const AttentionConfig& config() const { return config_; }
  const std::string& path() const { return path_; }
  // The config.json the checkpoint was opened with (mla/model.hpp reads the decoder's keys from it).
  const std::string& config_path() const { return config_path_; }
  const std::vector<std::string>& shards() const { return shard_paths_; }
  // The files this checkpoint has read so far: config.json, the index (when sharded) and every
  // shard opened (a header read or a tensor loaded), in that order, shards sorted by path.
  std::vector<std::string> files_read() const;
  // files_read() and every shard not opened yet, in the same order: what a run that will read
  // the whole model depends on (eval's resume settings hash them, docs/scale-out.md §2).
  std::vector<std::string> files_of_the_model() const;
  // All tensors of all shards, in shard then offset order.
  std::vector<TensorLocation> list_tensors() const;
  // Layers below num_hidden_layers whose attention tensors are all named by the index (or the
  // single file), found from the tensor names: the cost is the number of tensors, not of layers.
  std::vector<int64_t> layers_mapped() const;
  // Those of them whose shards exist.
  std::vector<int64_t> layers_present() const;
  // Why layer L is not among them, in a few words ("layer 3 lacks self_attn.q_proj.weight
  // (q_lora_rank is 0 ...)", "layer 3's shard '...' is missing"); "" when it is.
  std::string layer_absent_reason(int64_t layer) const;
  // Every attention tensor of layer L (+ input_layernorm) checked from the headers without
  // reading data: mapped, its shard present and holding it, dtype, shape against the config
  // (FP8: its block scales too). Errors as load_layer's. A loop over layers calls it for every
  // layer before the first one runs.
  void check_layer(int64_t layer, bool with_input_layernorm = false) const;
  // The prefix in use, e.g. "language_model.model." (empty if none).
  const std::string& prefix() const { return prefix_; }

  // Loads layer L's attention tensors (+ input_layernorm if with_input_layernorm), checking
  // every shape against the config. Errors name the tensor, the shard and the expected shape.
  LayerWeights load_layer(int64_t layer, bool with_input_layernorm = false) const;
  // Whether load_tensor can find `name` (a full name: stored as it is, or a weight stored
  // pack-quantized under its plain `.weight` name).
  bool has_tensor(const std::string& name) const;
  // Tensor `name` (full name, prefix included) as fp32 exactly as load_layer reads its tensors:
  // BF16 / F16 / F32 widened, FP8 E4M3 dequantized with its block scales, and a weight stored
  // pack-quantized (INT4: `<stem>weight_packed`, `weight_scale`, `weight_shape`, Kimi's routed
  // experts) found under its plain name `<stem>weight` and dequantized exactly as
  // compressed-tensors does (mla/int4.hpp, docs/checkpoints.md §6). Its shape is checked against
  // `expected` (`expected_names` says it in config names for the error); non-finite values are
  // errors; its checkpoint dtype ("BF16", ..., "INT4") is recorded in (*dtypes)[name] when
  // dtypes is given.
  TensorF load_tensor(const std::string& name, const std::vector<int64_t>& expected, const std::string& expected_names,
                      std::map<std::string, std::string>* dtypes = nullptr) const;
  // How `name` is stored: its dtype ("BF16", "F8_E4M3", ...), "INT4" for a pack-quantized weight
  // read under its plain name, "" when absent.
  std::string stored_dtype(const std::string& name) const;

  // Rows of embed_tokens for the given token ids -> [ids.size(), H] (fp32). Errors name any
  // id >= vocab rows.
  TensorF embed_rows(const std::vector<int64_t>& token_ids) const;

  // What wrote the checkpoint when `mla-h2o synth` did: its shards' __metadata__ value of
  // kSynthMetadataKey (e.g. "mla-h2o synth: model_type kimi_k25, dtype bf16, seed 0"); ""
  // for any other checkpoint (real weights).
  std::string synthetic_origin() const;
  // Unmaps every shard opened so far (they are reopened on the next read). A loop over
  // layers calls it after each load, so that the mapped pages of the layers already done do
  // not stay resident (`mla-h2o sweep`: the memory of one layer, not of all).
  void release_mappings() const;

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

 private:
  Checkpoint();
  struct Impl;
  AttentionConfig config_;
  std::string path_;
  std::string config_path_;
  std::string prefix_;
  std::vector<std::string> shard_paths_;
  std::unique_ptr<Impl> impl_;
};

// --- synthetic checkpoints (mla-h2o synth, mla/synth.hpp) ------------------------------
// The __metadata__ key synth writes into every shard (Checkpoint::synthetic_origin).
inline constexpr const char* kSynthMetadataKey = "mla_h2o_synth";

}  // namespace mla
