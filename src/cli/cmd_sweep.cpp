// src/cli/cmd_sweep.cpp — `mla-h2o sweep`: one layer's attention + H2O selection (as `run`) on
// every listed layer of a checkpoint, one layer in memory at a time, and a report across layers.
//
// Pipeline:
//   1. output directory      created first, so an unwritable --out fails before any work
//   2. open checkpoint       config.json + index/shard headers
//   3. checks                the layer list (all | 0-3,60), every listed layer's attention tensors
//                            (their shards, dtypes and shapes, from the headers), and with
//                            --input every layer's tensor (NAME.L, else NAME) present with the
//                            same S — all before the first layer runs
//   4. per layer L           run's load and run phases (run_pipeline.hpp): L's attention tensors
//                            (+ input_layernorm for --tokens and --residual), L's input, backend
//                            prepare, forward, H2O; the shards are unmapped after the load and
//                            only L's scores and decision are kept; progress on stderr
//   5. outputs               layers.csv, scores.csv, overlap.csv, heatmap.svg, report.json,
//                            report.txt (also printed); layer-L.safetensors with --dump-tensors
//
// Shape legend: S = tokens, H = hidden_size, n = heads.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "args.hpp"
#include "commands.hpp"
#include "inputs.hpp"
#include "mla/error.hpp"
#include "mla/output_set.hpp"
#include "mla/report.hpp"
#include "mla/rope.hpp"
#include "mla/safetensors.hpp"
#include "mla/stage_timer.hpp"
#include "mla/sweep.hpp"
#include "mla_build_config.h"
#include "run_pipeline.hpp"

namespace mla::cli {
namespace {

CommandSpec sweep_spec() {
  CommandSpec spec;
  spec.name = "sweep";
  spec.synopsis =
      "mla-h2o sweep: `run` (MLA attention + H2O selection) on every listed layer, one layer in memory at a time,\n"
      "with per-layer statistics, the kept sets' overlap between layers and a layers x tokens heatmap";
  spec.usage = "mla-h2o sweep --checkpoint PATH [--layers all|0-3,60] [input source] [options]";
  spec.flags = {
      {"checkpoint", "PATH", "checkpoint directory or .safetensors file (required)", ""},
      {"config", "FILE", "config.json to use instead of the one beside the checkpoint", ""},
      {"layers", "all|LIST", "layers to run: all (every layer the checkpoint holds) or a list like 0-3,60", "all"},
  };
  for (auto& f : input_flags()) spec.flags.push_back(f);
  for (auto& f : forward_flags("causal", "fp32")) {
    if (f.name == "per-head") continue;
    if (f.name == "out") f.default_value = "./mla-h2o-sweep";
    if (f.name == "dump-tensors") f.help = "write layer-L.safetensors (HF layout) for every layer";
    spec.flags.push_back(f);
  }
  spec.positional_help =
      "input source (exactly one): --input FILE [--residual] (tensor NAME.L for layer L, else NAME) | --tokens IDS|FILE |\n"
      "  --seq-len S --seed N (default: 256 tokens, seed 0)";
  return spec;
}

// "all" -> every layer the checkpoint holds; "0-3,60" -> {0, 1, 2, 3, 60}. Ascending, each
// layer once, each within num_hidden_layers (its tensors are checked by the caller).
std::vector<int64_t> parse_layers(const std::string& text, const Checkpoint& ckpt) {
  if (text == "all") {  // every layer the checkpoint names; a missing shard fails in the checks
    std::vector<int64_t> mapped = ckpt.layers_mapped();
    if (mapped.empty())
      fail(ErrorKind::Checkpoint, "--layers all: " + ckpt.path() + " holds no layer with all its attention tensors (" +
                                      ckpt.layer_absent_reason(0) + ")");
    return mapped;
  }
  std::set<int64_t> layers;
  std::stringstream items(text);
  std::string item;
  const auto number = [&](const std::string& s) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9)
      fail(ErrorKind::InvalidArgument, "--layers '" + text + "': '" + item +
                                           "' is not a layer number or a range like 0-3 (expected all or a list like 0-3,60)");
    return static_cast<int64_t>(std::stoll(s));
  };
  while (std::getline(items, item, ',')) {
    const size_t dash = item.find('-');
    const int64_t first = number(item.substr(0, dash));
    const int64_t last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (last < first)
      fail(ErrorKind::InvalidArgument, "--layers '" + text + "': range '" + item + "' runs backwards");
    if (last >= ckpt.config().num_hidden_layers)  // before the range is walked
      fail(ErrorKind::InvalidArgument, "--layers '" + text + "': layer " + std::to_string(last) +
                                           " is out of range: the config has " +
                                           std::to_string(ckpt.config().num_hidden_layers) + " layers");
    for (int64_t l = first; l <= last; ++l)
      if (!layers.insert(l).second)
        fail(ErrorKind::InvalidArgument, "--layers '" + text + "': layer " + std::to_string(l) + " is listed twice");
  }
  if (layers.empty() || text.back() == ',')
    fail(ErrorKind::InvalidArgument, "--layers '" + text + "': empty item (expected all or a list like 0-3,60)");
  return {layers.begin(), layers.end()};
}

std::string layer_list_text(const std::vector<int64_t>& layers) {
  std::string s;
  for (int64_t l : layers) s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

// With --input: each layer's tensor must exist before anything runs, and all must hold the
// same number of tokens. Returns the notes to report (a tensor shared by several layers).
std::vector<std::string> check_file_inputs(const InputRequest& req, const std::vector<int64_t>& layers,
                                           Precision precision) {
  std::map<std::string, std::vector<int64_t>> users;  // tensor -> layers it feeds
  for (int64_t l : layers) users[input_tensor_for_layer(req.file, req.tensor, l)].push_back(l);
  const SafetensorsFile f = SafetensorsFile::open(req.file);
  std::string first;
  uint64_t first_s = 0;
  std::vector<std::string> notes;
  for (const auto& [name, ls] : users) {
    const TensorInfo& info = f.at(name);
    const uint64_t s = info.shape.size() >= 2 ? info.shape[info.shape.size() - 2] : 0;  // checked fully when read
    if (first.empty()) {
      first = name;
      first_s = s;
    } else if (s != first_s) {
      fail(ErrorKind::Shape, "--input " + req.file + ": tensor '" + name + "' has " + std::to_string(s) +
                                 " tokens but '" + first + "' has " + std::to_string(first_s) +
                                 "; every layer of a sweep needs the same tokens");
    }
    if (ls.size() > 1)
      notes.push_back("layers " + layer_list_text(ls) + " all read the same tensor '" + name + "' of " + req.file);
  }
  // dump_hidden_states.py records the precision the model ran in
  const auto written = f.metadata().find("precision");
  if (written != f.metadata().end() && written->second != precision_name(precision))
    notes.push_back(req.file + " was written by a " + written->second + " run of the model; this sweep runs " +
                    precision_name(precision) + " (pass --precision " + written->second + " for the model's numerics)");
  return notes;
}

// The input line of the report: the source, as each layer gets it (layer 0's own description
// names one tensor / one layer's norm).
std::string sweep_input_text(const InputRequest& req, const AttentionConfig& cfg, const std::string& first_layer) {
  std::ostringstream os;
  switch (req.kind) {
    case InputKind::File:
      os << (req.residual ? "residual stream" : "hidden states") << " from " << req.file << ", tensor '" << req.tensor
         << ".L' for layer L (else '" << req.tensor << "')";
      if (req.residual) os << " -> that layer's input_layernorm (eps " << cfg.rms_norm_eps << ")";
      return os.str();
    case InputKind::Tokens: return first_layer + ", each layer with its own input_layernorm";
    case InputKind::Seeded: return first_layer;
  }
  return first_layer;
}

// 2-3. the checkpoint opened and every listed layer checked before any layer runs; returns the
// layers in the order they will run and fills cfg, the model files' digests and the notes.
std::vector<int64_t> open_and_check(const RunPlan& plan, const std::string& layers_arg, SweepReport& rep,
                                    AttentionConfig& cfg) {
  RunInfo& info = rep.info;
  std::vector<int64_t> layers;
  {
    StageTimer t(info.stage_seconds, "open checkpoint + checks");
    const Checkpoint ckpt = Checkpoint::open(plan.checkpoint, plan.config_path);
    cfg = ckpt.config();
    layers = parse_layers(layers_arg, ckpt);
    for (const int64_t l : layers) {  // every listed layer's tensors, from the headers, before any runs
      check_layer_present(ckpt, l, "--layers: layer " + std::to_string(l));
      ckpt.check_layer(l, needs_input_layernorm(plan.input));
    }
    std::string mode;
    latent_eps(plan.latent_eps_arg, cfg, mode);  // a bad value fails here, not at the first layer
    if (plan.input.kind == InputKind::File) info.notes = check_file_inputs(plan.input, layers, plan.forward.precision);
    info.model_files = model_file_digests(ckpt, "sweep", plan.quiet);  // the shards of the listed layers
    // --max-hours: every listed layer's forward, before the first (the input of the first layer gives S)
    if (plan.max_hours >= 0)
      check_forward_time(plan, cfg, open_input(plan.input, layers.front()).seq_len, static_cast<int64_t>(layers.size()));
  }
  if (plan.input.kind == InputKind::Tokens) {
    std::vector<int64_t> above0;
    std::copy_if(layers.begin(), layers.end(), std::back_inserter(above0), [](int64_t l) { return l > 0; });
    if (!above0.empty()) rep.caveats.push_back(tokens_caveat(layer_list_text(above0)));
  }
  if (plan.input.kind == InputKind::Seeded && layers.size() > 1)
    info.notes.push_back("every layer gets the same seeded standard-normal hidden states, not a model's input");
  if (layers_arg == "all" && static_cast<int64_t>(layers.size()) < cfg.num_hidden_layers)
    info.notes.push_back("--layers all: the checkpoint holds " + std::to_string(layers.size()) + " of the config's " +
                         std::to_string(cfg.num_hidden_layers) + " layers; the others are skipped");
  return layers;
}

// The settings the first layer's run resolved (backend, latent eps, shapes), for the report.
void record_first_run(const LoadedRun& loaded, const RunOutcome& ran, RunInfo& info) {
  info.latent_norm_eps_mode = loaded.latent_eps_mode;
  info.latent_norm_eps = loaded.options.latent_norm_eps;
  info.backend = ran.backend->name();
  info.backend_reason = ran.backend_reason;
  info.backend_description = ran.backend->description();
  info.computed_in_double = ran.result.computed_in_double;
  info.parameter_count = loaded.weights->parameter_count();
  info.hidden_shape = loaded.input.hidden.shape;
}

// 4. one layer: run's load and run phases, then only the scores and decision are kept; the
// layer's weights, input and backend are freed on return. seq_len: the first layer's S (-1 before).
SweepLayer run_layer(const RunPlan& plan, int64_t layer, bool first, int64_t& seq_len, OutputSet& outputs,
                     RunInfo& info) {
  RunPlan lp = plan;
  lp.layer = layer;
  SweepLayer out;
  out.layer = layer;
  LoadedRun loaded = load(lp);
  loaded.ckpt.release_mappings();  // the layer's pages of the shards are not needed any more
  const int64_t S = loaded.input.hidden.dim(0);
  if (seq_len < 0) seq_len = S;
  if (S != seq_len)
    fail(ErrorKind::Shape, "layer " + std::to_string(layer) + "'s input has " + std::to_string(S) +
                               " tokens but the first layer's had " + std::to_string(seq_len));
  Report layer_rep;
  const RunOutcome ran = run(lp, loaded, layer_rep);
  out.input_source = loaded.input.description;
  out.scores = std::move(layer_rep.scores);
  out.decision = std::move(layer_rep.decision);
  out.load_seconds = total_seconds(loaded.stages);
  out.forward_seconds = total_seconds(ran.forward_stages);
  info.load_seconds += out.load_seconds;
  info.forward_seconds += out.forward_seconds;
  info.h2o_seconds += total_seconds(ran.h2o_stages);
  double layer_seconds = out.load_seconds + out.forward_seconds + total_seconds(ran.h2o_stages);
  if (first) record_first_run(loaded, ran, info);
  if (plan.dump_tensors) {
    const std::string path = outputs.add("layer-" + std::to_string(layer) + ".safetensors");
    StageSeconds dump;
    timed(dump, "dump", [&] { write_layer_dump(path, lp, loaded, ran); });
    layer_seconds += total_seconds(dump);
  }
  info.stage_seconds.emplace_back("layer " + std::to_string(layer), layer_seconds);
  return out;
}

// The run's settings, for the report.
void record_settings(const RunPlan& plan, const AttentionConfig& cfg, const std::vector<int64_t>& layers,
                     SweepReport& rep) {
  RunInfo& info = rep.info;
  rep.h2o = plan.h2o;
  info.checkpoint = plan.checkpoint;
  info.input_source = sweep_input_text(plan.input, cfg, rep.layers.front().input_source);
  info.mask = mask_name(plan.forward.mask);
  if (plan.forward.mask == Mask::None) info.mask += " (every query sees every key, as HF eager with attention_mask=None)";
  info.precision = precision_name(plan.forward.precision);
  info.backend_requested = backend_name(plan.backend);
  info.config = cfg;
  info.softmax_scale = softmax_scale(cfg);
  info.threads = plan.forward.threads;
  info.allow_tf32 = plan.forward.allow_tf32;
  info.notes.insert(info.notes.begin(), "layers run: " + layer_list_text(layers));
}

// 5. outputs, into the set, which then replaces the directory's previous one.
void write_outputs(const RunPlan& plan, SweepReport& rep, int64_t seq_len, OutputSet& outputs) {
  RunInfo& info = rep.info;
  const std::vector<LayerOverlap> overlaps = layer_overlaps(rep);
  {
    StageTimer t(info.stage_seconds, "outputs");
    outputs.write("layers.csv", sweep_layers_csv(rep));
    outputs.write("scores.csv", sweep_scores_csv(rep));
    outputs.write("overlap.csv", sweep_overlap_csv(overlaps));
    std::ostringstream title;
    title << "H2O scores of " << rep.layers.size() << " layer" << (rep.layers.size() == 1 ? "" : "s") << ", "
          << seq_len << " tokens (" << info.backend << ", " << info.precision << ", mask "
          << mask_name(plan.forward.mask) << ")";
    outputs.write("heatmap.svg", sweep_heatmap_svg(rep, title.str()));
  }
  info.files = outputs.paths_with({"report.txt", "report.json"});
  const std::string text = sweep_report_text(rep, overlaps);
  outputs.write("report.txt", text);
  outputs.write("report.json", sweep_report_json(rep, overlaps));
  outputs.commit();
  std::fputs(text.c_str(), stdout);
}

int execute_sweep(const RunPlan& plan, const std::string& layers_arg) {
  SweepReport rep;
  rep.info.command = "sweep";
  if (plan.dry_run) {  // every layer has the same geometry: the first one's plan is each one's
    AttentionConfig cfg;
    const std::vector<int64_t> layers = open_and_check(plan, layers_arg, rep, cfg);
    RunPlan first = plan;
    first.layer = layers.front();
    return dry_run(first, {}, ", " + std::to_string(layers.size()) + " layers, one in memory at a time");
  }
  // 1. the output set first, so an unwritable --out fails before any work
  OutputSet outputs(plan.out_dir, "sweep", OutputSet::Lock::FailIfHeld, run_inputs(plan));
  AttentionConfig cfg;
  const std::vector<int64_t> layers = open_and_check(plan, layers_arg, rep, cfg);
  int64_t seq_len = -1;
  for (size_t k = 0; k < layers.size(); ++k) {
    SweepLayer out = run_layer(plan, layers[k], k == 0, seq_len, outputs, rep.info);
    if (!plan.quiet)
      std::fprintf(stderr, "mla-h2o sweep: layer %lld (%zu/%zu) done in %.2f s, kept %lld of %lld\n",
                   static_cast<long long>(out.layer), k + 1, layers.size(), rep.info.stage_seconds.back().second,
                   static_cast<long long>(out.decision.kept()), static_cast<long long>(seq_len));
    rep.layers.push_back(std::move(out));
  }
  record_settings(plan, cfg, layers, rep);
  write_outputs(plan, rep, seq_len, outputs);
  return 0;
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& argv) {
  const CommandSpec spec = sweep_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  RunPlan plan = read_run_plan(a, "sweep");  // (sweep has --layers, not --layer)
  plan.out_dir = "mla-h2o-sweep";
  read_forward_flags(a, plan, "causal", "fp32");
  const std::string layers = a.str("layers", "all");
  if (layers.empty()) fail(ErrorKind::InvalidArgument, "--layers: empty (expected all or a list like 0-3,60)");
  return execute_sweep(plan, layers);
}

}  // namespace mla::cli
