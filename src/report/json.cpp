// src/report/json.cpp — a hand-written JSON writer and report.json.
//
// report.json holds the numbers of report_text at full precision (%.17g) plus what is
// needed to reproduce them: config (geometry + rope), options, versions, backend and
// timing_s {"load", "forward", "h2o", "total", "stages": [{"stage", "seconds"}, ...],
// "forward_stages": [...]} (total = sum of "stages"; forward_stages split the forward stage).
// Non-finite doubles are written as null; strings are escaped per RFC 8259 §7 and invalid
// UTF-8 is replaced by U+FFFD, so the output always parses.
//
// Shape legend: S = tokens, n = heads.
#include <cmath>
#include <cstdio>

#include "mla/error.hpp"
#include "mla/report.hpp"
#include "mla/sweep.hpp"
#include "mla_build_config.h"

namespace mla {

// ---- JsonWriter ---------------------------------------------------------------------------

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * stack_.size(), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) {
    if (!out_.empty()) fail(ErrorKind::InvalidArgument, "JsonWriter: a second top-level value");
    return;
  }
  if (!stack_.back().array) fail(ErrorKind::InvalidArgument, "JsonWriter: value inside an object without a key");
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  newline();
}

JsonWriter& JsonWriter::key(std::string_view k) {
  if (stack_.empty() || stack_.back().array || after_key_) fail(ErrorKind::InvalidArgument, "JsonWriter: key outside an object");
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  newline();
  out_ += json_quote(k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back({false, true});
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back({true, true});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (stack_.empty() || stack_.back().array || after_key_) fail(ErrorKind::InvalidArgument, "JsonWriter: unbalanced end_object");
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  if (stack_.empty() || !stack_.back().array) fail(ErrorKind::InvalidArgument, "JsonWriter: unbalanced end_array");
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  before_value();
  out_ += json_quote(s);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  out_ += std::isfinite(v) ? format_double(v) : "null";
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view literal) {
  before_value();
  out_ += literal;
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

// ---- report.json --------------------------------------------------------------------------
namespace {

void string_or_null(JsonWriter& w, const char* k, const std::string& v) {
  w.key(k);
  if (v.empty()) w.null();
  else w.value(v);
}

// "options" fields shared by run's and sweep's report.json
void option_fields(JsonWriter& w, const RunInfo& in, const H2OOptions& h2o) {
  string_or_null(w, "mask", in.mask);
  string_or_null(w, "precision", in.precision);
  string_or_null(w, "backend", in.backend_requested);
  string_or_null(w, "latent_norm_eps_mode", in.latent_norm_eps_mode);
  w.key("latent_norm_eps");
  if (in.latent_norm_eps) w.value(*in.latent_norm_eps);
  else w.null();
  w.key("sinks").value(h2o.sinks);
  w.key("recent").value(h2o.recent);
  w.key("budget").value(h2o.heavy);
}

// "backend": {name, requested, reason, description, computed_in_double}
void backend_object(JsonWriter& w, const RunInfo& in) {
  w.key("backend").begin_object();
  string_or_null(w, "name", in.backend);
  string_or_null(w, "requested", in.backend_requested);
  string_or_null(w, "reason", in.backend_reason);
  string_or_null(w, "description", in.backend_description);
  if (!in.gemm.engine.empty()) {
    w.key("gemm").begin_object();
    string_or_null(w, "requested", in.gemm.requested);
    string_or_null(w, "engine", in.gemm.engine);
    string_or_null(w, "kernel", in.gemm.kernel);
    string_or_null(w, "reason", in.gemm.reason);
    string_or_null(w, "refused", in.gemm.refused);  // the kernel check's refusal (src/cpu/kernel_check.hpp)
    w.key("attention_products").value(gemm_name(in.gemm.attention_products));  // "onednn" | "eigen"
    w.key("onednn_reorders").begin_object();  // since prepare (docs/cpu-gemm.md §9)
    w.key("weights").value(in.gemm.reorders.weights);
    w.key("head_operands").value(in.gemm.reorders.head_operands);
    w.key("per_block").value(in.gemm.reorders.per_block);
    w.end_object();
    w.end_object();
  }
  w.key("computed_in_double").value(in.computed_in_double);
  w.end_object();
}

// "timing_s": {load, forward, h2o, total, stages, forward_stages}; total = sum of stages
void timing_object(JsonWriter& w, const RunInfo& in) {
  w.key("timing_s").begin_object();
  w.key("load").value(in.load_seconds);
  w.key("forward").value(in.forward_seconds);
  w.key("h2o").value(in.h2o_seconds);
  w.key("total").value(total_seconds(in.stage_seconds));
  w.key("stages");
  write_stages(w, in.stage_seconds);
  w.key("forward_stages");
  write_stages(w, in.forward_stage_seconds);
  w.end_object();
}

// "scores": {count, min, max, mean, std, sum, argmin, argmax}
void scores_object(JsonWriter& w, std::span<const double> scores) {
  const ScoreStats st = score_stats(scores);
  w.key("scores").begin_object();
  w.key("count").value(st.count);
  w.key("min").value(st.min);
  w.key("max").value(st.max);
  w.key("mean").value(st.mean);
  w.key("std").value(st.std);
  w.key("sum").value(st.sum);
  w.key("argmin").value(st.argmin);
  w.key("argmax").value(st.argmax);
  w.end_object();
}

}  // namespace

void write_stages(JsonWriter& w, const StageSeconds& stages) {
  w.begin_array();
  for (const auto& [name, sec] : stages) {
    w.begin_object();
    w.key("stage").value(name);
    w.key("seconds").value(sec);
    w.end_object();
  }
  w.end_array();
}

void write_synthetic_weights(JsonWriter& w, const std::string& synthetic) {
  w.key("synthetic_weights");
  if (synthetic.empty()) w.value(false);
  else w.value(synthetic);
}

void write_config(JsonWriter& w, const AttentionConfig& c, const std::optional<double>& softmax_scale) {
  w.begin_object();
  w.key("model_type").value(c.model_type);
  w.key("family").value(family_class_name(c.family));
  w.key("nested_text_config").value(c.nested_text_config);
  w.key("hidden_size").value(c.hidden_size);
  w.key("num_attention_heads").value(c.num_attention_heads);
  w.key("num_key_value_heads").value(c.num_key_value_heads);
  w.key("q_lora_rank");
  if (c.has_q_lora()) w.value(c.q_lora_rank);
  else w.null();
  w.key("kv_lora_rank").value(c.kv_lora_rank);
  w.key("qk_nope_head_dim").value(c.qk_nope_head_dim);
  w.key("qk_rope_head_dim").value(c.qk_rope_head_dim);
  w.key("qk_head_dim").value(c.qk_head_dim());
  w.key("v_head_dim").value(c.v_head_dim);
  w.key("num_hidden_layers").value(c.num_hidden_layers);
  w.key("vocab_size").value(c.vocab_size);
  w.key("max_position_embeddings").value(c.max_position_embeddings);
  w.key("rms_norm_eps").value(c.rms_norm_eps);
  w.key("attention_bias").value(c.attention_bias);
  w.key("rope_interleave").value(c.rope_interleave);
  w.key("rope_style").value(rope_style_name(c.rope_style()));
  w.key("rope").begin_object();
  w.key("rope_type").value(c.rope.rope_type);
  w.key("rope_theta").value(c.rope.rope_theta);
  if (c.rope.is_yarn()) {
    w.key("factor").value(c.rope.factor);
    w.key("original_max_position_embeddings").value(c.rope.original_max_position_embeddings);
    w.key("beta_fast").value(c.rope.beta_fast);
    w.key("beta_slow").value(c.rope.beta_slow);
    w.key("mscale").value(c.rope.mscale);
    w.key("mscale_all_dim").value(c.rope.mscale_all_dim);
    w.key("attention_factor");
    if (c.rope.attention_factor) w.value(*c.rope.attention_factor);
    else w.null();
    w.key("truncate").value(c.rope.truncate);
  }
  w.end_object();
  w.key("softmax_scale");
  if (softmax_scale) w.value(*softmax_scale);
  else w.null();
  w.end_object();
}

void write_decision(JsonWriter& w, std::span<const double> scores, const H2ODecision& d, size_t top_k) {
  const DecisionSummary sum = summarize_decision(scores, d, top_k);
  const int64_t S = static_cast<int64_t>(d.category.size());
  const auto frac = [&](int64_t k) { return S > 0 ? static_cast<double>(k) / static_cast<double>(S) : 0.0; };
  w.key("seq_len").value(S);
  w.key("kept").value(d.kept());
  w.key("kept_fraction").value(frac(d.kept()));
  w.key("n_sink").value(d.n_sink);
  w.key("n_recent").value(d.n_recent);
  w.key("n_heavy").value(d.n_heavy);
  w.key("n_evicted").value(d.n_evicted);
  w.key("evicted_fraction").value(frac(d.n_evicted));
  w.key("middle").value(sum.middle);
  w.key("mean_heavy_score");
  if (d.n_heavy) w.value(sum.mean_heavy);
  else w.null();
  w.key("mean_evicted_score");
  if (d.n_evicted) w.value(sum.mean_evicted);
  else w.null();
  w.key("mean_kept_score");
  if (d.kept()) w.value(sum.mean_kept);
  else w.null();
  w.key("heavy_evicted_ratio");
  if (sum.heavy_evicted_ratio) w.value(*sum.heavy_evicted_ratio);
  else w.null();
  w.key("top_heavy").begin_array();
  for (const auto& [i, s] : sum.top_heavy) {
    w.begin_object();
    w.key("token_idx").value(i);
    w.key("score").value(s);
    w.end_object();
  }
  w.end_array();
  for (TokenCategory c : {TokenCategory::Sink, TokenCategory::Heavy, TokenCategory::Recent}) {
    w.key(std::string(category_name(c)) + "_indices").begin_array();
    for (size_t i = 0; i < d.category.size(); ++i)
      if (d.category[i] == c) w.value(static_cast<int64_t>(i));
    w.end_array();
  }
}

std::string report_json(const Report& r) {
  const RunInfo& in = r.info;
  JsonWriter w;
  w.begin_object();
  w.key("format").value("mla-h2o report v1");
  string_or_null(w, "command", in.command);
  write_provenance(w, in.model_files ? &*in.model_files : nullptr);
  string_or_null(w, "checkpoint", in.checkpoint);
  w.key("layer");
  if (in.layer) w.value(*in.layer);
  else w.null();
  string_or_null(w, "input", in.input_source);
  w.key("config");
  if (in.config) write_config(w, *in.config, in.softmax_scale);
  else w.null();
  w.key("layer_parameters");
  if (in.parameter_count) w.value(*in.parameter_count);
  else w.null();

  w.key("options").begin_object();
  option_fields(w, in, r.h2o);
  w.key("per_head").value(r.n_heads > 0);
  w.key("threads").value(in.threads);
  w.key("allow_tf32").value(in.allow_tf32);
  w.end_object();
  backend_object(w, in);

  w.key("shapes").begin_object();
  w.key("hidden_states");
  w.array(in.hidden_shape);
  w.key("attn_output");
  w.array(in.attn_output_shape);
  w.key("attn_weights");
  w.array(in.attn_weights_shape);
  w.key("token_scores");
  w.array(std::vector<int64_t>{static_cast<int64_t>(r.scores.size())});
  w.end_object();

  scores_object(w, r.scores);

  w.key("h2o").begin_object();
  w.key("sinks").value(r.h2o.sinks);
  w.key("recent").value(r.h2o.recent);
  w.key("budget").value(r.h2o.heavy);
  write_decision(w, r.scores, r.decision, 10);
  w.end_object();

  if (r.n_heads > 0) {
    const size_t S = r.scores.size();
    w.key("per_head").begin_array();
    for (int64_t h = 0; h < r.n_heads; ++h) {
      w.begin_object();
      w.key("head").value(h);
      write_decision(w, std::span<const double>(r.head_scores.data() + static_cast<size_t>(h) * S, S),
                     r.head_decisions[static_cast<size_t>(h)], 10);
      w.end_object();
    }
    w.end_array();
  }

  timing_object(w, in);
  if (in.memory_planned_bytes >= 0 || in.memory_peak_rss_bytes >= 0) {
    w.key("memory").begin_object();
    w.key("planned_peak_bytes").value(in.memory_planned_bytes);
    w.key("planned_peak_phase").value(in.memory_planned_phase);
    if (in.memory_process_bytes >= 0) w.key("planned_process_bytes").value(in.memory_process_bytes);
    if (in.memory_device_planned_bytes >= 0) w.key("planned_device_peak_bytes").value(in.memory_device_planned_bytes);
    w.key("available_bytes").value(in.memory_available_bytes);
    w.key("available_source").value(in.memory_available_source);
    w.key("measured_peak_rss_bytes").value(in.memory_peak_rss_bytes);
    w.end_object();
  }
  w.key("notes").array(in.notes);
  w.key("files").array(in.files);
  w.end_object();
  return w.str() + "\n";
}

// report.json of `mla-h2o sweep`: settings as in run's report.json, the caveats, one object
// per layer (scores summary, the H2O decision, timings) and every pair's overlap.
std::string sweep_report_json(const SweepReport& r, const std::vector<LayerOverlap>& overlaps) {
  const RunInfo& in = r.info;
  JsonWriter w;
  w.begin_object();
  w.key("format").value("mla-h2o sweep report v1");
  string_or_null(w, "command", in.command);
  write_provenance(w, in.model_files ? &*in.model_files : nullptr);
  string_or_null(w, "checkpoint", in.checkpoint);
  string_or_null(w, "input", in.input_source);
  w.key("caveats").array(r.caveats);
  w.key("notes").array(in.notes);
  w.key("config");
  if (in.config) write_config(w, *in.config, in.softmax_scale);
  else w.null();
  w.key("options").begin_object();
  option_fields(w, in, r.h2o);
  w.key("threads").value(in.threads);
  w.key("allow_tf32").value(in.allow_tf32);
  w.end_object();
  backend_object(w, in);

  w.key("layers").begin_array();
  for (const SweepLayer& l : r.layers) {
    w.begin_object();
    w.key("layer").value(l.layer);
    w.key("input").value(l.input_source);
    scores_object(w, l.scores);
    w.key("h2o").begin_object();
    write_decision(w, l.scores, l.decision, 10);
    w.end_object();
    w.key("timing_s").begin_object();
    w.key("load").value(l.load_seconds);
    w.key("forward").value(l.forward_seconds);
    w.end_object();
    w.end_object();
  }
  w.end_array();

  w.key("overlap").begin_array();
  for (const LayerOverlap& o : overlaps) {
    w.begin_object();
    w.key("layer_a").value(o.layer_a);
    w.key("layer_b").value(o.layer_b);
    w.key("kept_jaccard").value(o.kept_jaccard);
    w.key("heavy_jaccard").value(o.heavy_jaccard);
    w.end_object();
  }
  w.end_array();

  timing_object(w, in);
  w.key("files").array(in.files);
  w.end_object();
  return w.str() + "\n";
}

}  // namespace mla
