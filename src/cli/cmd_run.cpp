// src/cli/cmd_run.cpp — `mla-h2o run` (one layer's attention + H2O on a checkpoint) and
// `mla-h2o demo` (the configuration of the published Kimi K2.6 layer-0 H2O demo on a cached
// synthetic Kimi K2.6 layer 0).
//
// Pipeline of both (execute_run): three phases, each timing its steps (StageTimer); `sweep`
// (cmd_sweep.cpp) runs load and run once per layer (declared in run_pipeline.hpp):
//   load     output directory (first, so an unwritable --out fails before any work),
//            open checkpoint, memory plan (refuses a run that cannot fit before anything
//            large is allocated: mla/memory_plan.hpp, docs/long-context.md), load layer (the attention tensors + input_layernorm),
//            build input (--input / --tokens / --seq-len+--seed)          timing_s.load
//   run      backend prepare (weight conversion), forward                  timing_s.forward
//            h2o select (layer-level decision, + per head)                 timing_s.h2o
//   report   tensors.safetensors (--dump-tensors), scores.csv, heads_kept.csv (--per-head),
//            scores.svg, report.txt, report.json
//
// Shape legend: S = tokens, H = hidden_size, n = heads.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "args.hpp"
#include "commands.hpp"
#include "inputs.hpp"
#include "progress.hpp"
#include "decode_plan.hpp"
#include "run_pipeline.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/error.hpp"
#include "mla/h2o.hpp"
#include "mla/memory_plan.hpp"
#include "mla/report.hpp"
#include "mla/rope.hpp"
#include "mla/stage_timer.hpp"
#include "mla_build_config.h"

namespace mla::cli {

// ---- settings shared by run, demo and sweep (run_pipeline.hpp) ----------------------------

std::vector<FlagSpec> forward_flags(const std::string& default_mask, const std::string& default_precision) {
  return {
      {"mask", "causal|none", "causal mask, or none (HF eager called with attention_mask=None)", default_mask},
      {"backend", "auto|reference|cpu|cuda", "auto = cuda when a GPU is usable, else cpu", "auto"},
      {"precision", "fp32|bf16", "bf16 = PyTorch bf16 eager rounding (docs/math.md §7)", default_precision},
      {"latent-norm-eps", "hf|config|VALUE",
       "eps of q_a_layernorm/kv_a_layernorm: hf = 1e-6 (transformers), config = rms_norm_eps (vLLM/SGLang)", "hf"},
      {"sinks", "N", "H2O: first N tokens always kept", "4"},
      {"recent", "N", "H2O: last N tokens always kept", "32"},
      {"budget", "N", "H2O: heavy hitters kept among the rest", "64"},
      {"per-head", "", "also one H2O decision per head (heads_kept.csv)", ""},
      {"out", "DIR", "output directory (created)", "./mla-h2o-out"},
      {"dump-tensors", "", "write tensors.safetensors (HF layout) for `mla-h2o compare`", ""},
      {"threads", "N", "cpu backend threads (0 = all cores)", "0"},
      {"gemm", "auto|onednn|eigen",
       "cpu backend GEMM engine of the projections and the per-head products (docs/cpu-gemm.md); auto = oneDNN where it has a brgemm kernel for the "
       "precision, else Eigen; on this machine auto runs " + gemm_auto_summary(),
       "auto"},
      {"allow-tf32", "", "cuda fp32 only: allow TF32 tensor-core GEMMs", ""},
      {"quiet", "", "no progress lines on stderr (shown after MLA_PROGRESS_AFTER seconds, default 1)", ""},
  };
}

namespace {
BackendKind backend_kind(const std::string& s) {
  if (s == "reference") return BackendKind::Reference;
  if (s == "cpu") return BackendKind::Cpu;
  if (s == "cuda") return BackendKind::Cuda;
  return BackendKind::Auto;
}
}  // namespace

// Reads the flags of forward_flags() into `plan`.
void read_forward_flags(const Args& a, RunPlan& plan, const std::string& default_mask, const std::string& default_precision) {
  plan.forward.mask = a.choice("mask", {"causal", "none"}, default_mask) == "causal" ? Mask::Causal : Mask::None;
  plan.forward.precision = a.choice("precision", {"fp32", "bf16"}, default_precision) == "bf16" ? Precision::BF16 : Precision::FP32;
  plan.backend = backend_kind(a.choice("backend", {"auto", "reference", "cpu", "cuda"}, "auto"));
  plan.latent_eps_arg = a.str("latent-norm-eps", "hf");
  plan.h2o.sinks = a.integer("sinks", plan.h2o.sinks, 0);
  plan.h2o.recent = a.integer("recent", plan.h2o.recent, 0);
  plan.h2o.budget = a.integer("budget", plan.h2o.budget, 0);
  plan.per_head = a.has("per-head");
  plan.dump_tensors = a.has("dump-tensors");
  plan.quiet = a.has("quiet");
  plan.out_dir = a.str("out", plan.out_dir);
  plan.forward.threads = static_cast<int>(a.integer("threads", 0, 0, 4096));
  plan.forward.allow_tf32 = a.has("allow-tf32");
  plan.forward.gemm = gemm_choice(a);
}

// --latent-norm-eps: "hf" -> 1e-6, "config" -> rms_norm_eps, else a positive finite number.
double latent_eps(const std::string& arg, const AttentionConfig& cfg, std::string& mode) {
  if (arg == "hf") {
    mode = "hf";
    return 1e-6;
  }
  if (arg == "config") {
    mode = "config";
    return cfg.rms_norm_eps;
  }
  char* end = nullptr;
  const double v = std::strtod(arg.c_str(), &end);
  if (arg.empty() || *end != '\0' || !std::isfinite(v) || v <= 0)
    fail(ErrorKind::InvalidArgument, "--latent-norm-eps: '" + arg + "' is not hf, config or a positive number");
  mode = "value";
  return v;
}

// ---- memory plan, cost, peak (docs/long-context.md) ------------------------------------------

// The peak resident set of this process so far (getrusage: ru_maxrss in KiB on Linux).
int64_t peak_rss_bytes() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Plans the memory of this run from the geometry and the request, before the layer and the
// input are loaded: refuses with one line when it cannot fit; when only the attn_weights dump
// cannot, the plan drops it (attn_weights_dropped) and says so on stderr.
MemoryPlan check_memory(const RunPlan& plan, const AttentionConfig& cfg, int64_t seq_len) {
  MemoryRequest req;
  req.seq_len = seq_len;
  req.backend = plan.backend != BackendKind::Auto ? plan.backend : cuda_available() ? BackendKind::Cuda : BackendKind::Cpu;
  req.precision = plan.forward.precision;
  req.dump_tensors = plan.dump_tensors;
  req.attn_weights = plan.dump_tensors;
  req.tokens_input = plan.input.kind == InputKind::Tokens;
  req.threads = plan.forward.threads > 0 ? plan.forward.threads
                                         : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (req.seq_len <= 0) {  // load_input reports what is wrong with the input
    MemoryPlan none;
    none.request = req;
    return none;
  }
  MemoryBudget budget = host_memory_budget();
  if (req.backend == BackendKind::Cuda) budget.device_bytes = cuda_free_memory();
  MemoryPlan mp = plan_memory(cfg, req, budget);
  if (!mp.fits) fail(ErrorKind::Unsupported, mp.refusal);
  if (mp.attn_weights_dropped) std::fprintf(stderr, "mla-h2o %s: note: %s\n", plan.command.c_str(), mp.note.c_str());
  return mp;
}

// The reference backend is O(S^2 * d) scalar double loops: say what it will cost first.
void announce_reference_cost(const std::string& command, const AttentionConfig& cfg, int64_t S) {
  double flops = 0;
  for (const auto& [stage, f] : reference_stage_flops(cfg, S)) flops += f;
  const double seconds = flops / kReferenceFlopsPerSecond;
  if (seconds < progress_after_seconds()) return;
  std::fprintf(stderr, "mla-h2o %s: reference backend: %.3g FLOP in scalar double loops, estimated %s on this "
               "machine's rate (%.2g FLOP/s); --backend cpu computes the same layer in fp32/bf16 far faster\n",
               command.c_str(), flops, format_duration(seconds).c_str(), kReferenceFlopsPerSecond);
}

// ---- the pipeline: load, run, report ------------------------------------------------------
// Each phase times its steps into its own StageSeconds; the report's headline times are the
// totals of those lists, and its stage list is their concatenation in execution order.

// load: output directory, checkpoint, layer, input                        (timing_s.load)
LoadedRun load(const RunPlan& plan) {
  ensure_output_dir(plan.out_dir);  // first, so an unwritable --out fails before any work
  StageSeconds stages;
  LoadedRun r(timed(stages, "open checkpoint", [&] { return Checkpoint::open(plan.checkpoint, plan.config_path); }));
  r.stages = std::move(stages);
  const AttentionConfig& cfg = r.ckpt.config();
  const OpenedInput input = timed(r.stages, "open input", [&] { return open_input(plan.input, plan.layer); });
  r.memory = check_memory(plan, cfg, input.seq_len);  // refuses before anything large is allocated
  r.weights = timed(r.stages, "load layer", [&] {
    return load_checked_layer(r.ckpt, plan.layer, needs_input_layernorm(plan.input));
  });
  r.options = plan.forward;
  r.options.latent_norm_eps = latent_eps(plan.latent_eps_arg, cfg, r.latent_eps_mode);
  r.options.keep_attn_weights = plan.dump_tensors && !r.memory.attn_weights_dropped;
  r.options.keep_states = plan.dump_tensors;
  r.options.keep_latent_cache = plan.dump_tensors;
  r.input = timed(r.stages, "build input", [&] { return load_input(input, r.ckpt, r.weights, r.options.precision); });
  return r;
}

// run: backend, forward, H2O selection                       (timing_s.forward, timing_s.h2o)
RunOutcome run(const RunPlan& plan, const LoadedRun& in, Report& rep) {
  const AttentionConfig& cfg = in.ckpt.config();
  const int64_t S = in.input.hidden.dim(0), n = cfg.num_attention_heads;
  RunOutcome out;
  if (plan.backend == BackendKind::Auto) {
    std::string why;
    out.backend_reason = cuda_available(&why) ? "a CUDA device is usable" : why;
  }
  out.backend = make_backend(plan.backend);
  Backend& backend = *out.backend;
  {
    StageTimer t(out.forward_stages, "backend prepare (" + backend.name() + ")");
    backend.prepare(cfg, in.weights, in.options);
  }
  ProgressLine progress(plan.command, plan.quiet);
  ForwardOptions options = in.options;
  options.progress = progress.callback();
  if (backend.name() == "reference" && !plan.quiet) announce_reference_cost(plan.command, cfg, S);
  out.result = timed(out.forward_stages, "forward (" + backend.name() + ")",
                     [&] { return backend.forward(in.input.hidden, options); });
  progress.finish();
  const ForwardResult& fr = out.result;
  if (static_cast<int64_t>(fr.token_scores.size()) != S)
    fail(ErrorKind::Shape, "backend " + backend.name() + " returned " + std::to_string(fr.token_scores.size()) +
                               " token scores for " + std::to_string(S) + " tokens");
  StageTimer t(out.h2o_stages, plan.per_head ? "h2o select (+ per head)" : "h2o select");
  rep.h2o = plan.h2o;
  rep.scores = fr.token_scores;
  rep.decision = h2o_select(rep.scores, plan.h2o);
  if (plan.per_head) {
    rep.n_heads = n;
    rep.head_scores = fr.head_scores;
    rep.head_decisions = h2o_select_per_head(rep.head_scores, n, plan.h2o);
  }
  return out;
}

void write_layer_dump(const std::string& path, const RunPlan& plan, const LoadedRun& in, const RunOutcome& ran) {
  const AttentionConfig& cfg = in.ckpt.config();
  const Backend& backend = *ran.backend;
  const std::map<std::string, std::string> meta = {
      {"producer", std::string("mla-h2o ") + MLA_VERSION + (plan.command == "sweep" ? " sweep" : "")},
      {"backend", backend.name() + " (" + backend.description() + ")"},
      {"precision", precision_name(in.options.precision)},
      {"mask", mask_name(in.options.mask)},
      {"latent_norm_eps", format_double(in.options.latent_norm_eps)},
      {"checkpoint", plan.checkpoint},
      {"layer", std::to_string(plan.layer)},
      {"input", in.input.description},
      {"config", config_to_json(cfg, false)},
  };
  write_tensor_dump(path, in.input.hidden, ran.result, cfg.num_attention_heads, meta);
}

namespace {

// report: settings, tensors.safetensors (--dump-tensors), scores.csv, heads_kept.csv
// (--per-head), scores.svg, report.txt, report.json; the text also goes to stdout.
void report(const RunPlan& plan, const LoadedRun& in, const RunOutcome& ran, Report& rep) {
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
  info.parameter_count = in.weights.parameter_count();
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
    const std::string path = join_path(plan.out_dir, "tensors.safetensors");
    StageTimer t(info.stage_seconds, "write tensors.safetensors");
    write_layer_dump(path, plan, in, ran);
    info.files.push_back(path);
  }
  const std::string csv = join_path(plan.out_dir, "scores.csv"), json = join_path(plan.out_dir, "report.json"),
                    svg = join_path(plan.out_dir, "scores.svg"), txt = join_path(plan.out_dir, "report.txt"),
                    heads = join_path(plan.out_dir, "heads_kept.csv");
  info.files.insert(info.files.end(), {csv, json, svg, txt});
  if (plan.per_head) info.files.push_back(heads);
  write_text_file(csv, scores_csv(rep.scores, rep.decision));
  if (plan.per_head) write_text_file(heads, heads_csv(rep.head_scores, rep.head_decisions));
  std::ostringstream title;
  title << "H2O on layer " << plan.layer << ": " << rep.decision.kept() << " of " << S << " tokens kept (" << info.backend
        << ", " << info.precision << ", mask " << mask_name(fopt.mask) << ")";
  write_text_file(svg, scores_svg(rep.scores, rep.decision, title.str()));
  if (in.memory.request.seq_len > 0) {
    info.memory_planned_bytes = in.memory.estimate.host_peak_bytes;
    info.memory_planned_phase = in.memory.estimate.peak_phase;
    if (in.memory.request.backend == BackendKind::Cuda) info.memory_device_planned_bytes = in.memory.estimate.device_peak_bytes;
    info.memory_available_bytes = in.memory.budget.host_bytes;
    info.memory_available_source = in.memory.budget.host_source;
  }
  info.memory_peak_rss_bytes = peak_rss_bytes();
  const std::string text = report_text(rep);
  write_text_file(txt, text);
  write_text_file(json, report_json(rep));
  std::fputs(text.c_str(), stdout);
}

int execute_run(const RunPlan& plan) {
  const LoadedRun loaded = load(plan);
  Report rep;
  const RunOutcome ran = run(plan, loaded, rep);
  report(plan, loaded, ran, rep);
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
  spec.usage = "mla-h2o demo [--cache-dir DIR] [--out DIR] [--backend B] [--precision P] [--mask none|causal]";
  spec.flags = {
      {"cache-dir", "DIR", "where the synthetic checkpoint is cached", "$XDG_CACHE_HOME/mla-h2o or ~/.cache/mla-h2o"},
      {"decode", "", "decode-time eviction instead (mla-h2o decode: 256 prompt tokens, 64 steps, budget 100)", ""},
  };
  for (auto& f : forward_flags("none", "bf16")) {
    if (f.name == "sinks" || f.name == "recent" || f.name == "budget" || f.name == "latent-norm-eps") continue;
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

// The cached demo checkpoint: <cache>/kimi-k2.6-seed0/, complete when its COMPLETE marker
// (written last) names the same preset and seed. Otherwise it is synthesized into a
// temporary sibling directory and renamed into place, so an interrupted run never leaves a
// directory that looks complete.
std::string demo_checkpoint(const std::string& cache_dir, bool& reused) {
  namespace fs = std::filesystem;
  const std::string preset = "kimi-k2.6";
  const uint64_t seed = 0;
  const std::string key = "preset=" + preset + " seed=" + std::to_string(seed) + " layers=0 dtype=bf16\n";
  const std::string dir = join_path(cache_dir, preset + "-seed" + std::to_string(seed));
  const std::string marker = join_path(dir, "COMPLETE");
  {
    std::ifstream in(marker);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    if (in && ss.str() == key) {
      reused = true;
      return dir;
    }
  }
  reused = false;
  ensure_output_dir(cache_dir);
  const std::string tmp = dir + ".partial-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  std::fprintf(stderr, "mla-h2o demo: synthesizing the Kimi K2.6-shaped layer 0 once into %s ...\n", dir.c_str());
  SynthOptions so;
  so.preset = preset;
  so.out_dir = tmp;
  so.seed = seed;
  so.layers = {0};
  synthesize_checkpoint(so);
  write_text_file(join_path(tmp, "COMPLETE"), key);
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) fail(ErrorKind::Io, "cannot move the synthesized checkpoint to " + dir + ": " + ec.message());
  return dir;
}

// `demo --decode`: mla-h2o decode's pipeline on the demo's layer and inputs (docs/decode.md): 320
// seeded rows, the first 256 the prompt, 64 decode steps, budget 100 (the demo's 4 + 32 + 64
// tokens), every policy at its paper's settings.
static int demo_decode(const Args& a) {
  if (a.has("mask")) fail(ErrorKind::InvalidArgument, "--mask does not apply to --decode (decode attention is causal)");
  DecodePlan plan;
  RunPlan& r = plan.run;
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
  const std::string cache = a.has("cache-dir") ? a.str("cache-dir") : default_cache_dir();
  bool reused = false;
  r.checkpoint = demo_checkpoint(cache, reused);
  r.notes.push_back(std::string("weights: synthetic Kimi K2.6-shaped layer 0 (synth --preset kimi-k2.6 --seed 0), ") +
                    (reused ? "reused from the cache" : "synthesized into the cache"));
  plan.decode.prompt_len = 256;
  plan.decode.steps = 64;
  plan.decode.budgets = {100};
  plan.decode.policies = parse_policy_list("all");
  return execute_decode(plan);
}

int cmd_run(const std::vector<std::string>& argv) {
  const CommandSpec spec = run_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  RunPlan plan;
  plan.command = "run";
  plan.checkpoint = a.str("checkpoint");
  if (plan.checkpoint.empty()) fail(ErrorKind::InvalidArgument, "--checkpoint PATH is required (see mla-h2o run --help)");
  plan.config_path = a.str("config");
  plan.layer = a.integer("layer", 0, 0);
  plan.input = input_request(a);
  read_forward_flags(a, plan, "causal", "fp32");
  return execute_run(plan);
}

int cmd_demo(const std::vector<std::string>& argv) {
  const CommandSpec spec = demo_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
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
  return execute_run(plan);
}

}  // namespace mla::cli
