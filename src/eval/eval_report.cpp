// src/eval/eval_report.cpp — the summaries and outputs of `mla-h2o eval` (mla/eval.hpp,
// docs/eval.md), each a pure function of the windows' EvalResults, so tests check them on small runs:
//   summary     per (policy, budget) over the W windows: mean NLL, ΔNLL with its 95 % t-interval from the
//               paired per-window differences, perplexity ratio, KL mean/median/p99/max, top-1 ± se, passkey;
//               and llama-perplexity's statistics pooled over every decoded position (docs/eval.md §3.2)
//   eval.csv    one row per (window, policy, budget, position)
//   layers.csv  one row per (window, policy, budget, layer)
//   windows.csv one row per (window, policy, budget);  leaderboard.csv  per budget, sorted by ΔNLL
//   summary.csv and the stdout table
//   budget.svg  ΔNLL against K, one line per policy (intervals, outliers apart);  layers.svg  mass
//   recall per layer, a panel per budget;  leaderboard.svg  per budget, ranked, with intervals
// Numbers in the CSVs are %.17g (they parse back to the same double).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/json_text.hpp"
#include "mla/provenance.hpp"
#include "mla/report.hpp"
#include "mla/stats.hpp"
#include "src/report/svg_util.hpp"
#include "eval_report_parts.hpp"

namespace mla {
using eval::for_each_run;
namespace {

// The runs of every window in for_each_run order: runs[j][w] is run j of window w.
struct RunColumn {
  std::string policy;
  int64_t budget = 0;
  bool full = false;
  std::vector<const EvalRun*> of_window;  // [W]
};
std::vector<RunColumn> run_columns(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets) {
  std::vector<RunColumn> cols;
  for (size_t w = 0; w < windows.size(); ++w) {
    size_t j = 0;
    for_each_run(windows[w].result, budgets, [&](const EvalRun& run, int64_t K) {
      if (w == 0) cols.push_back(RunColumn{run.policy.label, K, &run == &windows[w].result.full, {}});
      cols.at(j++).of_window.push_back(&run);
    });
  }
  return cols;
}

double mean_nll(const EvalRun& run) {
  double s = 0;
  for (const EvalPosition& p : run.positions) s += p.nll;
  return s / static_cast<double>(run.positions.size());
}

double passkey_share(const EvalRun& run, const Passkey& key, int64_t& scored, int64_t& correct) {
  scored = 0;
  correct = 0;
  for (int64_t digit : key.digits)
    for (const EvalPosition& p : run.positions)
      if (p.position + 1 == digit) {  // the logits at digit - 1 predict the digit
        ++scored;
        correct += p.top1_correct;
      }
  return scored > 0 ? static_cast<double>(correct) / static_cast<double>(scored) : -1.0;
}

// One run of one window, against the same window's full run.
struct WindowFigures {
  double mean_nll = 0, delta_nll = 0, mean_kl = 0, top1_agreement = 0, top1_accuracy = 0, passkey_accuracy = -1;
  int64_t passkey_scored = 0, passkey_correct = 0;
};
WindowFigures window_figures(const EvalRun& run, const EvalResult& window) {
  WindowFigures f;
  const double N = static_cast<double>(run.positions.size());
  for (const EvalPosition& p : run.positions) {
    f.mean_kl += p.kl;
    f.top1_agreement += p.top1_agree;
    f.top1_accuracy += p.top1_correct;
  }
  f.mean_kl /= N;
  f.top1_agreement /= N;
  f.top1_accuracy /= N;
  f.mean_nll = mean_nll(run);
  f.delta_nll = f.mean_nll - mean_nll(window.full);
  f.passkey_accuracy = passkey_share(run, window.passkey, f.passkey_scored, f.passkey_correct);
  return f;
}

// "" for NaN (an empty CSV field), else %.17g
std::string field(double v) { return std::isnan(v) ? std::string() : format_double(v); }

// llama-perplexity's statistics of one (policy, budget) over every decoded position of every
// window, each position paired with the same window's full run at that position (docs/eval.md
// §3.2). Sets positions, mean_kl and kl_*, dp*, same_top and ln_ppl_ratio_se.
void pooled_statistics(EvalSummary& s, const std::vector<const EvalRun*>& of_window, const std::vector<EvalWindow>& windows) {
  std::vector<double> nll, nll_full, kl, dp;  // [n]
  int64_t same = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const std::vector<EvalPosition>& run = of_window[w]->positions;
    const std::vector<EvalPosition>& full = windows[w].result.full.positions;
    if (run.size() != full.size()) fail(ErrorKind::InvalidArgument, "summarize: a run and full decoded different positions");
    for (size_t i = 0; i < run.size(); ++i) {
      nll.push_back(run[i].nll);
      nll_full.push_back(full[i].nll);
      kl.push_back(run[i].kl);
      dp.push_back(prob_diff(run[i].nll, full[i].nll));
      same += run[i].top1_agree;
    }
  }
  s.positions = static_cast<int64_t>(kl.size());
  const MeanSe k = mean_se(kl);
  s.mean_kl = k.mean;
  s.kl_se = k.se;
  s.kl_q = quantiles(kl);
  s.kl_median = s.kl_q.median;
  s.kl_p99 = s.kl_q.p99;
  s.kl_max = s.kl_q.max;
  s.dp = mean_se(dp);
  s.dp_rms = root_mean_square(dp);
  s.dp_q = quantiles(dp);
  s.same_top = share_se(same, s.positions);
  s.ln_ppl_ratio_se = ln_ppl_ratio(nll, nll_full).se;
}

// summary.csv's columns after mean_mass_recall, and report.json's keys of the same name: the
// statistics of llama-perplexity that the first 19 columns do not already hold, in its order
// (docs/eval.md §3.2). `se` marks a standard error, NaN by design when positions = 1.
struct PooledColumn {
  const char* name;
  double value;
  bool se;
};
std::vector<PooledColumn> pooled_columns(const EvalSummary& s) {
  return {{"kl_se", s.kl_se, true},           {"kl_p999", s.kl_q.p999, false},     {"kl_p95", s.kl_q.p95, false},
          {"kl_p90", s.kl_q.p90, false},      {"kl_p10", s.kl_q.p10, false},       {"kl_p05", s.kl_q.p05, false},
          {"kl_p01", s.kl_q.p01, false},      {"kl_p001", s.kl_q.p001, false},     {"kl_min", s.kl_q.min, false},
          {"dp_mean", s.dp.mean, false},      {"dp_se", s.dp.se, true},            {"dp_rms", s.dp_rms, false},
          {"dp_max", s.dp_q.max, false},      {"dp_p999", s.dp_q.p999, false},     {"dp_p99", s.dp_q.p99, false},
          {"dp_p95", s.dp_q.p95, false},      {"dp_p90", s.dp_q.p90, false},       {"dp_p75", s.dp_q.p75, false},
          {"dp_median", s.dp_q.median, false}, {"dp_p25", s.dp_q.p25, false},      {"dp_p10", s.dp_q.p10, false},
          {"dp_p05", s.dp_q.p05, false},      {"dp_p01", s.dp_q.p01, false},       {"dp_p001", s.dp_q.p001, false},
          {"dp_min", s.dp_q.min, false},      {"same_top_p", s.same_top.mean, false}, {"same_top_p_se", s.same_top.se, true},
          {"ln_ppl_ratio_se", s.ln_ppl_ratio_se, true}};
}

}  // namespace

std::vector<EvalSummary> summarize(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets) {
  std::vector<EvalSummary> out;
  const double W = static_cast<double>(windows.size());
  for (const RunColumn& col : run_columns(windows, budgets)) {
    EvalSummary s;
    s.policy = col.policy;
    s.budget = col.budget;
    s.windows = static_cast<int64_t>(windows.size());
    std::vector<double> delta, agree;
    double nll = 0, correct = 0, cache = 0, recall = 0;
    int64_t key_scored = 0, key_correct = 0;
    for (size_t w = 0; w < windows.size(); ++w) {
      const EvalRun& run = *col.of_window[w];
      const WindowFigures f = window_figures(run, windows[w].result);
      nll += f.mean_nll;
      delta.push_back(f.delta_nll);
      agree.push_back(f.top1_agreement);
      correct += f.top1_accuracy;
      key_scored += f.passkey_scored;
      key_correct += f.passkey_correct;
      double c = 0, m = 0;
      for (const EvalLayer& l : run.layers) {
        c += l.mean_cache_len;
        m += l.mean_mass_recall;
      }
      cache += c / static_cast<double>(run.layers.size());
      recall += m / static_cast<double>(run.layers.size());
    }
    s.mean_nll = nll / W;
    const MeanInterval d = mean_t_interval(delta);
    s.delta_nll = d.mean;
    s.delta_nll_se = d.se;
    s.delta_nll_low = d.low;
    s.delta_nll_high = d.high;
    s.ln_ppl_ratio = s.delta_nll;  // ΔNLL is exactly ln(ppl_run / ppl_full)
    s.ppl_ratio = std::exp(s.delta_nll);
    pooled_statistics(s, col.of_window, windows);
    const MeanInterval a = mean_t_interval(agree);
    s.top1_agreement = a.mean;
    s.top1_agreement_se = a.se;
    s.top1_accuracy = correct / W;
    s.passkey_digits = key_scored;
    s.passkey_accuracy = key_scored > 0 ? static_cast<double>(key_correct) / static_cast<double>(key_scored) : -1.0;
    s.mean_cache_len = cache / W;
    s.mean_mass_recall = recall / W;
    out.push_back(s);
  }
  return out;
}

void check_summaries_finite(const std::vector<EvalSummary>& sum) {
  for (const EvalSummary& s : sum) {
    const std::string cell = s.policy + " at budget " + std::to_string(s.budget);
    if (std::isfinite(s.delta_nll) && !std::isfinite(s.ppl_ratio))
      fail(ErrorKind::InvalidValue, "the ppl_ratio of " + cell + " is not finite: exp(ΔNLL) with ΔNLL = ln_ppl_ratio = " +
                                        format_double(s.delta_nll) + " is past the largest double; refused, nothing written "
                                        "(a ratio that large means the model's predictions are broken, docs/eval.md §3)");
    const std::pair<const char*, double> always[] = {
        {"mean_nll", s.mean_nll},         {"delta_nll", s.delta_nll},           {"mean_kl", s.mean_kl},
        {"kl_median", s.kl_median},       {"kl_p99", s.kl_p99},                 {"kl_max", s.kl_max},
        {"top1_agreement", s.top1_agreement}, {"top1_accuracy", s.top1_accuracy}, {"mean_cache_len", s.mean_cache_len},
        {"mean_mass_recall", s.mean_mass_recall}, {"ppl_ratio", s.ppl_ratio}};
    const std::pair<const char*, double> intervals[] = {{"delta_nll_se", s.delta_nll_se},
                                                        {"delta_nll_ci_low", s.delta_nll_low},
                                                        {"delta_nll_ci_high", s.delta_nll_high},
                                                        {"top1_agreement_se", s.top1_agreement_se}};
    const auto refuse = [&](const char* name, double v) {
      fail(ErrorKind::InvalidValue, "the " + std::string(name) + " of " + cell + " is " + (std::isnan(v) ? "NaN" : "infinite") +
                                        "; refused, nothing written (docs/eval.md §3)");
    };
    for (const auto& [name, v] : always)
      if (!std::isfinite(v)) refuse(name, v);
    for (const PooledColumn& c : pooled_columns(s))  // a standard error of one position is NaN by design
      if (std::isinf(c.value) || (std::isnan(c.value) && !(c.se && s.positions < 2))) refuse(c.name, c.value);
    for (const auto& [name, v] : intervals)  // NaN with one window by design (no spread)
      if (std::isinf(v) || (s.windows > 1 && std::isnan(v))) refuse(name, v);
  }
}

std::vector<EvalSummary> summarize(const EvalResult& r, const std::vector<int64_t>& budgets) {
  std::vector<EvalWindow> one(1);
  one[0].result = r;  // a copy: summaries are small next to a run's positions
  return summarize(one, budgets);
}

std::string eval_csv(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets) {
  return eval_csv_per_window(windows, std::vector<std::vector<int64_t>>(windows.size(), budgets));
}

std::string eval_csv_per_window(const std::vector<EvalWindow>& windows, const std::vector<std::vector<int64_t>>& budgets) {
  std::string out = "window,policy,budget,position,token,nll,kl,top1_agree,predicted,predicted_prob\n";
  for (size_t w = 0; w < windows.size(); ++w)
    for_each_run(windows[w].result, budgets.at(w), [&](const EvalRun& run, int64_t K) {
      for (const EvalPosition& p : run.positions)
        out += std::to_string(w) + "," + csv_field(run.policy.label) + "," + std::to_string(K) + "," +
               std::to_string(p.position) + "," + std::to_string(p.token) + "," + format_double(p.nll) + "," +
               format_double(p.kl) + "," + (p.top1_agree ? "1" : "0") + "," + std::to_string(p.predicted) + "," +
               format_double(p.predicted_prob) + "\n";
    });
  return out;
}

std::string eval_layers_csv(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets) {
  std::string out =
      "window,policy,budget,layer,layer_budget,mean_cache_len,mean_held,mean_mass_recall,min_mass_recall,"
      "mean_attn_rel_error,max_attn_rel_error,mean_hidden_rel_error\n";
  for (size_t w = 0; w < windows.size(); ++w)
    for_each_run(windows[w].result, budgets, [&](const EvalRun& run, int64_t K) {
      for (const EvalLayer& l : run.layers)
        out += std::to_string(w) + "," + csv_field(run.policy.label) + "," + std::to_string(K) + "," +
               std::to_string(l.layer) + "," + std::to_string(policy_is_full_cache(run.policy) ? 0 : l.budget) +
               "," + format_double(l.mean_cache_len) + "," + format_double(l.mean_held) + "," +
               format_double(l.mean_mass_recall) + "," + format_double(l.min_mass_recall) + "," +
               format_double(l.mean_attn_rel_error) + "," + format_double(l.max_attn_rel_error) + "," +
               format_double(l.mean_hidden_rel_error) + "\n";
    });
  return out;
}

std::string eval_windows_csv(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets) {
  std::string out =
      "window,source,offset,policy,budget,mean_nll,delta_nll,mean_kl,top1_agreement,top1_accuracy,passkey_accuracy\n";
  for (size_t w = 0; w < windows.size(); ++w)
    for_each_run(windows[w].result, budgets, [&](const EvalRun& run, int64_t K) {
      const WindowFigures f = window_figures(run, windows[w].result);
      out += std::to_string(w) + "," + csv_field(windows[w].source) + "," + std::to_string(windows[w].offset) + "," +
             csv_field(run.policy.label) + "," + std::to_string(K) + "," + format_double(f.mean_nll) + "," +
             format_double(f.delta_nll) + "," + format_double(f.mean_kl) + "," + format_double(f.top1_agreement) + "," +
             format_double(f.top1_accuracy) + "," + (f.passkey_accuracy < 0 ? "" : format_double(f.passkey_accuracy)) +
             "\n";
    });
  return out;
}

std::string eval_summary_csv(const std::vector<EvalSummary>& sum) {
  std::string out =
      "policy,budget,windows,mean_nll,delta_nll,delta_nll_ci_low,delta_nll_ci_high,ln_ppl_ratio,ppl_ratio,mean_kl,"
      "kl_median,kl_p99,kl_max,top1_agreement,top1_agreement_se,top1_accuracy,passkey_accuracy,mean_cache_len,mean_mass_recall,"
      "positions";
  for (const PooledColumn& c : pooled_columns(EvalSummary{})) out += std::string(",") + c.name;
  out += "\n";
  for (const EvalSummary& s : sum) {
    out += csv_field(s.policy) + "," + std::to_string(s.budget) + "," + std::to_string(s.windows) + "," +
           format_double(s.mean_nll) + "," + format_double(s.delta_nll) + "," + field(s.delta_nll_low) + "," +
           field(s.delta_nll_high) + "," + format_double(s.ln_ppl_ratio) + "," + format_double(s.ppl_ratio) + "," + format_double(s.mean_kl) + "," +
           format_double(s.kl_median) + "," + format_double(s.kl_p99) + "," + format_double(s.kl_max) + "," +
           format_double(s.top1_agreement) + "," + field(s.top1_agreement_se) + "," + format_double(s.top1_accuracy) +
           "," + (s.passkey_accuracy < 0 ? std::string() : format_double(s.passkey_accuracy)) + "," +
           format_double(s.mean_cache_len) + "," + format_double(s.mean_mass_recall) + "," + std::to_string(s.positions);
    for (const PooledColumn& c : pooled_columns(s)) out += "," + field(c.value);
    out += "\n";
  }
  return out;
}

std::string eval_leaderboard_csv(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets) {
  std::string out =
      "budget,rank,policy,delta_nll,delta_nll_ci_low,delta_nll_ci_high,overlaps,next,diff_to_next,diff_ci_low,"
      "diff_ci_high,distinct_from_next\n";
  const std::vector<RunColumn> cols = run_columns(windows, budgets);
  for (int64_t K : budgets) {
    struct Row {
      std::string policy;
      std::vector<double> delta;  // [W]
      MeanInterval d;
    };
    std::vector<Row> rows;
    for (const RunColumn& col : cols) {
      if (col.budget != K || col.full) continue;
      Row r{col.policy, {}, {}};
      for (size_t w = 0; w < windows.size(); ++w) r.delta.push_back(window_figures(*col.of_window[w], windows[w].result).delta_nll);
      r.d = mean_t_interval(r.delta);
      rows.push_back(std::move(r));
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.d.mean < b.d.mean || (a.d.mean == b.d.mean && a.policy < b.policy);
    });
    const auto overlap = [](const MeanInterval& a, const MeanInterval& b) {
      return !std::isnan(a.low) && !std::isnan(b.low) && a.low <= b.high && b.low <= a.high;
    };
    for (size_t i = 0; i < rows.size(); ++i) {
      std::string overlaps;
      if (i > 0 && overlap(rows[i].d, rows[i - 1].d)) overlaps = rows[i - 1].policy;
      if (i + 1 < rows.size() && overlap(rows[i].d, rows[i + 1].d)) overlaps += (overlaps.empty() ? "" : ";") + rows[i + 1].policy;
      std::string next, diff, lo, hi, distinct;
      if (i + 1 < rows.size()) {
        std::vector<double> paired;
        for (size_t w = 0; w < windows.size(); ++w) paired.push_back(rows[i + 1].delta[w] - rows[i].delta[w]);
        const MeanInterval p = mean_t_interval(paired);
        next = rows[i + 1].policy;
        diff = format_double(p.mean);
        lo = field(p.low);
        hi = field(p.high);
        if (!std::isnan(p.low)) distinct = (p.low > 0 || p.high < 0) ? "1" : "0";
      }
      out += std::to_string(K) + "," + std::to_string(i + 1) + "," + csv_field(rows[i].policy) + "," +
             format_double(rows[i].d.mean) + "," + field(rows[i].d.low) + "," + field(rows[i].d.high) + "," +
             csv_field(overlaps) + "," + csv_field(next) + "," + diff + "," + lo + "," + hi + "," + distinct + "\n";
    }
  }
  return out;
}

namespace {

// "v ± se" with printf's `fmt` for both, `scale` times each (100: percent); the "± se" left out
// when se is NaN (one position).
std::string value_se(const char* fmt, double v, double se, double scale = 1) {
  if (fmt == nullptr) fmt = "%g";  // (never; GCC's -O1 with UBSan otherwise sees a null format path)
  char a[64], b[64];
  std::snprintf(a, sizeof a, fmt, scale * v);
  if (std::isnan(se)) return a;
  std::snprintf(b, sizeof b, fmt, scale * se);
  return std::string(a) + " ± " + (b[0] == '+' ? b + 1 : b);
}

// `text` padded with spaces to `cols` characters (UTF-8: ± and Δ count one).
std::string pad(std::string text, size_t cols) {
  size_t chars = 0;
  for (unsigned char c : text) chars += (c & 0xC0) != 0x80;
  if (chars < cols) text.append(cols - chars, ' ');
  return text;
}

// The stdout table's second block: llama-perplexity's headline figures per row (docs/eval.md §3.2).
std::string pooled_statistics_table(const std::vector<EvalSummary>& sum, size_t width) {
  const auto row = [&](const std::string& policy, const std::string& budget, const std::string& kl, const std::string& top,
                       const std::string& dp, const std::string& ln) {
    std::string r = pad(policy, width) + " " + pad("", 6 - std::min<size_t>(6, budget.size())) + budget + "  " +
                    pad(kl, 22) + "  " + pad(top, 18) + "  " + pad(dp, 18) + "  " + ln;
    return r + "\n";
  };
  std::string out = row("policy", "budget", "KLD mean ± se", "same top p ± se", "Δp mean ± se", "ln PPL ratio ± se");
  for (const EvalSummary& s : sum)
    out += row(s.policy, std::to_string(s.budget), value_se("%.3e", s.mean_kl, s.kl_se),
               value_se("%.3f", s.same_top.mean, s.same_top.se, 100) + " %", value_se("%+.3f", s.dp.mean, s.dp.se, 100) + " %",
               value_se("%+.5f", s.ln_ppl_ratio, s.ln_ppl_ratio_se));
  const int64_t n = sum.empty() ? 0 : sum.front().positions;
  out += "pooled over the " + std::to_string(n) +
         " decoded positions of the windows as llama-perplexity --kl-divergence pools them, se taking positions as "
         "independent (narrower than the window intervals above; docs/eval.md §3.2)\n";
  return out;
}

}  // namespace

std::string eval_summary_table(const std::vector<EvalSummary>& sum) {
  size_t width = 6;
  for (const EvalSummary& s : sum) width = std::max(width, s.policy.size());
  const bool passkey = std::any_of(sum.begin(), sum.end(), [](const EvalSummary& s) { return s.passkey_accuracy >= 0; });
  const bool intervals = std::any_of(sum.begin(), sum.end(), [](const EvalSummary& s) { return s.windows > 1; });
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %6s %9s %10s%s %9s %10s %10s %7s%s %8s %8s%s\n", static_cast<int>(width),
                "policy", "budget", "mean NLL", "delta NLL", intervals ? "  95% CI (t, windows)  " : "", "ppl ratio",
                "KL", "KL p99", "top-1", intervals ? "    se " : "", "recall", "cache", passkey ? "  passkey" : "");
  out += line;
  for (const EvalSummary& s : sum) {
    std::snprintf(line, sizeof line, "%-*s %6lld %9.4f %+10.5f", static_cast<int>(width), s.policy.c_str(),
                  static_cast<long long>(s.budget), s.mean_nll, s.delta_nll);
    out += line;
    if (intervals) {
      std::snprintf(line, sizeof line, "  [%+9.5f, %+9.5f]", s.delta_nll_low, s.delta_nll_high);
      out += line;
    }
    std::snprintf(line, sizeof line, " %9.4f %10.3e %10.3e %7.4f", s.ppl_ratio, s.mean_kl, s.kl_p99, s.top1_agreement);
    out += line;
    if (intervals) {
      std::snprintf(line, sizeof line, " %6.4f", s.top1_agreement_se);
      out += line;
    }
    std::snprintf(line, sizeof line, " %8.4f %8.1f", s.mean_mass_recall, s.mean_cache_len);
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
  if (intervals)
    out += "95% CI: Student-t interval of the mean of the per-window ΔNLL (paired with full in each window); se: "
           "standard error of top-1 agreement over windows (docs/eval.md §3.1)\n";
  return out + pooled_statistics_table(sum, width);
}

// budget.svg: ΔNLL against K per policy, with each point's 95 % interval as a whisker (W >= 2).
// A policy whose largest upper bound exceeds 5x the median of the others' (with at least 3
// policies besides full) is off their scale: it is drawn in a second panel with its own axis,
// so that the rest can be told apart. Series keep their style index in both panels.
std::string eval_budget_svg(const std::vector<EvalSummary>& sum, const std::string& title) {
  std::vector<svg::Series> series;
  std::vector<double> top;  // per series: its largest upper bound (or value)
  for (const EvalSummary& s : sum) {
    auto it = std::find_if(series.begin(), series.end(), [&](const svg::Series& x) { return x.label == s.policy; });
    if (it == series.end()) {
      series.push_back(svg::Series{s.policy, "", {}});
      series.back().style = static_cast<int64_t>(series.size() - 1);
      top.push_back(-INFINITY);
      it = series.end() - 1;
    }
    it->points.emplace_back(static_cast<double>(s.budget), s.delta_nll);
    const bool interval = s.windows > 1 && s.policy != "full" && std::isfinite(s.delta_nll_high);  // full: exactly 0
    it->intervals.emplace_back(interval ? s.delta_nll_low : NAN, interval ? s.delta_nll_high : NAN);
    double& t = top[static_cast<size_t>(it - series.begin())];
    t = std::max(t, interval ? s.delta_nll_high : s.delta_nll);
  }
  std::vector<double> others;  // the tops of the policies other than full
  for (size_t k = 0; k < series.size(); ++k)
    if (series[k].label != "full" && std::isfinite(top[k])) others.push_back(top[k]);
  std::vector<double> sorted = others;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0.0 : quantile_linear(sorted, 0.5);
  std::vector<svg::Series> main, apart;
  for (size_t k = 0; k < series.size(); ++k)
    (others.size() >= 3 && median > 0 && series[k].label != "full" && top[k] > 5 * median ? apart : main)
        .push_back(series[k]);
  const std::string x_label = "cache budget K per layer (tokens)", y_label = "ΔNLL against the full cache (nats per token)";
  if (apart.empty()) return svg::line_chart(title, x_label, y_label, main);
  return svg::panel_chart(title, {svg::Panel{"the policies on a common scale", x_label, y_label, main},
                                  svg::Panel{"off that scale (more than 5x the median upper bound): own axis", x_label,
                                             y_label, apart}});
}

// layers.svg: one panel per budget, the mass recall of every policy per layer (mean over
// windows). Polyline ids are "label@K=k" (unique in the file).
std::string eval_layers_svg(const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets,
                            const std::string& title) {
  std::vector<svg::Panel> panels;
  for (int64_t K : budgets) {
    svg::Panel panel{"K = " + std::to_string(K), "layer",
                     "full attention mass the cache holds (mean over steps, heads and windows)", {}};
    for (const RunColumn& col : run_columns(windows, {K})) {
      svg::Series s{col.policy, "", {}};
      s.id = col.policy + "@K=" + std::to_string(K);
      const size_t layers = col.of_window.front()->layers.size();
      for (size_t l = 0; l < layers; ++l) {
        double recall = 0;
        for (const EvalRun* run : col.of_window) recall += run->layers[l].mean_mass_recall;
        s.points.emplace_back(static_cast<double>(col.of_window.front()->layers[l].layer),
                              recall / static_cast<double>(col.of_window.size()));
      }
      panel.series.push_back(std::move(s));
    }
    panels.push_back(std::move(panel));
  }
  return svg::panel_chart(title, panels);
}

// leaderboard.svg: per budget, the policies other than full in leaderboard.csv's order (mean
// ΔNLL ascending, ties by label), each a dot at its mean ΔNLL and its 95 % interval (W >= 2).
std::string eval_leaderboard_svg(const std::vector<EvalSummary>& sum, const std::vector<int64_t>& budgets,
                                 const std::string& title) {
  std::vector<std::string> order;  // the policies in options order: their colours
  for (const EvalSummary& s : sum)
    if (std::find(order.begin(), order.end(), s.policy) == order.end()) order.push_back(s.policy);
  std::vector<svg::IntervalPanel> panels;
  for (int64_t K : budgets) {
    std::vector<const EvalSummary*> rows;
    for (const EvalSummary& s : sum)
      if (s.budget == K && s.policy != "full") rows.push_back(&s);
    std::stable_sort(rows.begin(), rows.end(), [](const EvalSummary* a, const EvalSummary* b) {
      return a->delta_nll < b->delta_nll || (a->delta_nll == b->delta_nll && a->policy < b->policy);
    });
    svg::IntervalPanel panel{"K = " + std::to_string(K) + " (best first)", "ΔNLL against the full cache (nats per token)", {}};
    for (const EvalSummary* s : rows) {
      const size_t k = static_cast<size_t>(std::find(order.begin(), order.end(), s->policy) - order.begin());
      const bool interval = s->windows > 1;
      panel.rows.push_back(svg::IntervalRow{s->policy, s->delta_nll, interval ? s->delta_nll_low : NAN,
                                            interval ? s->delta_nll_high : NAN, svg::series_style(k).colour});
    }
    panels.push_back(std::move(panel));
  }
  return svg::interval_chart(title, panels);
}


static void summary_json(JsonWriter& j, const EvalSummary& s) {
  j.begin_object();
  j.key("policy").value(s.policy);
  j.key("budget").value(s.budget);
  j.key("mean_nll").value(s.mean_nll);
  j.key("windows").value(s.windows);
  j.key("delta_nll").value(s.delta_nll);
  const auto maybe = [&](const char* k, double v) {
    j.key(k);
    if (std::isnan(v)) j.null();
    else j.value(v);
  };
  maybe("delta_nll_se", s.delta_nll_se);
  maybe("delta_nll_ci_low", s.delta_nll_low);
  maybe("delta_nll_ci_high", s.delta_nll_high);
  j.key("ln_ppl_ratio").value(s.ln_ppl_ratio);
  j.key("ppl_ratio").value(s.ppl_ratio);
  j.key("mean_kl").value(s.mean_kl);
  j.key("kl_median").value(s.kl_median);
  j.key("kl_p99").value(s.kl_p99);
  j.key("kl_max").value(s.kl_max);
  j.key("top1_agreement").value(s.top1_agreement);
  maybe("top1_agreement_se", s.top1_agreement_se);
  j.key("top1_accuracy").value(s.top1_accuracy);
  if (s.passkey_accuracy >= 0) j.key("passkey_accuracy").value(s.passkey_accuracy);
  else j.key("passkey_accuracy").null();
  j.key("passkey_digits").value(s.passkey_digits);
  j.key("mean_cache_len").value(s.mean_cache_len);
  j.key("mean_mass_recall").value(s.mean_mass_recall);
  j.key("positions").value(s.positions);
  for (const PooledColumn& c : pooled_columns(s)) maybe(c.name, c.value);
  j.end_object();
}

namespace eval {

void write_run_keys(JsonWriter& j, const EvalRunInfo& info, const ModelConfig& cfg, const EvalOptions& opt,
                    const std::string& engine) {
  j.key("checkpoint").value(info.checkpoint);
  write_synthetic_weights(j, info.synthetic_weights);
  j.key("caveats").array(info.caveats);
  j.key("input").value(info.input);
  j.key("tokens").value(info.tokens);
  j.key("precision").value(precision_name(opt.precision));
  j.key("latent_norm_eps").value(opt.latent_norm_eps);
  j.key("latent_norm_eps_mode").value(info.latent_norm_eps_mode);
  j.key("engine").value(engine);
  j.key("threads").value(static_cast<int64_t>(info.threads));
  j.key("windows_at_once").value(info.windows_at_once);
  j.key("ranks").value(info.ranks);
  j.key("resumed_windows").value(info.resumed_windows);
  j.key("config");
  write_config(j, cfg.attention, std::nullopt);
  j.key("model").begin_object();
  j.key("first_k_dense_replace").value(cfg.first_k_dense_replace);
  j.key("n_routed_experts").value(cfg.n_routed_experts);
  j.key("num_experts_per_tok").value(cfg.num_experts_per_tok);
  j.key("n_group").value(cfg.n_group);
  j.key("topk_group").value(cfg.topk_group);
  j.key("n_shared_experts").value(cfg.n_shared_experts);
  j.key("routed_scaling_factor").value(cfg.routed_scaling_factor);
  j.key("byte_level_vocab").value(cfg.byte_level_vocab);
  j.key("parameters").value(model_parameter_count(cfg));
  j.end_object();
}

void write_tail_keys(JsonWriter& j, const EvalRunInfo& info, const std::vector<EvalWindow>& windows) {
  j.key("memory").begin_object();
  j.key("planned_peak_bytes").value(info.memory_planned_bytes);
  j.key("measured_peak_rss_bytes").value(info.memory_peak_rss_bytes);
  j.end_object();
  j.key("timing_s").begin_object();
  for (const auto& [name, s] : info.stages) j.key(name).value(s);
  std::map<std::string, double> eval_stages;  // summed over the windows
  for (const EvalWindow& w : windows)
    for (const auto& [name, s] : w.result.stage_seconds) eval_stages[name] += s;
  for (const auto& [name, s] : eval_stages) j.key("eval: " + name).value(s);
  j.end_object();
  j.key("profile_s").begin_object();  // inside the "eval: layer L" records above, summed over the windows
  StageSeconds profile;
  for (const EvalWindow& w : windows)
    for (const auto& [name, s] : w.result.profile) add_seconds(profile, name, s);
  for (const auto& [name, s] : profile) j.key(name).value(s);
  j.end_object();
  j.key("files").array(info.files);
}

}  // namespace eval

std::string eval_report_json(const EvalRunInfo& info, const ModelConfig& cfg, const EvalOptions& opt,
                             const std::vector<EvalWindow>& windows, const std::vector<EvalSummary>& summaries) {
  const EvalResult& result = windows.front().result;  // the first window: engine, passkey
  const int64_t P = opt.prompt_len, N = opt.steps;
  JsonWriter j;
  j.begin_object();
  j.key("format").value("mla-h2o eval report v1");
  j.key("command").value("eval");
  write_provenance(j, &info.model_files);
  eval::write_run_keys(j, info, cfg, opt, result.engine);
  j.key("windows").begin_array();
  for (const EvalWindow& w : windows) {
    j.begin_object().key("source").value(w.source).key("offset").value(w.offset).key("passkey");
    if (w.result.passkey.key.empty()) j.null();
    else j.value(w.result.passkey.key);
    j.end_object();
  }
  j.end_array();
  j.key("prompt_len").value(P);
  j.key("steps").value(N);
  j.key("compress").value(compression_name(opt.compress));
  j.key("budgets").array(opt.budgets);
  j.key("compression_ratios");
  if (info.compression_ratios.empty()) {
    j.null();
  } else {
    j.begin_array();
    for (size_t i = 0; i < info.compression_ratios.size(); ++i)
      j.begin_object().key("ratio").value(info.compression_ratios[i]).key("budget").value(opt.budgets[i]).end_object();
    j.end_array();
  }
  j.key("policies").begin_array();
  for (const PolicySettings& s : opt.policies) policy_settings_json(j, s, opt.budgets);
  j.end_array();
  j.key("passkey");
  if (result.passkey.key.empty()) {
    j.null();
  } else {
    j.begin_object().key("key").value(result.passkey.key).key("first_digit_position").value(result.passkey.digits.front()).end_object();
  }
  j.key("summary").begin_array();
  for (const EvalSummary& s : summaries) summary_json(j, s);
  j.end_array();
  eval::write_tail_keys(j, info, windows);
  j.end_object();
  return j.str() + "\n";
}

}  // namespace mla
