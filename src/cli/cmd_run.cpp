// src/cli/cmd_run.cpp — `mla-h2o run` (one layer's attention + H2O on a checkpoint) and
// `mla-h2o demo` (the configuration of the published Kimi K2.6 layer-0 H2O demo on a cached
// synthetic Kimi K2.6 layer 0).
//
// Both are the shared pipeline (run_pipeline.hpp: load, run) and then their report:
//   report   tensors.safetensors (--dump-tensors), scores.csv, heads_kept.csv (--per-head),
//            scores.svg, report.txt, report.json
//
// Shape legend: S = tokens, H = hidden_size, n = heads.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "args.hpp"
#include "commands.hpp"
#include "inputs.hpp"
#include "decode_plan.hpp"
#include "eval_plan.hpp"
#include "run_pipeline.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/synth.hpp"
#include "mla/tasks.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/output_set.hpp"
#include "mla/regular_file.hpp"
#include "mla/report.hpp"
#include "mla/policy.hpp"
#include "mla/rope.hpp"
#include "mla_build_config.h"

namespace mla::cli {

namespace {

// report: settings, tensors.safetensors (--dump-tensors), scores.csv, heads_kept.csv
// (--per-head), scores.svg, report.txt, report.json into the output set; returns the text.
std::string report(const RunPlan& plan, const LoadedRun& in, const RunOutcome& ran, Report& rep, OutputSet& out) {
  const AttentionConfig& cfg = in.ckpt.config();
  const ForwardOptions& fopt = in.options;
  const ForwardResult& fr = ran.result;
  const Backend& backend = *ran.backend;
  const int64_t S = in.input.hidden.dim(0), n = cfg.num_attention_heads;
  RunInfo& info = rep.info;
  info.command = plan.command;
  info.notes = plan.notes;
  if (in.memory.attn_weights_dropped) info.notes.push_back(in.memory.note);
  if (plan.input.kind == InputKind::Tokens && plan.layer > 0) info.notes.push_back(tokens_caveat(std::to_string(plan.layer)));
  info.checkpoint = plan.checkpoint;
  info.layer = plan.layer;
  info.input_source = in.input.description;
  info.mask = mask_name(fopt.mask);
  if (fopt.mask == Mask::None) info.mask += " (every query sees every key, as HF eager with attention_mask=None)";
  info.precision = precision_name(fopt.precision);
  info.backend_requested = backend_name(plan.backend);
  info.backend = backend.name();
  info.backend_reason = ran.backend_reason;
  info.backend_description = backend.description();
  info.gemm = backend.gemm_info();
  info.computed_in_double = fr.computed_in_double;
  info.latent_norm_eps_mode = in.latent_eps_mode;
  info.latent_norm_eps = fopt.latent_norm_eps;
  info.config = cfg;
  info.softmax_scale = softmax_scale(cfg);
  info.parameter_count = in.weights->parameter_count();
  info.hidden_shape = in.input.hidden.shape;
  info.attn_output_shape = fr.attn_output.shape;
  info.attn_weights_shape = {n, S, S};
  info.threads = fopt.threads;
  info.allow_tf32 = fopt.allow_tf32;
  info.load_seconds = total_seconds(in.stages);
  info.forward_seconds = total_seconds(ran.forward_stages);
  info.h2o_seconds = total_seconds(ran.h2o_stages);
  info.forward_stage_seconds = fr.stage_seconds;
  for (const StageSeconds* phase : {&in.stages, &ran.forward_stages, &ran.h2o_stages})
    info.stage_seconds.insert(info.stage_seconds.end(), phase->begin(), phase->end());

  if (plan.dump_tensors) {
    StageTimer t(info.stage_seconds, "write tensors.safetensors");
    write_layer_dump(out.add("tensors.safetensors"), plan, in, ran);
  }
  out.write("scores.csv", scores_csv(rep.scores, rep.decision, in.input.token_text));
  if (plan.per_head) out.write("heads_kept.csv", heads_csv(rep.head_scores, rep.head_decisions));
  std::ostringstream title;
  title << "H2O on layer " << plan.layer << ": " << rep.decision.kept() << " of " << S << " tokens kept (" << info.backend
        << ", " << info.precision << ", mask " << mask_name(fopt.mask) << ")";
  out.write("scores.svg", scores_svg(rep.scores, rep.decision, title.str()));
  if (in.memory.request.seq_len > 0) {
    info.memory_planned_bytes = in.memory.estimate.host_peak_bytes;
    info.memory_planned_phase = in.memory.estimate.peak_phase;
    info.memory_process_bytes = in.memory.estimate.process_bytes;
    if (in.memory.request.backend == BackendKind::Cuda) info.memory_device_planned_bytes = in.memory.estimate.device_peak_bytes;
    info.memory_available_bytes = in.memory.budget.host_bytes;
    info.memory_available_source = in.memory.budget.host_source;
  }
  info.model_files = model_file_digests(in.ckpt, plan.command, plan.quiet);
  info.memory_peak_rss_bytes = peak_rss_bytes();
  info.files = out.paths_with({"report.txt", "report.json"});
  const std::string text = report_text(rep);
  out.write("report.txt", text);
  out.write("report.json", report_json(rep));
  return text;
}

// The pipeline into `out` (opened by the command before any work), then the set moved into
// place and the report printed.
int execute_run(const RunPlan& plan, OutputSet& out) {
  const LoadedRun loaded = load(plan);
  Report rep;
  const RunOutcome ran = run(plan, loaded, rep);
  const std::string text = report(plan, loaded, ran, rep, out);
  out.commit();
  std::fputs(text.c_str(), stdout);
  return 0;
}

// ---- run --------------------------------------------------------------------------------

CommandSpec run_spec() {
  CommandSpec spec;
  spec.name = "run";
  spec.synopsis = "mla-h2o run: one layer's MLA attention (HF DeepseekV3Attention, eager) + H2O selection";
  spec.usage = "mla-h2o run --checkpoint PATH [--layer N] [input source] [options]";
  spec.flags = {
      {"checkpoint", "PATH", "checkpoint directory or .safetensors file (required)", ""},
      {"config", "FILE", "config.json to use instead of the one beside the checkpoint", ""},
      {"layer", "N", "decoder layer whose attention runs", "0"},
  };
  for (auto& f : input_flags()) spec.flags.push_back(f);
  for (auto& f : forward_flags("causal", "fp32")) spec.flags.push_back(f);
  spec.positional_help =
      "input source (exactly one): --input FILE | --tokens IDS|FILE | --seq-len S --seed N (default: 256 tokens, seed 0)";
  return spec;
}

// ---- demo -------------------------------------------------------------------------------

CommandSpec demo_spec() {
  CommandSpec spec;
  spec.name = "demo";
  spec.synopsis =
      "mla-h2o demo: the published Kimi K2.6 layer-0 H2O demo's configuration on a synthetic Kimi K2.6-shaped layer 0 —\n"
      "256 seeded normal embeddings, 4 sinks, 32 recent, 64 heavy, mask none, bf16. The checkpoint\n"
      "(synth --preset kimi-k2.6 --seed 0 --layers 0) is written once into the cache directory.";
  spec.usage =
      "mla-h2o demo [--cache-dir DIR] [--out DIR] [--backend B] [--precision P] [--mask none|causal]\n"
      "       mla-h2o demo --decode [...]    |    mla-h2o demo --model tiny|recall|DIR [--out DIR]";
  spec.flags = {
      {"cache-dir", "DIR", "where the synthetic checkpoint is cached", "$XDG_CACHE_HOME/mla-h2o or ~/.cache/mla-h2o"},
      {"decode", "", "decode-time eviction instead (mla-h2o decode: 256 prompt tokens, 64 steps, budget 100)", ""},
      {"model", "DIR|tiny|recall",
       "the demo on a trained byte-level model instead (tiny = the shipped models/tiny-mla, recall = "
       "models/tiny-mla-recall): layer 0's H2O on the first 255 bytes of its eval/heldout.txt (scores.csv with "
       "token_text) into OUT/layer0-*, then mla-h2o eval on it into OUT/eval-*: for DIR and tiny P 512, N 512, "
       "K 128,256,384, every policy (docs/eval.md §6); for recall the passkey table (--task passkey, 1 k and 2 k "
       "bytes, depths 10-90 %, K 128,256, full, h2o, h2o-normalized, tova, streaming, snapkv: docs/eval.md §7)",
       ""},
      {"samples", "S", "--model recall: passkey samples per context and depth", "4"},
  };
  for (auto& f : forward_flags("none", "bf16")) {
    if (f.name == "sinks" || f.name == "recent" || f.name == "budget" || f.name == "latent-norm-eps" || f.name == "max-hours")
      continue;
    spec.flags.push_back(f);
  }
  return spec;
}

}  // namespace

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return join_path(xdg, "mla-h2o");
  if (const char* home = std::getenv("HOME"); home && *home) return join_path(join_path(home, ".cache"), "mla-h2o");
  fail(ErrorKind::InvalidArgument, "no cache directory: set XDG_CACHE_HOME or HOME, or pass --cache-dir DIR");
}

// The cached demo checkpoint: <cache>/kimi-k2.6-seed0/, complete when its COMPLETE marker names
// the same preset and seed. Otherwise it is synthesized as one output set (mla/output_set.hpp)
// with the marker in it, so an interrupted run never leaves a directory that looks complete; a
// demo that finds another synthesizing it waits for that one and uses its checkpoint.
std::string demo_checkpoint(const std::string& cache_dir, bool& reused) {
  const std::string preset = "kimi-k2.6";
  const uint64_t seed = 0;
  const std::string key = "preset=" + preset + " seed=" + std::to_string(seed) + " layers=0 dtype=bf16\n";
  const std::string dir = join_path(cache_dir, preset + "-seed" + std::to_string(seed));
  const auto complete = [&] {
    try {
      return read_regular_file(join_path(dir, "COMPLETE"), 4096) == key;
    } catch (const Error&) {  // missing or not a file: not complete
      return false;
    }
  };
  reused = true;
  if (complete()) return dir;
  std::error_code ec;
  if (std::filesystem::exists(cache_dir, ec) && !std::filesystem::is_directory(cache_dir, ec))
    fail(ErrorKind::InvalidArgument, "--cache-dir " + cache_dir + " exists and is not a directory");
  OutputSet cache(dir, "demo", OutputSet::Lock::Wait);
  if (complete()) return dir;  // another demo synthesized it while this one waited
  reused = false;
  std::fprintf(stderr, "mla-h2o demo: synthesizing the Kimi K2.6-shaped layer 0 once into %s ...\n", dir.c_str());
  SynthOptions so;
  so.preset = preset;
  so.seed = seed;
  so.layers = {0};
  write_synthetic_checkpoint(so, synth_preset_model(so), cache);
  cache.write("COMPLETE", key);
  cache.commit();
  return dir;
}

// `demo --decode`: mla-h2o decode's pipeline on the demo's layer and inputs (docs/decode.md): 320
// seeded rows, the first 256 the prompt, 64 decode steps, budget 100 (the demo's 4 + 32 + 64
// tokens), every policy at its paper's settings.
static int demo_decode(const Args& a) {
  if (a.has("mask")) fail(ErrorKind::InvalidArgument, "--mask does not apply to --decode (decode attention is causal)");
  DecodePlan plan;
  RunPlan& r = plan.run;
  for (const char* flag : {"per-head", "allow-tf32"})
    if (a.has(flag))
      fail(ErrorKind::InvalidArgument, std::string("--") + flag + " does not apply to --decode (see mla-h2o decode --help)");
  read_forward_flags(a, r, "causal", "bf16");
  plan.dump_tensors = r.dump_tensors;
  r.dump_tensors = false;
  if (r.backend == BackendKind::Cuda)
    fail(ErrorKind::InvalidArgument, "--backend cuda: --decode runs on the cpu or reference backend");
  if (r.backend == BackendKind::Auto) r.backend = BackendKind::Cpu;
  r.command = "demo";
  r.layer = 0;
  r.input.kind = InputKind::Seeded;
  r.input.seq_len = 320;
  r.input.seed = 0;
  plan.decode.prompt_len = 256;
  plan.decode.steps = 64;
  plan.decode.budgets = {100};
  plan.decode.policies = parse_policy_list("all");
  check_decode_flags(plan.decode);  // before any work
  const std::string cache = a.has("cache-dir") ? a.str("cache-dir") : default_cache_dir();
  OutputSet out(r.out_dir, r.command, OutputSet::Lock::FailIfHeld, {cache});  // before the cache: a bad --out fails first
  bool reused = false;
  r.checkpoint = demo_checkpoint(cache, reused);
  r.notes.push_back(std::string("weights: synthetic Kimi K2.6-shaped layer 0 (synth --preset kimi-k2.6 --seed 0), ") +
                    (reused ? "reused from the cache" : "synthesized into the cache"));
  return execute_decode(plan, out);
}

// The directory `demo --model` names: "tiny" and "recall" are the shipped models (tiny-mla,
// tiny-mla-recall), found under $MLA_H2O_MODELS or else the source tree this binary was built from.
static std::string demo_model_dir(const std::string& arg) {
  if (arg != "tiny" && arg != "recall") return arg;
  const std::string name = arg == "tiny" ? "tiny-mla" : "tiny-mla-recall";
  if (const char* env = std::getenv("MLA_H2O_MODELS"); env && *env) return join_path(env, name);
  return join_path(MLA_SOURCE_MODELS_DIR, name);
}

// The eval part of `demo --model recall`: the README's needle table (docs/eval.md §7), passkey
// at 1 k and 2 k bytes, needles at depths 10-90 %, the question after the compressed prompt,
// K 128 and 256, the full cache beside h2o, h2o-normalized, tova, streaming and snapkv.
static void plan_recall_tasks(const Args& a, EvalPlan& ev) {
  ev.task_mode = true;
  ev.task.kind = TaskKind::Passkey;
  ev.task.contexts = {1024, 2048};
  ev.task.depths = {10, 30, 50, 70, 90};
  ev.task.samples = a.integer("samples", 4, 1, 1000);
  ev.eval.budgets = {128, 256};
  ev.eval.policies = parse_policy_list("h2o,h2o-normalized,tova,streaming,snapkv");
}

// `demo --model DIR|tiny`: the published demo's question asked of trained attention (docs/eval.md
// §7): layer 0's scores and H2O decision (4 sinks + 32 recent + 64 heavy of 256 tokens, causal,
// as the model runs) on held-out text the model never saw, each token with its text; then what
// evicting does to the whole model's predictions (eval, every policy, three budgets).
static int demo_model(const Args& a) {
  if (a.has("decode")) fail(ErrorKind::InvalidArgument, "--model and --decode: give one (--model runs layer 0 and eval)");
  if (a.has("cache-dir")) fail(ErrorKind::InvalidArgument, "--cache-dir applies to the synthetic demo, not to --model");
  const bool recall = a.str("model") == "recall";
  if (a.has("samples") && !recall)
    fail(ErrorKind::InvalidArgument, "--samples applies to --model recall (its passkey table), not to --model " + a.str("model"));
  const std::string dir = demo_model_dir(a.str("model"));
  const std::string text = join_path(join_path(dir, "eval"), "heldout.txt");
  if (!std::filesystem::is_regular_file(text))
    fail(ErrorKind::Io, "--model " + a.str("model") + ": " + text +
                            " not found (--model DIR needs a byte-level model with eval/heldout.txt; tiny is models/tiny-mla "
                            "of the source tree, or $MLA_H2O_MODELS/tiny-mla)");
  RunPlan plan;
  plan.command = "demo";
  plan.checkpoint = dir;
  plan.layer = 0;
  plan.input.kind = InputKind::Tokens;
  plan.input.text = text;
  plan.input.text_max_bytes = 255;  // with the BOS, the published demo's 256 tokens
  plan.h2o = H2OOptions{4, 32, 64};
  read_forward_flags(a, plan, "causal", "bf16");
  const std::string out = a.has("out") ? plan.out_dir : std::string("mla-h2o-demo-model");
  plan.out_dir = out;
  plan.notes.push_back("weights: trained (" + dir + ", its model card README.md says how); input: the first 255 bytes of its "
                       "held-out text, which it never trained on");
  EvalPlan ev;
  ev.checkpoint = dir;
  ev.text = text;
  ev.out_dir = out;
  ev.latent_eps_arg = plan.latent_eps_arg;
  ev.quiet = plan.quiet;
  ev.eval.precision = plan.forward.precision;
  ev.eval.threads = plan.forward.threads;
  if (recall) {
    plan_recall_tasks(a, ev);
  } else {
    ev.eval.prompt_len = 512;
    ev.eval.steps = 512;
    ev.eval.budgets = {128, 256, 384};
    ev.eval.policies = parse_policy_list("all");
  }
  // One output set for both parts (files layer0-* and eval-*), moved into place only when both
  // are written: a failure or an interrupt in either leaves --out as it was.
  OutputSet set(out, "demo", OutputSet::Lock::FailIfHeld, eval_inputs(ev));
  const int64_t needed = recall ? 2048 : ev.eval.prompt_len + ev.eval.steps - 1;  // with the BOS
  if (const auto bytes = static_cast<int64_t>(std::filesystem::file_size(text)); bytes < needed)
    fail(ErrorKind::InvalidArgument, "--model " + a.str("model") + ": " + text + " has " + std::to_string(bytes) +
                                         " bytes; the eval part needs " + std::to_string(needed) +
                                         (recall ? " (the 2 k passkey samples' filler)" : " (P + N - 1)"));
  std::printf("== layer 0: H2O on trained attention (%s)\n", dir.c_str());
  std::fflush(stdout);
  set.begin_part("layer0-");
  execute_run(plan, set);
  if (recall)
    std::printf("\n== does a policy keep the needle? passkey at 1 k and 2 k bytes, every layer's cache evicted "
                "(mla-h2o eval --task passkey, filler from %s)\n", text.c_str());
  else
    std::printf("\n== the whole model: every layer's cache evicted, teacher-forced over %s (mla-h2o eval)\n", text.c_str());
  std::fflush(stdout);
  set.begin_part("eval-");
  execute_eval(ev, &set);
  set.begin_part("");
  set.commit();
  return 0;
}

int cmd_run(const std::vector<std::string>& argv) {
  const CommandSpec spec = run_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  RunPlan plan = read_run_plan(a, "run");
  read_forward_flags(a, plan, "causal", "fp32");
  if (plan.dry_run) return dry_run(plan);
  OutputSet out(plan.out_dir, plan.command, OutputSet::Lock::FailIfHeld, run_inputs(plan));
  return execute_run(plan, out);
}

int cmd_demo(const std::vector<std::string>& argv) {
  const CommandSpec spec = demo_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  if (a.has("dry-run"))
    fail(ErrorKind::InvalidArgument, "demo: --dry-run is for run, decode, sweep, eval and synth (the demo's work is seconds)");
  if (a.has("model")) return demo_model(a);
  if (a.has("decode")) return demo_decode(a);
  RunPlan plan;
  plan.command = "demo";
  plan.layer = 0;
  plan.input.kind = InputKind::Seeded;
  plan.input.seq_len = 256;
  plan.input.seed = 0;
  plan.h2o = H2OOptions{4, 32, 64};
  read_forward_flags(a, plan, "none", "bf16");
  const std::string cache = a.has("cache-dir") ? a.str("cache-dir") : default_cache_dir();
  OutputSet out(plan.out_dir, plan.command, OutputSet::Lock::FailIfHeld, {cache});  // before the cache: a bad --out fails first
  bool reused = false;
  plan.checkpoint = demo_checkpoint(cache, reused);
  plan.notes.push_back(std::string("weights: synthetic Kimi K2.6-shaped layer 0 (synth --preset kimi-k2.6 --seed 0), ") +
                       (reused ? "reused from the cache" : "synthesized into the cache") +
                       "; not the published weights, so the numbers differ from the published demo's");
  if (plan.forward.mask == Mask::None)
    plan.notes.push_back(
        "mask none: the published demo called DeepseekV3Attention directly with attention_mask=None, so eager attention "
        "applied no mask (docs/math.md §8); --mask causal gives what a model-level forward computes");
  if (plan.forward.precision == Precision::BF16) plan.notes.push_back("precision bf16: the published demo ran BF16");
  return execute_run(plan, out);
}

}  // namespace mla::cli
