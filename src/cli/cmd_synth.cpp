// src/cli/cmd_synth.cpp — `mla-h2o synth`: write a synthetic checkpoint with the real Kimi
// K2.6 layout (config.json nested under text_config, model.safetensors.index.json, shards
// named model-0000i-of-0000NN.safetensors, names language_model.model.layers.L.self_attn.*).
// The weight recipe and the random stream of every tensor are documented in
// src/checkpoint/synth.cpp; the same --seed always gives the same bytes.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "mla/checkpoint.hpp"
#include "mla/memory_available.hpp"
#include "mla/memory_plan.hpp"
#include "mla/synth.hpp"
#include "mla/error.hpp"

namespace mla::cli {
namespace {

const CommandSpec kSpec = {
    "synth",
    "write a synthetic checkpoint in a published model's layout (deterministic for a seed)",
    "mla-h2o synth --out DIR [--preset NAME] [--dtype bf16|f32|f8_e4m3] [--layers 0,1] [--experts N] [options]",
    {
        {"out", "DIR", "output directory (created if missing; existing files of the same names are replaced)", ""},
        {"preset", "NAME",
         "geometry, from the model's published config.json: kimi-k2.6 (hidden 7168, 64 heads, ~200 MB per bf16 layer), "
         "deepseek-v3 (7168, 128 heads), deepseek-v2-lite (DeepseekV2ForCausalLM: 2048, 16 heads, q_proj, softmax "
         "routing), moonlight-16b-a3b (2048, 16 heads, q_proj, plain RoPE); or tiny (hidden 64, 4 heads)",
         "tiny"},
        {"dtype", "TYPE", "bf16, f32, or f8_e4m3 (F8_E4M3 weights + F32 weight_scale_inv, 128x128 blocks; norms BF16)",
         "bf16"},
        {"layers", "LIST", "layers to write, e.g. 0,1,5 (config.json still says num_hidden_layers of the preset)", "0"},
        {"vocab", "N", "rows of embed_tokens written; config.json's vocab_size is set to it", "97 (tiny), else 1024"},
        {"seed", "N", "random seed (mla::Rng, one documented stream per tensor)", "0"},
        {"shards", "N", "number of shards, >= 2: layers spread over 1..N-1, embed_tokens (and norm, lm_head) in the last", "2"},
    {"experts", "N",
     "write the whole model with N routed experts per MoE layer: attention, norms, dense MLP, router, shared "
     "expert, embed_tokens, lm_head in --dtype, routed experts in Kimi K2.6's compressed-tensors pack-quantized "
     "INT4 whatever the preset; --layers must then be 0..L-1 (config.json says num_hidden_layers L)",
     "off (attention only)"},
    {"group-size", "G", "INT4 group size of the routed experts (with --experts); must divide hidden_size and "
                        "moe_intermediate_size", "32 (Kimi's)"},
    {"dry-run", "", "print the plan (memory peak of the largest shard against what is available) and exit 0 without "
                    "writing anything", ""},
    },
    0,
    "",
};

}  // namespace

int cmd_synth(const std::vector<std::string>& argv) {
  const Args args = Args::parse(kSpec, argv);
  if (print_help_if_asked(args, kSpec)) return 0;
  SynthOptions opts;
  opts.out_dir = args.str("out");
  if (opts.out_dir.empty()) fail(ErrorKind::InvalidArgument, "synth: --out DIR is required");
  opts.preset = args.choice("preset", synth_presets(), "tiny");
  opts.dtype = args.choice("dtype", {"bf16", "f32", "f8_e4m3"}, "bf16");
  opts.experts = args.integer("experts", 0, 1, int64_t{1} << 16);
  opts.group_size = args.integer("group-size", 32, 1, int64_t{1} << 20);
  if (args.has("group-size") && opts.experts == 0)
    fail(ErrorKind::InvalidArgument, "synth: --group-size applies to the INT4 experts of --experts N; give --experts");
  // A whole model needs a MoE layer: layers 0 .. first_k_dense_replace (the first MoE one) unless listed.
  std::vector<int64_t> whole;
  if (opts.experts > 0) {
    const ModelConfig model = synth_preset_model(opts);
    for (int64_t L = 0; L <= model.first_k_dense_replace; ++L) whole.push_back(L);
  }
  opts.layers = args.int_list("layers", opts.experts > 0 ? whole : std::vector<int64_t>{0});
  opts.vocab = args.integer("vocab", 0, 1, kConfigLimits.vocab);
  opts.seed = static_cast<uint64_t>(args.integer("seed", 0, 0));
  opts.shards = args.integer("shards", 2, 2, kSynthMaxShards);

  if (args.has("dry-run")) {  // the plan synthesize_checkpoint makes first, refusing as it would
    const MemoryPlan mp = plan_synth_memory(opts, synth_preset_model(opts), host_memory_budget());
    if (!mp.fits) fail(ErrorKind::Unsupported, mp.refusal);
    std::printf("mla-h2o synth: dry run: preset %s, dtype %s, %zu layers, %lld shards: memory peak ~%s (%s); outputs: "
                "%s (not written: dry run)\n", opts.preset.c_str(), opts.dtype.c_str(), opts.layers.size(),
                static_cast<long long>(opts.shards), format_bytes(mp.estimate.host_peak_bytes).c_str(),
                mp.estimate.peak_phase.c_str(), opts.out_dir.c_str());
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const AttentionConfig cfg = synthesize_checkpoint(opts).attention;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  uintmax_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(opts.out_dir, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".safetensors") bytes += entry.file_size(ec);
  std::string layers;
  for (int64_t L : opts.layers) layers += (layers.empty() ? "" : ",") + std::to_string(L);
  std::string experts;
  if (opts.experts > 0)
    experts = ", whole model: " + std::to_string(opts.experts) + " routed experts per MoE layer in INT4 (group size " +
              std::to_string(opts.group_size) + ")";
  std::printf("wrote %s: preset %s, dtype %s, layers %s%s, vocab %lld, seed %llu, %lld shards, %.1f MB in %.2f s\n",
              opts.out_dir.c_str(), opts.preset.c_str(), opts.dtype.c_str(), layers.c_str(), experts.c_str(),
              static_cast<long long>(cfg.vocab_size), static_cast<unsigned long long>(opts.seed),
              static_cast<long long>(opts.shards), static_cast<double>(bytes) / 1e6, secs);
  return 0;
}

}  // namespace mla::cli
