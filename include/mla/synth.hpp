// mla/synth.hpp — `mla-h2o synth`: deterministic synthetic checkpoints in a published model's
// layout (docs/checkpoints.md §4), from a ModelConfig (one of the presets of mla/model.hpp, or a
// test's own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/model.hpp"

namespace mla {

struct SynthOptions {
  std::string preset = "tiny";   // one of synth_presets()
  std::string out_dir;
  std::string dtype = "bf16";    // "bf16" | "f32" | "f8_e4m3"
  std::vector<int64_t> layers = {0};
  int64_t vocab = 0;             // rows of embed_tokens; 0 = preset default
  uint64_t seed = 0;
  int64_t shards = 2;            // 2 .. kSynthMaxShards (index + shards, real layout)
  // > 0: the whole model with this many routed experts per MoE layer: every layer's attention,
  // norms and MLP (dense below first_k_dense_replace, else router + shared expert + routed
  // experts), the final norm and lm_head. The routed experts are stored compressed-tensors
  // pack-quantized INT4 (group size `group_size`, Kimi K2-Thinking / K2.5 / K2.6's layout, whatever
  // the preset), everything else in `dtype` (bf16 or f32). `layers` must then be 0 .. L-1, and
  // config.json says num_hidden_layers L.
  int64_t experts = 0;
  int64_t group_size = 32;       // INT4 group size (Kimi: 32)
};
inline constexpr int64_t kSynthMaxShards = 99999;  // the file names' five digits
class OutputSet;
// Writes config.json, model.safetensors.index.json and the shards into opts.out_dir as one output
// set (mla/output_set.hpp: the directory gets the whole checkpoint or keeps what it held); returns
// the model written (opts.preset's, opts.vocab applied; with opts.experts its decoder as written).
ModelConfig synthesize_checkpoint(const SynthOptions& opts);
// Same, for an explicit model (tests use it for odd geometries, a ModelConfig holding only an
// attention config among them): its attention, and with opts.experts > 0 its decoder keys
// (n_routed_experts replaced by opts.experts, num_experts_per_tok capped by what they allow).
void synthesize_checkpoint(const SynthOptions& opts, const ModelConfig& model);
// The f32 values synth draws for tensor `name` (its plain name, e.g. "...mlp.experts.3.up_proj.weight")
// of the checkpoint these arguments write, before they are rounded to the stored dtype or
// quantized to INT4: what a test compares a loaded tensor with. Error(TensorNotFound) for a
// name synth does not write.
std::vector<float> synthesized_values(const SynthOptions& opts, const ModelConfig& model, const std::string& name);
// The presets: kimi-k2.6, deepseek-v3, deepseek-v2-lite, moonlight-16b-a3b (published models,
// mla/model.hpp) and tiny; synth_preset_names() joins them with ", ".
const std::vector<std::string>& synth_presets();
std::string synth_preset_names();
// The preset's model with opts.vocab applied; no files written.
ModelConfig synth_preset_model(const SynthOptions& opts);
// The checkpoint's files into an open output set (opts.out_dir is not used), which the caller
// commits, possibly with files of its own beside them.
void write_synthetic_checkpoint(const SynthOptions& opts, const ModelConfig& model, OutputSet& out);

}  // namespace mla
