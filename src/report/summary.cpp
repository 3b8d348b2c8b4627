// src/report/summary.cpp — the numbers every report format shares: score statistics and
// the H2O decision summary of the published Kimi K2.6 layer-0 H2O demo (docs/outputs.md §5).
//
// Shape legend: S = tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mla/error.hpp"
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

namespace {

// "about 2.0e+308" for the number whose log10 is `e` (a value beyond the double range).
std::string about_power_of_ten(double e) {
  const double whole = std::floor(e);
  char buf[64];
  std::snprintf(buf, sizeof buf, "about %.1fe+%.0f", std::pow(10.0, e - whole), whole);
  return buf;
}

// Σ x_i / m, Neumaier-compensated, for m = the largest |x_i|: no partial sum exceeds the count,
// so it cannot overflow where the plain sum does (scores near 1e308).
double scaled_sum(std::span<const double> xs, double m) {
  double sum = 0, c = 0;
  for (double x : xs) {
    const double v = x / m, t = sum + v;
    c += std::fabs(sum) >= std::fabs(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  return sum + c;
}

// The mean of `xs` when their plain sum overflowed: m times the mean of x / m.
double scaled_mean(std::span<const double> xs) {
  double m = 0;
  for (double x : xs) m = std::max(m, std::fabs(x));
  return m > 0 && std::isfinite(m) ? m * (scaled_sum(xs, m) / static_cast<double>(xs.size())) : 0.0;
}

// score_stats' mean, std and sum from x / m (m = the largest |x|), when the plain sums overflowed;
// a sum that is itself beyond the double range is refused, naming it (issue 46).
void scaled_stats(std::span<const double> scores, ScoreStats& st) {
  const double m = std::max(std::fabs(st.min), std::fabs(st.max));
  if (!(m > 0) || !std::isfinite(m)) return;  // non-finite scores: the selector refuses them
  const double n = static_cast<double>(scores.size()), s = scaled_sum(scores, m), mean = s / n;
  double sq = 0.0;
  for (double x : scores) sq += (x / m - mean) * (x / m - mean);
  st.mean = m * mean;
  st.std = m * std::sqrt(sq / n);
  st.sum = m * s;
  if (!std::isfinite(st.sum))
    fail(ErrorKind::InvalidArgument, "score sum: the scores add up to " + about_power_of_ten(std::log10(m) + std::log10(s)) +
                                         ", beyond the largest double (1.8e+308), so no report can state it; scale the scores down");
}

}  // namespace

// mean = sum / S;  std = sqrt(sum((x - mean)^2) / S)  (population, numpy ddof=0).
// Two passes in double so the std does not suffer from cancellation. When a sum overflows (scores
// near 1e308), the figures are computed again from x / max|x| (scaled_stats).
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
  if (!std::isfinite(st.sum) || !std::isfinite(st.std)) scaled_stats(scores, st);
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
  if (!std::isfinite(heavy_sum) || !std::isfinite(evicted_sum) || !std::isfinite(kept_sum)) {
    std::vector<double> of_heavy, of_evicted, of_kept;  // a sum overflowed: each mean from x / max|x|
    for (size_t i = 0; i < d.category.size(); ++i) {
      if (d.category[i] == TokenCategory::Heavy) of_heavy.push_back(scores[i]);
      (d.category[i] == TokenCategory::Evicted ? of_evicted : of_kept).push_back(scores[i]);
    }
    if (d.n_heavy > 0) s.mean_heavy = scaled_mean(of_heavy);
    if (d.n_evicted > 0) s.mean_evicted = scaled_mean(of_evicted);
    if (d.kept() > 0) s.mean_kept = scaled_mean(of_kept);
  }
  if (d.n_heavy > 0 && d.n_evicted > 0 && s.mean_evicted > 0) {
    s.heavy_evicted_ratio = s.mean_heavy / s.mean_evicted;
    if (!std::isfinite(*s.heavy_evicted_ratio))
      fail(ErrorKind::InvalidArgument, "heavy / evicted score ratio: " + about_power_of_ten(std::log10(s.mean_heavy) - std::log10(s.mean_evicted)) +
                                           " (mean kept heavy score " + format_double(s.mean_heavy) + " over mean evicted score " +
                                           format_double(s.mean_evicted) + "), beyond the largest double (1.8e+308); "
                                           "scores spanning over 308 orders of magnitude cannot be summarised");
  }
  // top heavy: score descending, index ascending (the selector's own order)
  std::sort(heavy.begin(), heavy.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (heavy.size() > top_k) heavy.resize(top_k);
  s.top_heavy = std::move(heavy);
  return s;
}

}  // namespace mla
