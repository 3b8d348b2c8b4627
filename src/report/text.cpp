// src/report/text.cpp — the human-readable report of run / demo / select.
//
// Layout: a settings block (everything that decides the numbers), then the published Kimi K2.6 layer-0 H2O demo's
// "Results" block in its own wording and order (docs/outputs.md §5), then per-head lines
// (--per-head), timings and the files written. Scores are printed with 3 decimals, as the
// demo did; exact values are in scores.csv / report.json.
//
// Shape legend: S = tokens, n = heads, H = hidden_size.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "mla/memory_plan.hpp"
#include "mla/report.hpp"
#include "mla/sweep.hpp"
#include "mla/tensor.hpp"

namespace mla {
namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// 101124096 -> "101,124,096"
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

// Scores: 3 decimals like the demo; small magnitudes keep 4 significant digits instead.
std::string score(double v) {
  if (v != 0.0 && std::fabs(v) < 0.01) return fmt("%.4g", v);
  return fmt("%.3f", v);
}

std::string percent(int64_t part, int64_t whole) {
  return whole > 0 ? fmt("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "n/a";
}

std::string line(const std::string& label, const std::string& value) {
  std::string l = "  " + label + (label.empty() ? " " : ":");
  if (l.size() < 22) l += std::string(22 - l.size(), ' ');
  else l += ' ';
  return l + value + "\n";
}

std::string range_text(int64_t first, int64_t count) {
  if (count == 0) return "none";
  if (count == 1) return "index " + std::to_string(first);
  return "indices " + std::to_string(first) + ".." + std::to_string(first + count - 1);
}

std::string settings_block(const Report& r) {
  const RunInfo& in = r.info;
  std::string s = "mla-h2o " + (in.command.empty() ? std::string("report") : in.command) + "\n";
  if (!in.checkpoint.empty()) s += line("checkpoint", in.checkpoint);
  if (in.layer) s += line("layer", std::to_string(*in.layer));
  if (in.config) {
    const AttentionConfig& c = *in.config;
    s += line("config", fmt("%lldL  hidden=%lld  heads=%lld", static_cast<long long>(c.num_hidden_layers),
                            static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_attention_heads)));
    s += line("", fmt("qk_dim=%lld (nope %lld + rope %lld)  v_dim=%lld  kv_lora_rank=%lld  q_lora_rank=%s",
                      static_cast<long long>(c.qk_head_dim()), static_cast<long long>(c.qk_nope_head_dim),
                      static_cast<long long>(c.qk_rope_head_dim), static_cast<long long>(c.v_head_dim),
                      static_cast<long long>(c.kv_lora_rank),
                      c.has_q_lora() ? std::to_string(c.q_lora_rank).c_str() : "null"));
    std::string rope = "rope=" + c.rope.rope_type + fmt(" theta=%g", c.rope.rope_theta);
    if (c.rope.is_yarn())
      rope += fmt(" factor=%g original_max_pos=%g beta_fast=%g beta_slow=%g mscale=%g mscale_all_dim=%g", c.rope.factor,
                  c.rope.original_max_position_embeddings, c.rope.beta_fast, c.rope.beta_slow, c.rope.mscale,
                  c.rope.mscale_all_dim);
    s += line("", rope);
    if (in.softmax_scale) s += line("", "softmax scale=" + format_double(*in.softmax_scale));
  }
  if (in.parameter_count) s += line("layer params", grouped(*in.parameter_count));
  if (!in.input_source.empty()) s += line("input", in.input_source);
  s += line("seq_len", std::to_string(r.scores.size()));
  if (!in.mask.empty()) s += line("mask", in.mask);
  if (!in.precision.empty()) s += line("precision", in.precision);
  if (!in.backend.empty()) {
    std::string b = in.backend;
    if (in.backend_requested == "auto") b += " (auto: " + in.backend_reason + ")";
    if (!in.backend_description.empty()) b += " — " + in.backend_description;
    s += line("backend", b);
  }
  if (!in.gemm.engine.empty())
    s += line("gemm", gemm_label(in.gemm.engine, in.gemm.kernel) + " (" + in.gemm.requested + ": " + in.gemm.reason + ")");
  if (!in.gemm.refused.empty()) s += line("kernel refused", in.gemm.refused);
  if (in.latent_norm_eps)
    s += line("latent norm eps", fmt("%g", *in.latent_norm_eps) + " (" + in.latent_norm_eps_mode +
                                     "; q_a_layernorm and kv_a_layernorm)");
  s += line("H2O", fmt("n_sink=%lld  n_recent=%lld  budget=%lld%s", static_cast<long long>(r.h2o.sinks),
                       static_cast<long long>(r.h2o.recent), static_cast<long long>(r.h2o.heavy),
                       r.n_heads > 0 ? "  (+ per-head decisions)" : ""));
  for (const auto& n : in.notes) s += line("note", n);
  return s;
}

std::string results_block(const Report& r) {
  const RunInfo& in = r.info;
  const H2ODecision& d = r.decision;
  const ScoreStats st = score_stats(r.scores);
  const DecisionSummary sum = summarize_decision(r.scores, d);
  const int64_t S = static_cast<int64_t>(r.scores.size());
  std::string s = "\nResults\n";
  if (!in.attn_output_shape.empty()) s += line("attn_out shape", shape_string(in.attn_output_shape));
  if (!in.attn_weights_shape.empty()) s += line("attn_weights shape", shape_string(in.attn_weights_shape));
  s += fmt("  score per token:    shape=(%lld,)\n", static_cast<long long>(S));
  s += "    score range:      [" + score(st.min) + ", " + score(st.max) + "]\n";
  s += "    score mean:       " + score(st.mean) + "\n";
  s += "    score std:        " + score(st.std) + "\n";
  s += "    score sum:        " + score(st.sum) + "\n";

  s += "\nH2O eviction policy applied:\n";
  s += fmt("  kept     %4lld of %lld tokens (%s)\n", static_cast<long long>(d.kept()), static_cast<long long>(S),
           percent(d.kept(), S).c_str());
  s += fmt("  sinks    %4lld (%s)\n", static_cast<long long>(d.n_sink), range_text(0, d.n_sink).c_str());
  s += fmt("  heavy    %4lld of %lld middle tokens chosen\n", static_cast<long long>(d.n_heavy),
           static_cast<long long>(sum.middle));
  s += fmt("  recent   %4lld (%s)\n", static_cast<long long>(d.n_recent),
           d.n_recent > 0 ? ("last " + std::to_string(d.n_recent) + ", " + range_text(S - d.n_recent, d.n_recent)).c_str()
                          : "none");
  s += fmt("  evicted  %4lld (%s)\n", static_cast<long long>(d.n_evicted), percent(d.n_evicted, S).c_str());

  s += fmt("\ntop %zu heavy-hitter scores:\n", sum.top_heavy.size());
  std::string idx;
  for (size_t i = 0; i < sum.top_heavy.size(); ++i) {
    s += (i % 5 == 0 ? "  " : "  ") + fmt("%8s", score(sum.top_heavy[i].second).c_str());
    idx += (i % 5 == 0 ? "  " : "  ") + fmt("%8lld", static_cast<long long>(sum.top_heavy[i].first));
    if (i % 5 == 4 || i + 1 == sum.top_heavy.size()) {
      s += "\n";
      idx += "\n";
    }
  }
  if (!sum.top_heavy.empty()) s += "  at token indices:\n" + idx;

  s += "\n";
  s += "mean score of heavy-hitters kept:  " + (d.n_heavy ? score(sum.mean_heavy) : std::string("n/a (none kept)")) + "\n";
  s += "mean score of evicted tokens:      " + (d.n_evicted ? score(sum.mean_evicted) : std::string("n/a (none evicted)")) + "\n";
  s += "heavy / evicted score ratio:       " +
       (sum.heavy_evicted_ratio ? fmt("%.2fx", *sum.heavy_evicted_ratio) : std::string("n/a")) + "\n";
  return s;
}

std::string per_head_block(const Report& r) {
  if (r.n_heads <= 0) return "";
  const size_t S = r.scores.size();
  std::string s = "\nper-head H2O decisions (H2O paper style: each head keeps its own set):\n";
  for (int64_t h = 0; h < r.n_heads; ++h) {
    const H2ODecision& d = r.head_decisions[static_cast<size_t>(h)];
    std::span<const double> row(r.head_scores.data() + static_cast<size_t>(h) * S, S);  // [S]
    const DecisionSummary sum = summarize_decision(row, d, 1);
    int64_t shared = 0;  // heavy in this head and in the layer-level decision
    for (size_t i = 0; i < S; ++i)
      shared += d.category[i] == TokenCategory::Heavy && r.decision.category[i] == TokenCategory::Heavy;
    s += fmt("  head %3lld: kept %lld (heavy %lld), heavy mean %s, evicted mean %s, ratio %s, heavy shared with layer-level set %lld/%lld\n",
             static_cast<long long>(h), static_cast<long long>(d.kept()), static_cast<long long>(d.n_heavy),
             score(sum.mean_heavy).c_str(), score(sum.mean_evicted).c_str(),
             sum.heavy_evicted_ratio ? fmt("%.2fx", *sum.heavy_evicted_ratio).c_str() : "n/a",
             static_cast<long long>(shared), static_cast<long long>(d.n_heavy));
  }
  return s;
}

std::string timing_block(const RunInfo& in) {
  if (in.stage_seconds.empty()) return "";
  std::string s = "\ntiming (seconds):\n";
  s += fmt("  load     %.4f\n  forward  %.4f\n  h2o      %.6f\n", in.load_seconds, in.forward_seconds, in.h2o_seconds);
  s += "  stages:\n";
  for (const auto& [name, sec] : in.stage_seconds) {
    s += fmt("    %-28s %.6f\n", name.c_str(), sec);
    if (name.rfind("forward", 0) == 0)  // the backend's split of the forward stage
      for (const auto& [sub, sub_sec] : in.forward_stage_seconds) s += fmt("      %-26s %.6f\n", sub.c_str(), sub_sec);
  }
  return s;
}

// "memory: peak 5.2 GiB measured (maxrss); planned 5.6 GiB (phase); available 21.3 GiB (MemAvailable)"
std::string memory_block(const RunInfo& in) {
  if (in.memory_planned_bytes < 0 && in.memory_peak_rss_bytes < 0) return "";
  std::string s = "\nmemory:";
  if (in.memory_peak_rss_bytes >= 0) s += " peak " + format_bytes(in.memory_peak_rss_bytes) + " measured (maxrss);";
  if (in.memory_planned_bytes >= 0)
    s += " planned " + format_bytes(in.memory_planned_bytes) + " (" + in.memory_planned_phase + ");";
  if (in.memory_device_planned_bytes >= 0) s += " GPU planned " + format_bytes(in.memory_device_planned_bytes) + ";";
  if (in.memory_available_bytes >= 0)
    s += " available " + format_bytes(in.memory_available_bytes) + " (" + in.memory_available_source + ")";
  if (s.back() == ';') s.pop_back();
  return s + "\n";
}

std::string files_block(const RunInfo& in) {
  if (in.files.empty()) return "";
  std::string s = "\nfiles written:\n";
  for (const auto& f : in.files) s += "  " + f + "\n";
  return s;
}

}  // namespace

std::string report_text(const Report& r) {
  return settings_block(r) + results_block(r) + per_head_block(r) + timing_block(r.info) + memory_block(r.info) +
         files_block(r.info);
}

// mla-h2o sweep: the settings block of run (seq_len from the first layer), the caveats, one
// line per layer and the mean overlap of the kept sets.
std::string sweep_report_text(const SweepReport& r, const std::vector<LayerOverlap>& overlaps) {
  Report shared;
  shared.info = r.info;
  shared.h2o = r.h2o;
  if (!r.layers.empty()) shared.scores = r.layers.front().scores;
  std::string s = settings_block(shared);
  for (const auto& c : r.caveats) s += "\n*** " + c + "\n";
  s += "\nper layer (scores = attention mass received, summed over heads and queries):\n";
  s += fmt("  %5s  %10s  %10s  %10s  %10s  %6s  %6s  %8s  %s\n", "layer", "min", "max", "mean", "std", "kept", "heavy",
           "evicted", "heavy/evicted");
  for (const SweepLayer& l : r.layers) {
    const ScoreStats st = score_stats(l.scores);
    const DecisionSummary sum = summarize_decision(l.scores, l.decision, 0);
    s += fmt("  %5lld  %10s  %10s  %10s  %10s  %6lld  %6lld  %8lld  %s\n", static_cast<long long>(l.layer),
             score(st.min).c_str(), score(st.max).c_str(), score(st.mean).c_str(), score(st.std).c_str(),
             static_cast<long long>(l.decision.kept()), static_cast<long long>(l.decision.n_heavy),
             static_cast<long long>(l.decision.n_evicted),
             sum.heavy_evicted_ratio ? fmt("%.2fx", *sum.heavy_evicted_ratio).c_str() : "n/a");
  }
  if (!overlaps.empty()) {
    double kept = 0, heavy = 0;
    for (const LayerOverlap& o : overlaps) {
      kept += o.kept_jaccard;
      heavy += o.heavy_jaccard;
    }
    const double n = static_cast<double>(overlaps.size());
    s += fmt("\nkept-set overlap over %zu layer pairs: mean Jaccard %.3f (heavy hitters alone: %.3f; overlap.csv)\n",
             overlaps.size(), kept / n, heavy / n);
  }
  return s + timing_block(r.info) + files_block(r.info);
}

}  // namespace mla
