// src/cli/cmd_decode.cpp — `mla-h2o decode`: decode-time eviction on one layer's MLA latent
// cache, policies compared by what their eviction does to the attention output, step by step
// (docs/decode.md). `mla-h2o demo --decode` runs the same pipeline with the demo's plan
// (cmd_run.cpp).
//
// Pipeline (execute_decode), the shape of `run`'s (run_pipeline.hpp), each stage timed:
//   (first)   the flags checked (check_decode_flags: overflow-safe, before any work), then the
//             output set opened (mla/output_set.hpp), so a bad or busy --out fails early
//   load      the shared load: checkpoint, input (opened once), decode's own memory plan
//             (src/decode/decode_memory.cpp), layer, input rows; then the decode options are
//             checked against the T rows
//   prefill   the backend's inputs: projections of all T rows, the causal prefill's attention
//             mass per head, the latent cache, the held queries (compute_cpu_decode_inputs, or
//             two forwards of the reference backend)
//   features  the per-token quantities knorm, expected-attention and value-aware read; kvzip's
//             context reconstruction (one more prefill and kernel per chunk of the context)
//   decode    the kernel, then run_decode over N steps, every policy and budget
//   outputs   decode.csv, summary.csv, decode.svg, budget.svg (>= 2 budgets),
//             decode_tensors.safetensors (--dump-tensors), report.json, all in one output set
//             moved into place at the end; the report on stdout once it is there
//
// Shape legend: T = P + N rows, H = hidden_size, n heads, r_kv + d_r = latent cache width.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "decode_plan.hpp"
#include "inputs.hpp"
#include "progress.hpp"
#include "run_pipeline.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/memory_plan.hpp"
#include "mla/output_set.hpp"
#include "mla/policy.hpp"
#include "mla/report.hpp"
#include "mla/safetensors.hpp"
#include "mla_build_config.h"
#include "src/cpu/attention_stages.hpp"  // forward_flops

namespace mla::cli {

CommandSpec decode_spec() {
  CommandSpec spec;
  spec.name = "decode";
  spec.synopsis =
      "mla-h2o decode: decode-time KV-cache eviction on one layer's MLA latent cache. Rows 0..P-1 of the\n"
      "input are the prompt (causal prefill), the next N rows are decode steps; every policy keeps its own\n"
      "cache of at most K tokens and is scored by the error of the attention output against the full cache.\n"
      "Definitions: docs/decode.md.";
  spec.usage = "mla-h2o decode --checkpoint PATH --prompt-len P --cache-budget K[,K2,...] [input source] [options]";
  spec.flags = {
      {"checkpoint", "PATH", "checkpoint directory or .safetensors file (required)", ""},
      {"config", "FILE", "config.json to use instead of the one beside the checkpoint", ""},
      {"layer", "N", "decoder layer whose attention runs", "0"},
  };
  for (auto& f : input_flags()) spec.flags.push_back(f);
  const std::vector<FlagSpec> own = {
      {"prompt-len", "P", "prompt rows (causal prefill); 1 <= P < T (required)", ""},
      {"steps", "N", "decode steps after the prompt", "T - P"},
      {"cache-budget", "K[,K2,...]", "cache budgets, strictly increasing; each policy needs K > what it never evicts (required)", ""},
      {"policy", "a,b:key=v,...",
       "presets (each paper's settings, docs/decode.md §2): full, h2o, h2o-normalized, tova, streaming, snapkv, "
       "snapkv-maxpool, pyramidkv, knorm, expected-attention, scissorhands, value-aware, keydiff, leverage, cur, lagkv, chunkkv, "
       "criticalkv, adakv, random, kvzip, oracle, or all; "
       "name:key=value,key=value changes a setting (sinks, recent=N|N%, heads=sum|max|mean, window, pool=avgN|maxN|none, "
       "future, vnorm=0|1, beta, seed, sketch, cur=key|value|kv_avg|kv_product, local, lag; the wrappers chunkkv, criticalkv, "
       "adakv: press=NAME, press.KEY=VALUE, chunk, first=N%, alpha=N%); full is always computed", "all"},
      {"sinks", "N", "first N positions never evicted, for every policy that has sinks (overrides the presets)", ""},
      {"recent", "N", "the N newest positions never evicted, for every policy that has a recent window (overrides the presets)", ""},
      {"policy-seed", "N", "seed of the random policy", "0"},
      {"attention", "absorbed|naive", "absorbed latent-cache attention (vLLM/SGLang/DeepSeek) or HF's per-head k/v",
       "absorbed"},
      {"precision", "fp32|bf16", "bf16: HF bf16 prefill, bf16 decode rounding of docs/decode.md §3", "fp32"},
      {"latent-norm-eps", "hf|config|VALUE",
       "eps of q_a_layernorm/kv_a_layernorm: hf = 1e-6 (transformers), config = rms_norm_eps (vLLM/SGLang)", "hf"},
      {"backend", "cpu|reference", "cpu = the cpu backend's stages (--gemm); reference = the double-loop reference (slow)", "cpu"},
      {"threads", "N", "cpu threads (0 = all cores)", "0"},
      {"gemm", "auto|onednn|eigen", "cpu: projection engine of the prefill (docs/cpu-gemm.md); auto runs " + gemm_auto_summary(),
       "auto"},
      {"out", "DIR", "output directory (created)", "./mla-h2o-out"},
      {"dump-tensors", "", "write decode_tensors.safetensors (latent cache, outputs of every policy)", ""},
      {"quiet", "", "no progress lines on stderr (shown after MLA_PROGRESS_AFTER seconds, default 1)", ""},
      {"dry-run", "", "print the plan (memory, FLOPs, outputs) and exit 0 without computing or writing anything", ""},
      max_hours_flag(),
  };
  for (auto& f : own) spec.flags.push_back(f);
  spec.positional_help =
      "input source (exactly one): --input FILE | --tokens IDS|FILE | --seq-len S --seed N (default: 256 tokens, seed 0)";
  return spec;
}

namespace {

void write_decode_tensors(const std::string& path, const DecodeInputs& in, int64_t n, const DecodeResult& r,
                          const std::map<std::string, std::string>& meta) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<TensorToWrite> tensors;
  payloads.reserve(r.traces.size() + 4);
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& v) {
    payloads.push_back(encode_f64(v));
    tensors.push_back(TensorToWrite{name, DType::F64, std::vector<uint64_t>(shape.begin(), shape.end()), payloads.back()});
  };
  const std::vector<double> prefill_scores = token_scores_from_heads(in.head_mass, n);  // [P]
  add("latent_cache", in.latent_cache.shape, in.latent_cache.data);
  add("prefill_scores", {static_cast<int64_t>(prefill_scores.size())}, prefill_scores);
  add("attn_output.full", r.full_output.shape, r.full_output.data);
  for (const PolicyTrace& t : r.traces)
    if (!policy_is_full_cache(t.policy))
      add("attn_output." + t.policy.label + ".K" + std::to_string(t.budget), t.attn_output.shape, t.attn_output.data);
  write_safetensors(path, tensors, meta);
}

// What the figures do not mean, said in every output when it applies (docs/decode.md §6).
std::vector<std::string> caveats(const std::string& synthetic, const InputRequest& input) {
  std::vector<std::string> c;
  if (!synthetic.empty())
    c.push_back("synthetic weights (" + synthetic + "): a random layer, not a trained model. Its attention is "
                "concentrated per query (the oracle keeps most of the mass with few tokens) but not persistent or "
                "local the way a trained model's is, so which policy does best here says nothing about a real model; "
                "measure on a real checkpoint (--tokens on layer 0, or --input hidden states)");
  if (input.kind == InputKind::Seeded)
    c.push_back("seeded inputs: i.i.d. normal rows, not text (--tokens or --input give a model's inputs)");
  return c;
}

// --max-hours (docs/long-context.md §4.1): the prefill's forward over P rows, then for each run
// (full, and every policy at every budget) the N decoded rows' projections and their attention over
// every key before them, as a forward counts them: an upper bound on what a policy attends (at
// most K + 1 keys), at the GEMM rate, which one row at a time does not reach.
void check_decode_time(const DecodePlan& plan, const AttentionConfig& cfg, int64_t P, int64_t N) {
  if (plan.run.max_hours < 0) return;
  int64_t runs = 1;
  for (const PolicySettings& p : plan.decode.policies)
    if (!policy_is_full_cache(p)) runs += static_cast<int64_t>(plan.decode.budgets.size());
  const double prompt = cpu::forward_flops(cfg, P, true).total(), all = cpu::forward_flops(cfg, P + N, true).total();
  std::string how;
  const double seconds = planned_seconds(plan.run, cfg, prompt + static_cast<double>(runs) * (all - prompt), how);
  check_max_hours(seconds, how + ", " + std::to_string(runs) + " runs", plan.run.max_hours);
}

// The memory plan of this decode (mla/memory_plan.hpp) from the flags and the input's row count,
// before the layer or the input rows are built: refuses with one line when it cannot fit.
MemoryPlan check_decode_memory(const DecodePlan& plan, const AttentionConfig& cfg, int64_t input_rows) {
  DecodeMemoryRequest req = decode_memory_request(plan.decode, input_rows);
  if (input_rows <= 0 || req.steps < 1 || req.steps > input_rows - req.prompt_len) return {};  // check_decode_options says why
  req.backend = plan.run.backend == BackendKind::Reference ? BackendKind::Reference : BackendKind::Cpu;
  req.naive = plan.attention == DecodeAttention::Naive;
  req.precision = plan.run.forward.precision;
  req.dump_tensors = plan.dump_tensors;
  req.input_layernorm = needs_input_layernorm(plan.run.input);
  req.threads = cpu_threads(plan.run.forward.threads);
  req.gemm = plan.run.forward.gemm;
  const MemoryPlan mp = plan_decode_memory(cfg, req, host_memory_budget());
  if (!mp.fits) fail(ErrorKind::Unsupported, mp.refusal);
  check_decode_time(plan, cfg, req.prompt_len, req.steps);
  return mp;
}

}  // namespace

DecodePlan read_decode_plan(const Args& a) {
  DecodePlan plan;
  plan.run = read_run_plan(a, "decode", {{"prompt-len", "P"}, {"cache-budget", "K"}});
  RunPlan& r = plan.run;
  r.backend = a.choice("backend", {"cpu", "reference"}, "cpu") == "reference" ? BackendKind::Reference : BackendKind::Cpu;
  r.forward.mask = Mask::Causal;
  r.forward.precision = a.choice("precision", {"fp32", "bf16"}, "fp32") == "bf16" ? Precision::BF16 : Precision::FP32;
  r.forward.threads = static_cast<int>(a.integer("threads", 0, 0, 4096));
  r.forward.gemm = gemm_choice(a);
  r.latent_eps_arg = a.str("latent-norm-eps", "hf");
  r.out_dir = a.str("out", r.out_dir);
  plan.dump_tensors = a.has("dump-tensors");
  r.quiet = a.has("quiet");
  r.dry_run = a.has("dry-run");
  r.max_hours = read_max_hours(a);
  plan.decode.prompt_len = a.integer("prompt-len", 0);
  plan.decode.budgets = a.int_list("cache-budget", {});
  plan.decode.policies = read_policies(a);
  if (a.has("steps") && a.integer("steps", 0) < 1)
    fail(ErrorKind::InvalidArgument, "--steps " + a.str("steps") + ": nothing to measure (need at least one decode step)");
  plan.decode.steps = a.has("steps") ? a.integer("steps", 0) : 0;
  plan.attention =
      a.choice("attention", {"absorbed", "naive"}, "absorbed") == "absorbed" ? DecodeAttention::Absorbed : DecodeAttention::Naive;
  check_decode_flags(plan.decode);  // the flags alone (overflow-safe), before any work
  int64_t rows = 0;  // the input only as far as the run needs: P + N rows (a BOS, if any, is one of them)
  if (plan.decode.steps > 0 && !__builtin_add_overflow(plan.decode.prompt_len, plan.decode.steps, &rows)) {
    r.input.max_rows = rows;  // (a sum that overflows is refused later, naming --steps)
    r.input.text_max_bytes = rows;
  }
  return plan;
}

namespace {

// The decode options of this run: the plan's, with the layer, the row count and the dump.
DecodeOptions decode_options(const DecodePlan& plan, const AttentionConfig& cfg, int64_t T) {
  DecodeOptions opt = plan.decode;
  opt.layer = plan.run.layer;
  opt.num_layers = cfg.num_hidden_layers;
  if (opt.steps == 0 && opt.prompt_len < T) opt.steps = T - opt.prompt_len;  // else check_decode_options names --prompt-len
  opt.keep_outputs = plan.dump_tensors;
  check_decode_options(opt, T);
  return opt;
}

// prefill: projections of every row, the causal prefill's attention mass, the latent cache
DecodeInputs prefill(const DecodePlan& plan, const LoadedRun& in, const TensorF& hidden, const DecodeOptions& opt,
                     const ForwardOptions& fopt, StageSeconds& stages) {
  const AttentionConfig& cfg = in.ckpt.config();
  const FeatureNeeds needs = feature_needs(opt.policies);
  DecodeInputsRequest req;
  req.prompt_len = opt.prompt_len;
  req.query_window = prompt_query_window(opt);
  if (needs.expected_attention) req.statistics_from = std::min(needs.expected_sinks, opt.prompt_len - 1);
  const bool reference = plan.run.backend == BackendKind::Reference;
  return timed(stages, reference ? "prefill (reference)" : "prefill + projections (cpu)", [&] {
    if (!reference) return compute_cpu_decode_inputs(cfg, *in.weights, hidden, req, fopt);
    std::unique_ptr<Backend> backend = make_reference_backend();
    backend->prepare_shared(cfg, in.weights, fopt);
    return compute_decode_inputs(*backend, cfg, hidden, req, fopt);
  });
}

// The per-token features some policies read (expected-attention's future rotation with progress:
// O(future) work, minutes at future = 10^8).
TokenFeatures token_features(const LoadedRun& in, const DecodeInputs& inputs, const DecodeOptions& opt, ProgressLine& progress,
                             StageSeconds& stages) {
  const AttentionConfig& cfg = in.ckpt.config();
  const FeatureNeeds needs = feature_needs(opt.policies);
  const int64_t P = opt.prompt_len;
  return timed(stages, "token features", [&] {
    QueryStatistics stats = inputs.query_statistics;
    if (needs.expected_attention)
      stats.future_rotation = mean_rope_rotation(cfg, P, needs.expected_future, [&](int64_t done, int64_t total) {
        progress.update("expected-attention: mean RoPE rotation over the future positions", done, total);
      });
    return compute_token_features(cfg, *in.weights, inputs.latent_cache, P, needs, stats, in.options.threads);
  });
}

// kvzip's context reconstruction on this layer (add_decode_reconstruction) by this run's backend
// and kernel.
void reconstruction_scores(const DecodePlan& plan, const LoadedRun& in, const TensorF& hidden, const DecodeOptions& opt,
                           const ForwardOptions& fopt, TokenFeatures& f, StageSeconds& stages) {
  const AttentionConfig& cfg = in.ckpt.config();
  ForwardOptions ropt = fopt;
  ropt.progress = nullptr;
  const bool reference = plan.run.backend == BackendKind::Reference;
  std::unique_ptr<Backend> backend;
  if (reference) {
    backend = make_reference_backend();
    backend->prepare_shared(cfg, in.weights, ropt);
  }
  StageTimer t(stages, "kvzip: context reconstruction");
  add_decode_reconstruction(
      hidden, opt.prompt_len, opt.prompt_len + opt.steps, cfg.num_attention_heads,
      [&](const TensorF& rows, const DecodeInputsRequest& req) {
        return reference ? compute_decode_inputs(*backend, cfg, rows, req, ropt)
                         : compute_cpu_decode_inputs(cfg, *in.weights, rows, req, ropt);
      },
      [&](const DecodeInputs& ri, int64_t R) {
        DecodeKernelSpec ks;
        ks.attention = plan.attention;
        ks.precision = ropt.precision;
        ks.slots = 1;
        ks.rows = R;
        ks.threads = ropt.threads;
        return reference ? make_reference_decode_kernel(cfg, *in.weights, ri, ks) : make_cpu_decode_kernel(cfg, *in.weights, ri, ks);
      },
      f);
}

// ||h|| of each decode row [N]: the residual stream's norm when the source gives it, else the
// norm of the row given (which stands for it).
std::vector<double> residual_norms(const LoadedRun& in, const TensorF& hidden, int64_t P, int64_t N) {
  const std::vector<double>& residual = in.input.residual_norm;  // [T] when the source gives it
  const int64_t H = hidden.dim(1);
  std::vector<double> out(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    const size_t row = static_cast<size_t>(P + i);
    if (!residual.empty()) {
      out[static_cast<size_t>(i)] = residual[row];
    } else {
      double acc = 0;
      for (int64_t j = 0; j < H; ++j) {
        const double v = hidden.data[row * static_cast<size_t>(H) + static_cast<size_t>(j)];
        acc += v * v;
      }
      out[static_cast<size_t>(i)] = std::sqrt(acc);
    }
  }
  return out;
}

// What ran, for report.json and stdout (the files and stages are added when written).
DecodeRunInfo run_info(const DecodePlan& plan, const LoadedRun& in, const DecodeInputs& inputs, const DecodeKernel& kernel,
                       const ForwardOptions& fopt) {
  const AttentionConfig& cfg = in.ckpt.config();
  DecodeRunInfo info;
  info.checkpoint = plan.run.checkpoint;
  info.synthetic_weights = in.ckpt.synthetic_origin();
  info.model_files = model_file_digests(in.ckpt, plan.run.command, plan.run.quiet);
  info.caveats = caveats(info.synthetic_weights, plan.run.input);
  info.layer = plan.run.layer;
  info.input = in.input.description;
  info.residual_source = !in.input.residual_norm.empty()
                             ? (plan.run.input.kind == InputKind::Tokens
                                    ? "||h|| = the embed_tokens row, the residual stream entering layer 0"
                                    : "||h|| = the --residual row, the residual stream entering the layer")
                             : "||h|| = the row given (the attention's input, standing for the residual stream)";
  info.rows = in.input.hidden.dim(0);
  info.config = cfg;
  info.precision = precision_name(fopt.precision);
  info.attention = decode_attention_name(plan.attention);
  info.latent_norm_eps_mode = in.latent_eps_mode;
  info.latent_norm_eps = in.options.latent_norm_eps;
  info.backend_requested = plan.run.backend == BackendKind::Reference ? "reference" : "cpu";
  info.backend = inputs.backend;
  info.backend_description = inputs.description;
  info.gemm = inputs.gemm;
  info.decode_kernel = kernel.description();
  info.threads = fopt.threads;
  info.notes = plan.run.notes;
  if (plan.run.input.kind == InputKind::Tokens && plan.run.layer > 0) info.notes.push_back(tokens_caveat(std::to_string(plan.run.layer)));
  if (in.memory.request.seq_len > 0) {
    info.memory_planned_bytes = in.memory.estimate.host_peak_bytes;
    info.memory_planned_phase = in.memory.estimate.peak_phase;
    info.memory_process_bytes = in.memory.estimate.process_bytes;
    info.memory_available_bytes = in.memory.budget.host_bytes;
    info.memory_available_source = in.memory.budget.host_source;
  }
  return info;
}

// decode.csv, summary.csv, decode.svg, budget.svg (>= 2 budgets), decode_tensors.safetensors
// (--dump-tensors); the files are listed in info.
void write_outputs(OutputSet& out, const DecodePlan& plan, DecodeRunInfo& info, const DecodeOptions& opt,
                   const DecodeResult& result, const std::vector<DecodeSummary>& summary, const DecodeInputs& inputs,
                   const AttentionConfig& cfg) {
  const int64_t P = opt.prompt_len, N = opt.steps;
  const std::string tag = info.synthetic_weights.empty() ? "" : "[synthetic weights] ";
  out.write("decode.csv", decode_csv(result));
  out.write("summary.csv", decode_summary_csv(summary));
  out.write("decode.svg", decode_svg(result, opt.budgets.front(),
                                     tag + "layer " + std::to_string(info.layer) + ", P = " + std::to_string(P) + ", K = " +
                                         std::to_string(opt.budgets.front()) + ": rel_error of attn_output per decode step (" +
                                         info.precision + ", " + info.attention + ")"));
  if (opt.budgets.size() >= 2)
    out.write("budget.svg", budget_svg(summary, tag + "layer " + std::to_string(info.layer) + ", P = " + std::to_string(P) +
                                                    ", N = " + std::to_string(N) + ": mean rel_error against the tokens held"));
  if (plan.dump_tensors) {
    const std::map<std::string, std::string> meta = {
        {"producer", std::string("mla-h2o ") + MLA_VERSION + " decode"},
        {"checkpoint", info.checkpoint},
        {"layer", std::to_string(info.layer)},
        {"input", info.input},
        {"precision", info.precision},
        {"attention", info.attention},
        {"backend", info.backend + " (" + info.backend_description + ")"},
        {"synthetic_weights", info.synthetic_weights.empty() ? "no" : info.synthetic_weights},
        {"rope_order", cfg.rope_style() == RopeStyle::Complex
                           ? "latent_cache rope half in HF DeepseekV2's order: pairs (2i, 2i+1) in place (as its cache)"
                           : "latent_cache rope half in HF's de-interleaved order (as key_states)"},
        {"config", config_to_json(cfg, false)},
    };
    write_decode_tensors(out.add("decode_tensors.safetensors"), inputs, cfg.num_attention_heads, result, meta);
  }
  info.files = out.paths_with({"report.json"});
}

}  // namespace

int execute_decode(const DecodePlan& plan, OutputSet& out) {
  // load (the shared load: checkpoint, input, decode's memory plan, layer, input rows)
  const LoadedRun in = load(plan.run, [&](const AttentionConfig& c, int64_t rows) { return check_decode_memory(plan, c, rows); });
  StageSeconds stages = in.stages;
  const AttentionConfig& cfg = in.ckpt.config();
  const DecodeOptions opt = decode_options(plan, cfg, in.input.hidden.dim(0));
  const int64_t P = opt.prompt_len, N = opt.steps, rows = P + N;
  TensorF hidden = in.input.hidden;  // the rows used: [P + N, H]
  hidden.shape[0] = rows;
  hidden.data.resize(static_cast<size_t>(rows * cfg.hidden_size));

  ProgressLine progress(plan.run.command, plan.run.quiet);
  ForwardOptions fopt = in.options;
  fopt.mask = Mask::Causal;
  fopt.progress = progress.callback();
  const DecodeInputs inputs = prefill(plan, in, hidden, opt, fopt, stages);
  TokenFeatures features = token_features(in, inputs, opt, progress, stages);
  if (feature_needs(opt.policies).reconstruction) reconstruction_scores(plan, in, hidden, opt, fopt, features, stages);
  progress.finish();

  // decode: the kernel, then every step of every policy and budget
  DecodeKernelSpec ks;
  ks.attention = plan.attention;
  ks.precision = fopt.precision;
  ks.slots = decode_slots(opt);
  ks.rows = N;
  ks.threads = fopt.threads;
  std::unique_ptr<DecodeKernel> kernel = timed(stages, "decode kernel prepare", [&] {
    return plan.run.backend == BackendKind::Reference ? make_reference_decode_kernel(cfg, *in.weights, inputs, ks)
                                                      : make_cpu_decode_kernel(cfg, *in.weights, inputs, ks);
  });
  DecodeContext dctx;
  dctx.head_mass = inputs.head_mass;
  dctx.features = &features;
  dctx.residual_norm = residual_norms(in, hidden, P, N);
  const DecodeResult result = timed(stages, "decode steps", [&] {
    return run_decode(opt, dctx, *kernel, [&](int64_t done, int64_t total) { progress.update("decode steps", done, total); });
  });
  progress.finish();
  const std::vector<DecodeSummary> summary = summarize(result);

  // outputs
  DecodeRunInfo info = run_info(plan, in, inputs, *kernel, fopt);
  {
    StageTimer t(stages, "write outputs");
    write_outputs(out, plan, info, opt, result, summary, inputs, cfg);
  }
  info.stages = stages;
  info.memory_peak_rss_bytes = peak_rss_bytes();
  out.write("report.json", decode_report_json(info, opt, summary));
  out.commit();
  std::fputs(decode_report_text(info, opt, summary).c_str(), stdout);
  return 0;
}

int cmd_decode(const std::vector<std::string>& argv) {
  const CommandSpec spec = decode_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  const DecodePlan plan = read_decode_plan(a);
  if (plan.run.dry_run)
    return dry_run(plan.run, [&](const AttentionConfig& c, int64_t rows) { return check_decode_memory(plan, c, rows); });
  OutputSet out(plan.run.out_dir, plan.run.command, OutputSet::Lock::FailIfHeld,
                run_inputs(plan.run));  // before any work: a bad or busy --out fails here
  return execute_decode(plan, out);
}

}  // namespace mla::cli
