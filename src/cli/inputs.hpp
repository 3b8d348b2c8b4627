// src/cli/inputs.hpp — the three input sources of `mla-h2o run` (exactly one per run):
//
//   --input FILE [--input-tensor NAME]   hidden states from a safetensors file: tensor NAME.L
//                                        for layer L when the file holds one, else NAME
//                                        (default hidden_states), shape [S, H] or [1, S, H],
//                                        dtype F32, BF16 or F16 (widened exactly to fp32)
//     [--residual]                       the tensor is the residual stream entering layer L
//                                        (transformers' output_hidden_states[L]): the layer's
//                                        input_layernorm is applied, as for --tokens
//   --tokens 3,17,250 | --tokens FILE    rows of embed_tokens, then the layer's input_layernorm
//                                        (eps = rms_norm_eps), as the decoder layer feeds its
//                                        attention; in bf16 mode with HF's two bf16 roundings
//                                        (docs/math.md §3.5). FILE holds ids separated by commas,
//                                        spaces or newlines.
//   --seq-len S --seed N                 seeded standard-normal embeddings (the default source:
//                                        256 tokens, seed 0) — see seeded_hidden_states.
//
// Shape legend: S = tokens, H = hidden_size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "args.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/model.hpp"
#include "mla/policy.hpp"
#include "mla/provenance.hpp"
#include "mla/safetensors.hpp"
#include "mla/tensor.hpp"

namespace mla::cli {

enum class InputKind { File, Tokens, Seeded };

struct InputRequest {
  InputKind kind = InputKind::Seeded;
  std::string file;                      // --input
  std::string tensor = "hidden_states";  // --input-tensor
  bool residual = false;                 // --residual: apply input_layernorm to the --input rows
  std::string tokens;                    // --tokens (list or file path)
  std::string text;                      // --text FILE (kind Tokens): BOS + its bytes, byte-level models
  int64_t text_max_bytes = 0;            // only the first this many bytes of --text (0 = all)
  int64_t max_rows = 0;                  // only the first this many --tokens ids (0 = all): what the run uses
  int64_t seq_len = 256;                 // --seq-len
  uint64_t seed = 0;                     // --seed
};

// The flags every input-taking command declares (appended to its FlagSpec list).
std::vector<FlagSpec> input_flags();
// Reads the flags above; more than one source (e.g. --input with --tokens, or --input with
// --seq-len) or --input-tensor without --input is an Error(InvalidArgument).
InputRequest input_request(const Args& args);

struct HiddenInput {
  TensorF hidden;                  // [S, H] fp32 values
  std::string description;         // one line for the report
  std::vector<int64_t> token_ids;  // --tokens / --text only: [S]
  std::vector<std::string> token_text;  // --text only: [S] each token as printable text (byte_level_token_text)
  // ||row|| of the residual stream entering the layer, before input_layernorm, when the source
  // gives it (--tokens: the embed_tokens rows; --input --residual: the rows); else empty.
  std::vector<double> residual_norm;  // [S]
};

// An input source opened once, before anything large is allocated: the token list parsed,
// the --input file mapped (its header read) and the tensor feeding the layer chosen. The
// memory plan reads seq_len; load_input builds the rows from it without reopening anything.
struct OpenedInput {
  InputRequest request;
  std::vector<int64_t> token_ids;                // --tokens
  std::string text;                              // --text: the bytes read (token ids made at load, with the config)
  std::shared_ptr<const SafetensorsFile> file;   // --input
  std::string tensor;                            // --input: the tensor that feeds the layer
  int64_t seq_len = -1;                          // rows it gives; -1 when it cannot be told
                                                 //   (load_input then reports what is wrong)
};
// Errors: a --tokens list that does not parse, an --input file that does not open or lacks
// the tensor (the messages of parse_token_ids and input_tensor_for_layer).
OpenedInput open_input(const InputRequest& req, int64_t layer);

// --gemm auto|onednn|eigen (run, demo, sweep, decode): the cpu backend's GEMM engine.
Gemm gemm_choice(const Args& args);

// Whether the layer's input_layernorm must be loaded (load_layer(L, true)) for this source.
inline bool needs_input_layernorm(const InputRequest& req) {
  return req.kind == InputKind::Tokens || (req.kind == InputKind::File && req.residual);
}

// --text on a checkpoint whose directory holds tokenizer.json or tiktoken.model: in.token_ids =
// BOS + the tokenizer's ids of the whole file (no special tokens added; the first max_rows), and
// in.token_text; false (in untouched) when there is no tokenizer.
bool text_through_tokenizer(const InputRequest& req, const Checkpoint& ckpt, const ModelConfig& model, HiddenInput& in);
// `weights` must hold input_layernorm when needs_input_layernorm(req) (load_layer(L, true)).
HiddenInput load_input(const OpenedInput& in, const Checkpoint& ckpt, const LayerWeights& weights, Precision precision);

// The bytes of a text file (--text): one error line naming `flag` when it cannot be read.
std::string read_bytes(const std::string& path, const std::string& flag, int64_t max_bytes = 0);

// The caveat of --tokens on layers above 0 (one line for reports): only layer 0 receives the
// embeddings in the model; `layers` lists the layers concerned ("1, 2, 5").
std::string tokens_caveat(const std::string& layers);

// Error naming `flag` (e.g. "--layer 5") unless `layer` is within num_hidden_layers
// (Error InvalidArgument) and the checkpoint holds all of that layer's attention tensors
// (Error Checkpoint, listing the layers present).
void check_layer_present(const Checkpoint& ckpt, int64_t layer, const std::string& flag);

// The attention tensors of `layer` (+ input_layernorm when input_norm) after
// check_layer_present(ckpt, layer, "--layer L").
LayerWeights load_checked_layer(const Checkpoint& ckpt, int64_t layer, bool input_norm);

// The Rng stream of the seeded hidden states (random.hpp: Rng(seed, stream)). Stream 1 is
// unused by `synth` (which uses 0 and 1000*(L+1)+k), so a checkpoint and its inputs
// drawn from the same seed are independent.
inline constexpr uint64_t kHiddenStatesStream = 1;

// hidden[s, j] = float(rng.normal()) for s in [0, S), j in [0, H), row-major, one
// Rng(seed, kHiddenStatesStream). In Python:  rng = <Rng port>(seed, 1);
//   x = np.array([rng.normal() for _ in range(S*H)], dtype=np.float64).astype(np.float32).reshape(S, H)
TensorF seeded_hidden_states(int64_t seq_len, int64_t hidden_size, uint64_t seed);

// The tensor of `path` that feeds layer `layer`: "<name>.<layer>" when the file holds it
// (one tensor per layer, as reference/python/dump_hidden_states.py writes them), else
// "<name>"; Error(TensorNotFound) naming both and listing the file's tensors otherwise.
std::string input_tensor_for_layer(const std::string& path, const std::string& name, int64_t layer);
std::string input_tensor_for_layer(const SafetensorsFile& f, const std::string& name, int64_t layer);

// Tensor `name` of f (opened from `path` for `flag`), or Error(TensorNotFound):
// "<flag> <path> has no tensor '<name>' (it holds: a, b); choose one with <choose_flag>".
const TensorInfo& find_tensor_or_fail(const SafetensorsFile& f, const std::string& flag, const std::string& path,
                                      const std::string& name, const std::string& choose_flag);

// Reads tensor `name` of `path` as [S, H]; errors name the file, the tensor and what is
// wrong (missing tensor, dtype, rank, hidden size, non-finite value at [s, j]).
TensorF hidden_states_from_file(const SafetensorsFile& f, const std::string& name, int64_t hidden_size);

// "3,17,250" or a file of ids -> ids; negative ids and malformed entries are errors.
std::vector<int64_t> parse_token_ids(const std::string& arg);

// HF LlamaRMSNorm (DeepseekV3RMSNorm) on each row of x [S, H], in place, as PyTorch runs it
// with an fp32 (FP32) or bf16 (BF16) hidden_states tensor:
//   var  = fp32(mean_j x[s,j]^2)      (mean evaluated in double, rounded once)
//   r    = fp32(1 / sqrt(fp32(var + fp32(eps))))
//   FP32: y = fp32(w * fp32(x * r))
//   BF16: x and w are bf16 values; y = bf16(fp32(w) * bf16(fp32(x * r)))  (two roundings)
void input_rms_norm(TensorF& x, const TensorF& weight, double eps, Precision precision);

// The policies of decode and eval: --policy (default all), then --sinks / --recent /
// --policy-seed applied to every policy that has the setting (overriding the presets).
std::vector<PolicySettings> read_policies(const Args& a);

// The SHA-256 of every file the checkpoint has read (Checkpoint::files_read), or with every_shard
// of every file of the model (files_of_the_model: eval's resume settings, which a changed shard
// that no window has read yet must also fail), for report.json; a progress line (bytes) on
// stderr when it takes long, unless quiet.
std::vector<FileDigest> model_file_digests(const Checkpoint& ckpt, const std::string& command, bool quiet,
                                           bool every_shard = false);
// MLA_MODEL_SHA256: unset, "" or 1 = hash, 0 = sizes only; anything else Error(InvalidArgument).
// main() checks it before any command starts.
bool model_sha256_enabled();

}  // namespace mla::cli
