// src/report/summary.cpp — the numbers every report format shares: score statistics and
// the H2O decision summary of the published Kimi K2.6 layer-0 H2O demo (docs/outputs.md §5).
//
// Shape legend: S = tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mla/report.hpp"

namespace mla {

std::string format_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// mean = sum / S;  std = sqrt(sum((x - mean)^2) / S)  (population, numpy ddof=0).
// Two passes in double so the std does not suffer from cancellation.
ScoreStats score_stats(std::span<const double> scores) {
  ScoreStats st;
  st.count = static_cast<int64_t>(scores.size());
  if (scores.empty()) return st;
  st.min = st.max = scores[0];
  for (size_t i = 0; i < scores.size(); ++i) {
    const double x = scores[i];
    st.sum += x;
    if (x < st.min) { st.min = x; st.argmin = static_cast<int64_t>(i); }
    if (x > st.max) { st.max = x; st.argmax = static_cast<int64_t>(i); }
  }
  st.mean = st.sum / static_cast<double>(scores.size());
  double sq = 0.0;
  for (double x : scores) sq += (x - st.mean) * (x - st.mean);
  st.std = std::sqrt(sq / static_cast<double>(scores.size()));
  return st;
}

DecisionSummary summarize_decision(std::span<const double> scores, const H2ODecision& d, size_t top_k) {
  DecisionSummary s;
  s.seq_len = static_cast<int64_t>(d.category.size());
  s.middle = d.n_heavy + d.n_evicted;
  double heavy_sum = 0, evicted_sum = 0, kept_sum = 0;
  std::vector<std::pair<int64_t, double>> heavy;  // [n_heavy] (index, score)
  for (size_t i = 0; i < d.category.size(); ++i) {
    const double x = scores[i];
    switch (d.category[i]) {
      case TokenCategory::Heavy: heavy_sum += x; kept_sum += x; heavy.emplace_back(static_cast<int64_t>(i), x); break;
      case TokenCategory::Evicted: evicted_sum += x; break;
      default: kept_sum += x; break;
    }
  }
  if (d.n_heavy > 0) s.mean_heavy = heavy_sum / static_cast<double>(d.n_heavy);
  if (d.n_evicted > 0) s.mean_evicted = evicted_sum / static_cast<double>(d.n_evicted);
  if (d.kept() > 0) s.mean_kept = kept_sum / static_cast<double>(d.kept());
  if (d.n_heavy > 0 && d.n_evicted > 0 && s.mean_evicted > 0) s.heavy_evicted_ratio = s.mean_heavy / s.mean_evicted;
  // top heavy: score descending, index ascending (the selector's own order)
  std::sort(heavy.begin(), heavy.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (heavy.size() > top_k) heavy.resize(top_k);
  s.top_heavy = std::move(heavy);
  return s;
}

}  // namespace mla
