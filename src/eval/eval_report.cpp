// src/eval/eval_report.cpp — the summaries and outputs of `mla-h2o eval` (mla/eval.hpp,
// docs/eval.md), each a pure function of the EvalResult, so tests check them on small runs:
//   summary     per (policy, budget): mean NLL, ΔNLL, perplexity ratio, KL, top-1, passkey
//   eval.csv    one row per (policy, budget, position)
//   layers.csv  one row per (policy, budget, layer)
//   summary.csv and the stdout table
//   budget.svg  ΔNLL against K, one line per policy;  layers.svg  mass recall per layer
// Numbers in the CSVs are %.17g (they parse back to the same double).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "mla/eval.hpp"
#include "mla/report.hpp"
#include "src/report/svg_util.hpp"

namespace mla {
namespace {

// full at each budget, then the runs of that budget (options order)
template <class F>
void for_each_run(const EvalResult& r, const std::vector<int64_t>& budgets, F&& f) {
  for (int64_t K : budgets) {
    f(r.full, K);
    for (const EvalRun& run : r.runs)
      if (run.budget == K) f(run, K);
  }
}

double passkey_share(const EvalRun& run, const Passkey& key, int64_t& scored) {
  scored = 0;
  int64_t correct = 0;
  for (int64_t digit : key.digits)
    for (const EvalPosition& p : run.positions)
      if (p.position + 1 == digit) {  // the logits at digit - 1 predict the digit
        ++scored;
        correct += p.top1_correct;
      }
  return scored > 0 ? static_cast<double>(correct) / static_cast<double>(scored) : -1.0;
}

}  // namespace

std::vector<EvalSummary> summarize(const EvalResult& r, const std::vector<int64_t>& budgets) {
  const auto mean_nll = [](const EvalRun& run) {
    double s = 0;
    for (const EvalPosition& p : run.positions) s += p.nll;
    return s / static_cast<double>(run.positions.size());
  };
  const double full_nll = mean_nll(r.full);
  std::vector<EvalSummary> out;
  for_each_run(r, budgets, [&](const EvalRun& run, int64_t K) {
    EvalSummary s;
    s.policy = run.policy.label;
    s.budget = K;
    const double N = static_cast<double>(run.positions.size());
    double kl = 0, agree = 0, correct = 0;
    for (const EvalPosition& p : run.positions) {
      kl += p.kl;
      agree += p.top1_agree;
      correct += p.top1_correct;
    }
    s.mean_nll = mean_nll(run);
    s.delta_nll = s.mean_nll - full_nll;
    s.ppl_ratio = std::exp(s.delta_nll);
    s.mean_kl = kl / N;
    s.top1_agreement = agree / N;
    s.top1_accuracy = correct / N;
    s.passkey_accuracy = passkey_share(run, r.passkey, s.passkey_digits);
    double cache = 0, recall = 0;
    for (const EvalLayer& l : run.layers) {
      cache += l.mean_cache_len;
      recall += l.mean_mass_recall;
    }
    s.mean_cache_len = cache / static_cast<double>(run.layers.size());
    s.mean_mass_recall = recall / static_cast<double>(run.layers.size());
    out.push_back(s);
  });
  return out;
}

std::string eval_csv(const EvalResult& r, const std::vector<int64_t>& budgets) {
  std::string out = "policy,budget,position,token,nll,kl,top1_agree\n";
  for_each_run(r, budgets, [&](const EvalRun& run, int64_t K) {
    for (const EvalPosition& p : run.positions)
      out += csv_field(run.policy.label) + "," + std::to_string(K) + "," + std::to_string(p.position) + "," +
             std::to_string(p.token) + "," + format_double(p.nll) + "," + format_double(p.kl) + "," +
             (p.top1_agree ? "1" : "0") + "\n";
  });
  return out;
}

std::string eval_layers_csv(const EvalResult& r, const std::vector<int64_t>& budgets) {
  std::string out =
      "policy,budget,layer,layer_budget,mean_cache_len,mean_held,mean_mass_recall,min_mass_recall,mean_attn_rel_error,"
      "max_attn_rel_error,mean_hidden_rel_error\n";
  for_each_run(r, budgets, [&](const EvalRun& run, int64_t K) {
    for (const EvalLayer& l : run.layers)
      out += csv_field(run.policy.label) + "," + std::to_string(K) + "," + std::to_string(l.layer) + "," +
             std::to_string(run.policy.kind == PolicyKind::Full ? 0 : l.budget) + "," + format_double(l.mean_cache_len) +
             "," + format_double(l.mean_held) + "," + format_double(l.mean_mass_recall) + "," +
             format_double(l.min_mass_recall) + "," + format_double(l.mean_attn_rel_error) + "," +
             format_double(l.max_attn_rel_error) + "," + format_double(l.mean_hidden_rel_error) + "\n";
  });
  return out;
}

std::string eval_summary_csv(const std::vector<EvalSummary>& sum) {
  std::string out =
      "policy,budget,mean_nll,delta_nll,ppl_ratio,mean_kl,top1_agreement,top1_accuracy,passkey_accuracy,"
      "mean_cache_len,mean_mass_recall\n";
  for (const EvalSummary& s : sum)
    out += csv_field(s.policy) + "," + std::to_string(s.budget) + "," + format_double(s.mean_nll) + "," +
           format_double(s.delta_nll) + "," + format_double(s.ppl_ratio) + "," + format_double(s.mean_kl) + "," +
           format_double(s.top1_agreement) + "," + format_double(s.top1_accuracy) + "," +
           (s.passkey_accuracy < 0 ? std::string() : format_double(s.passkey_accuracy)) + "," +
           format_double(s.mean_cache_len) + "," + format_double(s.mean_mass_recall) + "\n";
  return out;
}

std::string eval_summary_table(const std::vector<EvalSummary>& sum) {
  size_t width = 6;
  for (const EvalSummary& s : sum) width = std::max(width, s.policy.size());
  const bool passkey = std::any_of(sum.begin(), sum.end(), [](const EvalSummary& s) { return s.passkey_accuracy >= 0; });
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %6s %9s %10s %9s %10s %7s %8s %8s%s\n", static_cast<int>(width), "policy",
                "budget", "mean NLL", "delta NLL", "ppl ratio", "KL", "top-1", "recall", "cache", passkey ? "  passkey" : "");
  out += line;
  for (const EvalSummary& s : sum) {
    std::snprintf(line, sizeof line, "%-*s %6lld %9.4f %+10.5f %9.4f %10.3e %7.4f %8.4f %8.1f", static_cast<int>(width),
                  s.policy.c_str(), static_cast<long long>(s.budget), s.mean_nll, s.delta_nll, s.ppl_ratio, s.mean_kl,
                  s.top1_agreement, s.mean_mass_recall, s.mean_cache_len);
    out += line;
    if (passkey) {
      if (s.passkey_accuracy >= 0) {
        std::snprintf(line, sizeof line, "  %4.2f (%lld)", s.passkey_accuracy, static_cast<long long>(s.passkey_digits));
        out += line;
      } else {
        out += "  n/a";
      }
    }
    out += "\n";
  }
  return out;
}

std::string eval_budget_svg(const std::vector<EvalSummary>& sum, const std::string& title) {
  std::vector<svg::Series> series;
  for (const EvalSummary& s : sum) {
    auto it = std::find_if(series.begin(), series.end(), [&](const svg::Series& x) { return x.label == s.policy; });
    if (it == series.end()) {
      series.push_back(svg::Series{s.policy, "", {}});
      it = series.end() - 1;
    }
    it->points.emplace_back(static_cast<double>(s.budget), s.delta_nll);
  }
  return svg::line_chart(title, "cache budget K per layer (tokens)", "ΔNLL against the full cache (nats per token)",
                         series);
}

std::string eval_layers_svg(const EvalResult& r, int64_t budget, const std::string& title) {
  std::vector<svg::Series> series;
  for_each_run(r, {budget}, [&](const EvalRun& run, int64_t) {
    svg::Series s{run.policy.label, "", {}};
    for (const EvalLayer& l : run.layers) s.points.emplace_back(static_cast<double>(l.layer), l.mean_mass_recall);
    series.push_back(std::move(s));
  });
  return svg::line_chart(title, "layer", "full attention mass the cache holds (mean over steps and heads)", series);
}

}  // namespace mla
