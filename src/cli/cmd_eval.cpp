// src/cli/cmd_eval.cpp — `mla-h2o eval`: what KV-cache eviction does to a whole model's
// next-token predictions, every layer's cache managed by the policy (mla/eval.hpp, docs/eval.md).
//
// Pipeline (execute_eval), the shape of `run`'s, each stage timed:
//   load      output directory, checkpoint, model config, token ids (--tokens / --text), every check
//             before any work (tensors present, options, ids within the vocabulary), the memory plan
//   eval      run_eval: layers streamed one at a time, every run's decode rows (progress on stderr)
//   outputs   eval.csv, layers.csv, summary.csv, budget.svg, layers.svg, leaderboard.svg, tensors.safetensors
//             (--dump-tensors), report.json; the summary table on stdout
// With --task (execute_eval_tasks, docs/eval.md §7) the same stages over generated samples: load
// also reads the filler and generates every sample (mla/tasks.hpp), each sample is one window with
// its own P and N, and outputs are tasks.csv, task_samples.csv, eval.csv, needle.svg (RULER's tasks:
// ruler.svg), report.json.
//
// Shape legend: T tokens, P prompt rows, N steps, V vocab_size, H hidden_size.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <chrono>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "eval_plan.hpp"
#include "inputs.hpp"
#include "progress.hpp"
#include "run_pipeline.hpp"
#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/eval_cost.hpp"
#include "mla/tokenizer.hpp"
#include "mla/memory_plan.hpp"
#include "mla/model.hpp"
#include "mla/model_forward.hpp"
#include "mla/output_set.hpp"
#include "mla/regular_file.hpp"
#include "mla/provenance.hpp"
#include "mla/ranks.hpp"
#include "mla/resume_area.hpp"
#include "mla/window_record.hpp"
#include "mla/policy.hpp"
#include "mla/report.hpp"
#include "mla/safetensors.hpp"
#include "mla/stage_timer.hpp"
#include "mla_build_config.h"
#include "mla/threads.hpp"
#include "src/cpu/fixed_order.hpp"

namespace mla::cli {
namespace {

CommandSpec eval_spec() {
  CommandSpec spec;
  spec.name = "eval";
  spec.synopsis =
      "mla-h2o eval: what KV-cache eviction does to a whole DeepseekV3ForCausalLM's next-token predictions.\n"
      "Teacher forcing: positions 0..P-1 are a causal prefill, positions P..P+N-1 decode with every layer's latent\n"
      "cache managed by the policy at budget K; NLL, KL and top-1 agreement against the full cache, per layer the\n"
      "attention error and mass recall (docs/eval.md).";
  spec.usage =
      "mla-h2o eval --checkpoint DIR (--tokens IDS|FILE | --text FILE|DIR) --prompt-len P --steps N --cache-budget K[,K2,...] "
      "[--windows W] [--compress decode|prefill] [options]\n"
      "       mla-h2o eval --checkpoint DIR --text FILE|DIR --task passkey|niah-multikey|niah-multivalue|variable-tracking|"
      "niah_single_1|...|fwe|ruler "
      "--context L[,L2,...] (--cache-budget K[,K2,...] | --compression-ratio r[,r2,...]) [--depths 10,30,50,70,90] [--samples S] "
      "[--query-placement aware|agnostic] "
      "[--seed N] [options]";
  spec.flags = {
      {"checkpoint", "DIR", "checkpoint directory or .safetensors file of a whole model (required)", ""},
      {"config", "FILE", "config.json to use instead of the one beside the checkpoint", ""},
      {"tokens", "IDS|FILE", "token ids: 3,17,250 or a file of ids", ""},
      {"text", "FILE|DIR", "a text file, or a directory of them (regular files, sorted by name): each file tokenized whole by "
       "the checkpoint's own tokenizer.json or tiktoken.model (no special tokens added), each window BOS + its ids; "
       "without a tokenizer, byte-level models (config.json \"byte_level_vocab\": true): each window BOS, then its bytes", ""},
      {"windows", "W", "W windows of P + N + 1 tokens, spread evenly and without overlap over the input (a window never "
       "straddles two files); every figure is a mean over them, ΔNLL with a 95 % t-interval (docs/eval.md §3.1)", "1"},
      {"prompt-len", "P", "prompt positions (causal prefill with the full cache) (required)", ""},
      {"steps", "N", "decoded positions after the prompt; the input needs P + N + 1 tokens (required)", ""},
      {"cache-budget", "K[,K2,...]", "per-layer cache budgets, strictly increasing (this or --compression-ratio is required)", ""},
      {"compression-ratio", "r[,r2,...]",
       "budgets as kvpress gives them: K = round((1 - r) P) for each r in [0, 1), instead of --cache-budget (--task: at each sample's own P)", ""},
      {"compress", "decode|prefill",
       "decode: the policy evicts down to K after every decode step; prefill: kvpress's protocol, each layer's prompt "
       "cache is cut to K once and every decoded position joins it (docs/eval.md §2.1)", "decode"},
      {"policy", "a,b:key=v,...",
       "as decode: presets with each paper's settings (full, h2o, h2o-normalized, tova, streaming, snapkv, snapkv-maxpool, "
       "pyramidkv, knorm, expected-attention, scissorhands, value-aware, keydiff, leverage, cur, lagkv, chunkkv, criticalkv, adakv, "
       "random, kvzip, oracle) or all; name:key=value changes a "
       "setting; full is always computed",
       "all"},
      {"sinks", "N", "first N positions never evicted, for every policy that has sinks (overrides the presets)", ""},
      {"recent", "N", "the N newest positions never evicted, for every policy that has a recent window (overrides the presets)", ""},
      {"policy-seed", "N", "seed of the random policy", "0"},
      {"precision", "bf16|fp32", "bf16 = the model's own numerics (transformers' bf16 run, docs/math.md §7, §15.3)", "bf16"},
      {"latent-norm-eps", "hf|config|VALUE",
       "eps of q_a_layernorm/kv_a_layernorm: hf = 1e-6 (transformers), config = rms_norm_eps (vLLM/SGLang)", "hf"},
      {"threads", "N", "threads (0 = all cores)", "0"},
      {"out", "DIR", "output directory (created)", "./mla-h2o-eval"},
      {"dump-tensors", "", "write tensors.safetensors: the full cache's logits [P+N, V] and hidden_states.L [P+N, H]", ""},
      {"task", "NAME",
       "a retrieval task: this project's passkey, niah-multikey, niah-multivalue or variable-tracking, or RULER's "
       "niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe, fwe (ruler: all 11, scored by "
       "string_match_all with RULER's average); samples generated from "
       "--text's filler and --seed in the checkpoint's tokenizer's ids (one id per byte on a byte-level model), each scored "
       "by exact match of its answer (docs/eval.md §7). "
       "Replaces --prompt-len and --steps",
       ""},
      {"context", "L[,L2,...]", "--task: tokens of each sample after the BOS (filler, needles, question, answer); bytes on a "
       "byte-level model", ""},
      {"depths", "d1,d2,...", "--task: needle depths in percent of the filler, each in [0, 100]", "10,30,50,70,90"},
      {"samples", "S", "--task: samples per (context, depth)", "5"},
      {"query-placement", "aware|agnostic",
       "--task: aware = the question is in the prompt the policy compresses (kvpress's query-aware); agnostic = it "
       "comes after, among the decoded positions",
       "agnostic"},
      {"seed", "N", "--task: seed of the samples' filler offsets, keys and names", "0"},
      {"resume", "",
       "continue the unfinished eval whose staging area --out holds (--out/.mla-h2o-resume: every finished window, kept "
       "as the run goes): the same settings but --threads and --quiet, the finished windows read back, the outputs "
       "byte-identical to an uninterrupted run (docs/scale-out.md §2)",
       ""},
      {"quiet", "", "no progress lines on stderr (shown after MLA_PROGRESS_AFTER seconds, default 1)", ""},
      {"dry-run", "", "print the plan (memory, FLOPs, estimated time, outputs) and exit 0 without computing or writing anything", ""},
      max_hours_flag(),
  };
  return spec;
}


// "a,b,..." -> each item as written with its value; an empty item, or one that is not a finite
// number, is one error line: "--FLAG: 'item' is not a number (give EXPECTED)".
std::vector<std::pair<std::string, double>> parse_numbers(const std::string& text, const std::string& flag,
                                                          const std::string& expected) {
  std::vector<std::pair<std::string, double>> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const double v = item.empty() ? 0.0 : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v))
      fail(ErrorKind::InvalidArgument, "--" + flag + ": '" + item + "' is not a number (give " + expected + ")");
    out.emplace_back(item, v);
    at = comma + 1;
  }
  return out;
}

// --compression-ratio r[,r2,...]: each r a number in [0, 1).
std::vector<double> parse_ratios(const std::string& text) {
  std::vector<double> out;
  for (const auto& [item, r] : parse_numbers(text, "compression-ratio", "r[,r2,...], each in [0, 1)")) {
    if (!(r >= 0 && r < 1))
      fail(ErrorKind::InvalidArgument, "--compression-ratio " + item + " is outside [0, 1): it is the share of the prompt "
                                       "evicted (kvpress's compression_ratio)");
    out.push_back(r);
  }
  return out;
}

// K = round((1 - r) P) for each ratio, ascending (ratios reordered to match); a ratio leaving no
// token, or two ratios giving one K, is one error line naming `where` P comes from.
std::vector<int64_t> ratio_budgets(std::vector<double>& ratios, int64_t P, const std::string& where) {
  std::vector<std::pair<int64_t, double>> kr;
  for (double r : ratios) {
    const int64_t K = ratio_budget(r, P);
    if (K < 1)
      fail(ErrorKind::InvalidArgument, "--compression-ratio " + format_double(r) + " leaves K = round((1 - r) P) = 0 of " + where +
                                           " tokens");
    kr.emplace_back(K, r);
  }
  std::sort(kr.begin(), kr.end());
  std::vector<int64_t> budgets;
  ratios.clear();
  for (size_t i = 0; i < kr.size(); ++i) {
    if (i > 0 && kr[i].first == kr[i - 1].first)
      fail(ErrorKind::InvalidArgument, "--compression-ratio " + format_double(kr[i - 1].second) + " and " +
                                           format_double(kr[i].second) + " both give K = " + std::to_string(kr[i].first) +
                                           " at " + where);
    budgets.push_back(kr[i].first);
    ratios.push_back(kr[i].second);
  }
  return budgets;
}

// --depths d1,d2,...: percents in [0, 100], distinct; returned ascending.
std::vector<double> parse_depths(const std::string& text) {
  std::vector<double> out;
  for (const auto& [item, d] : parse_numbers(text, "depths", "percents d1,d2,..., each in [0, 100]")) {
    if (!(d >= 0 && d <= 100))
      fail(ErrorKind::InvalidArgument, "--depths " + item + " is outside [0, 100]: a depth is the percent of the filler before the needle");
    if (std::find(out.begin(), out.end(), d) != out.end()) fail(ErrorKind::InvalidArgument, "--depths gives " + item + " twice");
    out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The --task flags (docs/eval.md §7); every eval flag that a task's layout replaces is refused.
void read_task_plan(const Args& a, EvalPlan& plan) {
  plan.task_mode = true;
  plan.task.kinds = parse_tasks(a.str("task"));
  plan.task.kind = plan.task.kinds.front();
  const std::string task = "--task " + a.str("task");
  for (const char* flag : {"prompt-len", "steps", "windows"})
    if (a.has(flag))
      fail(ErrorKind::InvalidArgument, task + " sets the prompt and the decoded positions from each sample's layout: leave --" +
                                           flag + " out (docs/eval.md §7)");
  if (a.has("tokens"))
    fail(ErrorKind::InvalidArgument, task + " inserts its needles into a filler text: give --text FILE|DIR, not --tokens");
  if (!a.has("text")) fail(ErrorKind::InvalidArgument, task + " needs --text FILE|DIR, the filler its needles are inserted into");
  if (a.has("cache-budget") && a.has("compression-ratio"))
    fail(ErrorKind::InvalidArgument, "--cache-budget and --compression-ratio are two ways to give the budgets: give one");
  if (!a.has("cache-budget") && !a.has("compression-ratio"))
    fail(ErrorKind::InvalidArgument, "--cache-budget K or --compression-ratio r is required (see mla-h2o eval --help)");
  if (!a.has("context")) fail(ErrorKind::InvalidArgument, task + " needs --context L[,L2,...], the bytes of each sample");
  plan.task.contexts = a.int_list("context", {});
  for (int64_t L : plan.task.contexts)
    if (L < 1 || L > (int64_t{1} << 30)) fail(ErrorKind::InvalidArgument, "--context " + std::to_string(L) + " is outside [1, 2^30] bytes");
  std::sort(plan.task.contexts.begin(), plan.task.contexts.end());
  if (std::adjacent_find(plan.task.contexts.begin(), plan.task.contexts.end()) != plan.task.contexts.end())
    fail(ErrorKind::InvalidArgument, "--context gives a length twice");
  if (is_ruler_task(plan.task.kind) && a.has("depths"))
    fail(ErrorKind::InvalidArgument, task + " places its needles as RULER does (random depths, random lines): leave --depths out "
                                            "(docs/eval.md §7.7)");
  plan.task.depths = is_ruler_task(plan.task.kind) ? std::vector<double>{0} : parse_depths(a.str("depths", "10,30,50,70,90"));
  plan.task.samples = a.integer("samples", 5, 1, int64_t{1} << 20);
  plan.task.placement = a.choice("query-placement", {"aware", "agnostic"}, "agnostic") == "aware" ? QueryPlacement::Aware
                                                                                                  : QueryPlacement::Agnostic;
  plan.task.seed = static_cast<uint64_t>(a.integer("seed", 0, 0));
  plan.text = a.str("text");
}

// What a --resume must repeat (mla/resume_area.hpp): every flag of --help but those that change
// no figure (--threads: the sums are fixed-order; --quiet; --max-hours, a limit), the resume itself
// and where it goes; each as given, else its default, else "(not given)".
std::vector<ResumeSetting> resume_settings(const Args& a) {
  std::vector<ResumeSetting> out;
  for (const FlagSpec& f : eval_spec().flags) {
    if (f.name == "threads" || f.name == "quiet" || f.name == "resume" || f.name == "out" || f.name == "dry-run" ||
        f.name == "max-hours")
      continue;
    std::string v = f.value_name.empty() ? (a.has(f.name) ? "yes" : "no")
                                         : a.has(f.name) ? a.str(f.name) : f.default_value.empty() ? "(not given)" : f.default_value;
    out.push_back(ResumeSetting{"--" + f.name, std::move(v)});
  }
  return out;
}

EvalPlan read_eval_plan(const Args& a) {
  EvalPlan plan;
  plan.checkpoint = a.str("checkpoint");
  const auto required = [&](const char* flag, const char* what) {
    if (!a.has(flag)) fail(ErrorKind::InvalidArgument, std::string("--") + flag + " " + what + " is required (see mla-h2o eval --help)");
  };
  required("checkpoint", "DIR");
  if (a.has("task")) {
    read_task_plan(a, plan);
  } else {
    for (const char* flag : {"context", "depths", "samples", "query-placement", "seed"})
      if (a.has(flag))
        fail(ErrorKind::InvalidArgument, std::string("--") + flag + " is a flag of the retrieval tasks: give --task NAME too "
                                                                  "(docs/eval.md §7)");
    required("prompt-len", "P");
    required("steps", "N");
    if (a.has("cache-budget") && a.has("compression-ratio"))
      fail(ErrorKind::InvalidArgument, "--cache-budget and --compression-ratio are two ways to give the budgets: give one");
    if (!a.has("compression-ratio")) required("cache-budget", "K");
    if (a.has("tokens") == a.has("text"))
      fail(ErrorKind::InvalidArgument, a.has("tokens") ? "--tokens and --text are two input sources: give one"
                                                       : "no input: give --tokens IDS|FILE or --text FILE");
    plan.tokens = a.str("tokens");
    plan.text = a.str("text");
    plan.windows = a.integer("windows", 1, 1, int64_t{1} << 20);
    plan.eval.prompt_len = a.integer("prompt-len", 0, 1, int64_t{1} << 40);
    plan.eval.steps = a.integer("steps", 0, 1, int64_t{1} << 40);
  }
  plan.config_path = a.str("config");
  plan.eval.compress = a.choice("compress", {"decode", "prefill"}, "decode") == "prefill" ? Compression::Prefill
                                                                                         : Compression::Decode;
  if (a.has("compression-ratio") && plan.task_mode) {
    plan.ratios = parse_ratios(a.str("compression-ratio"));  // each sample's K from its own P (execute_eval_tasks)
    std::sort(plan.ratios.rbegin(), plan.ratios.rend());     // descending: K ascending at any P
    if (std::adjacent_find(plan.ratios.begin(), plan.ratios.end()) != plan.ratios.end())
      fail(ErrorKind::InvalidArgument, "--compression-ratio gives a ratio twice");
    plan.task.ratios = plan.ratios;
  } else if (a.has("compression-ratio")) {
    plan.ratios = parse_ratios(a.str("compression-ratio"));
    plan.eval.budgets = ratio_budgets(plan.ratios, plan.eval.prompt_len, "--prompt-len " + std::to_string(plan.eval.prompt_len));
  } else {
    plan.eval.budgets = a.int_list("cache-budget", {});
  }
  plan.eval.policies = read_policies(a);
  plan.eval.precision = a.choice("precision", {"bf16", "fp32"}, "bf16") == "bf16" ? Precision::BF16 : Precision::FP32;
  plan.eval.threads = static_cast<int>(a.integer("threads", 0, 0, 4096));
  plan.latent_eps_arg = a.str("latent-norm-eps", "hf");
  plan.out_dir = a.str("out", plan.out_dir);
  plan.dump_tensors = a.has("dump-tensors");
  plan.quiet = a.has("quiet");
  plan.dry_run = a.has("dry-run");
  plan.max_hours = read_max_hours(a);
  plan.resume = a.has("resume");
  plan.settings = resume_settings(a);
  return plan;
}

// What the figures do not mean.
std::vector<std::string> eval_caveats(const std::string& synthetic) {
  std::vector<std::string> c;
  if (!synthetic.empty())
    c.push_back("synthetic weights (" + synthetic + "): random weights, not a trained model. Its next-token "
                "distributions are noise and its attention is not what a trained model's is, so what eviction does "
                "to them says nothing about a real model; run eval on a trained checkpoint (models/tiny-mla)");
  return c;
}


// One window's ids and where they came from.
struct WindowInput {
  std::string source;  // the file, or "--tokens"
  int64_t offset = 0;  // first byte (the BOS not counted) or id in the source
  std::vector<int64_t> tokens;
  bool tokenized = false;  // --text through the checkpoint's tokenizer: offset counts its ids
};

// The files of --text: the file itself (its first max_bytes_of_one_file bytes when that is not 0),
// or a directory's regular files sorted by name (subdirectories are not read).
std::vector<FillerSource> read_text_sources(const std::string& path, int64_t max_bytes_of_one_file) {
  std::vector<FillerSource> sources;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
      if (std::filesystem::is_regular_file(e.path(), ec)) names.push_back(e.path().string());
    if (ec) fail(ErrorKind::Io, "--text " + path + ": cannot list the directory (" + ec.message() + ")");
    std::sort(names.begin(), names.end());
    if (names.empty()) fail(ErrorKind::InvalidArgument, "--text " + path + " is a directory without regular files");
    for (const std::string& f : names) sources.push_back(FillerSource{f, read_bytes(f, "--text")});
  } else {
    sources.push_back(FillerSource{path, read_bytes(path, "--text", max_bytes_of_one_file)});
  }
  return sources;
}

// The windows of --windows W (docs/eval.md §1). The input is a list of sources: the --tokens ids,
// the --text file, or the regular files of the --text directory sorted by name. A window takes
// w units of a source (ids; or bytes: P + N + 1 tokens less the BOS), so source f holds
// floor(len_f / w) consecutive non-overlapping slots, S in all, and window i is slot
// floor(i S / W): spread evenly, never overlapping, never straddling two files. One window of one
// source is its beginning (a source too short for it reaches check_eval_options, which names it).
// The tokenizer of the checkpoint's directory (tokenizer.json or tiktoken.model, docs/tokenizer.md),
// bounded by the model's vocab_size; null when the directory holds none.
std::unique_ptr<Tokenizer> checkpoint_tokenizer(const EvalPlan& plan, const ModelConfig& cfg) {
  std::error_code ec;
  const std::filesystem::path ck(plan.checkpoint);
  const std::string dir = std::filesystem::is_directory(ck, ec) ? ck.string() : ck.parent_path().string();
  if (find_tokenizer_file(dir.empty() ? "." : dir).empty()) return nullptr;
  TokenizerOptions opt;
  opt.max_vocab_size = cfg.attention.vocab_size;
  return load_tokenizer(dir.empty() ? "." : dir, opt);
}

// kvzip's repeat text (mla/policy.hpp kReconstructionFirst, ...) in the model's ids: the
// checkpoint's tokenizer (each text encoded alone, no special tokens, as kvpress), else the bytes on
// a byte-level model; else none (the repeat is the context's tokens alone).
ReconstructionText reconstruction_text(const EvalPlan& plan, const ModelConfig& cfg) {
  ReconstructionText text;
  const std::unique_ptr<Tokenizer> tok = checkpoint_tokenizer(plan, cfg);
  if (!tok && !cfg.byte_level_vocab) return text;
  const auto ids = [&](const char* s) {
    if (!tok) return byte_level_token_ids(cfg, s, "kvzip's repeat prompt");
    const std::vector<uint32_t> u = tok->encode(s);
    return std::vector<int64_t>(u.begin(), u.end());
  };
  text.first = ids(kReconstructionFirst);
  text.later = ids(kReconstructionLater);
  text.suffix = ids(kReconstructionSuffix);
  return text;
}

std::vector<WindowInput> cut_windows(const EvalPlan& plan, const ModelConfig& cfg) {
  const int64_t P = plan.eval.prompt_len, N = plan.eval.steps, W = plan.windows;
  const bool text = !plan.text.empty();
  // --text on a checkpoint with its own tokenizer: each file tokenized whole (no special tokens
  // added), then cut into windows of ids like --tokens, each window BOS + its ids
  const std::unique_ptr<Tokenizer> tok = text ? checkpoint_tokenizer(plan, cfg) : nullptr;
  const bool bos = text && cfg.bos_token_id >= 0;
  const int64_t need = P + N + 1, unit = need - (bos ? 1 : 0);  // units a window takes from its source
  struct Source {
    std::string name, bytes;
    std::vector<int64_t> ids;
    int64_t size() const { return static_cast<int64_t>(bytes.empty() ? ids.size() : bytes.size()); }
  };
  std::vector<Source> sources;
  if (tok) {
    for (FillerSource& f : read_text_sources(plan.text, 0)) {
      std::vector<int64_t> ids;
      try {
        for (uint32_t id : tok->encode(f.bytes)) ids.push_back(id);
      } catch (const Error& e) {
        throw Error(e.kind(), "--text " + f.name + ": " + e.what());
      }
      sources.push_back(Source{std::move(f.name), "", std::move(ids)});
    }
  } else if (text) {
    // one window of one file: only as far as it reaches (the file may be large)
    for (FillerSource& f : read_text_sources(plan.text, W == 1 ? unit : 0))
      sources.push_back(Source{std::move(f.name), std::move(f.bytes), {}});
  } else {
    sources.push_back(Source{"--tokens", "", parse_token_ids(plan.tokens)});
  }
  if (text && !tok && !cfg.byte_level_vocab)
    fail(ErrorKind::InvalidArgument, "--text " + plan.text + ": the checkpoint's directory holds no tokenizer.json or "
                                     "tiktoken.model and the model is not byte-level (config.json has no "
                                     "\"byte_level_vocab\": true), so the text cannot be tokenized; pass ids with --tokens");
  const auto window_of = [&](const Source& src, int64_t offset, int64_t len) {
    WindowInput in{src.name, offset, {}};
    if (tok) {
      in.tokenized = true;
      if (bos) in.tokens.push_back(cfg.bos_token_id);
      in.tokens.insert(in.tokens.end(), src.ids.begin() + offset, src.ids.begin() + offset + len);
    } else if (text) {
      in.tokens = byte_level_token_ids(cfg, std::string_view(src.bytes).substr(static_cast<size_t>(offset), static_cast<size_t>(len)),
                                       "--text " + src.name);
    } else {
      in.tokens.assign(src.ids.begin() + offset, src.ids.begin() + offset + len);
    }
    return in;
  };
  int64_t slots = 0;
  for (const Source& src : sources) slots += src.size() / unit;
  if (W == 1 && sources.size() == 1 && slots == 0) return {window_of(sources[0], 0, sources[0].size())};
  if (slots < W) {
    int64_t units = 0;
    for (const Source& src : sources) units += src.size();
    fail(ErrorKind::InvalidArgument,
         "--windows " + std::to_string(W) + " needs " + std::to_string(W) + " windows of " + std::to_string(unit) +
             (text && !tok ? " bytes" : " ids") + " (P + N + 1 tokens" + (bos ? ", the BOS added" : "") + ") without overlap, but " +
             (text ? "--text " + plan.text : std::string("--tokens")) + " holds " + std::to_string(slots) + " (" +
             std::to_string(units) + (text && !tok ? " bytes" : " ids") +
             (sources.size() > 1 ? " in " + std::to_string(sources.size()) + " files" : "") +
             "); fewer windows, or a shorter --prompt-len or --steps, would fit");
  }
  std::vector<WindowInput> out;
  for (int64_t i = 0; i < W; ++i) {
    int64_t slot = i * slots / W;  // no overflow: W <= 2^20 and slots <= 2^30 bytes per file
    for (const Source& src : sources) {
      const int64_t here = src.size() / unit;
      if (slot < here) {
        out.push_back(window_of(src, slot * unit, unit));
        break;
      }
      slot -= here;
    }
  }
  return out;
}

// The input line of report.json and stdout.
std::string windows_description(const EvalPlan& plan, const ModelConfig& cfg, const std::vector<WindowInput>& in) {
  const bool text = !plan.text.empty();
  const int64_t len = static_cast<int64_t>(in.front().tokens.size());
  const std::string unit = in.front().tokenized ? " ids of the checkpoint's tokenizer" : " bytes";
  std::string what = text ? (cfg.bos_token_id >= 0 ? "BOS + " + std::to_string(len - 1) + unit : std::to_string(len) + unit + ", no BOS")
                          : std::to_string(len) + " ids";
  if (in.size() == 1) return (text ? "--text " + plan.text : std::string("--tokens")) + " (" + what + ")";
  return (text ? "--text " + plan.text : std::string("--tokens")) + ": " + std::to_string(in.size()) + " windows of " + what;
}

}  // namespace

std::vector<std::string> eval_inputs(const EvalPlan& plan) {
  return {plan.checkpoint, plan.config_path, plan.tokens, plan.text};
}

namespace {

// What every eval run loads first: the checkpoint, its config and what the figures do not mean.
struct LoadedModel {
  Checkpoint ckpt;
  ModelConfig cfg;
  std::string synthetic, tag;  // Checkpoint::synthetic_origin(); the plot titles' prefix
  std::vector<std::string> caveats;
};
LoadedModel load_model(const EvalPlan& plan, StageSeconds& stages) {
  Checkpoint ckpt = timed(stages, "open checkpoint", [&] { return Checkpoint::open(plan.checkpoint, plan.config_path); });
  ModelConfig cfg = load_model_config(ckpt.config_path());
  std::string synthetic = ckpt.synthetic_origin();
  std::vector<std::string> caveats = eval_caveats(synthetic);
  std::string tag = synthetic.empty() ? "" : "[synthetic weights] ";
  check_model_tensors(ckpt, cfg, "--checkpoint " + plan.checkpoint);
  return LoadedModel{std::move(ckpt), std::move(cfg), std::move(synthetic), std::move(tag), std::move(caveats)};
}

// What eval keeps of all its windows (mla/memory_plan.hpp eval_kept_memory), named for the
// refusal: `asked` ("eval of 12 windows", "eval --task passkey of 5 samples ...") and the flag that
// sets how many there are, `per` windows for each unit of it (--samples: contexts x depths).
struct KeptWindows {
  EvalKeptRequest request;
  std::string asked;
  std::string flag;
  int64_t per = 1;
};

// kept's request for the windows of `opt` (the largest), `windows` of them.
KeptWindows kept_windows(const ModelConfig& cfg, const EvalOptions& opt, int64_t windows, int64_t text_bytes) {
  KeptWindows k;
  EvalKeptRequest& r = k.request;
  r.windows = windows;
  r.tokens = opt.prompt_len + opt.steps + 1;
  r.text_bytes = text_bytes;
  r.steps = opt.steps;
  r.layers = cfg.attention.num_hidden_layers;
  r.budgets = static_cast<int64_t>(opt.budgets.size());
  r.policies = static_cast<int64_t>(opt.policies.size());
  const int64_t d_r = cfg.attention.qk_rope_head_dim;
  if (feature_needs(opt.policies).expected_attention) r.rotation = d_r * d_r;
  k.asked = "eval of " + std::to_string(windows) + (windows == 1 ? " window" : " windows");
  k.flag = "--windows";
  return k;
}

// The memory plan of every run (full, each policy x budget) of the window with the most decoded
// positions (mla/memory_plan.hpp), then how many windows run at once beside what is kept of all
// of them; one that cannot fit is one error line naming what would (memory_refusal).
ModelWindowsPlan check_eval_memory(const ModelConfig& cfg, const EvalOptions& opt, bool dump, const KeptWindows& kept) {
  const MemoryBudget budget = host_memory_budget();
  const MemoryPlan mp = plan_model_memory(cfg, eval_memory_request(opt, dump), budget);
  if (!mp.fits) fail(ErrorKind::Unsupported, mp.refusal);
  const int64_t windows = kept.request.windows;
  const auto plan_of = [&](int64_t w, int threads) {
    EvalKeptRequest r = kept.request;
    r.windows = w;
    return plan_model_windows(mp.estimate, threads, w, budget, eval_kept_memory(r));
  };
  const ModelWindowsPlan wp = plan_of(windows, resolve_threads(opt.threads));
  if (memory_fits(wp.memory, budget)) return wp;
  const int64_t most = largest_fitting(windows / kept.per + 1, [&](int64_t v) {
    return memory_fits(plan_of(v * kept.per, 1).memory, budget);
  });
  std::vector<std::string> would_fit;
  if (most >= 1) would_fit.push_back(kept.flag + " " + std::to_string(most) + " or fewer");
  fail(ErrorKind::Unsupported, memory_refusal(kept.asked, wp.memory, budget, would_fit));
}

// One window to evaluate: its ids, where they came from, and its options (P and N may differ
// between windows: the samples of --task).
struct WindowJob {
  WindowInput input;
  EvalOptions opt;
};

// The plan eval prints before any work (stdout): every job's FLOPs counted from the config and
// the time they take, each part at a rate measured now on the model's widths (mla/eval_cost.hpp).
// A plan over --max-hours is refused right after it is printed.
void print_cost_plan(const ModelConfig& cfg, const std::vector<WindowJob>& jobs, int64_t workers, double max_hours) {
  EvalCost total;
  for (const WindowJob& j : jobs) total += eval_cost(cfg, j.opt);
  const int each = std::max(1, resolve_threads(jobs.front().opt.threads) / static_cast<int>(workers));
  const EvalRates rates = measure_eval_rates(cfg, jobs.front().opt, each);
  std::string windows;
  if (jobs.size() > 1) windows = ", " + std::to_string(jobs.size()) + " windows";
  if (workers > 1) windows += ", " + std::to_string(workers) + " at a time";
  const EvalTime time = eval_time(total, rates, workers);
  std::printf("mla-h2o eval: plan: %s%s\n", eval_cost_line(total, time, rates).c_str(), windows.c_str());
  std::fflush(stdout);
  check_max_hours(time.total(), "the plan above", max_hours);
}

std::vector<int64_t> all_windows(int64_t W) {
  std::vector<int64_t> all(static_cast<size_t>(W));
  for (int64_t w = 0; w < W; ++w) all[static_cast<size_t>(w)] = w;
  return all;
}

// --resume: the staging area's finished windows into `windows`, each checked against this run (its
// settings digest, its place, the ids it was computed from); returns the windows still to compute.
std::vector<int64_t> read_back_windows(const ResumeArea& area, const std::vector<WindowJob>& jobs,
                                       std::vector<EvalWindow>& windows) {
  const uint64_t W = jobs.size();
  std::vector<bool> done(W, false);
  for (const auto& [index, bytes] : area.found()) {
    const std::string what = "--resume: " + area.record_path(index);
    const std::string redo = "; remove that file to compute its window again";
    if (index >= W)
      fail(ErrorKind::InvalidValue, what + " is window " + std::to_string(index) + ", past this run's " + std::to_string(W) +
                                        " windows" + redo);
    WindowRecordHeader h;
    EvalWindow win;
    try {
      win = decode_window_record(bytes, jobs[index].opt, what, h);
    } catch (const Error& e) {
      throw Error(e.kind(), e.what() + redo);
    }
    if (h.settings_digest != area.settings_digest())
      fail(ErrorKind::InvalidValue, what + " was computed under other settings than its staging area's" + redo);
    if (h.index != index) fail(ErrorKind::InvalidValue, what + " holds window " + std::to_string(h.index) + redo);
    if (h.input_digest != token_ids_digest(jobs[index].input.tokens))
      fail(ErrorKind::InvalidValue, what + " was computed from other token ids than this run's window " + std::to_string(index) +
                                        " (the input changed)" + redo);
    windows[index] = std::move(win);
    done[index] = true;
  }
  std::vector<int64_t> todo;
  for (uint64_t w = 0; w < W; ++w)
    if (!done[w]) todo.push_back(static_cast<int64_t>(w));
  return todo;
}

// ---- the windows over MPI ranks (docs/scale-out.md §1) ------------------------------------
// todo[t] is computed on rank t % R. Rank 0 holds --out and its staging area: it checks at start
// that every rank agrees on the settings and the input (a digest of both), sends each the windows
// left to compute and the settings digest its records carry, then gathers every record, storing
// each as it comes (so a failed run keeps them for --resume), and writes the outputs.

// What this rank agrees on: the settings text (with each model file's sha256) and every window's ids.
std::string agreement_digest(const EvalPlan& plan, const std::vector<FileDigest>& model_files,
                             const std::vector<WindowJob>& jobs) {
  std::vector<ResumeSetting> settings = plan.settings;
  for (const FileDigest& d : model_files) settings.push_back(ResumeSetting{"model-file " + d.path, d.sha256});
  std::string text = resume_settings_text(settings);
  for (const WindowJob& j : jobs) text += std::to_string(token_ids_digest(j.input.tokens)) + "\n";
  return sha256_hex(text);
}

// "rank 3" or "ranks 3-7": the ranks past the T windows to compute.
std::string idle_ranks(int64_t T, int R) {
  return R - T > 1 ? "ranks " + std::to_string(T) + "-" + std::to_string(R - 1) : "rank " + std::to_string(T);
}

// Rank 0: every other rank's digest checked against its own, then each sent the windows to
// compute (`todo`) and `settings_digest`. The others: theirs sent, those received.
void agree_on_windows(Ranks& ranks, const std::string& digest, std::vector<int64_t>& todo, std::string& settings_digest) {
  if (ranks.rank() == 0) {
    for (int got = 1; got < ranks.size(); ++got) {
      const Ranks::Message m = ranks.receive();
      if (m.tag == Ranks::Failure) fail(ErrorKind::InvalidArgument, "rank " + std::to_string(m.from) + ": " + m.bytes);
      if (m.bytes != digest)
        fail(ErrorKind::InvalidArgument, "rank " + std::to_string(m.from) + " disagrees with rank 0 on the settings or the "
                                         "input (the digests of its flags, model files and windows differ): every rank must "
                                         "read the same files with the same flags");
    }
    std::string start = settings_digest + "\n";
    for (int64_t w : todo) start += std::to_string(w) + " ";
    for (int r = 1; r < ranks.size(); ++r) ranks.send(r, Ranks::Start, start);
    const int64_t T = static_cast<int64_t>(todo.size());
    if (ranks.size() > T)
      std::fprintf(stderr, "mla-h2o eval: warning: %s of %d %s no window to compute (%lld window%s left to compute "
                           "over %d ranks)\n", idle_ranks(T, ranks.size()).c_str(), ranks.size(),
                   ranks.size() - T > 1 ? "have" : "has", static_cast<long long>(T), T == 1 ? "" : "s", ranks.size());
    return;
  }
  ranks.send(0, Ranks::Hello, digest);
  const Ranks::Message m = ranks.receive(0);
  const size_t nl = m.bytes.find('\n');
  settings_digest = m.bytes.substr(0, nl);
  todo.clear();
  for (size_t at = nl + 1; at < m.bytes.size();) {
    const size_t sp = m.bytes.find(' ', at);
    todo.push_back(std::stoll(m.bytes.substr(at, sp - at)));
    at = sp + 1;
  }
}

// Rank 0's gatherer: the records of every window computed elsewhere (`expected` of them), each
// checked, kept in `windows` and stored in the staging area; the other ranks' progress added to
// the one line. A failure on a rank, or a record that does not decode, is the run's one error
// line; then every rank ends (the finished windows stay for --resume).
class Gatherer {
 public:
  Gatherer(Ranks& ranks, const std::vector<WindowJob>& jobs, std::vector<EvalWindow>& windows, ResumeArea* area,
           const std::string& settings_digest, int64_t expected, std::function<void(int64_t)> add_progress)
      : ranks_(ranks), jobs_(jobs), windows_(windows), area_(area), digest_(settings_digest), expected_(expected),
        add_progress_(std::move(add_progress)) {
    if (expected_ > 0) thread_ = std::thread([this] { gather(); });
  }
  ~Gatherer() {
    if (thread_.joinable()) thread_.detach();  // an error on this rank: main() ends every rank
  }
  void wait() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void gather() {
    std::vector<int64_t> reported(static_cast<size_t>(ranks_.size()), 0);
    std::string where = area_ ? "; " + area_->dir() + " keeps the finished windows for --resume" : "";
    try {
      for (int64_t got = 0; got < expected_;) {
        const Ranks::Message m = ranks_.receive();
        if (m.tag == Ranks::Failure) stop("rank " + std::to_string(m.from) + ": " + m.bytes + where);
        if (m.tag == Ranks::Progress && m.bytes.size() == 8) {
          int64_t now = 0;
          std::memcpy(&now, m.bytes.data(), 8);
          add_progress_(now - reported[static_cast<size_t>(m.from)]);
          reported[static_cast<size_t>(m.from)] = now;
          continue;
        }
        if (m.tag != Ranks::Record) continue;
        const std::string what = "the record of rank " + std::to_string(m.from);
        WindowRecordHeader h;
        // the header first: which window it is, and so which options decode it
        std::string_view bytes(m.bytes);
        const uint64_t index = record_window_index(bytes, what);
        if (index >= jobs_.size()) stop(what + " is of window " + std::to_string(index) + ", past the run's windows");
        EvalWindow win = decode_window_record(bytes, jobs_[index].opt, what, h);
        if (h.settings_digest != digest_ || h.input_digest != token_ids_digest(jobs_[index].input.tokens))
          stop(what + " for window " + std::to_string(index) + " was computed from other settings or ids");
        windows_[index] = std::move(win);
        if (area_) area_->store(index, m.bytes);
        ++got;
      }
    } catch (const std::exception& e) {
      stop(std::string(e.what()) + where);
    }
  }
  [[noreturn]] void stop(const std::string& line) {
    std::fprintf(stderr, "mla-h2o eval: error: %s\n", line.c_str());
    std::fflush(stderr);
    ranks_.abort(1);
    std::_Exit(1);
  }
  Ranks& ranks_;
  const std::vector<WindowJob>& jobs_;
  std::vector<EvalWindow>& windows_;
  ResumeArea* area_;
  std::string digest_;
  int64_t expected_;
  std::function<void(int64_t)> add_progress_;
  std::thread thread_;
};

// Every window under one progress line (rank 0's, for the whole run): the decode steps of every
// layer of every window; with `workers` > 1, this rank's windows side by side (worker 0 reads
// m.ckpt, the others a checkpoint of their own: mappings are released per layer), results in
// window order. expected-attention's future rotation is computed once per prompt length. Each
// finished window goes to the staging area (rank 0) or to rank 0 (the others) before the next.
// On ranks other than 0 the windows computed elsewhere stay empty.
std::vector<EvalWindow> run_windows(const LoadedModel& m, const EvalPlan& plan, std::vector<WindowJob>& jobs,
                                    int64_t workers, StageSeconds& stages, ResumeArea* area,
                                    const std::vector<FileDigest>& model_files, int64_t& resumed) {
  Ranks& ranks = Ranks::world();
  const bool lead = ranks.rank() == 0;
  ProgressLine progress("eval", plan.quiet || !lead);
  const int64_t L_count = m.cfg.attention.num_hidden_layers, W = static_cast<int64_t>(jobs.size());
  std::vector<EvalWindow> windows(static_cast<size_t>(W));
  // the windows still to compute, in window order (--resume: those its staging area lacks)
  std::vector<int64_t> todo = area ? read_back_windows(*area, jobs, windows) : all_windows(W);
  std::string settings_digest = area ? area->settings_digest() : "";
  if (ranks.several()) agree_on_windows(ranks, agreement_digest(plan, model_files, jobs), todo, settings_digest);
  resumed = W - static_cast<int64_t>(todo.size());
  std::vector<int64_t> mine;  // this rank's share
  for (size_t t = 0; t < todo.size(); ++t)
    if (static_cast<int>(t % static_cast<size_t>(ranks.size())) == ranks.rank()) mine.push_back(todo[t]);
  const int64_t T = static_cast<int64_t>(mine.size());
  workers = std::clamp<int64_t>(workers, 1, std::max<int64_t>(T, 1));
  int64_t total = 0;
  for (int64_t w : todo) total += L_count * jobs[static_cast<size_t>(w)].opt.steps;
  if (const FeatureNeeds needs = feature_needs(jobs.front().opt.policies); needs.expected_attention) {
    std::map<int64_t, std::vector<double>> rotation;  // per prompt length
    timed(stages, "expected-attention future rotation", [&] {
      for (WindowJob& j : jobs) {
        std::vector<double>& r = rotation[j.opt.prompt_len];
        if (r.empty())
          r = mean_rope_rotation(m.cfg.attention, j.opt.prompt_len, needs.expected_future, [&](int64_t done, int64_t all) {
            progress.update("expected-attention: mean RoPE rotation over the future positions", done, all);
          });
        j.opt.future_rotation = r;
      }
      return 0;
    });
  }
  if (feature_needs(jobs.front().opt.policies).reconstruction) {
    const ReconstructionText text = timed(stages, "kvzip: the repeat's text", [&] { return reconstruction_text(plan, m.cfg); });
    for (WindowJob& j : jobs) j.opt.reconstruction_text = text;
  }
  timed(stages, "eval", [&] {
    const int threads = resolve_threads(jobs.front().opt.threads);
    const int each = std::max(1, threads / static_cast<int>(workers));
    std::mutex progress_mutex;
    std::atomic<bool> failed{false};  // a worker's error stops the others at their next window
    int64_t done_all = 0;  // decode steps of every layer done, over the windows (every rank's, on rank 0)
    auto last_sent = std::chrono::steady_clock::now();
    const char* what = W > 1 ? "decode steps (all layers, all windows)" : "decode steps (all layers)";
    const auto add_progress = [&](int64_t steps) {  // under progress_mutex
      done_all += steps;
      if (lead) {
        progress.update(what, done_all, total);
      } else if (const auto now = std::chrono::steady_clock::now(); now - last_sent > std::chrono::milliseconds(500)) {
        last_sent = now;
        std::string bytes(8, '\0');
        std::memcpy(bytes.data(), &done_all, 8);
        ranks.send(0, Ranks::Progress, bytes);
      }
    };
    std::optional<Gatherer> gatherer;
    if (lead && ranks.several())
      gatherer.emplace(ranks, jobs, windows, area, settings_digest, static_cast<int64_t>(todo.size()) - T, [&](int64_t steps) {
        const std::lock_guard<std::mutex> lock(progress_mutex);
        add_progress(steps);
      });
    parallel_for(workers, static_cast<int>(workers), [&](int64_t worker, int) {
      std::optional<Checkpoint> own;
      if (worker > 0) own.emplace(Checkpoint::open(plan.checkpoint, plan.config_path));
      const Checkpoint& ckpt = worker > 0 ? *own : m.ckpt;
      for (int64_t t = worker; t < T && !failed.load(); t += workers) {
        const int64_t w = mine[static_cast<size_t>(t)];
        EvalOptions wopt = jobs[static_cast<size_t>(w)].opt;
        wopt.threads = each;
        wopt.keep_full_states = wopt.keep_full_states && w == 0;  // --dump-tensors: the first window's
        const int64_t N = wopt.steps;
        int64_t reported = 0;  // this window's share of done_all
        if (!plan.quiet) {
          // (layers done) N + steps done in the current layer
          wopt.progress = [&, N, layers_done = int64_t{0}](const char* stage, int64_t done, int64_t) mutable {
            const bool layer_end = std::string(stage) == "layers";
            if (layer_end) layers_done = done;
            const int64_t now = layers_done * N + (layer_end ? 0 : done);
            const std::lock_guard<std::mutex> lock(progress_mutex);
            add_progress(now - reported);
            reported = now;
          };
        }
        const WindowJob& job = jobs[static_cast<size_t>(w)];
        try {
          windows[static_cast<size_t>(w)] =
              EvalWindow{job.input.source, job.input.offset, run_eval(ckpt, m.cfg, job.input.tokens, wopt)};
          // the finished window kept before the next begins: on disk (rank 0), or sent to rank 0
          if (area || !lead) {
            std::string record = encode_window_record(windows[static_cast<size_t>(w)], static_cast<uint64_t>(w),
                                                      token_ids_digest(job.input.tokens), settings_digest);
            if (lead) area->store(static_cast<uint64_t>(w), record);
            else ranks.send(0, Ranks::Record, record);
            if (!lead) note_window_kept();
          }
        } catch (...) {
          failed.store(true);
          throw;
        }
      }
    });
    if (gatherer) gatherer->wait();
    return 0;
  });
  progress.finish();
  return windows;
}

// --dump-tensors: the full cache's logits and hidden states of the first window.
void write_dump(OutputSet& out, const EvalResult& result, const EvalOptions& opt) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<TensorToWrite> tensors;
  payloads.reserve(result.hidden_states.size() + 1);
  const auto add = [&](const TensorF& t) {
    payloads.push_back(encode_f32(t.data));
    tensors.push_back(TensorToWrite{t.name, DType::F32, std::vector<uint64_t>(t.shape.begin(), t.shape.end()), payloads.back()});
  };
  add(result.full_logits);
  for (const TensorF& h : result.hidden_states) add(h);
  write_safetensors(out.add("tensors.safetensors"), tensors,
                    {{"producer", "mla-h2o eval (full cache)"}, {"precision", precision_name(opt.precision)},
                     {"engine", result.engine}, {"prompt_len", std::to_string(opt.prompt_len)},
                     {"steps", std::to_string(opt.steps)}});
}

// report.json's run information, filled as eval ran.
EvalRunInfo run_info(const EvalPlan& plan, const LoadedModel& m, const std::string& input, int64_t tokens,
                     const std::string& eps_mode, const EvalOptions& opt, const MemoryEstimate& mem, bool quiet,
                     StageSeconds& stages, std::vector<FileDigest> model_files) {
  if (model_files.empty())  // (a resumable run hashed them at its start)
    model_files = timed(stages, "sha256 of the model files", [&] { return model_file_digests(m.ckpt, "eval", quiet); });
  EvalRunInfo info;
  info.checkpoint = plan.checkpoint;
  info.synthetic_weights = m.synthetic;
  info.caveats = m.caveats;
  info.input = input;
  info.tokens = tokens;
  info.latent_norm_eps_mode = eps_mode;
  info.threads = resolve_threads(opt.threads);
  info.compression_ratios = plan.ratios;
  info.model_files = model_files;
  info.memory_planned_bytes = mem.host_peak_bytes;
  info.memory_peak_rss_bytes = peak_rss_bytes();
  info.stages = stages;
  return info;
}

// The staging area of eval's finished windows (mla/resume_area.hpp), opened after every check and
// before any window: the settings, the sha256 of each model file among them, every shard of the
// checkpoint's included (hashed here, once, into `model_files`: a shard no window has opened yet
// is still one the run will read). None for demo --model (a part of its set) or a dry run.
std::optional<ResumeArea> open_resume_area(const EvalPlan& plan, const LoadedModel& m, OutputSet* out, StageSeconds& stages,
                                           std::vector<FileDigest>& model_files) {
  if (!plan.keep_windows && !plan.worker_rank) return std::nullopt;
  // (every rank hashes them: the ranks' agreement on the input includes them)
  model_files = timed(stages, "sha256 of the model files", [&] {
    return model_file_digests(m.ckpt, "eval", plan.quiet || plan.worker_rank, /*every_shard=*/true);
  });
  if (plan.worker_rank) return std::nullopt;  // rank 0 holds the staging area
  std::vector<ResumeSetting> settings = plan.settings;
  for (const FileDigest& d : model_files) settings.push_back(ResumeSetting{"model-file " + d.path, d.sha256});
  return std::optional<ResumeArea>(std::in_place, *out, settings, plan.resume);
}

// "resumed K of W windows from D/.mla-h2o-resume" (stdout), when --resume read any back.
void print_resumed(int64_t resumed, size_t windows, const std::optional<ResumeArea>& area) {
  if (area && resumed > 0)
    std::printf("mla-h2o eval: resumed %lld of %zu windows from %s\n", static_cast<long long>(resumed), windows,
                area->dir().c_str());
  std::fflush(stdout);
}

// The eval stage of --windows and --task alike: the staging area opened (rank 0) or the model
// files hashed (the other ranks), the windows computed here, read back (--resume) or gathered
// from the other ranks; `resumed` of them read back.
std::vector<EvalWindow> eval_stage(const LoadedModel& m, const EvalPlan& plan, std::vector<WindowJob>& jobs, int64_t workers,
                                   StageSeconds& stages, OutputSet* out, std::vector<FileDigest>& model_files,
                                   int64_t& resumed) {
  std::optional<ResumeArea> area = open_resume_area(plan, m, out, stages, model_files);
  std::vector<EvalWindow> windows = run_windows(m, plan, jobs, workers, stages, area ? &*area : nullptr, model_files, resumed);
  if (!plan.worker_rank) print_resumed(resumed, windows.size(), area);
  return windows;
}

// ---- --task ------------------------------------------------------------------------------

// The window of one --task sample at --context L: BOS + its ids, and eval's options at the sample's
// own P and N; with --compression-ratio, K = round((1 - r) P) at that P (the same P for every
// sample of a context).
WindowJob task_job(const LoadedModel& m, const TaskSettings& t, const EvalOptions& opt, const TaskSample& x, int64_t L) {
  WindowInput in{x.source, x.filler_offset, {}};
  if (m.cfg.bos_token_id >= 0) in.tokens.push_back(m.cfg.bos_token_id);
  in.tokens.insert(in.tokens.end(), x.ids.begin(), x.ids.end());
  WindowJob job{std::move(in), opt};
  job.opt.prompt_len = x.prompt_len;
  job.opt.steps = x.steps;
  if (!t.ratios.empty()) {
    std::vector<double> r = t.ratios;
    job.opt.budgets = ratio_budgets(r, x.prompt_len, "P = " + std::to_string(x.prompt_len) + " (the prompt of a --context " +
                                                         std::to_string(L) + " sample)");
  }
  return job;
}

// check_eval_options on the first sample of --context L; with ratios the error line also says
// which K each ratio gave at that context's P.
void check_task_job(const LoadedModel& m, const TaskSettings& t, const WindowJob& job, int64_t L) {
  try {
    check_eval_options(job.opt, static_cast<int64_t>(job.input.tokens.size()), m.cfg.attention.num_hidden_layers);
  } catch (const Error& e) {
    if (t.ratios.empty()) throw;
    std::string ks;
    for (size_t b = 0; b < t.ratios.size(); ++b) {
      char r[32];
      std::snprintf(r, sizeof r, "%g", t.ratios[b]);
      ks += (b ? ", " : "") + std::string(r) + " -> " + std::to_string(job.opt.budgets[b]);
    }
    fail(e.kind(), std::string(e.what()) + " (--compression-ratio at --context " + std::to_string(L) +
                       ", P = " + std::to_string(job.opt.prompt_len) + ": " + ks + ")");
  }
}

// Every --task sample, contexts x depths x samples in that order (mla/tasks.hpp), and its window;
// each context's first sample is checked before the next is generated.
void generate_task_jobs(const LoadedModel& m, const TaskSettings& t, const EvalOptions& opt,
                        const std::vector<TaskFiller>& filler, const std::vector<std::string>& words, const Tokenizer& tok,
                        std::vector<TaskSample>& samples, std::vector<WindowJob>& jobs) {
  for (TaskKind kind : task_kinds(t))
  for (int64_t L : t.contexts)
    for (double d : t.depths)
      for (int64_t s = 0; s < t.samples; ++s) {
        const TaskRequest r{kind, L, d, s, t.seed, t.placement, m.cfg.bos_token_id >= 0};
        samples.push_back(make_task_sample(r, filler, tok, words));
        WindowJob job = task_job(m, t, opt, samples.back(), L);
        if (s == 0) check_task_job(m, t, job, L);
        jobs.push_back(std::move(job));
      }
}

// The plan of --task before any sample is generated (fault 6 of issue 46: --samples 1048576 grew
// to 19.5 GB unplanned): each context's first sample checked as generate_task_jobs checks it, then
// the largest context's last sample as the memory plan's window, and every sample of contexts x
// depths x samples kept (its text, ids and results).
ModelWindowsPlan check_task_memory(const LoadedModel& m, const TaskSettings& t, const EvalOptions& opt, bool dump,
                                   const std::vector<TaskFiller>& filler, const std::vector<std::string>& words, const Tokenizer& tok,
                                   const std::string& task) {
  const bool bos = m.cfg.bos_token_id >= 0;
  for (TaskKind kind : task_kinds(t))
    for (int64_t L : t.contexts) {
      const TaskSample first = make_task_sample(TaskRequest{kind, L, t.depths.front(), 0, t.seed, t.placement, bos}, filler, tok, words);
      check_task_job(m, t, task_job(m, t, opt, first, L), L);
    }
  const int64_t L = t.contexts.back();
  const TaskSample last = make_task_sample(
      TaskRequest{task_kinds(t).back(), L, t.depths.back(), t.samples - 1, t.seed, t.placement, bos}, filler, tok, words);
  const WindowJob job = task_job(m, t, opt, last, L);
  const int64_t C = static_cast<int64_t>(t.contexts.size()) * static_cast<int64_t>(task_kinds(t).size()),
                D = static_cast<int64_t>(t.depths.size());
  KeptWindows kept = kept_windows(m.cfg, job.opt, memory_product({C, D, t.samples}), static_cast<int64_t>(last.text.size()));
  kept.request.tokens = static_cast<int64_t>(job.input.tokens.size());
  kept.asked = "eval " + task + " of " + std::to_string(kept.request.windows) + " samples (" + std::to_string(C) +
               " contexts x " + std::to_string(D) + " depths x --samples " + std::to_string(t.samples) + ", each one window)";
  kept.flag = "--samples";
  kept.per = C * D;
  return check_eval_memory(m.cfg, job.opt, dump, kept);
}

// The input line of --task's report.json and stdout.
std::string task_input_description(const EvalPlan& plan, const TaskSettings& t, const std::string& task, size_t samples) {
  const std::string cells = is_ruler_task(t.kind) ? std::to_string(task_kinds(t).size()) + " tasks x " +
                                                         std::to_string(t.contexts.size()) + " contexts"
                                                   : std::to_string(t.contexts.size()) + " contexts x " +
                                                         std::to_string(t.depths.size()) + " depths";
  return task + ", " + std::to_string(samples) + " samples (" + cells + " x " + std::to_string(t.samples) + ") of filler from --text " + plan.text +
         ", --seed " + std::to_string(t.seed) + ", question " + query_placement_name(t.placement) +
         (t.context_unit == "bytes" ? "" : ", contexts in " + t.context_unit + " of the checkpoint's tokenizer");
}

// tasks.csv, task_samples.csv, eval.csv (each window at its own budgets), needle.svg (RULER: ruler.svg) and, with
// --dump-tensors, the first sample's tensors.
void write_task_files(OutputSet& out, const EvalPlan& plan, const TaskSettings& t, const LoadedModel& m, const Tokenizer& tok,
                      const EvalOptions& opt, const std::vector<TaskSample>& samples, const std::vector<WindowJob>& jobs,
                      const std::vector<EvalWindow>& windows, const std::vector<TaskCell>& cells) {
  out.write("tasks.csv", tasks_csv(t, opt.compress, cells));
  out.write("task_samples.csv", task_samples_csv(t, samples, windows, opt.budgets, m.cfg, tok));
  std::vector<std::vector<int64_t>> window_budgets;
  for (const WindowJob& j : jobs) window_budgets.push_back(j.opt.budgets);
  out.write("eval.csv", eval_csv_per_window(windows, window_budgets));
  if (!is_ruler_task(t.kind))
    out.write("needle.svg", needle_svg(t, cells,
                                     m.tag + task_name(t.kind) + ": exact match by context and needle depth (query " +
                                         query_placement_name(t.placement) + ", --compress " + compression_name(opt.compress) +
                                         ", " + precision_name(opt.precision) + ", " + std::to_string(t.samples) +
                                         (t.samples == 1 ? " sample" : " samples") + " per cell)"));
  if (is_ruler_task(t.kind))
    out.write("ruler.svg", ruler_svg(t, opt.compress, cells,
                                     m.tag + (task_kinds(t).size() > 1 ? std::string("RULER average") : std::string(task_name(t.kind))) +
                                         (t.ratios.empty() ? " against the cache budget K" : " against the compression ratio") + " by policy (query " + query_placement_name(t.placement) +
                                         ", --compress " + compression_name(opt.compress) + ", " + precision_name(opt.precision) +
                                         ", " + std::to_string(t.samples) + (t.samples == 1 ? " sample" : " samples") + " per task)"));
  if (plan.dump_tensors) {
    EvalOptions first = opt;
    first.prompt_len = samples.front().prompt_len;
    first.steps = samples.front().steps;
    write_dump(out, windows.front().result, first);
  }
}

// --task's stdout: the settings line, the caveats, the table of exact match.
void print_task_table(const EvalPlan& plan, const TaskSettings& t, const LoadedModel& m, const std::string& input,
                      const EvalOptions& opt, const std::vector<EvalWindow>& windows, const std::vector<TaskCell>& cells) {
  std::printf("mla-h2o eval: %s, %s, --compress %s, %s, %s\n", plan.checkpoint.c_str(), input.c_str(),
              compression_name(opt.compress), precision_name(opt.precision), windows.front().result.engine.c_str());
  for (const std::string& c : m.caveats) std::printf("CAVEAT: %s\n", c.c_str());
  std::fputs(tasks_table(t, cells).c_str(), stdout);
  if (is_ruler_task(t.kind))
    std::printf("string_match_all: the share of each sample's reference strings whose every token is predicted top-1 under "
                "teacher forcing, x 100 (docs/eval.md §7.7)\noutputs: %s\n", plan.out_dir.c_str());
  else
    std::printf("exact match: every answer token predicted top-1 under teacher forcing, which is greedy generation's exact "
                "match (docs/eval.md §7)\noutputs: %s\n", plan.out_dir.c_str());
}

// --dry-run ends here: the plan above was printed, this says the memory and where the outputs
// would go; nothing was computed or written.
int print_dry_run(const EvalPlan& plan, const MemoryEstimate& mem) {
  std::printf("mla-h2o eval: dry run: memory peak ~%s (%s); outputs: the set at %s (not written: dry run)\n",
              format_bytes(mem.host_peak_bytes).c_str(), mem.peak_phase.c_str(), plan.out_dir.c_str());
  return 0;
}

// --task (docs/eval.md §7): load (the samples from --text and --seed, every check), eval (each
// sample one window with its own P and N), outputs (tasks.csv, task_samples.csv, eval.csv,
// needle.svg or ruler.svg, report.json; the table on stdout).
int execute_eval_tasks(const EvalPlan& plan, OutputSet* out_or_dry) {
  StageSeconds stages;
  // ---- load ----
  const LoadedModel m = load_model(plan, stages);
  TaskSettings t = plan.task;
  const std::string task = std::string("--task ") + (task_kinds(t).size() > 1 ? "ruler" : task_name(t.kind));
  // the samples are text in the ids of the checkpoint's tokenizer, or of the bytes on a byte-level model
  std::unique_ptr<Tokenizer> tok = checkpoint_tokenizer(plan, m.cfg);
  if (!tok && !m.cfg.byte_level_vocab)
    fail(ErrorKind::InvalidArgument, task + ": --checkpoint " + plan.checkpoint + "'s directory holds no tokenizer.json or "
                                     "tiktoken.model and the model is not byte-level (config.json has no \"byte_level_vocab\": "
                                     "true), so its samples cannot be tokenized");
  if (!tok) {
    (void)byte_level_token_ids(m.cfg, "", task);  // the vocabulary holds the 256 bytes
    tok = byte_level_tokenizer();
  }
  t.context_unit = context_unit(*tok);
  std::vector<std::string> words;  // RULER's word draws, from the filler's text
  const std::vector<TaskFiller> filler = timed(stages, "read the filler", [&] {
    const std::vector<FillerSource> files = read_text_sources(plan.text, 0);
    if (is_ruler_task(t.kind)) words = ruler_words(files);
    return tokenize_filler(files, *tok, resolve_threads(plan.eval.threads));
  });
  EvalOptions opt = plan.eval;
  std::string eps_mode;
  opt.latent_norm_eps = latent_eps(plan.latent_eps_arg, m.cfg.attention, eps_mode);
  opt.keep_full_states = plan.dump_tensors;
  const ModelWindowsPlan wp = check_task_memory(m, t, opt, plan.dump_tensors, filler, words, *tok, task);
  std::vector<TaskSample> samples;
  std::vector<WindowJob> jobs;
  timed(stages, "generate the samples", [&] {
    generate_task_jobs(m, t, opt, filler, words, *tok, samples, jobs);
    return 0;
  });
  if (!plan.worker_rank) print_cost_plan(m.cfg, jobs, wp.workers, plan.max_hours);  // (rank 0 refuses for every rank)
  if (out_or_dry == nullptr && !plan.worker_rank) return print_dry_run(plan, wp.memory);

  // ---- eval ----
  std::vector<FileDigest> model_files;
  int64_t resumed = 0;
  const std::vector<EvalWindow> windows = eval_stage(m, plan, jobs, wp.workers, stages, out_or_dry, model_files, resumed);
  if (plan.worker_rank) return 0;  // rank 0 writes the outputs
  OutputSet& out = *out_or_dry;

  // ---- outputs ----
  const std::vector<TaskCell> cells = task_cells(t, samples, windows, opt.budgets, m.cfg, *tok);
  const std::string input = task_input_description(plan, t, task, samples.size());
  {
    StageTimer timer(stages, "outputs");
    write_task_files(out, plan, t, m, *tok, opt, samples, jobs, windows, cells);
  }
  EvalRunInfo info = run_info(plan, m, input, static_cast<int64_t>(jobs.front().input.tokens.size()), eps_mode, opt,
                              wp.memory, plan.quiet, stages, model_files);
  info.windows_at_once = wp.workers;
  info.resumed_windows = resumed;
  info.ranks = Ranks::world().size();
  info.files = out.paths_with({"report.json"});
  out.write("report.json", eval_tasks_report_json(info, m.cfg, opt, t, samples, windows, cells));
  out.commit();
  print_task_table(plan, t, m, input, opt, windows, cells);
  return 0;
}

}  // namespace


int execute_eval(const EvalPlan& plan, OutputSet* out_or_dry) {
  if (plan.task_mode) return execute_eval_tasks(plan, out_or_dry);
  StageSeconds stages;
  // ---- load: checkpoint, config, ids, every check ----
  const LoadedModel m = load_model(plan, stages);
  const ModelConfig& cfg = m.cfg;
  const std::vector<WindowInput> inputs = cut_windows(plan, cfg);
  const std::string input_text = windows_description(plan, cfg, inputs);
  for (const WindowInput& in : inputs)
    for (size_t i = 0; i < in.tokens.size(); ++i)
      if (in.tokens[i] >= cfg.attention.vocab_size)
        fail(ErrorKind::InvalidArgument, "token id " + std::to_string(in.tokens[i]) + " (position " + std::to_string(i) +
                                             (inputs.size() > 1 ? " of the window at " + in.source + ":" + std::to_string(in.offset) : "") +
                                             ") is past the vocabulary (vocab_size " +
                                             std::to_string(cfg.attention.vocab_size) + ")");
  const std::vector<int64_t>& tokens = inputs.front().tokens;
  EvalOptions opt = plan.eval;
  std::string eps_mode;
  opt.latent_norm_eps = latent_eps(plan.latent_eps_arg, cfg.attention, eps_mode);
  opt.keep_full_states = plan.dump_tensors;
  check_eval_options(opt, static_cast<int64_t>(tokens.size()), cfg.attention.num_hidden_layers);
  const int64_t P = opt.prompt_len, N = opt.steps;
  const int64_t window_count = static_cast<int64_t>(inputs.size());
  const ModelWindowsPlan wp = check_eval_memory(cfg, opt, plan.dump_tensors, kept_windows(cfg, opt, window_count, 0));
  const MemoryEstimate& mem = wp.memory;

  // ---- eval: the windows, several at once when --threads allows, one progress line for all ----
  std::vector<WindowJob> jobs;
  for (const WindowInput& in : inputs) jobs.push_back(WindowJob{in, opt});
  if (!plan.worker_rank) print_cost_plan(cfg, jobs, wp.workers, plan.max_hours);  // (rank 0 refuses for every rank)
  if (out_or_dry == nullptr && !plan.worker_rank) return print_dry_run(plan, mem);
  std::vector<FileDigest> model_files;
  int64_t resumed = 0;
  const std::vector<EvalWindow> windows = eval_stage(m, plan, jobs, wp.workers, stages, out_or_dry, model_files, resumed);
  if (plan.worker_rank) return 0;  // rank 0 writes the outputs
  OutputSet& out = *out_or_dry;
  const int64_t W = static_cast<int64_t>(windows.size());
  const EvalResult& result = windows.front().result;  // the first window: engine, passkey, --dump-tensors

  // ---- outputs ----
  const std::vector<EvalSummary> summaries = summarize(windows, opt.budgets);
  check_summaries_finite(summaries);  // one line naming a cell that is not a finite number
  {
    StageTimer t(stages, "outputs");
    out.write("eval.csv", eval_csv(windows, opt.budgets));
    out.write("layers.csv", eval_layers_csv(windows, opt.budgets));
    out.write("windows.csv", eval_windows_csv(windows, opt.budgets));
    out.write("summary.csv", eval_summary_csv(summaries));
    out.write("leaderboard.csv", eval_leaderboard_csv(windows, opt.budgets));
    const std::string what = std::string(precision_name(opt.precision)) + ", --compress " + compression_name(opt.compress) +
                             ", P = " + std::to_string(P) + ", N = " +
                             std::to_string(N) + (W > 1 ? ", " + std::to_string(W) + " windows" : "");
    out.write("budget.svg", eval_budget_svg(summaries, m.tag + "ΔNLL against the cache budget (" + what + ")"));
    out.write("layers.svg", eval_layers_svg(windows, opt.budgets, m.tag + "attention mass kept per layer (" + what + ")"));
    out.write("leaderboard.svg", eval_leaderboard_svg(summaries, opt.budgets,
                                                      m.tag + "policies ranked by ΔNLL, 95 % intervals (" + what + ")"));
    if (plan.dump_tensors) write_dump(out, result, opt);
  }
  EvalRunInfo info =
      run_info(plan, m, input_text, static_cast<int64_t>(tokens.size()), eps_mode, opt, mem, plan.quiet, stages, model_files);
  info.windows_at_once = wp.workers;
  info.resumed_windows = resumed;
  info.ranks = Ranks::world().size();
  info.files = out.paths_with({"report.json"});
  out.write("report.json", eval_report_json(info, cfg, opt, windows, summaries));

  out.commit();  // the set replaces --out's contents in one step

  std::printf("mla-h2o eval: %s, %s, P = %lld, N = %lld, --compress %s, %s, %s\n", plan.checkpoint.c_str(),
              input_text.c_str(), static_cast<long long>(P), static_cast<long long>(N), compression_name(opt.compress),
              precision_name(opt.precision), result.engine.c_str());
  for (size_t i = 0; i < plan.ratios.size(); ++i)
    std::printf("compression ratio %g: K = round((1 - %g) x %lld) = %lld\n", plan.ratios[i], plan.ratios[i],
                static_cast<long long>(P), static_cast<long long>(opt.budgets[i]));
  for (const std::string& c : m.caveats) std::printf("CAVEAT: %s\n", c.c_str());
  if (W == 1 && !result.passkey.key.empty()) std::printf("passkey input: key %s\n", result.passkey.key.c_str());
  std::fputs(eval_summary_table(summaries).c_str(), stdout);
  std::printf("outputs: %s\n", plan.out_dir.c_str());
  return 0;
}

// eval prepares the layers one after another into buffers of the same sizes (about 2 GB a layer
// at Kimi width): glibc would hand each freed block back to the kernel (large blocks are mmap'd,
// the heap's top is trimmed) and the next layer would take every page fault again, about 2 µs a
// 4 KiB page on a VM. So the eval process keeps freed memory for reuse: large blocks come from
// the heap and it is never trimmed. The peak is still one layer's (the memory plan's count;
// report.json measures it). docs/eval.md §9 has the figures.
static void keep_freed_memory_for_the_next_layer() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);  // (as size_t: never)
}

// A rank other than 0 of an MPI run: its share of the windows, sent to rank 0, which writes
// everything (docs/scale-out.md); its error goes to rank 0 too, which prints it naming the rank.
int execute_eval_on_a_worker_rank(const EvalPlan& plan) {
  EvalPlan worker = plan;
  worker.worker_rank = true;
  worker.quiet = true;
  return execute_eval(worker, nullptr);
}

int execute_eval(const EvalPlan& plan) {
  // the ranks first (mla/ranks.hpp): a launch as several processes without MPI is refused
  Ranks& ranks = Ranks::world();
  if (ranks.rank() != 0) return plan.dry_run ? 0 : execute_eval_on_a_worker_rank(plan);
  // first: a bad or busy --out fails before any work (mla/output_set.hpp)
  if (plan.dry_run) return execute_eval(plan, nullptr);
  OutputSet out(plan.out_dir, "eval", OutputSet::Lock::FailIfHeld, eval_inputs(plan), /*resume_area=*/true);
  ResumeArea::check_presence(out, plan.resume);  // a staging area without --resume, or --resume without one
  keep_freed_memory_for_the_next_layer();
  EvalPlan resumable = plan;
  resumable.keep_windows = true;  // every finished window into --out's staging area as the run goes
  return execute_eval(resumable, &out);
}


int cmd_eval(const std::vector<std::string>& argv) {
  const auto run = [&] {
    const CommandSpec spec = eval_spec();
    const Args a = Args::parse(spec, argv);
    if (print_help_if_asked(a, spec)) return 0;
    return execute_eval(read_eval_plan(a));
  };
  Ranks& ranks = Ranks::world();  // under mpirun: MPI first (a build without it refuses here)
  if (ranks.rank() == 0) return run();
  try {
    return run();
  } catch (const std::exception& e) {  // any error of a rank but 0 goes to rank 0, which prints it naming the rank
    ranks.send(0, Ranks::Failure, e.what());
    std::this_thread::sleep_for(std::chrono::seconds(60));  // rank 0 prints it, then ends every rank
    throw;
  }
}

}  // namespace mla::cli
