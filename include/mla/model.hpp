// mla/model.hpp — the whole transformers `DeepseekV3ForCausalLM` (the model class of DeepSeek-V3,
// Moonlight and the Kimi K2 family) and `DeepseekV2ForCausalLM` (DeepSeek-V2, V2-Lite) beyond one
// attention layer: their config.json keys, the tensors of a decoder layer and of the model head,
// and how they are loaded (docs/math.md §15). The two differ in RoPE (mla/config.hpp RopeStyle)
// and in the router (below); the rest of the layer is the same.
//
//   embed_tokens -> for each layer L:
//       h = h + self_attn(input_layernorm(h))
//       h = h + mlp(post_attention_layernorm(h))   mlp: dense SwiGLU for L < first_k_dense_replace,
//                                                     else MoE (router + routed + shared experts)
//   -> norm -> lm_head (embed_tokens when tie_word_embeddings)
//
// Tensor names under <prefix>layers.L. (prefix "model." or "language_model.model."):
//   input_layernorm.weight                 [H]
//   post_attention_layernorm.weight        [H]
//   mlp.gate_proj.weight / up_proj         [I, H]          dense layers (I = intermediate_size)
//   mlp.down_proj.weight                   [H, I]
//   mlp.gate.weight                        [E, H]          MoE layers: router (fp32 in transformers)
//   mlp.gate.e_score_correction_bias       [E]             router bias (fp32; DeepseekV3 only)
//   mlp.experts.{e}.{gate,up}_proj.weight  [I_m, H]        routed expert e (I_m = moe_intermediate_size)
//   mlp.experts.{e}.down_proj.weight       [H, I_m]
//   mlp.shared_experts.{gate,up}_proj      [I_m * n_shared_experts, H]
//   mlp.shared_experts.down_proj           [H, I_m * n_shared_experts]
// Model level: <prefix>embed_tokens.weight [V, H], <prefix>norm.weight [H], lm_head.weight [V, H]
// (beside the "model." part of the prefix: "lm_head.weight", "language_model.lm_head.weight").
// Every tensor is read through Checkpoint::load_tensor by its plain name, so a storage format the
// checkpoint reader understands (BF16, F16, F32, FP8 with block scales) needs nothing here.
//
// Shape legend: H = hidden_size, V = vocab_size, E = n_routed_experts, k = num_experts_per_tok.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/tensor.hpp"

namespace mla {

// config.json keys of the decoder beyond the attention. Defaults are DeepseekV3Config's or
// DeepseekV2Config's (what transformers uses for a key that is absent), by the config's family.
// transformers reads no scoring_func and no topk_method for DeepseekV3, whose router always runs
// sigmoid scores with group-limited, bias-corrected selection ("noaux_tc"); DeepseekV2's runs
// softmax scores with topk_method "greedy" or "group_limited_greedy". A config that asks its
// family for anything else is refused, naming the key and what the family supports.
struct ModelConfig {
  AttentionConfig attention;             // the keys of mla/config.hpp
  int64_t intermediate_size = 18432;     // dense MLP width
  int64_t moe_intermediate_size = 2048;  // width of each routed expert
  int64_t first_k_dense_replace = 3;     // layers [0, first_k_dense_replace) are dense
  int64_t n_routed_experts = 256;        // E
  int64_t n_shared_experts = 1;          // the shared expert is one MLP of width I_m * n_shared_experts
  int64_t num_experts_per_tok = 8;       // k
  int64_t n_group = 8;                   // expert groups (E / n_group experts each)
  int64_t topk_group = 4;                // groups a token may route into
  bool norm_topk_prob = true;            // divide the k weights by their sum (+ 1e-20)
  double routed_scaling_factor = 2.5;    // multiplies the k weights
  std::string hidden_act = "silu";
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  bool tie_word_embeddings = false;      // lm_head = embed_tokens
  // Not a transformers key: set by this project's byte-level models (models/tiny-mla): ids are
  // bytes 0..255 plus special tokens, so `--text FILE` can be tokenized as BOS + the file's bytes.
  bool byte_level_vocab = false;
  int64_t bos_token_id = -1;             // -1: absent or null
  int64_t eos_token_id = -1;

  bool is_moe_layer(int64_t layer) const { return layer >= first_k_dense_replace; }
  // DeepseekV3's router adds e_score_correction_bias to its sigmoid scores; DeepseekV2's has none.
  bool router_has_correction_bias() const { return attention.family == ModelFamily::DeepseekV3; }
  int64_t experts_per_group() const { return n_group > 0 ? n_routed_experts / n_group : 0; }
  int64_t shared_intermediate_size() const { return moe_intermediate_size * n_shared_experts; }
};

// Parses config.json text (flat or nested under text_config, as parse_config). Error(Config)
// naming the file and key for a missing or inconsistent key, and for what the forward cannot
// honour (hidden_act other than silu, a scoring_func or topk_method the family does not run,
// DeepseekV2 with norm_topk_prob true, a routing that cannot pick k experts).
ModelConfig parse_model_config(std::string_view json, const std::string& source_name = "config.json");
ModelConfig load_model_config(const std::string& path);
// config.json of a whole model (config_to_json's attention keys, then the decoder's as the
// family's transformers config names them); parse_model_config reads it back field by field.
std::string model_config_to_json(const ModelConfig& m, bool nested);

// The presets, the whole models of `synth --preset` (docs/checkpoints.md §4): the attention geometry
// and the decoder keys of each model's published config.json (docs/checkpoints.md §8 cites them),
// one function each; `.attention` is the geometry alone:
//   kimi_k26_model().attention        Kimi K2.6 (K2.5 values where K2.6's are unpublished; nested layout)
//   deepseek_v3_model().attention     deepseek-ai/DeepSeek-V3 (DeepseekV3ForCausalLM, 61 layers, 128 heads)
//   deepseek_v2_lite_model()...       deepseek-ai/DeepSeek-V2-Lite (DeepseekV2ForCausalLM, q_proj, yarn 40)
//   moonlight_model()...              moonshotai/Moonlight-16B-A3B (DeepseekV3ForCausalLM, q_proj, plain RoPE)
//   tiny_model().attention            Kimi's layout with every width distinct: H 64, n 4, r_q 48, r_kv 32,
//                                     d_n 16, d_r 8, d_v 16, 2 layers, vocab 97
// and their decoder keys:
//   kimi_k26_model          Kimi K2 (every release to K2.6): intermediate 18432, 384 experts of 2048,
//                           first_k_dense_replace 1, 1 shared, 8 per token, one group,
//                           norm_topk_prob, routed_scaling_factor 2.827
//   deepseek_v3_model       256 experts of 2048 in 8 groups, topk_group 4, 8 per token, 1 shared,
//                           first 3 dense (18432), norm_topk_prob, routed_scaling_factor 2.5
//   deepseek_v2_lite_model  DeepseekV2: 64 experts of 1408, 6 per token, greedy softmax, 2 shared,
//                           first 1 dense (10944), not normalised, routed_scaling_factor 1
//   moonlight_model         64 experts of 1408 in one group, 6 per token, 2 shared, first 1 dense
//                           (11264), norm_topk_prob, routed_scaling_factor 2.446
//   tiny_model              intermediate 96, 8 experts of 32 in 2 groups, top-1
//                           group, 2 per token, 1 shared, first 1 dense, routed_scaling_factor 2.827
ModelConfig kimi_k26_model();
ModelConfig deepseek_v3_model();
ModelConfig deepseek_v2_lite_model();
ModelConfig moonlight_model();
ModelConfig tiny_model();

// The ids of a text for a byte-level model (byte_level_vocab): bos_token_id (when the config has
// one), then one id per byte. Error(InvalidArgument) naming `what` (e.g. "--text notes.txt") for a
// model that is not byte-level.
std::vector<int64_t> byte_level_token_ids(const ModelConfig& cfg, std::string_view bytes, const std::string& what);
// What token `id` of a byte-level model is, printable on one line: "<bos>" / "<eos>" for those
// ids, a printable ASCII byte as itself, \n \t \r \\ escaped, any other byte as \xNN, an id
// past the bytes as <id N>.
std::string byte_level_token_text(const ModelConfig& cfg, int64_t id);
// A token's bytes (any tokenizer's) as one printable field: \n \t \r \\ escaped, other control
// bytes and invalid UTF-8 as \xNN, valid UTF-8 kept (at most 256 bytes shown). For one byte it is
// byte_level_token_text's text of that byte.
std::string token_bytes_text(std::string_view bytes);

// ---- routing ---------------------------------------------------------------------------------

// One token's routing from its router logits [E] (docs/math.md §15.2; src/model/routing.cpp
// writes out both routers):
//   DeepseekV3: sigmoid scores; the group-limited top-k of scores + e_score_correction_bias
//               (group score: the sum of its top 2); weights = the chosen scores, divided by
//               their sum + 1e-20 when norm_topk_prob
//   DeepseekV2: softmax scores; the top k of all ("greedy") or of the topk_group groups of largest
//               maximum score ("group_limited_greedy"); weights = the chosen scores
// then weights *= routed_scaling_factor. Ties go to the lower index (torch.topk leaves them
// unspecified). `experts` ascending, weights[j] that of experts[j]. correction_bias [E] is read
// for DeepseekV3 only (nullptr allowed for V2).
template <class T>
struct TokenRoute {
  std::vector<int32_t> experts;  // [k]
  std::vector<T> weights;        // [k]
};
// fp32 arithmetic (the CPU forward).
TokenRoute<float> route_token(const float* logits, const float* correction_bias, const ModelConfig& cfg);
// double arithmetic (the reference), every result rounded to fp32 when `fp32` (a bf16 model's
// router runs in fp32), else exact.
TokenRoute<double> route_token(const double* logits, const float* correction_bias, const ModelConfig& cfg, bool fp32);

// ---- weights ------------------------------------------------------------------------------

// One SwiGLU MLP: down_proj(silu(gate_proj(x)) * up_proj(x)). fp32 values as stored
// (BF16/F16/F32 widened exactly, FP8 dequantized).
struct MlpWeights {
  TensorF gate_proj;  // [I, H]
  TensorF up_proj;    // [I, H]
  TensorF down_proj;  // [H, I]
  int64_t parameter_count() const { return gate_proj.numel() + up_proj.numel() + down_proj.numel(); }
};

// DeepseekV3TopkRouter's parameters (transformers keeps both in fp32 whatever the model dtype).
struct RouterWeights {
  TensorF weight;                   // [E, H]
  TensorF e_score_correction_bias;  // [E]
};

// Everything of decoder layer L except its routed experts' weights, which a caller loads all
// at once (load_decoder_layer with experts = true) or one at a time (load_expert).
struct DecoderLayerWeights {
  int64_t layer = 0;
  bool moe = false;
  LayerWeights self_attn;            // the attention tensors + input_layernorm (mla/checkpoint.hpp)
  TensorF post_attention_layernorm;  // [H]
  MlpWeights mlp;                    // dense layers only
  RouterWeights gate;                // MoE layers only
  MlpWeights shared_experts;         // MoE layers with n_shared_experts > 0
  std::vector<MlpWeights> experts;   // MoE layers: [E] when loaded with experts, else empty
  std::map<std::string, std::string> source_dtype;  // checkpoint dtype by name ("mlp.gate.weight": "F32")
};

// The model's first and last tensors.
struct ModelHeadWeights {
  TensorF norm;     // [H]
  TensorF lm_head;  // [V, H] (embed_tokens' values when tie_word_embeddings)
  std::map<std::string, std::string> source_dtype;
};

// Layer L's tensors, shapes checked against cfg; experts = false leaves `experts` empty.
DecoderLayerWeights load_decoder_layer(const Checkpoint& ckpt, const ModelConfig& cfg, int64_t layer, bool experts);
// Routed expert e of MoE layer L.
MlpWeights load_expert(const Checkpoint& ckpt, const ModelConfig& cfg, int64_t layer, int64_t expert);
ModelHeadWeights load_model_head(const Checkpoint& ckpt, const ModelConfig& cfg);

// The full names of the tensors above, so that a check before any work (every layer present,
// every expert) and the loaders agree. "" for a tensor the config does not have.
std::string decoder_tensor_name(const Checkpoint& ckpt, int64_t layer, const std::string& suffix);
std::string lm_head_tensor_name(const Checkpoint& ckpt);

// Every tensor the whole-model forward will read, in load order (embed_tokens, each layer's
// attention, norms, MLP or router + shared + experts, norm, lm_head): Error(TensorNotFound)
// naming the first missing one (`what` says for which command), before any work is done.
void check_model_tensors(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& what);

// Parameters of the whole model from the geometry (routed experts all counted) and those a
// token uses (k routed experts).
int64_t model_parameter_count(const ModelConfig& cfg);
int64_t model_active_parameter_count(const ModelConfig& cfg);

}  // namespace mla
