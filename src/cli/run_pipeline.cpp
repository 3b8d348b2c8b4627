// src/cli/run_pipeline.cpp — the pipeline `run`, `demo` and `sweep` share (run_pipeline.hpp):
// the flags of a forward, the memory plan, and the load and run phases, each timing its steps
// (StageTimer):
//   (first)  the output set (mla/output_set.hpp), opened by the command, so an unwritable or
//            busy --out fails before any work
//   load     open checkpoint, memory plan (refuses a run that cannot fit before anything
//            large is allocated: mla/memory_plan.hpp, docs/long-context.md), load layer (the
//            attention tensors + input_layernorm), build input (--input / --tokens /
//            --seq-len+--seed)                                             timing_s.load
//   run      backend prepare (weight conversion), forward                  timing_s.forward
//            h2o select (layer-level decision, + per head)                 timing_s.h2o
// `run` and `demo` (cmd_run.cpp) then write their report once; `sweep` (cmd_sweep.cpp) runs
// load and run once per layer and reports across layers.
//
// Shape legend: S = tokens, H = hidden_size, n = heads.
#include "run_pipeline.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "progress.hpp"
#include "src/cpu/attention_stages.hpp"  // forward_flops
#include "mla/error.hpp"
#include "mla/eval_cost.hpp"  // measure_gemm_rate
#include "mla/layer_tensors.hpp"
#include "mla/model.hpp"
#include "mla/rope.hpp"
#include "mla_build_config.h"

namespace mla::cli {

std::vector<std::string> run_inputs(const RunPlan& plan) {
  return {plan.checkpoint, plan.config_path, plan.input.file, plan.input.tokens, plan.input.text};
}

// ---- the flags of a forward ------------------------------------------------------------------

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
      {"dry-run", "", "print the plan (memory, FLOPs, outputs) and exit 0 without computing or writing anything", ""},
      max_hours_flag(),
  };
}

FlagSpec max_hours_flag() {
  return {"max-hours", "H",
          "refuse, before any work, a run whose planned time exceeds H hours (the plan's FLOPs at the rate this machine "
          "measures just before; docs/long-context.md §4.1)",
          "no limit"};
}

double read_max_hours(const Args& a) {
  if (!a.has("max-hours")) return -1;
  const double h = a.real("max-hours", -1);
  if (!(h > 0)) fail(ErrorKind::InvalidArgument, "--max-hours " + a.str("max-hours") + ": expected a positive number of hours");
  return h;
}

void check_max_hours(double seconds, const std::string& how, double max_hours) {
  if (max_hours < 0 || !(seconds > max_hours * 3600)) return;
  char hours[64];
  std::snprintf(hours, sizeof hours, "%g", max_hours);
  fail(ErrorKind::Unsupported, "the plan's estimate is about " + format_duration(seconds) + " (" + how +
                                   "), more than --max-hours " + hours + " (" + format_duration(max_hours * 3600) +
                                   "); refused before any work");
}

double planned_seconds(const RunPlan& plan, const AttentionConfig& cfg, double flops, std::string& how) {
  char text[160];
  if (plan.backend == BackendKind::Reference) {
    std::snprintf(text, sizeof text, "%.3g FLOP at the reference backend's %.2g FLOP/s", flops, kReferenceFlopsPerSecond);
    how = text;
    return flops / kReferenceFlopsPerSecond;
  }
  const double rate = measure_gemm_rate(cfg.hidden_size, plan.forward.precision, cpu_threads(plan.forward.threads));
  std::snprintf(text, sizeof text, "%.3g FLOP at the %.3g GFLOP/s this machine's fixed-order GEMM measures", flops, rate * 1e-9);
  how = text;
  return flops / rate;
}

void check_forward_time(const RunPlan& plan, const AttentionConfig& cfg, int64_t seq_len, int64_t forwards) {
  if (plan.max_hours < 0 || seq_len <= 0) return;
  const double flops =
      static_cast<double>(forwards) * cpu::forward_flops(cfg, seq_len, plan.forward.mask == Mask::Causal).total();
  std::string how;
  const double seconds = planned_seconds(plan, cfg, flops, how);
  check_max_hours(seconds, how, plan.max_hours);
}

namespace {
BackendKind backend_kind(const std::string& s) {
  if (s == "reference") return BackendKind::Reference;
  if (s == "cpu") return BackendKind::Cpu;
  if (s == "cuda") return BackendKind::Cuda;
  return BackendKind::Auto;
}
}  // namespace

RunPlan read_run_plan(const Args& a, const std::string& command,
                      const std::vector<std::pair<std::string, std::string>>& required) {
  RunPlan plan;
  plan.command = command;
  plan.checkpoint = a.str("checkpoint");
  if (plan.checkpoint.empty()) fail(ErrorKind::InvalidArgument, "--checkpoint PATH is required (see mla-h2o " + command + " --help)");
  for (const auto& [flag, what] : required)
    if (!a.has(flag))
      fail(ErrorKind::InvalidArgument, "--" + flag + " " + what + " is required (see mla-h2o " + command + " --help)");
  plan.config_path = a.str("config");
  plan.layer = a.integer("layer", 0, 0);
  plan.input = input_request(a);
  return plan;
}

// Reads the flags of forward_flags() into `plan`.
void read_forward_flags(const Args& a, RunPlan& plan, const std::string& default_mask, const std::string& default_precision) {
  plan.forward.mask = a.choice("mask", {"causal", "none"}, default_mask) == "causal" ? Mask::Causal : Mask::None;
  plan.forward.precision = a.choice("precision", {"fp32", "bf16"}, default_precision) == "bf16" ? Precision::BF16 : Precision::FP32;
  plan.backend = backend_kind(a.choice("backend", {"auto", "reference", "cpu", "cuda"}, "auto"));
  plan.latent_eps_arg = a.str("latent-norm-eps", "hf");
  plan.h2o.sinks = a.integer("sinks", plan.h2o.sinks, 0);
  plan.h2o.recent = a.integer("recent", plan.h2o.recent, 0);
  plan.h2o.heavy = a.integer("budget", plan.h2o.heavy, 0);
  plan.per_head = a.has("per-head");
  plan.dump_tensors = a.has("dump-tensors");
  plan.quiet = a.has("quiet");
  plan.dry_run = a.has("dry-run");
  plan.max_hours = read_max_hours(a);
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

int cpu_threads(int requested) {
  return requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

namespace {

// Whether layer L's projection weights are stored as BF16 in the checkpoint (read from the
// headers): their values are bf16 values, which a bf16 run can read in place. False when the
// headers cannot tell (a missing tensor or shard: the loader says what is wrong right after).
bool projection_weights_are_bf16(const Checkpoint& ckpt, int64_t layer) {
  try {
    for (const LayerTensorSpec* s : layer_tensors(ckpt.config())) {
      const std::string suffix = s->checkpoint_suffix();
      if (suffix.find("layernorm") != std::string::npos) continue;
      const std::string name = decoder_tensor_name(ckpt, layer, suffix);
      if (!ckpt.has_tensor(name) || ckpt.stored_dtype(name) != "BF16") return false;
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Plans the memory of this run from the geometry and the request, before the layer and the
// input are loaded: refuses with one line when it cannot fit; when only the attn_weights dump
// cannot, the plan drops it (attn_weights_dropped) and says so on stderr. The layer is kept by
// the backend (run() prepares with prepare_shared); bf16_weights: its projections are BF16.
MemoryPlan check_memory(const RunPlan& plan, const AttentionConfig& cfg, int64_t seq_len, bool bf16_weights) {
  MemoryRequest req;
  req.weights_kept = true;
  req.bf16_weights = bf16_weights;
  req.seq_len = seq_len;
  req.backend = plan.backend != BackendKind::Auto ? plan.backend : cuda_available() ? BackendKind::Cuda : BackendKind::Cpu;
  req.precision = plan.forward.precision;
  req.dump_tensors = plan.dump_tensors;
  req.attn_weights = plan.dump_tensors;
  req.tokens_input = needs_input_layernorm(plan.input);
  req.threads = cpu_threads(plan.forward.threads);
  req.gemm = plan.forward.gemm;
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

// The run's memory plan, before the layer and the input are loaded (refuses by throwing): the
// command's own planner (decode's) or the forward's.
MemoryPlan plan_run_memory(const RunPlan& plan, const MemoryPlanner& plan_memory, const Checkpoint& ckpt,
                           int64_t input_rows) {
  return plan_memory ? plan_memory(ckpt.config(), input_rows)
                     : check_memory(plan, ckpt.config(), input_rows, projection_weights_are_bf16(ckpt, plan.layer));
}

}  // namespace

// ---- the pipeline: load, run ------------------------------------------------------------
// Each phase times its steps into its own StageSeconds; the report's headline times are the
// totals of those lists, and its stage list is their concatenation in execution order.

// load: checkpoint, memory plan, layer, input                             (timing_s.load)
LoadedRun load(const RunPlan& plan, const MemoryPlanner& plan_memory) {
  StageSeconds stages;
  LoadedRun r(timed(stages, "open checkpoint", [&] { return Checkpoint::open(plan.checkpoint, plan.config_path); }));
  r.stages = std::move(stages);
  const AttentionConfig& cfg = r.ckpt.config();
  const OpenedInput input = timed(r.stages, "open input", [&] { return open_input(plan.input, plan.layer); });
  // refuses before anything large is allocated
  r.memory = plan_run_memory(plan, plan_memory, r.ckpt, input.seq_len);
  if (!plan_memory && plan.command != "sweep") check_forward_time(plan, cfg, input.seq_len, 1);
  r.weights = timed(r.stages, "load layer", [&] {
    return std::make_shared<const LayerWeights>(load_checked_layer(r.ckpt, plan.layer, needs_input_layernorm(plan.input)));
  });
  r.options = plan.forward;
  r.options.latent_norm_eps = latent_eps(plan.latent_eps_arg, cfg, r.latent_eps_mode);
  r.options.keep_attn_weights = plan.dump_tensors && !r.memory.attn_weights_dropped;
  r.options.keep_states = plan.dump_tensors;
  r.options.keep_latent_cache = plan.dump_tensors;
  r.input = timed(r.stages, "build input", [&] { return load_input(input, r.ckpt, *r.weights, r.options.precision); });
  return r;
}

int dry_run(const RunPlan& plan, const MemoryPlanner& plan_memory, const std::string& what) {
  const Checkpoint ckpt = Checkpoint::open(plan.checkpoint, plan.config_path);
  const AttentionConfig& cfg = ckpt.config();
  const OpenedInput input = open_input(plan.input, plan.layer);
  const MemoryPlan mp = plan_run_memory(plan, plan_memory, ckpt, input.seq_len);
  if (!plan_memory && plan.command != "sweep") check_forward_time(plan, cfg, input.seq_len, 1);
  std::printf("mla-h2o %s: dry run: %s, %s tokens%s\n", plan.command.c_str(), plan.checkpoint.c_str(),
              input.seq_len > 0 ? std::to_string(input.seq_len).c_str() : "? (the input is checked when it is read)", what.c_str());
  if (mp.estimate.host_peak_bytes > 0) {
    const std::string available = mp.budget.host_bytes >= 0 ? format_bytes(mp.budget.host_bytes) + " available (" +
                                                                  mp.budget.host_source + ")"
                                                            : "available memory unknown";
    std::printf("  memory: peak ~%s (%s), %s%s\n", format_bytes(mp.estimate.host_peak_bytes).c_str(),
                mp.estimate.peak_phase.c_str(), available.c_str(), mp.note.empty() ? "" : ("; " + mp.note).c_str());
  }
  if (input.seq_len > 0) {
    const cpu::ForwardFlops f = cpu::forward_flops(cfg, input.seq_len, plan.forward.mask == Mask::Causal);
    std::printf("  forward: %.3g GFLOP a layer (projections %.3g, attention %.3g)\n", f.total() * 1e-9,
                f.projections * 1e-9, f.attention * 1e-9);
  }
  std::printf("  outputs: the set at %s (not written: dry run)\n", plan.out_dir.c_str());
  return 0;
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
    backend.prepare_shared(cfg, in.weights, in.options);
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

}  // namespace mla::cli
