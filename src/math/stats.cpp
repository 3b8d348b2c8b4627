// src/math/stats.cpp — mla/stats.hpp: Student-t intervals and quantiles (docs/eval.md §3.1), and a
// row's deviation from a reference row (docs/decode.md §4).
#include "mla/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mla/error.hpp"

namespace mla {

double student_t_two_sided_cdf(double t, int64_t df) {
  if (df < 1) fail(ErrorKind::InvalidArgument, "student_t_two_sided_cdf: df must be >= 1");
  if (!(t > 0)) return 0.0;
  const double theta = std::atan(t / std::sqrt(static_cast<double>(df)));
  const double s = std::sin(theta), c = std::cos(theta), c2 = c * c;
  if (df % 2 == 1) {
    // A = (2/pi) [theta + s c (1 + (2/3) c^2 + (2 4)/(3 5) c^4 + ... + (2 4 .. (df-3))/(3 5 .. (df-2)) c^(df-3))]
    double series = 0;
    if (df > 1) {
      double term = 1;
      series = 1;
      for (int64_t k = 2; k <= df - 3; k += 2) {
        term *= static_cast<double>(k) / static_cast<double>(k + 1) * c2;
        series += term;
      }
    }
    return (2.0 / M_PI) * (theta + s * c * series);
  }
  // A = s [1 + (1/2) c^2 + (1 3)/(2 4) c^4 + ... + (1 3 .. (df-3))/(2 4 .. (df-2)) c^(df-2)]
  double term = 1, series = 1;
  for (int64_t k = 1; k <= df - 3; k += 2) {
    term *= static_cast<double>(k) / static_cast<double>(k + 1) * c2;
    series += term;
  }
  return s * series;
}

double student_t_quantile(double coverage, int64_t df) {
  if (!(coverage > 0 && coverage < 1)) fail(ErrorKind::InvalidArgument, "student_t_quantile: coverage must lie in (0, 1)");
  double lo = 0, hi = 1;
  while (student_t_two_sided_cdf(hi, df) < coverage) hi *= 2;  // the CDF rises to 1: this ends
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_two_sided_cdf(mid, df) < coverage ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

MeanInterval mean_t_interval(const std::vector<double>& x, double coverage) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  MeanInterval m;
  m.n = static_cast<int64_t>(x.size());
  if (m.n == 0) {
    m.mean = m.se = m.low = m.high = nan;
    return m;
  }
  double sum = 0;
  for (double v : x) sum += v;
  m.mean = sum / static_cast<double>(m.n);
  if (m.n == 1) {
    m.se = m.low = m.high = nan;
    return m;
  }
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  m.se = std::sqrt(ss / static_cast<double>(m.n - 1)) / std::sqrt(static_cast<double>(m.n));
  const double t = student_t_quantile(coverage, m.n - 1);
  m.low = m.mean - t * m.se;
  m.high = m.mean + t * m.se;
  return m;
}

double quantile_sorted(const std::vector<double>& x, double q) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double h = static_cast<double>(x.size() - 1) * std::clamp(q, 0.0, 1.0);
  const size_t i = static_cast<size_t>(std::floor(h));
  if (i + 1 >= x.size()) return x.back();
  return x[i] + (h - static_cast<double>(i)) * (x[i + 1] - x[i]);
}

double quantile_linear(std::vector<double> x, double q) {
  std::sort(x.begin(), x.end());
  return quantile_sorted(x, q);
}

Quantiles quantiles(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const auto at = [&](double q) { return quantile_sorted(x, q); };
  // in Quantiles' order: max, p99.9, p99, p95, p90, p75, median, p25, p10, p5, p1, p0.1, min
  return {at(1.0), at(0.999), at(0.99), at(0.95), at(0.90), at(0.75), at(0.5), at(0.25), at(0.10), at(0.05), at(0.01),
          at(0.001), at(0.0)};
}

double variance_of_mean(const std::vector<double>& x, double mean) {
  const size_t n = x.size();
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return ss / (static_cast<double>(n) * static_cast<double>(n - 1));
}

namespace {
double mean_of(const std::vector<double>& x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}
}  // namespace

MeanSe mean_se(const std::vector<double>& x) {
  MeanSe m;
  m.n = static_cast<int64_t>(x.size());
  m.mean = mean_of(x);
  m.se = std::sqrt(variance_of_mean(x, m.mean));
  return m;
}

double covariance_of_means(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) fail(ErrorKind::InvalidArgument, "covariance_of_means: the samples differ in size");
  const size_t n = a.size();
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double ma = mean_of(a), mb = mean_of(b);
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (a[i] - ma) * (b[i] - mb);
  return s / (static_cast<double>(n) * static_cast<double>(n - 1));
}

MeanSe ln_ppl_ratio(const std::vector<double>& nll_a, const std::vector<double>& nll_b) {
  if (nll_a.size() != nll_b.size()) fail(ErrorKind::InvalidArgument, "ln_ppl_ratio: the runs differ in positions");
  MeanSe r;
  r.n = static_cast<int64_t>(nll_a.size());
  const double ma = mean_of(nll_a), mb = mean_of(nll_b);
  r.mean = ma - mb;
  const double v = variance_of_mean(nll_a, ma) + variance_of_mean(nll_b, mb) - 2 * covariance_of_means(nll_a, nll_b);
  r.se = std::isnan(v) ? v : std::sqrt(std::max(0.0, v));
  return r;
}

double prob_diff(double nll_a, double nll_b) { return std::exp(-nll_a) - std::exp(-nll_b); }

double root_mean_square(const std::vector<double>& x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s / static_cast<double>(x.size()));
}

MeanSe share_se(int64_t hits, int64_t n) {
  MeanSe r;
  r.n = n;
  r.mean = n > 0 ? static_cast<double>(hits) / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
  r.se = n > 1 ? std::sqrt(r.mean * (1 - r.mean) / static_cast<double>(n - 1)) : std::numeric_limits<double>::quiet_NaN();
  return r;
}

double cosine_from_sums(double dot, double aa, double bb, bool identical) {
  if (identical) return 1.0;
  if (!(aa > 0) || !(bb > 0)) return aa == 0 && bb == 0 ? 1.0 : 0.0;
  return std::clamp(dot / (std::sqrt(aa) * std::sqrt(bb)), -1.0, 1.0);
}

namespace {

template <class T>
RowDeviation deviation(const T* a, const T* b, int64_t n) {
  double diff = 0, dot = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    diff += (x - y) * (x - y);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const double nb = std::sqrt(bb);
  RowDeviation r;
  r.distance = std::sqrt(diff);
  r.rel_error = nb > 0 ? r.distance / nb : (diff == 0 ? 0.0 : std::numeric_limits<double>::infinity());
  r.cosine = cosine_from_sums(dot, aa, bb, diff == 0);
  return r;
}

}  // namespace

RowDeviation row_deviation(const double* a, const double* b, int64_t n) { return deviation(a, b, n); }
RowDeviation row_deviation(const float* a, const float* b, int64_t n) { return deviation(a, b, n); }

}  // namespace mla
