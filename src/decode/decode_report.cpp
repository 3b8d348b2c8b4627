// src/decode/decode_report.cpp — the outputs of `mla-h2o decode` (docs/decode.md §4), each a
// pure function of the DecodeResult / summaries, so tests check them on small runs:
//   decode.csv   one row per (policy, budget, step)
//   summary.csv  one row per (policy, budget)
//   table        the same as summary.csv, aligned for stdout
//   decode.svg   rel_error per step, one line per policy (one budget)
//   budget.svg   mean rel_error against K, one line per policy (fidelity versus memory)
// Numbers are printed with %.17g in the CSVs (they parse back to the same double).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/report.hpp"
#include "mla/rope.hpp"
#include "src/report/svg_util.hpp"

namespace mla {

using svg::line_chart;
using svg::Series;

std::string decode_csv(const DecodeResult& r) {
  std::string out =
      "policy,budget,step,position,cache_len,held,evicted,rel_error,residual_error,cosine,mass_recall,"
      "mass_recall_min,mass_recall_p5,visible\n";
  for (const PolicyTrace& t : r.traces)
    for (const DecodeStep& s : t.steps) {
      out += csv_field(t.policy.label) + "," + std::to_string(t.budget) + "," + std::to_string(s.step) + "," +
             std::to_string(s.position) + "," + std::to_string(s.cache_len) + "," + std::to_string(s.held) + "," +
             std::to_string(s.evicted) + "," + format_double(s.rel_error) + "," + format_double(s.residual_error) + "," +
             format_double(s.cosine) + "," + format_double(s.mass_recall) + "," + format_double(s.mass_recall_min) + "," +
             format_double(s.mass_recall_p5) + "," + format_double(s.visible) + "\n";
    }
  return out;
}

std::string decode_summary_csv(const std::vector<DecodeSummary>& sum) {
  std::string out =
      "policy,budget,mean_rel_error,p95_rel_error,max_rel_error,mean_residual_error,mean_cosine,mean_mass_recall,"
      "mean_mass_recall_min,mean_mass_recall_p5,mean_visible,mean_cache_len,mean_held\n";
  for (const DecodeSummary& s : sum)
    out += csv_field(s.policy) + "," + std::to_string(s.budget) + "," + format_double(s.mean_rel_error) + "," +
           format_double(s.p95_rel_error) + "," + format_double(s.max_rel_error) + "," +
           format_double(s.mean_residual_error) + "," + format_double(s.mean_cosine) + "," +
           format_double(s.mean_mass_recall) + "," + format_double(s.mean_mass_recall_min) + "," +
           format_double(s.mean_mass_recall_p5) + "," + format_double(s.mean_visible) + "," +
           format_double(s.mean_cache_len) + "," + format_double(s.mean_held) + "\n";
  return out;
}

std::string decode_summary_table(const std::vector<DecodeSummary>& sum) {
  size_t width = 6;
  for (const DecodeSummary& s : sum) width = std::max(width, s.policy.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %7s %12s %12s %12s %12s %9s %9s %9s %9s %8s\n", static_cast<int>(width), "policy",
                "budget", "mean rel_err", "p95 rel_err", "max rel_err", "resid_err", "recall", "worst hd", "p5 heads",
                "flat", "held");
  out += line;
  for (const DecodeSummary& s : sum) {
    std::snprintf(line, sizeof line, "%-*s %7lld %12.4e %12.4e %12.4e %12.4e %9.6f %9.6f %9.6f %9.6f %8.1f\n",
                  static_cast<int>(width), s.policy.c_str(), static_cast<long long>(s.budget), s.mean_rel_error,
                  s.p95_rel_error, s.max_rel_error, s.mean_residual_error, s.mean_mass_recall, s.mean_mass_recall_min,
                  s.mean_mass_recall_p5, s.mean_visible, s.mean_held);
    out += line;
  }
  return out;
}

std::string decode_svg(const DecodeResult& r, int64_t budget, const std::string& title) {
  std::vector<Series> series;
  for (const PolicyTrace& t : r.traces) {
    if (t.budget != budget) continue;
    Series s{t.policy.label, "", {}};
    for (const DecodeStep& st : t.steps) s.points.emplace_back(static_cast<double>(st.step), st.rel_error);
    series.push_back(std::move(s));
  }
  return line_chart(title, "decode step", "rel_error of attn_output vs the full cache", series);
}

std::string budget_svg(const std::vector<DecodeSummary>& sum, const std::string& title) {
  std::vector<Series> series;
  for (const DecodeSummary& s : sum) {
    auto it = std::find_if(series.begin(), series.end(), [&](const Series& x) { return x.label == s.policy; });
    if (it == series.end()) {
      series.push_back(Series{s.policy, "", {}});
      it = series.end() - 1;
    }
    it->points.emplace_back(s.mean_held, s.mean_rel_error);  // what the cache measured held, not K
  }
  return line_chart(title, "tokens held after each step (mean, measured)", "mean rel_error over the steps", series);
}

void policy_settings_json(JsonWriter& j, const PolicySettings& p, const std::vector<int64_t>& budgets) {
  j.begin_object();
  j.key("label").value(p.label);
  j.key("preset").value(p.preset);
  j.key("kind").value(policy_kind_name(p));
  for (const std::string& k : policy_setting_keys(p)) {
    j.key(k);
    if (k == "sinks") j.value(p.sinks);
    else if (k == "recent") p.recent_percent > 0 ? j.value(std::to_string(p.recent_percent) + "% of the budget") : j.value(p.recent);
    else if (k == "heads") j.value(head_aggregation_name(p.heads));
    else if (k == "window") j.value(p.window);
    else if (k == "pool") j.value(p.pool == Pooling::None ? std::string("none")
                                  : (p.pool == Pooling::Max ? "max" : "avg") + std::to_string(p.pool_width));
    else if (k == "future") j.value(p.future);
    else if (k == "vnorm") j.value(p.vnorm);
    else if (k == "beta") j.value(p.beta);
    else if (k == "seed") j.value(static_cast<int64_t>(p.seed));
    else if (k == "sketch") j.value(p.sketch);
    else if (k == "cur") j.value(p.cur);
    else if (k == "local") j.value(p.local);
    else if (k == "lag") j.value(p.lag);
    else if (k == "press") policy_settings_json(j, p.inner.at(0), budgets);  // the inner press, as a policy
    else if (k == "chunk") j.value(p.chunk);
    else if (k == "first") j.value(std::to_string(p.first_percent) + "%");
    else if (k == "alpha") j.value(std::to_string(p.alpha_percent) + "%");
    else fail(ErrorKind::InvalidArgument, "policy settings json: no value for setting '" + k + "'");
  }
  const std::vector<std::string> keys = policy_setting_keys(p);
  if (std::find(keys.begin(), keys.end(), "recent") != keys.end()) {  // kinds with a recent window setting
    j.key("recent_tokens").begin_object();
    for (int64_t K : budgets) j.key(std::to_string(K)).value(recent_tokens(p, K));
    j.end_object();
  }
  j.end_object();
}

namespace {

// "options" and "backend" of decode's report.json: how the layer ran.
void decode_settings_json(JsonWriter& j, const DecodeRunInfo& in) {
  j.key("options").begin_object();
  j.key("precision").value(in.precision);
  j.key("attention").value(in.attention);
  j.key("backend").value(in.backend_requested);
  j.key("latent_norm_eps_mode").value(in.latent_norm_eps_mode);
  j.key("latent_norm_eps").value(in.latent_norm_eps);
  j.key("threads").value(static_cast<int64_t>(in.threads));
  j.end_object();
}

void decode_backend_json(JsonWriter& j, const DecodeRunInfo& in) {
  j.key("backend").begin_object();
  j.key("name").value(in.backend);
  j.key("description").value(in.backend_description);
  if (!in.gemm.engine.empty()) {
    j.key("gemm").begin_object();
    j.key("requested").value(in.gemm.requested);
    j.key("engine").value(in.gemm.engine);
    j.key("kernel").value(in.gemm.kernel);
    j.key("reason").value(in.gemm.reason);
    if (!in.gemm.refused.empty()) j.key("refused").value(in.gemm.refused);  // the kernel check's (src/cpu/kernel_check.hpp)
    j.end_object();
  }
  j.key("decode_kernel").value(in.decode_kernel);
  j.end_object();
}

// "summary": one object per (policy, budget), the fields of summary.csv.
void decode_summary_json(JsonWriter& j, const std::vector<DecodeSummary>& sum) {
  j.key("summary").begin_array();
  for (const DecodeSummary& s : sum) {
    j.begin_object();
    j.key("policy").value(s.policy);
    j.key("budget").value(s.budget);
    j.key("mean_rel_error").value(s.mean_rel_error);
    j.key("p95_rel_error").value(s.p95_rel_error);
    j.key("max_rel_error").value(s.max_rel_error);
    j.key("mean_residual_error").value(s.mean_residual_error);
    j.key("mean_cosine").value(s.mean_cosine);
    j.key("mean_mass_recall").value(s.mean_mass_recall);
    j.key("mean_mass_recall_min").value(s.mean_mass_recall_min);
    j.key("mean_mass_recall_p5").value(s.mean_mass_recall_p5);
    j.key("mean_visible").value(s.mean_visible);
    j.key("mean_cache_len").value(s.mean_cache_len);
    j.key("mean_held").value(s.mean_held);
    j.end_object();
  }
  j.end_array();
}

// "timing_s" {total, stages} and "memory" {planned, available, measured}.
void decode_cost_json(JsonWriter& j, const DecodeRunInfo& in) {
  j.key("timing_s").begin_object();
  j.key("total").value(total_seconds(in.stages));
  j.key("stages");
  write_stages(j, in.stages);
  j.end_object();
  j.key("memory").begin_object();
  j.key("planned_peak_bytes").value(in.memory_planned_bytes);
  j.key("planned_peak_phase").value(in.memory_planned_phase);
  j.key("planned_process_bytes").value(in.memory_process_bytes);
  j.key("available_bytes").value(in.memory_available_bytes);
  j.key("available_source").value(in.memory_available_source);
  j.key("measured_peak_rss_bytes").value(in.memory_peak_rss_bytes);
  j.end_object();
}

}  // namespace

std::string decode_report_json(const DecodeRunInfo& in, const DecodeOptions& opt, const std::vector<DecodeSummary>& sum) {
  JsonWriter j;
  j.begin_object();
  j.key("format").value("mla-h2o decode report v1");
  j.key("command").value("decode");
  write_provenance(j, in.model_files ? &*in.model_files : nullptr);
  j.key("checkpoint").value(in.checkpoint);
  write_synthetic_weights(j, in.synthetic_weights);
  j.key("caveats").array(in.caveats);
  j.key("layer").value(in.layer);
  j.key("input").value(in.input);
  j.key("rows").value(in.rows);
  j.key("residual_norm").value(in.residual_source);
  j.key("config");
  if (in.config) write_config(j, *in.config, softmax_scale(*in.config));
  else j.null();
  decode_settings_json(j, in);
  j.key("prompt_len").value(opt.prompt_len);
  j.key("steps").value(opt.steps);
  j.key("budgets").array(opt.budgets);
  j.key("policies").begin_array();
  for (const PolicySettings& p : opt.policies) policy_settings_json(j, p, opt.budgets);
  j.end_array();
  decode_backend_json(j, in);
  decode_summary_json(j, sum);
  decode_cost_json(j, in);
  j.key("notes").array(in.notes);
  j.key("files").array(in.files);
  j.end_object();
  return j.str() + "\n";
}

std::string decode_report_text(const DecodeRunInfo& in, const DecodeOptions& opt, const std::vector<DecodeSummary>& sum) {
  std::string t = "mla-h2o decode: layer " + std::to_string(in.layer) + " of " + in.checkpoint + "\n";
  for (const auto& c : in.caveats) t += "CAVEAT: " + c + "\n";
  t += "input: " + in.input + "; prompt " + std::to_string(opt.prompt_len) + " rows, " + std::to_string(opt.steps) +
       " decode steps\n";
  t += "attention " + in.attention + ", precision " + in.precision + ", backend " + in.backend + " (" +
       in.backend_description + ")\n";
  if (!in.gemm.engine.empty())
    t += "prefill projections: " + gemm_label(in.gemm.engine, in.gemm.kernel) + " (" + in.gemm.reason + ")\n";
  t += "decode kernel: " + in.decode_kernel + "\n";
  for (const auto& n : in.notes) t += "note: " + n + "\n";
  t += "rel_error = ||o - o_full|| / ||o_full|| on attn_output; resid_err = ||o - o_full|| / ||h|| (" + in.residual_source +
       "); recall = full-cache attention mass on the policy's cache (mean over heads), worst hd = the worst head's, "
       "p5 heads = its 5th percentile over heads; flat = tokens attended / tokens visible (the recall of flat "
       "attention); held = tokens held after each step (measured)\n\n";
  t += decode_summary_table(sum);
  char line[256];
  std::snprintf(line, sizeof line, "\ntime: total %.2f s (", total_seconds(in.stages));
  t += line;
  for (size_t i = 0; i < in.stages.size(); ++i) {
    std::snprintf(line, sizeof line, "%s%s %.2f s", i ? ", " : "", in.stages[i].first.c_str(), in.stages[i].second);
    t += line;
  }
  t += ")\nfiles:\n";
  for (const auto& f : in.files) t += "  " + f + "\n";
  return t;
}

}  // namespace mla
