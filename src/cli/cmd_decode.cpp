// src/cli/cmd_decode.cpp — `mla-h2o decode`: decode-time eviction on one layer's MLA latent
// cache, policies compared by what their eviction does to the attention output, step by step
// (docs/decode.md). `mla-h2o demo --decode` calls it with the demo's settings (cmd_run.cpp).
//
// Pipeline, each stage timed:
//   1. settings           every bad flag is one error line, before any work
//   2. output set         opened first (mla/output_set.hpp), so a bad or busy --out fails early
//   3. checkpoint, layer, input rows [T, H]; then the decode options are checked against T
//   4. backend            prepare + the two forwards of compute_decode_inputs (prefill, queries)
//   5. decode             run_decode over N steps, all policies and budgets (progress on stderr)
//   6. outputs            decode.csv, summary.csv, decode.svg, budget.svg (>= 2 budgets),
//                         report.json, decode_tensors.safetensors (--dump-tensors); the
//                         summary table on stdout once the set is in place
//
// Shape legend: T = P + N rows, H = hidden_size, n heads, r_kv + d_r = latent cache width.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "inputs.hpp"
#include "progress.hpp"
#include "run_pipeline.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/memory_plan.hpp"
#include "mla/output_set.hpp"
#include "mla/report.hpp"
#include "mla/rope.hpp"
#include "mla/safetensors.hpp"
#include "mla_build_config.h"

namespace mla::cli {
namespace {

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
      {"cache-budget", "K[,K2,...]", "cache budgets, strictly increasing, each > sinks + recent (required)", ""},
      {"policy", "a,b,...",
       "full, h2o, h2o-normalized, tova, streaming, snapkv, random, oracle (full is always computed)", "all"},
      {"sinks", "N", "first N positions never evicted", "4"},
      {"recent", "N", "the N most recent positions (the new token included) never evicted", "32"},
      {"policy-seed", "N", "seed of the random policy", "0"},
      {"attention", "absorbed|naive", "absorbed latent-cache attention (vLLM/SGLang/DeepSeek) or HF's per-head k/v",
       "absorbed"},
      {"precision", "fp32|bf16", "bf16: HF bf16 prefill, bf16 decode rounding of docs/decode.md §3", "fp32"},
      {"backend", "cpu|reference", "cpu = the cpu backend's stages (--gemm); reference = the double-loop reference (slow)", "cpu"},
      {"threads", "N", "cpu threads (0 = all cores)", "0"},
      {"gemm", "auto|onednn|eigen", "cpu: projection engine of the prefill (docs/cpu-gemm.md); auto runs " + gemm_auto_summary(),
       "auto"},
      {"out", "DIR", "output directory (created)", "./mla-h2o-out"},
      {"dump-tensors", "", "write decode_tensors.safetensors (latent cache, outputs of every policy)", ""},
      {"quiet", "", "no progress lines on stderr (else every 10 % of the steps after MLA_PROGRESS_AFTER s, default 1)", ""},
  };
  for (auto& f : own) spec.flags.push_back(f);
  spec.positional_help =
      "input source (exactly one): --input FILE | --tokens IDS|FILE | --seq-len S --seed N (default: 256 tokens, seed 0)";
  return spec;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<Policy> parse_policies(const std::string& list) {
  std::vector<Policy> out;
  std::string cur;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || list[i] == ',') {
      if (cur.empty()) fail(ErrorKind::InvalidArgument, "--policy: empty name in '" + list + "'");
      out.push_back(parse_policy(cur));
      cur.clear();
    } else {
      cur += list[i];
    }
  }
  return out;
}

std::vector<std::byte> f64_bytes(const std::vector<double>& v) { return encode_f64(v); }

void write_decode_tensors(const std::string& path, const DecodeInputs& in, const DecodeResult& r,
                          const std::map<std::string, std::string>& meta) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<TensorToWrite> tensors;
  payloads.reserve(r.traces.size() + 4);
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& v) {
    payloads.push_back(f64_bytes(v));
    tensors.push_back(TensorToWrite{name, DType::F64, std::vector<uint64_t>(shape.begin(), shape.end()), payloads.back()});
  };
  add("latent_cache", in.latent_cache.shape, in.latent_cache.data);
  add("prefill_scores", {static_cast<int64_t>(in.prefill_scores.size())}, in.prefill_scores);
  add("attn_output.full", r.full_output.shape, r.full_output.data);
  for (const PolicyTrace& t : r.traces)
    if (t.policy != Policy::Full)
      add("attn_output." + std::string(policy_name(t.policy)) + ".K" + std::to_string(t.budget), t.attn_output.shape,
          t.attn_output.data);
  write_safetensors(path, tensors, meta);
}

std::string report_json(const std::map<std::string, std::string>& settings, const AttentionConfig& cfg,
                        const DecodeOptions& opt, int64_t T, const std::vector<DecodeSummary>& sum,
                        const std::vector<std::pair<std::string, double>>& timing, const std::vector<std::string>& files,
                        const MemoryPlan& memory) {
  JsonWriter j;
  j.begin_object();
  j.key("command").value("decode");
  j.key("version").value(MLA_VERSION);
  for (const auto& [k, v] : settings) j.key(k).value(v);
  j.key("geometry").begin_object();
  j.key("hidden_size").value(cfg.hidden_size);
  j.key("num_attention_heads").value(cfg.num_attention_heads);
  j.key("kv_lora_rank").value(cfg.kv_lora_rank);
  j.key("qk_nope_head_dim").value(cfg.qk_nope_head_dim);
  j.key("qk_rope_head_dim").value(cfg.qk_rope_head_dim);
  j.key("v_head_dim").value(cfg.v_head_dim);
  j.key("softmax_scale").value(softmax_scale(cfg));
  j.end_object();
  j.key("rows").value(T);
  j.key("prompt_len").value(opt.prompt_len);
  j.key("steps").value(opt.steps);
  j.key("sinks").value(opt.sinks);
  j.key("recent").value(opt.recent);
  j.key("budgets").begin_array();
  for (int64_t K : opt.budgets) j.value(K);
  j.end_array();
  j.key("summary").begin_array();
  for (const DecodeSummary& s : sum) {
    j.begin_object();
    j.key("policy").value(policy_name(s.policy));
    j.key("budget").value(s.budget);
    j.key("mean_rel_error").value(s.mean_rel_error);
    j.key("p95_rel_error").value(s.p95_rel_error);
    j.key("max_rel_error").value(s.max_rel_error);
    j.key("mean_cosine").value(s.mean_cosine);
    j.key("mean_mass_recall").value(s.mean_mass_recall);
    j.key("mean_cache_len").value(s.mean_cache_len);
    j.end_object();
  }
  j.end_array();
  j.key("timing_s").begin_object();
  for (const auto& [k, v] : timing) j.key(k).value(v);
  j.end_object();
  j.key("files").begin_array();
  for (const auto& f : files) j.value(f);
  j.end_array();
  j.key("memory").begin_object();  // the plan made before the layer was loaded, and the measured peak
  j.key("planned_peak_bytes").value(memory.request.seq_len > 0 ? memory.estimate.host_peak_bytes : int64_t{-1});
  j.key("planned_peak_phase").value(memory.estimate.peak_phase);
  j.key("available_bytes").value(memory.budget.host_bytes);
  j.key("available_source").value(memory.budget.host_source);
  j.key("measured_peak_rss_bytes").value(peak_rss_bytes());
  j.end_object();
  j.end_object();
  return j.str() + "\n";
}

// The memory plan of this decode (mla/memory_plan.hpp), from the flags and the input's row
// count, before the layer or the input is loaded: refuses with one line when it cannot fit.
MemoryPlan check_decode_memory(const AttentionConfig& cfg, const InputRequest& input, int64_t layer, const DecodeOptions& opt,
                               const Args& a, bool reference, DecodeAttention attention, const ForwardOptions& fopt) {
  DecodeMemoryRequest req;
  req.backend = reference ? BackendKind::Reference : BackendKind::Cpu;
  req.input_rows = input_seq_len(input, layer);
  req.prompt_len = opt.prompt_len;
  req.steps = a.has("steps") ? a.integer("steps", 0) : req.input_rows - opt.prompt_len;
  if (req.input_rows <= 0 || req.steps < 1 || req.steps > req.input_rows - req.prompt_len) return {};  // reported below
  req.query_window = opt.snapkv_window;
  req.budgets = static_cast<int64_t>(opt.budgets.size());
  req.largest_budget = opt.budgets.back();
  req.policies = static_cast<int64_t>(std::count_if(opt.policies.begin(), opt.policies.end(), [](Policy p) { return p != Policy::Full; }));
  req.naive = attention == DecodeAttention::Naive;
  req.precision = fopt.precision;
  req.dump_tensors = a.has("dump-tensors");
  req.input_layernorm = needs_input_layernorm(input);
  req.threads = cpu_threads(fopt.threads);
  const MemoryPlan plan = plan_decode_memory(cfg, req, host_memory_budget());
  if (!plan.fits) fail(ErrorKind::Unsupported, plan.refusal);
  return plan;
}

}  // namespace

int cmd_decode(const std::vector<std::string>& argv) {
  const CommandSpec spec = decode_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> timing;

  // 1. settings
  const std::string checkpoint = a.str("checkpoint");
  if (checkpoint.empty()) fail(ErrorKind::InvalidArgument, "--checkpoint PATH is required (see mla-h2o decode --help)");
  if (!a.has("prompt-len")) fail(ErrorKind::InvalidArgument, "--prompt-len P is required (see mla-h2o decode --help)");
  if (!a.has("cache-budget")) fail(ErrorKind::InvalidArgument, "--cache-budget K is required (see mla-h2o decode --help)");
  const int64_t layer = a.integer("layer", 0, 0);
  const InputRequest input_req = input_request(a);
  DecodeOptions opt;
  opt.prompt_len = a.integer("prompt-len", 0);
  opt.budgets = a.int_list("cache-budget", {});
  opt.policies = a.has("policy") ? parse_policies(a.str("policy")) : all_policies();
  opt.sinks = a.integer("sinks", 4, 0);
  opt.recent = a.integer("recent", 32, 1);
  opt.seed = static_cast<uint64_t>(a.integer("policy-seed", 0, 0));
  const DecodeAttention attention =
      a.choice("attention", {"absorbed", "naive"}, "absorbed") == "absorbed" ? DecodeAttention::Absorbed : DecodeAttention::Naive;
  const bool reference = a.choice("backend", {"cpu", "reference"}, "cpu") == "reference";
  ForwardOptions fopt;
  fopt.mask = Mask::Causal;
  fopt.precision = a.choice("precision", {"fp32", "bf16"}, "fp32") == "bf16" ? Precision::BF16 : Precision::FP32;
  fopt.threads = static_cast<int>(a.integer("threads", 0, 0, 4096));
  fopt.gemm = gemm_choice(a);
  const std::string out_dir = a.str("out", "mla-h2o-out");
  const bool quiet = a.has("quiet");
  const double progress_after = progress_after_seconds();
  if (a.has("steps") && a.integer("steps", 0) < 1)
    fail(ErrorKind::InvalidArgument, "--steps " + a.str("steps") + ": nothing to measure (need at least one decode step)");
  check_decode_flags(opt);  // the flags alone (overflow-safe), before any work

  // 2. output set (mla/output_set.hpp): a bad or busy --out fails here, before any work
  OutputSet out(out_dir, "decode");

  // 3. checkpoint, layer, input
  auto t0 = std::chrono::steady_clock::now();
  const Checkpoint ckpt = Checkpoint::open(checkpoint, a.str("config"));
  const AttentionConfig& cfg = ckpt.config();
  const MemoryPlan memory = check_decode_memory(cfg, input_req, layer, opt, a, reference, attention, fopt);
  const LayerWeights weights = load_checked_layer(ckpt, layer, needs_input_layernorm(input_req));
  const HiddenInput input = load_input(input_req, ckpt, weights, fopt.precision);
  const int64_t T = input.hidden.dim(0);
  opt.steps = a.has("steps") ? a.integer("steps", 0) : T - opt.prompt_len;
  check_decode_options(opt, T);
  timing.emplace_back("load", seconds_since(t0));

  // 4. backend: prefill + the held queries
  t0 = std::chrono::steady_clock::now();
  if (!quiet && (progress_after <= 0 || opt.prompt_len >= 1024)) std::fprintf(stderr, "mla-h2o decode: prefill of %lld rows and projections of %lld more ...\n",
                           static_cast<long long>(opt.prompt_len), static_cast<long long>(T - opt.prompt_len));
  std::unique_ptr<Backend> backend = reference ? make_reference_backend() : make_cpu_backend();
  const int64_t rows_used = opt.prompt_len + opt.steps;
  TensorF hidden = input.hidden;
  hidden.shape[0] = rows_used;
  hidden.data.resize(static_cast<size_t>(rows_used * cfg.hidden_size));
  DecodeInputs inputs;
  if (reference) {
    backend->prepare(cfg, weights, fopt);
    inputs = compute_decode_inputs(*backend, hidden, opt.prompt_len, opt.snapkv_window, fopt);
  } else {  // the cpu stages in one pass (no o_proj for the prefill)
    inputs = compute_cpu_decode_inputs(cfg, weights, hidden, opt.prompt_len, opt.snapkv_window, fopt);
  }
  timing.emplace_back("prefill", seconds_since(t0));

  // 5. decode
  t0 = std::chrono::steady_clock::now();
  DecodeKernelSpec ks;
  ks.attention = attention;
  ks.precision = fopt.precision;
  ks.slots = decode_slots(opt);
  ks.rows = opt.steps;
  ks.threads = fopt.threads;
  std::unique_ptr<DecodeKernel> kernel =
      reference ? make_reference_decode_kernel(cfg, weights, inputs, ks) : make_cpu_decode_kernel(cfg, weights, inputs, ks);
  int64_t last_tenth = 0;
  const auto progress = [&](int64_t done, int64_t total) {
    const int64_t tenth = done * 10 / total;
    if (quiet || tenth == last_tenth || seconds_since(t0) < progress_after) return;  // only for long runs
    last_tenth = tenth;
    std::fprintf(stderr, "mla-h2o decode: step %lld of %lld (%.1f s)\n", static_cast<long long>(done),
                 static_cast<long long>(total), seconds_since(t0));
  };
  PrefillView pre{opt.prompt_len, inputs.prefill_scores};
  const DecodeResult result = run_decode(opt, pre, *kernel, progress);
  timing.emplace_back("decode", seconds_since(t0));
  const std::vector<DecodeSummary> summary = summarize(result);

  // 6. outputs
  t0 = std::chrono::steady_clock::now();
  const std::string backend_line = backend->name() + " (" + backend->description() + ")";
  std::map<std::string, std::string> settings = {
      {"checkpoint", checkpoint},
      {"layer", std::to_string(layer)},
      {"input", input.description},
      {"precision", precision_name(fopt.precision)},
      {"attention", decode_attention_name(attention)},
      {"backend", backend_line},
      {"threads", fopt.threads == 0 ? std::string("all cores") : std::to_string(fopt.threads)},
      {"gemm", inputs.gemm.engine.empty() ? std::string("none (reference backend)")
                                          : gemm_label(inputs.gemm.engine, inputs.gemm.kernel) + " (" + inputs.gemm.reason + ")"},
      {"rope_order", "latent_cache rope half in HF's de-interleaved order (as key_states)"},
  };
  out.write("decode.csv", decode_csv(result));
  out.write("summary.csv", decode_summary_csv(summary));
  char title[200];
  std::snprintf(title, sizeof title, "layer %lld, P = %lld, K = %lld: rel_error of attn_output per decode step (%s, %s)",
                static_cast<long long>(layer), static_cast<long long>(opt.prompt_len),
                static_cast<long long>(opt.budgets.front()), precision_name(fopt.precision), decode_attention_name(attention));
  out.write("decode.svg", decode_svg(result, opt.budgets.front(), title));
  if (opt.budgets.size() >= 2) {
    std::snprintf(title, sizeof title, "layer %lld, P = %lld, N = %lld: mean rel_error against the cache budget",
                  static_cast<long long>(layer), static_cast<long long>(opt.prompt_len), static_cast<long long>(opt.steps));
    out.write("budget.svg", budget_svg(summary, title));
  }
  if (a.has("dump-tensors")) {
    std::map<std::string, std::string> meta = settings;
    meta["producer"] = std::string("mla-h2o ") + MLA_VERSION;
    write_decode_tensors(out.add("decode_tensors.safetensors"), inputs, result, meta);
  }
  const std::vector<std::string> files = out.paths_with({"report.json"});
  timing.emplace_back("outputs", seconds_since(t0));
  timing.emplace_back("total", seconds_since(t_start));
  out.write("report.json", report_json(settings, cfg, opt, T, summary, timing, files, memory));
  out.commit();

  std::printf("mla-h2o decode: layer %lld of %s\n", static_cast<long long>(layer), checkpoint.c_str());
  std::printf("input: %s; prompt %lld rows, %lld decode steps, sinks %lld, recent %lld\n", input.description.c_str(),
              static_cast<long long>(opt.prompt_len), static_cast<long long>(opt.steps), static_cast<long long>(opt.sinks),
              static_cast<long long>(opt.recent));
  std::printf("attention %s, precision %s, backend %s\n", decode_attention_name(attention), precision_name(fopt.precision),
              backend_line.c_str());
  std::printf("prefill projections: %s\n", settings["gemm"].c_str());
  std::printf("rel_error = ||o - o_full|| / ||o_full|| on attn_output; mass_recall = full-cache attention mass on the "
              "policy's cache (mean over heads); cache = tokens attended per step\n\n");
  std::fputs(decode_summary_table(summary).c_str(), stdout);
  std::printf("\ntime: load %.2f s, prefill %.2f s, decode %.2f s, total %.2f s\n", timing[0].second, timing[1].second,
              timing[2].second, timing.back().second);
  std::printf("files:\n");
  for (const auto& f : files) std::printf("  %s\n", f.c_str());
  return 0;
}

}  // namespace mla::cli
